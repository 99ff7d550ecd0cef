"""What a sensitivity scan prunes, counted without a model: the targets per decoder layer for
each granularity and family, and how a scan's chunks divide them. The pruner (ptq/prune.py)
builds its targets from these names; the forecast counts the same passes from them."""

GRANULARITIES = ("layer", "layer-per-tensor", "submodule")
MLP, ATTENTION = ("gate_proj", "up_proj", "down_proj"), ("q_proj", "k_proj", "v_proj", "o_proj")
FAMILIES = {"mlp": MLP, "attn": ATTENTION, "all": ATTENTION + MLP}


def targets_per_layer(granularity: str, family: str) -> int:
    """A whole layer is one target; at `submodule` granularity each projection of the family."""
    return len(FAMILIES[family]) if granularity == "submodule" else 1


def chunk_sizes(targets: int, chunks: int) -> list[int]:
    """Near-equal consecutive slices, the longer ones first (torch.tensor_split's)."""
    return [targets // chunks + (i < targets % chunks) for i in range(chunks)]

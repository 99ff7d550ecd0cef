"""A fine-tuning point's per-card peak memory and its node's host RAM from the model's config
alone (meta device), so the paper's 8B-70B models plan offline from resources/models."""

import csv
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, cast

import psutil
import torch
from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

from accelstudy.errors import ConfigError
from accelstudy.forecast import DTYPE_BYTES
from accelstudy.kinds import KINDS
from accelstudy.layout import StudyLayout
from accelstudy.models import load_model_config
from accelstudy.paths import RESOURCES
from accelstudy.peak import peak, resolve_dtype
from accelstudy.points import FinetunePoint, finetune_cells, finetune_point
from accelstudy.snapshots import config_folder
from accelstudy.strategies import STRATEGIES, Loads
from accelstudy.systems import System


def _constants() -> dict[str, dict[str, float]]:
    """resources/planner_constants.csv, the one source of the planner's measured, stated and
    fitted figures (what each was fitted on and judged by is in the table): constant -> key ->
    value. framework_overhead: beyond the tensors counted here, per device kind; cpu_engine: an
    engine's own on the CPU; cpu_heap_kept: what glibc's heap keeps of what a CPU rank frees, as
    multiples (plan_card); host_process: a rank's process before any weights (plan_host);
    process_group: a rank's among several; eager_scores: eager attention's on the CPU."""
    table: dict[str, dict[str, float]] = {}
    with (RESOURCES / "planner_constants.csv").open(newline="") as rows:
        for row in csv.DictReader(rows):
            table.setdefault(row["constant"], {})[row["key"]] = float(row["value"])
    return table


CONSTANTS = _constants()
FRAMEWORK_OVERHEAD, CPU_ENGINE = CONSTANTS["framework_overhead"], CONSTANTS["cpu_engine"]
CPU_HEAP_KEPT, HOST_PROCESS = CONSTANTS["cpu_heap_kept"], CONSTANTS["host_process"]
PROCESS_GROUP, EAGER_SCORES = CONSTANTS["process_group"], CONSTANTS["eager_scores"]
# with skip_predicted_oom false a point runs past its host plan, warned; past this many times
# the node's RAM it is held out all the same: the kernel's OOM killer would stop it, and may
# take the node's other jobs with it (docs/parts.md, config/README.md)
HOST_REFUSED_PAST = 1.5
ZERO3_PERSISTENCE = 100_000  # DeepSpeed's default stage3_param_persistence_threshold
CHECKPOINT_SHARD = 5e9  # what a zero.Init rank reads at once: save_pretrained's default shard
TOKEN_COLUMNS = 3  # a training block: input_ids, labels, attention_mask (int64 each)
_META_MODELS: dict[str, PreTrainedModel] = {}  # meta_model's, by config


@dataclass(frozen=True)
class MemoryPlan:
    parameters: int
    gradients: int
    optimizer: int
    gathered: int  # FSDP / ZeRO-3: full weights all-gathered for the layers at work
    activations: int
    overhead: int
    load: int = 0  # the tensors while the weights are read and wrapped, before the first step

    @property
    def model_states(self) -> int:
        return self.parameters + self.gradients + self.optimizer

    @property
    def steps(self) -> int:
        return self.model_states + self.gathered + self.activations

    @property
    def total(self) -> int:
        return max(self.steps, self.load) + self.overhead

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "model_states": self.model_states, "total": self.total}

    def fits(self, memory_per_card_gb: float) -> bool:
        return self.total <= memory_per_card_gb * 1e9


@dataclass(frozen=True)
class HostPlan:
    per_rank: tuple[int, ...]

    @property
    def total(self) -> int:
        return sum(self.per_rank)

    def as_dict(self) -> dict[str, Any]:
        return {"per_rank": list(self.per_rank), "total": self.total}

    def fits(self, host_memory_gb: float) -> bool:
        return self.total <= host_memory_gb * 1e9


def meta_model(config: PretrainedConfig) -> PreTrainedModel:
    """Built once per config: a plan of the paper's sweep asks for each model hundreds of times."""
    key = config.to_json_string()
    if key not in _META_MODELS:
        with torch.device("meta"):
            _META_MODELS[key] = AutoModelForCausalLM.from_config(config)
    return _META_MODELS[key]


def model_state_bytes(model: torch.nn.Module, point: FinetunePoint) -> dict[str, int]:
    """What one rank holds, as strategies.held_bytes counts it, in the run's dtype (adapters cast
    to it, as the authors') but FSDP's trainable tensors (FP32). ZeRO-3 keeps tensors under its
    persistence threshold whole; its optimizer works on FP32 master partitions (4 + 8 bytes)."""
    tensors = [(p.numel(), point.method == "full") for p in model.parameters()]
    strategy = STRATEGIES[point.strategy]
    if strategy.ties_sharded_apart and getattr(model.config, "tie_word_embeddings", False):
        embedding = cast(torch.nn.Embedding, cast(PreTrainedModel, model).get_input_embeddings())
        tensors.append((embedding.weight.numel(), point.method == "full"))
    if point.method == "lora":
        rank, targets = point.lora.rank, point.lora.targets
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] in targets:
                # LoRA's A (rank x in) and B (out x rank)
                tensors += [(rank * module.in_features, True), (module.out_features * rank, True)]
    width, cards = DTYPE_BYTES[point.dtype], point.cards
    persistence = point.zero3_persistence_threshold
    persistence = ZERO3_PERSISTENCE if persistence is None else persistence
    trained = strategy.trainable_bytes or width
    totals = dict.fromkeys(("parameters", "gradients", "optimizer"), 0)

    def share(state: str, elements: int) -> int:  # this rank's part of a state's tensor
        return math.ceil(elements / cards) if state in strategy.shards else elements

    for elements, trainable in tensors:
        whole = strategy.whole_below_threshold and elements < persistence
        held = share("parameters", elements) + (elements if whole else 0)
        totals["parameters"] += held * (trained if trainable else width)
        if trainable:
            totals["gradients"] += share("gradients", elements) * (
                strategy.gradient_bytes or trained
            )
            optimizer = strategy.optimizer_bytes or 2 * trained
            totals["optimizer"] += share("optimizer", elements) * optimizer
    # AdamW's step: one per trainable tensor, or one flat group (DeepSpeed's)
    steps = 1 if strategy.flat_optimizer else sum(1 for _, trainable in tensors if trainable)
    totals["optimizer"] += 4 * steps
    return totals


def activation_bytes(config: PretrainedConfig, point: FinetunePoint) -> int:
    """What autograd keeps of one micro-batch, per card: its layers' and the logits'. Logits: the
    dtype, then FP32 thrice (transformers' loss upcasts them; log-softmax and its gradient)."""
    b, s, width = point.per_device_batch, point.max_seq_length, DTYPE_BYTES[point.dtype]
    layers = config.num_hidden_layers * layer_activation_bytes(config, point)
    return layers + b * s * config.vocab_size * (width + 3 * 4)


def eager_kept(width: int) -> int:
    """Bytes autograd keeps per attention score and layer in eager attention: below FP32 the
    scores, their FP32 softmax and its cast back (2 x width + 4); in FP32 the upcast and the cast
    are no copies and the softmax's output alone is kept (4: a float32 run, #46)."""
    return 4 if width == 4 else 2 * width + 4


def cpu_eager_bytes(config: PretrainedConfig, point: FinetunePoint) -> int:
    """Eager attention's scores on the CPU beyond their count (eager_kept per element and
    layer): what RSS holds there, measured (EAGER_SCORES) per layer and once (the layer at work)."""
    if point.attention != "eager":
        return 0
    b, s, width = point.per_device_batch, point.max_seq_length, DTYPE_BYTES[point.dtype]
    elements, layers = b * config.num_attention_heads * s * s, config.num_hidden_layers
    per_layer = EAGER_SCORES["cpu_per_layer"] - eager_kept(width)
    return int(elements * (layers * per_layer + EAGER_SCORES["cpu_once"]))


def layer_activation_bytes(config: PretrainedConfig, point: FinetunePoint) -> int:
    """One layer's, per token: both norms' inputs and outputs (4h), q, k, v (h + 2kv), q and k after
    RoPE (h + kv), k and v per query head (2h), attention output and o_proj's input (2h), LoRA's
    inputs (h per target), the MLP's 4i; eager attention adds its scores (eager_kept)."""
    b, s, width = point.per_device_batch, point.max_seq_length, DTYPE_BYTES[point.dtype]
    h, i, heads = config.hidden_size, config.intermediate_size, config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or h // heads
    q, kv = heads * head_dim, config.num_key_value_heads * head_dim
    lora = len(point.lora.targets) * h if point.method == "lora" else 0
    per_token = 4 * h + (q + 2 * kv) + (q + kv) + 2 * q + 2 * h + lora + 4 * i
    scores = b * heads * s * s * eager_kept(width) if point.attention == "eager" else 0
    return b * s * per_token * width + scores


def plan_tensors(config: PretrainedConfig, point: FinetunePoint, device: str) -> MemoryPlan:
    """A rank's tensors at its peak, what its allocator counts on any device (a card's
    max_memory_allocated): in the steps or, if higher, while the weights load (load_bytes). A
    sharded rank gathers the unwrapped rest and two layers (now and next), and ZeRO-3 keeps
    gathered what the step reuses within stage3_max_reuse_distance: at the turn from forward to
    backward the layers within half of it (each crossed twice), a small model whole; beside
    them, the flat buffer its all-gather fills (gather_bucket_elements)."""
    model, strategy = meta_model(config), STRATEGIES[point.strategy]
    states = model_state_bytes(model, point) | {"activations": activation_bytes(config, point)}
    layers = model.get_decoder().layers
    layer, total = sum(p.numel() for p in layers[0].parameters()), model.num_parameters()
    sharded = "parameters" in strategy.shards and point.cards > 1
    gathered = total - len(layers) * layer + 2 * layer
    gathered = max(gathered, min(total, strategy.engine.reuse_elements // 2))
    gathered += min(gathered, strategy.gather_bucket_elements)
    width, load = DTYPE_BYTES[point.dtype], load_bytes(model, point, states["parameters"], device)
    return MemoryPlan(**states, gathered=gathered * width if sharded else 0, overhead=0, load=load)


def load_bytes(model: PreTrainedModel, point: FinetunePoint, held: int, device: str) -> int:
    """A rank's tensors while its weights are read and wrapped (traced on the CPU, #46): the
    parameters it keeps (`held`) and what is in flight. Every rank: its buffers beside, and the
    wrap-up's broadcast bucket of both. Rank 0: its read whole beside the shards, one tensor
    scattered and its shard. Each its partition: a checkpoint shard read at once, one tensor
    gathered to load into. A read lands on the host, so it counts here only where the host is
    the device (the CPU)."""
    strategy, width, cards = STRATEGIES[point.strategy], DTYPE_BYTES[point.dtype], point.cards
    if strategy.loads is Loads.EVERY_RANK:
        states = held + sum(b.numel() * b.element_size() for b in model.buffers())
        return states + min(states, strategy.broadcast_bucket_bytes)
    whole = (
        model_state_bytes(model, point.replace(cards=1))["parameters"] if KINDS[device].host else 0
    )
    largest = max(p.numel() for p in model.parameters()) * width
    if strategy.loads is Loads.RANK_ZERO:
        return whole + held + largest + (math.ceil(largest / cards) if cards > 1 else 0)
    return held + min(whole, int(CHECKPOINT_SHARD)) + largest


def plan_card(config: PretrainedConfig, point: FinetunePoint, device: str) -> MemoryPlan:
    """Per-card bytes: the tensors (plan_tensors) and what the device holds beyond its
    allocator's count, its framework's; on the CPU, whose "card" is the process's RSS, also what
    glibc's heap keeps of freed tensors (CPU_HEAP_KEPT), less what the load's peak above the
    steps' already holds of it, and eager attention's scores."""
    tensors, model = plan_tensors(config, point, device), meta_model(config)
    layers = model.get_decoder().layers
    layer, total = sum(p.numel() for p in layers[0].parameters()), model.num_parameters()
    engine, width = STRATEGIES[point.strategy].engine, DTYPE_BYTES[point.dtype]
    overhead = FRAMEWORK_OVERHEAD[device] + (
        CPU_ENGINE.get(engine.name, 0) if KINDS[device].host else 0
    )
    overhead += PROCESS_GROUP.get(device, 0) if point.cards > 1 else 0
    if not KINDS[device].host:
        return replace(tensors, overhead=int(overhead))
    if engine.name not in CPU_HEAP_KEPT:  # an engine registered without its measured row
        row = f"engine '{engine.name}' has no cpu_heap_kept row in resources/planner_constants.csv"
        raise ConfigError(f"{row}: measure one (bench/planner.py) and add it")
    shape = total * width, len(layers), layer * width, layer_activation_bytes(config, point)
    heap = engine.cpu_heap(CPU_HEAP_KEPT[engine.name], *shape, point.cards)
    activations = tensors.activations + cpu_eager_bytes(config, point)
    steps = replace(tensors, activations=activations).steps
    overhead += max(0, heap - max(0, tensors.load - steps))  # the heap's high water: either peak
    return replace(tensors, activations=activations, overhead=int(overhead))


def plan_host(
    config: PretrainedConfig,
    point: FinetunePoint,
    device: str,
    ranks_per_node: int,
    random_weights: bool = False,
) -> HostPlan:
    """Rank 0's node (the busiest), per rank: its process, the larger of the weights it loads
    (its partition and a file read; rank 0 alone, but all on Gaudi) and a cpu plan, its data.
    Random weights (`source: random`) read no file, and a rank that holds them whole on a CUDA
    card builds them there (train.rank_device): its host holds none of them."""
    weights = meta_model(config).num_parameters() * DTYPE_BYTES[point.dtype]
    blocks = point.max_steps * point.samples_per_step * point.cards
    data = blocks * point.max_seq_length * TOKEN_COLUMNS * 8
    resident = plan_card(config, point, device).total if KINDS[device].host else 0
    loads_by = STRATEGIES[point.strategy].loads
    read = 0 if random_weights else min(weights, int(CHECKPOINT_SHARD))
    partition = math.ceil(weights / point.cards) + read
    loads = [partition if loads_by is Loads.ITS_PARTITION else weights] * ranks_per_node
    if loads_by is Loads.RANK_ZERO and not KINDS[device].habana:
        loads[1:] = [0] * (ranks_per_node - 1)
    if random_weights and loads_by is Loads.EVERY_RANK and KINDS[device].random_on_card:
        loads = [0] * ranks_per_node
    return HostPlan(tuple(int(HOST_PROCESS[device]) + max(w, resident) + data for w in loads))


def memory_per_card(system: System, cards: int) -> float | None:
    """GB a card offers: the system file's; on the cpu system the ranks of a node share its RAM;
    else unknown (None), never host RAM: a job reads its card (systems.card_memory)."""
    if system.memory_per_card_gb is not None:
        return float(system.memory_per_card_gb)
    if not KINDS[system.device].host:
        return None
    return psutil.virtual_memory().total / 1e9 / system.layout(cards)[1]


def host_memory(system: System) -> float | None:
    """GB of a node's RAM: the system file's, else this machine's on a cpu system, else unknown."""
    if system.host_memory_gb is not None:
        return float(system.host_memory_gb)
    return psutil.virtual_memory().total / 1e9 if KINDS[system.device].host else None


def fit_check(
    config: PretrainedConfig,
    point: FinetunePoint,
    system: System,
    device: str,
    random_weights: bool = False,
) -> tuple[dict[str, Any], str]:
    """The point's plans against the system's memory, and what it would overflow ("" if none;
    a budget unknown is not checked)."""
    card = plan_card(config, point, device)
    host = plan_host(config, point, device, system.layout(point.cards)[1], random_weights)
    budget, host_budget = memory_per_card(system, point.cards), host_memory(system)
    over = [] if budget is None or card.fits(budget) else ["card"]
    over += [] if host_budget is None or host.fits(host_budget) else ["host"]
    metrics = {"predicted": card.as_dict(), "memory_per_card_gb": budget}
    metrics |= {"predicted_host": host.as_dict(), "host_memory_gb": host_budget}
    return metrics, " and ".join(over)


def plan_point(
    model: str | Path, device: str, batch: int = 2, seq_len: int = 512, **point: Any
) -> MemoryPlan:
    """`accelstudy plan-memory`: `point` holds FinetunePoint's other fields."""
    workload = FinetunePoint(per_device_batch=batch, max_seq_length=seq_len, **point)
    return plan_card(load_model_config(model), workload, device)


def model_source(config: Mapping[str, Any], model: str) -> Path:
    """Where a study's model's config.json is (snapshots.config_folder), or one line saying how
    to make it."""
    if (folder := config_folder(config, model)) is not None:
        return folder
    prepared = StudyLayout(config, config["system"]).path("prepare_model", model=model)
    raise ConfigError(
        f"model '{model}': no config.json in resources/models/{model} or {prepared}; "
        f"prepare the model first (snakemake --configfile <study> {prepared})"
    )


def host_overflow(metrics: Mapping[str, Any]) -> tuple[float, float] | None:
    """(planned, offered) GB of host RAM where fit_check's plan exceeds the node's, else None."""
    planned, offered = metrics["predicted_host"]["total"] / 1e9, metrics["host_memory_gb"]
    return (planned, offered) if offered is not None and planned > offered else None


def plan_sweep(config: Mapping[str, Any], system: System) -> list[dict[str, Any]]:
    """Every fine-tuning point of a study (repeats once) on `system`, with its plans' verdict."""
    rows, offered = [], system.per_node * system.nodes
    for cell in dict.fromkeys(c._replace(repeat=0) for c in finetune_cells(config)):
        row = {k: v for k, v in cell._asdict().items() if k != "repeat"} | {"system": system.name}
        if cell.cards > offered:
            rows.append(row | {"held_out_for": f"beyond the system's {offered} cards"})
            continue
        point = finetune_point(config, cell, data_file="")
        dtype = resolve_dtype(point.dtype, system, system.device, 1)[0]  # auto: as a job would
        point, limit = point.replace(dtype=dtype), peak(system, system.device, dtype, cell.cards, 1)
        row |= {"dtype": dtype, "peak_tflops": limit.get("flops_per_s", math.nan) / 1e12}
        row["peak_source"] = limit["source"].split(":")[0]  # the full sources: under the table
        model_config = load_model_config(model_source(config, cell.model))
        random = config["models"][cell.model]["source"] == "random"
        metrics, over = fit_check(model_config, point, system, system.device, random)
        card, host = metrics["predicted"]["total"], metrics["predicted_host"]["total"]
        row |= {"card_gb": card / 1e9, "card_offer_gb": metrics["memory_per_card_gb"]}
        row |= {"host_gb": host / 1e9, "host_offer_gb": metrics["host_memory_gb"]}
        rows.append(row | {"held_out_for": over})
    return rows

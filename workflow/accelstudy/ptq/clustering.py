"""Sensitivity scores to precisions (percentile groups, k-means, a median split): `cluster`."""

import json
from pathlib import Path

import numpy as np
import pandas as pd

from accelstudy.files import atomic_open, write_json
from accelstudy.ptq import SCAN_KEYS, SensitivityTableError
from accelstudy.snapshots import weights_dir

METHODS = ("percentile", "kmeans", "median")


def percentile_groups(n: int, k: int, remainder: str = "last") -> list[int]:
    """k group sizes; the leftover goes last (7/7/8 for 22 layers: paper's WikiText) or first."""
    if k > n:
        raise ValueError(f"more clusters ({k}) than layers ({n})")
    sizes = [len(group) for group in np.array_split(range(n), k)]  # the bigger ones first
    return sizes[::-1] if remainder == "last" else sizes


def cluster_ranks(
    scores: list[float], k: int, method: str, remainder: str = "last", seed: int = 0
) -> list[int]:
    """Rank of each score's cluster: 0 = most sensitive (gets bits[0])."""
    values = np.asarray(scores, dtype=float)
    n = len(values)
    if k > n:
        raise ValueError(f"more clusters ({k}) than layers/modules ({n})")
    if method == "percentile":
        order = np.argsort(-values, kind="stable")  # descending sensitivity
        ranks = np.empty(n, dtype=int)
        ranks[order] = np.repeat(np.arange(k), percentile_groups(n, k, remainder))
        return ranks.tolist()
    if method == "kmeans":
        from sklearn.cluster import KMeans

        labels = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(values[:, None])
        by_sensitivity = sorted(set(labels.tolist()), key=lambda c: -values[labels == c].mean())
        return [by_sensitivity.index(label) for label in labels.tolist()]
    if method == "median":
        # the real Gaudi path: score >= median -> high precision (rank 0), else rank 1
        return [0 if v >= np.median(values) else 1 for v in values]
    raise ValueError(f"unknown clustering method '{method}'; expected one of {METHODS}")


def assign_bits(
    scores: dict[str, float], bits: list[int], method: str, remainder: str = "last", seed: int = 0
) -> dict[str, int]:
    """name -> bits, the i-th most sensitive cluster getting bits[i]."""
    if method == "median" and len(bits) != 2:
        raise ValueError(f"the median split needs exactly 2 precisions, got {bits}")
    ranks = cluster_ranks(list(scores.values()), len(bits), method, remainder, seed)
    return {name: bits[rank] for name, rank in zip(scores, ranks, strict=True)}


def cluster(
    *, table: Path, bits: list[int], method: str, remainder: str, model_dir: Path, out: Path
) -> dict[str, int]:
    """The `cluster` stage: layer -> bits (or module -> bits) from the sensitivity table."""
    frame = pd.read_csv(table)
    n_layers = json.loads((weights_dir(model_dir) / "config.json").read_text())["num_hidden_layers"]
    layers = sorted(frame["layer"].unique())
    if layers != list(range(n_layers)):
        raise SensitivityTableError(
            f"sensitivity table '{table}' covers layers {layers[:3]}..., but the model has "
            f"{n_layers} decoder layers; re-run the sensitivity stage for this model"
        )
    if not np.isfinite(frame["score"]).all():  # NaN would rank as least sensitive (or as most)
        unscored = frame.loc[~np.isfinite(frame["score"]), "name"].tolist()
        raise SensitivityTableError(
            f"sensitivity table '{table}' has no finite score for {unscored[:3]} "
            f"({len(unscored)} of {len(frame)}): the pruned model's metric overflowed; "
            "re-run the sensitivity stage (fewer calibration rows or float32)"
        )
    scores = dict(zip(frame["name"], frame["score"], strict=True))
    assignment = assign_bits(scores, bits, method, remainder)
    # what the scores were measured with, so a quantized record says what its bits depend on
    scanned = json.loads(frame[[k for k in SCAN_KEYS if k in frame]].iloc[0].to_json())
    payload = {"bits": bits, "method": method, "remainder": remainder, "sensitivity": scanned}
    if "." in str(frame["name"].iloc[0]):  # submodule scores: a module-to-bits map
        payload["module_bits"] = dict(sorted(assignment.items()))
    else:
        layer_bits = {int(name.split("-")[1]): b for name, b in assignment.items()}
        payload["layer_bits"] = {str(k): v for k, v in sorted(layer_bits.items())}
    write_json(out, payload)
    return assignment


def gather_sensitivity(chunks: list[Path], out: Path) -> pd.DataFrame:
    """The `gather-sensitivity` stage: chunks -> one table with SCAN_KEYS, checked complete."""
    parts = [json.loads(Path(p).read_text()) for p in chunks]
    first, frame = parts[0], pd.DataFrame([s for part in parts for s in part["scores"]])
    scanned = {key: first.get(key) for key in SCAN_KEYS}
    frame = frame.assign(base=first["base"], metric_kind=first["metric"], **scanned)
    frame.insert(0, "task", first["task"])
    if len(frame) != first["n_targets"] or frame["name"].duplicated().any():
        raise SensitivityTableError(
            f"sensitivity chunks hold {len(frame)} targets, expected {first['n_targets']}"
        )
    with atomic_open(out) as handle:
        frame.sort_values("name").to_csv(handle, index=False)
    return frame

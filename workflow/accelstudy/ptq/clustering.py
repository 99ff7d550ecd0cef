"""From sensitivity scores to precisions: percentile groups, k-means, or a median split."""

from __future__ import annotations

import numpy as np

METHODS = ("percentile", "kmeans", "median")


def percentile_groups(n: int, k: int, remainder: str = "last") -> list[int]:
    """Sizes of k consecutive groups of n // k; the leftover goes to the last groups
    (7/7/8 for 22 layers, the paper's WikiText runs) or to the first (8/7/7)."""
    if k > n:
        raise ValueError(f"more clusters ({k}) than layers ({n})")
    base, extra = divmod(n, k)
    sizes = [base] * k
    order = range(k - 1, k - 1 - extra, -1) if remainder == "last" else range(extra)
    for index in order:
        sizes[index] += 1
    return sizes


def cluster_ranks(scores: list[float], k: int, method: str, remainder: str = "last",
                  seed: int = 0) -> list[int]:  # fmt: skip
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
        means = {label: values[labels == label].mean() for label in set(labels)}
        by_mean = sorted(means, key=lambda label: -means[label])
        rank_of = {label: rank for rank, label in enumerate(by_mean)}
        return [rank_of[label] for label in labels]
    if method == "median":
        # the real Gaudi path: score >= median -> high precision (rank 0), else rank 1
        return [0 if v >= np.median(values) else 1 for v in values]
    raise ValueError(f"unknown clustering method '{method}'; expected one of {METHODS}")


def assign_bits(names: list[str], scores: list[float], bits: list[int], method: str,
                remainder: str = "last", seed: int = 0) -> dict[str, int]:  # fmt: skip
    """name -> bits, the i-th most sensitive cluster getting bits[i]."""
    k = 2 if method == "median" else len(bits)
    if method == "median" and len(bits) != 2:
        raise ValueError(f"the median split needs exactly 2 precisions, got {bits}")
    ranks = cluster_ranks(scores, k, method, remainder, seed)
    return {name: bits[rank] for name, rank in zip(names, ranks, strict=True)}

"""How sure a number is: standard errors of evaluation metrics from their items, and paired
differences of two evaluations of the same items by exact tests (McNemar's for accuracy, a
sign-flip test over blocks or documents for perplexity), Holm-corrected across a report's tests."""

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

RESAMPLES = 1000  # bootstrap draws (seed 0): a perplexity's standard error
ALPHA = 0.05
EXACT = 1_000_000  # the sign-flip test enumerates every arrangement while 2^n is at most this
FLIPS = 10_000  # else this many random ones (seed 0)
TIES = 1e-12  # sums this close (relative to the items' total) to the observed one tie with it
# a ratio metric from its items' columns: (numerator, denominator, value of the ratio)
RATIO_METRICS: dict[str, tuple[str, str, Callable[[np.ndarray], np.ndarray]]] = {
    "perplexity": ("nll", "tokens", np.exp),  # the paper's blocks
    "word_perplexity": ("neg_loglikelihood", "words", np.exp),  # lm-eval's documents
    "byte_perplexity": ("neg_loglikelihood", "bytes", np.exp),
    "bits_per_byte": ("neg_loglikelihood", "bytes", lambda x: x / np.log(2)),
}


def mean_stderr(values: Sequence[float] | np.ndarray | pd.Series) -> float:
    """lm-evaluation-harness's standard error of a mean (its `mean_stderr`): sample standard
    deviation (n - 1) over sqrt(n); NaN below two items."""
    values = np.asarray(values, dtype=float)
    return float(np.std(values, ddof=1) / np.sqrt(len(values))) if len(values) > 1 else np.nan


def _named(items: pd.DataFrame, metric: str) -> str:
    """lm-eval's `perplexity` is its word perplexity (documents have no `nll`)."""
    return "word_perplexity" if metric == "perplexity" and "nll" not in items else metric


def ratio_metric(items: pd.DataFrame, metric: str, rows: np.ndarray | None = None) -> np.ndarray:
    """A ratio metric of the items (or of each row of indices in `rows`, one resample each)."""
    numerator, denominator, value = RATIO_METRICS[_named(items, metric)]
    top, bottom = items[numerator].to_numpy(float), items[denominator].to_numpy(float)
    if rows is None:
        return value(top.sum() / bottom.sum())
    return value(top[rows].sum(axis=1) / bottom[rows].sum(axis=1))


def _resamples(count: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, count, (RESAMPLES, count))


def stderrs(items: pd.DataFrame, metrics: dict[str, float]) -> dict[str, float]:
    """`<metric>_stderr` for every metric the items hold: accuracies by lm-eval's formula over
    their `correct_<metric>` columns, ratio metrics by the bootstrap (lm-eval gives them none)."""
    found = {m: mean_stderr(items[f"correct_{m}"]) for m in metrics if f"correct_{m}" in items}
    for m in metrics:  # a ratio metric's: its spread over resamples of the blocks or documents
        if m in RATIO_METRICS and RATIO_METRICS[_named(items, m)][0] in items:
            found[m] = float(np.std(ratio_metric(items, m, _resamples(len(items))), ddof=1))
    return {f"{m}_stderr": round(v, 10) for m, v in found.items()}


def mcnemar(ours: np.ndarray, theirs: np.ndarray) -> tuple[int, int, float]:
    """McNemar's exact test on paired correctness: (only ours right, only theirs right, p)."""
    from scipy.stats import binomtest  # the report's, not an evaluation job's import (0.3 s)

    b, c = int(np.sum(ours & ~theirs)), int(np.sum(~ours & theirs))
    return b, c, 1.0 if b + c == 0 else float(binomtest(b, b + c, 0.5).pvalue)


def mcnemar_interval(b: int, c: int, n: int) -> tuple[float, float]:
    """95% interval of the paired difference (b - c) / n, exact given the b + c discordant items
    (as McNemar's exact test is): Clopper & Pearson's (Biometrika, 1934) interval for the share
    t of them ours got right, as (b + c) / n * (2t - 1). It holds at any count, and excludes
    zero exactly when McNemar's exact p is at most 0.05 (the binomial at 1/2 is symmetric)."""
    from scipy.stats import binomtest

    if b + c == 0:  # no item tells the two apart: the difference on these items is 0
        return 0.0, 0.0
    share = binomtest(b, b + c).proportion_ci(1 - ALPHA, method="exact")
    return (2 * share.low - 1) * (b + c) / n, (2 * share.high - 1) * (b + c) / n


def _arrangements(count: int) -> np.ndarray | None:
    """Random sign arrangements, the observed (all +1) first, where 2^count exceeds EXACT; None:
    every arrangement is enumerated."""
    if 2**count <= EXACT:
        return None
    signs = np.random.default_rng(0).choice(np.array([-1, 1], np.int8), (FLIPS, count))
    return np.vstack([np.ones((1, count), np.int8), signs])


def _flipped(x: np.ndarray, signs: np.ndarray | None) -> np.ndarray:
    """sum(s_i x_i) under each arrangement of signs, the observed (all +) first: all 2^n (each
    item doubles the sums) or the given ones, in chunks of float rows (BLAS multiplies floats)."""
    if signs is None:
        sums = np.zeros(1)
        for value in x:
            sums = np.concatenate([sums + value, sums - value])
        return sums
    chunks = range(0, len(signs), 1000)
    return np.concatenate([signs[i : i + 1000].astype(float) @ x for i in chunks])


def _share(sums: np.ndarray, x: np.ndarray) -> float:
    """The share of arrangements whose |sum| reaches the observed one's (sums[0]), ties in."""
    return float(np.mean(np.abs(sums) >= abs(sums[0]) - TIES * np.abs(x).sum()))


def sign_flip_p(x: np.ndarray, signs: np.ndarray | None = None) -> float:
    """Two-sided p of the sign-flip test of sum(x) (null: each x_i symmetric about zero): the
    share of arrangements of signs, the observed one included, whose |sum| reaches the
    observed: all 2^n, or the given random ones, whose observed first row makes p
    (k + 1) / (B + 1), never 0."""
    return _share(_flipped(x, signs), x)


def shift_interval(
    d: np.ndarray, units: np.ndarray, signs: np.ndarray | None = None
) -> tuple[float, float]:
    """95% interval of the shift per unit (token, word or byte) by inverting the sign-flip test:
    the shifts delta for which d - delta * units is not rejected at ALPHA, each end by
    bisection between the observed shift and the items' extreme d / units (beyond it every sign
    agrees and p is its least). NaN below 6 items enumerated: no arrangement reaches 0.05."""
    if signs is None and 2 / 2 ** len(d) > ALPHA:
        return np.nan, np.nan
    flipped_d, flipped_units = _flipped(d, signs), _flipped(units, signs)  # the sums are linear
    observed, ends = d.sum() / units.sum(), []
    for far in ((d / units).min(), (d / units).max()):
        inside, outside = observed, far
        for _ in range(50):
            middle = (inside + outside) / 2
            if _share(flipped_d - middle * flipped_units, d - middle * units) > ALPHA:
                inside = middle
            else:
                outside = middle
        ends.append((inside + outside) / 2)
    return ends[0], ends[1]


def paired_difference(metric: str, ours: pd.DataFrame, theirs: pd.DataFrame) -> dict:
    """Ours minus theirs on the same items (aligned on `item`): the difference, its 95%
    interval and p-value by exact tests. Accuracy: McNemar's (interval: `mcnemar_interval`).
    A ratio metric: the sign-flip test of each item's difference in summed loss d_i, with
    statistic T = sum(d_i) / sum(units), the log of ours over theirs perplexity (`ratio`);
    the difference and its interval are value(r + T) - value(r) at theirs rate r (perplexity:
    theirs times (ratio - 1); bits per byte: T / ln 2), NaN ends under 6 items."""
    both = ours.merge(theirs, on="item", suffixes=("", "_theirs"))
    n = len(both)
    if f"correct_{metric}" in both:
        a, b = (both[f"correct_{metric}{s}"].to_numpy(bool) for s in ("", "_theirs"))
        only_ours, only_theirs, p = mcnemar(a, b)
        low, high = mcnemar_interval(only_ours, only_theirs, n)
        found = {"difference": (only_ours - only_theirs) / n, "ratio": np.nan}
        test = f"McNemar exact ({only_ours} vs {only_theirs} discordant)"
    else:  # the items' units (tokens, words, bytes) are ours: the same items on both sides
        numerator, denominator, value = RATIO_METRICS[_named(both, metric)]
        loss, units = both[numerator].to_numpy(float), both[denominator].to_numpy(float)
        d, signs = loss - both[f"{numerator}_theirs"].to_numpy(float), _arrangements(n)
        rate, statistic = (loss.sum() - d.sum()) / units.sum(), d.sum() / units.sum()
        p, shifts = sign_flip_p(d, signs), np.array(shift_interval(d, units, signs))
        low, high = value(rate + shifts) - value(rate)
        found = {"difference": float(value(rate + statistic) - value(rate))}
        found["ratio"] = float(value(rate + statistic) / value(rate))
        arranged = f"all {2**n:,}" if signs is None else f"{FLIPS:,} random (seed 0)"
        test = f"sign-flip ({arranged} arrangements of {n} items)"
        test += "; too few items for a 95% interval" if np.isnan(low) else ""
    return {"items": n, **found, "ci95_low": float(low), "ci95_high": float(high), "p": p,
            "test": test}  # fmt: skip


def holm(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment (controls the family-wise error across a report's tests)."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p)
    adjusted = np.maximum.accumulate((len(p) - np.arange(len(p))) * p[order])
    return np.minimum(adjusted, 1.0)[np.argsort(order)]  # back in the order given


def detectable(stderr: float) -> float:
    """The smallest difference a two-sided test at ALPHA finds with 80% power, for two
    independent evaluations with this standard error each (pairing detects smaller ones); a
    normal approximation: under `fewest` items the exact tests here detect none at all."""
    return (1.96 + 0.8416) * np.sqrt(2) * stderr


def fewest(tests: int = 1) -> int:
    """The fewest items (sign-flip test) or discordant items (McNemar's) at which 'differs' can
    be reached after Holm over `tests` tests: their least p, 2 / 2^n (every sign alike), must
    reach ALPHA / tests, so n >= log2(2 * tests / ALPHA); 6 for one test, 9 for twelve."""
    return math.ceil(math.log2(2 * max(tests, 1) / ALPHA))


# Repeats: one rule for every speed, energy and charge over a point's repeats (no repeat is
# dropped). The min-max of n repeats holds the true median with probability 1 - 2^(1 - n)
# (each repeat falls either side of it at even odds): 75% at 3 repeats, 94% at 5.
REPEATS_RULE = (
    "median of the repeats; interval: their min-max, which holds the true median with "
    "probability 1 - 2^(1-n) for n repeats (75% at 3); no repeat dropped"
)
SPREAD = {"estimator": "median", "errorbar": ("pi", 100)}  # seaborn: that median, bars min-max
ONE_REPEAT = "one repeat: spread unknown"


def repeats_interval(values: pd.Series) -> str:
    """A point's repeats as the rule shows them: 'low-high (n, coverage)' or ONE_REPEAT."""
    values = values.dropna()
    if len(values) < 2:
        return ONE_REPEAT if len(values) else "-"
    coverage = 1 - 2.0 ** (1 - len(values))
    return f"{values.min():.4g}-{values.max():.4g} ({len(values)} repeats, {coverage:.0%})"


def within_each_other(one: tuple[float, float, float], other: tuple[float, float, float]) -> bool:
    """Two (median, low, high) of repeats, each median inside the other's interval: the repeats
    cannot tell the two choices apart (one repeat's interval is its value alone)."""
    return bool(other[1] <= one[0] <= other[2] and one[1] <= other[0] <= one[2])

"""How sure a number is: standard errors of evaluation metrics from their items, and paired
differences of two evaluations of the same items (McNemar's exact test for accuracy, a paired
bootstrap over blocks or documents for perplexity), Holm-corrected across a report's tests."""

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from scipy.stats import binomtest

RESAMPLES = 1000  # bootstrap draws (seed 0): a perplexity's standard error and paired interval
ALPHA = 0.05
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
    b, c = int(np.sum(ours & ~theirs)), int(np.sum(~ours & theirs))
    return b, c, 1.0 if b + c == 0 else float(binomtest(b, b + c, 0.5).pvalue)


def paired_difference(metric: str, ours: pd.DataFrame, theirs: pd.DataFrame) -> dict:
    """Ours minus theirs on the same items (aligned on `item`): the difference, its 95%
    interval and p-value; accuracy by McNemar (interval: the normal one of paired proportions),
    a ratio metric by a paired bootstrap (the same resampled items on both sides)."""
    both = ours.merge(theirs, on="item", suffixes=("", "_theirs"))
    n = len(both)
    if f"correct_{metric}" in both:
        a, b = (both[f"correct_{metric}{s}"].to_numpy(bool) for s in ("", "_theirs"))
        only_ours, only_theirs, p = mcnemar(a, b)
        difference = (only_ours - only_theirs) / n
        spread = np.sqrt(max(only_ours + only_theirs - n * difference**2, 0.0)) / n
        low, high = difference - 1.96 * spread, difference + 1.96 * spread
        test = f"McNemar exact ({only_ours} vs {only_theirs} discordant)"
    else:
        theirs_items = both.filter(like="_theirs").rename(columns=lambda c: c[: -len("_theirs")])
        rows = _resamples(n)
        drawn = ratio_metric(both, metric, rows) - ratio_metric(theirs_items, metric, rows)
        difference = float(ratio_metric(both, metric) - ratio_metric(theirs_items, metric))
        low, high = np.percentile(drawn, [2.5, 97.5])
        tail = min(np.sum(drawn <= 0), np.sum(drawn >= 0))  # (k + 1) / (B + 1): never 0
        p = min(1.0, 2 * (tail + 1) / (RESAMPLES + 1))
        test = f"paired bootstrap ({RESAMPLES} resamples)"
    return {"items": n, "difference": difference, "ci95_low": low, "ci95_high": high, "p": p,
            "test": test}  # fmt: skip


def holm(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment (controls the family-wise error across a report's tests)."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p)
    adjusted = np.maximum.accumulate((len(p) - np.arange(len(p))) * p[order])
    return np.minimum(adjusted, 1.0)[np.argsort(order)]  # back in the order given


def detectable(stderr: float) -> float:
    """The smallest difference a two-sided test at ALPHA finds with 80% power, for two
    independent evaluations with this standard error each (pairing detects smaller ones)."""
    return (1.96 + 0.8416) * np.sqrt(2) * stderr


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

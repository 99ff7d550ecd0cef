"""How sure a number is: standard errors of evaluation metrics from their items, and paired
differences of two evaluations of the same items by exact tests (McNemar's for accuracy, a
sign-flip test over blocks or documents for perplexity), Holm-corrected across a report's tests."""

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

RESAMPLES = 1000  # bootstrap draws (seed 0): a perplexity's standard error
ALPHA = 0.05
Z95 = 1.959963984540054  # the normal's 0.975 quantile
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


def stderrs(items: pd.DataFrame, metrics: dict[str, float]) -> dict[str, float]:
    """`<metric>_stderr` for every metric the items hold: accuracies by lm-eval's formula over
    their `correct_<metric>` columns, ratio metrics by the bootstrap (lm-eval gives them none)."""
    found = {m: mean_stderr(items[f"correct_{m}"]) for m in metrics if f"correct_{m}" in items}
    for m in metrics:  # a ratio metric's: its spread over resamples of the blocks or documents
        if m in RATIO_METRICS and RATIO_METRICS[_named(items, m)][0] in items:
            rows = np.random.default_rng(0).integers(0, len(items), (RESAMPLES, len(items)))
            found[m] = float(np.std(ratio_metric(items, m, rows), ddof=1))
    return {f"{m}_stderr": round(v, 10) for m, v in found.items()}


def mcnemar(ours: np.ndarray, theirs: np.ndarray) -> tuple[int, int, float]:
    """McNemar's exact test on paired correctness: (only ours right, only theirs right, p)."""
    from scipy.stats import binomtest  # the report's, not an evaluation job's import (0.3 s)

    b, c = int(np.sum(ours & ~theirs)), int(np.sum(~ours & theirs))
    return b, c, 1.0 if b + c == 0 else float(binomtest(b, b + c, 0.5).pvalue)


CORRECTION = 0.25  # items taken off |b - c - n delta| before the score is read (see below)


def tango_score(b: np.ndarray, c: np.ndarray, n: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Tango's score statistic (Stat Med 17:891, 1998; 18:3511, 1999) for a paired difference
    delta = p12 - p21, its variance at the restricted MLE of p21 (a quadratic's root), with
    |b - c - n delta| less CORRECTION items: 0 where that is 0 (0 / 0 at b = c = delta = 0)."""
    w = -b - c + (2 * n - b + c) * delta
    p21 = (np.sqrt(np.maximum(w * w + 8 * n * c * delta * (1 - delta), 0)) - w) / (4 * n)
    top = b - c - n * delta
    top = np.sign(top) * np.maximum(np.abs(top) - CORRECTION, 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(top == 0, 0.0, top / np.sqrt(n * (2 * p21 + delta * (1 - delta))))


def paired_interval(b: ArrayLike, c: ArrayLike, n: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """95% interval of the paired accuracy difference (b - c) / n over n items (b only ours
    right, c only theirs): the deltas Tango's score test does not reject, each end by bisection
    (the score falls as delta grows), element-wise. Unconditional: unlike an interval exact
    given b + c, it covers the difference while b + c varies, and is never zero-width (0 vs 0:
    about +-4 / n). Uncorrected, its exact coverage dips to 0.930 where few items are
    discordant (about 4 expected, one-sided; n 20-2,000, discordant shares 0-0.5): with
    CORRECTION = 1/4 item (a quarter of Yates's; 1/8 gave 0.935, 1/2 0.950 at mean 0.974) the
    least is 0.940, mean 0.970 (tests/test_coverage.py: 0.943, 0.963 on its grid). Its ends need
    not agree with McNemar's exact p at the 0.05 edge."""
    b, c, n = (np.asarray(x, float) for x in np.broadcast_arrays(b, c, n))
    observed, ends = (b - c) / n, []
    for far in (-1.0, 1.0):
        inside, outside = observed, np.full_like(observed, far)
        for _ in range(50):
            middle = (inside + outside) / 2
            kept = np.abs(tango_score(b, c, n, middle)) <= Z95
            inside, outside = np.where(kept, middle, inside), np.where(kept, outside, middle)
        ends.append((inside + outside) / 2)
    return ends[0], ends[1]


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
    interval and p-value by exact tests. Accuracy: McNemar's (interval: `paired_interval`).
    A ratio metric: the sign-flip test of each item's difference in summed loss d_i, with
    statistic T = sum(d_i) / sum(units), the log of ours over theirs perplexity (`ratio`);
    the difference and its interval are value(r + T) - value(r) at theirs rate r (perplexity:
    theirs times (ratio - 1); bits per byte: T / ln 2), NaN ends under 6 items."""
    both = ours.merge(theirs, on="item", suffixes=("", "_theirs"))
    n = len(both)
    if f"correct_{metric}" in both:
        a, b = (both[f"correct_{metric}{s}"].to_numpy(bool) for s in ("", "_theirs"))
        only_ours, only_theirs, p = mcnemar(a, b)
        low, high = (float(end) for end in paired_interval(only_ours, only_theirs, n))
        found = {"difference": (only_ours - only_theirs) / n, "ratio": np.nan}
        test = f"McNemar exact ({only_ours} vs {only_theirs} discordant); Tango's interval"
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
# dropped). Their min-max holds the true median with probability 1 - 2^(1 - n) only (75% at 3
# repeats; no interval free of the law reaches 95% under 6): the 95% interval is Student's t
# over the logs of the repeats (exact for log-normal repeats; tests/test_coverage.py).
REPEATS_RULE = (
    "median of the repeats; interval: 95% for their true median, Student's t over the logs of "
    "the repeats (exact for log-normal repeats), exp(mean +- t(n-1) sd / sqrt(n)); no repeat "
    "dropped; 'within the repeats' compares their min-max (75% at 3 repeats)"
)
ONE_REPEAT = "one repeat: spread unknown"


def repeats_bounds95(values: ArrayLike) -> tuple[float, float]:
    """95% interval of the repeats' true median: exp(mean +- t sd / sqrt(n)) of their logs;
    NaN under two positive repeats (a rate, energy or charge is positive)."""
    logs = np.log(np.asarray(values, float)[np.asarray(values, float) > 0])
    if len(logs) < 2:
        return np.nan, np.nan
    from scipy.stats import t  # the report's, not an evaluation job's import

    half = t.ppf(1 - ALPHA / 2, len(logs) - 1) * np.std(logs, ddof=1) / np.sqrt(len(logs))
    return float(np.exp(logs.mean() - half)), float(np.exp(logs.mean() + half))


SPREAD = {"estimator": "median", "errorbar": repeats_bounds95}  # seaborn: median, its 95% bars


def repeats_interval(values: pd.Series) -> str:
    """A point's repeats as the rule shows them: 'low-high (n repeats, 95%)', or "-" under two
    (one repeat: its spread unknown, which the table's note says once, not each row)."""
    values = values.dropna()
    if len(values) < 2:
        return "-"
    low, high = repeats_bounds95(values)
    return f"{low:.4g}-{high:.4g} ({len(values)} repeats, 95%)"


def within_each_other(one: tuple[float, float, float], other: tuple[float, float, float]) -> bool:
    """Two (median, low, high) of repeats, each median inside the other's interval: the repeats
    cannot tell the two choices apart (one repeat's interval is its value alone)."""
    return bool(other[1] <= one[0] <= other[2] and one[1] <= other[0] <= one[2])

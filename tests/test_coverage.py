"""Coverage of every 95% interval the report prints, over a grid of sizes and laws: at least
0.93 at every point and 0.945 on average. Accuracy's paired difference exactly (every outcome
of the discordant counts with its probability), the sign-flip and repeats' intervals by seeded
simulation; the interval it replaced (Clopper-Pearson given the discordant items) fails."""

from __future__ import annotations

import numpy as np
import pytest
from accelstudy.uncertainty import (
    TIES,
    Z95,
    _arrangements,
    _share,
    paired_interval,
    repeats_bounds95,
    shift_interval,
    tango_score,
)
from scipy import stats
from scipy.special import betaincinv, gammaln

SIZES = [20, 32, 50, 100, 200, 500, 1000, 2000]
SHARES = [0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5]  # P(only ours right), P(only theirs)


def outcomes(n: int, p12: float, p21: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (b, c) of n items within b's and c's binomial 1e-11 tails, with its multinomial
    probability (the mass left out, under 1e-10, counts as not covered)."""
    ends = [stats.binom.ppf([1e-11, 1 - 1e-11], n, p).astype(int) for p in (p12, p21)]
    b, c = (np.arange(low, high + 1) for low, high in ends)
    b, c = (x.ravel() for x in np.meshgrid(b, c, indexing="ij"))
    b, c = b[b + c <= n], c[b + c <= n]
    cells = np.array([b, c, n - b - c], float)
    shares = np.array([p12, p21, 1 - p12 - p21])[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):  # 0 * log(0) is 0
        logs = np.where(cells > 0, cells * np.log(shares), 0.0)
    p = np.exp(gammaln(n + 1) - gammaln(cells + 1).sum(axis=0) + logs.sum(axis=0))
    return b, c, p


def paired_coverage(covers, sizes=SIZES) -> np.ndarray:
    """Exact coverage of the true p12 - p21 at each grid point (p12 <= p21: mirrors cover alike)."""
    found = []
    for n in sizes:
        for p12 in SHARES:
            for p21 in [s for s in SHARES if p12 <= s and 0 < p12 + s <= 1]:
                b, c, p = outcomes(n, p12, p21)
                found.append(np.sum(p * covers(b, c, n, p12 - p21)))
    return np.array(found)


def clopper_pearson_covers(b, c, n, delta):
    """The replaced interval: Clopper-Pearson's for b / (b + c) as a difference; [0, 0] at 0."""
    m = b + c
    with np.errstate(all="ignore"):
        low = np.where(b > 0, betaincinv(b, c + 1, 0.025), 0.0) * 2 - 1
        high = np.where(c > 0, betaincinv(b + 1, c, 0.975), 1.0) * 2 - 1
    return (low * m / n <= delta + 1e-12) & (delta - 1e-12 <= high * m / n)


def test_paired_accuracy_interval_covers():
    """Tango's score interval: a delta is inside exactly when its score is within 1.96 (checked
    against paired_interval below), so its coverage is the score's acceptance at the truth."""
    tango = paired_coverage(lambda b, c, n, d: np.abs(tango_score(b, c, n, d)) <= Z95)
    assert tango.min() >= 0.93 and tango.mean() >= 0.945, (tango.min(), tango.mean())
    old = paired_coverage(clopper_pearson_covers, SIZES[:4])  # n 20-100 suffice to show it
    assert old.min() < 0.5 and old.mean() < 0.9, (old.min(), old.mean())  # b + c held fixed


def test_paired_interval_is_the_scores_acceptance():
    """At every (b, c) of 20 items and a sample of 2,000: the ends found by bisection are where
    |score| crosses 1.96, and a delta inside is accepted, one outside rejected; 0 vs 0 items give
    a finite width (the old [0, 0])."""
    small = np.array([(b, c) for b in range(21) for c in range(21 - b)]).T
    big = np.random.default_rng(0).integers(0, 1000, (2, 200))
    for (b, c), n in ((small, 20), (big, 2000)):
        low, high = paired_interval(b, c, n)
        deltas = np.linspace(-1, 1, 801)[:, None]
        accepted = np.abs(tango_score(b, c, n, deltas)) <= Z95
        inside = (low - 1e-9 <= deltas) & (deltas <= high + 1e-9)
        near = (np.abs(deltas - low) < 1e-6) | (np.abs(deltas - high) < 1e-6)
        assert (accepted == inside)[~near].all()
        assert (low <= (b - c) / n).all() and ((b - c) / n <= high).all()
    low, high = paired_interval(0, 0, 32)
    assert -high == low and 0.1 < high < 0.13  # about 4 / n either way


LAWS = {  # symmetric errors of each block's summed loss (the sign-flip test's null)
    "normal": lambda rng, shape: rng.normal(0, 20, shape),
    "laplace": lambda rng, shape: rng.laplace(0, 15, shape),
    "t3": lambda rng, shape: 10 * rng.standard_t(3, shape),
    "uniform": lambda rng, shape: rng.uniform(-30, 30, shape),
}


def flip_coverage(n: int, law, scaled: bool) -> float:
    """Share of seeded draws whose true shift delta (log perplexity ratio 0.01 per token) the
    sign-flip test does not reject: the interval's coverage, as it is the test's inversion.
    Blocks of 60-70 tokens; `scaled`: each block's error grows with its tokens."""
    rng = np.random.default_rng(n)
    units = rng.integers(60, 70, n).astype(float)
    errors = law(rng, (n, 2000 if n < 20 else 1000)) * (units[:, None] / 65 if scaled else 1)
    e = (0.01 * units[:, None] + errors) - 0.01 * units[:, None]  # d - delta * units
    signs = _arrangements(n)
    if signs is None:  # every arrangement
        signs = np.array(np.meshgrid(*[[1.0, -1.0]] * n, indexing="ij")).reshape(n, -1).T
    sums = signs.astype(float) @ e  # _share's p for every draw at once
    p = np.mean(np.abs(sums) >= np.abs(sums[0]) - TIES * np.abs(e).sum(axis=0), axis=0)
    return float(np.mean(p > 0.05))


def test_perplexity_ratio_interval_covers():
    """Its coverage over 6 to 20 blocks (all arrangements to 19, 10,000 random ones beyond),
    each symmetric law, and the normal's spread growing with a block's tokens: never below 0.93, on average 0.945."""
    found = np.array(
        [
            flip_coverage(n, law, scaled)
            for n in (6, 8, 10, 20)
            for law, scaled in [(law, False) for law in LAWS.values()] + [(LAWS["normal"], True)]
        ]
    )
    assert found.min() >= 0.93 and found.mean() >= 0.945, (found.min(), found.mean())


def test_shift_interval_is_the_tests_inversion():
    """The ends shift_interval finds hold the truth exactly when the test does not reject it."""
    rng = np.random.default_rng(5)
    units = rng.integers(60, 70, 8).astype(float)
    for _ in range(40):
        d = 0.01 * units + rng.normal(0, 20, 8)
        low, high = shift_interval(d, units)
        signs = np.array(np.meshgrid(*[[1.0, -1.0]] * 8, indexing="ij")).reshape(8, -1).T
        e = d - 0.01 * units
        assert (low <= 0.01 <= high) == (_share(signs @ e, e) > 0.05)


REPEAT_LAWS = {  # speeds, energies and charges: positive, a true median each
    "log-normal 2%": (lambda rng, s: np.exp(rng.normal(0, 0.02, s)), 1.0),
    "log-normal 20%": (lambda rng, s: np.exp(rng.normal(0, 0.2, s)), 1.0),
    "log-normal 100%": (lambda rng, s: np.exp(rng.normal(0, 1.0, s)), 1.0),
    "normal 2%": (lambda rng, s: rng.normal(1, 0.02, s), 1.0),
    "normal 10%": (lambda rng, s: rng.normal(1, 0.1, s), 1.0),
    "normal 30%": (lambda rng, s: np.abs(rng.normal(1, 0.3, s)), 1.0),
    "gamma 2": (lambda rng, s: rng.gamma(2, 1, s), stats.gamma.median(2)),
    "gamma 10": (lambda rng, s: rng.gamma(10, 1, s), stats.gamma.median(10)),
    "t3 about 10": (lambda rng, s: np.maximum(10 + rng.standard_t(3, s), 1e-3), 10.0),  # clip: >0
}


@pytest.mark.parametrize("count", [2, 3, 5, 10])
def test_repeats_interval_covers(count):
    """Student's t over the logs of 2-10 repeats, 20,000 seeded draws a law; the min-max it
    replaced holds the median 1 - 2^(1-n) of the time only (0.75 at 3)."""
    rng = np.random.default_rng(count)
    found, minmax = [], []
    for draw, median in REPEAT_LAWS.values():
        x = draw(rng, (20_000, count))
        logs = np.log(x)
        half = stats.t.ppf(0.975, count - 1) * logs.std(axis=1, ddof=1) / np.sqrt(count)
        low, high = np.exp(logs.mean(axis=1) - half), np.exp(logs.mean(axis=1) + half)
        found.append(np.mean((low <= median) & (median <= high)))
        minmax.append(np.mean((x.min(axis=1) <= median) & (median <= x.max(axis=1))))
    assert repeats_bounds95(x[0]) == pytest.approx((low[0], high[0]))  # the formula is ours
    assert min(found) >= 0.93 and np.mean(found) >= 0.945, found
    assert np.mean(minmax) == pytest.approx(1 - 2.0 ** (1 - count), abs=0.01)

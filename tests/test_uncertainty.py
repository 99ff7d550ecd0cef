"""Standard errors and paired differences against scipy, statsmodels' formulas and hand cases:
McNemar's exact test and Tango's interval, the sign-flip test of a perplexity and its inversion."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from accelstudy.uncertainty import (
    detectable,
    fewest,
    holm,
    mcnemar,
    mean_stderr,
    paired_difference,
    paired_interval,
    ratio_metric,
    shift_interval,
    sign_flip_p,
    stderrs,
)
from scipy import stats


def test_mcnemar_exact_hand_case():
    """b = 10 items only the first got right, c = 2 only the second: p = 2 * P(X <= 2 | 12, 1/2)."""
    ours = np.array([True] * 10 + [False] * 2 + [True] * 5)
    theirs = np.array([False] * 10 + [True] * 2 + [True] * 5)
    b, c, p = mcnemar(ours, theirs)
    assert (b, c) == (10, 2)
    assert p == pytest.approx(2 * (1 + 12 + 66) / 2**12) and round(p, 4) == 0.0386
    assert p == pytest.approx(stats.binomtest(2, 12, 0.5).pvalue)
    assert mcnemar(ours, ours)[2] == 1.0


def test_mean_stderr_is_the_harness_formula():
    values = np.array([1, 0, 1, 1, 0, 1, 0, 1], dtype=float)
    assert mean_stderr(values) == pytest.approx(stats.sem(values))  # ddof 1
    assert np.isnan(mean_stderr([1.0]))


def test_paired_accuracy_difference_and_its_interval():
    rng = np.random.default_rng(1)
    a, b = rng.random(200) < 0.7, rng.random(200) < 0.5
    ours = pd.DataFrame({"item": range(200), "correct_acc": a})
    theirs = pd.DataFrame({"item": range(200), "correct_acc": b}).sample(frac=1, random_state=0)
    found = paired_difference("acc", ours, theirs)  # aligned on the item, not the row
    assert found["difference"] == pytest.approx(a.mean() - b.mean())
    assert found["ci95_low"] < found["difference"] < found["ci95_high"]
    assert found["p"] == pytest.approx(mcnemar(a, b)[2]) and found["items"] == 200


def blocks(count: int, worse: float, seed: int = 2) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Ours and theirs over `count` blocks of 60-70 tokens: ours `worse` nats per block more."""
    rng = np.random.default_rng(seed)
    tokens, nll = rng.integers(60, 70, count), rng.normal(300, 20, count)
    ours = pd.DataFrame({"item": range(count), "nll": nll + worse, "tokens": tokens})
    return ours, pd.DataFrame({"item": range(count), "nll": nll, "tokens": tokens})


def test_sign_flip_hand_cases():
    """All differences one way: only the observed and its mirror reach |T|, p = 2 / 2^n."""
    assert sign_flip_p(np.array([1.0, 2.0, 0.5, 3.0])) == 0.125  # not bootstrap's 2/1001
    assert sign_flip_p(np.arange(1.0, 11.0)) == 2 / 1024
    assert (
        sign_flip_p(np.array([5.0, 2.0, -1.0])) == 0.5
    )  # of 5 ± 2 ± 1 = 8, 6, 4, 2: two, mirrored
    assert sign_flip_p(np.zeros(5)) == 1.0
    found = paired_difference("perplexity", *blocks(4, 10.0))
    assert found["p"] == 0.125 and np.isnan(found["ci95_low"]) and np.isnan(found["ci95_high"])
    assert "too few items for a 95% interval" in found["test"]


def test_sign_flip_of_a_perplexity():
    ours, theirs = blocks(10, 10.0)
    found = paired_difference("perplexity", ours, theirs)
    mine, baseline = ratio_metric(ours, "perplexity"), ratio_metric(theirs, "perplexity")
    assert found["ratio"] == pytest.approx(mine / baseline, rel=1e-12)  # T = log of that ratio
    assert found["difference"] == pytest.approx(mine - baseline)
    assert found["p"] == 2 / 1024 and found["ci95_low"] > 0  # every block worse
    assert found["ci95_low"] <= found["difference"] <= found["ci95_high"]
    same = paired_difference("perplexity", theirs, theirs)
    assert same["difference"] == 0 and same["p"] == 1.0
    named = {"nll": "neg_loglikelihood", "tokens": "bytes"}  # lm-eval's documents
    bits = paired_difference(
        "bits_per_byte", ours.rename(columns=named), theirs.rename(columns=named)
    )
    log_ratio = np.log(found["ratio"])  # bits per byte is linear: the difference is T / ln 2
    assert bits["difference"] == pytest.approx(log_ratio / np.log(2)) and bits["p"] == found["p"]
    spread = stderrs(ours, {"perplexity": 1.0})["perplexity_stderr"]
    assert 0 < spread < 0.1 * mine


@pytest.mark.parametrize("count", [5, 8, 11, 14])
def test_sign_flip_p_is_scipys_exact_permutation_test(count):
    """scipy's one-sample permutation test flips each observation's sign: with every one of the
    2^n arrangements, its two-sided p is ours (the flipped sums' distribution is symmetric)."""
    d = np.random.default_rng(count).normal(0.5, 1.0, count)
    reference = stats.permutation_test(
        (d,), np.sum, permutation_type="samples", n_resamples=np.inf, alternative="two-sided"
    )
    assert sign_flip_p(d) == pytest.approx(reference.pvalue, rel=1e-12)


def test_sign_flip_interval_is_the_tests_inversion():
    """At each end the test's p crosses 0.05; under 6 items no p reaches it: no interval."""
    ours, theirs = blocks(12, 2.0)
    d, units = (ours["nll"] - theirs["nll"] + np.linspace(-30, 30, 12)).to_numpy(), ours["tokens"]
    low, high = shift_interval(d, units.to_numpy(float))
    assert low < d.sum() / units.sum() < high
    for end, inward in ((low, 1e-9), (high, -1e-9)):
        assert (
            sign_flip_p(d - (end + inward) * units)
            > 0.05
            >= sign_flip_p(d - (end - inward) * units)
        )
    assert np.isnan(shift_interval(d[:5], units[:5].to_numpy(float))).all()
    assert not np.isnan(shift_interval(d[:6], units[:6].to_numpy(float))).any()


def test_sign_flip_beyond_enumeration_draws_random_arrangements():
    """Over 19 items: 10,000 random arrangements, p never 0 and near the exact one."""
    ours, theirs = blocks(20, 0.0)
    ours["nll"] += np.random.default_rng(3).normal(5.0, 8.0, 20)  # p near 0.1
    found = paired_difference("perplexity", ours, theirs)
    d = (ours["nll"] - theirs["nll"]).to_numpy()
    sums = np.array([0.0])  # the exact p over all 2^20 arrangements, by hand
    for value in d:
        sums = np.concatenate([sums + value, sums - value])
    exact = np.mean(np.abs(sums) >= abs(d.sum()) * (1 - 1e-12))
    assert "10,000 random" in found["test"] and found["p"] == pytest.approx(exact, abs=0.01)
    assert paired_difference("perplexity", *blocks(40, 10.0))["p"] == 1 / 10_001  # never 0


def test_paired_interval_hand_cases():
    """Tango's score interval: at 0 vs 0 discordant items symmetric and finite (the old [0, 0]);
    its ends hold the observed difference, within [-1, 1], and narrow as items grow."""
    low, high = paired_interval(0, 0, 32)
    assert low == pytest.approx(-high) and 0.1 < high < 0.13
    for b, c, n in ((10, 2, 17), (3, 0, 20), (0, 20, 20), (40, 38, 2000)):
        low, high = paired_interval(b, c, n)
        assert -1 <= low <= (b - c) / n <= high <= 1
    assert np.ptp(paired_interval(4, 2, 1000)) < np.ptp(paired_interval(4, 2, 100))


def test_fewest_items_for_differs_after_holm():
    """2 / 2^n <= 0.05 / m: 6 items for one test (2/64 = 0.031, 2/32 = 0.0625), 9 for twelve."""
    assert [fewest(m) for m in (1, 2, 12, 100)] == [6, 7, 9, 12]
    for m in (1, 3, 12, 100):
        assert 2 / 2 ** fewest(m) <= 0.05 / m < 2 / 2 ** (fewest(m) - 1)


def test_holm_against_the_step_down_by_hand():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 -> 0.02, 0.03, 0.06, 0.04 -> monotone
    assert holm(p).tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_detectable_difference_grows_with_the_standard_error():
    assert detectable(0.05) == pytest.approx(2.8016 * np.sqrt(2) * 0.05, rel=1e-4)


def test_four_blocks_all_worse_cannot_be_told_from_zero(tmp_path):
    """The report's verdict at 4 WikiText blocks: p is 2/16 = 0.125 at best, whatever the data."""
    from accelstudy.layout import beside
    from accelstudy.report.quantization import versus_baseline

    rows = []
    for stage, method, worse in (("baseline", "fp32", 0.0), ("quantized", "fake [8,4]", 10.0)):
        record = tmp_path / f"{stage}.json"
        blocks(4, worse)[0].to_parquet(beside(record, "items"))
        rows.append({"stage": stage, "protocol": "paper", "method": method, "system": "cpu",
                     "model": "m", "task": "wikitext", "data": "stand-in", "record": str(record),
                     "metric": "perplexity", "value": 1.0})  # fmt: skip
    found = versus_baseline(pd.DataFrame(rows)).iloc[0]
    assert found["p"] == found["p (Holm)"] == 0.125 and found["ratio"] > 1
    assert found["verdict"] == "cannot be told from zero" and np.isnan(found["ci95_low"])

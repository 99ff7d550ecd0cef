"""Standard errors and paired differences against scipy, statsmodels' formulas and hand cases."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from accelstudy.uncertainty import (
    detectable,
    holm,
    mcnemar,
    mean_stderr,
    paired_difference,
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


def test_paired_bootstrap_of_a_perplexity():
    rng = np.random.default_rng(2)
    tokens = np.full(50, 63)
    nll = rng.normal(300, 20, 50)
    ours = pd.DataFrame({"item": range(50), "nll": nll + 10, "tokens": tokens})
    theirs = pd.DataFrame({"item": range(50), "nll": nll, "tokens": tokens})
    found = paired_difference("perplexity", ours, theirs)
    expected = np.exp((nll + 10).sum() / tokens.sum()) - np.exp(nll.sum() / tokens.sum())
    assert found["difference"] == pytest.approx(expected)
    assert 0 < found["ci95_low"] <= found["ci95_high"] and found["p"] < 0.01  # every block worse
    same = paired_difference("perplexity", theirs, theirs)
    assert same["difference"] == 0 and same["p"] == 1.0
    spread = stderrs(ours, {"perplexity": 1.0})["perplexity_stderr"]
    assert 0 < spread < 0.1 * np.exp((nll + 10).sum() / tokens.sum())


def test_holm_against_the_step_down_by_hand():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 -> 0.02, 0.03, 0.06, 0.04 -> monotone
    assert holm(p).tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_detectable_difference_grows_with_the_standard_error():
    assert detectable(0.05) == pytest.approx(2.8016 * np.sqrt(2) * 0.05, rel=1e-4)

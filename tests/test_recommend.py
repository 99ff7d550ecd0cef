"""What to run where: choices from measurements, the sharding rule, the planner-only answer."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest
import yaml
from accelstudy import cli
from accelstudy.paths import PAPER
from accelstudy.report.agreement import agreement
from accelstudy.report.recommend import choices, measured_fits, measured_points, sharding_rule


def run(strategy, cards, tps, cost=1.0, hours=0.5, j=None, status="ok", held=""):
    """One fine-tuning record's table row, as tables.flatten makes it."""
    per_mtok = cost / hours / 3600 / tps * 1e6 if tps else None
    return {
        "stage": "finetune", "model": "m", "system": "s", "strategy": strategy, "cards": cards,
        "attention": "fused", "status": status, "held_out_for": held, "tokens_per_s": tps,
        "cost_units": cost, "cost_hours": hours, "cost_unit": "node-hours", "j_per_token": j,
        "cost_per_mtok": per_mtok,
    }  # fmt: skip


def test_fastest_cheapest_and_least_energy_are_different_points():
    records = pd.DataFrame([
        run("ddp", 1, 100.0, cost=0.25, j=2.0),   # 0.5 units/h over 360k tokens/h
        run("ddp", 2, 180.0, cost=1.0, j=1.5),    # faster, dearer per token
        run("fsdp", 2, 150.0, cost=1.0, j=1.2),   # least energy
        run("zero3", 1, None, status="predicted-does-not-fit", held="card"),
    ])  # fmt: skip
    picked = choices(measured_points(records)).set_index("choice")
    assert picked.loc["fastest", "point"] == "ddp on 2 cards, fused"
    assert picked.loc["fastest", "value"] == 180.0
    assert picked.loc["cheapest", "point"] == "ddp on 1 card, fused"
    assert picked.loc["cheapest", "value"] == pytest.approx(0.5 / 3600 / 100 * 1e6, rel=1e-5)
    assert picked.loc["cheapest", "unit"] == "node-hours per 1M tokens"
    assert picked.loc["least energy", "point"] == "fsdp on 2 cards, fused"


def test_the_sharding_rule_holds_or_not_with_the_numbers():
    records = pd.DataFrame([
        run("ddp", 1, 100.0), run("fsdp", 1, 90.0),   # DDP fits and is fastest: holds
        run("ddp", 2, 150.0), run("zero3", 2, 170.0),  # DDP fits, ZeRO-3 faster: does not hold
        run("ddp", 4, None, status="predicted-does-not-fit", held="card"),
        run("fsdp", 4, 200.0),                          # only sharding fits: holds
    ])  # fmt: skip
    rule = sharding_rule(measured_fits(records), measured_points(records)).set_index("cards")
    assert rule.loc[1, "rule"].startswith("holds") and rule.loc[1, "ddp_fits"]
    assert rule.loc[2, "rule"] == (
        "does not hold (zero3 +13.3%, one repeat: spread unknown) "
        "(tokens/s: ddp/fused 150.0; zero3/fused 170.0)"
    )
    assert rule.loc[4, "rule"].startswith("holds") and not rule.loc[4, "ddp_fits"]


def test_a_lead_within_the_repeats_spread_is_noise():
    """ZeRO-3's median ahead of DDP's by 2%, each median within the other's repeats' interval:
    the rule holds within them; 20% ahead beyond it, or 50% with one slow repeat among three
    (DDP's median outside ZeRO-3's interval, ZeRO-3's outside DDP's one repeat): it does not."""
    records = pd.DataFrame([
        *(run("ddp", 1, t) for t in (96.0, 100.0, 104.0)),
        *(run("zero3", 1, t) for t in (99.0, 102.0, 105.0)),
        *(run("ddp", 2, t) for t in (150.0, 155.0)),
        *(run("zero3", 2, t) for t in (180.0, 186.0)),
        run("ddp", 4, 100.0),  # one slow repeat of many does not make a lead noise
        *(run("zero3", 4, t) for t in (98.0, 150.0, 160.0)),
    ])  # fmt: skip
    rule = sharding_rule(measured_fits(records), measured_points(records)).set_index("cards")
    assert rule.loc[1, "rule"].startswith(
        "holds: within each other's repeats' interval (zero3 +2.0%)"
    )
    assert rule.loc[2, "rule"].startswith("does not hold (zero3 +20.0%) (tokens/s:")
    assert rule.loc[4, "rule"].startswith("does not hold (zero3 +50.0%) (tokens/s:")
    fastest = choices(measured_points(records)).set_index("choice").loc["fastest"]
    assert fastest["point"] == "zero3 on 2 cards, fused"
    assert fastest["within"] == "every other point told apart"  # no median within [180, 186]


def test_a_flagged_strategy_is_left_out_of_the_choices():
    """ZeRO-3 is fastest, but its losses left DDP's by 5% (report.agreement): not chosen."""
    losses = {"ddp": [2.2, 2.1, 2.0], "fsdp": [2.2, 2.1, 2.01], "zero3": [2.2, 2.0, 1.9]}
    records = pd.DataFrame(
        [
            run(s, 1, t)
            | {"losses": losses[s], "record": s, "repeat": 0, "seed": 1, "max_steps": 3}
            for s, t in (("ddp", 100.0), ("fsdp", 90.0), ("zero3", 120.0))
        ]
    )
    checked = agreement(records).set_index("strategy")
    assert checked.loc["fsdp", "verdict"] == "agrees"
    assert checked.loc["fsdp", "deviation %"] == pytest.approx(0.5, abs=1e-3)
    assert checked.loc["zero3", "verdict"].startswith("flagged")
    assert checked.loc["zero3", "worst step"] == 3
    picked = choices(measured_points(records)).set_index("choice")
    assert picked.loc["fastest", "point"] == "ddp on 1 card, fused"


def test_a_loss_gone_nan_is_flagged_and_studies_are_not_mixed():
    """FSDP's loss goes NaN at step 3 (a bf16 overflow): flagged, not "agrees". Another study's
    ZeRO-3 with its own DDP is checked against that DDP, not this study's."""
    nan = float("nan")
    losses = {("a", "ddp"): [2.2, 2.1, 2.0], ("a", "fsdp"): [2.2, 2.1, nan],
              ("b", "ddp"): [3.0, 2.9, 2.8], ("b", "zero3"): [3.0, 2.9, 2.81]}  # fmt: skip
    records = pd.DataFrame([
        run(s, 1, 100.0) | {"losses": ls, "record": f"{study}/{s}", "study": study, "repeat": 0}
        for (study, s), ls in losses.items()
    ])  # fmt: skip
    checked = agreement(records).set_index("record")
    assert checked.loc["a/fsdp", "verdict"].startswith("flagged")
    assert checked.loc["a/fsdp", "worst step"] == 3
    assert checked.loc["b/zero3", "verdict"] == "agrees" and len(checked) == 2


def test_energy_unavailable_leaves_that_choice_blank():
    points = measured_points(pd.DataFrame([run("ddp", 1, 100.0), run("fsdp", 2, 120.0)]))
    picked = choices(points).set_index("choice")
    assert picked.loc["least energy", "point"] == "-"
    assert picked.loc["least energy", "unit"] == "J/token: not measured"


def test_recommend_answers_from_the_planner_alone(capsys):
    """The 70B on Voyager's Gaudi2: nothing measured there, so the answer is labelled predicted."""
    argv = ["recommend", "--model", "llama-3.3-70b-instruct", "--system", "voyager"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "llama-3.3-70b-instruct on voyager:" in out
    assert "predicted (planner only, nothing measured on voyager)" in out
    assert "not measured (predicted:" in out  # the rule, per card count, from the planner
    assert cli.main(["recommend", "--model", "gpt-5", "--system", "voyager"]) == 2
    assert f"'gpt-5' is not fine-tuned by {PAPER};" in capsys.readouterr().err  # the default
    # no --model: each model the study fine-tunes, in its order
    assert cli.main(["recommend", "--system", "voyager"]) == 0
    heads = [line.split(" on voyager: ")[0] for line in capsys.readouterr().out.splitlines()]
    models = yaml.safe_load(PAPER.read_text())["finetune"]["models"]
    assert [h for h in heads if h in models] == models and len(models) == 3
    # as data: every model's fit map, rule, forecast and choices (json); the fit maps (csv)
    assert cli.main(["recommend", "--system", "voyager", "--format", "json"]) == 0
    told = json.loads(capsys.readouterr().out)
    assert told["system"] == "voyager" and list(told["models"]) == models
    fits = told["models"]["llama-3.3-70b-instruct"]["fits"]
    assert {"strategy", "cards", "card_gb", "held_out_for"} <= set(fits[0])
    assert cli.main(["recommend", "--system", "voyager", "--format", "csv"]) == 0
    rows = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(dict.fromkeys(rows["model"])) == models and len(rows) == sum(
        len(part["fits"]) for part in told["models"].values()
    )

"""The forecast (accelstudy.forecast): each job's FLOPs from its config, its rate from this
system's records before any assumption, its SLURM runtime, and `accelstudy plan-time`."""

import io
import json
import math
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml
from accelstudy import flops
from accelstudy.cli import main
from accelstudy.config import validate_config
from accelstudy.errors import ConfigError
from accelstudy.forecast import (
    MARGIN,
    MIN_MINUTES,
    Estimate,
    Seen,
    StudyEstimates,
    Work,
    charge_of,
    estimate,
    figure_seconds,
    figure_system,
    judge_published,
    parameters,
    published_figures,
    scan_passes,
    seen_in,
    work_of,
)
from accelstudy.paths import RESOURCES
from accelstudy.pruning import FAMILIES, GRANULARITIES
from accelstudy.systems import check_system, load_system

from tests.conftest import ROOT

PAPER = validate_config(yaml.safe_load((ROOT / "config" / "paper.yaml").read_text()))
PERLMUTTER = load_system("perlmutter")


def finetune_cell(**changes):
    cell = dict(model="llama-3.1-8b-instruct", strategy="ddp", attention="fused", cards=2, repeat=0)
    return SimpleNamespace(**(cell | changes))


def test_a_finetune_job_is_its_steps_tokens_times_the_counted_flops():
    work = work_of("finetune", finetune_cell(), "out", PAPER, PERLMUTTER)
    model = json.loads((RESOURCES / "models" / "llama-3.1-8b-instruct" / "config.json").read_text())
    per_token = flops.training_per_token(model, 512, 64, ("q_proj", "v_proj"))
    per_step = 2 * 2 * 512 * 2  # batch x accumulation x sequence x cards
    assert work.timed_flops == pytest.approx((60 - 3) * per_step * per_token)
    assert work.warm_flops == pytest.approx(3 * per_step * per_token)
    # Llama-3.1-8B: 8.03e9 weights (its model card), in bfloat16
    assert parameters(model) == pytest.approx(8.03e9, rel=0.01)
    assert work.load_bytes == 2 * parameters(model)


def test_a_model_flops_cannot_count_has_no_forecast(tmp_path):
    """A prepared model whose config is not a Llama-style decoder's (GPT-2's n_embd): unknown,
    so its job asks for the partition's limit instead of stopping the parse."""
    folder = tmp_path / "results" / "paper" / "models" / "gpt2"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"n_embd": 768, "n_layer": 12}))
    config = PAPER | {"results_dir": str(tmp_path / "results")}
    config = config | {"models": PAPER["models"] | {"gpt2": {"source": "hf", "id": "gpt2"}}}
    cell = SimpleNamespace(model="gpt2", task="wikitext", protocol="paper")
    told = estimate(work_of("baseline", cell, "out", config, PERLMUTTER), [], PERLMUTTER)
    assert told.source == "unknown" and told.minutes(1, 2880) == 2880


def test_an_evaluation_reads_its_splits_tokens():
    cell = SimpleNamespace(model="tinyllama-1.1b", task="wikitext", protocol="paper")
    work = work_of("baseline", cell, "out", PAPER, PERLMUTTER)
    model = json.loads((RESOURCES / "models" / "tinyllama-1.1b" / "config.json").read_text())
    # the paper's test split: 661 blocks of 512 tokens
    assert work.timed_flops == pytest.approx(338_432 * flops.forward_per_token(model, 512))
    chunk = SimpleNamespace(model="tinyllama-1.1b", task="wikitext", granularity="layer", chunk=0)
    sensitivity = work_of("sensitivity", chunk, "out", PAPER, PERLMUTTER)
    # one layer per chunk (22 chunks) and the unpruned model: 2 passes over 297,472 tokens
    expected = 2 * 297_472 * flops.forward_per_token(model, 512)
    assert sensitivity.timed_flops == pytest.approx(expected)


def seen(kind=("ddp", "fused"), cards=1, rate=1e12, model="m", startup=10.0, warm_s=2.0):
    work = Work("finetune", f"{kind}{cards}", model, kind, cards, "bfloat16", 1e14, 1e12)
    return Seen(work, rate, startup, warm_s, 1.0, startup + warm_s + 1e14 / rate + 1.0)


def test_the_rate_comes_from_records_before_any_assumption():
    work = Work("finetune", "x", "m", ("ddp", "fused"), 4, "bfloat16", 8e14, 4e12)
    records = [seen(cards=1, rate=1e12), seen(cards=2, rate=1.8e12)]
    told = estimate(work, records, PERLMUTTER)
    exponent = math.log(1.8) / math.log(2)  # fitted from the two card counts
    assert told.source == "scaled"
    assert told.rate == pytest.approx(1.8e12 * 2**exponent)
    # start-up and tail: the records' medians; warm-up: how much longer than its work at the
    # measured rate it took (2 s for 1e12 FLOPs: 2x at 1e12 FLOP/s, 3.6x at 1.8e12), median 2.8
    expected = 10.0 + 1.0 + (8e14 + 4e12 * 2.8) / told.rate
    assert told.seconds == pytest.approx(expected)
    same = estimate(work, [seen(cards=4)], PERLMUTTER)
    assert same.source == "measured" and same.rate == 1e12
    other_model = estimate(work, [seen(cards=4, model="other")], PERLMUTTER)
    assert other_model.source == "scaled"  # FLOP/s carries across models
    # nothing measured: the stated assumption for (cuda, finetune, ddp) against the datasheet
    assumed = estimate(work, [], PERLMUTTER)
    assert assumed.source == "assumed" and "of peak" in assumed.basis
    assert assumed.rate == pytest.approx(0.35 * 312e12 * 4**0.95)


def test_the_runtime_is_the_forecast_times_the_margin_within_bounds():
    work = Work("finetune", "x", "m", ("ddp", "fused"), 1, "bfloat16", 1.0)
    assert Estimate(work, 3600, 1.0, "assumed", "").minutes(1, 2880) == math.ceil(60 * MARGIN)
    assert Estimate(work, 3600, 1.0, "assumed", "").minutes(2, 2880) == 2 * math.ceil(60 * MARGIN)
    assert Estimate(work, 5, 1.0, "assumed", "").minutes(1, 2880) == MIN_MINUTES
    assert Estimate(work, 40 * 3600, 1.0, "assumed", "").minutes(1, 2880) == 2880  # the limit
    assert Estimate(work, None, None, "unknown", "").minutes(1, 2880) == 2880


def test_the_charge_follows_the_sites_rule():
    """Perlmutter: under 4 GPUs in QOS shared, charged the GPUs' share of a node."""
    two = Work("finetune", "x", "m", ("ddp", "fused"), 2, "bfloat16", 1.0)
    bill = charge_of(PERLMUTTER, two, 3600)
    assert bill["charge"] == pytest.approx(0.5) and bill["node_hours"] == pytest.approx(1.0)
    assert bill["energy_kwh"] == pytest.approx(2 * 400 / 1000)  # two A100s at 400 W, one hour
    eight = charge_of(PERLMUTTER, Work("finetune", "x", "m", ("ddp",), 8, "bfloat16", 1.0), 3600)
    assert eight["charge"] == pytest.approx(2.0)  # two whole nodes
    # Expanse: 2 GPUs in gpu-shared, 2 GPU SUs an hour; 6 in its node-exclusive gpu: 8
    expanse = load_system("expanse")
    assert charge_of(expanse, two, 3600)["charge"] == pytest.approx(2.0)
    six = Work("finetune", "x", "m", ("ddp",), 6, "bfloat16", 1.0)
    assert charge_of(expanse, six, 3600)["charge"] == pytest.approx(8.0)


def test_a_record_gives_its_work_and_phases(tmp_path):
    record = {
        "stage": "finetune", "model": "m", "metrics": {"status": "ok", "flops_per_token": 1e9},
        "parameters": {"per_device_batch": 1, "grad_accum": 1, "max_seq_length": 512, "cards": 2,
                       "throughput_warmup_steps": 1, "max_steps": 3, "strategy": "zero3",
                       "attention": "eager", "dtype": "float32"},
        "provenance": {"timeline": {"ready_s": 10, "measured_s": 14, "done_s": 24, "end_s": 25}},
    }  # fmt: skip
    path = tmp_path / "repeat-0.json"
    path.write_text(json.dumps(record))
    (one,) = seen_in([path])
    assert one.work.timed_flops == 2 * 1024 * 1e9  # 2 timed steps of 1024 tokens
    assert one.rate == pytest.approx(2 * 1024 * 1e9 / 10)
    assert (one.startup_s, one.warm_s, one.tail_s, one.wall_s) == (10, 4, 1, 25)
    hole = record | {"metrics": {"status": "does-not-fit"}}
    path.write_text(json.dumps(hole))
    assert seen_in([path]) == []  # a hole has no rate


def test_the_sr3_flops_shipped_are_torchs_count():
    """resources/sr3_flops.csv's default shape, recounted by torch (the paper's: 2 min on a CPU)."""
    import torch
    from accelstudy import options
    from accelstudy.diffusion import sr3
    from accelstudy.forecast import sr3_flops

    default = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["diffusion"]
    model = options.default("diffusion.model") | default["model"]
    torch.manual_seed(0)
    unet = sr3.build_unet(model, 64)
    table = sr3.sqrt_alpha_bar_prev(sr3.scheduler(options.default("diffusion.schedule")))
    images = torch.randn(2, 1, 64, 64), torch.randn(2, 1, 64, 64)
    assert sr3_flops(model, 64) == sr3.flops_per_image(unet, table, *images)


def test_the_stand_in_splits_are_sized_as_shipped():
    from accelstudy.data.standin import standin_rows
    from accelstudy.forecast import _csv

    for row in _csv("splits.csv"):
        if row["source"] == "standin" and row["task"] != "wikitext":  # wikitext: in blocks
            assert len(standin_rows(row["task"], row["split"])) == int(row["items"]), row


@pytest.mark.parametrize(
    ("key", "value"),
    [("walltime", {"max_minutes": 0, "doc": "x"}), ("power", {"watts_per_card": 400})],
)
def test_a_bad_forecast_key_of_a_system_file_is_named(key, value):
    spec = yaml.safe_load((ROOT / "config" / "systems" / "perlmutter.yaml").read_text())
    with pytest.raises(ConfigError, match=key):
        check_system(spec | {key: value}, "config/systems/perlmutter.yaml: key")


def test_plan_time_prints_the_papers_cost_on_perlmutter(capsys):
    """The totals come first, each said in words; then the rows; the same as JSON and CSV."""
    args = ["plan-time", "--configfile", "config/paper.yaml", "--system", "perlmutter"]
    code = main([*args, "--budget", "10"])
    out = capsys.readouterr().out
    assert code == 0
    first, counts, *_ = out.splitlines()
    assert first.startswith("perlmutter: ") and "node-hours" in first and "kWh" in first
    charged = float(first.split(",")[1].split()[0])
    assert "GPU node-hours" in first and charged > 10 and f"exceeds it by {charged - 10:.4g}" in out
    assert "QOS shared: its share of the node" in counts  # why the two totals differ
    assert out.index("per point (repeats summed)") > out.index("allocation 10")
    assert "published SR3 minutes" in out and "A100" in out
    assert main([*args, "--format", "json", "--by", "rule"]) == 0
    told = json.loads(capsys.readouterr().out)
    (summary,) = told["summaries"]
    assert summary["charge"] == pytest.approx(charged, rel=1e-3)
    rules = {row["rule"]: row for row in told["rows"]}
    assert set(rules) == {"baseline", "sensitivity", "quantize", "finetune", "diffusion"}
    assert sum(r["charge"] for r in rules.values()) == pytest.approx(summary["charge"])
    assert main([*args, "--format", "csv"]) == 0
    rows = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert rows["charge"].sum() == pytest.approx(summary["charge"]) and len(rows) > len(rules)


def test_the_default_study_forecasts_itself_offline():
    """Its model's config ships in resources/: every job has a FLOP count before it is prepared."""
    config = validate_config(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))
    study = StudyEstimates(config, load_system("cpu"), seen=[])
    assert all(f.work.timed_flops for f in study.all())
    assert {f.work.rule for f in study.all()} == {
        "baseline", "sensitivity", "quantize", "finetune", "diffusion"
    }  # fmt: skip


def test_plan_time_n_lists_the_jobs_snakemake_would_run(tmp_path, capsys):
    """-n: one row per job of Snakemake's own dry run (a fresh results folder: every job)."""
    study = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    study |= {"results_dir": str(tmp_path / "results")}
    study["finetune"] |= {"strategies": ["ddp"], "attention": ["fused"]}
    configfile = tmp_path / "study.yaml"
    configfile.write_text(yaml.safe_dump(study))
    assert main(["plan-time", "-n", "--configfile", str(configfile)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cpu: ") and "\ncpu, per job of Snakemake's plan:" in out
    jobs = {line.split()[1] for line in out.splitlines() if ".json " in line}
    # 2 fine-tuning and 2 SR3 points, 6 baselines, 2 x 2 sensitivity chunks, 2 x 3 x 2 quantized
    # (a row per record: a baseline job's 6, a quantize job's 2 recipes)
    assert len(jobs) == 2 + 2 + 6 + 4 + 12
    assert "finetune/smollm2-135m/ddp/fused/cards-2/repeat-0.json" in jobs


@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_forecast_counts_the_passes_the_pruner_makes(tiny, granularity, family):
    """One definition of the targets (accelstudy.pruning): each chunk's passes in the forecast
    are its targets in the pruner (ptq.prune.targets, sensitivity.chunk_targets) plus the
    unpruned model's, for every granularity and family."""
    from accelstudy.ptq.prune import targets
    from accelstudy.ptq.sensitivity import chunk_targets

    model = tiny[0]
    pruned = targets(model, granularity, family)
    layers = model.config.num_hidden_layers
    assert len(pruned) == layers * (len(FAMILIES[family]) if granularity == "submodule" else 1)
    chunks = 3
    for chunk in range(chunks):
        cell = SimpleNamespace(granularity=granularity, chunk=chunk)
        ptq = {"family": family, "chunks": chunks}
        assert scan_passes(ptq, cell, layers) == len(chunk_targets(pruned, chunks, chunk)) + 1


FIGURES = published_figures()


@pytest.mark.parametrize("figure", FIGURES, ids=[f.seen.work.output for f in FIGURES])
def test_plan_time_matches_each_published_figure(figure):
    """The paper's study on the system of the figure's accelerator, nothing measured: its
    forecast of what the paper timed (SR3: the study's own job at that count) within
    [0.67, 1.5] of the figure, from the figure (`published`), not the assumed rate."""
    system = figure_system(figure.device)
    work = figure.seen.work
    if work.rule == "diffusion":
        cell = SimpleNamespace(devices=work.cards, repeat=0)
        work = work_of("diffusion", cell, "", PAPER, system)
    told = estimate(work, [], system)
    assert told.source == "published"
    assert 0.67 <= figure_seconds(told, figure) / figure.seen.wall_s <= 1.5


def test_the_published_sr3_minutes_predict_each_other_and_the_assumed_rates_do_not():
    """Leave-one-out: each SR3 figure from its accelerator's other counts (FLOP/s, cards^e fitted
    from them) within [0.67, 1.5]; the assumed A100 and V100 rates are 2.6-5.2x slow."""
    table = {row["figure"]: row for row in judge_published()}
    sr3 = [row for name, row in table.items() if name.startswith("SR3")]
    assert len(sr3) == 24 and all(row["held_out_source"] == "published" for row in sr3)
    assert all(0.67 <= row["held_out_ratio"] <= 1.5 for row in sr3)
    assert table["SR3 on 1 A100"]["assumed_ratio"] > 4


def test_the_sr3_time_limit_follows_the_published_forecast_and_is_capped(capsys):
    """Perlmutter's one-card SR3: 305 published minutes x MARGIN; a retry past the partition's
    limit gets the limit and one line naming the job, its forecast and the limit."""
    study = StudyEstimates(PAPER, PERLMUTTER, seen=[])
    cell = SimpleNamespace(devices=1, repeat=0)
    assert study.runtime("diffusion", cell, 1) == math.ceil(305 * MARGIN)
    assert study.runtime("diffusion", cell, 7) == study.runtime("diffusion", cell, 7) == 2880
    said = capsys.readouterr().err.splitlines()
    assert said == ["accelstudy: diffusion devices=1,repeat=0 (attempt 7) forecast 305 min x 1.5 "
                    "> perlmutter's limit of 2880 min: capped at it"]  # fmt: skip


def test_plan_time_resolves_auto_as_plan_fit_and_the_job_do(monkeypatch):
    """One rule for `dtype: auto` (peak.resolve_dtype): on a CPU whose probe runs bfloat16 GEMMs
    faster, the forecast plans bfloat16 as the job and plan-fit would (it planned float32)."""
    from accelstudy import forecast, peak
    from accelstudy.systems import load_system

    cpu = load_system("cpu")  # offers float32 and bfloat16
    rates = {"flops_per_s": {"bfloat16": 2e11, "float32": 1e11}}
    monkeypatch.setattr(peak, "cpu_rates", lambda threads: rates)
    assert forecast._dtype("auto", cpu) == peak.resolve_dtype("auto", cpu, "cpu", 1)[0]
    assert forecast._dtype("auto", cpu) == "bfloat16"
    assert forecast._dtype("float32", cpu) == "float32"  # asked: as asked
    rates["flops_per_s"]["bfloat16"] = 3e9  # emulated
    assert forecast._dtype("auto", cpu) == "float32"


@pytest.mark.parametrize("study", ["config.yaml", "paper.yaml", "gpu-smoke.yaml"])
def test_plan_fit_and_plan_time_agree_on_each_points_dtype_and_model(study):
    """For every shipped study and system, each fine-tuning point that plan-fit plans is a job
    plan-time times, in the dtype plan-fit resolved (`auto` as a job resolves it) and for the
    same model (plan-time's sizes from the config plan-fit reads)."""
    from accelstudy.config import read_config
    from accelstudy.finetune.planner import memory_per_card, plan_sweep
    from accelstudy.forecast import StudyEstimates
    from accelstudy.paths import PROJECT_ROOT, SYSTEMS
    from accelstudy.systems import load_system

    config = read_config(PROJECT_ROOT / "config" / study)
    checked = 0
    for name in sorted(path.stem for path in SYSTEMS.glob("*.yaml")):
        system = load_system(name)
        if not config["finetune"]["enabled"] or memory_per_card(system, 1) is None:
            continue
        timed = {(w.model, w.kind, w.cards): w for w in StudyEstimates(config, system, []).works.values()
                 if w.rule == "finetune"}  # fmt: skip
        for row in plan_sweep(config, system):
            if row["held_out_for"].startswith("beyond"):
                continue
            work = timed[(row["model"], (row["strategy"], row["attention"]), row["cards"])]
            assert work.dtype == row["dtype"], (study, name, row)
            assert work.timed_flops is not None, (study, name, row)  # its model's sizes found
            checked += 1
    assert checked or not config["finetune"]["enabled"]

"""End to end: the Snakemake DAG on a tiny config in a temporary directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.conftest import ROOT, TINY_CONFIG, planned_jobs, snakemake

pytestmark = pytest.mark.e2e


def test_results_get_the_umask_modes(study):
    """Every file and directory under results/ readable by the group a project directory is
    shared with (umask 002), atomic writes included, but writable by its owner only."""
    paths = [p for p in (study / "results").rglob("*") if not p.is_symlink()]
    assert any(p.suffix == ".json" for p in paths) and any(p.is_dir() for p in paths)
    wrong = [(str(p), oct(p.stat().st_mode & 0o777)) for p in paths
             if p.stat().st_mode & 0o777 != (0o755 if p.is_dir() else 0o644)]  # fmt: skip
    assert not wrong


def test_records_have_real_values(study, cpu):
    from accelstudy.data.sources import read_prepared
    from accelstudy.evaluate import evaluate_task
    from accelstudy.models import load_prepared

    base = study / "results" / "tiny" / "cpu"  # the measuring rules' records: one root per system
    records = {p.relative_to(base / "baseline").as_posix(): json.loads(p.read_text())
               for p in (base / "baseline").rglob("*.json")}  # fmt: skip
    assert sorted(records) == [
        "tiny/boolq/paper.json", "tiny/hellaswag/lm-eval.json",
        "tiny/hellaswag/paper.json", "tiny/wikitext/paper.json",
    ]  # fmt: skip
    wiki = records["tiny/wikitext/paper.json"]
    assert wiki["metrics"]["blocks"] == 4 and wiki["metrics"]["tokens"] == 4 * 64
    assert wiki["data_source"] == "standin" and wiki["protocol"] == "paper"
    assert wiki["provenance"]["config_hash"] and wiki["provenance"]["versions"]["torch"]
    # a random model over a vocabulary of ~512 is close to uniform: perplexity near |V|
    assert 300 < wiki["metrics"]["perplexity"] < 800
    # the job's number is what the evaluator gives on the prepared model and data
    model, tokenizer = load_prepared(base.parent / "models" / "tiny")  # shared by the systems
    rows = read_prepared(base.parent / "data" / "hellaswag" / "validation.jsonl")
    settings = records["tiny/hellaswag/lm-eval.json"]["parameters"]["settings"]
    again, _ = evaluate_task(model, tokenizer, "hellaswag", "lm-eval", rows, settings, cpu, 12)
    assert records["tiny/hellaswag/lm-eval.json"]["metrics"]["acc_norm"] == again["acc_norm"]
    assert records["tiny/hellaswag/lm-eval.json"]["metrics"]["items"] == 12
    assert records["tiny/boolq/paper.json"]["metrics"]["items"] == 12


def test_records_carry_energy_and_cost(study):
    """Energy as this machine allows (no card; RAPL where readable, else `unavailable` and why,
    never a number); the cpu system's rule charges the core-hours each job held."""
    from accelstudy.energy import rapl_counters

    records = [json.loads(p.read_text()) for p in (study / "results/tiny").rglob("*.json")]
    records = [r for r in records if "provenance" in r and "stage" in r]
    assert {r["stage"] for r in records} >= {"baseline", "quantized", "finetune", "diffusion"}
    for record in records:
        energy, cost = record["energy"], record["cost"]
        if rapl_counters():
            assert energy["status"] == "ok" and energy["sources"] == ["rapl"]
        else:
            assert energy == {"status": "unavailable", "reason": energy["reason"]}
            assert "RAPL" in energy["reason"] or "rapl" in energy["reason"]
        assert cost["status"] == "ok" and cost["unit"] == "core-hours"
        cores = cost["allocation"]["cores"]
        assert cores >= 1 and cost["units"] == pytest.approx(cores * cost["hours"], rel=1e-3)
        assert 0 < cost["hours"] * 3600 <= record["provenance"]["wall_time_s"] + 1


def test_records_carry_their_fraction_of_peak(study):
    """Every record that ran: its dtype and why, model FLOP/s over its measured window against
    the CPU's own probe (labelled measured), so MFU in (0, 1]; the report shows it per stage,
    per job, beside Fig. 2's throughput and in the SR3 table."""
    records = [json.loads(p.read_text()) for p in (study / "results/tiny").rglob("*.json")]
    records = [r for r in records if "provenance" in r and "stage" in r]
    for record in records:
        use, rate = record["utilization"], record["metrics"]
        assert use["status"] == "ok" and use["source"].startswith("measured: "), use
        assert 0 < use["mfu"] <= 1 and use["dtype"] in ("float32", "bfloat16")
        unit = "image" if record["stage"] == "diffusion" else "token"
        achieved = rate[f"{unit}s_per_s"] * rate[f"flops_per_{unit}"]
        assert use["achieved_flops_per_s"] == pytest.approx(achieved)
        assert use["flops_per_s"] == pytest.approx(use["achieved_flops_per_s"] / use["mfu"])
        threads = use["source"].split("-thread")[0].removeprefix("measured: ")
        probed = record["provenance"]["hardware"]["cpu_gemm_probe"][threads][use["dtype"]]
        assert use["per_card_flops_per_s"] == probed
    finetune = next(r for r in records if r["stage"] == "finetune")
    assert finetune["parameters"]["dtype"] == "auto"  # as asked; what ran, and why:
    assert finetune["utilization"]["dtype_reason"].startswith("auto: bfloat16 GEMM ")
    report = (study / "results/tiny/report/report.md").read_text()
    assert (
        "## Fraction of peak (MFU), per stage" in report
        and "## Fraction of peak (MFU), per job" in report
    )
    table = pd.read_csv(study / "results/tiny/tables/utilization.csv")
    assert set(table["stage"]) == {"baseline", "quantized", "finetune", "diffusion"}
    assert "MFU" in pd.read_csv(study / "results/tiny/tables/finetune.csv")


def test_what_to_run_where_names_the_measured_choices(study):
    """The report names, for the tiny model on `cpu`, its fastest and cheapest fitting point
    from the measurements; least energy is blank (no counter here) unless RAPL is readable."""
    report = (study / "results/tiny/report/report.md").read_text()
    assert "## What to run where: the fastest, cheapest and least-energy point" in report
    assert "## Shard only when the model does not fit: the paper's rule, checked" in report
    section = report[report.index("## What to run where") : report.index("## Shard only")]
    assert "Every row: model: tiny; system: cpu; basis: measured." in section  # said once
    rows = {line.split("|")[1].strip(): line for line in section.splitlines() if line[:2] == "| "}
    assert ", eager" in rows["fastest"] and ", eager" in rows["cheapest"]
    assert "core-hours per 1M tokens" in rows["cheapest"]


def test_ptq_records_and_assignment(study):
    from accelstudy.ptq.quantize import paper_ratio

    base = study / "results" / "tiny"
    table = base / "ptq" / "tiny" / "wikitext" / "sensitivity" / "layer.csv"
    import pandas as pd

    scores = pd.read_csv(table)
    assert list(scores["name"]) == [f"layer-{i:02d}" for i in range(4)]
    folder = base / "ptq" / "tiny" / "wikitext" / "layer" / "bits-16-8-4"
    assignment = json.loads((folder / "assignment.json").read_text())["layer_bits"]
    most_sensitive = scores.sort_values("score", ascending=False)["layer"].iloc[0]
    least_sensitive = scores.sort_values("score")["layer"].iloc[0]
    assert assignment[str(most_sensitive)] == 16 and assignment[str(least_sensitive)] == 4
    assert sorted(assignment.values()) == [4, 4, 8, 16]  # 1/1/2: the leftover goes last
    fp32 = json.loads((base / "cpu/baseline/tiny/wikitext/paper.json").read_text())
    measured = (
        base / "cpu" / folder.relative_to(base)
    )  # the system's records; the assignment shared
    fake = json.loads((measured / "fake.json").read_text())
    real = json.loads((measured / "nvidia.json").read_text())
    hidden, inter, kv = 64, 128, 32
    layer = [(hidden, hidden), (kv, hidden), (kv, hidden), (hidden, hidden),
             (inter, hidden), (inter, hidden), (hidden, inter)]  # fmt: skip
    shapes = [(s, b) for i in range(4) for s in layer for b in [assignment[str(i)]]]
    assert fake["metrics"]["compression_ratio"] == pytest.approx(paper_ratio(shapes), abs=1e-4)
    ppl = fp32["metrics"]["perplexity"]
    assert fake["metrics"]["perplexity"] == pytest.approx(ppl, rel=0.05)
    assert fake["metrics"]["perplexity"] != ppl  # 4-bit layers do change the model
    assert real["metrics"]["model_compression_ratio"] > 1.3
    assert real["metrics"]["perplexity"] == pytest.approx(ppl, rel=0.05)
    report = (base / "report" / "report.md").read_text()
    assert "Table 1" in report and "[16,8,4]" in report
    # each evaluation's items beside its record: a perplexity's blocks, paired with FP32's
    items = pd.read_parquet(measured / "fake.items.parquet")
    pooled = np.exp(items["nll"].sum() / items["tokens"].sum())
    assert pooled == pytest.approx(fake["metrics"]["perplexity"], rel=1e-5)
    assert fake["metrics"]["perplexity_stderr"] > 0
    table1 = pd.read_csv(base / "tables" / "table1.csv").set_index(["task", "metric"])
    assert table1.loc[("wikitext", "perplexity ±95%"), "FP32"] > 0
    assert 0 <= table1.loc[("wikitext", "perplexity p vs baseline"), "[16,8,4]"] <= 1
    told = report[report.index("## Quantized against the baseline") :]
    assert "Differs:" in told and "Cannot be told from zero:" in told and "80% power" in told


def test_report_written(study):
    report = study / "results" / "tiny" / "report"
    assert (report / "index.html").is_file() and (report / "report.md").is_file()
    assert "stand-in" in (report / "report.md").read_text()
    assert (study / "results" / "tiny" / "tables" / "records.parquet").is_file()


def test_where_the_time_went(study):
    """Every job's benchmark file per rule; each record's start-up and measured work fit
    inside the wall time Snakemake measured around its job."""
    tables = study / "results" / "tiny" / "tables"
    rules = pd.read_csv(tables / "time_rules.csv").set_index("rule")
    jobs = pd.read_csv(tables / "time_jobs.csv")
    # one baseline job (4 records), one quantize job per bit list (2 recipes each)
    ran = {"prepare_model": 1, "prepare_data": 4, "baseline": 1, "sensitivity": 2, "cluster": 2}
    ran |= {"gather_sensitivity": 1, "quantize": 2, "finetune": 2, "diffusion": 4}  # 2 repeats
    for rule, count in ran.items():
        assert rules.loc[rule, "jobs"] == count, rule
    timed = jobs.dropna(subset=["startup_s"])
    assert set(timed["rule"]) == {"baseline", "quantize", "finetune", "diffusion"}
    assert len(timed) == 1 + 2 + 2 + 4 and timed["wall_s"].notna().all()
    assert (timed["startup_s"] > 0).all() and (timed["measured_s"] >= 0).all()
    assert (timed["startup_s"] + timed["measured_s"] <= timed["wall_s"] + 0.2).all()
    # each job a program: its imports timed; the phases (rounded to 0.1 s) within its start-up
    phases = timed[["imports_s", "device_s", "model_s", "data_s"]]
    assert (timed["imports_s"] > 0.5).all() and phases.notna().all().all()
    assert (phases.sum(axis=1) <= timed["startup_s"] + 0.3).all()
    # warm-up steps (named apart from the phases; the tiny points' last under 0.1 s) within
    # the start-up too
    assert timed["warmup_s"].notna().all() and (timed["warmup_s"] >= 0).all()
    assert (phases.sum(axis=1) + timed["warmup_s"] <= timed["startup_s"] + 0.3).all()
    record = json.loads((study / "results/tiny/cpu/baseline/tiny/boolq/paper.json").read_text())
    times = record["provenance"]["timeline"]
    assert 0 < times["ready_s"] <= times["measured_s"] < times["end_s"]
    phases = times["phases"]  # its model's files: weights, config and tokenizer
    model = study / "results/tiny/models/tiny"
    read = [f for f in model.iterdir() if f.suffix in (".safetensors", ".json")]
    assert phases["model_bytes"] == sum(f.stat().st_size for f in read if f.name != "manifest.json")
    assert "Where the time went" in (study / "results/tiny/report/report.md").read_text()


def test_the_forecast_is_judged_on_the_studys_own_jobs(study):
    """Every timed job beside what the other records forecast for it (leave-one-out): a
    fine-tuning repeat from its sibling (measured), an SR3 point from the other count."""
    judged = pd.read_csv(study / "results/tiny/tables/forecast_judged.csv")
    counts = judged.groupby("rule").size().to_dict()
    assert counts == {"baseline": 4, "quantize": 4, "finetune": 2, "diffusion": 4}
    assert (judged.loc[judged["rule"] == "finetune", "source"] == "measured").all()
    assert set(judged.loc[judged["rule"] == "diffusion", "source"]) == {"measured"}
    assert (judged["forecast_s"] > 0).all() and (judged["measured_s"] > 0).all()
    error = judged["forecast_s"] / judged["measured_s"] - 1
    assert error.round(6).tolist() == judged["error"].round(6).tolist()
    report = (study / "results/tiny/report/report.md").read_text()
    assert "The forecast judged" in report and "finetune: median error" in report


def test_repeats_get_their_interval(study):
    """The tiny study repeats each fine-tuning and SR3 point twice: the tables give each
    point's median with its repeats' 95% interval (Fig. 2 and 3 draw the same)."""
    tables = study / "results" / "tiny" / "tables"
    points = pd.read_csv(tables / "finetune.csv")
    assert (points["repeats"] == 2).all()
    assert points["tokens/s interval"].str.endswith("(2 repeats, 95%)").all()
    sr3 = pd.read_csv(tables / "diffusion.csv")
    assert sr3["images/s interval"].str.endswith("(2 repeats, 95%)").all()
    low, high = (float(x) for x in sr3.loc[0, "images/s interval"].split(" ")[0].split("-"))
    assert 0.999 * low <= sr3.loc[0, "images/s"] <= 1.001 * high  # shown to 4 digits


def test_second_invocation_has_nothing_to_do(study):
    result = snakemake(study, "--cores", "2")
    assert result.returncode == 0
    assert "Nothing to be done" in result.stdout + result.stderr


KNOBS = [  # (config changes, the jobs they re-run besides report and all)
    ({"tasks.hellaswag.limit": 13}, {"baseline": 1}),  # the model's one baseline job
    ({"ptq.calibration_limit": {"wikitext": 4}, "tasks.boolq.limit": 11}, {"baseline": 1}),
    # one task's setting: the jobs that read it (WikiText's quantized evaluations), no other
    ({"tasks.wikitext.limit": 3}, {"baseline": 1, "quantize": 2}),
    ({"evaluation.boolq_max_length": 256}, {"baseline": 1}),
    ({"ptq.bit_lists": [[16, 8, 4], [16, 4]]}, {"cluster": 1, "quantize": 1}),
    ({"diffusion.quality.sampling_steps": 4}, {"diffusion": 4}),
    ({"diffusion.data.patches": 20}, {"prepare_dust": 1, "diffusion": 4}),
    ({"ptq.sparsity": 0.5},
     {"sensitivity": 2, "gather_sensitivity": 1, "cluster": 2, "quantize": 2}),
]  # fmt: skip


@pytest.mark.parametrize(("changes", "jobs"), KNOBS)
def test_editing_one_knob_reruns_only_what_it_affects(study, changes, jobs):
    config = json.loads(json.dumps(TINY_CONFIG))
    for path, value in changes.items():
        *parents, last = path.split(".")
        node = config
        for key in parents:
            node = node[key]
        node[last] = value
    assert planned_jobs(snakemake(study, "-n", config=config)) == {**jobs, "report": 1, "all": 1}


def test_diffusion_points_share_the_fixed_work(study):
    """Strong scaling: 4 iterations on 1 process, 2 on each of 2, the same 16 images; the
    two ranks see disjoint images; the panel holds input, SR, bicubic and truth."""
    import numpy as np

    base = study / "results" / "tiny" / "cpu" / "diffusion"
    one, two = (json.loads((base / f"devices-{n}" / "repeat-0.json").read_text()) for n in (1, 2))
    assert (one["metrics"]["iterations"], two["metrics"]["iterations"]) == (4, 2)
    assert one["metrics"]["images_processed"] == two["metrics"]["images_processed"] == 16
    assert two["metrics"]["first_epoch_images_per_rank"] == [8, 8]
    assert two["metrics"]["first_epoch_images_shared"] == 0
    assert one["parameters"]["data"]["standin"] and one["data_source"] == "standin"
    assert one["metrics"]["flops_per_image"] == two["metrics"]["flops_per_image"] > 0
    with np.load(base / "devices-2" / "repeat-0.samples.npz") as panel:
        assert {k: panel[k].shape for k in panel} == {
            "lr": (2, 1, 4, 4), "sr": (2, 1, 16, 16), "bicubic": (2, 1, 16, 16),
            "hr": (2, 1, 16, 16),
        }  # fmt: skip
    assert "Fig. 3" in (study / "results" / "tiny" / "report" / "report.md").read_text()


@pytest.fixture(scope="module")
def compared(study, tmp_path_factory):
    """The tiny study (a copy of its results folder) run again on a second system, cpu-bf16
    (evaluated and trained in bfloat16), with two knobs changed (HellaSwag's limit; one bit list
    of the two), in the same results folder; then `snakemake compare` of that one study. The
    first system's records and the shared sensitivity and assignments come out byte-identical."""
    workdir = tmp_path_factory.mktemp("second-system")
    results = workdir / "results" / "tiny"
    shutil.copytree(study / "results" / "tiny", results, symlinks=True)
    # and Snakemake's record of what made them, as in a folder the first run left
    shutil.copytree(study / ".snakemake" / "metadata", workdir / ".snakemake" / "metadata")
    first = {p: p.read_bytes() for p in (results / "cpu").rglob("*.json")}
    # the sensitivity and assignments, shared by the systems: their scan never sees the dtype
    shared = {p: p.read_bytes() for p in (results / "ptq").rglob("*") if p.is_file()}
    config = json.loads(json.dumps(TINY_CONFIG))
    config["system"] = "cpu-bf16"
    config["evaluation"]["dtype"] = config["diffusion"]["dtype"] = "bfloat16"
    config["tasks"]["hellaswag"]["limit"] = 13
    config["ptq"]["bit_lists"] = [[16, 8, 4]]  # the first run's [8, 4] has no counterpart
    config["finetune"]["repeats"] = config["diffusion"]["repeats"] = 1  # the first: 2 (time)
    config["compare"] = {"runs": [str(results)], "reference": "cpu", "out": str(workdir / "cmp")}
    result = snakemake(workdir, "--cores", "2", "all", "compare", config=config)
    assert result.returncode == 0, result.stderr[-3000:]
    assert {p: p.read_bytes() for p in (results / "cpu").rglob("*.json")} == first
    assert {p: p.read_bytes() for p in (results / "ptq").rglob("*") if p.is_file()} == shared
    return workdir / "cmp"


def test_a_second_system_keeps_the_firsts_records(compared):
    """Switching `system` re-ran nothing of the first system's (its records byte-identical,
    checked in the fixture); the report lists both systems' records."""
    report = (compared.parent / "results/tiny/report/report.md").read_text()
    table = report[report.index("## Records by system") :]
    assert "| cpu " in table and "| cpu-bf16 " in table
    records = pd.read_csv(compared.parent / "results/tiny/tables/records.csv")
    assert set(records["system"]) == {"cpu", "cpu-bf16"}


def test_two_systems_compared_part_by_part(compared):
    """Matched points per part, the ratio table, and the records a changed key left out."""
    ratios = pd.read_csv(compared / "tables" / "ratios.csv")
    speed = ratios[ratios["quantity"].isin(["tokens_per_s", "images_per_s"])]
    assert dict(zip(speed["part"], speed["points"], strict=True)) == {
        "baseline": 2, "quantized": 2, "finetune": 1, "diffusion": 2,
    }  # fmt: skip
    assert (ratios["system"] == "cpu-bf16").all() and (ratios["reference"] == "cpu").all()
    assert (ratios["ratio"] > 0).all() and (ratios["min"] <= ratios["max"]).all()
    left = pd.read_csv(compared / "tables" / "left_out.csv")
    assert sorted(left["system"] + ":" + left["task"] + ":" + left["method"]) == [
        "cpu-bf16:hellaswag:bfloat16", "cpu-bf16:hellaswag:bfloat16", "cpu:hellaswag:fp32",
        "cpu:hellaswag:fp32", "cpu:wikitext:fake [8,4]", "cpu:wikitext:nvidia [8,4]",
    ]  # fmt: skip
    hellaswag, wikitext = left[left["task"] == "hellaswag"], left[left["task"] == "wikitext"]
    assert set(hellaswag["reason"]) == {"limit: 12 here, 13 there", "limit: 13 here, 12 there"}
    assert set(wikitext["reason"]) == {"bits: [8, 4] here, [16, 8, 4] there"}  # the nearest point
    matched = pd.read_csv(compared / "tables" / "matched.csv")
    # each record's path relative to its run (its study's results folder)
    assert all(
        (Path(r) / p).is_file() for r, p in zip(matched["run"], matched["record"], strict=True)
    )
    report = (compared / "report" / "report.md").read_text()
    for title in ("Table 1, ours", "Fig. 2a", "Fig. 3", "SR3 samples", "item by item"):
        assert title in report
    # the same items on both systems: each metric's paired difference, with its interval
    paired = pd.read_csv(compared / "tables" / "paired.csv")
    assert {"baseline", "quantized"} <= set(paired["stage"]) and (
        paired["system"] == "cpu-bf16"
    ).all()
    few = paired["ci95_low"].isna()  # 4 WikiText blocks: too few for the sign-flip's interval
    assert paired.loc[few, "test"].str.endswith("too few items for a 95% interval").all()
    assert (paired.loc[few, "p"] >= 0.125).all() and (paired.loc[~few, "items"] >= 6).all()
    assert (paired["ci95_low"][~few] <= paired["difference"][~few]).all()
    assert (paired["difference"][~few] <= paired["ci95_high"][~few]).all()
    metrics = ratios[ratios["quantity"].str.endswith("(metric)")]
    assert metrics["paired_difference"].notna().all()
    assert "cpu: FP32" in report and "cpu-bf16: BF16 baseline" in report  # Table 1 by system
    assert all((compared / "report" / "figures" / f).stat().st_size > 0 for f in (
        "tradeoff.png", "finetune_scaling.png", "diffusion_scaling.png"))  # fmt: skip


ODD = {"zero": 0.0, "nan": float("nan"), "absent": None, "negative": -1.0}


def test_one_odd_record_takes_no_table_down(compared, tmp_path):
    """Each rate, energy and charge as 0, NaN, absent and negative in some records (of an older
    version, or edited by hand): the report and compare build every table; those cells are "-",
    named in a note; the records beside them are shown."""
    from accelstudy.report.build import build_report
    from accelstudy.report.compare import compare
    from accelstudy.report.outputs import REPORT_FILES, output

    results = tmp_path / "results" / "tiny"
    shutil.copytree(compared.parent / "results" / "tiny", results)
    shutil.rmtree(results / "tables"), shutil.rmtree(results / "report")
    edited = []
    for turn, stage in enumerate(("baseline", "ptq", "finetune", "diffusion")):
        paths, kinds = sorted((results / "cpu" / stage).rglob("*.json")), list(ODD) * 3
        # the last one as it was; each stage starts one kind on, so every kind is somewhere
        for path, kind in zip(paths[:-1], kinds[turn : turn + len(ODD) * 2], strict=False):
            record = json.loads(path.read_text())
            unit = "image" if stage == "diffusion" else "token"
            record["energy"] = {"status": "ok", "sources": ["rapl"], "job_j": {"total": 5.0}}
            for part, key in [("metrics", f"{unit}s_per_s"), ("energy", f"j_per_{unit}"),
                              ("cost", "units"), ("cost", "hours")]:  # fmt: skip
                record[part].pop(key, None)
                if ODD[kind] is not None:
                    record[part][key] = ODD[kind]
            path.write_text(json.dumps(record))  # as a hand would: no schema
            edited.append((path, kind))
    assert {kind for _, kind in edited} == set(ODD)
    records = sorted((results / "cpu").rglob("*.json")) + sorted(
        (results / "cpu-bf16").rglob("*.json")
    )
    records = [p for p in records if p.relative_to(results).parts[1] not in ("logs",)]
    index = build_report("tiny", records, results, system="cpu",
                         sensitivity=sorted(results.glob("ptq/*/*/sensitivity/*.csv")),
                         assignments=sorted(results.glob("ptq/*/*/*/bits-*/assignment.json")),
                         calibration={"wikitext": 4}, bit_lists=[[16, 8, 4], [8, 4]])  # fmt: skip
    assert index.is_file() and all(output(results, name).is_file() for name in REPORT_FILES)
    report = (results / "report" / "report.md").read_text()
    shown = report[report.index("## Values not shown") :]
    assert all(str(p.relative_to(results)) in shown for p, _ in edited)
    assert "tokens_per_s 0.0" in shown and "images_per_s nan" in shown
    assert "tokens_per_s None" in shown and "j_per_image -1.0" in shown
    finetune = pd.read_csv(output(results, "finetune_table"))
    assert (finetune["tokens/s"].dropna() > 0).all()  # the untouched repeat's
    cmp = compare([results], tmp_path / "cmp", reference="cpu")
    assert "## Values not shown" in (cmp.parent / "report.md").read_text()
    assert (pd.read_csv(tmp_path / "cmp" / "tables" / "ratios.csv")["ratio"].dropna() > 0).all()


def test_bad_config_fails_before_any_job(tmp_path):
    config = json.loads(json.dumps(TINY_CONFIG))
    config["tasks"]["boolq"]["protocols"] = ["harness"]
    result = snakemake(tmp_path, "--cores", "1", config=config)
    assert result.returncode != 0
    assert "config key 'tasks.boolq.protocols.0': 'harness' is not one of" in result.stderr
    assert not (tmp_path / "results").exists()


def plan_shipped(workdir: Path, name: str) -> tuple[dict[str, int], str]:
    """A study config/ ships, planned in a folder of its own: its jobs per rule, its output."""
    result = snakemake(workdir, "-n", config=yaml.safe_load((ROOT / "config" / name).read_text()))
    assert result.returncode == 0, result.stderr[-2000:]
    return planned_jobs(result), result.stdout


def test_paper_study_plans_the_published_setup(tmp_path):
    """config/paper.yaml: one baseline job (3 tasks x 2 protocols), 22 sensitivity jobs per
    task, a quantize job per task and bit list (3 recipes each) on TinyLlama; 3 models x 3 strategies x 5 card counts x 2 attention
    settings x 3 repeats of fine-tuning (those models get no baseline or PTQ jobs); planned
    without a network or a GPU (the authors' instruction data: a local file, here empty)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "psychology.parquet").touch()
    assert plan_shipped(tmp_path, "paper.yaml")[0] == {
        "prepare_data": 6, "prepare_model": 4, "baseline": 1, "sensitivity": 66,
        "gather_sensitivity": 3, "cluster": 9, "quantize": 9, "prepare_instructions": 1,
        "finetune": 270, "prepare_dust": 1, "diffusion": 3, "report": 1, "all": 1,
    }  # fmt: skip


def test_gpu_smoke_study_plans_every_part_on_one_card(tmp_path):
    """config/gpu-smoke.yaml on the gpu-workstation system: a baseline job, one sensitivity
    scan and one quantized model, a DDP and an FSDP point on one card, one SR3 point and the
    report; planned here (no card), offline (the embedded GGUF and the stand-ins)."""
    jobs, planned = plan_shipped(tmp_path, "gpu-smoke.yaml")
    assert jobs == {
        "convert_gguf": 1, "prepare_data": 3, "baseline": 1, "sensitivity": 1,
        "gather_sensitivity": 1, "cluster": 1, "quantize": 1, "prepare_instructions": 1,
        "finetune": 2, "prepare_dust": 1, "diffusion": 1, "report": 1, "all": 1,
    }  # fmt: skip
    assert "results/gpu-smoke/gpu-workstation/finetune/" in planned


def test_a_copied_results_folder_reruns_what_a_changed_setting_touches(study, tmp_path):
    """`cp -a` a study's results, run the study there with a setting changed: Snakemake has no
    metadata for the copy's paths, yet the records made under the old setting run again (and
    only they); so does a record copied over another's file. Unchanged, nothing runs."""
    shutil.copytree(study / "results", tmp_path / "results", symlinks=True)
    assert "Nothing to be done" in snakemake(tmp_path, "-n").stdout
    config = json.loads(json.dumps(TINY_CONFIG))
    config["finetune"]["learning_rate"] = 0.001
    result = snakemake(tmp_path, "-n", config=config)
    assert planned_jobs(result) == {"finetune": 2, "report": 1, "all": 1}, result.stderr[-2000:]
    assert "made under other settings than this study's now" in result.stderr
    base = tmp_path / "results/tiny/cpu/baseline/tiny"
    shutil.copy(base / "boolq/paper.json", base / "hellaswag/paper.json")
    result = snakemake(tmp_path, "-n")
    assert planned_jobs(result) == {"baseline": 1, "report": 1, "all": 1}, result.stderr[-2000:]
    assert "holds a record of task 'boolq', not 'hellaswag'" in result.stderr


def test_a_report_that_fails_leaves_the_last_good_one(study, tmp_path):
    """A record damaged after the study ran (cut short): the report job fails, naming it with
    its fix, and the last good report is put back as it was (Snakemake's update flag)."""
    shutil.copytree(study / "results", tmp_path / "results", symlinks=True)
    shutil.copytree(study / ".snakemake" / "metadata", tmp_path / ".snakemake" / "metadata")
    report = tmp_path / "results/tiny/report"
    before = {p.name: p.read_bytes() for p in (report / "index.html", report / "report.md")}
    record = tmp_path / "results/tiny/cpu/baseline/tiny/boolq/paper.json"
    record.write_text(record.read_text()[:100])  # newer than the report: it runs again
    result = snakemake(tmp_path, "--cores", "1")
    assert result.returncode != 0
    log = (tmp_path / "results/tiny/logs/report/index.log").read_text()
    assert f"{record.relative_to(tmp_path)} is not valid JSON" in log and "delete it" in log
    assert {p.name: p.read_bytes() for p in (report / "index.html", report / "report.md")} == before

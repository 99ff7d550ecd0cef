"""The machine's limit and the work counted against it: FLOP formulas held to torch's own
FlopCounterMode, stated and measured peaks, MFU, and the dtype `auto` resolves to."""

import copy
import logging
import os

import pytest
import torch
from accelstudy import flops, peak
from accelstudy.errors import ConfigError
from accelstudy.systems import check_system, load_system
from torch.utils.flop_counter import FlopCounterMode

aten = torch.ops.aten
LINEAR_OPS = (aten.mm, aten.addmm)
EMULATED = {"float32": 60e9, "bfloat16": 0.6e9}  # an AVX2-only CPU (issue: 61 vs 0.6 GFLOP/s)
NATIVE = {"float32": 65e9, "bfloat16": 150e9}  # AVX-512 BF16 or AMX


def counted(counter: FlopCounterMode, ops) -> int:
    return sum(n for op, n in counter.get_flop_counts()["Global"].items() if op in ops)


def test_forward_flops_equal_torch_counts_linears_exactly_attention_at_its_causal_half(tiny):
    """Eager attention: torch counts its bmm's (the CPU's fused SDPA kernel has no formula)."""
    model = copy.deepcopy(tiny[0])
    model.config._attn_implementation = "eager"
    config, seq = model.config.to_dict(), 24
    with FlopCounterMode(display=False) as counter:
        model(torch.randint(0, config["vocab_size"], (3, seq)))
    assert counted(counter, LINEAR_OPS) == 3 * seq * flops.linear_forward(config)
    attention = counted(counter, (aten.bmm,))
    assert attention == 2 * flops.attention_forward(config, 3 * seq * seq)
    total = counted(counter, LINEAR_OPS) + attention / 2
    assert flops.forward_per_token(config, seq) * 3 * seq == total


def test_lora_training_flops_equal_torch_counts(tiny):
    """LoRA: frozen weights' backward is their input gradient only, the adapters train; with
    every layer's input needing a gradient (the convention), linears match exactly; eager
    attention's bmm's (full s^2, forward and its two backward bmm's) are twice the causal half."""
    from peft import LoraConfig, get_peft_model

    model = copy.deepcopy(tiny[0])
    model.config._attn_implementation = "eager"
    lora = LoraConfig(r=4, lora_alpha=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    peft_model = get_peft_model(model, lora)
    peft_model.enable_input_require_grads()
    config, seq, batch = model.config.to_dict(), 16, 2
    ids = torch.randint(0, config["vocab_size"], (batch, seq))
    with FlopCounterMode(display=False) as counter:
        peft_model(input_ids=ids, labels=ids).loss.backward()
    expected = flops.training_per_token(config, seq, 4, ("q_proj", "v_proj")) * batch * seq
    attention = 3 * flops.attention_forward(config, batch * seq * seq)
    assert counted(counter, LINEAR_OPS) == expected - attention
    assert counted(counter, (aten.bmm,)) == 2 * attention
    full = flops.training_per_token(config, seq)
    assert full == 3 * flops.linear_forward(config) + attention / (batch * seq)


def test_eval_meter_counts_the_flops_of_the_rows_it_ran(tiny):
    from accelstudy.device import Device
    from accelstudy.evaluate import Meter

    model, _ = tiny
    config = model.config.to_dict()
    meter = Meter(Device("cpu"))
    meter.ran([10, 20], head_tokens=3)
    per_token = meter.metrics(config)["flops_per_token"]
    head = 2 * config["hidden_size"] * config["vocab_size"]
    work = (flops.linear_forward(config) - head) * 30 + head * 3
    assert per_token * 30 == pytest.approx(work + flops.attention_forward(config, 500))


def test_a_system_without_a_stated_peak_is_unknown_never_borrowed():
    limit = peak.peak(load_system("expanse-h100"), "cuda", "bfloat16", ranks=4, threads=1)
    assert limit["status"] == "unknown" and "flops_per_s" not in limit
    assert "SXM or PCIe" in limit["source"]
    gaudi = peak.peak(load_system("voyager"), "hpu", "float32", ranks=8, threads=1)
    assert gaudi["status"] == "unknown"
    assert peak.utilization(gaudi, 1e12)["mfu"] is None


def test_a_stated_peak_carries_its_datasheet_and_gives_the_fraction():
    limit = peak.peak(load_system("perlmutter"), "cuda", "bfloat16", ranks=4, threads=1)
    assert limit["flops_per_s"] == 4 * 312e12
    assert limit["source"].startswith("datasheet: https://")
    v100 = peak.peak(load_system("expanse"), "cuda", "float32", ranks=1, threads=1)
    assert v100["flops_per_s"] == 15.7e12
    assert peak.utilization(limit, 312e12)["mfu"] == pytest.approx(0.25)


@pytest.mark.parametrize(
    "stated",
    ["fast", {"bfloat16": 1e12}, {"bfloat16": "1e12", "doc": "x"}, {"float32": -1, "doc": "x"}],
)
def test_a_bad_peak_in_a_system_file_stops_with_one_line(stated):
    spec = {"name": "x", "device": "cuda", "cards_per_node": 1, "peak_flops": stated}
    with pytest.raises(ConfigError, match=r"x\.yaml: key 'peak_flops"):
        check_system(spec, "x.yaml: key")


def test_every_shipped_system_states_or_measures_its_peak():
    from accelstudy.paths import SYSTEMS

    for path in SYSTEMS.glob("*.yaml"):
        system = load_system(path.stem)
        measured = system.device == "cpu" and system.peak_flops == "measured"
        by_name = system.device != "cpu" and system.peak_flops == peak.BY_NAME
        assert measured or by_name or system.peak_flops.get("doc"), path


def test_every_row_of_the_gpu_table_is_dense_sourced_and_in_flops():
    """A datasheet address per row, figures in FLOP/s (not TFLOP/s), and a card's tensor peak
    at most ~16x its FP32 (the sparse figures, twice the dense ones, would break that on none;
    the FP32 column is not TF32)."""
    rows = peak.gpu_peaks()
    assert {"NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB"} <= set(rows)
    for name, row in rows.items():
        assert row["doc"].startswith("https://"), name
        fp32 = float(row["float32"])
        assert 1e12 < fp32 < 1e14, name
        for dtype in ("bfloat16", "float16", "float8_e4m3fn"):
            if row[dtype]:
                assert 1e13 < float(row[dtype]) < 3e15 and float(row[dtype]) / fp32 <= 30, name
    # the form factor is in the name: PCIe and SXM differ
    assert float(rows["NVIDIA H100 PCIe"]["bfloat16"]) < float(
        rows["NVIDIA H100 80GB HBM3"]["bfloat16"]
    )


@pytest.fixture
def workstation_job(tmp_path, monkeypatch):
    """A job on the gpu-workstation system whose card torch names as the test says (the one
    boundary mocked: torch.cuda.get_device_name)."""
    from accelstudy.device import Device
    from accelstudy.records import Job

    def named(name: str) -> Job:
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: name)
        job = Job.from_flags(system="gpu-workstation", study="s", out=tmp_path / "r.json")
        job.__dict__["device"] = Device("cuda")  # no card here: the kind, not a probe
        job.resolve_dtype("bfloat16", "cuda")
        return job

    return named


def test_a_workstation_card_takes_its_peak_from_the_row_of_the_name_torch_reports(
    workstation_job,
):
    block = workstation_job("NVIDIA H100 PCIe").utilization(rate=1000.0, flops_per_unit=7.56e10)
    assert block["status"] == "ok" and block["flops_per_s"] == 756e12
    assert (
        block["device_name"] == "NVIDIA H100 PCIe" and block["table"] == "resources/gpu_peaks.csv"
    )
    assert "datasheet: https://" in block["source"] and "row 'NVIDIA H100 PCIe'" in block["source"]
    assert block["mfu"] == pytest.approx(0.1)
    sxm = workstation_job("NVIDIA H100 80GB HBM3").utilization(1000.0, 7.56e10)
    assert sxm["flops_per_s"] == 989e12  # the other form factor: another row


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("NVIDIA H100", "'NVIDIA H100' is not a row of resources/gpu_peaks.csv"),
        ("NVIDIA GeForce RTX 4090", "is not a row"),
        ("Tesla V100-SXM2-32GB", "no bfloat16 figure in its row"),
    ],
)
def test_a_card_without_a_row_or_figure_has_no_peak_and_says_why(workstation_job, name, why):
    block = workstation_job(name).utilization(rate=1000.0, flops_per_unit=1e9)
    assert block["status"] == "unknown" and block["mfu"] is None and "flops_per_s" not in block
    assert why in block["source"] and block["device_name"] == name


def test_before_a_job_a_by_name_system_has_no_peak_to_plan_with():
    limit = peak.peak(load_system("gpu-workstation"), "cuda", "bfloat16", ranks=1, threads=1)
    assert limit["status"] == "unknown" and "known only inside a job" in limit["source"]


def test_the_cpu_probe_is_cached_by_cpu_threads_and_kernel_choice(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []
    monkeypatch.setattr(peak, "gemm_rate", lambda name: calls.append(name) or EMULATED[name])
    first = peak.cpu_rates(1)
    assert first["where"] == "inside a job" and first["flops_per_s"] == EMULATED and len(calls) == 2
    assert peak.cpu_rates(1)["flops_per_s"] == EMULATED and len(calls) == 2  # cached
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "")  # another kernel choice: another entry
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "SSE41" if isa != "SSE41" else "AVX2")
    assert peak.cpu_rates(1, probe_if_missing=False) is None
    limit = peak.peak(load_system("cpu"), "cpu", "float32", ranks=2, threads=1)
    assert limit["flops_per_s"] == 2 * EMULATED["float32"] and "inside a job" in limit["source"]


def test_a_corrupt_probe_cache_is_probed_anew(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(peak, "gemm_rate", lambda name: EMULATED[name])
    peak.cache_file().parent.mkdir(parents=True)
    peak.cache_file().write_text("{not json")
    assert peak.cpu_rates(1, probe_if_missing=False) is None
    assert peak.cpu_rates(1)["flops_per_s"] == EMULATED
    assert peak.cpu_rates(1, probe_if_missing=False)["where"] == "inside a job"


def test_the_real_probe_measures_both_dtypes(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    rates = peak.probe(1)["flops_per_s"]
    assert set(rates) == {"float32", "bfloat16"} and min(rates.values()) > 1e8


@pytest.mark.parametrize(
    ("rates", "system", "device", "expected"),
    [
        (EMULATED, "cpu", "cpu", "float32"),
        (NATIVE, "cpu", "cpu", "bfloat16"),
        (EMULATED, "cpu-bf16", "cpu", "bfloat16"),  # offers nothing else
        (None, "perlmutter", "cuda", "bfloat16"),
        (None, "expanse", "cuda", "float32"),  # a V100 has no bfloat16
    ],
)
def test_auto_takes_what_the_device_computes_natively(rates, system, device, expected, monkeypatch):
    monkeypatch.setattr(peak, "cpu_rates", lambda threads: {"flops_per_s": rates})
    dtype, reason = peak.resolve_dtype("auto", load_system(system), device, 1)
    assert dtype == expected and reason.startswith("auto: ")


def test_bfloat16_asked_on_a_cpu_that_emulates_it_runs_with_a_warning(monkeypatch, caplog):
    monkeypatch.setattr(peak, "cpu_rates", lambda threads: {"flops_per_s": EMULATED})
    with caplog.at_level(logging.WARNING, logger="accelstudy"):
        assert peak.resolve_dtype("bfloat16", load_system("cpu"), "cpu", 1)[0] == "bfloat16"
    assert "bfloat16 GEMM 0.6 vs float32 60.0 GFLOP/s" in caplog.text


def test_the_forecast_takes_the_peak_a_record_would(monkeypatch):
    """plan-time's peak (forecast._peak) is peak.peak's at one thread a rank, without probing:
    a stated figure, a cached probe, and unknown where the record would say unknown (a card
    named only inside a job, a CPU system that states another dtype, no probe cached)."""
    from dataclasses import replace

    from accelstudy.forecast import _peak

    monkeypatch.setattr(peak, "cached_probes", lambda: {peak.probe_key(1): CACHED})
    cpu = load_system("cpu")
    cases = [
        (load_system("perlmutter"), "bfloat16", 4),
        (load_system("expanse-h100"), "bfloat16", 1),
        (load_system("gpu-workstation"), "bfloat16", 1),
        (cpu, "float32", 2),
        (replace(cpu, peak_flops={"float32": 1e12, "doc": "x"}), "bfloat16", 2),
    ]
    for system, dtype, cards in cases:
        record = peak.peak(system, system.device, dtype, cards, 1, probe_if_missing=False)
        assert _peak(system, dtype, cards) == record.get("flops_per_s"), system.name
    assert [_peak(s, d, c) for s, d, c in cases] == [4 * 312e12, None, None, 2 * 5e10, None]
    monkeypatch.setattr(peak, "cached_probes", dict)
    assert _peak(cpu, "float32", 2) is None  # nothing cached: no probe run at plan time


CACHED = {"flops_per_s": {"float32": 5e10, "bfloat16": 1e9}, "where": "at set-up"}

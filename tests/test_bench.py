"""Every benchmark's smoke run (`--tiny`), once each: it prints its ratio lines, holds every
shipped bound, and fails on one figure given a bound that no value meets (so a bound that
fails is reported and fails the run, and `make bench` with it). Each runs as `python
bench/<script>` would, but in this test's process: torch and transformers are imported here
already, and a bench's own import of them (7-8 s on a 2-core AVX2 machine) would be most of
its smoke run."""

import os
import re
import runpy
import signal
import sys
import tempfile

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))

from common import judge

# the benchmarks: bench/'s scripts; its helpers (common.py, the references the tests share too)
# have no __main__
SCRIPTS = sorted(p.name for p in (ROOT / "bench").glob("*.py") if "__main__" in p.read_text())
# per script: the figure given an impossible bound (LOW above HIGH: no value is within) and
# what a --tiny run can judge of it, held here as its bound was (the run's other bounds are
# its own --tiny ones, each reported on a "bound:" line that must say within)
CHECKED = {
    "diffusion.py": ("mfu_2", 1e-9, 1.0),  # not above the measured dense rate
    "finetune.py": ("fsdp_vs_ddp", 1e-9, 2.0),
    "forecast_published.py": ("forecast_ratio_max", 0.67, 1.5),  # no job: the full run's bound
    "gpu_steps.py": (
        "kernel_fraction",
        1e-9,
        1.0,
    ),  # a step's kernels within its wall time  # the same cores: not twice DDP's speed
    "multiple_choice.py": ("boolq_max_dll", 0.0, 1e-4),  # the same log-likelihoods
    "peak.py": ("bf16_over_fp32_1t", 1e-9, None),  # both rates measured
    "perplexity.py": ("mfu", 1e-9, 1.0),  # not above the measured dense rate
    "planner.py": ("card_error_max", -0.5, 1.0),  # one 100 MB rank beside the suite: +-20%
    "prefix_reuse.py": ("prefix_over_naive", 1e-9, 1.5),  # a tiny model: all overhead
    "startup.py": ("imports", 0.01, 100.0),  # one run on a busy machine: only measured
    "vs_lm_eval.py": ("lm_eval_over_ours", 0.5, None),  # two pages: mostly imports
    "vs_trainer.py": ("ours_over_trainer", 1e-9, None),  # a tiny model's ms steps
}
TIMEOUT_S = 300  # one smoke run at most
BOUND = re.compile(r"^bound: (\S+) (\S+) (within|OUTSIDE) \[", re.MULTILINE)


def test_judge_holds_each_figure_to_its_bound(capsys):
    figures = {"a": 1.0, "b": 2.0}
    assert judge(figures, {"a": (0.5, 1.5), "b": (None, 2.0)}, []) == 0
    assert judge(figures, {"a": (0.5, 1.5)}, [("b", (2.5, None))]) == 1  # --bound adds/replaces
    assert judge(figures, {"a": (1.5, None)}, []) == 1
    assert judge(figures, {"c": (None, None)}, []) == 1  # a bound on no figure fails
    assert judge({"a": float("nan")}, {"a": (None, None)}, []) == 0  # open on both sides
    assert judge({"a": float("nan")}, {"a": (0.0, None)}, []) == 1  # NaN: never within
    lines = capsys.readouterr().out.splitlines()
    assert "bound: b 2 OUTSIDE [2.5, ]" in lines
    assert any(line.startswith("bound: c: no such figure") for line in lines)


def run_script(script: str, args: list[str], tmp_path, monkeypatch, capfd) -> tuple[int, str, str]:
    """`python bench/<script> <args>` from the checkout, in this process: its exit status,
    stdout and stderr (its subprocesses' too). Its temporary files under `tmp_path`."""
    import torch

    path = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"  # `accelstudy`
    for name, value in {
        "PATH": path,
        "TMPDIR": str(tmp_path),
        "HF_DATASETS_CACHE": str(tmp_path),
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(sys, "argv", [f"bench/{script}", *args])
    monkeypatch.chdir(ROOT)
    threads, status = torch.get_num_threads(), 0
    capfd.readouterr()

    def overdue(*_: object) -> None:  # as the subprocess's timeout was: a hung bench fails
        raise TimeoutError(f"bench/{script} {' '.join(args)}: over {TIMEOUT_S} s")

    handler = signal.signal(signal.SIGALRM, overdue)
    signal.alarm(TIMEOUT_S)
    try:
        runpy.run_path(str(ROOT / "bench" / script), run_name="__main__")
    except SystemExit as exit:  # sys.exit(main()), or SystemExit("why") as Python prints it
        status = exit.code if isinstance(exit.code, int) else 1
        if exit.code is not None and not isinstance(exit.code, int):
            print(exit.code, file=sys.stderr)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, handler)
        torch.set_num_threads(threads)
    out, err = capfd.readouterr()
    return status, out, err


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_bench_smoke_run_holds_its_bounds_and_can_fail(script, tmp_path, monkeypatch, capfd):
    # a script not (yet) in CHECKED: a bound on no figure, which judge fails all the same
    figure, low, high = CHECKED.get(script, ("no_such_figure", None, None))
    args = ["--tiny", "--bound", f"{figure}=1:0"]
    status, out, err = run_script(script, args, tmp_path, monkeypatch, capfd)
    shown = out[-3000:] + err[-3000:]
    assert status == 1 and "Traceback" not in err, shown  # judged, not crashed
    assert re.search(r"^ratio: .*\d\.\d+x", out, re.MULTILINE), shown
    bounds = {name: (float(value), verdict) for name, value, verdict in BOUND.findall(out)}
    if script in CHECKED:
        value, verdict = bounds.pop(figure)
        assert verdict == "OUTSIDE", shown  # the impossible bound, named
        assert (low is None or value >= low) and (high is None or value <= high), shown
        assert "no such figure" not in out, shown
    else:
        assert out.count("no such figure") == 1, shown
    assert {name: v for name, (_, v) in bounds.items() if v != "within"} == {}, shown


def test_make_bench_runs_every_benchmark():
    """The full runs stay manual: `make bench` names each script (and stops at one that
    exits non-zero: a figure outside its bound)."""
    makefile = (ROOT / "Makefile").read_text()
    assert [s for s in SCRIPTS if f"$(BIN)/python bench/{s}\n" not in makefile] == []

"""bench/gpu.sh, the GPU figures in one prepared run: on a CPU, its dry run lists every step,
and every step's command names a file and flags that exist (a renamed flag fails here, not on
the card)."""

import re
import shlex
import subprocess

from tests.conftest import ROOT

STEPS = ("smoke", "vs_trainer", "startup", "planner", "steps")


def dry_run(*args: str) -> subprocess.CompletedProcess:
    command = ["bash", "bench/gpu.sh", "--dry-run", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=30)


def test_dry_run_lists_every_step_with_a_command_that_exists():
    done = dry_run("--wheels", "/wheels", "--out", "/tmp/x.json")
    assert done.returncode == 0, done.stderr
    lines = dict(re.findall(r"^(\w+)(?: \(limit \d+ s\))?: (.*)$", done.stdout, re.MULTILINE))
    assert list(lines) == ["install", *STEPS, "results"]
    assert "--no-index" in lines["install"] and "/wheels/*.whl" in lines["install"]
    assert lines["results"] == "/tmp/x.json"
    for step in STEPS[1:]:
        words = shlex.split(lines[step])
        script = ROOT / words[1]
        assert script.is_file(), f"{step}: {words[1]} is not a file"
        flags = [w for w in words[2:] if w.startswith("--")]
        text = script.read_text() + (ROOT / "bench/common.py").read_text()  # common's parser
        declared = set(re.findall(r'add_argument\(\s*"(--[\w-]+)"', text))
        assert [f for f in flags if f not in declared] == [], f"{step}: a flag it lacks"
    study = shlex.split(lines["smoke"])[shlex.split(lines["smoke"]).index("--configfile") + 1]
    assert (ROOT / study).is_file()


def test_unknown_argument_is_one_line():
    done = subprocess.run(["bash", "bench/gpu.sh", "--bogus"], cwd=ROOT, capture_output=True,
                          text=True, timeout=30)  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--bogus" in done.stderr

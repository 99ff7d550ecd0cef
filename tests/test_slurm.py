"""The tiny study through a real two-node SLURM cluster and the SLURM executor plugin.

tests/slurm/cluster.sh starts munged, slurmctld and a slurmd per node (Debian's packages, as
plain processes on this machine), two fake GPUs per node. The scheduler's own job records
(`scontrol show job`) are then compared with what profiles/slurm-test promises for each
rule; the fine-tuning and SR3 points span both nodes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]
CLUSTER = ROOT / "tests" / "slurm" / "cluster.sh"
PROFILE = ROOT / "profiles" / "slurm-test"
ACCOUNT = "ci-project"
SUBMITTED_RULES = {"baseline", "sensitivity", "quantize", "finetune", "diffusion"}
POINTS = {"finetune", "diffusion"}  # 2 cards: one per node
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol")


@pytest.fixture(scope="module")
def cluster():
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing:
        reason = f"SLURM is not installed ({', '.join(missing)} missing): run {CLUSTER} install"
        if os.environ.get("CI") or os.environ.get("ACCELSTUDY_REQUIRE_SLURM"):
            pytest.fail(reason)
        pytest.skip(reason)
    # short path: munge's socket path must stay under the 108-byte Unix socket limit
    state = Path(tempfile.mkdtemp(prefix="slurm-", dir="/tmp"))
    try:
        subprocess.run([str(CLUSTER), "start", str(state)], check=True, timeout=120)
        yield {**os.environ, "SLURM_CONF": str(state / "slurm.conf")}
    finally:
        subprocess.run([str(CLUSTER), "stop", str(state)], check=False, timeout=120)
        shutil.rmtree(state, ignore_errors=True)


def run_through_slurm(env: dict, workdir: Path) -> subprocess.CompletedProcess:
    """The README's command: the profile brings its own tiny study (.test/config.yaml + slurm.yaml)."""
    cmd = [sys.executable, "-m", "snakemake", "--profile", "profiles/slurm-test",
           "--directory", str(workdir)]  # fmt: skip
    env = {**env, "ACCELSTUDY_ACCOUNT": ACCOUNT}
    # its own session: the plugin's signal handling must not reach pytest
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1500, start_new_session=True)  # fmt: skip


@pytest.fixture(scope="module")
def slurm_study(cluster, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("slurm-study")
    result = run_through_slurm(cluster, workdir)
    assert result.returncode == 0, result.stderr[-4000:]
    return workdir, result


def scheduler_records(env: dict) -> list[dict[str, str]]:
    """Every job slurmctld still holds (MinJobAge keeps them), as key=value dicts."""
    out = subprocess.run(["scontrol", "show", "job", "-o"], env=env, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    jobs = []
    for line in out.splitlines():
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if "JobId" in fields:
            jobs.append(fields)
    return jobs


def rule_of(job: dict[str, str]) -> str:
    """The plugin comments each job `rule_<name>_wildcards_<values>`."""
    comment = job["Comment"].removeprefix("rule_")
    return comment.split("_wildcards_")[0]


def promised(rule: str) -> dict:
    """What profiles/slurm-test asks for a rule's first attempt."""
    profile = yaml.safe_load((PROFILE / "config.yaml").read_text())
    values = {**profile["default-resources"], **profile["set-resources"].get(rule, {})}
    evaluated = {
        name: eval(str(value), {"attempt": 1}) if name != "slurm_account" else ACCOUNT
        for name, value in values.items()
    }
    evaluated["threads"] = profile["set-threads"][rule]
    return evaluated


def forecast_minutes(rule: str) -> int:
    """The time limit the forecast gives the rule's jobs at submission (no records yet): each
    tiny record's forecast x margin is below the floor, so each asks for MIN_MINUTES; a job
    writing several (the baseline's 3, quantize's 2 recipes) asks for the sum (one job a rule)."""
    from accelstudy.config import validate_config
    from accelstudy.forecast import StudyEstimates
    from accelstudy.systems import load_system
    from snakemake.utils import update_config

    config = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())
    update_config(config, yaml.safe_load((ROOT / ".test" / "slurm.yaml").read_text()))
    config = validate_config(config)
    study = StudyEstimates(config, load_system("slurm-test"), seen=[])
    return sum(f.minutes(1, None) for f in study.all() if f.work.rule == rule)


def test_tiny_study_completes_through_slurm(slurm_study):
    workdir, _ = slurm_study
    base = workdir / "results" / "tiny"
    assert (base / "report" / "index.html").is_file()
    base /= "slurm-test"  # the measuring rules' records: one root per system
    wiki = json.loads((base / "baseline" / "tiny" / "wikitext" / "paper.json").read_text())
    assert wiki["system"] == "slurm-test"
    assert 300 < wiki["metrics"]["perplexity"] < 800  # a random model: near |V|
    fake = base / "ptq" / "tiny" / "wikitext" / "layer" / "bits-16-8-4" / "fake.json"
    assert json.loads(fake.read_text())["metrics"]["compression_ratio"] > 1


def test_each_job_asked_for_what_the_profile_promises(slurm_study, cluster):
    jobs = [job for job in scheduler_records(cluster) if job.get("Account") == ACCOUNT]
    by_rule: dict[str, list[dict]] = {}
    for job in jobs:
        by_rule.setdefault(rule_of(job), []).append(job)
    # only GPU work went to the scheduler; data, clustering and report ran locally
    assert set(by_rule) == SUBMITTED_RULES
    # one baseline job (3 evaluations), 1 sensitivity scan, 1 bit list (2 recipes), 2 points
    assert {rule: len(v) for rule, v in by_rule.items()} == {
        "baseline": 1, "sensitivity": 1, "quantize": 1, "finetune": 1, "diffusion": 1,
    }  # fmt: skip
    for rule, rule_jobs in by_rule.items():
        want = promised(rule)
        for job in rule_jobs:
            assert job["JobState"] == "COMPLETED", job
            assert job["Partition"] == want["slurm_partition"]
            assert job["Features"] == want["constraint"]
            assert job["MinMemoryNode"] == f"{want['mem_mb']}M"
            hours, minutes = divmod(forecast_minutes(rule), 60)
            assert job["TimeLimit"] == f"{hours:02d}:{minutes:02d}:00"
            nodes = 2 if rule in POINTS else 1  # a point: its GPUs per node, a task per node
            tres = "TresPerNode" if rule in POINTS else "TresPerJob"
            assert job[tres] == f"gres:gpu:{want.get('gpu', 1)}"
            assert int(job["NumNodes"]) == nodes
            assert int(job["NumCPUs"]) == want["threads"] * nodes


@pytest.mark.parametrize(
    ("rule", "record"),
    [("finetune", "finetune/tiny/ddp/fused/cards-2/repeat-0.json"),
     ("diffusion", "diffusion/devices-2/repeat-0.json")],
)  # fmt: skip
def test_two_node_points_ran_a_rank_on_each_node(rule, record, slurm_study, cluster):
    """`srun --overlap` started a torchrun on each node of the job (its node list asked of
    SLURM by job id); the ranks met, and the record names the node each rank ran on."""
    workdir, _ = slurm_study
    record = json.loads((workdir / "results" / "tiny" / "slurm-test" / record).read_text())
    metrics = record["metrics"]
    # in rank order; c10d numbers the nodes' agents as they join, so either node may be rank 0
    assert metrics["status"] == "ok" and sorted(metrics["rank_hosts"]) == ["n1", "n2"]
    job = {j["JobId"]: j for j in scheduler_records(cluster)}[
        record["provenance"]["scheduler"]["job_id"]
    ]
    assert rule_of(job) == rule and job["NodeList"] == "n[1-2]"
    if rule == "finetune":
        assert metrics["steps"] == 4 and len(metrics["model_state_bytes"]) == 2  # per rank


def test_records_name_the_slurm_job_that_wrote_them(slurm_study, cluster):
    workdir, _ = slurm_study
    jobs = {job["JobId"]: job for job in scheduler_records(cluster)}
    base = workdir / "results" / "tiny" / "slurm-test"
    for path in [
        *base.joinpath("baseline").rglob("*.json"),
        *base.joinpath("ptq").rglob("*/fake.json"),
    ]:
        scheduler = json.loads(path.read_text())["provenance"]["scheduler"]
        assert scheduler["kind"] == "slurm"
        job = jobs[scheduler["job_id"]]
        assert job["Account"] == ACCOUNT
        assert (
            rule_of(job) in ("baseline", "quantize") and job["Partition"] == scheduler["partition"]
        )
        cards = int(job["TresPerJob"].rsplit(":", 1)[1])
        # the job saw exactly the GPUs SLURM bound to it
        assert len(scheduler["gpus"].split(",")) == cards
        if "job_gpus" in scheduler:
            assert len(scheduler["job_gpus"].split(",")) == cards


def test_second_run_submits_nothing(slurm_study, cluster):
    workdir, _ = slurm_study
    before = len(scheduler_records(cluster))
    again = run_through_slurm(cluster, workdir)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Nothing to be done" in again.stdout + again.stderr
    assert len(scheduler_records(cluster)) == before

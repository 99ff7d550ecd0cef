"""Each site profile, dry-run on config/paper.yaml without a cluster.

The dry run prints every job's threads and resources as Snakemake evaluated them from the
profile; the SLURM plugin's own `get_submit_command` turns those into the sbatch line the
site would receive, so the assertions read like the scheduler arguments themselves.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from tests.conftest import ROOT

pytestmark = pytest.mark.e2e
ACCOUNT = "m1234"


class JobResources(dict):
    """The mapping-with-attributes view the plugin expects of `job.resources`."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError as missing:
            raise AttributeError(name) from missing


class PlannedJob:
    def __init__(self, rule: str, threads: int, resources: dict, outputs: list[str]) -> None:
        self.name, self.threads, self.resources = rule, threads, JobResources(resources)
        self.outputs = outputs  # its output files (a baseline or quantize job's: its records')
        self.output = outputs[0] if outputs else ""

    def is_group(self) -> bool:
        return False

    @property
    def cards(self) -> int:
        """The point's cards: `gpu` on one node, `--gres=gpu:N` per node across nodes."""
        per_node = int(str(self.resources.get("gres") or "0").rsplit(":", 1)[-1])
        return self.resources["gpu"] or per_node * self.resources["nodes"]


PLANS: dict[tuple, subprocess.CompletedProcess] = {}  # one dry run per distinct command


def dry_run(workdir: Path, profile: str, *args: str, account: str | None = ACCOUNT, **extra):
    """A dry run's output; the same command planned again (another test) is not re-run."""
    key = (profile, args, account, tuple(sorted(extra.items())))
    if key in PLANS:
        return PLANS[key]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELSTUDY_")}
    if account:
        env["ACCELSTUDY_ACCOUNT"] = account
    env.update(extra)
    (workdir / "data").mkdir(exist_ok=True)  # the paper's instruction data, a local file
    (workdir / "data" / "psychology.parquet").touch()
    cmd = [sys.executable, "-m", "snakemake", "--profile", f"profiles/{profile}",
           "--directory", str(workdir), "--dry-run", "--cores", "256", *args]  # fmt: skip
    PLANS[key] = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return PLANS[key]


def _value(text: str):
    return int(text) if text.isdigit() else text


def planned_jobs(stdout: str) -> list[PlannedJob]:
    """Rule, threads and resources of every job block in a dry run's output."""
    jobs, rule, threads, outputs = [], None, 1, []
    for line in stdout.splitlines():
        if line.startswith(("rule ", "localrule ")) and line.endswith(":"):
            rule, threads = line.split()[1].rstrip(":"), 1
        elif rule and line.strip().startswith("output:"):
            parts = line.split(":", 1)[1].split(",")
            outputs = [part.strip().removesuffix(" (update)") for part in parts]
        elif rule and line.strip().startswith("threads:"):
            threads = int(line.split(":")[1])
        elif rule and line.strip().startswith("resources:"):
            items = line.split(":", 1)[1].split(", ")
            resources = {k.strip(): _value(v) for k, _, v in (i.partition("=") for i in items)}
            jobs.append(PlannedJob(rule, threads, resources, outputs))
            rule = None
    return jobs


def executor_settings(profile: str) -> SimpleNamespace:
    """The plugin settings a profile sets (`slurm-requeue: true` -> settings.requeue)."""
    config = yaml.safe_load((ROOT / "profiles" / profile / "config.yaml").read_text())
    names = ("requeue", "no_requeue", "qos", "reservation")
    return SimpleNamespace(**{n: config.get("slurm-" + n.replace("_", "-")) for n in names})


def sbatch_line(job: PlannedJob, settings: SimpleNamespace | None = None) -> str:
    """The sbatch call snakemake-executor-plugin-slurm builds for this job."""
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    account = job.resources.get("slurm_account")
    partition = job.resources.get("slurm_partition")
    params = {
        "run_uuid": "plan", "slurm_logfile": "plan.log", "comment_str": f"rule_{job.name}",
        "account": f"-A {account}" if account else "",
        "partition": f"-p {partition}" if partition else "", "workdir": "",
    }  # fmt: skip
    return get_submit_command(job, params, settings=settings) + set_gres_string(job)


def one_per_rule(workdir: Path, profile: str, *args: str, **env: str) -> dict[str, str]:
    """The sbatch line of each rule's jobs (fine-tuning and SR3 points differ by their cards)."""
    result = dry_run(workdir, profile, *args, **env)
    assert result.returncode == 0, result.stderr[-3000:]
    lines: dict[str, set[str]] = {}
    settings = executor_settings(profile)
    for job in planned_jobs(result.stdout):
        if job.name not in ("finetune", "diffusion"):  # time limits: each job's own forecast
            line = re.sub(r" -t \d+", "", sbatch_line(job, settings))
            lines.setdefault(job.name, set()).add(line)
    # every job of a rule asks for the same thing on its first attempt, but its time
    assert all(len(v) == 1 for v in lines.values()), lines
    return {rule: v.pop() for rule, v in lines.items()}


def flags(line: str) -> set[str]:
    """sbatch options as a set, with `--mem 64000`-style pairs joined."""
    parts, out = line.split(), set()
    for i, part in enumerate(parts):
        if part in ("-A", "-p", "-t", "-C", "--mem"):
            out.add(f"{part} {parts[i + 1]}")
        elif part.startswith("--") and "=" in part:
            out.add(part)
    return out


def test_perlmutter_jobs(tmp_path):
    """One-GPU jobs in QOS shared (charged a quarter node); the paper's `regular` one variable
    away."""
    plan = one_per_rule(tmp_path, "perlmutter")
    common = {"-A m1234", "-C gpu", "--qos=shared", "--gpus=1", "--cpus-per-task=32"}
    assert all(" --requeue" in line for line in plan.values())  # preempted: back in the queue
    assert common | {"--mem 64000"} <= flags(plan["baseline"])
    assert common | {"--mem 64000"} <= flags(plan["sensitivity"])
    assert common | {"--mem 64000"} <= flags(plan["quantize"])
    # the profile names no partition (Perlmutter selects GPU nodes by constraint and QOS;
    # the plugin then passes the cluster's default from sinfo), and no task geometry, so
    # the plugin starts one copy of the job rather than one per GPU
    assert not any(f.startswith(("-p ", "--ntasks")) for f in flags(plan["baseline"]))
    paper = one_per_rule(tmp_path, "perlmutter", ACCELSTUDY_SLURM_QOS_UNDER_NODE="regular")
    assert "--qos=regular" in flags(paper["baseline"])


def finetune_lines(workdir: Path, profile: str) -> dict[int, set[str]]:
    """Cards -> the sbatch flags of the paper sweep's points with that many cards."""
    result = dry_run(workdir, profile)
    assert result.returncode == 0, result.stderr[-3000:]
    settings = executor_settings(profile)
    jobs = [job for job in planned_jobs(result.stdout) if job.name == "finetune"]
    assert len(jobs) == 3 * 3 * 5 * 2 * 3  # models x strategies x cards x attention x repeats
    return {job.cards: flags(sbatch_line(job, settings)) for job in jobs}


def test_finetune_points_ask_for_their_cards_and_nodes(tmp_path):
    """Perlmutter and Expanse nodes have 4 GPUs: 6 and 8 cards take two nodes, as the
    plugin's multi-node (MPI) jobs: one task per node, the same GPUs on each node."""
    plan = finetune_lines(tmp_path, "perlmutter")
    for cards in (1, 2, 4):
        qos = "--qos=regular" if cards == 4 else "--qos=shared"  # under a node: its share
        assert {f"--gpus={cards}", "--nodes=1", qos, "-C gpu",
                f"--mem {64000 * cards}"} <= plan[cards]  # fmt: skip
        assert not any(f.startswith("--ntasks") for f in plan[cards])
    for cards in (6, 8):
        assert {f"--gres=gpu:{cards // 2}", "--nodes=2", "--ntasks=2", "--cpus-per-task=32",
                "--mem 256000"} <= plan[cards]  # fmt: skip
        assert not any(f.startswith("--gpus") for f in plan[cards])
    plan = finetune_lines(tmp_path, "expanse")
    assert {"-p gpu-shared", "--nodes=1", "--gpus=2"} <= plan[2]
    assert {"-p gpu", "--nodes=2", "--ntasks=2", "--gres=gpu:4", "--mem 368000"} <= plan[8]
    h100 = dry_run(tmp_path, "expanse", "--config", "system=expanse-h100")
    eight = [j for j in planned_jobs(h100.stdout) if j.name == "finetune" and j.cards == 8]
    assert "--gres=gpu:h100:4" in flags(sbatch_line(eight[0], executor_settings("expanse")))


def jobstep_call(job: PlannedJob, monkeypatch) -> str:
    """What the plugin's job step runs inside the allocation for `job` (its Popen caught)."""
    import logging

    import snakemake_executor_plugin_slurm_jobstep as jobstep

    calls = []

    class Started:
        def __init__(self, call, **_):
            calls.append(call)
            self.stdin = None

        def wait(self):
            return 0

    monkeypatch.setattr(jobstep.subprocess, "Popen", Started)
    settings = SimpleNamespace(pass_command_as_script=False, array_execs="")
    step = SimpleNamespace(
        workflow=SimpleNamespace(executor_settings=settings), job_array_task=False,
        gpu_job=None, logger=logging.getLogger("jobstep"), format_job_exec=lambda _: "JOB",
        **dict.fromkeys(["report_job_submission", "report_job_success", "report_job_error"],
                        lambda _: None),
    )  # fmt: skip
    jobstep.Executor.run_job(step, job)
    return calls[0]


@pytest.mark.parametrize("profile", ["perlmutter", "expanse"])
def test_an_eight_card_point_runs_across_two_nodes(profile, tmp_path, monkeypatch):
    """The job step runs the point's own command in the batch step (no `srun -n1`, which
    SLURM refuses across nodes); the command starts one torchrun per node by `srun --overlap`
    with the job's cores and cards on each, the rendezvous on the job's first node."""
    from accelstudy import launch
    from accelstudy.systems import load_system

    result = dry_run(tmp_path, profile)
    points = [j for j in planned_jobs(result.stdout) if j.name == "finetune"]
    eight, one = next(j for j in points if j.cards == 8), next(j for j in points if j.cards == 1)
    # every point's job runs its command in the batch step (a one-node point too: `mpi` is
    # one of its resources, empty, so no task layout is asked of SLURM)
    assert jobstep_call(eight, monkeypatch) == jobstep_call(one, monkeypatch) == "JOB"
    baseline = next(j for j in planned_jobs(result.stdout) if j.name == "baseline")
    assert jobstep_call(baseline, monkeypatch).startswith("srun -n1")  # the others: a step
    scontrol = {"job": ["JobId=7", "NodeList=nid[1-2]"], "hostnames": ["nid1", "nid2"]}
    scontrol["node"] = ["NodeName=nid1", "NodeAddr=nid1"]
    monkeypatch.setattr(launch, "_ask_slurm", lambda *args: scontrol[args[2]])
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    line = launch.command(load_system(profile), 8, "w", [], "ddp", eight.threads)
    per_node = ["--nodes=2", "--ntasks-per-node=1", f"--cpus-per-task={eight.threads}"]
    assert line[:6] == ["srun", "--overlap", *per_node, "--gres=gpu:4"]
    assert {"--nnodes=2", "--nproc-per-node=4", "--rdzv-endpoint=nid1:20007"} <= set(line)


def test_diffusion_points_ask_for_their_devices(tmp_path):
    """The paper's SR3 points, 1, 2 and 4 devices, each on one Perlmutter node."""
    result = dry_run(tmp_path, "perlmutter")
    assert result.returncode == 0, result.stderr[-3000:]
    settings = executor_settings("perlmutter")
    jobs = [job for job in planned_jobs(result.stdout) if job.name == "diffusion"]
    plan = {job.cards: flags(sbatch_line(job, settings)) for job in jobs}
    assert sorted(plan) == [1, 2, 4]
    for devices, line in plan.items():
        assert {f"--gpus={devices}", "--nodes=1", f"--mem {64000 * devices}",
                "--cpus-per-task=32"} <= line  # fmt: skip


def test_each_jobs_runtime_is_its_forecast_times_the_margin(tmp_path):
    """The time limit sbatch gets is the job's forecast (accelstudy.forecast) times the stated
    margin, at least MIN_MINUTES, at most the partition's limit of the system file; a job
    writing several records (a baseline job's 6, a quantize job's 3 recipes) their sum."""
    from accelstudy.config import validate_config
    from accelstudy.forecast import MARGIN, MIN_MINUTES, StudyEstimates
    from accelstudy.systems import load_system

    result = dry_run(tmp_path, "perlmutter")
    assert result.returncode == 0, result.stderr[-3000:]
    paper = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    config = validate_config(paper | {"system": "perlmutter"})
    system = load_system("perlmutter")
    study = StudyEstimates(config, system, seen=[])
    measuring = [j for j in planned_jobs(result.stdout) if j.output in study.works]
    assert {j.name for j in measuring} == {"baseline", "sensitivity", "quantize", "finetune",
                                           "diffusion"}  # fmt: skip
    assert len(measuring) == 1 + 66 + 9 + 270 + 3
    assert sum(len([o for o in j.outputs if o in study.works]) for j in measuring) == len(
        study.works
    ) == 6 + 66 + 27 + 270 + 3  # fmt: skip
    limit = system.walltime["max_minutes"]
    for job in measuring:
        told = [study.of(output) for output in job.outputs if output in study.works]
        wanted = min(limit, sum(max(MIN_MINUTES, math.ceil(t.seconds * MARGIN / 60)) for t in told))
        assert job.resources["runtime"] == wanted, job.output
        assert f"-t {wanted}" in sbatch_line(job, executor_settings("perlmutter"))
    # the one-device SR3 point at the paper's A100 rate (305 minutes published): the longest
    longest = max(measuring, key=lambda j: j.resources["runtime"])
    assert longest.name == "diffusion" and longest.resources["runtime"] == math.ceil(305 * MARGIN)


def test_voyager_finetune_points_take_their_gaudi_cards(tmp_path):
    result = dry_run(tmp_path, "voyager", account=None)
    assert result.returncode == 0, result.stderr[-3000:]
    points = [job for job in planned_jobs(result.stdout) if job.name == "finetune"]
    assert {job.resources["gaudi"] for job in points} == {1, 2, 4, 6, 8}
    assert all(job.resources["gpu"] == 0 for job in points)


def test_site_variants_are_system_files(tmp_path):
    """Perlmutter's 80 GB nodes and Expanse's H100 nodes: same profile, another system."""
    plan = one_per_rule(tmp_path, "perlmutter", "--config", "system=perlmutter-80gb")
    assert "-C 'gpu&hbm80g'" in plan["baseline"] and "--qos=shared" in plan["baseline"]
    plan = one_per_rule(tmp_path, "expanse", "--config", "system=expanse-h100")
    assert {"--gpus=h100:1", "-p gpu-shared"} <= flags(plan["quantize"])
    # a variable the user exports wins over the system file
    plan = one_per_rule(tmp_path, "perlmutter", ACCELSTUDY_SLURM_QOS_UNDER_NODE="debug")
    assert "--qos=debug" in plan["baseline"]


def test_expanse_jobs(tmp_path):
    plan = one_per_rule(tmp_path, "expanse")
    common = {"-A m1234", "--gpus=1", "--mem 92000", "--cpus-per-task=10"}
    assert common | {"-p gpu-shared"} <= flags(plan["baseline"])
    assert common | {"-p gpu-shared"} <= flags(plan["sensitivity"])
    assert common | {"-p gpu-shared"} <= flags(plan["quantize"])
    # every Expanse job states its memory, small ones included
    assert all("--mem " in line for line in plan.values())
    # short per-layer jobs may start in the debug queue, by choice
    plan = one_per_rule(tmp_path, "expanse", ACCELSTUDY_SLURM_SHORT_PARTITION="gpu-debug")
    assert "-p gpu-debug" in plan["sensitivity"]
    assert "-p gpu-shared" in plan["quantize"]


@pytest.mark.parametrize("profile", ["perlmutter", "expanse"])
def test_a_retry_gets_more_time(profile, monkeypatch):
    """A time-out is retried (profile `retries`) with runtime x attempt: the measuring rules'
    forecast x margin x attempt (tests/test_forecast.py), the preparing jobs' default too."""
    from snakemake.resources import Resources

    config = yaml.safe_load((ROOT / "profiles" / profile / "config.yaml").read_text())
    assert config["retries"] >= 1
    assert not any("runtime" in values for values in config["set-resources"].values())
    default = config["default-resources"]["runtime"]
    parsed = Resources.parse([f"runtime={default}"], allow_expressions=True)
    runtime = {a: parsed["runtime"].evaluate(wildcards=None, input=None, attempt=a, threads=1,
               rulename="report", async_run=None).value for a in (1, 2)}  # fmt: skip
    assert runtime[2] == 2 * runtime[1]
    if profile == "expanse":
        monkeypatch.setenv("ACCELSTUDY_SLURM_SHORT_PARTITION", "gpu-debug")
        partition = Resources.parse(
            [f"slurm_partition={config['set-resources']['sensitivity']['slurm_partition']}"],
            allow_expressions=True,
        )["slurm_partition"]
        on = {a: partition.evaluate(wildcards=None, input=None, attempt=a, threads=1,
              rulename="sensitivity", async_run=None).value for a in (1, 2)}  # fmt: skip
        assert on == {1: "gpu-debug", 2: "gpu-shared"}  # out of the 30-min debug queue


def test_voyager_jobs_share_the_pods_cards(tmp_path):
    result = dry_run(tmp_path, "voyager", account=None)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = planned_jobs(result.stdout)
    cards = {job.name: job.resources.get("gaudi", 0) for job in jobs if job.name != "finetune"}
    assert {cards[r] for r in ("baseline", "sensitivity", "quantize")} == {1}
    assert {cards[r] for r in ("prepare_model", "prepare_data", "cluster", "report")} == {0}
    assert {job.threads for job in jobs if job.name == "quantize"} == {12}
    # Gaudi recipes: simulated, real FP8 (INC) and BF16, no NVIDIA INT8 path
    quantize = [line for line in result.stdout.splitlines() if "accelstudy quantize" in line]
    runs = [json.loads(shlex.split(line.split("--runs ")[1])[0]) for line in quantize]
    assert all({run["recipe"] for run in job} == {"fake", "fp8", "bf16"} for job in runs)
    assert all("--system voyager" in line for line in quantize)
    # on Gaudi the FP8 recipe must be the real INC path, never the float8 stand-in
    assert all("--fp8-without-hpu error" in line for line in quantize)
    profile = yaml.safe_load((ROOT / "profiles" / "voyager" / "config.yaml").read_text())
    assert profile["resources"] == {"gaudi": 8} and "executor" not in profile


def test_voyager_pod_requests_gaudi_cards_and_hugepages():
    pod = yaml.safe_load((ROOT / "profiles" / "voyager" / "pod.yaml").read_text())
    container = pod["spec"]["containers"][0]
    for kind in ("requests", "limits"):
        assert container["resources"][kind]["habana.ai/gaudi"] == 8
        assert container["resources"][kind]["hugepages-2Mi"].endswith("Mi")
    assert "snakemake --profile profiles/voyager" in " ".join(container["args"])


def test_missing_account_stops_before_submission(tmp_path):
    result = dry_run(tmp_path, "perlmutter", account=None)
    assert result.returncode != 0
    assert (
        "config key 'account': system 'perlmutter' needs a SLURM account; "
        "export ACCELSTUDY_ACCOUNT=<project> or pass --config account=<project>"
    ) in result.stdout + result.stderr
    assert not (tmp_path / "results").exists()


def test_account_on_the_command_line(tmp_path):
    result = dry_run(tmp_path, "expanse", "--config", "account=abc123", account=None)
    assert result.returncode == 0, result.stderr[-2000:]
    assert {job.resources.get("slurm_account") for job in planned_jobs(result.stdout)} == {"abc123"}


SITE_MISTAKES = {
    "too many cards for one node": (
        ("perlmutter", "--set-resources", "quantize:gpu=8"),
        "resource 'quantize:gpu': 8 cards, but a perlmutter node has 4; rule 'quantize' "
        "runs on one node, so ask for at most 4",
    ),
    "unknown system": (
        ("expanse", "--config", "system=frontier"),
        "config key 'system': unknown system 'frontier'; known systems are",
    ),
    # paper.yaml names perlmutter: the line says which profile is for which system
    "a study for another site": (
        ("expanse", "--configfile", "config/paper.yaml"),
        "the study names system 'perlmutter', but profiles/expanse is made for 'expanse'; "
        "pass --config system=expanse",
    ),
}


@pytest.mark.parametrize("mistake", SITE_MISTAKES)
def test_site_mistakes_stop_with_one_line(tmp_path, mistake):
    (profile, *args), message = SITE_MISTAKES[mistake]
    result = dry_run(tmp_path, profile, *args)
    assert result.returncode != 0
    assert message in result.stdout + result.stderr


def test_own_study_file_keeps_the_site(tmp_path):
    """--configfile replaces the profile's study files: the system must come along."""
    own = tmp_path / "my-study.yaml"
    own.write_text(yaml.safe_dump({"study": "mine", "models": {"m": {"source": "tiny-random"}},
                                   "tasks": {"boolq": {"source": "standin"}}}))  # fmt: skip
    result = dry_run(tmp_path, "perlmutter", "--configfile", str(own))
    assert result.returncode != 0
    assert (
        "config key 'system': 'cpu' is not scheduled by SLURM, but the profile submits to "
        "SLURM; pass --config system=<site>"
    ) in result.stdout + result.stderr
    result = dry_run(
        tmp_path, "perlmutter", "--configfile", str(own), "--config", "system=perlmutter"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--gpus=1" in sbatch_line(
        next(j for j in planned_jobs(result.stdout) if j.name == "baseline")
    )


def test_a_gguf_is_converted_by_a_batch_job(tmp_path):
    """Dequantizing a GGUF needs a node's memory for a large model: under a SLURM profile it is
    submitted, while the other preparations stay beside Snakemake (common.smk's localrules)."""
    gguf = 'models={"tiny": {"source": "gguf", "gguf_file": "embedded"}}'
    result = dry_run(tmp_path, "slurm-test", "--config", gguf)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "\nrule convert_gguf:" in result.stdout and "\nrule prepare_model:" not in result.stdout
    common = (ROOT / "workflow" / "rules" / "common.smk").read_text()
    local = common.split("localrules:", 1)[1].split("\n\n", 1)[0].replace(",", " ").split()
    assert "prepare_model" in local and "convert_gguf" not in local

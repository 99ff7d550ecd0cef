"""The package built as a wheel and installed, away from its checkout: it finds its schemas,
system files, profiles and resources among the wheel's data files (accelstudy.paths), the
default study's workflow parses and plans with it, and its commands run from a folder holding
only a study, opening no file of the checkout."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
from accelstudy import paths
from accelstudy.errors import StudyError

ROOT = Path(__file__).resolve().parents[1]
# every file outside the package that the package reads: the wheel must carry each one
SITES = "profiles/*/site.yaml"  # and each site's profile beside it (accelstudy.site reads it)
READ = ["workflow/schemas/*.yaml", "config/paper.yaml", "config/systems/*.yaml", SITES,
        "envs/gaudi/gaudi_config.json", "resources/*.csv", "resources/models/*/config.json"]  # fmt: skip
SHOW = """
import accelstudy, accelstudy.paths as p, accelstudy.records as r
print(accelstudy.__file__, p.PROJECT_ROOT, r.git_commit(), sep="\\n")
"""


def _source_copy(into: Path) -> Path:
    """What a clone holds (tracked files and new ones not ignored): the wheel is built there,
    as the build writes build/ and egg-info beside its sources."""
    listed = ["git", "-C", str(ROOT), "ls-files", "-z", "-c", "-o", "--exclude-standard"]
    names = subprocess.run(listed, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, names):
        if (ROOT / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, into / name)
    return into


def _fresh_venv(where: Path) -> Path:
    """A venv that sees this one's dependencies through a .pth line, which adds the folder only:
    the editable install's own .pth there (the checkout's workflow/) is not processed."""
    venv.create(where, with_pip=False)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(where)}))
    (site / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return where / "bin" / "python"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path, Path]:
    """The wheel built from a copy of the sources, installed into a fresh venv: built once for
    this file's tests (it is their slow part). (the copy, the wheel, the venv's python)"""
    tmp_path = tmp_path_factory.mktemp("installed")
    source = _source_copy(tmp_path / "source")
    wheels = tmp_path / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps",
             "--no-build-isolation", "-q", "-w", str(wheels)]  # fmt: skip
    subprocess.run(build, check=True, capture_output=True, timeout=120)
    (wheel,) = wheels.glob("accelstudy-*.whl")
    python = _fresh_venv(tmp_path / "venv")
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
               "--no-build-isolation", "--no-index", "-q", str(wheel)]  # fmt: skip
    subprocess.run(install, check=True, capture_output=True, timeout=120)
    return source, wheel, python


def _away_from_the_checkout(python: Path) -> dict[str, str]:
    """The environment of a user without the checkout: no root set, nothing on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("ACCELSTUDY_ROOT", "PYTHONPATH")}
    return {**env, "PATH": f"{python.parent}{os.pathsep}{env['PATH']}"}


@pytest.mark.e2e
def test_the_installed_wheel_plans_the_default_study_without_the_checkout(tmp_path, installed):
    source, wheel, python = installed
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {name.split("/data/share/accelstudy/", 1)[-1] for name in names}
    needed = {str(p.relative_to(source)) for pattern in READ for p in source.glob(pattern)}
    needed |= {str(p.with_name("config.yaml").relative_to(source)) for p in source.glob(SITES)}
    assert needed - shipped == set(), "add them to pyproject.toml's [tool.setuptools.data-files]"

    # the workflow alone (Snakefile, rules, captions, the default study), away from the checkout
    work = tmp_path / "work"
    for part in ("workflow/rules", "workflow/report"):
        shutil.copytree(ROOT / part, work / part)
    (work / "config").mkdir()
    shutil.copy(ROOT / "config" / "config.yaml", work / "config")
    shutil.copy(ROOT / "Snakefile", work)
    env = _away_from_the_checkout(python)
    shown = subprocess.run([python, "-c", SHOW], cwd=work, env=env, capture_output=True,
                           text=True, check=True).stdout.split("\n")  # fmt: skip
    data = python.parents[1] / "share" / "accelstudy"
    assert Path(shown[0]).is_relative_to(python.parents[1]), shown  # not the checkout's
    assert shown[1:3] == [str(data.resolve()), "accelstudy 0.1.0"], shown

    plan = [python, "-m", "snakemake", "-n", "--cores", "2"]
    done = subprocess.run(plan, cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "This was a dry-run" in done.stdout and "quantize" in done.stdout, done.stdout[-3000:]

    # nowhere to find them: Snakemake stops on one line naming where it looked; the CLI (which
    # reads the schema on import) raises the same StudyError. Put back after: the venv is shared
    (data / "workflow").rename(data / "workflow.away")
    try:
        failed = subprocess.run(plan, cwd=work, env=env, capture_output=True, text=True)
        assert failed.returncode != 0 and "Error: the project's files" in failed.stderr
        assert "Traceback" not in failed.stderr and str(data) in failed.stderr, failed.stderr
        check = [python.parent / "accelstudy", "check-config", "--configfile", "config/config.yaml"]
        failed = subprocess.run(check, cwd=work, env=env, capture_output=True, text=True)
        raised = "accelstudy.errors.StudyError: the project"
        assert failed.stderr.splitlines()[-1].startswith(raised), failed.stderr[-3000:]
    finally:
        (data / "workflow.away").rename(data / "workflow")


# The commands a user runs, in one process (torch and transformers are imported once), every
# file it opens recorded from before the package is imported: its own modules included
COMMANDS = """
import contextlib, io, json, os, sys
opened = set()
def record(event, args):
    if event in ("open", "os.scandir", "os.listdir") and isinstance(args[0], (str, bytes)):
        opened.add(os.path.realpath(os.fsdecode(args[0])))
sys.addaudithook(record)

import yaml
import accelstudy
from accelstudy.cli import main
from accelstudy.errors import ConfigError
from accelstudy.paths import PROFILES
from accelstudy.site import check_site
from accelstudy.systems import load_system

ran = {"package": accelstudy.__file__}
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = main(argv)
    ran[argv[0]] = [code, out.getvalue()]
# expanse's profile run for a perlmutter study: $ACCELSTUDY_SLURM_GPU_MODEL is unset
profile = yaml.safe_load((PROFILES / "expanse" / "config.yaml").read_text())["set-resources"]
try:
    check_site({}, load_system("perlmutter"), {}, profile, {"ACCELSTUDY_ACCOUNT": "m1"})
except ConfigError as error:
    ran["profile"] = str(error)
ran["opened"] = sorted(opened)
print(json.dumps(ran))
"""


@pytest.mark.e2e
def test_the_installed_commands_read_only_the_installed_copy(tmp_path, installed):
    """check-config, plan-fit, plan-time, recommend (its default study: the installed one) and
    a profile check, from a folder holding only a study: every project file the package opens
    is in the venv, none in the checkout (its dependencies' venv aside)."""
    python = installed[2]
    (tmp_path / "study.yaml").write_text((ROOT / "config" / "config.yaml").read_text())
    commands = [["check-config", "--configfile", "study.yaml"],
                ["plan-fit", "--configfile", "study.yaml", "--system", "perlmutter"],
                ["plan-time", "--configfile", "study.yaml"],
                ["recommend", "--model", "llama-3.1-8b-instruct", "--system", "perlmutter"]]  # fmt: skip
    env = {**_away_from_the_checkout(python), "PYTHONSAFEPATH": "1"}
    done = subprocess.run([python, "-c", COMMANDS, json.dumps(commands)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    ran = json.loads(done.stdout.splitlines()[-1])
    venv = python.parents[1]
    assert Path(ran["package"]).is_relative_to(venv), ran["package"]
    assert ran["check-config"] == [0, "study.yaml: ok (study 'default')\n"]
    assert ran["plan-fit"][0] == 0 and "perlmutter: 12 of 12 points fit" in ran["plan-fit"][1]
    assert ran["plan-time"][0] == 0 and "forecast" in ran["plan-time"][1], ran["plan-time"]
    assert ran["recommend"][0] == 0, ran["recommend"]
    assert "llama-3.1-8b-instruct on perlmutter:" in ran["recommend"][1], ran["recommend"]
    assert "profiles/expanse is made for 'expanse'" in ran["profile"], ran["profile"]

    opened = [Path(p) for p in ran["opened"]]
    dependencies = Path(sys.prefix).resolve()  # this venv's packages, seen through deps.pth
    leaked = [p for p in opened if p.is_relative_to(ROOT) and not p.is_relative_to(dependencies)]
    assert leaked == [], leaked
    data = (venv / "share" / "accelstudy").resolve()
    read = {str(p.relative_to(data)) for p in opened if p.is_relative_to(data)}
    wanted = {"config/paper.yaml", "profiles/expanse/config.yaml", "config/systems/perlmutter.yaml",
              "workflow/schemas/config.schema.yaml"}  # fmt: skip
    assert wanted <= read, sorted(read)


def test_the_first_root_holding_the_files_wins(tmp_path, monkeypatch):
    """ACCELSTUDY_ROOT, then the checkout beside the package, then the installed copy; a folder
    without the schemas (a workflow copied alone) is passed over."""
    roots = {name: tmp_path / name for name in ("set", "checkout", "installed")}
    for root in roots.values():
        (root / paths.MARKER).parent.mkdir(parents=True)
        (root / paths.MARKER).touch()
    monkeypatch.setattr(paths, "CHECKOUT", roots["checkout"])
    monkeypatch.setattr(paths, "_installed_copy", lambda: iter([roots["installed"]]))
    assert paths.find_root({"ACCELSTUDY_ROOT": str(roots["set"])}) == roots["set"]
    workflow_only = {"ACCELSTUDY_ROOT": str(tmp_path / "workflow-only")}
    assert paths.find_root(workflow_only) == roots["checkout"]
    (roots["checkout"] / paths.MARKER).unlink()
    assert paths.find_root({}) == roots["installed"]
    (roots["installed"] / paths.MARKER).unlink()
    assert paths.find_root({}) is None
    monkeypatch.setattr(paths, "PROJECT_ROOT", roots["checkout"])
    with pytest.raises(StudyError, match="ACCELSTUDY_ROOT"):
        paths.require_project_files()

"""The package built as a wheel and installed, away from its checkout: it finds its schemas,
system files and resources among the wheel's data files (accelstudy.paths), and the default
study's workflow parses and plans with it."""

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
READ = ["workflow/schemas/*.yaml", "config/paper.yaml", "config/systems/*.yaml",
        "profiles/*/site.yaml", "envs/gaudi/gaudi_config.json", "resources/*.csv",
        "resources/models/*/config.json"]  # fmt: skip
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


@pytest.mark.e2e
def test_the_installed_wheel_plans_the_default_study_without_the_checkout(tmp_path):
    source = _source_copy(tmp_path / "source")
    wheels = tmp_path / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps",
             "--no-build-isolation", "-q", "-w", str(wheels)]  # fmt: skip
    subprocess.run(build, check=True, capture_output=True, timeout=120)
    (wheel,) = wheels.glob("accelstudy-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {name.split("/data/share/accelstudy/", 1)[-1] for name in names}
    needed = {str(p.relative_to(source)) for pattern in READ for p in source.glob(pattern)}
    assert needed - shipped == set(), "add them to pyproject.toml's [tool.setuptools.data-files]"

    python = _fresh_venv(tmp_path / "venv")
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
               "--no-build-isolation", "--no-index", "-q", str(wheel)]  # fmt: skip
    subprocess.run(install, check=True, capture_output=True, timeout=120)

    # the workflow alone (Snakefile, rules, captions, the default study), away from the checkout
    work = tmp_path / "work"
    for part in ("workflow/rules", "workflow/report"):
        shutil.copytree(ROOT / part, work / part)
    (work / "config").mkdir()
    shutil.copy(ROOT / "config" / "config.yaml", work / "config")
    shutil.copy(ROOT / "Snakefile", work)
    env = {k: v for k, v in os.environ.items() if k not in ("ACCELSTUDY_ROOT", "PYTHONPATH")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env['PATH']}"
    shown = subprocess.run([python, "-c", SHOW], cwd=work, env=env, capture_output=True,
                           text=True, check=True).stdout.split("\n")  # fmt: skip
    data = tmp_path / "venv" / "share" / "accelstudy"
    assert Path(shown[0]).is_relative_to(tmp_path / "venv"), shown  # not the checkout's
    assert shown[1:3] == [str(data.resolve()), "accelstudy 0.1.0"], shown

    plan = [python, "-m", "snakemake", "-n", "--cores", "2"]
    done = subprocess.run(plan, cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "This was a dry-run" in done.stdout and "quantize" in done.stdout, done.stdout[-3000:]

    # nowhere to find them: Snakemake stops on one line naming where it looked; the CLI (which
    # reads the schema on import) raises the same StudyError
    shutil.rmtree(data / "workflow")
    failed = subprocess.run(plan, cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert failed.returncode != 0 and "Error: the project's files" in failed.stderr, failed.stderr
    assert "Traceback" not in failed.stderr and str(data) in failed.stderr, failed.stderr
    check = [python.parent / "accelstudy", "check-config", "--configfile", "config/config.yaml"]
    failed = subprocess.run(check, cwd=work, env=env, capture_output=True, text=True)
    assert failed.stderr.splitlines()[-1].startswith("accelstudy.errors.StudyError: the project")


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

"""Profile checks against the system file, without Snakemake."""

from __future__ import annotations

import os

import pytest
from accelstudy.errors import ConfigError
from accelstudy.site import (
    card_count,
    check_account,
    check_cards,
    check_scheduler,
    check_site,
    check_variables,
    export_scheduler_defaults,
)
from accelstudy.systems import load_system

PERLMUTTER = load_system("perlmutter")


def test_account_from_the_environment_or_the_config():
    defaults = {"slurm_account": "'$ACCELSTUDY_ACCOUNT'"}
    check_account(PERLMUTTER, defaults, {"ACCELSTUDY_ACCOUNT": "m1234"})
    with pytest.raises(ConfigError, match="config key 'account'"):
        check_account(PERLMUTTER, defaults, {})
    with pytest.raises(ConfigError, match="needs a SLURM account"):
        check_account(PERLMUTTER, defaults, {"ACCELSTUDY_ACCOUNT": ""})
    environ: dict[str, str] = {}
    check_site({"account": "m9999"}, PERLMUTTER, defaults, {}, environ)
    assert environ["ACCELSTUDY_ACCOUNT"] == "m9999"


def test_account_is_not_asked_where_nothing_bills():
    check_account(PERLMUTTER, {}, {})  # not a SLURM profile: a local run on a GPU node
    check_account(load_system("voyager"), {"slurm_account": "''"}, {})


def test_a_slurm_profile_needs_a_slurm_system():
    check_scheduler(PERLMUTTER, {"slurm_account": "'x'"})
    check_scheduler(load_system("cpu"), {})  # local executor on the CPU system
    with pytest.raises(ConfigError, match="'voyager' is not scheduled by SLURM"):
        check_scheduler(load_system("voyager"), {"slurm_account": "'x'"})


def test_card_counts():
    assert card_count(4) == 4 and card_count("'8'") == 8
    assert card_count("int(wildcards.cards)") is None  # evaluated per job, not here
    assert card_count(True) is None
    check_cards(PERLMUTTER, {"baseline": {"gpu": 4}, "finetune": {"gpu": "int(wildcards.cards)"}})
    with pytest.raises(ConfigError, match="resource 'baseline:gpu': 5 cards, but a perlmutter"):
        check_cards(PERLMUTTER, {"baseline": {"gpu": 5}})
    voyager = load_system("voyager")
    check_cards(voyager, {"baseline": {"gaudi": 8, "gpu": 99}})  # Gaudi counts `gaudi`
    with pytest.raises(ConfigError, match="a voyager node has 8"):
        check_cards(voyager, {"baseline": {"gaudi": 9}})


def test_scheduler_defaults_come_from_the_system_file():
    environ = {"ACCELSTUDY_SLURM_QOS": "shared"}
    export_scheduler_defaults(PERLMUTTER, environ)
    assert environ == {
        "ACCELSTUDY_SLURM_QOS": "shared",  # exported: it wins
        "ACCELSTUDY_SLURM_CONSTRAINT": "gpu",
        "ACCELSTUDY_SLURM_QOS_UNDER_NODE": "shared",
    }
    check_variables(PERLMUTTER, {"qos": "'$ACCELSTUDY_SLURM_QOS'"}, {}, environ)
    with pytest.raises(ConfigError, match=r"resource 'quantize:gpu_model' reads \$ACCEL"):
        check_variables(
            PERLMUTTER, {}, {"quantize": {"gpu_model": "'$ACCELSTUDY_SLURM_GPU_MODEL'"}}, environ
        )


def test_jobs_find_the_cli_beside_snakemake(tmp_path):
    from accelstudy.paths import export_for_jobs

    (tmp_path / "accelstudy").write_text("")
    environ = {"PATH": "/usr/bin"}
    export_for_jobs(environ, interpreter=str(tmp_path / "python"))
    assert environ["PATH"].split(":")[:2] == [str(tmp_path), "/usr/bin"]
    elsewhere = {"PATH": "/usr/bin", "ACCELSTUDY_ROOT": "/src/accelstudy"}
    export_for_jobs(elsewhere, interpreter=str(tmp_path / "none" / "python"))
    # no CLI there: PATH left as it was; a root the user set wins
    assert elsewhere == {"PATH": "/usr/bin", "ACCELSTUDY_ROOT": "/src/accelstudy"}


def test_conda_envs_install_the_package_from_the_root(tmp_path):
    """envs/*.yaml name the repository through ${ACCELSTUDY_ROOT}, which pip expands."""
    import subprocess
    import sys

    import yaml
    from accelstudy.paths import PROJECT_ROOT, export_for_jobs

    for name in ("cpu", "cuda"):
        env = yaml.safe_load((PROJECT_ROOT / "envs" / f"{name}.yaml").read_text())
        (pip_deps,) = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
        assert "-e ${ACCELSTUDY_ROOT}[slurm]" in pip_deps
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("-e ${ACCELSTUDY_ROOT}[slurm]\n")
    environ = {}
    export_for_jobs(environ)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-build-isolation",
         "--no-index", "-r", str(requirements)],
        env={**os.environ, **environ}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Would install accelstudy" in result.stdout


def test_another_sites_profile_is_named_with_the_fix():
    """A study naming one site run with another site's profile: the variable the profile
    reads is unset, and the line says which profile is for which system."""
    import yaml
    from accelstudy.paths import PROJECT_ROOT

    def resources(site: str) -> dict:
        return yaml.safe_load((PROJECT_ROOT / "profiles" / site / "config.yaml").read_text())

    expanse = resources("expanse")["set-resources"]
    with pytest.raises(ConfigError) as error:
        check_site({}, PERLMUTTER, {}, expanse, {"ACCELSTUDY_ACCOUNT": "m1"})
    assert str(error.value) == (
        "resource 'baseline:gpu_model' reads $ACCELSTUDY_SLURM_GPU_MODEL, but neither the "
        "environment nor config/systems/perlmutter.yaml (slurm.gpu_model) sets it: the study "
        "names system 'perlmutter', but profiles/expanse is made for 'expanse'; pass "
        "--config system=expanse (or use perlmutter's profile)"
    )
    defaults = resources("perlmutter")["default-resources"]
    with pytest.raises(ConfigError, match="profiles/perlmutter is made for 'perlmutter'; pass"):
        check_site({}, load_system("expanse"), defaults, {}, {"ACCELSTUDY_ACCOUNT": "m1"})
    with pytest.raises(ConfigError, match=r"\(slurm.qos\) sets it$"):  # no site profile reads it
        check_variables(PERLMUTTER, {"q": "'$ACCELSTUDY_SLURM_QOS'"}, {}, {})

"""Config, system-file and exported strings that reach a shell, sbatch or an evaluated resource
expression: each injection form stops before any job, with a line naming the field."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
import yaml
from accelstudy.errors import ConfigError
from accelstudy.paths import PROJECT_ROOT
from accelstudy.site import check_site
from accelstudy.study import validate_study
from accelstudy.systems import load_system

from tests.conftest import TINY_CONFIG

# each writes the marker if a shell or Python runs it
FORMS = [
    "$(touch {marker})",
    "`touch {marker}`",
    "x' + __import__('pathlib').Path('{marker}').touch() + '",
    'x" + __import__("pathlib").Path("{marker}").touch() + "',
    "x; touch {marker}",
    "x\ntouch {marker}",
]
SITES = {"perlmutter": "perlmutter", "expanse": "expanse", "slurm-test": "slurm-test"}


def profile(site: str) -> dict:
    return yaml.safe_load((PROJECT_ROOT / "profiles" / site / "config.yaml").read_text())


def variables(site: str) -> list[str]:
    """The $ACCELSTUDY_* variables a site profile's resources read."""
    text = (PROJECT_ROOT / "profiles" / site / "config.yaml").read_text()
    found = {word.strip("'\"{}$,") for word in text.split() if "$ACCELSTUDY_" in word}
    return sorted(found)


@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("form", FORMS)
def test_an_exported_value_cannot_reach_sbatch(site, form, tmp_path):
    marker = tmp_path / "ran"
    settings = profile(site)
    system = load_system(SITES[site])
    read = variables(site)
    assert "ACCELSTUDY_ACCOUNT" in read
    for variable in read:
        environ = {"ACCELSTUDY_ACCOUNT": "m1234", variable: form.format(marker=marker)}
        with pytest.raises(ConfigError) as error:
            check_site(
                {}, system, settings["default-resources"], settings["set-resources"], environ
            )
        message = str(error.value)
        assert message.startswith(f"${variable} (") and "\n" not in message
    assert not marker.exists()


@pytest.mark.parametrize("form", FORMS)
def test_a_system_files_scheduler_value_cannot_reach_sbatch(form, tmp_path):
    settings = profile("perlmutter")
    system = load_system("perlmutter")
    for key in ("constraint", "qos", "qos_under_node"):
        bad = dataclasses.replace(system, slurm={**system.slurm, key: form.format(marker="m")})
        with pytest.raises(ConfigError, match=rf"slurm\.{key} of config/systems/perlmutter"):
            check_site({}, bad, settings["default-resources"], settings["set-resources"],
                       {"ACCELSTUDY_ACCOUNT": "m1234"})  # fmt: skip
    # what sites use passes: a constraint's operators, a GPU model
    plain = dataclasses.replace(system, slurm={**system.slurm, "constraint": "gpu&hbm80g"})
    environ = {"ACCELSTUDY_ACCOUNT": "m1234"}
    check_site({}, plain, settings["default-resources"], settings["set-resources"], environ)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    ("key", "place"),
    [
        ("account", lambda c, v: c.update(account=v)),
        ("study", lambda c, v: c.update(study=v)),
        ("system", lambda c, v: c.update(system=v)),
        ("compare.reference", lambda c, v: c.update(compare={"runs": ["a", "b"], "reference": v})),
        ("models", lambda c, v: c.update(models={v: c["models"]["tiny"]})),
    ],
)
def test_a_config_string_that_reaches_a_shell_is_refused(form, key, place, tmp_path):
    config = yaml.safe_load(yaml.safe_dump(TINY_CONFIG))
    place(config, form.format(marker=tmp_path / "ran"))
    with pytest.raises(ConfigError, match=f"'{key}"):
        validate_study(config)
    assert not (tmp_path / "ran").exists()


def test_a_dry_run_stops_before_evaluating_the_account(tmp_path):
    """Snakemake evaluates the profile's resources per job, also in a dry run: without the
    check this dry run would run the injected Python."""
    marker = tmp_path / "ran"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELSTUDY_")}
    env["ACCELSTUDY_ACCOUNT"] = FORMS[2].format(marker=marker)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "psychology.parquet").touch()
    cmd = [sys.executable, "-m", "snakemake", "--profile", "profiles/perlmutter", "--directory",
           str(tmp_path), "--dry-run"]  # fmt: skip
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True)
    assert done.returncode != 0
    assert "Error: $ACCELSTUDY_ACCOUNT (--config account or the environment) is" in done.stderr
    assert not marker.exists()

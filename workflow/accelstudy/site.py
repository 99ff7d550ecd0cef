"""A site profile against its system file, before a rejected sbatch or a pending job would."""

import re
from collections.abc import Mapping, MutableMapping
from typing import Any

import yaml

from accelstudy.errors import ConfigError, require
from accelstudy.paths import PROFILES
from accelstudy.systems import System, load_system

ACCOUNT_ENV = "ACCELSTUDY_ACCOUNT"
_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)\}")
Env = MutableMapping[str, str]
Resources = Mapping[str, Any]  # resource name -> its value as written
PerRule = Mapping[str, Resources]  # rule -> its --set-resources


def export_scheduler_defaults(system: System, environ: Env) -> None:
    """`slurm` as ACCELSTUDY_SLURM_<KEY>, so one profile serves a site's variants; exports win."""
    for key, value in system.slurm.items():
        environ.setdefault(f"ACCELSTUDY_SLURM_{key.upper()}", "" if value is None else str(value))


def check_variables(system: System, defaults: Resources, per_rule: PerRule, environ: Env) -> None:
    """Every $ACCELSTUDY_* a profile resource reads must be set by now, to a plain word: the
    resource is evaluated as Python, and the plugin hands its value to sbatch through a shell."""
    written = [*defaults.items()]
    written += [(f"{r}:{n}", raw) for r, values in per_rule.items() for n, raw in values.items()]
    for name, raw in written:
        for match in _VARIABLE.finditer(str(raw)):
            variable = match[1] or match[2]
            key = variable.removeprefix("ACCELSTUDY_SLURM_")
            if variable in environ and variable.startswith("ACCELSTUDY_"):
                check_plain(variable, environ[variable], key, system.name)
            elif key != variable and variable not in environ:
                raise ConfigError(
                    f"resource '{name}' reads ${variable}, but neither the environment nor "
                    f"config/systems/{system.name}.yaml (slurm.{key.lower()}) sets it"
                    + other_site(variable, system.name)
                )


def check_plain(variable: str, value: str, key: str, system: str) -> None:
    """A value a profile's resource expression reads: letters, digits and a few marks, so that
    neither the expression (Python) nor the plugin's sbatch line (a shell) can run it."""
    # what a value may hold besides letters and digits (a constraint: SLURM's operators too)
    allowed = "._:-&|*[]" if key == "CONSTRAINT" else "._:-"
    where = f"slurm.{key.lower()} of config/systems/{system}.yaml" if key != variable else ""
    where = where or "--config account"
    if not re.fullmatch(rf"[\w{re.escape(allowed)}]*", value, re.ASCII):
        raise ConfigError(
            f"${variable} ({where} or the environment) is {value!r}, but a value that reaches "
            f"sbatch through the profile may hold only letters, digits and {' '.join(allowed)}"
        )


def other_site(variable: str, system: str) -> str:
    """Why $ACCELSTUDY_SLURM_* is unset: another site's profile (its site.yaml names its system)."""
    key = variable.removeprefix("ACCELSTUDY_SLURM_").lower()
    for site_file in sorted(PROFILES.glob("*/site.yaml")):
        site = yaml.safe_load(site_file.read_text())["system"]
        profile = site_file.with_name("config.yaml")  # a hint: a profile not there reads nothing
        reads = profile.is_file() and f"${variable}" in profile.read_text()
        if reads and site != system and key in load_system(site).slurm:
            return (
                f": the study names system '{system}', but profiles/{site_file.parent.name} is "
                f"made for '{site}'; pass --config system={site} (or use {system}'s profile)"
            )
    return ""


def check_scheduler(system: System, defaults: Resources) -> None:
    """A SLURM profile (it bills `slurm_account`) needs a system that SLURM schedules."""
    problem = f"'{system.name}' is not scheduled by SLURM, but the profile submits to SLURM; "
    problem += "pass --config system=<site> (e.g. perlmutter, expanse)"
    require("slurm_account" not in defaults or system.scheduler == "slurm", "system", problem)


def check_account(system: System, defaults: Resources, environ: Mapping[str, str]) -> None:
    """A SLURM profile on a site that bills an account must name one."""
    if "slurm_account" not in defaults or not system.account_required:
        return
    written = str(defaults["slurm_account"])  # its $VARIABLEs expanded from `environ` if set
    account = _VARIABLE.sub(lambda m: environ.get(m[1] or m[2], m[0]), written)
    account = account.strip().strip("'\"").strip()
    problem = f"system '{system.name}' needs a SLURM account; "
    problem += f"export {ACCOUNT_ENV}=<project> or pass --config account=<project>"
    require(bool(account) and "$" not in account, "account", problem)


def card_count(raw: Any) -> int | None:
    """An integer card request, or None for an expression evaluated per job."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    text = str(raw).strip().strip("'\"")
    return int(text) if text.isdigit() else None


def check_cards(system: System, per_rule: PerRule) -> None:
    """No single-node rule may ask for more cards than one node of the system has."""
    resource, limit = system.card_resource, system.per_node
    for rule, values in sorted(per_rule.items()):
        cards = card_count(values.get(resource))
        multi_node = rule in ("finetune", "diffusion")  # their jobs span nodes: the launcher
        if not multi_node and cards is not None and cards > limit:
            raise ConfigError(
                f"resource '{rule}:{resource}': {cards} cards, but a {system.name} node "
                f"has {limit}; rule '{rule}' runs on one node, so ask for at most {limit} "
                "(profile set-resources or --set-resources)"
            )


def check_site(
    config: Mapping[str, Any], system: System, defaults: Resources, per_rule: PerRule, environ: Env
) -> None:
    """Every site check, in the order a user would want to fix them."""
    if config.get("account"):  # `--config account=X` wins over the environment
        environ[ACCOUNT_ENV] = str(config["account"])  # which the profiles read
    export_scheduler_defaults(system, environ)
    check_scheduler(system, defaults)
    check_variables(system, defaults, per_rule, environ)  # a value that could run: first
    check_account(system, defaults, environ)
    check_cards(system, per_rule)


def check_profile(config: Mapping[str, Any], system: System, settings: Any, environ: Env) -> None:
    """check_site on Snakemake's ResourceSettings (--default-resources, --set-resources)."""

    def raw(resources: Mapping[str, Any] | None) -> dict[str, Any]:  # Resource keeps `.raw`
        return {name: getattr(value, "raw", value) for name, value in (resources or {}).items()}

    overrides = getattr(settings, "overwrite_resources", None) or {}
    per_rule = {rule: raw(values) for rule, values in overrides.items()}
    check_site(config, system, raw(getattr(settings, "default_resources", None)), per_rule, environ)

"""The diffusion scaling sweep: config -> points (devices, repeat), and its checks, which run
as Snakemake reads the config (before any job) and name the key and the fix in one line."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from accelstudy.finetune.sweep import SweepError, check_cards, check_dtype


class Point(NamedTuple):
    devices: int
    repeat: int


def points(config: Mapping[str, Any]) -> Iterator[Point]:
    sweep = config["diffusion"]
    for devices in sweep["devices"] if sweep["enabled"] else []:
        for repeat in range(sweep["repeats"]):
            yield Point(devices, repeat)


def check_model(model: Mapping[str, Any], hr_size: int) -> None:
    """The UNet halves the image once per extra multiplier; attention sits at a resolution."""
    levels = len(model["channel_multipliers"])
    factor = 2 ** (levels - 1)
    if hr_size % factor:
        raise SweepError(
            f"config key 'diffusion.data.hr_size': {hr_size} pixels cannot be halved "
            f"{levels - 1} times by the UNet (channel_multipliers has {levels} levels); use a "
            f"multiple of {factor}"
        )
    resolutions = [hr_size // 2**i for i in range(levels)]
    for res in model["attention_resolutions"]:
        if res not in resolutions:
            raise SweepError(
                f"config key 'diffusion.model.attention_resolutions': {res} is not one of the "
                f"UNet's resolutions {resolutions}"
            )


def preset_files(preset: str, nside: int) -> list[str]:
    """The template files a PySM preset reads, named as PySM does at this nside."""
    from pysm3.sky import PRESET_MODELS

    if preset not in PRESET_MODELS:
        raise SweepError(f"config key 'diffusion.data.preset': '{preset}' is no PySM preset")
    spec = PRESET_MODELS[preset]
    available = spec.get("available_nside")
    template_nside = min(available, key=lambda n: abs(n - nside)) if available else nside
    return [v.format(nside=template_nside) for v in spec.values() if ".fits" in str(v)]


def check_preset(preset: str, nside: int, environ: Mapping[str, str] = os.environ) -> None:
    root = environ.get("PYSM_LOCAL_DATA")
    missing = [f for f in preset_files(preset, nside) if not root or not Path(root, f).is_file()]
    if missing:
        raise SweepError(
            f"config key 'diffusion.data.preset': PySM preset '{preset}' needs "
            f"{', '.join(missing)} under PYSM_LOCAL_DATA (now {root or 'unset'}); copy them "
            "from the PySM data server and export PYSM_LOCAL_DATA=<that folder>, or use "
            "source: standin"
        )


def check_diffusion(config: Mapping[str, Any], system: Mapping[str, Any]) -> None:
    sweep = config["diffusion"]
    if not sweep["enabled"]:
        return
    data = sweep["data"]
    check_model(sweep["model"], data["hr_size"])
    if data["hr_size"] % data["scale"]:
        raise SweepError(
            f"config key 'diffusion.data.scale': {data['hr_size']} pixels do not divide by "
            f"{data['scale']}; pick a scale that divides hr_size"
        )
    check_cards("diffusion.devices", sweep["devices"], system)
    check_dtype("diffusion.dtype", sweep["dtype"], system)
    if data["source"] == "pysm":
        check_preset(data["preset"], data["nside"])
    if data["source"] == "local" and not Path(data.get("file", "")).is_file():
        raise SweepError(
            f"config key 'diffusion.data.file': '{data.get('file')}' is no file; give an npz "
            "with an `hr` array (and optionally `lr`)"
        )

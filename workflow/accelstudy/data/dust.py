"""Galactic dust images for SR3: PySM3 emission, gnomonic patches, high/low-res pairs, from
`pysm` (a preset from PYSM_LOCAL_DATA, never downloaded), `standin` (a synfast sky with Planck's
dust spectrum through PySM's modified black body) or `local` (an npz). Skies go to log10; all
images to SR3's [-1, 1] over the dataset."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from accelstudy.data.sources import describe_source, source_file
from accelstudy.errors import StudyError, key_error, require
from accelstudy.files import atomic_open, write_json

if TYPE_CHECKING:  # torch loads only where pairs are made or read: the config checks above do not
    import torch

DUST_SLOPE = -2.42  # Planck 2018 XI: dust C_ell ~ ell^-2.42
STANDIN_BETA, STANDIN_TEMPERATURE_K = 1.48, 19.6  # Planck 2018 XI, as PySM's d9


class DustDataError(StudyError, ValueError):
    """Data the configured model cannot use, named with its key and the fix."""


def preset_models() -> dict[str, Any]:
    """PySM's presets (pysm3.sky.PRESET_MODELS), read from the file it reads them from: importing
    pysm3 takes ~5 s, and the study's check runs wherever Snakemake reads the Snakefile (every
    cluster job's own process included)."""
    import importlib.util
    import tomllib

    spec = importlib.util.find_spec("pysm3")
    if spec is None or not spec.submodule_search_locations:
        raise key_error("diffusion.data.source", "'pysm' needs pysm3 installed (pip install pysm3)")
    presets = Path(spec.submodule_search_locations[0], "data", "presets.cfg")
    return tomllib.loads(presets.read_text())


def preset_files(preset: str, nside: int) -> list[str]:
    """The template files a PySM preset reads, named as PySM does at this nside."""
    presets = preset_models()
    if preset not in presets:
        raise key_error("diffusion.data.preset", f"'{preset}' is no PySM preset")
    spec = presets[preset]
    available = spec.get("available_nside")
    template_nside = min(available, key=lambda n: abs(n - nside)) if available else nside
    return [v.format(nside=template_nside) for v in spec.values() if ".fits" in str(v)]


def check_preset(preset: str, nside: int, environ: Mapping[str, str] = os.environ) -> None:
    root = environ.get("PYSM_LOCAL_DATA")
    missing = [f for f in preset_files(preset, nside) if not root or not Path(root, f).is_file()]
    problem = f"PySM preset '{preset}' needs {', '.join(missing)} under PYSM_LOCAL_DATA (now "
    problem += f"{root or 'unset'}); copy them from the PySM data server and export "
    problem += "PYSM_LOCAL_DATA=<that folder>, or use source: standin"
    require(not missing, "diffusion.data.preset", problem)


def emission(spec: dict[str, Any], seed: int) -> np.ndarray:
    """The dust intensity map (MJy/sr) at the configured frequency, through PySM3."""
    import pysm3.models.dust
    import pysm3.units as u

    # numba compiles the modified black body kernel on first use (~9 s on 2 cores): once per
    # environment, through numba's on-disk cache beside pysm3, not once per job
    pysm3.models.dust.get_emission_numba.enable_caching()
    nside = spec["nside"]
    if spec["source"] == "pysm":
        check_preset(spec["preset"], nside)  # the stage's own check, for CLI use
        sky = pysm3.Sky(nside=nside, preset_strings=[spec["preset"]], output_unit="MJy/sr")
    else:  # a Gaussian sky with the dust power law, its minimum a tenth of a std above zero
        import healpy as hp

        cl = np.zeros(3 * nside)
        cl[2:] = np.arange(2, 3 * nside) ** DUST_SLOPE
        np.random.seed(seed)  # this healpy's synfast draws from numpy's global generator
        sky_map = hp.synfast(cl, nside, new=True)
        template = (sky_map - sky_map.min() + 0.1 * sky_map.std()) * u.uK_RJ
        zeros = np.zeros_like(template)
        intensity = dict(map_I=template, freq_ref_I="545 GHz", nside=nside)
        dust = dict(map_mbb_index=STANDIN_BETA, map_mbb_temperature=STANDIN_TEMPERATURE_K * u.K)
        no_polarisation = dict(map_Q=zeros, map_U=zeros, freq_ref_P="353 GHz")
        model = pysm3.ModifiedBlackBody(**intensity, **dust, **no_polarisation)
        sky = pysm3.Sky(nside=nside, component_objects=[model], output_unit="MJy/sr")
    return np.asarray(sky.get_emission(spec["frequency_ghz"] * u.GHz)[0].value)


def patches(sky: np.ndarray, count: int, size: int, reso_arcmin: float, seed: int) -> np.ndarray:
    """`count` gnomonic patches of size x size pixels, centred uniformly on the sphere."""
    import healpy as hp
    from healpy.projector import GnomonicProj

    nside, rng = hp.npix2nside(sky.size), np.random.default_rng(seed)
    lon, lat = rng.uniform(0, 360, count), np.degrees(np.arcsin(rng.uniform(-1, 1, count)))
    out = np.empty((count, size, size), dtype=np.float64)
    for i in range(count):
        projector = GnomonicProj(rot=(lon[i], lat[i]), xsize=size, reso=reso_arcmin)
        out[i] = projector.projmap(sky, lambda x, y, z: hp.vec2pix(nside, x, y, z))
    return out


def scaled(values: np.ndarray, low: float, high: float) -> np.ndarray:
    """[low, high] -> [-1, 1], as float32."""
    return (2 * (values - low) / max(high - low, 1e-12) - 1).astype(np.float32)


def local_images(spec: dict[str, Any]) -> tuple[np.ndarray, np.ndarray | None]:
    """An npz made elsewhere: `hr` (N, H, W), and `lr` if its own down-sampling is wanted."""
    with np.load(spec["file"]) as data:
        hr = data["hr"].reshape(len(data["hr"]), *data["hr"].shape[-2:])
        lr = data["lr"].reshape(len(data["lr"]), *data["lr"].shape[-2:]) if "lr" in data else None
    if hr.shape[-1] != spec["hr_size"] or hr.shape[-2] != spec["hr_size"]:
        raise DustDataError(
            f"config key 'diffusion.data.hr_size': {spec['hr_size']}, but {spec['file']} holds "
            f"{hr.shape[-2]}x{hr.shape[-1]} images; set hr_size to {hr.shape[-1]}"
        )
    if lr is not None and lr.shape[-1] * spec["scale"] != hr.shape[-1]:
        raise DustDataError(
            f"config key 'diffusion.data.scale': {spec['scale']}, but {spec['file']} pairs "
            f"{lr.shape[-1]}-pixel inputs with {hr.shape[-1]}-pixel targets; set scale to "
            f"{hr.shape[-1] / lr.shape[-1]:g}"
        )
    return hr, lr


def prepare_dust(spec: dict[str, Any], seed: int, out: Path, card: Path) -> dict[str, Any]:
    """Make the paired dataset once: `out` (npz: hr, lr in [-1, 1]) and its data card."""
    import healpy as hp
    import torch
    import torch.nn.functional as F

    total = spec["patches"] + spec["validation_patches"]
    lr, reso, log = None, None, spec["source"] != "local"  # skies go to log10, local images not
    if log:
        reso = spec.get("reso_arcmin") or hp.nside2resol(spec["nside"], arcmin=True)
        images = np.log10(patches(emission(spec, seed), total, spec["hr_size"], reso, seed))
    else:
        images, lr = local_images(spec)
    low, high = float(images.min()), float(images.max())
    normalisation = {"log10": log, "min": low, "max": high}
    hr_t = torch.from_numpy(scaled(images, low, high)).unsqueeze(1)
    if lr is not None:
        lr_t = torch.from_numpy(scaled(lr, low, high)).unsqueeze(1)
    elif spec["downsample"] == "block":  # the mean of each scale x scale block
        lr_t = F.avg_pool2d(hr_t, spec["scale"])
    else:
        size = hr_t.shape[-1] // spec["scale"]
        lr_t = F.interpolate(hr_t, size=size, mode="bicubic", antialias=True, align_corners=False)
    with atomic_open(out, "wb") as handle:
        np.savez(handle, hr=hr_t.numpy(), lr=lr_t.numpy(), validation=spec["validation_patches"])
    data_card = {k: spec.get(k) for k in ("source", "preset", "nside", "frequency_ghz")}
    data_card["file"] = Path(spec["file"]).name if spec.get("file") else None  # no home dir
    data_card["standin"] = standin = spec["source"] == "standin"
    data_card.update({k: spec[k] for k in ("patches", "validation_patches", "hr_size", "scale")})
    data_card["downsample"] = spec["downsample"] if lr is None else "given"
    data_card.update(reso_arcmin=reso, seed=seed, normalisation=normalisation, images=len(hr_t))
    data_card["spectrum_slope"] = DUST_SLOPE if standin else None
    write_json(card, data_card)
    write_json(source_file(out), describe_source(spec, None, spec.get("file"), seed))
    return data_card


def load_pairs(path: Path) -> dict[str, torch.Tensor]:
    """The training and held-out pairs, as float tensors (N, 1, H, W)."""
    import torch

    with np.load(path) as data:
        hr, lr = torch.from_numpy(data["hr"]), torch.from_numpy(data["lr"])
        split = len(hr) - int(data["validation"])
    return {"hr": hr[:split], "lr": lr[:split], "hr_val": hr[split:], "lr_val": lr[split:]}

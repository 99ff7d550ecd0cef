"""Part 3: dust images through PySM3, SR3 on diffusers, the quality metrics, the scaling point."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from accelstudy.data import dust
from accelstudy.diffusion import quality, sr3
from accelstudy.errors import ConfigError

from tests.conftest import ROOT

SPEC = {
    "source": "standin",
    "nside": 16,
    "frequency_ghz": 545,
    "patches": 16,
    "validation_patches": 2,
    "hr_size": 16,
    "scale": 4,
    "downsample": "block",
    "reso_arcmin": None,
}
MODEL = {
    "inner_channels": 8,
    "channel_multipliers": [1, 2],
    "attention_resolutions": [8],
    "res_blocks": 1,
    "dropout": 0.0,
}
SCHEDULE = {"steps": 2000, "beta_start": 1e-6, "beta_end": 1e-2}
POINT = {
    "devices": 2,
    "repeat": 0,
    "seed": 7,
    "total_iterations": 4,
    "warmup_iterations": 1,
    "batch_per_device": 4,
    "learning_rate": 2e-5,
    "dtype": "float32",
    "model": MODEL,
    "schedule": SCHEDULE,
    "quality": {"images": 2, "sampling_steps": 3},
}


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dust")
    card = dust.prepare_dust(SPEC, 7, folder / "pairs.npz", folder / "card.json")
    return folder, card


def test_standin_sky_through_pysm_has_the_dust_spectrum():
    """A stand-in template through PySM3's modified black body at 545 GHz keeps the
    configured power law: the slope of log C_ell over 4 <= ell <= 128 at nside 64, fitted
    with weights sqrt(2 ell + 1) (each C_ell's relative error is sqrt(2 / (2 ell + 1))), is
    -2.42 within 0.1: the spread over skies is 0.03, and pixelisation flattens it by 0.02."""
    import healpy as hp

    sky = dust.emission({"source": "standin", "nside": 64, "frequency_ghz": 545}, seed=1)
    assert sky.min() > 0  # an intensity
    cl = hp.anafast(sky, lmax=191)
    ell = np.arange(cl.size)
    fit = (ell >= 4) & (ell <= 128)
    slope = np.polyfit(np.log(ell[fit]), np.log(cl[fit]), 1, w=np.sqrt(2 * ell[fit] + 1))[0]
    assert slope == pytest.approx(dust.DUST_SLOPE, abs=0.1)


def test_pairs_are_block_means_of_the_truth_in_unit_range(pairs):
    folder, card = pairs
    data = dust.load_pairs(folder / "pairs.npz")
    assert data["hr"].shape == (16, 1, 16, 16) and data["lr_val"].shape == (2, 1, 4, 4)
    everything = torch.cat([data["hr"], data["hr_val"]])
    assert everything.min() == pytest.approx(-1) and everything.max() == pytest.approx(1)
    blocks = data["hr"].reshape(16, 1, 4, 4, 4, 4).mean(dim=(3, 5))
    torch.testing.assert_close(data["lr"], blocks)
    assert card["standin"] and card["images"] == 18 and card["spectrum_slope"] == -2.42
    assert card["reso_arcmin"] == pytest.approx(219.87, abs=0.01)  # nside 16's pixel size


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"hr_size": 30},
            "'diffusion.data.hr_size': 30 pixels cannot be halved 3 times by the "
            "UNet (channel_multipliers has 4 levels); use a multiple of 8",
        ),
        ({"scale": 3}, "'diffusion.data.scale': 64 pixels do not divide by 3"),
        ({"devices": [1, 4096]}, "'diffusion.devices': 4096 cards, but system 'cpu' offers"),
        (
            {"attention": [5]},
            "'diffusion.model.attention_resolutions': 5 is not one of the "
            "UNet's resolutions [64, 32, 16, 8]",
        ),
        (
            {"source": "pysm", "preset": "d9"},
            "PySM preset 'd9' needs dust_gnilc/"
            "gnilc_dust_template_nside2048_2023.02.10.fits "
            "under PYSM_LOCAL_DATA",
        ),
    ],
)
def test_bad_diffusion_settings_are_one_line_before_any_job(change, message):
    from accelstudy.study import check_diffusion, load_study, validate_study
    from accelstudy.systems import load_system

    config = load_study(ROOT / "config" / "config.yaml")
    sweep = config["diffusion"]
    for key in ("hr_size", "scale", "source", "preset"):
        if key in change:
            sweep["data"][key] = change[key]
    sweep["devices"] = change.get("devices", sweep["devices"])
    sweep["model"]["attention_resolutions"] = change.get("attention", [8])
    with pytest.raises(ConfigError) as error:
        validate_study(config)
    assert message in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(ConfigError):
        check_diffusion(config, load_system("cpu"))


def test_missing_pysm_data_names_every_file_and_the_variable(tmp_path):
    with pytest.raises(ConfigError) as error:
        dust.check_preset("d1", 256, environ={})
    text = str(error.value)
    assert "pysm_2/dust_t_new.fits, pysm_2/dust_q_new.fits" in text
    assert "PYSM_LOCAL_DATA (now unset)" in text and "source: standin" in text
    for name in dust.preset_files("d1", 256):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).touch()
    dust.check_preset("d1", 256, environ={"PYSM_LOCAL_DATA": str(tmp_path)})


def test_the_presets_are_pysms_own_without_importing_it():
    """The check reads PySM's presets file (the Snakefile's parse stays clear of a 5 s import)."""
    from pysm3.sky import PRESET_MODELS

    assert dust.preset_models() == PRESET_MODELS and "d1" in PRESET_MODELS
    check = "import sys; from accelstudy.data.dust import preset_files as f; f('d1', 256); "
    check += "print(sorted({'pysm3', 'torch'} & set(sys.modules)))"
    ran = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == "[]"


def test_local_images_whose_scale_does_not_match_stop_with_one_line(tmp_path):
    np.savez(tmp_path / "mine.npz", hr=np.random.rand(4, 16, 16), lr=np.random.rand(4, 8, 8))
    spec = {**SPEC, "source": "local", "file": str(tmp_path / "mine.npz")}
    with pytest.raises(
        dust.DustDataError,
        match=r"'diffusion.data.scale': 4, but .* pairs "
        r"8-pixel inputs with 16-pixel targets; set scale to 2",
    ):
        dust.prepare_dust(spec, 0, tmp_path / "pairs.npz", tmp_path / "card.json")
    assert not (tmp_path / "pairs.npz").exists()
    card = dust.prepare_dust({**spec, "scale": 2}, 0, tmp_path / "pairs.npz", tmp_path / "c.json")
    assert card["downsample"] == "given" and not card["standin"]


def test_psnr_and_ssim_on_constructed_pairs():
    """Identical images: PSNR infinite, SSIM 1. A constant image a against a + c (data range
    2): PSNR = 10 log10(4 / c^2); SSIM = its luminance term (2a(a+c) + C1) / (a^2 + (a+c)^2
    + C1) with C1 = (0.01 * 2)^2, the contrast-structure term being 1."""
    rng = np.random.default_rng(0)
    image = rng.uniform(-1, 1, (32, 32))
    assert quality.psnr(image, image) == math.inf and quality.ssim(image, image) == 1.0
    a, c = 0.2, 0.1
    flat = np.full((32, 32), a)
    assert quality.psnr(flat + c, flat) == pytest.approx(10 * math.log10(4 / c**2))
    c1 = (0.01 * 2) ** 2
    expected = (2 * a * (a + c) + c1) / (a**2 + (a + c) ** 2 + c1)
    assert quality.ssim(flat + c, flat) == pytest.approx(expected, rel=1e-9)


def wang_ssim(x: np.ndarray, y: np.ndarray, data_range: float = 2.0) -> float:
    """SSIM as Wang et al. (2004) define it and their reference code computes it: an 11 x 11
    Gaussian window (sigma 1.5, normalised), K1 0.01, K2 0.03, the map over the 'valid'
    region, its mean. Written here from the paper, independently of scikit-image."""
    from scipy.signal import correlate2d

    taps = np.exp(-(np.arange(-5, 6) ** 2) / (2 * 1.5**2))
    window = np.outer(taps, taps) / np.outer(taps, taps).sum()
    mean = lambda a: correlate2d(a, window, mode="valid")  # noqa: E731
    mx, my = mean(x), mean(y)
    vx, vy, cxy = mean(x * x) - mx**2, mean(y * y) - my**2, mean(x * y) - mx * my
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    ssim_map = ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx**2 + my**2 + c1) * (vx + vy + c2))
    return float(ssim_map.mean())


def test_ssim_is_wang_et_als_on_textured_images(pairs):
    """On held-out dust images against noisy and blurred versions of them, the SSIM the
    records carry equals Wang et al.'s definition computed independently."""
    data = dust.load_pairs(pairs[0] / "pairs.npz")
    rng = np.random.default_rng(1)
    truth = data["hr"][:4, 0].double().numpy()
    blurred = sr3.upsample(data["lr"][:4], 16)[:, 0].double().numpy()
    for t, b in zip(truth, blurred, strict=True):
        for image in (b, t + rng.normal(0, 0.1, t.shape), np.clip(t * 0.8 + 0.1, -1, 1)):
            assert quality.ssim(image, t) == pytest.approx(wang_ssim(image, t), abs=1e-9)


def test_sr3_loss_falls_over_a_short_fixed_seed_run(pairs):
    """40 Adam steps at lr 1e-3 on 16 dust images: the mean loss of the last 10 steps is
    below that of the first 10."""
    data = dust.load_pairs(pairs[0] / "pairs.npz")
    torch.manual_seed(0)
    unet = sr3.build_unet(MODEL, 16)
    table = sr3.sqrt_alpha_bar_prev(sr3.scheduler(SCHEDULE))
    optimizer = torch.optim.Adam(unet.parameters(), lr=1e-3)
    condition = sr3.upsample(data["lr"], 16)
    losses = []
    for step in range(40):
        batch = slice(4 * (step % 4), 4 * (step % 4) + 4)
        loss = sr3.training_loss(unet, table, data["hr"][batch], condition[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert np.mean(losses[-10:]) < 0.8 * np.mean(losses[:10])


def test_noise_levels_follow_sr3s_table():
    """sqrt(alpha_bar) before each step, 1 first; the linear betas of the paper's schedule."""
    schedule = sr3.scheduler(SCHEDULE)
    table = sr3.sqrt_alpha_bar_prev(schedule)
    betas = np.linspace(1e-6, 1e-2, 2000)
    assert table[0] == 1 and len(table) == 2001
    assert table[-1].item() == pytest.approx(np.sqrt(np.prod(1 - betas)), rel=1e-4)
    assert torch.all(table[1:] < table[:-1])


def test_the_papers_network_is_sr3s_size():
    """Inner 128, multipliers [1,2,4,4,8,8], attention at 16, 3 blocks at 256 x 256: a UNet of
    hundreds of millions of parameters (built on the meta device: no memory, no time)."""
    with torch.device("meta"):
        unet = sr3.build_unet(
            {
                "inner_channels": 128,
                "channel_multipliers": [1, 2, 4, 4, 8, 8],
                "attention_resolutions": [16],
                "res_blocks": 3,
                "dropout": 0.2,
            },
            256,
        )
    assert 500e6 < unet.num_parameters() < 650e6
    assert [type(b).__name__ for b in unet.down_blocks].index("AttnDownBlock2D") == 4


def test_strong_scaling_iterations():
    from accelstudy.points import DiffusionPoint

    paper = DiffusionPoint(total_iterations=40000, warmup_iterations=5)
    points = [paper.replace(devices=n) for n in (1, 2, 4)]
    assert [p.iterations_per_device for p in points] == [40000, 20000, 10000]
    assert DiffusionPoint(total_iterations=5, devices=2).iterations_per_device == 3
    assert not any(p.untimed() for p in points)
    # 4 iterations over 4 devices: 1 each, all warm-up; 5 is the least that times one (2 each)
    nothing = DiffusionPoint(total_iterations=4, warmup_iterations=1, devices=4).untimed()
    assert nothing and "total_iterations to at least 5" in nothing and "\n" not in nothing
    assert DiffusionPoint(total_iterations=5, warmup_iterations=1, devices=4).untimed() is None


def run_point(pairs, tmp_path, devices: int, env: dict | None = None):
    folder, _ = pairs
    out, samples = tmp_path / "repeat-0.json", tmp_path / "repeat-0.samples.npz"
    cmd = [
        sys.executable,
        "-m",
        "accelstudy",
        "diffusion",
        "--study",
        "t",
        "--system",
        "cpu",
        "--point",
        json.dumps({**POINT, "devices": devices}),
        "--data",
        str(folder / "pairs.npz"),
        "--card",
        str(folder / "card.json"),
        "--threads",
        str(devices),
        "--out",
        str(out),
        "--samples",
        str(samples),
    ]
    result = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})}
    )
    return result, out, samples


def test_two_processes_split_the_data(pairs, tmp_path):
    """Each of 2 ranks trains on its own half of the images (DistributedSampler); the
    record states the fixed work, the images processed and the quality beside bicubic."""
    from accelstudy.records import validate_record

    result, out, samples = run_point(pairs, tmp_path, 2)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(out.read_text())
    validate_record(record)
    metrics = record["metrics"]
    assert metrics["first_epoch_images_per_rank"] == [8, 8]
    assert metrics["first_epoch_images_shared"] == 0
    assert metrics["iterations"] == 2 and metrics["images_processed"] == 16
    assert len(metrics["peak_memory_per_rank"]) == 2 and metrics["images_per_s"] > 0
    assert metrics["achieved_flops_per_s"] == pytest.approx(
        metrics["images_per_s"] * metrics["flops_per_image"]
    )
    assert metrics["psnr_bicubic"] > metrics["psnr_sr"]  # seconds of training: noise
    assert record["parameters"]["data"]["standin"] and record["data_source"] == "standin"
    assert {"diffusers", "torch"} <= set(record["provenance"]["versions"])
    with np.load(samples) as panel:
        assert panel["sr"].shape == (2, 1, 16, 16) and np.abs(panel["sr"]).max() <= 1


@pytest.mark.parametrize("devices", [1, 2])
def test_a_killed_point_leaves_no_record(pairs, tmp_path, devices):
    """Killed at its second step: launched ranks (2) fail their job with one line; a job that is
    its point's one rank (1) dies with it, as a preempted job does."""
    from accelstudy.ranks import KILL_HOOK

    result, out, _ = run_point(pairs, tmp_path, devices, env={KILL_HOOK: "2"})
    assert result.returncode != 0
    if devices == 1:
        assert result.returncode == 137
    else:
        failed = f"error: accelstudy.diffusion.train on {devices} cards exited with status"
        assert f"accelstudy diffusion: {failed}" in result.stderr
    assert not out.exists() and not list(tmp_path.glob(".*ranks.json"))

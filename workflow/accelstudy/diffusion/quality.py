"""PSNR and SSIM (scikit-image's; SSIM as Wang et al. 2004's code) of images in [-1, 1]."""

import numpy as np
import torch
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

DATA_RANGE = 2.0


def psnr(image: np.ndarray, truth: np.ndarray) -> float:
    with np.errstate(divide="ignore"):  # identical images: infinite, as it should be
        return float(peak_signal_noise_ratio(truth, image, data_range=DATA_RANGE))


def ssim(image: np.ndarray, truth: np.ndarray) -> float:
    window = dict(gaussian_weights=True, sigma=1.5, use_sample_covariance=False)
    return float(structural_similarity(truth, image, data_range=DATA_RANGE, **window))


def scores(images: torch.Tensor, truths: torch.Tensor) -> dict[str, float]:
    """Mean PSNR (dB) and SSIM over a batch of (N, 1, H, W) images."""
    pairs = list(zip(images[:, 0].double().numpy(), truths[:, 0].double().numpy(), strict=True))
    return {f.__name__: float(np.mean([f(i, t) for i, t in pairs])) for f in (psnr, ssim)}

"""SR3 (Saharia et al. 2021; Janspiry's port) on diffusers' UNet, its timestep the noise level."""

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from diffusers import DDIMScheduler, DDPMScheduler, UNet2DModel
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode


def build_unet(model: Mapping[str, Any], hr_size: int):
    """SR3's UNet: in 2 channels (condition, noisy image), out 1 (the predicted noise)."""
    inner, multipliers = model["inner_channels"], model["channel_multipliers"]
    attention = set(model["attention_resolutions"])
    has_attention = [hr_size // 2**i in attention for i in range(len(multipliers))]
    down = tuple("AttnDownBlock2D" if a else "DownBlock2D" for a in has_attention)
    up = tuple("AttnUpBlock2D" if a else "UpBlock2D" for a in has_attention[::-1])
    shape = dict(sample_size=hr_size, in_channels=2, out_channels=1, norm_num_groups=min(32, inner))
    blocks = dict(down_block_types=down, up_block_types=up, layers_per_block=model["res_blocks"])
    channels = tuple(inner * m for m in multipliers)
    return UNet2DModel(**shape, **blocks, block_out_channels=channels, dropout=model["dropout"])


def scheduler(schedule: Mapping[str, Any]):
    """SR3's linear noise schedule as diffusers' DDPM scheduler."""
    betas = dict(beta_start=schedule["beta_start"], beta_end=schedule["beta_end"])
    return DDPMScheduler(num_train_timesteps=schedule["steps"], beta_schedule="linear", **betas)


def sqrt_alpha_bar_prev(noise_schedule) -> Tensor:
    """sqrt(alpha_bar) before each step, with 1 before the first: SR3's noise-level table."""
    alpha_bar = noise_schedule.alphas_cumprod.double()
    return torch.cat([torch.ones(1, dtype=torch.float64), alpha_bar]).sqrt()


def upsample(lr: Tensor, size: int) -> Tensor:
    """SR3's condition: the low-res image up-sampled (bicubic) to the target size."""
    return F.interpolate(lr, size=size, mode="bicubic", align_corners=False)


def training_loss(unet, table: Tensor, hr: Tensor, condition: Tensor) -> Tensor:
    """One SR3 step's loss: continuous noise level, noised target, summed L1 on the noise."""
    t = int(torch.randint(1, len(table), (1,)))  # one of the schedule's steps per batch
    low, high = table[t], table[t - 1]
    gamma = low + (high - low) * torch.rand(hr.shape[0], dtype=torch.float64)
    gamma = gamma.to(hr.device, torch.float32)
    noise = torch.randn(hr.shape).to(hr.device, hr.dtype)
    g = gamma.view(-1, 1, 1, 1)
    noisy = (g * hr + (1 - g**2).sqrt() * noise).to(hr.dtype)
    predicted = unet(torch.cat([condition, noisy], dim=1), gamma).sample
    return F.l1_loss(predicted, noise, reduction="sum")


@torch.no_grad()
def super_resolve(unet, noise_schedule, lr: Tensor, size: int, steps: int, seed: int = 0) -> Tensor:
    """SR images from low-res inputs by DDIM over `steps` of the training schedule."""
    ddim = DDIMScheduler.from_config(noise_schedule.config, clip_sample=True)
    ddim.set_timesteps(steps)
    condition = upsample(lr, size)
    x = torch.randn(condition.shape, generator=torch.Generator().manual_seed(seed)).to(condition)
    for t in ddim.timesteps:
        gamma = ddim.alphas_cumprod[t].sqrt().to(x).expand(len(x))
        noise = unet(torch.cat([condition, x], dim=1), gamma).sample
        x = ddim.step(noise, t, x).prev_sample
    return x.clamp(-1, 1)


def flops_per_image(unet, table: Tensor, hr: Tensor, condition: Tensor) -> int:
    """FLOPs of one training step (forward and backward) per image, counted by torch."""
    with FlopCounterMode(display=False) as counter:
        training_loss(unet, table, hr, condition).backward()
    unet.zero_grad(set_to_none=True)
    return math.ceil(counter.get_total_flops() / hr.shape[0])

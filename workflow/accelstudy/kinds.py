"""The device kinds (a system file's `device`, a record's, `--device`): what each one provides,
so that no module branches on a kind's name. A new kind (an AMD or Intel GPU, the next Gaudi) is
one entry: its torch device type (whose torch.<type> module spells synchronize,
reset_peak_memory_stats, max_memory_allocated and get_device_name, as torch.cuda does), the
collective backend of its ranks, where its memory is read (a card's allocator, or the host's RSS),
its energy sources (accelstudy.energy.CARD_COUNTERS' names), and whether it runs through
optimum-habana. Its peak is its system file's or resources/gpu_peaks.csv's, by card name."""

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceKind:
    name: str
    torch_type: str  # torch.device's type; torch.<torch_type> times and measures it (not "cpu")
    backend: str  # torch.distributed's backend between its ranks
    host: bool = False  # the host is the device: no card per rank, its memory the process's RSS,
    # its peak a GEMM probe (accelstudy.peak), `auto` bfloat16 where the probe finds it fast
    habana: bool = False  # Habana's stack: optimum-habana's Trainer, INC's FP8, lazy/compile modes
    energy: tuple[str, ...] = ()  # its cards' counters, in order of preference (beside RAPL)
    random_on_card: bool = False  # a rank holding random weights whole builds them on its card
    memory_probe: bool = False  # its cards' memory readable before a job (NVML), where unstated
    conda_env: str = "cpu"  # envs/<name>.yaml for `--software-deployment-method conda`


KINDS: dict[str, DeviceKind] = {
    spec.name: spec
    for spec in (
        DeviceKind("cuda", "cuda", "nccl", energy=("nvml",), random_on_card=True,
                   memory_probe=True, conda_env="cuda"),
        DeviceKind("hpu", "hpu", "hccl", habana=True, energy=("hlml", "hl-smi")),
        DeviceKind("cpu", "cpu", "gloo", host=True),
    )
}  # fmt: skip


def kind_of(name: str) -> DeviceKind:
    """The registered kind, or one line naming those there are."""
    if name not in KINDS:
        raise ValueError(f"unknown device kind '{name}'; expected one of {', '.join(KINDS)}")
    return KINDS[name]

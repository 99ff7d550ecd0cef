"""A machine as its system file describes it (config/systems/<name>.yaml): device kind,
cards per node, nodes, dtypes, launcher and scheduler, and the checks a sweep must pass."""

import functools
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import yaml

from accelstudy.errors import ConfigError, require, schema_error
from accelstudy.files import read_yaml
from accelstudy.kinds import KINDS
from accelstudy.paths import SCHEMAS, SYSTEMS


@dataclass(frozen=True)
class System:
    """One system file; `cards_per_node: cores` (the cpu system: a card is a process) means
    this machine's core count."""

    name: str
    device: str
    cards_per_node: int | str
    nodes: int = 1
    dtypes: tuple[str, ...] = ("float32",)
    launcher: str = "none"
    scheduler: str = "none"
    card_resource: str = "none"
    account_required: bool = False
    accelerator: str | None = None
    memory_per_card_gb: float | None = None
    host_memory_gb: float | None = None  # a node's RAM, from the site's documentation
    slurm: dict[str, Any] = field(default_factory=dict)
    energy: tuple[str, ...] = ()  # sources every job must read (accelstudy.energy); else any
    charge: dict[str, Any] | None = None  # the site's charge rule (accelstudy.cost); None: unknown
    # dense peak FLOP/s per card and dtype with the datasheet's `doc`; `measured`: a CPU's probe;
    # `by-device-name`: resources/gpu_peaks.csv's row for the card a job finds (accelstudy.peak)
    peak_flops: dict[str, Any] | str | None = None
    walltime: dict[str, Any] | None = None  # the partition's limit (max_minutes) and its doc
    power: dict[str, Any] | None = None  # watts_per_card at full load and its doc

    @property
    def per_node(self) -> int:
        cards = self.cards_per_node
        return (os.cpu_count() or 1) if cards == "cores" else int(cards)

    @property
    def label(self) -> str:
        """The accelerator's name where the file gives one, else the system's."""
        return self.accelerator or self.name

    def layout(self, cards: int) -> tuple[int, int]:
        """(nodes, ranks per node): cards spread evenly over as few nodes as hold them."""
        nodes = math.ceil(cards / self.per_node)
        return nodes, cards // nodes

    def check_cards(self, key: str, counts: list[int]) -> None:
        """Every count of cards (processes on the cpu system) within what the system offers."""
        offered = self.per_node * self.nodes
        unit = "cores" if self.cards_per_node == "cores" else "cards"
        layout = f"{offered} ({self.nodes} node(s) x {self.per_node} {unit})"
        for cards in counts:
            problem = f"{cards} cards, but system '{self.name}' offers {layout}; "
            require(cards <= offered, key, problem + f"ask for at most {offered}")

    def check_dtype(self, key: str, dtype: str) -> None:
        """A dtype the system offers; `auto` picks one inside the job (accelstudy.peak)."""
        offered = f"{self.label} (system '{self.name}': {list(self.dtypes)})"
        problem = f"{dtype} is not offered by {offered}; use one of those"
        require(dtype == "auto" or dtype in self.dtypes, key, problem)

    def facts(self) -> dict[str, Any]:
        """What the file says the machine is, so runs that share a name can be checked."""
        keys = ("device", "accelerator", "memory_per_card_gb", "cards_per_node", "nodes")
        return {key: getattr(self, key) for key in keys}


def load_system(name: str) -> System:
    """The machine description config/systems/{name}.yaml, checked against system.schema.yaml."""
    path, known = SYSTEMS / f"{name}.yaml", sorted(p.stem for p in SYSTEMS.glob("*.yaml"))
    require(path.is_file(), "system", f"unknown system '{name}'; known systems are {known}")
    spec = read_yaml(path)
    check_system(spec, f"config/systems/{name}.yaml: key")
    # the file's stem is where its records live: a copied file still naming its source would
    # present the source's records as its own
    if spec["name"] != name:
        raise ConfigError(f"config/systems/{name}.yaml: key 'name' says '{spec['name']}', but a "
                          f"system's name is its file's: write name: {name}")  # fmt: skip
    lists = {"dtypes": tuple(spec.get("dtypes", ("float32",))), "slurm": spec.get("slurm") or {}}
    return System(**{**spec, **lists, "energy": tuple(spec.get("energy") or ())})


def every_system() -> list[System]:
    """Every system file that loads, a base before its variants (perlmutter before
    perlmutter-80gb); one that does not is named in one line on stderr and passed over, so a
    file no run uses never stops a report or a forecast."""
    found = []
    for path in sorted(SYSTEMS.glob("*.yaml"), key=lambda p: (len(p.stem), p.stem)):
        try:
            found.append(load_system(path.stem))
        except ConfigError as error:
            print(f"accelstudy: passed over {path.name}: {error}", file=sys.stderr)
    return found


@functools.cache
def _validator(kinds: tuple[str, ...]) -> jsonschema.Draft202012Validator:
    """system.schema.yaml with the registered device kinds, read once per process and kinds."""
    schema = yaml.safe_load((SCHEMAS / "system.schema.yaml").read_text())
    schema["properties"]["device"]["enum"] = list(kinds)
    return jsonschema.Draft202012Validator(schema)


def check_system(spec: Any, where: str) -> None:
    """Types, minimums (no zero cards, cores or memory to divide by), enums, no unknown key."""
    if errors := list(_validator(tuple(KINDS)).iter_errors(spec)):
        raise schema_error(errors, where)


def card_memory(system: System, device_kind: str) -> tuple[float | None, str]:
    """GB a card offers and where that figure comes from: the system file's, else (CUDA) the
    smallest of the cards this process sees as its driver reports them, through NVML (which
    makes no CUDA context in the job's process), else torch.cuda.mem_get_info; else unknown."""
    if system.memory_per_card_gb is not None:
        return float(system.memory_per_card_gb), f"config/systems/{system.name}.yaml"
    if not KINDS[device_kind].memory_probe:
        return None, "unknown"
    try:
        import pynvml

        pynvml.nvmlInit()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        names = visible.split(",") if visible else range(pynvml.nvmlDeviceGetCount())
        handles = [
            pynvml.nvmlDeviceGetHandleByUUID(n)
            if str(n).startswith(("GPU-", "MIG-"))
            else pynvml.nvmlDeviceGetHandleByIndex(int(n))
            for n in names
        ]
        return min(pynvml.nvmlDeviceGetMemoryInfo(h).total for h in handles) / 1e9, "nvml"
    except Exception:  # no nvidia-ml-py, or no driver answers: torch's own count
        import torch

        if not torch.cuda.is_available():
            return None, "unknown"
        totals = [torch.cuda.mem_get_info(i)[1] for i in range(torch.cuda.device_count())]
        return min(totals) / 1e9, "torch.cuda.mem_get_info"

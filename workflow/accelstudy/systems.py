"""A machine as its system file describes it (config/systems/<name>.yaml): device kind,
cards per node, nodes, dtypes, launcher and scheduler, and the checks a sweep must pass."""

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any

import yaml

from accelstudy.cost import check_rule
from accelstudy.energy import SOURCES
from accelstudy.errors import ConfigError, require
from accelstudy.paths import SYSTEMS

FACT_KEYS = ("device", "accelerator", "memory_per_card_gb", "cards_per_node", "nodes")


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
    # dense peak FLOP/s per card and dtype with the datasheet's `doc`; `measured`: a CPU's probe
    peak_flops: dict[str, Any] | str | None = None

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
        if dtype == "auto":
            return
        offered = f"{self.label} (system '{self.name}': {list(self.dtypes)})"
        require(dtype in self.dtypes, key, f"{dtype} is not offered by {offered}; use one of those")

    def facts(self) -> dict[str, Any]:
        """What the file says the machine is, so runs that share a name can be checked."""
        return {key: getattr(self, key) for key in FACT_KEYS}


def check_peak(path: Any, stated: Any) -> None:
    """`measured`, or dtype -> FLOP/s per card with the datasheet's address in `doc`."""
    if stated is None or stated == "measured":
        return
    fix = "give dtype: FLOP/s per card and doc: the datasheet's address, or measured (a CPU)"
    if not isinstance(stated, dict) or not stated.get("doc"):
        raise ConfigError(f"{path}: peak_flops: {fix}")
    for dtype, value in stated.items():
        number = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
        if dtype not in ("doc", "note") and value is not None and not number:
            raise ConfigError(f"{path}: peak_flops.{dtype}: {value!r} is not a FLOP/s; {fix}")


def load_system(name: str) -> System:
    """The machine description config/systems/{name}.yaml."""
    path = SYSTEMS / f"{name}.yaml"
    known = sorted(p.stem for p in SYSTEMS.glob("*.yaml"))
    require(path.is_file(), "system", f"unknown system '{name}'; known systems are {known}")
    spec = yaml.safe_load(path.read_text())
    if unknown := set(spec) - {f.name for f in dataclasses.fields(System)}:
        raise ConfigError(f"{path}: unknown key(s) {sorted(unknown)}")
    dtypes = tuple(spec.get("dtypes", ("float32",)))
    energy = tuple(spec.get("energy") or ())
    for source in set(energy) - set(SOURCES):
        raise ConfigError(f"{path}: energy source '{source}' is not one of {', '.join(SOURCES)}")
    check_peak(path, spec.get("peak_flops"))
    if spec.get("charge") is not None:
        check_rule(name, spec["charge"])
    return System(**{**spec, "dtypes": dtypes, "slurm": spec.get("slurm") or {}, "energy": energy})

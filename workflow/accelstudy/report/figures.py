"""Writing a part's figure as a PNG (or, where a study has nothing to draw, one that says why)."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
# labels come from records (names, tasks): a "$" in one is text, never mathtext that can fail
matplotlib.rcParams["text.parse_math"] = False
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402


def plain_numbers(ax: Any) -> None:
    """Tick labels as plain numbers: a log axis' defaults are mathtext ('10^3'), which this
    report does not parse, so they would show as raw '$\\mathdefault{...}$'."""
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        axis.set_minor_formatter(NullFormatter())


def save(fig: plt.Figure, out: Path) -> None:
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def draw(out: Path, why_empty: str, make: Callable[..., plt.Figure], data: Any, *args: Any) -> None:
    """make(data, *args), or (the rule declares it regardless) a figure saying why data is empty."""
    if not data.empty:
        return save(make(data, *args), out)
    fig, ax = plt.subplots(figsize=(6, 1))
    ax.set_axis_off()
    ax.text(0.5, 0.5, why_empty, ha="center", va="center")
    return save(fig, out)

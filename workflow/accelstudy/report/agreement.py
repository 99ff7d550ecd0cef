"""Strategies train the same model: before they are compared by speed, each one's loss at
every step beside the reference's (DDP, else the first that ran) at equal cards, seed, data and
steps, within 2^-6 of it: four times what FSDP's bf16 loss may be off by its last rounding
alone (reduction order, sharded clipping and bf16 casts drift far less; README: measured).
A strategy beyond it trains something else: flagged, and left out of the choices."""

import math
from collections.abc import Sequence

import pandas as pd

from accelstudy.strategies import STRATEGIES

# what must be equal for the losses to agree: the study (one config) and, across studies, what
# shapes the data and steps; not the repeat (every repeat trains from the same seed)
COMPARABLE_KEYS = ["study", "model", "system", "data", "cards", "attention", "seed", "max_steps"]
COMPARABLE_KEYS += ["per_device_batch", "grad_accum", "max_seq_length", "dtype"]
FLAGGED = "flagged: trains differently, left out of the choices"
TOLERANCE = 2**-6  # of the reference's loss, at every step
AGREEMENT_COLUMNS = ["model", "system", "cards", "attention", "repeat", "strategy", "against"]
AGREEMENT_COLUMNS += ["steps", "worst step", "loss", "reference loss", "deviation %", "tolerance %"]
AGREEMENT_COLUMNS += ["verdict"]


def deviation(losses: Sequence[float], reference: Sequence[float]) -> tuple[int, float]:
    """The step (from 1) where the losses differ most relative to the reference's, and how much."""
    pairs = zip(losses, reference, strict=False)
    relative = [abs(a - b) / abs(b) if math.isfinite(a + b) else math.inf for a, b in pairs]
    worst = max(range(len(relative)), key=relative.__getitem__)
    return worst + 1, relative[worst]


def agreement(records: pd.DataFrame) -> pd.DataFrame:
    """Per fine-tuning record beside a reference: its largest deviation and the verdict."""
    if records.empty or "losses" not in records:
        return pd.DataFrame()
    runs = records[(records["stage"] == "finetune") & (records["status"] == "ok")]
    runs = runs.loc[[pd.api.types.is_list_like(v) and len(v) > 0 for v in runs["losses"]]]
    keys, rows = [key for key in COMPARABLE_KEYS if key in runs], []
    rank = list(STRATEGIES).index  # the registry's order: the reference first
    for values, part in runs.groupby(keys, dropna=False):
        ranked = part.sort_values("strategy", key=lambda s: s.map(rank), kind="stable")
        reference, *others = ranked.to_dict("records")
        for run in others:
            step, off = deviation(run["losses"], reference["losses"])
            rows.append({**dict(zip(keys, values, strict=True)), "repeat": run["repeat"],
                "strategy": run["strategy"], "against": reference["strategy"],
                "steps": len(run["losses"]), "worst step": step, "loss": run["losses"][step - 1],
                "reference loss": reference["losses"][step - 1], "deviation %": round(100 * off, 3),
                "tolerance %": round(100 * TOLERANCE, 3), "record": run["record"],
                "verdict": "agrees" if off <= TOLERANCE else FLAGGED})  # fmt: skip
    return pd.DataFrame(rows)


def flagged_records(records: pd.DataFrame) -> set[str]:
    """The records of strategies that train differently from their reference."""
    checked = agreement(records)
    return set() if checked.empty else set(checked.loc[checked["verdict"] != "agrees", "record"])

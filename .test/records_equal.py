"""Are two runs of one study the same science? Compare every result record (and the report's
tables) of two results/<study> folders field by field, leaving out what legitimately differs
between runs: timings (`*_s`, `*_per_s`), memory (`*memory*`, `*rss*`), `provenance.*`, and what
follows from timings: the fraction of peak (`mfu`, `achieved_*`, and `dtype_reason`, which
quotes the CPU probe's rates), the charge (`cost.hours`, `cost.units`, `cost_*`, a table's
`charge ...`) and the `time_*.csv` and `forecast_*.csv` tables (the forecast of each job from
the others' measured rates).

    python .test/records_equal.py results-before/tiny results-after/tiny

Fine-tuning losses after the first step differ between two runs of one commit (bfloat16 LoRA
on the CPU is not bit-reproducible): run the old commit twice to see that noise.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pandas as pd

# timings, memory, provenance, and what follows from timings: in records (keys) and in the
# tables (column headings)
VOLATILE = re.compile(
    r"_s$|_per_s|/s|time|memory|MiB|GiB|speed-up|efficiency|peak|minutes|provenance|git_commit"
    r"|config_hash|_at$|host|rss|mfu|MFU|achieved|dtype_reason|^hours$|^units$|^cost_|charge"
)


def strip(value, key: str = ""):
    if isinstance(value, dict):
        return {k: strip(v, k) for k, v in value.items() if not VOLATILE.search(k)}
    if isinstance(value, list):
        return [strip(v) for v in value]
    return value


def differences(a, b, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [
            f"{where}.{k}: only in {'first' if k in a else 'second'}" for k in a.keys() ^ b.keys()
        ]
        for k in a.keys() & b.keys():
            out += differences(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        pairs = enumerate(zip(a, b, strict=True))
        return [d for i, (x, y) in pairs for d in differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def records(root: Path) -> dict[str, dict]:
    found = {}
    for path in sorted(root.rglob("*.json")):
        if "logs" in path.parts or path.name.startswith("."):
            continue
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "stage" in data:
            parts = path.relative_to(root).parts  # results/<study>/<system>/... or, before, not
            parts = parts[1:] if parts[0] == data.get("system") else parts
            found["/".join(parts)] = strip(data)
    return found


def tables(root: Path) -> dict[str, pd.DataFrame]:
    out = {}
    for path in sorted((root / "tables").glob("*.csv")):
        if path.name.startswith(("time_", "forecast_")):  # all timings (forecasts: rates)
            continue
        frame = pd.read_csv(path)
        keep = [c for c in frame.columns if not VOLATILE.search(str(c))]
        out[path.name] = frame[keep]
    return out


def main(first: str, second: str) -> int:
    a, b = Path(first), Path(second)
    ra, rb = records(a), records(b)
    problems = [
        f"record {p}: only in {'first' if p in ra else 'second'}" for p in ra.keys() ^ rb.keys()
    ]
    for path in sorted(ra.keys() & rb.keys()):
        problems += [f"record {path}{d}" for d in differences(ra[path], rb[path])]
    ta, tb = tables(a), tables(b)
    problems += [
        f"table {n}: only in {'first' if n in ta else 'second'}" for n in ta.keys() ^ tb.keys()
    ]
    for name in sorted(ta.keys() & tb.keys()):
        first, second = ta[name], tb[name]
        if sorted(first.columns) != sorted(second.columns) or len(first) != len(second):
            problems.append(f"table {name}: other columns or rows")
            continue
        for column in first.columns:
            try:
                pd.testing.assert_series_equal(first[column], second[column])
            except AssertionError:
                problems.append(f"table {name}: column {column!r} differs")
    print("\n".join(problems) or f"equal: {len(ra)} records, {len(ta)} tables")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))

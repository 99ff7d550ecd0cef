"""The forecast judged on what the paper published (accelstudy.forecast.judge_published), no
job run: per published timing, forecast / published with every figure (what plan-time uses),
with that figure held out (predicted from the rest: its accelerator's other card counts, else
the assumed rate) and with the assumed rates alone. Torch-free; a second or two (--tiny is the
same run: nothing in it scales).

Bounds (common.judge): with every figure, each forecast within [0.67x, 1.5x] of its published
timing (issue #46); held out, the leave-one-out table is printed and not bounded: an
accelerator with one published figure falls back to the assumed rate, which is the point of
showing it."""

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))

from accelstudy.forecast import judge_published
from common import judge, parse_args

BOUNDS = {"forecast_ratio_min": (0.67, None), "forecast_ratio_max": (None, 1.5)}

if __name__ == "__main__":
    args = parse_args((__doc__ or "").splitlines()[0])
    table = pd.DataFrame(judge_published()).drop(columns="forecast_source")
    print(table.to_markdown(index=False, floatfmt=".2f"))
    ratios = table["forecast_ratio"].astype(float)
    held = table["held_out_ratio"].astype(float)
    print(f"ratio: forecast / published {ratios.min():.2f}x-{ratios.max():.2f}x over "
          f"{len(table)} figures; held out {held.min():.2f}x-{held.max():.2f}x")  # fmt: skip
    figures = {"forecast_ratio_min": ratios.min(), "forecast_ratio_max": ratios.max()}
    sys.exit(judge(figures, BOUNDS, args.bound))

"""The GEMM walkthrough's progression figure: each step as a share of torch.matmul (cuBLAS), shape by shape.

    table = progression_table(rows)            # rows of gemm_steps (one run): % of torch with 95 % intervals
    fig = progression(rows, source="data/measured/h200/gemm_steps.csv (NVIDIA H200, <date>)")

A step's share is torch's time / the step's time, formed round by round by `workbook.timing.compare` (the
`ratio_torch` columns are the step's time / torch's): 100 % is cuBLAS's speed, more is faster. The interval
is the bootstrap 95 % interval of that median ratio, so two bars whose intervals overlap are not told apart.
"""
from __future__ import annotations

import pandas as pd

from workbook import plots

CONTENDER_ORDER = ("step1_four_stages", "step2_register_epilogue", "step3_more_stages",
                   "step4_persistent_wave_tail", "production default")
LABELS = {"step1_four_stages": "1 · 4 stages, staged epilogue", "step2_register_epilogue": "2 · register epilogue",
          "step3_more_stages": "3 · 7 stages (128 x 128)", "step4_persistent_wave_tail": "4 · persistent, wave tail",
          "production default": "production default"}


def shape_label(M: int, N: int, K: int) -> str:
    return f"{M}³" if M == N == K else f"{M}x{N}x{K}"


def progression_table(rows: pd.DataFrame, timing: str = "kernel") -> pd.DataFrame:
    """One row per (shape, contender) of our kernels: % of torch.matmul and its 95 % interval, in story order."""
    if timing not in ("kernel", "latency"):
        raise ValueError(f"timing must be 'kernel' or 'latency', got {timing!r}")
    need = {"variant", "kernel", "timing", "M", "N", "K", "ratio_torch", "ratio_torch_lo", "ratio_torch_hi"}
    missing = need - set(rows.columns)
    if missing:
        raise ValueError(f"not gemm_steps rows: columns {sorted(missing)} are missing")
    ours = rows[(rows.kernel == "ours") & (rows.timing == timing)]
    order = {name: i for i, name in enumerate(CONTENDER_ORDER)}
    table = pd.DataFrame({
        "shape": [shape_label(m, n, k) for m, n, k in zip(ours.M, ours.N, ours.K)],
        "size": ours.M * ours.N * ours.K, "contender": ours.variant,
        "pct_of_torch": 100 / ours.ratio_torch, "lo": 100 / ours.ratio_torch_hi, "hi": 100 / ours.ratio_torch_lo})
    table["order"] = table.contender.map(lambda v: order.get(v, len(order)))
    return (table.sort_values(["size", "shape", "order"]).drop(columns=["size", "order"]).reset_index(drop=True))


def progression(rows: pd.DataFrame, *, source: str, timing: str = "kernel", ax=None, title: str | None = None):
    """Per shape, each step (and the production default) as % of torch.matmul: a point, whiskers the 95 %
    interval, a line at 100 %. `source` says which file and run the rows come from."""
    if not isinstance(source, str) or not source.strip():
        raise ValueError("source= must say which file and run the rows come from")
    table = progression_table(rows, timing)
    if table.empty:
        raise ValueError("no rows of our kernels to draw")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(11, 4.2), layout="constrained") if ax is None else (ax.figure, ax)
    shapes = list(dict.fromkeys(table["shape"]))
    contenders = list(dict.fromkeys(table.contender))
    width = 0.8 / len(contenders)
    colors = [plt.get_cmap("tab10")(i % 10) for i in range(len(contenders))]
    for i, name in enumerate(contenders):       # points, not bars: the axis need not start at 0
        part = table[table.contender == name].set_index("shape").reindex(shapes)
        x = [s + (i - (len(contenders) - 1) / 2) * width for s in range(len(shapes))]
        ax.errorbar(x, part.pct_of_torch, yerr=[part.pct_of_torch - part.lo, part.hi - part.pct_of_torch],
                    fmt="o", markersize=6, capsize=3, linewidth=1, color=colors[i], label=LABELS.get(name, name))
    ax.axhline(100, color="0.3", linewidth=0.9, linestyle="--")
    ax.text(len(shapes) - 0.5, 100, "torch.matmul ", va="bottom", ha="right", fontsize="x-small", color="0.3")
    ax.set_xticks(range(len(shapes)), shapes)
    for s in range(len(shapes) - 1):
        ax.axvline(s + 0.5, color="0.9", linewidth=0.8)
    ax.set_xlim(-0.5, len(shapes) - 0.5)
    ax.set_ylabel(f"% of torch.matmul ({timing} time)\nwhiskers: 95 % interval")
    ax.legend(frameon=False, fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(title or "The GEMM steps as a share of cuBLAS, shape by shape", fontsize="medium")
    plots.caption(ax, source)
    return fig


"""The recorded configuration sweep (`gemm_kernels.sweep`) and the per-shape rule (`gemm_kernels.rule`) as figures
and tables a reader takes in at a glance: % of torch.matmul (100 / ratio: > 100 means ours is faster).

    frame = rule.latest_run(records.read("h200", sweep.TABLE))
    heatmaps(frame, rule.learned())                 # M x N per K: the rule's leave-one-out choice, % of torch
    heatmaps(check, rule.learned(), variant="gemm() default")   # gemm(a, b) as shipped (the rule-check table)
    class_boxes(frame, rule.learned())              # a box per class: fixed default, rule, per-shape best
    class_table(frame, rule.learned())              # median, minimum and worst shape of each, per class
    time_split(frame, [(1024, 1024, 1024)])         # GPU vs back-to-back vs synchronised time, ours vs torch's

The rule is judged by leave-one-out (`rule.leave_one_out`): at each measured shape, the choice it makes without
that shape's own measurement, so the figures show how it does on a shape it has not seen.
"""
from __future__ import annotations

import re
import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from gemm_kernels import configs
from gemm_kernels import rule as rules
from workbook.explore import provenance_text
from workbook.plots import GAIN, IDLE, LOSS

SOURCE = "data/measured/h200/gemm_config_sweep.csv"
CHECK_SOURCE = "data/measured/h200/gemm_rule_check.csv"
SHIPPED = "gemm() default"               # the variant of the rule-check table: gemm(a, b) with no options
HEAT_K = (1024, 4096, 8192)
CLASSES = ("square", "rectangle", "skinny", "k-heavy", "odd")
GOAL_PCT, FLOOR_PCT = 103.0, 95.0        # issue 18: median >= 103 % in every class, no shape below 95 %
CONTENDERS = {"default": "fixed default", "rule": "rule (leave-one-out)", "oracle": "per-shape best"}
_COLOURS = {"default": IDLE, "rule": GAIN, "oracle": "#55a868", "shipped": LOSS}
_SCHEDULES = {"balanced": "b", "stream-k": "sk", "split-k": "sp", "uniform": "u", "one-per-item": "p"}


def short_name(name: str) -> str:
    """A cell-sized label of a configuration name: "256 balanced cluster2" -> "256b2", "128 stream-k cluster1"
    -> "128sk1", "128 split-k cluster2" -> "128sp2", "64 one-per-item cluster1" -> "64p1" (width, schedule, CTAs
    per cluster); the small-M tile's names give its rows too: "64x128 uniform cluster1" -> "64x128u1"; swapped
    operands end in "s": "288 uniform cluster4 swapped" -> "288u4s"."""
    parts = name.split()
    swapped = parts[3:] == ["swapped"]
    if swapped:
        parts = parts[:3]
    if (len(parts) != 3 or not re.fullmatch(r"\d+(x\d+)?", parts[0]) or parts[1] not in _SCHEDULES
            or not parts[2].startswith("cluster")):
        raise ValueError(f"{name!r} is not a 'width schedule clusterN [swapped]' name like those of "
                         f"configs.HOPPER_CANDIDATES")
    return f"{parts[0]}{_SCHEDULES[parts[1]]}{parts[2].removeprefix('cluster')}{'s' if swapped else ''}"


def percent(frame: pd.DataFrame, timing: str) -> pd.DataFrame:
    """% of torch.matmul per shape (rows M, N, K) and variant (columns) of our rows in one timing."""
    rows = frame[(frame.kernel == "ours") & (frame.timing == timing)]
    if rows.empty:
        raise ValueError(f"no rows of ours in timing {timing!r}; the frame has {sorted(set(frame.timing))}")
    return 100 / rows.pivot_table(index=["M", "N", "K"], columns="variant", values="ratio", aggfunc="last")


def choices(frame: pd.DataFrame, rule: rules.Rule, timing: str = "kernel", variant: str | None = None):
    """One row per shape of `frame`: its class, the configuration shown and its % of torch.matmul. `variant`
    None: the rule's leave-one-out choice; SHIPPED: the rows of gemm() as shipped, labelled with the rule's
    choice (what gemm ran); a candidate's name: that candidate everywhere."""
    pct = percent(frame, timing)
    classes = frame.drop_duplicates(["M", "N", "K"]).set_index(["M", "N", "K"])["class"]
    rows = []
    for shape in pct.index:
        if variant is None:
            config, value = rule.choose(*shape, without=shape), None
        elif variant == SHIPPED:
            config, value = rule.choose(*shape), pct.loc[shape, SHIPPED]
        else:
            config, value = variant, None
        if value is None:
            value = pct.loc[shape, config] if config in pct.columns else np.nan
        rows.append({"class": classes[shape], "M": shape[0], "N": shape[1], "K": shape[2], "config": config,
                     "label": short_name(config), "pct": float(value)})
    return pd.DataFrame(rows)


def source_line(frame: pd.DataFrame, source: str = SOURCE) -> str:
    """The file and the provenance of its rows, for a caption."""
    return f"{source} ({provenance_text(frame)})"


def _footer(fig: Figure, source: str) -> None:
    """A small grey 'Source: ...' line under all panels, wrapped to the figure's width."""
    chars = max(60, int(fig.get_figwidth() * 72 / (0.55 * 8.3)))
    fig.supxlabel(textwrap.fill(f"Source: {source}", width=chars, break_on_hyphens=False), fontsize="x-small",
                  color="0.4")


def heatmaps(frame: pd.DataFrame, rule: rules.Rule, timing: str = "kernel", variant: str | None = None, *,
             source: str = SOURCE) -> Figure:
    """One panel per K in HEAT_K: % of torch.matmul over the M x N grid of the square and rectangle shapes,
    each cell annotated with its % and the short name of the configuration shown (see `choices`), on a
    diverging colour map centred on 100 %. Cells the sweep did not measure are left grey."""
    cells = choices(frame, rule, timing, variant)
    cells = cells[cells["class"].isin(("square", "rectangle")) & cells.K.isin(HEAT_K)]
    if cells.empty:
        raise ValueError("the frame has no square or rectangle shapes with K in " + str(HEAT_K))
    sides = sorted(set(cells.M) | set(cells.N))
    span = min(60.0, max(5.0, float(np.nanmax(np.abs(cells.pct - 100)))))
    norm = Normalize(100 - span, 100 + span)
    fig, axes = plt.subplots(1, len(HEAT_K), figsize=(5.2 * len(HEAT_K), 5.4), layout="constrained")
    for ax, K in zip(axes, HEAT_K):
        grid = cells[cells.K == K].pivot_table(index="M", columns="N", values="pct").reindex(index=sides, columns=sides)
        ax.set_facecolor("0.88")
        im = ax.imshow(np.ma.masked_invalid(grid.to_numpy()), origin="lower", cmap="RdBu", norm=norm)
        for r in cells[cells.K == K].itertuples():
            x, y = sides.index(r.N), sides.index(r.M)
            dark = abs(r.pct - 100) > 0.6 * span
            ax.text(x, y, f"{r.pct:.0f}%\n{r.label}", ha="center", va="center", fontsize="x-small",
                    color="white" if dark else "black")
        ax.set_xticks(range(len(sides)), sides, fontsize="small")
        ax.set_yticks(range(len(sides)), sides, fontsize="small")
        ax.set(xlabel="N", ylabel="M", title=f"K = {K}")
    fig.colorbar(im, ax=axes, shrink=0.8, label="% of torch.matmul (> 100: ours faster)")
    shown = {None: "the rule's leave-one-out choice", SHIPPED: "gemm(a, b) as shipped (the rule)"}.get(variant, variant)
    fig.suptitle(f"% of torch.matmul, {timing} timing: {shown} per shape (label: its configuration)",
                 fontsize="medium")
    _footer(fig, source_line(frame, source))
    return fig


def contenders(frame: pd.DataFrame, rule: rules.Rule, check: pd.DataFrame | None = None) -> pd.DataFrame:
    """Long rows (class, M, N, K, contender, timing, pct): the fixed default, the rule (leave-one-out) and the
    per-shape best (`rule.leave_one_out`'s oracle), and with `check`, gemm() as shipped ("shipped")."""
    loo = rules.leave_one_out(rule, frame)
    rows = []
    for key in CONTENDERS:
        for timing in ("kernel", "latency"):
            part = loo[["class", "M", "N", "K"]].assign(contender=key, timing=timing, pct=loo[f"{key}_{timing}_pct"])
            rows.append(part)
    if check is not None and not check.empty:
        for timing in ("kernel", "latency"):
            part = choices(check, rule, timing, SHIPPED)[["class", "M", "N", "K", "pct"]]
            rows.append(part.assign(contender="shipped", timing=timing))
    return pd.concat(rows, ignore_index=True)


def class_boxes(frame: pd.DataFrame, rule: rules.Rule, check: pd.DataFrame | None = None, *,
                source: str = SOURCE) -> Figure:
    """A box per class and contender (see `contenders`) of % of torch.matmul, kernel and latency timings side
    by side, with lines at 100 %, at the goal (GOAL_PCT) and at the floor (FLOOR_PCT)."""
    long = contenders(frame, rule, check)
    keys = [k for k in (*CONTENDERS, "shipped") if k in set(long.contender)]
    names = {**CONTENDERS, "shipped": "gemm() as shipped"}
    classes = [c for c in CLASSES if c in set(long["class"])]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), layout="constrained", sharey=True)
    width, handles = 0.8 / len(keys), []
    for ax, timing in zip(axes, ("kernel", "latency")):
        for j, key in enumerate(keys):
            data = [long[(long.timing == timing) & (long.contender == key) & (long["class"] == c)].pct.dropna()
                    for c in classes]
            pos = [i + (j - (len(keys) - 1) / 2) * width for i in range(len(classes))]
            ax.boxplot(data, positions=pos, widths=width * 0.85, patch_artist=True, manage_ticks=False,
                       boxprops=dict(facecolor=_COLOURS[key], alpha=0.75), medianprops=dict(color="k"),
                       flierprops=dict(markersize=3))
            if timing == "kernel":
                handles.append(Patch(facecolor=_COLOURS[key], alpha=0.75, label=names[key]))
        ax.axhline(100, color="0.3", lw=0.8)
        goal = ax.axhline(GOAL_PCT, color="#1a7f37", ls="--", lw=1, label=f"goal: median {GOAL_PCT:g} %")
        floor = ax.axhline(FLOOR_PCT, color=LOSS, ls=":", lw=1.2, label=f"floor: no shape below {FLOOR_PCT:g} %")
        counts = long[long.timing == timing].drop_duplicates(["class", "M", "N", "K"])["class"].value_counts()
        ax.set_xticks(range(len(classes)), [f"{c}\n({counts[c]} shapes)" for c in classes])
        ax.set_title(f"{timing} timing", fontsize="medium")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_ylabel("% of torch.matmul (> 100: ours faster)")
    axes[1].legend(handles=[*handles, goal, floor], loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small",
                   frameon=False)
    src = source_line(frame, source) + (f"; {source_line(check, CHECK_SOURCE)}" if "shipped" in keys else "")
    _footer(fig, src)
    return fig


def class_table(frame: pd.DataFrame, rule: rules.Rule, check: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per class and contender: the median and the minimum % of torch.matmul, and the worst shape, in the kernel
    and the latency timing."""
    long = contenders(frame, rule, check)
    names = {**CONTENDERS, "shipped": "gemm() as shipped"}
    table = rules.per_class(long, by=("class", "contender"), timings=("kernel", "latency")).drop(columns="shapes")
    table["contender"] = table.contender.map(names)
    table.columns = [f"{c[0]} {c[1]}" + (" %" if c[1] != "worst" else "") if isinstance(c, tuple) else c
                     for c in table.columns]
    order = {c: i for i, c in enumerate(CLASSES)}
    table = table.sort_values("class", key=lambda s: s.map(order), kind="stable")
    return table.set_index(["class", "contender"])


def goal_verdict(table: pd.DataFrame, contender: str = CONTENDERS["rule"]) -> pd.DataFrame:
    """Per class and timing, whether `contender` meets the issue's goal: median >= GOAL_PCT and min >= FLOOR_PCT."""
    part = table.xs(contender, level="contender")
    rows = []
    for cls, r in part.iterrows():
        for timing in ("kernel", "latency"):
            rows.append({"class": cls, "timing": timing, "median %": r[f"{timing} median %"],
                         "min %": r[f"{timing} min %"], "median >= goal": r[f"{timing} median %"] >= GOAL_PCT,
                         "none below floor": r[f"{timing} min %"] >= FLOOR_PCT})
    return pd.DataFrame(rows)


def time_split(frame: pd.DataFrame, shapes, rule: rules.Rule | None = None) -> pd.DataFrame:
    """Per shape, microseconds per call in the three timings (gpu: the kernels' own durations; kernel: back to
    back; latency: each call synchronised) of torch.matmul, of our fastest and slowest candidate on the GPU, and
    of the rule's leave-one-out choice; `host gap` = back to back minus GPU time (the host's share)."""
    rows = []
    for shape in shapes:
        here = frame[(frame.M == shape[0]) & (frame.N == shape[1]) & (frame.K == shape[2])]
        if here.empty:
            raise ValueError(f"{shape} is not in the frame")
        us = here.pivot_table(index="variant", columns="timing", values="ms_median", aggfunc="last") * 1e3
        ours = us.drop("torch.matmul")
        picks = {"torch.matmul": "torch.matmul", "ours, fastest on the GPU": ours.gpu.idxmin(),
                 "ours, slowest on the GPU": ours.gpu.idxmax()}
        if rule is not None:
            picks["ours, the rule (leave-one-out)"] = rule.choose(*shape, without=tuple(shape))
        for who, variant in picks.items():
            r = us.loc[variant]
            rows.append({"shape": "x".join(map(str, shape)), "contender": who, "configuration": variant,
                         "gpu µs": r.gpu, "back-to-back µs": r.kernel, "synchronised µs": r.latency,
                         "host gap µs": r.kernel - r.gpu})
    return pd.DataFrame(rows).set_index(["shape", "contender"])


def skinny_panel(frame: pd.DataFrame, rule: rules.Rule, timing: str = "gpu", *, source: str = SOURCE) -> Figure:
    """The skinny class (M <= 512): % of torch.matmul against M, one line per (N, K), for the rule's
    leave-one-out choice."""
    cells = choices(frame, rule, timing)
    cells = cells[cells["class"] == "skinny"]
    if cells.empty:
        raise ValueError("the frame has no skinny shapes")
    fig, ax = plt.subplots(figsize=(8.5, 4.6), layout="constrained")
    for (N, K), g in cells.groupby(["N", "K"]):
        g = g.sort_values("M")
        ax.plot(g.M, g.pct, marker="o", ms=4, lw=1.2, label=f"N {N}, K {K}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(cells.M)), [str(m) for m in sorted(set(cells.M))])
    ax.axhline(100, color="0.3", lw=0.8)
    ax.axhline(FLOOR_PCT, color=LOSS, ls=":", lw=1.2)
    ax.set(xlabel="M (rows of A)", ylabel="% of torch.matmul",
           title=f"Skinny shapes, {timing} timing: the rule's leave-one-out choice")
    ax.legend(fontsize="x-small", ncol=3, frameon=False)
    ax.grid(True, alpha=0.3)
    _footer(fig, source_line(frame, source))
    return fig

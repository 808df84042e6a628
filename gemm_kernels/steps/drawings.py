"""The pictures of the GEMM step notebooks (10-12), each a function returning a matplotlib Figure.

    ring_timeline(stages=4)                 # a producer keeping `stages` K-blocks in flight ahead of WGMMA
    smem_budgets({"label": StageBudget})    # where one CTA's shared memory goes (gemm_kernels.stages)
    quad_transpose_model(words)             # the two butterfly steps on 4 simulated lanes (plain Python)
    quad_transpose()                        # before / after: lane q ends with 8 consecutive columns
    wave_tail(uniform_plan, balanced_plan)  # two schedules on one time axis (gemm_kernels.waves plans)

Schematics say so in their captions; nothing here is a measurement.
"""
from __future__ import annotations

import matplotlib.patches as patches
import matplotlib.pyplot as plt

from workbook import plots

KIB = 1024


def _axes(ax, size):
    return plt.subplots(figsize=size, layout="constrained") if ax is None else (ax.figure, ax)


def ring_timeline(stages: int = 4, k_blocks: int = 10, load: float = 1.6, mma: float = 1.0, ax=None):
    """One row per stage: the TMA fill of K-block k into stage k % stages starts once the WGMMAs of block
    k - stages (the stage's previous contents) are done ('empty'); WGMMA k starts once its fill landed ('full')."""
    fig, ax = _axes(ax, (11, 3.4))
    done, issue, row = [], 0.0, -1.2
    for kb in range(k_blocks):
        s = kb % stages
        start = max(issue, done[kb - stages] if kb >= stages else 0.0)
        issue = start + 0.15                                   # the producer issues the next load right away
        m0 = max(start + load, done[-1] if done else 0.0)
        done.append(m0 + mma)
        color = plt.cm.tab10(s)
        ax.add_patch(patches.Rectangle((start, s - 0.35), load, 0.7, color=color, alpha=0.45))
        ax.text(start + load / 2, s, f"TMA k{kb}", ha="center", va="center", fontsize=7)
        ax.add_patch(patches.Rectangle((m0, row - 0.35), mma, 0.7, color=color))
        ax.text(m0 + mma / 2, row, f"k{kb}", ha="center", va="center", fontsize=7, color="white")
        ax.annotate("", xy=(m0 + 0.05, row + 0.35), xytext=(start + load, s - 0.35),
                    arrowprops=dict(arrowstyle="->", color=color, lw=0.7))
        if kb >= stages:
            ax.plot([done[kb - stages]] * 2, [row + 0.35, s - 0.35], color="0.5", lw=0.7, ls=":")
    ax.set_yticks([*range(stages), row], [f"stage {s}" for s in range(stages)] + ["WGMMA\n(consumers)"])
    ax.set_xlim(0, done[-1] + 0.3)
    ax.set_ylim(stages - 0.4, row - 0.5)
    ax.set_xticks([])
    ax.set_xlabel("time, schematic (a load's latency = 1.6 K-blocks of WGMMA); arrow: 'full', dotted: 'empty'")
    ax.set_title(f"A {stages}-stage ring: the producer keeps up to {stages} K-blocks in flight", fontsize="medium")
    ax.spines[["top", "right"]].set_visible(False)
    return fig


def smem_budgets(budgets: dict, ax=None, title: str = "Where one CTA's shared memory goes"):
    """A bar per StageBudget (gemm_kernels.stages): its stages, the epilogue buffer, the reserve, what is left."""
    fig, ax = _axes(ax, (11, 0.75 * len(budgets) + 1.2))
    for i, (name, b) in enumerate(budgets.items()):
        left = 0.0
        for s in range(b.stages):
            ax.barh(i, b.stage_bytes / KIB, left=left, color="#6baed6" if s % 2 == 0 else "#9ecae1",
                    edgecolor="white")
            left += b.stage_bytes / KIB
        ax.text(left / 2, i, f"{b.stages} stages x {b.stage_bytes // KIB} KiB", ha="center", va="center",
                fontsize=7.5)
        for part, nbytes, color in (("epilogue", b.epilogue_bytes, "#fd8d3c"), ("reserve", b.reserved_bytes, "0.35"),
                                    ("unused", b.leftover, "#f0f0f0")):
            if nbytes:
                ax.barh(i, nbytes / KIB, left=left, color=color, edgecolor="white")
                if part != "reserve":
                    ax.text(left + nbytes / KIB / 2, i, f"{part}\n{nbytes / KIB:g}", ha="center", va="center",
                            fontsize=6.5)
                left += nbytes / KIB
    cap = max(b.capacity for b in budgets.values()) / KIB
    ax.axvline(cap, color="k", linewidth=1)
    ax.text(cap, -0.6, f" {cap:g} KiB per CTA", fontsize=7, va="bottom")
    ax.set_yticks(range(len(budgets)), list(budgets), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("KiB of one CTA's shared memory (dark grey: 1 KiB for the mbarriers)")
    ax.set_title(title, fontsize="medium")
    ax.spines[["top", "right"]].set_visible(False)
    plots.caption(ax, "computed: gemm_kernels.stages (no GPU)")
    return fig


def quad_transpose_model(words):
    """words[q][t]: word t of lane q. The butterfly steps of step 2's `quad_transpose`, lanes as list entries:
    in step m (1, then 2) lane q sends one word of each pair (t, t | m) and receives lane q ^ m's."""
    w = [list(row) for row in words]
    for m in (1, 2):
        sent = [[None] * 4 for _ in range(4)]
        for q in range(4):
            upper = (q & m) != 0
            for t in range(4):
                if t & m == 0:
                    sent[q][t] = w[q][t] if upper else w[q][t | m]
        for q in range(4):
            upper = (q & m) != 0
            for t in range(4):
                if t & m == 0:
                    got = sent[q ^ m][t]
                    w[q][t], w[q][t | m] = (got, w[q][t | m]) if upper else (w[q][t], got)
    return w


def wgmma_words():
    """What lane q of a quad holds of 32 columns after WGMMA: word t = the bf16 pair of group t."""
    return [[f"g{t}: c{8 * t + 2 * q},{8 * t + 2 * q + 1}" for t in range(4)] for q in range(4)]


def quad_transpose(axes=None):
    """Before and after the two butterfly shuffles, one 4 x 4 grid of 32-bit words per panel."""
    before = wgmma_words()
    after = quad_transpose_model(before)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.2), layout="constrained") if axes is None else (axes[0].figure, axes)
    colors = ["#9ecae1", "#fdae6b", "#a1d99b", "#bcbddc"]
    for ax, grid, title in zip(axes, (before, after), ("after WGMMA: lane q holds word q of each group",
                                                       "after 2 butterfly shuffles: lane q holds group q")):
        for q in range(4):
            for t in range(4):
                group = int(grid[q][t].split(":")[0][1:])
                ax.add_patch(patches.Rectangle((t, q), 0.95, 0.9, color=colors[group]))
                ax.text(t + 0.47, q + 0.45, grid[q][t].replace(": ", "\n"), ha="center", va="center", fontsize=7)
        ax.set_xlim(-0.1, 4.1)
        ax.set_ylim(4.1, -0.1)
        ax.set_yticks([q + 0.45 for q in range(4)], [f"lane {q}" for q in range(4)])
        ax.set_xticks([t + 0.45 for t in range(4)], [f"word {t}" for t in range(4)])
        ax.set_title(title, fontsize="medium")
        ax.spines[:].set_visible(False)
    axes[1].text(4.2, 2, "a row =\n8 consecutive\ncolumns =\none STG.E.128", va="center", fontsize=8)
    return fig


def wave_tail(uniform, balanced, *, slot_label: str = "SM", last: float | None = None):
    """The uniform and the balanced plan (gemm_kernels.waves.Plan) of one GEMM, one above the other on one time
    axis in tile times; `last` shows only the final `last` tile times. Titles give waves (items / slots) and the
    makespan (when the last slot finishes) separately."""
    fig, axes = plt.subplots(2, 1, figsize=(11, 6.4), sharex=True, layout="constrained")
    for ax, p, name in zip(axes, (uniform, balanced), ("uniform tiles", "balanced tiles")):
        plots.wave_occupancy(p.gantt(), ax=ax, slot_label=slot_label, time_label="time (tile times)",
                             source="gemm_kernels.waves (model: a tile's time is proportional to its width)")
        ax.set_title(f"{p.M} x {p.N} on {p.gpu}, {name}: {len(p.items)} items on {p.slots} {slot_label}s = "
                     f"{p.waves:.2f} waves of work, makespan {p.makespan:.3g} tile times", fontsize="medium")
        top = uniform.makespan
        ax.set_ylim(top, 0 if last is None else top - last)
    return fig

"""The Hopper GEMM's measured timeline, CTA by CTA, as a figure.

    c, frame = gemm_kernels.hopper_host.timeline(a, b)       # on an H200: one traced launch
    cta_timeline(frame, source="data/measured/h200/probes/...csv")

`frame` is `gemm_kernels.hopper_trace.trace_frame`'s output (one row per work-list row a CTA ran, stamps
in microseconds). The phases drawn are named by the trace's own fields (`hopper_trace.TRACE_FIELDS`), so a
change to the trace format shows up here as an error at import, not as a wrong picture.
"""
from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from gemm_kernels.hopper_trace import TRACE_FIELDS
from workbook.plots import GAIN, IDLE, LOSS, caption, new_axes, require_source

PHASES = (   # (from column, to column, label, colour)
    ("start", "data", "waiting for the first K-block", IDLE),
    ("data", "mma_done", "K loop (WGMMA)", GAIN),
    ("mma_done", "stored", "epilogue", LOSS),
)
assert {c for a, b, _, _ in PHASES for c in (a, b)} <= set(TRACE_FIELDS), "the trace's fields changed"


def cta_timeline(frame: pd.DataFrame, *, ax=None, title: str | None = None, source: str,
                 window: tuple[float, float] | None = None) -> Figure:
    """A measured launch, CTA by CTA: x is time in microseconds from the first CTA's start, y the CTA. Each
    row of `frame` is drawn as its `PHASES`; what is not drawn is time between rows, before the first and
    after the last. `window` zooms to (t0, t1) microseconds."""
    require_source(source)
    need = {"cta", "exit", *(c for a, b, _, _ in PHASES for c in (a, b))}
    missing = need - set(frame.columns)
    if missing:
        raise ValueError(f"frame lacks columns {sorted(missing)}: pass "
                         f"gemm_kernels.hopper_trace.trace_frame's output")
    if frame.empty:
        raise ValueError("frame has no rows")
    n = int(frame.cta.max()) + 1
    fig, ax = new_axes(ax, (11.0, 3.8))
    height = 0.9 if n <= 40 else 1.0          # many CTAs: bars touch (thin gaps only alias into stripes)
    for a, b, label, colour in PHASES:
        for cta, g in frame.groupby("cta"):
            spans = [(x0, x1 - x0) for x0, x1 in zip(g[a], g[b]) if x1 > x0]
            if spans:
                ax.broken_barh(spans, (cta - height / 2, height), color=colour, linewidth=0)
        ax.bar(0, 0, color=colour, label=label)        # a legend entry per phase
    makespan = frame.exit.max()
    ax.axvline(makespan, color="k", lw=0.8, ls=":")
    ax.set_xlim(*(window or (0, makespan * 1.01)))
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlabel("time since the first CTA started (µs)")
    ax.set_ylabel("CTA")
    epilogue = (frame.stored - frame.mma_done).median()
    summary = f"{n} CTAs, {len(frame)} rows; done at {makespan:.1f} µs; epilogue {epilogue:.2f} µs (median)"
    ax.set_title(f"{title}\n{summary}" if title else summary, fontsize="medium")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", frameon=False)
    caption(ax, source)
    return fig

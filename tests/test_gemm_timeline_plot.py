"""gemm_kernels.timeline_plot: a traced launch drawn CTA by CTA, every phase of every row."""
from __future__ import annotations

import random

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from gemm_kernels import hopper_trace, timeline_plot  # noqa: E402
from test_plots import assert_not_blank, caption  # noqa: E402


@pytest.fixture
def rng():
    return random.Random()


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def timeline_frame(rng, ctas=6, rows=3):
    """Rows of a traced launch as trace_frame returns them, with random phase lengths."""
    records = []
    for cta in range(ctas):
        t = rng.uniform(0, 0.3)
        entry = t
        for seq in range(rows):
            start = t + rng.uniform(0.1, 0.4)
            data = start + rng.uniform(0.0, 2.0)
            mma_done = data + rng.uniform(30, 45)
            stored = mma_done + rng.uniform(0.1, 2.0)
            records.append(dict(cta=cta, cluster=cta // 2, seq=seq, row=cta + 6 * seq, entry=entry, start=start,
                                data=data, mma_done=mma_done, stored=stored))
            t = stored
        for r in records[-rows:]:
            r["exit"] = t + 0.2
    return pd.DataFrame(records)


def test_cta_timeline_draws_every_phase_of_every_row(rng):
    frame = timeline_frame(rng)
    fig = timeline_plot.cta_timeline(frame, title="t", source="synthetic")
    ax = fig.axes[0]
    bars = [c for c in ax.collections]                    # one broken_barh per (phase, CTA)
    assert len(bars) == len(timeline_plot.PHASES) * frame.cta.nunique()
    assert sum(len(b.get_paths()) for b in bars) == len(timeline_plot.PHASES) * len(frame)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [p[2] for p in timeline_plot.PHASES]
    assert f"{frame.exit.max():.1f} µs" in ax.get_title()
    assert caption(ax) == "Source: synthetic"
    assert ax.get_ylim()[0] > ax.get_ylim()[1]             # CTA 0 on top
    assert_not_blank(fig)


def test_cta_timeline_window_and_rejects(rng):
    frame = timeline_frame(rng)
    fig = timeline_plot.cta_timeline(frame, source="synthetic", window=(30, 50))
    assert fig.axes[0].get_xlim() == (30, 50)
    with pytest.raises(ValueError, match="source"):
        timeline_plot.cta_timeline(frame, source="")
    with pytest.raises(ValueError, match="lacks columns"):
        timeline_plot.cta_timeline(frame.drop(columns="mma_done"), source="synthetic")
    with pytest.raises(ValueError, match="no rows"):
        timeline_plot.cta_timeline(frame.iloc[:0], source="synthetic")


def test_the_frame_is_the_trace_frame_format(rng):
    """The synthetic frame has trace_frame's columns, so the plot is tested on what the kernel writes."""
    ctas, segments = 3, 2
    trace = [[0] * hopper_trace.TRACE_COLS for _ in range(ctas)]
    for cta in range(ctas):
        trace[cta][0], trace[cta][1] = 1000 * cta, 10_000_000
        for seq in range(hopper_trace.TRACE_SEGMENTS):
            base = 2 + seq * len(hopper_trace.TRACE_FIELDS)
            if seq >= segments:
                trace[cta][base] = -1
                continue
            t = 1000 * cta + 1_000_000 * seq
            trace[cta][base:base + len(hopper_trace.TRACE_FIELDS)] = [seq, t + 10, t + 20, t + 900_000, t + 950_000]
    frame = hopper_trace.trace_frame(trace, cluster_size=1)
    assert set(timeline_frame(rng).columns) == set(frame.columns)
    fig = timeline_plot.cta_timeline(frame, source="synthetic trace")
    assert sum(len(b.get_paths()) for b in fig.axes[0].collections) == len(timeline_plot.PHASES) * ctas * segments

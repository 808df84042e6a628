"""Timelines of the Hopper GEMM: what the traced build records, read back as a table and summarised.

    c, frame = gemm_kernels.hopper_host.timeline(a, b)      # one traced launch (a GPU): one row per segment run
    summary(frame)                                          # makespan, K loop, epilogue, waits, in microseconds
    gemm_kernels.timeline_plot.cta_timeline(frame, source="...")   # every CTA's rows over time

The traced build (`Options(trace=True)`, a separate compile: the timed kernel carries none of it) gives each
CTA a row of int64 global-timer stamps: [entry, exit], then per segment it runs (row, start, first K-block
landed, last WGMMA done, C written), TRACE_SEGMENTS segments at most (a CTA that runs more writes its later
ones over its last record). Reading them is plain numpy and pandas: no GPU.
"""
from __future__ import annotations

TRACE_SEGMENTS = 64
TRACE_FIELDS = ("row", "start", "data", "mma_done", "stored")
TRACE_COLS = 2 + len(TRACE_FIELDS) * TRACE_SEGMENTS
COLUMNS = ("cta", "cluster", "seq", "row", "entry", *TRACE_FIELDS[1:], "exit")


def trace_frame(trace, cluster_size: int):
    """The timeline buffer [CTAs, TRACE_COLS] as a pandas DataFrame, one row per segment a CTA ran: cta,
    cluster, seq (its position in the CTA's run), row (of the work list), entry, start, data, mma_done, stored,
    exit, in microseconds from the first CTA's entry. start: the consumers have the row; data: its first
    K-block has landed; mma_done: its last WGMMA has finished; stored: C (or the partial) is written.
    A CTA that ran more than TRACE_SEGMENTS segments wrote its later ones over its last record."""
    import numpy as np
    import pandas as pd
    trace = np.asarray(trace, dtype=np.int64)
    if trace.ndim != 2 or trace.shape[1] != TRACE_COLS:
        raise ValueError(f"a trace is [CTAs, {TRACE_COLS}] int64, got shape {trace.shape}")
    if (trace[:, :2] < 0).any():
        raise ValueError("a CTA left no entry or exit stamp: the launch did not run to the end")
    t0 = trace[:, 0].min()
    nf = len(TRACE_FIELDS)
    records = []
    for cta, stamps in enumerate(trace):
        for seq in range(TRACE_SEGMENTS):
            fields = stamps[2 + seq * nf: 2 + (seq + 1) * nf]
            if fields[0] < 0:
                break
            rec = dict(cta=cta, cluster=cta // cluster_size, seq=seq, row=int(fields[0]),
                       entry=(stamps[0] - t0) / 1e3, exit=(stamps[1] - t0) / 1e3)
            rec.update({name: (v - t0) / 1e3 for name, v in zip(TRACE_FIELDS[1:], fields[1:])})
            records.append(rec)
    return pd.DataFrame.from_records(records, columns=list(COLUMNS))


def summary(frame) -> dict[str, float]:
    """Where one launch's time went, in microseconds (medians over rows unless named otherwise): the makespan;
    from each CTA's entry to its first K-block; the spread of the CTAs' entries; the wait for a later row's
    first K-block after the consumers have it (the ring running dry), median and 90th percentile; the K loop;
    the epilogue; the gap between one row's C and the next row's start; the spread of the CTAs' last stores;
    the fraction of CTA-time spent inside rows; and, with a `width` column (`timeline` adds it), the K loop per
    tile width."""
    first = frame[frame.seq == 0]
    later = frame[frame.seq > 0]
    per_cta = frame.groupby("cta")
    busy = (frame.stored - frame.start).groupby(frame.cta).sum()
    makespan = frame.exit.max()
    out = {
        "makespan_us": makespan,
        "first_data_us(med)": (first.data - first.entry).median(),
        "entry_spread_us": first.entry.max() - first.entry.min(),
        "row_wait_us(med)": (later.data - later.start).median(),
        "row_wait_us(p90)": (later.data - later.start).quantile(0.9),
        "kloop_us(med)": (frame.mma_done - frame.data).median(),
        "epilogue_us(med)": (frame.stored - frame.mma_done).median(),
        "gap_us(med)": (frame.start - per_cta.stored.shift(1))[frame.seq > 0].median(),
        "last_stored_spread_us": per_cta.stored.max().max() - per_cta.stored.max().min(),
        "busy_frac": busy.sum() / (makespan * frame.cta.nunique()),
    }
    if "width" in frame.columns:
        out.update({f"kloop_us(med) w{w}": (g.mma_done - g.data).median() for w, g in frame.groupby("width")})
    return out

"""The explorer's figures: one shape (`figure`: the wave pictures of its tilings above, every configuration's
latency or fraction of the roofline below) and a sweep (`sweep_figure`). Predicted, recorded, published and live
numbers are told apart by style; every figure says where its numbers come from."""
from __future__ import annotations

import textwrap

from workbook.explore.explorer import Result, Sweep
from workbook.explore.problem import Waves

STYLE = {"predicted": dict(fill=False, edgecolor="0.3", hatch="//", linewidth=0.8),
         "recorded": dict(color="tab:blue"), "recorded (baseline)": dict(color="0.6"),
         "published": dict(color="tab:orange"), "live": dict(color="tab:red")}
VIEWS = ("ms", "roofline")


def _value(ms: float | None, result: Result, view: str) -> float | None:
    """ms, or in the roofline view the fraction of the bound it reaches (1.0: at the roofline)."""
    if ms is None:
        return None
    return ms if view == "ms" else result.roofline.ms / ms


def _check_view(view: str) -> None:
    if view not in VIEWS:
        raise ValueError(f"view must be one of {VIEWS}, got {view!r}")


def _latency_panel(result: Result, ax, view: str) -> None:
    """Per row up to three bars: the prediction as a hatched outline, the recorded number solid (ours blue, a
    baseline grey, a published one orange), a live timing red; each value written at its end."""
    rows = result.rows
    values = [v for r in rows for v in (_value(r.predicted_ms, result, view), _value(r.recorded_ms, result, view),
                                        _value(r.live_ms, result, view)) if v]
    log = bool(view == "ms" and values and max(values) / min(values) >= 10)
    base = min(values) / 2 if log else 0.0
    seen = set()
    height = 0.26
    for i, r in enumerate(rows):
        recorded_kind = {"ours": "recorded", "baseline": "recorded (baseline)", "recorded": "recorded (baseline)",
                         "reference": "published"}[r.origin]
        bars = [(kind, _value(ms, result, view)) for kind, ms in
                (("predicted", r.predicted_ms), (recorded_kind, r.recorded_ms), ("live", r.live_ms))]
        bars = [(kind, v) for kind, v in bars if v is not None]
        if not bars:
            ax.text(base, i, "  not modelled, not measured", va="center", fontsize=7, color="0.4")
        for j, (kind, v) in enumerate(bars):
            y = i + (j - (len(bars) - 1) / 2) * height
            ax.barh(y, v - base, left=base, height=height * 0.92, label=None if kind in seen else kind,
                    **STYLE[kind])
            seen.add(kind)
            ax.annotate(f"{v:.3g}", (v, y), xytext=(2, 0), textcoords="offset points", va="center", fontsize=6,
                        color="0.25")
    if view == "ms":
        ax.axvline(result.roofline.ms, color="k", ls="--", lw=1,
                   label=f"roofline {result.roofline.ms * 1e3:.1f} us ({result.roofline.bound}-bound)")
        if log:
            ax.set_xscale("log")
        ax.set_xlabel("ms, log axis (shorter is faster)" if log else "ms (shorter is faster)")
    else:
        ax.axvline(1.0, color="k", ls="--", lw=1, label="the roofline")
        ax.set_xlim(0, 1.1)
        ax.set_xlabel("fraction of the roofline reached (longer is faster)")
    star = "\u2605 "
    ax.set_yticks(range(len(rows)), [(star if r.name == result.winner else "") + r.name for r in rows], fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.grid(True, axis="x", which="both", alpha=0.25)
    ax.set_title(f"latency per configuration ({star}winner: {result.winner_basis})", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def _sources(result: Result) -> str:
    parts = [f"predicted: {result.problem.model} at datasheet peaks (a model, not a measurement)"]
    if result.run:
        parts.append(f"recorded: {result.run}")
    refs = sorted({r.recorded_in for r in result.rows if r.origin == "reference"})
    if refs:
        parts.append("published: " + "; ".join(refs))
    if any(r.live_ms is not None for r in result.rows):
        parts.append("live: timed now on this machine")
    return ". ".join(parts)


def distinct_waves(result: Result) -> dict[str, Waves]:
    """The different tilings among the rows, each under the names of the configurations that share it."""
    return {", ".join(names): w for w, names in result.tilings().items()}


MERGE_ABOVE = 4000     # items: beyond this a wave picture draws each slot's back-to-back items of one kind as one bar


def _merged(gantt: list[list[tuple[float, float, str]]]) -> list[list[tuple[float, float, str]]]:
    """Each slot's touching items of one label as one bar: the same picture, drawn in slots x kinds bars."""
    out = []
    for row in gantt:
        merged: list[tuple[float, float, str]] = []
        for start, dur, label in row:
            if merged and merged[-1][2] == label and abs(merged[-1][0] + merged[-1][1] - start) < 1e-9:
                s0, d0, _ = merged[-1]
                merged[-1] = (s0, d0 + dur, label)
            else:
                merged.append((start, dur, label))
        out.append(merged)
    return out


def figure(result: Result, *, view: str = "ms", max_wave_panels: int = 3):
    """Above, the wave picture of each distinct tiling (at most `max_wave_panels`); below, every row's
    latency (`view="ms"`, a log axis when the bars span a factor of 10) or its fraction of the roofline
    (`view="roofline"`). Predicted, recorded, published and live numbers are told apart by style."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    from workbook import plots

    _check_view(view)
    tilings = list(distinct_waves(result).items())
    shown = tilings[:max_wave_panels]
    top = 3.4 if shown else 0.0
    fig = plt.figure(figsize=(14.0, top + 0.42 * len(result.rows) + 2.2), layout="constrained")
    grid = fig.add_gridspec(2 if shown else 1, max(1, len(shown)),
                            height_ratios=[top, 0.42 * len(result.rows) + 1.6] if shown else None)
    for i, (names, w) in enumerate(shown):
        ax = fig.add_subplot(grid[0, i])
        gantt = w.gantt()
        plots.wave_occupancy(_merged(gantt) if w.items > MERGE_ABOVE else gantt, ax=ax, slot_label=w.slot,
                             source="the wave model, not a measurement")
        ax.set_title(textwrap.fill(f"{names}: {w.describe()}", 70), fontsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=6))
        ax.get_legend().remove()
    ax = fig.add_subplot(grid[-1, :])
    _latency_panel(result, ax, view)
    plots.caption(ax, _sources(result))
    more = f" ({len(tilings) - len(shown)} more tilings, not drawn)" if 0 < len(shown) < len(tilings) else ""
    fig.suptitle(result.label + more, fontsize=11)
    return fig


def sweep_figure(sweep: Sweep, *, view: str = "ms"):
    """Each configuration's latency (log axis) or fraction of the roofline across the swept dimension: one
    colour per configuration; predicted dashed, recorded solid with dots, published dotted with squares,
    live as diamonds; the roofline black in the ms view."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from workbook import plots

    _check_view(view)
    xs = sweep.values
    names = list(dict.fromkeys(r.name for res in sweep.results for r in res.rows))
    colours = dict(zip(names, plots.distinct_colours(len(names))))
    fig, ax = plt.subplots(figsize=(9.5, 5.0), layout="constrained")
    for name in names:
        for key, style in (("predicted_ms", dict(ls="--", lw=1.2)), ("recorded_ms", dict(ls="-", marker="o", ms=4)),
                           ("live_ms", dict(ls="", marker="D", ms=6))):
            pts = [(x, _value(getattr(row, key), res, view)) for x, res in zip(xs, sweep.results)
                   for row in res.rows if row.name == name and getattr(row, key) is not None]
            if pts:
                ref = key == "recorded_ms" and any(r.origin == "reference" for res in sweep.results
                                                   for r in res.rows if r.name == name)
                if ref:
                    style = dict(ls=":", marker="s", ms=4)
                ax.plot(*zip(*pts), color=colours[name], **style)
    if view == "ms":
        ax.plot(xs, [r.roofline.ms for r in sweep.results], color="k", ls=":", lw=1.5)
        ax.set_yscale("log")
        ax.set_ylabel("ms, log axis")
    else:
        ax.axhline(1.0, color="k", ls=":", lw=1.5)
        ax.set_ylim(0, 1.08)
        ax.set_ylabel("fraction of the roofline reached")
    if len(xs) > 1 and max(xs) / min(xs) >= 4:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xticks(xs, [f"{x:,}" for x in xs], rotation=30 if len(xs) > 6 else 0, fontsize=7)
    ax.minorticks_off()
    ax.set_xlabel(sweep.dim)
    ax.grid(True, alpha=0.3)
    kinds = [Line2D([], [], color="0.3", ls="--", label="predicted"),
             Line2D([], [], color="0.3", marker="o", label="recorded"),
             Line2D([], [], color="0.3", ls=":", marker="s", label="published"),
             Line2D([], [], color="0.3", ls="", marker="D", label="live"),
             Line2D([], [], color="k", ls=":", lw=1.5, label="roofline")]
    first = ax.legend(handles=kinds, fontsize=7, loc="upper left", frameon=False, title="kind", title_fontsize=7)
    ax.add_artist(first)
    ax.legend(handles=[Line2D([], [], color=c, lw=3, label=n) for n, c in colours.items()], fontsize=6,
              loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, title="configuration", title_fontsize=7)
    fixed = ", ".join(f"{d.name}={v:,}" for d, v in zip(sweep.problem.dims, sweep.results[0].shape)
                      if d.name != sweep.dim)
    ax.set_title(f"{sweep.problem.name} on {sweep.gpu.name}: {sweep.dim} swept at {fixed}", fontsize=10)
    runs = sweep.runs
    src = [f"predicted: {sweep.problem.model} (a model)"]
    if runs:
        src.append("recorded: " + ("; ".join(runs) if len(runs) <= 3 else f"{len(runs)} runs, e.g. {runs[-1]}"))
    plots.caption(ax, ". ".join(src))
    return fig


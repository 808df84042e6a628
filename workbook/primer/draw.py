"""Figures for the primer: a layout, a tiling or a thread partition as a grid of coloured cells, and a
schematic timeline of roles. Each function draws into `ax` if given, else into a new figure, and returns
the Figure. Nothing here computes a layout: the arrays come from `workbook.primer.layouts`.

    grid(colour_index, text)            the general form: one cell per element, colour by an integer
    layout(offsets)                     a layout's offsets, shaded by offset
    owners(thread, value)               who owns each element: hue by warp, lightness by lane, thread id
    timeline(rows)                      rows of labelled spans: which unit does what, when
"""
from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import colors as mcolors
from matplotlib.figure import Figure

PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c",
           "#ccb974", "#64b5cd")


def _figure(ax, shape, cell_in: float):
    if ax is not None:
        return ax.figure, ax
    rows, cols = shape
    width = min(16.0, max(3.0, cols * cell_in + 1.2))
    height = min(14.0, max(1.6, rows * cell_in + 0.9))
    fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
    return fig, ax


def _check_2d(name: str, a) -> np.ndarray:
    a = np.asarray(a)
    if a.ndim != 2 or a.size == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array, got shape {a.shape}")
    return a


def _ink(rgb) -> str:
    """Black or white text, whichever reads better on `rgb`."""
    r, g, b = mcolors.to_rgb(rgb)
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"


def grid(colours, text=None, *, ax=None, title: str | None = None, fontsize: float | None = None,
         cell_in: float = 0.42, xlabel: str = "column j", ylabel: str = "row i", groups=None,
         ticks: int | None = None) -> Figure:
    """One square per element of the 2-D array `colours` (RGB triples, or integers mapped through PALETTE),
    row 0 at the top, with `text[i][j]` written in it; `groups` (an integer array of the same shape) draws a
    thick line wherever the group changes (e.g. between warps or tiles); `ticks`: label every n-th row and
    column (default: about 16 labels per axis)."""
    colours = np.asarray(colours)
    if colours.ndim == 2:
        colours = np.array([[mcolors.to_rgb(PALETTE[int(c) % len(PALETTE)]) for c in row] for row in colours])
    if colours.ndim != 3 or colours.shape[2] != 3:
        raise ValueError(f"colours must be a 2-D integer array or rows of RGB triples, got shape {colours.shape}")
    rows, cols = colours.shape[:2]
    fig, ax = _figure(ax, (rows, cols), cell_in)
    ax.imshow(colours, interpolation="nearest", aspect="equal")
    ax.set_xticks(np.arange(-0.5, cols, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, rows, 1), minor=True)
    ax.grid(which="minor", color="white", linewidth=0.6)
    ax.tick_params(which="minor", length=0)
    step = (lambda n: ticks) if ticks else (lambda n: max(1, n // 16))  # noqa: E731
    ax.set_xticks(range(0, cols, step(cols)))
    ax.set_yticks(range(0, rows, step(rows)))
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if text is not None:
        text = np.asarray(text, dtype=object)
        if text.shape != (rows, cols):
            raise ValueError(f"text must have the shape of colours, {(rows, cols)}, got {text.shape}")
        size = fontsize or max(4.5, min(9.0, 26 * cell_in))
        for i in range(rows):
            for j in range(cols):
                if text[i, j] not in (None, ""):
                    ax.text(j, i, str(text[i, j]), ha="center", va="center", fontsize=size,
                            color=_ink(colours[i, j]))
    if groups is not None:
        groups = _check_2d("groups", groups)
        for i in range(rows):
            for j in range(cols):
                if j + 1 < cols and groups[i, j] != groups[i, j + 1]:
                    ax.plot([j + 0.5, j + 0.5], [i - 0.5, i + 0.5], color="black", linewidth=1.6)
                if i + 1 < rows and groups[i, j] != groups[i + 1, j]:
                    ax.plot([j - 0.5, j + 0.5], [i + 0.5, i + 0.5], color="black", linewidth=1.6)
    ax.set_xlim(-0.5, cols - 0.5)
    ax.set_ylim(rows - 0.5, -0.5)
    if title:
        ax.set_title(title, fontsize="medium")
    return fig


def layout(offsets, *, ax=None, title: str | None = None, highlight: tuple[int, int] | None = None,
           **kwargs) -> Figure:
    """A layout as its table of offsets: each cell (i, j) shows L(i, j), shaded light to dark by offset, so
    that runs of consecutive addresses are visible; `highlight` circles one coordinate."""
    offsets = _check_2d("offsets", offsets)
    span = max(1, int(offsets.max()) - int(offsets.min()))
    shade = plt.get_cmap("Blues")(0.12 + 0.75 * (offsets - offsets.min()) / span)[..., :3]
    fig = grid(shade, offsets, ax=ax, title=title, **kwargs)
    if highlight is not None:
        ax = fig.axes[0] if ax is None else ax
        i, j = highlight
        ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="#c44e52", linewidth=2.5))
    return fig


def owner_colours(thread, group: int = 32) -> np.ndarray:
    """RGB per element: the hue of the thread's group (warp), lighter for higher lanes in it."""
    thread = _check_2d("thread", thread)
    base = np.array([mcolors.to_rgb(PALETTE[(t // group) % len(PALETTE)]) for t in thread.ravel()])
    light = 0.7 * ((thread.ravel() % group) / max(1, group - 1))[:, None]
    return (base * (1 - light) + light).reshape(*thread.shape, 3)


def lane_colours(thread, group: int = 32) -> np.ndarray:
    """RGB per element: one of 32 distinct colours per lane (thread % group), for telling threads of one warp apart."""
    thread = _check_2d("thread", thread)
    table = [plt.get_cmap("tab20")(i)[:3] for i in range(20)] + [plt.get_cmap("tab20b")(i)[:3] for i in range(20)]
    return np.array([table[int(t % group) % len(table)] for t in thread.ravel()]).reshape(*thread.shape, 3)


def owners(thread, value=None, *, ax=None, title: str | None = None, group: int = 32,
           show: str = "thread", colour_by: str = "warp", **kwargs) -> Figure:
    """Who owns each element: colour by warp (`colour_by="warp"`: hue by warp, lighter for higher lanes) or by
    lane (`"lane"`: a distinct colour per lane), text the thread id (`show="thread"`), the index in its fragment
    (`"value"`), both (`"both"`: "t.v") or nothing (`""`); thick lines between warps."""
    thread = _check_2d("thread", thread)
    if show in ("value", "both") and value is None:
        raise ValueError(f"show={show!r} needs the value array")
    text = {"thread": thread, "value": value, "": None,
            "both": None if value is None else np.char.add(np.char.add(thread.astype(str), "."),
                                                           np.asarray(value).astype(str))}[show]
    if colour_by not in ("warp", "lane"):
        raise ValueError(f"colour_by must be 'warp' or 'lane', got {colour_by!r}")
    colours = owner_colours(thread, group) if colour_by == "warp" else lane_colours(thread, group)
    return grid(colours, text, ax=ax, title=title, groups=thread // group, **kwargs)


def timeline(rows: Sequence[tuple[str, Sequence[tuple[float, float, str, int]]]], *, ax=None,
             title: str | None = None, xlabel: str = "time (schematic)", note: str | None = None) -> Figure:
    """Rows of spans, top to bottom: `(row label, [(start, length, text, colour index), ...])`. A schematic
    of who does what when (roles of a kernel, stages of a pipeline); `note` goes under the axes."""
    if not rows:
        raise ValueError("timeline needs at least one row")
    if ax is None:
        end = max((s + d for _, spans in rows for s, d, *_ in spans), default=1.0)
        fig, ax = plt.subplots(figsize=(min(15.0, 2.5 + 1.1 * end), 0.75 * len(rows) + 1.3), layout="constrained")
    fig = ax.figure
    for r, (_, spans) in enumerate(rows):
        y = len(rows) - 1 - r
        for start, length, text, colour in spans:
            fill = PALETTE[int(colour) % len(PALETTE)]
            ax.add_patch(plt.Rectangle((start, y + 0.12), length, 0.76, facecolor=fill, edgecolor="white"))
            if text:
                ax.text(start + length / 2, y + 0.5, text, ha="center", va="center", fontsize="small",
                        color=_ink(fill))
    ax.set_yticks([len(rows) - 1 - r + 0.5 for r in range(len(rows))], [name for name, _ in rows])
    ax.set_ylim(0, len(rows))
    ax.set_xlim(0, max((s + d for _, spans in rows for s, d, *_ in spans), default=1.0) * 1.01)
    ax.set_xlabel(xlabel)
    ax.spines[["top", "right", "left"]].set_visible(False)
    ax.tick_params(axis="y", length=0)
    if title:
        ax.set_title(title, fontsize="medium")
    if note:
        ax.annotate(note, xy=(0, 0), xycoords=("axes fraction", ax.xaxis.label), xytext=(0, -6),
                    textcoords="offset points", ha="left", va="top", fontsize="small", color="0.3")
    return fig

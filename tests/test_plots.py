"""workbook.plots: each figure has the expected artists, survives edge cases, and renders a non-blank PNG."""
from __future__ import annotations

import io
import random

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from workbook import plots  # noqa: E402


@pytest.fixture
def rng():
    return random.Random()


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def png_pixels(fig: Figure) -> np.ndarray:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=60)
    buf.seek(0)
    return plt.imread(buf)


def assert_not_blank(fig: Figure):
    px = png_pixels(fig)[..., :3]
    assert (px < 0.9).mean() > 0.01                        # some ink
    assert len(np.unique(px.reshape(-1, 3), axis=0)) > 10  # more than a flat fill


def caption(ax) -> str:
    texts = [t.get_text() for t in ax.texts if t.get_text().startswith("Source: ")]
    assert len(texts) == 1
    return texts[0]


def latency_frame(rng, kernels=("torch", "ours", "flashlib"), ks=(256, 1024, 4096, 16384)):
    return pd.DataFrame([{"kernel": k, "variant": "v", "K": K, "ms_median": rng.uniform(0.01, 2.0)}
                         for k in kernels for K in rng.sample(ks, len(ks))])


def test_latency_vs_shape_one_line_per_kernel(rng):
    df = latency_frame(rng)
    fig = plots.latency_vs_shape(df, x="K", title="t", source="data/measured/h200/kmeans_assign.csv")
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.lines] == ["torch", "ours", "flashlib"]
    for line in ax.lines:
        assert list(line.get_xdata()) == [256, 1024, 4096, 16384]   # sorted along x
    assert ax.get_xscale() == "log" and ax.get_ylabel() == "median latency (ms)"
    assert caption(ax) == "Source: data/measured/h200/kmeans_assign.csv"
    assert_not_blank(fig)


def test_latency_vs_shape_categorical_x_and_joint_hue(rng):
    df = pd.DataFrame({"shape": ["a", "b", "c"] * 2, "kernel": ["k"] * 6, "variant": ["x"] * 3 + ["y"] * 3,
                       "tflops": [rng.uniform(1, 2) for _ in range(6)]})
    fig = plots.latency_vs_shape(df, x="shape", y="tflops", hue=["kernel", "variant"], source="s")
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.lines] == ["k / x", "k / y"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    assert ax.get_ylabel() == "throughput (TFLOP/s)" and ax.get_yscale() == "linear"


def test_latency_vs_shape_single_point(rng):
    fig = plots.latency_vs_shape(latency_frame(rng, kernels=("one",), ks=(512,)), x="K", source="s")
    assert len(fig.axes[0].lines) == 1 and fig.axes[0].get_xscale() == "linear"
    assert_not_blank(fig)


@pytest.mark.parametrize("kwargs, match", [
    (dict(x="N"), r"\['N'\]"),
    (dict(x="K", hue="gpu"), "gpu"),
    (dict(x="K", source=""), "source"),
    (dict(x="K", source=None), "source"),
])
def test_latency_vs_shape_rejects(rng, kwargs, match):
    kwargs = {"source": "s", **kwargs}
    with pytest.raises(ValueError, match=match):
        plots.latency_vs_shape(latency_frame(rng), **kwargs)
    with pytest.raises(ValueError, match="non-empty"):
        plots.latency_vs_shape(pd.DataFrame(), x="K", source="s")


def test_speedup_bars(rng):
    n = rng.randint(1, 20)
    values = [rng.uniform(-20, 60) for _ in range(n)]
    labels = [f"shape {i}" for i in range(n)]
    fig = plots.speedup_bars(labels, values, title="PR vs main", source="seed 000, B200")
    ax = fig.axes[0]
    assert len(ax.patches) == n
    for bar, v in zip(ax.patches, values):
        assert bar.get_height() == pytest.approx(v)
        assert matplotlib.colors.to_hex(bar.get_facecolor()) == (plots.GAIN if v >= 0 else plots.LOSS)
    g = plots.geomean_speedup_pct(values)
    assert any(list(line.get_ydata()) == [g, g] for line in ax.lines)
    assert f"geomean {g:+.2f}%" in [t.get_text() for t in ax.texts]
    assert caption(ax) == "Source: seed 000, B200"
    assert_not_blank(fig)


def test_speedup_bars_stated_geomean_and_given_axes():
    fig, (left, right) = plt.subplots(1, 2)
    out = plots.speedup_bars(["a", "b"], [0.1, 16.2], geomean_pct=7.77, ax=right, title="t", source="s")
    assert out is fig and len(right.patches) == 2 and not left.patches
    assert "geomean +7.77%" in [t.get_text() for t in right.texts]


@pytest.mark.parametrize("labels, values", [([], []), (["a"], [1.0, 2.0]), (["a"], [float("nan")]), (["a"], ["x"])])
def test_speedup_bars_rejects(labels, values):
    with pytest.raises(ValueError):
        plots.speedup_bars(labels, values, title="t", source="s")


def bars_by_label(ax) -> dict[str, list]:
    out: dict[str, list] = {}
    for container in ax.containers:
        out[container.get_label()] = list(container.patches)
    return out


def test_wave_occupancy_uniform_tiles_leave_the_last_wave_part_idle():
    # seed 004: 256 tiles on 74 CTA pairs = 3.46 waves; 40 pairs sit idle in wave 4
    fig = plots.wave_occupancy(256, slots=74, slot_label="CTA pair", title="4096^3, 256x256 tiles")
    ax = fig.axes[0]
    bars = bars_by_label(ax)
    assert len(bars["work item"]) == 256 and len(bars["idle"]) == 40
    assert {p.get_x() + p.get_width() / 2 for p in bars["idle"]} == set(range(34, 74))
    assert all(p.get_y() == 3 and p.get_height() == 1 for p in bars["idle"])
    assert "3.46 waves, makespan 4.00" in ax.get_title() and "86.5%" in ax.get_title()
    assert caption(ax).startswith("Source: schedule computed")
    assert_not_blank(fig)


def test_wave_occupancy_full_last_wave_has_no_idle(rng):
    slots = rng.randint(1, 150)
    waves = rng.randint(1, 5)
    fig = plots.wave_occupancy(slots * waves, slots=slots)
    bars = bars_by_label(fig.axes[0])
    assert len(bars["work item"]) == slots * waves and "idle" not in bars
    assert "100.0%" in fig.axes[0].get_title()


def test_wave_occupancy_one_slot():
    fig = plots.wave_occupancy(5, slots=1)
    assert len(bars_by_label(fig.axes[0])["work item"]) == 5
    assert_not_blank(fig)


def test_wave_occupancy_items_per_slot():
    fig = plots.wave_occupancy([3, 0, 2], slot_label="SM")
    bars = bars_by_label(fig.axes[0])
    assert len(bars["work item"]) == 5
    assert sorted((p.get_x() + p.get_width() / 2, p.get_y(), p.get_height()) for p in bars["idle"]) == \
        [(1, 0, 3), (2, 2, 1)]


def test_wave_occupancy_mixed_widths_draw_proportionally(rng):
    # three 256-wide tiles, or four 192-wide ones (0.75 as long), on each slot: both finish at 3 waves
    slots = rng.randint(2, 80)
    work = [[(i, 1.0, "256 wide") for i in range(3)] if s % 2 else [(0.75 * i, 0.75, "192 wide") for i in range(4)]
            for s in range(slots)]
    fig = plots.wave_occupancy(work, slot_label="CTA pair")
    bars = bars_by_label(fig.axes[0])
    assert {p.get_height() for p in bars["256 wide"]} == {1.0}
    assert {p.get_height() for p in bars["192 wide"]} == {0.75}
    # waves count items (3 or 4 per slot), the makespan counts time: all slots are done at 3.00
    waves = sum(3 if s % 2 else 4 for s in range(slots)) / slots
    assert "idle" not in bars and f"{waves:.2f} waves, makespan 3.00" in fig.axes[0].get_title()
    assert_not_blank(fig)


def test_wave_occupancy_gantt_gaps_are_idle():
    fig = plots.wave_occupancy([[(0.5, 1.0)], [(0, 2.0, "long")]])
    bars = bars_by_label(fig.axes[0])
    assert sorted((p.get_y(), p.get_height()) for p in bars["idle"]) == [(0, 0.5), (1.5, 0.5)]


@pytest.mark.parametrize("work, slots", [
    (0, 4), (10, None), (10, 0), ([], None), ([1, -1], None), ([[(0, 1), (0.5, 1)]], None),
    ([[(0, 0)]], None), ([[("a", 1)]], None), ([[]], None), ([2, 2], 3), ("abc", None),
])
def test_wave_occupancy_rejects(work, slots):
    with pytest.raises(ValueError):
        plots.wave_occupancy(work, slots=slots)


def test_distinct_colours_never_repeat():
    for n in (1, 9, 10, 11, 13, 20, 21, 40):
        colours = [matplotlib.colors.to_hex(c) for c in plots.distinct_colours(n)]
        assert len(colours) == n == len(set(colours)), n


def test_grouped_bars_give_every_column_its_own_colour(rng):
    n = rng.randint(11, 16)                               # more than tab10 has: the defect this guards against
    frame = pd.DataFrame({f"variant {i}": [rng.uniform(100, 900) for _ in range(3)] for i in range(n)},
                         index=["4096³", "8192³", "16384³"])
    fig = plots.grouped_bars(frame, title="t", source="s", ylabel="TFLOP/s", reference=(989.0, "peak"))
    ax = fig.axes[0]
    colours = {}
    for container in ax.containers:
        assert len(container.patches) == 3
        colours[container.get_label()] = {matplotlib.colors.to_hex(p.get_facecolor()) for p in container.patches}
    assert list(colours) == list(frame.columns)
    assert all(len(c) == 1 for c in colours.values()) and len(set.union(*colours.values())) == n
    assert [p.get_height() for p in ax.containers[0].patches] == pytest.approx(frame.iloc[:, 0].tolist())
    assert any(list(line.get_ydata()) == [989.0, 989.0] for line in ax.lines)
    assert caption(ax) == "Source: s"
    assert_not_blank(fig)
    inside = plots.grouped_bars(frame.iloc[:, :3], title="t", source="s", ylabel="y", legend="inside").axes[0]
    assert inside.get_legend()._loc == 2 and inside.get_ylim()[1] > 1.2 * frame.iloc[:, :3].max(axis=None)
    with pytest.raises(ValueError, match="non-empty"):
        plots.grouped_bars(pd.DataFrame(), title="t", source="s", ylabel="y")


def test_dumbbells_share_a_log_time_axis(rng):
    labels = [f"shape {i}" for i in range(rng.randint(2, 13))]
    a = [rng.uniform(0.04, 4) for _ in labels]
    b = [rng.uniform(0.04, 4) for _ in labels]
    fig, (left, right) = plt.subplots(1, 2, sharex=True, sharey=True)
    plots.dumbbell(labels, {"x": a, "y": b}, ax=left, title="B200", source="s1")
    plots.dumbbell(labels, {"x": [v * 10 for v in a], "y": [float("nan")] * len(labels)}, ax=right,
                   title="H200", source="s2")
    assert left.get_xscale() == "log" and left.get_xlim() == right.get_xlim()
    assert right.get_xlim()[1] >= 10 * max(a)               # the shared axis holds both panels' values
    assert [list(c.get_offsets()[:, 0]) for c in left.collections[1:]] == [pytest.approx(a), pytest.approx(b)]
    assert caption(left) == "Source: s1" and caption(right) == "Source: s2"
    with pytest.raises(ValueError, match="one value per label"):
        plots.dumbbell(labels, {"x": a[:-1]}, title="t", source="s")
    with pytest.raises(ValueError, match="positive"):
        plots.dumbbell(labels, {"x": [0.0] * len(labels)}, title="t", source="s")

"""The shape explorer's logic (workbook.explore), without a GPU, on a toy problem: the explorer knows no kernel,
so it is tested on one it has never heard of. (The real problems are tested in test_kmeans_explore.py and
test_gemm_explore.py.)"""
from __future__ import annotations

import math
import random

import matplotlib
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from workbook import explore, gpus, records  # noqa: E402

rng = random.Random()     # fresh shapes every run; a failing assert shows the shape it drew
PROV = dict(gpu="NVIDIA H200", sm_count=132, driver="1", torch="t", cutlass_dsl="4.8.1")


class Toy(explore.Problem):
    """C[A, B] += over C: tiles of `tile` x `tile`, `ctas` CTAs per SM; 'vendor' is not modelled."""
    name = "toy"
    dims = (explore.Dim("A", 1024, 64, 1 << 16), explore.Dim("B", 1024, 64, 1 << 16, 8),
            explore.Dim("C", 256, 16, 4096, 16))
    table = "toy"
    model = "the toy model"
    baselines = ("vendor",)
    TILES = {"narrow": (64, 1), "wide": (128, 1), "twice per SM": (64, 2), "wide too": (128, 1)}

    def __init__(self, live=None):
        self.live = live or {}

    def check(self, shape, gpu):
        if shape[2] % 16:
            raise ValueError(f"C={shape[2]} is not a multiple of 16")

    def flops(self, shape):
        a, b, c = shape
        return 2.0 * a * b * c

    def nbytes(self, shape):
        a, b, c = shape
        return 2.0 * a * b          # a toy: only its output goes through memory

    def configurations(self, gpu):
        return [*self.TILES, "vendor"]

    def waves(self, shape, gpu, configuration):
        if configuration == "vendor":
            return None
        a, b, c = shape
        tile, ctas = self.TILES[configuration]
        if configuration == "wide" and a > 60000:
            raise ValueError("wide takes A <= 60000")
        return explore.uniform_waves(math.ceil(a / tile) * math.ceil(b / tile), gpu.sm_count * ctas,
                                     2.0 * tile * tile * c, slot="SM" if ctas == 1 else f"CTA ({ctas} per SM)",
                                     tile=f"{tile} x {tile}")

    def references(self, shape, gpu):
        return [explore.Reference("their kernel", 1e-3, "data/pr/toy.csv (their GPU)")] if gpu.key == "b200" else []

    def measure(self, shape, configuration):
        return self.live.get(configuration)


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    """Every test sees a machine without a GPU unless it says otherwise."""
    monkeypatch.setattr(gpus, "current", lambda device=None: None)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def explorer(tmp_path, **kw):
    return explore.Explorer(Toy(**kw), records_root=tmp_path)


def random_shape():
    return (rng.randint(1, 1 << 15), 8 * rng.randint(1, 4096), 16 * rng.randint(1, 64))


def rows(date, commit, shape, ms):
    """Benchmark rows of one run at `shape`: {(kernel, variant): ms}."""
    a, b, c = shape
    return [dict(kernel=k, variant=v, A=a, B=b, C=c, ms_median=t, ms_min=t, ms_max=t, tflops=1.0, match_rate=1.0,
                 commit=commit, date=date, **PROV) for (k, v), t in ms.items()]


# ------------------------------------------------------------------------------------------------ the model

@pytest.mark.parametrize("gpu", ["h200", "b200"])
def test_predictions_never_beat_the_roofline_and_differ_where_the_tiling_does(tmp_path, gpu):
    ex = explorer(tmp_path)
    for _ in range(20):
        shape = random_shape()
        result = ex.explore(shape, gpu)
        by = {r.name: r for r in result.rows}
        for r in result.rows:
            if r.predicted_ms is not None:
                assert r.predicted_ms >= result.roofline.ms * (1 - 1e-12), (shape, r.name)
        assert by["vendor"].predicted_ms is None and by["vendor"].waves is None
        assert by["wide"].predicted_ms == by["wide too"].predicted_ms          # same tiling, same prediction
        # the model's time is exactly the makespan of equal items at a slot's share of the peak
        w = by["twice per SM"].waves
        spec = gpus.get(gpu)
        assert w.slots == 2 * spec.sm_count
        assert math.isclose(w.compute_ms(spec), math.ceil(w.items / w.slots) * w.item_flops * w.slots
                            / (spec.bf16_dense_tflops * 1e9), rel_tol=1e-12)


def test_a_full_wave_of_whole_tiles_predicts_the_roofline(tmp_path):
    spec = gpus.H200
    shape = (64 * spec.sm_count * rng.randint(1, 4), 64, 16 * rng.randint(16, 64))   # narrow: whole waves, no pad
    result = explorer(tmp_path).explore(shape, "h200", ["narrow"])
    (row,) = result.rows
    assert row.waves.efficiency == 1.0 and row.waves.waves == row.waves.makespan
    assert row.predicted_ms == pytest.approx(max(result.roofline.compute_ms, result.roofline.memory_ms), rel=1e-12)


def test_the_tail_and_the_padding_cost_what_the_model_says(tmp_path):
    spec = gpus.H200
    tiles = spec.sm_count + 1                                  # one tile into a second wave
    result = explorer(tmp_path).explore((64 * tiles - 1, 64, 4096), "h200", ["narrow"])
    w = result.rows[0].waves
    assert (w.items, w.makespan, w.waves) == (tiles, 2.0, tiles / spec.sm_count)
    padded = 2.0 * 64 * 64 * 4096 * 2 * spec.sm_count              # two waves of whole tiles
    assert result.rows[0].predicted_ms == pytest.approx(max(padded / (spec.bf16_dense_tflops * 1e9),
                                                            result.roofline.memory_ms), rel=1e-12)
    assert result.rows[0].predicted_ms > result.roofline.ms


def test_model_ties_have_no_winner_and_say_so(tmp_path):
    result = explorer(tmp_path).explore((4096, 4096, 256), "h200", ["wide", "wide too"])
    assert result.winner is None and result.winner_basis.startswith("model")
    text = result.summary()
    assert "wide, wide too:" in text and "tile alike" in text and "No single winner" in text and "No GPU here" in text


def test_a_configuration_that_refuses_the_shape_is_left_out_with_a_note(tmp_path):
    result = explorer(tmp_path).explore((60001, 64, 64), "h200")
    assert "wide" not in [r.name for r in result.rows] and "wide too" in [r.name for r in result.rows]
    assert any(n.startswith("wide left out: wide takes A <= 60000") for n in result.notes)


@pytest.mark.parametrize("shape, configs, gpu, words", [
    ((0, 8, 16), None, "h200", "A must be a positive integer"),
    ((8, 8, 2.5), None, "h200", "C must be"),
    ((True, 8, 16), None, "h200", "A must be"),
    ((8, 8), None, "h200", r"\(A, B, C\)"),
    ((8, 8, 20), None, "h200", "not a multiple of 16"),
    ((8, 8, 16), ["narrow", "typo"], "h200", "unknown toy configuration"),
    ((8, 8, 16), None, "a100", "unknown GPU"),
])
def test_what_cannot_be_explored_is_a_value_error_that_says_why(tmp_path, shape, configs, gpu, words):
    with pytest.raises(ValueError, match=words):
        explorer(tmp_path).explore(shape, gpu, configs)


# ------------------------------------------------------------------------------------------- measurements

def test_recorded_numbers_come_from_one_run_never_mixed_with_an_older_one(tmp_path):
    shape = random_shape()
    old = {("ours", "narrow"): 9.0, ("ours", "wide"): 8.0, ("vendor", "vendor"): 7.0}
    new = {("ours", "narrow"): rng.uniform(1, 2), ("ours", "wide"): rng.uniform(1, 2)}
    records.append("h200", "toy", rows("2026-01-01T00:00:00Z", "aaaaaaa", shape, old), root=tmp_path)
    records.append("h200", "toy", rows("2026-01-02T00:00:00Z", "bbbbbbb", shape, new), root=tmp_path)
    other = (shape[0] + 1, *shape[1:])                     # another shape, newer still: never picked up
    records.append("h200", "toy", rows("2026-01-03T00:00:00Z", "ccccccc", other, {("ours", "narrow"): 1e-6}),
                   root=tmp_path)
    result = explorer(tmp_path).explore(shape, "h200", ["narrow", "wide"])
    by = {r.name: r for r in result.rows}
    # the newer run timed both chosen configurations: it is the one shown, whole; the older "vendor" is not
    assert by["narrow"].recorded_ms == new["ours", "narrow"] and by["wide"].recorded_ms == new["ours", "wide"]
    assert "vendor" not in by and "bbbbbbb" in result.run and "2026-01-02" in result.run
    assert result.winner == min(("narrow", "wide"), key=lambda n: new["ours", n])
    assert result.winner_basis == "recorded measurement"
    # asking for vendor too: the older run timed all three, the newer only two, so the older one is shown
    result = explorer(tmp_path).explore(shape, "h200", ["narrow", "wide", "vendor"])
    assert [r.recorded_ms for r in result.rows] == [9.0, 8.0, 7.0] and "aaaaaaa" in result.run
    table = result.table()
    assert table["kind"].tolist() == ["recorded"] * 3 and "recorded in" in table.columns


def test_a_recorded_baseline_that_is_no_configuration_joins_as_recorded_and_a_deselected_one_does_not(tmp_path):
    shape = random_shape()
    run = {("ours", "narrow"): 2.0, ("ours", "wide"): 3.0, ("flash", "attn"): 1.5}
    records.append("h200", "toy", rows("2026-01-01T00:00:00Z", "aaaaaaa", shape, run), root=tmp_path)
    result = explorer(tmp_path).explore(shape, "h200", ["narrow"])
    assert [(r.name, r.origin, r.recorded_ms) for r in result.rows] == [("narrow", "ours", 2.0),
                                                                        ("flash attn", "recorded", 1.5)]


def test_published_numbers_join_as_theirs_and_do_not_outrank_our_measurements(tmp_path):
    shape = random_shape()
    result = explorer(tmp_path).explore(shape, "b200")
    ref = result.rows[-1]
    assert (ref.name, ref.origin, ref.shown[1]) == ("their kernel", "reference", "published")
    assert result.winner == "their kernel" and result.winner_basis.startswith("published")
    assert all(r.recorded_ms is None for r in explorer(tmp_path).explore(shape, "h200").rows)
    on_b200 = [{**r, "gpu": "NVIDIA B200", "sm_count": 148}
               for r in rows("2026-01-01T00:00:00Z", "aaaaaaa", shape, {("ours", "wide"): 5.0})]
    records.append("b200", "toy", on_b200, root=tmp_path)
    result = explorer(tmp_path).explore(shape, "b200")
    assert result.winner == "wide" and result.winner_basis == "recorded measurement"


def test_live_timings_win_and_run_only_on_a_gpu_of_that_kind(tmp_path, monkeypatch):
    live = {"narrow": rng.uniform(0.1, 1), "wide": rng.uniform(0.1, 1)}
    monkeypatch.setattr(gpus, "current", lambda device=None: gpus.H200)
    result = explorer(tmp_path, live=live).explore(random_shape(), "h200")
    assert {r.name: r.live_ms for r in result.rows if r.live_ms} == live
    assert result.winner == min(live, key=live.get) and result.winner_basis == "measured live on this GPU"
    assert result.table().set_index("configuration").loc["narrow", "kind"] == "live"
    assert all(r.live_ms is None for r in explorer(tmp_path, live=live).explore(random_shape(), "h200",
                                                                                live=False).rows)
    result = explorer(tmp_path, live=live).explore(random_shape(), "b200")
    assert all(r.live_ms is None for r in result.rows) and "not a NVIDIA B200" in result.summary()


# ------------------------------------------------------------------------------------------------- sweeps

def test_sweep_values_are_multiples_spread_on_a_log_axis():
    d = explore.Dim("D", 128, 16, 512, 16)
    for _ in range(20):
        lo, hi, n = rng.randint(1, 200), rng.randint(200, 5000), rng.randint(2, 12)
        vals = d.values(lo, hi, n)
        assert all(v % 16 == 0 for v in vals) and vals == sorted(set(vals)) and len(vals) <= n
        assert abs(vals[0] - max(16, lo)) <= 16 and abs(vals[-1] - hi) <= 8
    assert explore.Dim("K", 1, 1, 1 << 20).values(512, 16384, 6) == [512, 1024, 2048, 4096, 8192, 16384]
    with pytest.raises(ValueError, match="at least 2"):
        d.values(16, 512, 1)


def test_a_sweep_explores_each_value_and_leaves_refused_ones_out(tmp_path):
    ex = explorer(tmp_path)
    s = ex.sweep((4096, 4096, 256), "C", [16, 20, 64, 256], "h200", ["narrow", "wide"])
    assert s.values == [16, 64, 256] and any("C=20 left out" in n for n in s.notes)
    t = s.table()
    assert len(t) == 3 * 2 and t.groupby("C").size().tolist() == [2, 2, 2]
    assert (t["ms"] >= t["roofline ms"] * (1 - 1e-12)).all() and set(t["kind"]) == {"predicted"}
    with pytest.raises(ValueError, match="no value of C"):
        ex.sweep((4096, 4096, 256), "C", [20, 30], "h200")
    with pytest.raises(ValueError, match="not a dimension"):
        ex.sweep((4096, 4096, 256), "Q", [16], "h200")


# ----------------------------------------------------------------------------------------- figures and UI

def latency_axes(fig):
    return [ax for ax in fig.axes if ax.get_title().startswith("latency per configuration")][0]


def test_the_figure_marks_each_kind_and_does_not_let_a_slow_bar_squash_the_rest(tmp_path):
    shape = random_shape()
    run = {("ours", "narrow"): 0.05, ("ours", "wide"): 0.06, ("vendor", "vendor"): 2.0}
    records.append("h200", "toy", rows("2026-01-01T00:00:00Z", "aaaaaaa", shape, run), root=tmp_path)
    result = explorer(tmp_path).explore(shape, "h200")
    fig = explore.figure(result)
    ax = latency_axes(fig)
    assert ax.get_xscale() == "log"                          # 2 ms next to 0.05 ms: a log axis
    labels = {t.get_text() for t in ax.get_legend().get_texts()}
    assert {"predicted", "recorded", "recorded (baseline)"} <= labels
    assert [r.origin for r in result.rows][-1] == "baseline"          # vendor: someone else's library, in grey
    colours = {matplotlib.colors.to_hex(p.get_facecolor()) for p in ax.patches if not p.get_hatch()}
    assert colours == {matplotlib.colors.to_hex("tab:blue"), matplotlib.colors.to_hex("0.6")}
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(hatched) == sum(r.predicted_ms is not None for r in result.rows)
    assert len(fig.axes) == 1 + len(explore.distinct_waves(result)) == 1 + 3   # wide and wide too: one picture
    source = [t.get_text() for t in ax.texts if t.get_text().startswith("Source:")][0]
    assert "aaaaaaa" in source and "a model, not a measurement" in source

    fig = explore.figure(result, view="roofline")
    ax = latency_axes(fig)
    assert ax.get_xscale() == "linear" and ax.get_xlim() == (0, 1.1)
    widths = sorted(p.get_width() for p in ax.patches if not p.get_hatch())
    assert widths == pytest.approx(sorted(result.roofline.ms / ms for ms in run.values()))
    with pytest.raises(ValueError, match="view"):
        explore.figure(result, view="bars")


def test_the_sweep_figure_has_a_line_per_configuration_and_kind(tmp_path):
    s = explorer(tmp_path).sweep((4096, 4096, 256), "A", [1024, 2048, 4096, 8192], "h200", ["narrow", "wide"])
    fig = explore.sweep_figure(s)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and ax.get_xscale() == "log"
    assert len([line for line in ax.lines if line.get_linestyle() == "--"]) == 2      # two predictions
    assert explore.sweep_figure(s, view="roofline").axes[0].get_ylim() == (0, 1.08)


def test_ui_shows_a_message_not_a_traceback_and_sweeps(tmp_path, capsys):
    ui = explore.build_ui([explorer(tmp_path)])
    problem, dims, (gpu, chosen), sweep_row, (view, live, go), out = (
        ui.children[0], ui.children[1].children, ui.children[2].children, ui.children[3].children,
        ui.children[4].children, ui.children[5])
    assert [d.description for d in dims] == ["A", "B", "C"] and dims[2].step == 16
    assert list(chosen.options) == Toy().configurations(gpus.H200) and live.disabled
    dims[2].value = 20
    go.click()
    assert "Cannot explore this: C=20 is not a multiple of 16" in capsys.readouterr().out
    dims[2].value = 256
    mode, sweep_dim, sweep_from, sweep_to, points = sweep_row
    mode.value, sweep_dim.value = "sweep", "A"
    sweep_from.value, sweep_to.value, points.value = 1024, 8192, 4
    view.value = "roofline"
    go.click()
    printed = capsys.readouterr().out
    assert "Cannot explore" not in printed and "configuration" in printed


def test_a_big_wave_picture_draws_each_slots_run_as_one_bar_and_keeps_its_shape():
    gantt = [[(0.0, 1.0, "a"), (1.0, 1.0, "a"), (2.0, 0.75, "b"), (2.75, 0.75, "b")], [(0.5, 1.0, "a"), (2.0, 1.0, "a")]]
    assert explore.figures._merged(gantt) == [[(0.0, 2.0, "a"), (2.0, 1.5, "b")], [(0.5, 1.0, "a"), (2.0, 1.0, "a")]]


def test_this_gpu_is_offered_first_and_once(tmp_path, monkeypatch):
    monkeypatch.setattr(gpus, "current", lambda device=None: gpus.H200)
    gpu = explore.build_ui([explorer(tmp_path)]).children[2].children[0]
    assert [v for _, v in gpu.options] == ["h200", "b200"] and gpu.options[0][0] == "this GPU: NVIDIA H200"

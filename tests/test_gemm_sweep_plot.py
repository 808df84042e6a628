"""gemm_kernels.sweep_plot and rule_exercises on the committed H200 sweep: the figures build, their cells carry the
recorded numbers, and the exercise's answer is the rule's."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from gemm_kernels import configs, rule, rule_exercises, sweep_plot  # noqa: E402
from test_plots import assert_not_blank  # noqa: E402
from workbook import records  # noqa: E402


@pytest.fixture(scope="module")
def frame():
    found = rule.latest_run(records.read("h200", "gemm_config_sweep"))
    if found.empty:
        pytest.skip("no recorded sweep")
    return found


@pytest.fixture(scope="module")
def learned(frame):
    return rule.fit(frame)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def recorded_pct(frame, shape, variant, timing):
    """% of torch straight from the rows, independent of sweep_plot."""
    M, N, K = shape
    row = frame[(frame.M == M) & (frame.N == N) & (frame.K == K) & (frame.variant == variant) &
                (frame.timing == timing) & (frame.kernel == "ours")]
    assert len(row) == 1
    return 100 / float(row.ratio.iloc[0])


def cell_text(fig, K, M, N, sides):
    ax = next(a for a in fig.axes if a.get_title() == f"K = {K}")
    at = [t.get_text() for t in ax.texts if t.get_position() == (sides.index(N), sides.index(M))]
    assert len(at) == 1
    return at[0]


def test_short_names_are_unique_and_read_as_documented():
    names = [sweep_plot.short_name(n) for n in configs.HOPPER_CANDIDATES]
    assert len(set(names)) == len(names)
    assert sweep_plot.short_name("256 balanced cluster2") == "256b2"
    assert sweep_plot.short_name("128 stream-k cluster1") == "128sk1"
    assert sweep_plot.short_name("64 one-per-item cluster1") == "64p1"
    assert sweep_plot.short_name("128 split-k cluster2") == "128sp2"
    for bad in ("256 balanced", "256 sideways cluster2", "gemm() default", "wide balanced cluster2"):
        with pytest.raises(ValueError):
            sweep_plot.short_name(bad)


@pytest.mark.parametrize("timing", ["kernel", "gpu"])
def test_heatmap_cell_is_the_leave_one_out_choice(frame, learned, timing):
    shape = (4096, 16384, 1024)
    picked = learned.choose(*shape, without=shape)
    fig = sweep_plot.heatmaps(frame, learned, timing)
    assert_not_blank(fig)
    assert len([a for a in fig.axes if a.get_title().startswith("K = ")]) == len(sweep_plot.HEAT_K)
    sides = [1024, 2048, 4096, 8192, 16384]
    text = cell_text(fig, 1024, *shape[:2], sides)
    assert text == f"{recorded_pct(frame, shape, picked, timing):.0f}%\n{sweep_plot.short_name(picked)}"
    footer = fig.get_supxlabel()
    assert "NVIDIA H200" in footer and frame.commit.iloc[0] in footer and frame.date.iloc[0] in footer


def test_heatmap_of_a_named_candidate_and_of_gemm_as_shipped(frame, learned):
    name = "128 balanced cluster1"
    cells = sweep_plot.choices(frame, learned, "latency", name)
    assert set(cells.label) == {"128b1"}
    shape = (2048, 8192, 4096)
    assert cells.set_index(["M", "N", "K"]).pct[shape] == pytest.approx(recorded_pct(frame, shape, name, "latency"))
    # a rule-check table: gemm() as shipped, labelled with what the rule ran there
    check = frame[(frame.kernel == "torch") | (frame.variant == "192 balanced cluster1")].copy()
    check.loc[check.kernel == "ours", "variant"] = sweep_plot.SHIPPED
    check["held_out"] = False
    fig = sweep_plot.heatmaps(check, learned, variant=sweep_plot.SHIPPED, source=sweep_plot.CHECK_SOURCE)
    text = cell_text(fig, 4096, *shape[:2], [1024, 2048, 4096, 8192, 16384])
    pct = recorded_pct(frame, shape, "192 balanced cluster1", "kernel")
    assert text == f"{pct:.0f}%\n{sweep_plot.short_name(learned.choose(*shape))}"


def test_class_table_and_boxes_carry_the_leave_one_out_numbers(frame, learned):
    table = sweep_plot.class_table(frame, learned)
    classes = frame.drop_duplicates(["M", "N", "K"]).set_index(["M", "N", "K"])["class"]
    skinny = [s for s in learned.shapes if classes[s] == "skinny"]
    pcts = [recorded_pct(frame, s, learned.choose(*s, without=s), "kernel") for s in skinny]
    got = table.loc[("skinny", sweep_plot.CONTENDERS["rule"])]
    assert got["kernel median %"] == pytest.approx(pd.Series(pcts).median())
    assert got["kernel min %"] == pytest.approx(min(pcts))
    worst = skinny[pcts.index(min(pcts))]
    assert got["kernel worst"] == "x".join(map(str, worst))
    default = table.loc[("square", sweep_plot.CONTENDERS["default"])]
    squares = [(s, s, s) for s in (1024, 1536, 2048, 3072, 4096, 5120, 6144, 8192, 10240, 12288, 16384)]
    lat = [recorded_pct(frame, s, configs.HOPPER_FALLBACK, "latency") for s in squares]
    assert default["latency median %"] == pytest.approx(pd.Series(lat).median())
    verdict = sweep_plot.goal_verdict(table)
    assert len(verdict) == 2 * len(sweep_plot.CLASSES)
    row = verdict[(verdict["class"] == "skinny") & (verdict.timing == "kernel")].iloc[0]
    assert row["median >= goal"] == (got["kernel median %"] >= 103)
    fig = sweep_plot.class_boxes(frame, learned)
    assert_not_blank(fig)
    for ax in fig.axes:
        levels = {line.get_ydata()[0] for line in ax.lines if len(set(line.get_xdata())) == 1 or
                  tuple(line.get_xdata()) == (0, 1)}
        assert {100, sweep_plot.GOAL_PCT, sweep_plot.FLOOR_PCT} <= levels


def test_time_split_reads_the_three_timings(frame, learned):
    split = sweep_plot.time_split(frame, [(1024, 1024, 1024)], learned)
    torch_rows = frame[(frame.M == 1024) & (frame.N == 1024) & (frame.K == 1024) & (frame.kernel == "torch")]
    row = split.loc[("1024x1024x1024", "torch.matmul")]
    for timing, col in (("gpu", "gpu µs"), ("kernel", "back-to-back µs"), ("latency", "synchronised µs")):
        assert row[col] == pytest.approx(1e3 * float(torch_rows[torch_rows.timing == timing].ms_median.iloc[0]))
    fastest = split.loc[("1024x1024x1024", "ours, fastest on the GPU")]
    assert fastest["gpu µs"] <= split.loc[("1024x1024x1024", "ours, slowest on the GPU")]["gpu µs"]
    with pytest.raises(ValueError):
        sweep_plot.time_split(frame, [(3, 5, 7)])


def test_skinny_panel_builds(frame, learned):
    assert_not_blank(sweep_plot.skinny_panel(frame, learned))


def test_exercise_answer_is_the_committed_rules():
    committed = rule.learned()
    config, shapes = rule_exercises.answer()
    assert config == rule.choose(*rule_exercises.SHAPE)
    assert rule_exercises.SHAPE not in committed.shapes                # a shape the sweep did not measure
    near = rule_exercises.neighbours(committed, *rule_exercises.SHAPE)
    assert {s for s, _ in near} == shapes
    # no tie at the edge of the neighbourhood, so the answer does not hang on the rule's tie-break
    here = rule.features(*rule_exercises.SHAPE)
    dists = sorted(sum((a - b) ** 2 for a, b in zip(here, rule.features(*s))) for s in committed.shapes)
    assert not math.isclose(dists[rule.NEIGHBOURS - 1], dists[rule.NEIGHBOURS])
    # the rule's choice over exactly these shapes (leaving out any other shape changes nothing)
    far = next(s for s in committed.shapes if s not in shapes)
    assert committed.choose(*rule_exercises.SHAPE, without=far) == config
    assert rule_exercises.check((config, shapes))
    assert rule_exercises.check((sweep_plot.short_name(config), list(shapes)))
    other = next(c for c in configs.HOPPER_CANDIDATES if c != config)
    assert not rule_exercises.check((other, shapes))
    assert not rule_exercises.check((config, set(list(shapes)[:-1])))
    assert not rule_exercises.check(config)
    assert config in rule_exercises.solution()
    assert config not in str(rule_exercises.check((config, set())))     # a hint never gives the answer

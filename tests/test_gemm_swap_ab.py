"""Swapped operands in numbers (`gemm_kernels.swap_ab`) and notebook 17's exercise: pure Python, no GPU."""
from __future__ import annotations

import math

import pytest

from gemm_kernels import configs, hopper_options, swap_ab, swap_exercises, waves
from workbook import gpus


def test_the_swapped_widths_are_the_ones_the_options_accept():
    for w in swap_ab.WIDTHS:
        hopper_options.Options(swap_ab=True, epilogue="staged", schedule="uniform", tile=(128, w, 64))
    assert swap_ab.WIDTHS[-1] == 288 and all(w % 32 == 0 for w in swap_ab.WIDTHS)


@pytest.mark.parametrize("M", [1, 16, 96, 200, 800, 1500, 4096, 4097])
def test_padding_counts_whole_tiles_and_takes_the_width_that_pads_least(M):
    row = swap_ab.padding([M]).loc[M]
    assert row["128-row tiles"] == math.ceil(M / 128) * 128 >= M
    w = row["best swapped width"]
    assert row["swapped rows"] == math.ceil(M / w) * w == min(math.ceil(M / v) * v for v in swap_ab.WIDTHS)
    assert row["swapped waste %"] == pytest.approx(100 * (row["swapped rows"] / M - 1))
    # of equally padded widths the widest (fewest tiles): at M = 96, 96 and 32 both pad nothing
    assert swap_ab.best_width(96) == 96 and swap_ab.best_width(800) == 160


def test_widths_follow_the_planner_for_clusters_of_four():
    """The table's items, waves and makespan are the planner's for each swapped width (`hopper_options.plan_for`)."""
    table = swap_ab.widths(800, 5000)
    for w, r in table.iterrows():
        o = hopper_options.Options(swap_ab=True, epilogue="staged", schedule="uniform", tile=(128, w, 64), cluster_m=4)
        plan = hopper_options.plan_for(800, 5000, o, gpus.H200)
        assert r["items"] == len(plan.items) and r["makespan"] == plan.makespan
        assert r["waves"] == pytest.approx(plan.waves)
        assert r["items"] == math.ceil(800 / w) * math.ceil(5000 / 512)     # by hand: tiles of M x items along N
    assert table["makespan"].idxmin() == 288 and table["loads per MAC (x1000)"].idxmin() == 288


def test_plans_give_each_configurations_item_in_our_terms():
    plans = swap_ab.plans(800, 5000, ["256 stream-k cluster2", "288 uniform cluster4 swapped"])
    assert plans.loc["256 stream-k cluster2", "item (M x N)"] == "256 x 256"
    assert plans.loc["288 uniform cluster4 swapped", "item (M x N)"] == "288 x 512"
    assert plans.loc["288 uniform cluster4 swapped", "slots"] == waves.slots_for(gpus.H200, 4)
    with pytest.raises(KeyError):
        swap_ab.plans(800, 5000, ["no such configuration"])


def test_the_probe_table_reads_the_recorded_round():
    t = swap_ab.probe_table()
    assert len(t) == 24 and (t["swapped / pick"].diff().dropna() >= 0).all()
    assert t.attrs["gpu"].startswith("NVIDIA H100") and set(t.swapped) <= {
        f"swapped {n.split()[0]} cluster4" for n, o in configs.HOPPER_CANDIDATES.items() if o.swap_ab}
    kernel = swap_ab.probe_table(timing="kernel")
    assert (kernel.lo <= kernel["swapped / pick"]).all() and (kernel["swapped / pick"] <= kernel.hi).all()


def test_the_exercise_checker_accepts_the_planners_answer_and_hints_otherwise():
    right = swap_exercises.answer()
    assert set(right) == set(swap_exercises.WIDTHS)
    assert swap_exercises.check(right)
    off_items = {**right, 96: (right[96][0] + 1, right[96][1])}
    off_span = {**right, 128: (right[128][0], right[128][1] + 1)}
    for wrong, hint in ((off_items, "items"), (off_span, "makespan"), ({96: (1, 1)}, "all three"), (7, "dict")):
        verdict = swap_exercises.check(wrong)
        assert not verdict and hint in str(verdict)
    assert all(f"width {w:>3}" in swap_exercises.solution() for w in swap_exercises.WIDTHS)


def test_the_widths_table_reads_the_recorded_round_by_width():
    t = swap_ab.widths_table()
    widths = [c for c in t.columns if c != "torch.matmul"]
    assert widths == sorted(widths) and set(widths) <= set(swap_ab.WIDTHS) and t.attrs["gpu"].startswith("NVIDIA H100")
    assert t.loc["1536x1536x12288", 160] < t.loc["1536x1536x12288", 96]     # the round's finding, as recorded
    assert t["torch.matmul"].notna().all() and t.index[0] == "800x5000x3000"

"""kmeans_kernels.seeds: flashlib PR #22's tables transcribed, its headline numbers recomputed (checked, not
assumed), and our H200 numbers picked from one benchmark run."""
from __future__ import annotations

import random
import re

import pandas as pd
import pytest

from kmeans_kernels import hopper, seeds
from workbook import ROOT, records

# the seed texts sit beside the checkout on the team's machines (beside the worktrees' folder for a worktree)
SEEDS = next((p for p in (ROOT.parent / "shared" / "seeds", ROOT.parent.parent / "shared" / "seeds") if p.is_dir()),
             ROOT.parent / "shared" / "seeds")
PATH_IDS = {label: key for key, label in seeds.PATH_LABELS.items()}
rng = random.Random()


def seed_rows(name: str, first_cell: str = r"\d[\d,]*") -> list[list[str]]:
    """The tab-separated table rows of a seed file whose first cell matches `first_cell`."""
    path = SEEDS / name
    if not path.exists():
        pytest.skip(f"seed text {path} not on this machine")
    return [line.split("\t") for line in path.read_text().splitlines()
            if "\t" in line and re.fullmatch(first_cell, line.split("\t")[0])]


def number(cell: str) -> float:
    return float(re.sub(r"[,%\s]|TFLOPS|\(|\)|us", "", cell))


def test_table_shapes():
    main, nightly = seeds.main_table(), seeds.nightly_table()
    assert list(main.columns) == ["N", "D", "K", "main_path", "pr_path", "improvement_pct", "source"]
    assert list(nightly.columns) == ["N", "D", "K", "nightly_path", "pr_path", "nightly_ms", "pr_ms",
                                     "pr_faster_pct", "source"]
    assert (len(main), len(nightly)) == (13, 13)
    for col in ("N", "D", "K"):
        assert main[col].dtype.kind == "i" and nightly[col].dtype.kind == "i"
    paths = set(main.main_path) | set(main.pr_path) | set(nightly.nightly_path) | set(nightly.pr_path)
    assert paths <= set(seeds.PATH_LABELS)
    assert (main.source == seeds.SEED_KMEANS).all()
    # every step the PR took has a Hopper variant that takes it too
    assert set(main.pr_path) | {"ws"} <= set(seeds.HOPPER_VARIANTS)
    assert set(seeds.HOPPER_VARIANTS.values()) <= set(hopper.VARIANTS)


def test_main_and_nightly_cover_the_same_shapes_and_paths():
    main, nightly = seeds.main_table(), seeds.nightly_table()
    assert main[["N", "D", "K", "pr_path"]].equals(nightly[["N", "D", "K", "pr_path"]])
    assert main.main_path.tolist() == nightly.nightly_path.tolist()


@pytest.mark.parametrize("seed", [seeds.SEED_KMEANS, seeds.SEED_KMEANS_FIRST])
def test_main_table_is_the_seed_transcribed(seed):
    rows = [r for r in seed_rows(seed) if len(r) == 6]
    want = pd.DataFrame({"N": [int(number(r[0])) for r in rows], "D": [int(number(r[1])) for r in rows],
                         "K": [int(number(r[2])) for r in rows], "main_path": [PATH_IDS[r[3]] for r in rows],
                         "pr_path": [PATH_IDS[r[4]] for r in rows], "improvement_pct": [number(r[5]) for r in rows]})
    pd.testing.assert_frame_equal(seeds.main_table().drop(columns="source"), want)


def test_nightly_table_is_the_seed_transcribed():
    rows = [r for r in seed_rows(seeds.SEED_KMEANS) if len(r) == 8]
    got = seeds.nightly_table()
    assert len(rows) == len(got) == 13
    for r, (_, g) in zip(rows, got.iterrows()):
        assert [int(number(c)) for c in r[:3]] == [g.N, g.D, g.K]
        assert [PATH_IDS[r[3]], PATH_IDS[r[4]]] == [g.nightly_path, g.pr_path]
        assert [number(c) for c in r[5:]] == [g.nightly_ms, g.pr_ms, g.pr_faster_pct]


def test_main_geomean_rounds_to_the_stated_7_77():
    h = seeds.main_geomean_improvement()
    assert round(h.recomputed, 2) == 7.77 and h.rounds_to_stated and h.consistent
    assert h.low < h.recomputed < h.high
    # the plain mean of the percentages is not the PR's statistic
    assert round(seeds.main_table().improvement_pct.mean(), 2) != 7.77


def test_nightly_geomean_latencies_round_to_the_stated_ones():
    nightly, ours = seeds.nightly_geomean_ms(), seeds.pr_geomean_ms()
    assert round(nightly.recomputed, 4) == 0.3381 and nightly.rounds_to_stated
    assert round(ours.recomputed, 4) == 0.2641 and ours.rounds_to_stated


def test_nightly_geomean_speedup_is_28_04_from_the_table_not_28_05():
    """Checked, not assumed: the printed latencies give 28.04%; the PR's 28.05% is still within their rounding."""
    h = seeds.nightly_geomean_speedup()
    assert round(h.recomputed, 2) == 28.04 and not h.rounds_to_stated
    assert h.consistent and h.low < 28.05 < h.high
    assert abs(h.difference) < 0.01
    assert "0.1 us" in h.explanation and "28.0468%" in h.explanation


def test_headlines_lists_all_four():
    hs = seeds.headlines()
    assert [h.stated for h in hs] == [7.77, 0.3381, 0.2641, 28.05]
    assert all(h.consistent for h in hs)


def test_nightly_per_shape_recomputed():
    t = seeds.nightly_per_shape()
    assert t.recomputed_pct.tolist() == pytest.approx(((t.nightly_ms / t.pr_ms - 1) * 100).tolist())
    assert (t.recomputed_low_pct < t.recomputed_pct).all() and (t.recomputed_pct < t.recomputed_high_pct).all()
    assert t.consistent.all()
    d = seeds.nightly_per_shape_discrepancy()
    assert d.at == (65536, 128, 4096) and 0.05 < d.max_abs_pct < 0.06 and d.all_consistent
    assert f"{d.max_abs_pct:.4f}" in d.explanation
    # the stated range of per-shape gains, "10.14% to 64.90%"
    assert (t.pr_faster_pct.min(), t.pr_faster_pct.max()) == (10.14, 64.90)


def test_shape_labels():
    assert seeds.shape_labels(seeds.main_table())[7] == "1,048,576 x 128 x 4,096"


# ------------------------------------------------------------------------------------- our H200 beside

PROV = dict(gpu="NVIDIA H200", sm_count=132, driver="1", torch="t", cutlass_dsl="4.8.1")


def run_rows(date, commit, shapes, variants, ms):
    return [dict(kernel=k, variant=v, N=n, D=d, K=kk, ms_median=ms(k, v), ms_min=ms(k, v), ms_max=ms(k, v),
                 tflops=1.0, match_rate=1.0, commit=commit, date=date, **PROV)
            for n, d, kk in shapes for k, v in variants]


def test_ours_come_from_the_newest_run_that_timed_every_seed_shape(tmp_path):
    shapes = [tuple(r) for r in seeds.main_table()[["N", "D", "K"]].itertuples(index=False)]
    steps = [("ours", "serial"), ("ours", "ilp2"), ("ours", "norm_broadcast"), seeds.TORCH]
    old = {v: rng.uniform(0.1, 1) for _, v in steps}
    new = {v: rng.uniform(0.1, 1) for _, v in steps}
    records.append("h200", "kmeans_assign", run_rows("2026-01-01T00:00:00Z", "aaaaaaa", shapes, steps,
                                                     lambda k, v: old[v]), root=tmp_path)
    records.append("h200", "kmeans_assign", run_rows("2026-01-02T00:00:00Z", "bbbbbbb", shapes, steps,
                                                     lambda k, v: new[v]), root=tmp_path)
    # a later run of two shapes only: it must not be mixed in
    records.append("h200", "kmeans_assign", run_rows("2026-01-03T00:00:00Z", "ccccccc", shapes[:2], steps,
                                                     lambda k, v: 1e-3), root=tmp_path)
    measured = records.read("h200", "kmeans_assign", root=tmp_path)
    step = seeds.ours_step(measured)
    assert len(step) == 13 and set(step.commit) == {"bbbbbbb"}
    for r in step.itertuples():
        assert r.serial_ms == new["serial"] and r.step_ms == new[r.step]
        assert r.improvement_pct == pytest.approx((new["serial"] / new[r.step] - 1) * 100)
    series, run = seeds.ours_latencies(measured)
    assert set(run.commit) == {"bbbbbbb"} and series["torch matmul + argmin"] == [new["matmul_argmin"]] * 13


def test_without_a_complete_run_there_is_nothing_to_show(tmp_path):
    assert seeds.ours_step(records.read("h200", "kmeans_assign", root=tmp_path)).empty
    assert seeds.ours_latencies(records.read("h200", "kmeans_assign", root=tmp_path))[0] == {}


def test_the_geomean_exercise_checker():
    right = seeds.main_geomean_improvement().recomputed
    assert seeds.check_geomean(right).startswith("Right") and seeds.check_geomean(None).startswith("Not answered")
    assert "arithmetic mean" in seeds.check_geomean(seeds.main_table().improvement_pct.mean())
    assert "subtract 1" in seeds.check_geomean(1 + right / 100)
    assert seeds.check_geomean(right + 0.5).startswith("Not this one") and "one number" in seeds.check_geomean("x")

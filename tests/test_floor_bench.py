"""kmeans_kernels.floor_bench: its rows (through workbook.timing.compare's CPU path), the floor tables of synthetic
runs (geomean x-floor and its interval, slower-than-flashlib by interval, the large shapes), and on an H200
(`-m gpu`) a tiny run."""
import random
import statistics

import numpy as np
import pandas as pd
import pytest
import torch

from kmeans_kernels import floor, floor_bench, reference
from workbook import gpus, records, timing

gpu = pytest.mark.gpu
CUTE, TRITON = "flashlib/cute", "flashlib/triton"
NEW, OLD = "2026-12-02T00:00:00Z", "2026-11-01T00:00:00Z"


def cpu_sets(N=256, D=16, K=8, seeds=(1, 2, 3)):
    sets = []
    for seed in seeds:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(N, D, generator=g).to(torch.bfloat16)
        c = torch.randn(K, D, generator=g).to(torch.bfloat16)
        sets.append((x, c, reference.centroid_norms(c)))
    return sets


def fake_measure(times, N=256, D=16, K=8, rounds=10, noise=0.02):
    """floor_bench.measure on a fake clock: each contender's call takes its x-floor in `times` x the floor (times a
    seeded +-noise) and returns the reference's ids."""
    sets = cpu_sets(N, D, K)
    f = floor.floor(N, D, K).ms
    state = {"now": 0.0, "rng": random.Random(5)}

    def contender(x_floor):
        def call(x, c, c_sq):
            state["now"] += x_floor * f * (1 + state["rng"].uniform(-noise, noise)) / 1e3
            return reference.assign(x, c, c_sq)
        return call
    return floor_bench.measure({n: contender(v) for n, v in times.items()}, sets, rounds=rounds, calls=2, warmup=1,
                               clock=lambda: state["now"])


FAKE = {"ours/auto": 2.0, "ours/lean_select": 1.8, "ours/norm_broadcast": 2.0, CUTE: 2.5, TRITON: 3.0}


def test_measured_rows_carry_the_floor_ratios_and_rounds():
    frame = fake_measure(FAKE)
    for col in ("timing", "floor_ms", "bound", "x_floor", "x_floor_lo", "x_floor_hi", "per_round_ms", "ratio",
                "ratio_lo", "ratio_hi", "ratio_flashlib", "ratio_flashlib_lo", "ratio_flashlib_hi",
                "ratio_flashlib_triton", "ratio_flashlib_triton_lo", "ratio_flashlib_triton_hi"):
        assert col in frame, col
    assert set(frame.timing) == {"kernel", "latency"} and set(frame.vs) == {"ours/auto"}
    assert (frame.floor_ms == floor.floor(256, 16, 8).ms).all() and (frame.match_rate == 1.0).all()
    names = frame.kernel + "/" + frame.variant
    for name, want in FAKE.items():
        rows = frame[names == name]
        assert rows.x_floor.tolist() == pytest.approx([want] * 2, rel=0.02)
        assert ((rows.x_floor_lo <= rows.x_floor) & (rows.x_floor <= rows.x_floor_hi)).all()
        assert rows.ratio_flashlib.tolist() == pytest.approx([want / 2.5] * 2, rel=0.03)
        assert all(len(r.split()) == 10 for r in rows.per_round_ms)
    kernel = frame[(names == "ours/auto") & (frame.timing == "kernel")].iloc[0]
    assert kernel.x_floor == pytest.approx(kernel.ms_median / kernel.floor_ms)        # one sample per round


def test_a_contender_that_refuses_the_shape_is_left_out_of_it(capsys):
    sets = cpu_sets()

    def refuses(x, c, c_sq):
        raise ValueError("its ring cannot hold this D")
    fns = {"ours/auto": lambda x, c, c_sq: reference.assign(x, c, c_sq), "ours/lean_ping_pong": refuses}
    frame = floor_bench.measure(fns, sets, rounds=2, calls=1, warmup=0)
    assert set(frame.kernel + "/" + frame.variant) == {"ours/auto"}
    assert "ours/lean_ping_pong refuses 256x16x8: its ring cannot hold this D" in capsys.readouterr().out


def test_rows_survive_the_table_and_give_the_tables(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "_static_provenance", lambda: (("gpu", "NVIDIA H200"), ("sm_count", 132),
                                                                 ("driver", ""), ("torch", ""), ("cutlass_dsl", "")))
    frame = fake_measure(FAKE)
    records.append("h200", floor_bench.TABLE, frame, root=tmp_path)
    back = records.read("h200", floor_bench.TABLE, root=tmp_path)
    table = floor_bench.floor_table(back)
    assert table.loc[("ours/auto", "kernel"), "x floor"] == pytest.approx(2.0, rel=0.02)
    assert table.loc[("ours/lean_select", "latency"), f"x {CUTE}"] == pytest.approx(1.8 / 2.5, rel=0.03)
    assert table.loc[("ours/auto", "kernel"), f"slower than {CUTE} at"] == ""
    assert pd.isna(table.loc[(CUTE, "kernel"), f"x {CUTE}"])              # flashlib is not compared with itself
    shapes = floor_bench.shape_table(back)
    assert list(shapes.index) == [(256, 16, 8, "kernel"), (256, 16, 8, "latency")]
    assert set(shapes.verdict) == {"faster"} and shapes.attrs["against"] == CUTE
    text = floor_bench.report(back, source="test")
    assert "256x16x8" in text and "x flashlib/cute" in text and "slower at: none" in text


def row(name, t, N, D, K, x_floors, date=NEW):
    """A recorded row whose rounds took `x_floors` x the shape's floor."""
    f = floor.floor(N, D, K)
    ms = [v * f.ms for v in x_floors]
    kernel, variant = name.split("/")
    return dict(kernel=kernel, variant=variant, timing=t, N=N, D=D, K=K, ms_median=statistics.median(ms),
                ms_min=min(ms), ms_max=max(ms), ms_lo=min(ms), ms_hi=max(ms), floor_ms=f.ms, bound=f.bound,
                per_round_ms=" ".join(f"{v:.9g}" for v in ms), date=date, commit="abc1234", gpu="NVIDIA H200")


def test_the_geomean_x_floor_and_its_interval():
    A, B = (65536, 128, 4096), (262144, 256, 4096)
    steady = pd.DataFrame([row("ours/auto", "kernel", *A, [2.0] * 8), row("ours/auto", "kernel", *B, [8.0] * 8),
                           row("ours/auto", "kernel", *A, [1.0] * 8, date=OLD)])
    t = floor_bench.floor_table(steady).loc[("ours/auto", "kernel")]
    assert (t["x floor"], t["x floor lo"], t["x floor hi"]) == pytest.approx((4.0, 4.0, 4.0))  # not 5, nor 2 or 8
    assert t["shapes"] == 2 and t["geomean ms"] == pytest.approx(
        timing.geomean([2 * floor.floor(*A).ms, 8 * floor.floor(*B).ms]))
    rng = np.random.default_rng(0)
    noisy = pd.DataFrame([row("ours/auto", "kernel", *A, 2.0 * rng.uniform(0.9, 1.1, 12)),
                          row("ours/auto", "kernel", *B, 8.0 * rng.uniform(0.9, 1.1, 12))])
    t = floor_bench.floor_table(noisy).loc[("ours/auto", "kernel")]
    assert t["x floor lo"] < t["x floor"] < t["x floor hi"] and t["x floor"] == pytest.approx(4.0, rel=0.1)
    per_shape = [floor_bench._x_floor(r) for r in floor_bench.newest_run(noisy).itertuples(index=False)]
    assert t["x floor hi"] - t["x floor lo"] < max(r.hi - r.lo for r in per_shape) * 4   # shapes' noise averages


def test_slower_than_flashlib_by_interval_and_the_large_shapes():
    rng = np.random.default_rng(1)
    jitter = lambda v: v * rng.uniform(0.98, 1.02, 10)  # noqa: E731
    shapes = {(65536, 64, 16384): (1.4, 1.2),      # large: slower than flashlib by its whole interval
              (1048576, 128, 4096): (1.5, 1.5),    # large, the worst of them: level with flashlib (noise)
              (65536, 128, 512): (6.0, 9.0),       # not large (N*K < 2^30): the worst x floor, but not counted
              (262144, 256, 4096): (1.1, 1.3)}     # D = 256: not among the large D = 64 / 128 shapes
    rows = []
    for (N, D, K), (ours, theirs) in shapes.items():
        rows.append(row("ours/auto", "kernel", N, D, K, jitter(ours)))
        rows.append(row(CUTE, "kernel", N, D, K, jitter(theirs)))
    t = floor_bench.floor_table(pd.DataFrame(rows)).loc[("ours/auto", "kernel")]
    assert t[f"slower than {CUTE} at"] == "65536x64x16384"
    assert t["large worst at"] == "1048576x128x4096" and t["large worst x floor"] == pytest.approx(1.5, rel=0.02)
    assert t["large worst lo"] <= t["large worst x floor"] <= t["large worst hi"]
    want = timing.geomean([1.4 / 1.2, 1.0, 6.0 / 9.0, 1.1 / 1.3])
    assert t[f"x {CUTE}"] == pytest.approx(want, rel=0.02) and t[f"x {CUTE} lo"] < want < t[f"x {CUTE} hi"]
    s = floor_bench.shape_table(pd.DataFrame(rows))
    assert s.loc[(65536, 64, 16384, "kernel"), "verdict"] == "slower"
    assert s.loc[(65536, 128, 512, "kernel"), "verdict"] == "faster"
    g = floor_bench.goals(floor_bench.floor_table(pd.DataFrame(rows))).set_index("goal")
    assert list(g.met) == [False, False, False]          # x floor 1.73 > 1.35; large worst 1.5 > 1.3; one slower
    assert g.loc[f"kernel, at least as fast as {CUTE} at every shape", "measured"] == "slower at 65536x64x16384"
    fast = pd.DataFrame([row("ours/auto", t, 1048576, 128, 4096, jitter(1.2)) for t in ("kernel", "latency")])
    g = floor_bench.goals(floor_bench.floor_table(fast)).set_index("goal")
    assert g.met.tolist() == [True, True, True, True]     # 1.2 [1.18, 1.22]: within 1.35, 1.6 and 1.3
    assert g.index[0] == "kernel, geomean <= 1.35x the floor"


def test_tables_of_nothing_and_bad_rounds():
    empty = records.read("h200", "no_such_table_here")
    assert floor_bench.floor_table(empty).empty and floor_bench.shape_table(empty).empty
    assert "no run recorded" in floor_bench.report(empty, source="x")
    bad = pd.DataFrame([row("ours/auto", "kernel", 65536, 128, 4096, [2.0] * 4)]).assign(per_round_ms="1 -2")
    with pytest.raises(ValueError, match="per_round_ms"):
        floor_bench.floor_table(bad)


def test_without_an_h200_it_says_so(capsys, monkeypatch):
    spec = gpus.current()
    if spec is not None and spec.key == "h200":
        pytest.skip("an H200 is here: the bench would run")
    assert floor_bench.main(["--quick", "--no-record"]) == 2
    assert "kmeans_floor.csv" in capsys.readouterr().out
    monkeypatch.setattr(floor_bench.records, "read", lambda gpu, table: pd.DataFrame(
        [row("ours/auto", t, 65536, 128, 4096, [2.0] * 4) for t in ("kernel", "latency")]))
    assert floor_bench.main(["--table"]) == 0
    assert "65536x128x4096" in capsys.readouterr().out


@gpu
def test_a_tiny_run_on_the_h200(capsys):
    spec = gpus.current()
    if spec is None or spec.key != "h200":
        pytest.skip("needs an H200 (the floor model's GPU)")
    assert floor_bench.main(["--shapes", "65536,128,512", "--rounds", "3", "--calls", "2", "--no-record",
                             "--no-flashlib-autotune"]) == 0
    out = capsys.readouterr().out
    assert "65536x128x512" in out and "ours/auto" in out and "match rate below 1" not in out

"""The shape explorer's logic (workbook.explore), without widgets and without a GPU.

The explorer takes the kernel packages' knowledge as injected callables; here they are wired to the real
planner (gemm_kernels.waves) with a small, test-only set of variant names.
"""
import math
import random
import tempfile

import matplotlib
import pandas as pd
import pytest
import torch

matplotlib.use("Agg")

from gemm_kernels import waves  # noqa: E402
from workbook import DATA, explore, gpus, records  # noqa: E402

rng = random.Random()   # fresh shapes every run; a failing assert shows the shape it drew
VARIANTS = {"kmeans": ["serial", "ilp2", "torch matmul_argmin"], "gemm": ["uniform", "balanced", "torch.matmul"]}
TILES = {"sm_100a": (256, (256, 224, 192)), "sm_90a": (128, (256, 192))}


def plan(kind, shape, gpu, variant):
    if variant.startswith("torch"):
        return None
    if kind == "kmeans":
        n, d, k = shape
        return waves.plan(n, k, gpu=gpu, tile_m=128, tile_ns=(k,), balanced=False, slots=gpu.sm_count)
    m, n, k = shape
    tile_m, tile_ns = TILES[gpu.arch]
    return waves.plan(m, n, gpu=gpu, tile_m=tile_m, tile_ns=tile_ns, balanced=variant == "balanced")


def check_d(shape, gpu):
    if shape[1] % 16:
        raise ValueError(f"D={shape[1]} is not a multiple of 16")


# the model's tests must not depend on what data/measured/ holds today: by default an empty records folder
NO_RECORDS = tempfile.mkdtemp(prefix="no_records_")


def make_explorer(**kw):
    kw.setdefault("records_root", NO_RECORDS)
    return explore.Explorer(variants=lambda kind, gpu: VARIANTS[kind],
                            planners={k: (lambda s, g, v, k=k: plan(k, s, g, v)) for k in VARIANTS},
                            checks={"kmeans": check_d}, **kw)


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    """Every test sees a machine without a GPU unless it says otherwise."""
    monkeypatch.setattr(gpus, "current", lambda device=None: None)


def random_shape(kind):
    if kind == "kmeans":
        return (rng.randint(1, 1 << 20), 16 * rng.randint(1, 32), rng.randint(1, 1 << 15))
    return tuple(rng.choice([256, 512]) * rng.randint(1, 64) for _ in range(3))


# ------------------------------------------------------------------------------------------------ problems

@pytest.mark.parametrize("kind", ["kmeans", "gemm"])
def test_flops_and_bytes_count_the_real_tensors(kind):
    a, b, c = shape = random_shape(kind)
    p = explore.problem(kind, shape)
    bf16 = dict(dtype=torch.bfloat16, device="meta")
    if kind == "kmeans":   # x [N, D], c [K, D] in; ids [N] int32 out; the K fp32 norms
        tensors = [torch.empty(a, b, **bf16), torch.empty(c, b, **bf16), torch.empty(a, dtype=torch.int32, device="meta"),
                   torch.empty(c, dtype=torch.float32, device="meta")]
        flops = 2 * a * c * b      # the N x K scores, each a D-long dot product
    else:                  # A [M, K] @ B [K, N] -> C [M, N]
        tensors = [torch.empty(a, c, **bf16), torch.empty(c, b, **bf16), torch.empty(a, b, **bf16)]
        flops = 2 * a * b * c
    assert p.nbytes == sum(t.nbytes for t in tensors), shape
    assert p.flops == flops, shape


@pytest.mark.parametrize("kind, shape, words", [
    ("kmeans", (0, 16, 4), "N must be a positive integer"),
    ("kmeans", (8, -16, 4), "D must be"),
    ("gemm", (8, 8, 2.5), "K must be"),
    ("gemm", (True, 8, 8), "M must be"),
    ("gemm", ("8", 8, 8), "M must be"),
    ("gemm", (8, 8), "(M, N, K)"),
    ("conv", (8, 8, 8), "kind must be"),
    ("gemm", (1 << 16, 1 << 16, 1 << 16), "32-bit indexing"),
])
def test_a_non_shape_is_a_value_error_that_says_why(kind, shape, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        explore.problem(kind, shape)


# ------------------------------------------------------------------------------------------------ the model

@pytest.mark.parametrize("gpu", ["b200", "h200"])
def test_prediction_respects_the_roofline_and_balancing_never_predicts_slower(gpu):
    ex = make_explorer()
    for _ in range(5):
        shape = random_shape("gemm")
        result = ex.explore("gemm", shape, gpu)
        rows = {r.variant: r for r in result.rows}
        for r in rows.values():
            if r.predicted_ms is not None:
                assert r.predicted_ms >= result.roofline.ms * (1 - 1e-12), (shape, r)
                # the stretch is exactly the plan's wave efficiency whenever the math term dominates
                if result.roofline.bound == "compute":
                    assert math.isclose(r.predicted_ms * r.efficiency, result.roofline.compute_ms, rel_tol=1e-9)
        assert rows["balanced"].predicted_ms <= rows["uniform"].predicted_ms * (1 + 1e-12), shape
        assert rows["torch.matmul"].predicted_ms is None


def test_seed_004_wave_tail_on_b200():
    """4096^3 in 256 x 256 tiles on 74 CTA pairs: 3.46 waves; balancing fills the last wave (seed 004)."""
    result = make_explorer().explore("gemm", (4096, 4096, 4096), "b200")
    uniform, balanced = result.plans["uniform"], result.plans["balanced"]
    assert (len(uniform.items), uniform.slots, round(uniform.waves, 2)) == (256, 74, 3.46)
    assert len(balanced.items) % 74 == 0 and balanced.efficiency > uniform.efficiency


def test_model_ties_have_no_winner_and_say_so():
    """serial and ilp2 tile identically: the model cannot rank them, so no winner is claimed."""
    result = make_explorer().explore("kmeans", (65536, 128, 4096), "h200", ["serial", "ilp2"])
    assert result.winner is None
    assert "No single winner" in result.summary() and "No GPU here" in result.summary()


# ------------------------------------------------------------------------------------------- measurements

def test_recorded_rows_of_exactly_this_shape_decide_the_winner(tmp_path):
    shape = random_shape("kmeans")
    other = (shape[0] + 1, shape[1], shape[2])
    ms = {v: rng.uniform(0.01, 5.0) for v in ("serial", "ilp2")}
    prov = dict(gpu="NVIDIA H200", sm_count=132, driver="999.1", torch="t", cutlass_dsl="4.8.1",
                commit="c0ffee1", date="2026-01-01T00:00:00Z")

    def row(kernel, variant, s, t):
        return dict(kernel=kernel, variant=variant, N=s[0], D=s[1], K=s[2], ms_median=t, ms_min=t, ms_max=t,
                    tflops=1.0, match_rate=1.0, **prov)

    records.append("h200", "kmeans_assign", [
        row("ours", "serial", shape, ms["serial"]), row("ours", "ilp2", shape, ms["ilp2"]),
        row("torch", "matmul_argmin", shape, 10.0),
        row("ours", "serial", other, 1e-6),          # another shape: must not be picked up
    ], root=tmp_path)
    result = make_explorer(records_root=tmp_path).explore("kmeans", shape, "h200")
    rows = {r.variant: r for r in result.rows}
    assert rows["serial"].recorded_ms == ms["serial"] and rows["ilp2"].recorded_ms == ms["ilp2"]
    assert rows["torch matmul_argmin"].recorded_ms == 10.0
    assert result.winner == min(ms, key=ms.get) and result.winner_basis == "recorded measurement"
    assert "kmeans_assign.csv" in rows["serial"].recorded_source and "c0ffee1" in rows["serial"].recorded_source
    table = result.table()
    assert list(table["variant"]) == ["serial", "ilp2", "torch matmul_argmin"]


def test_live_timings_win_over_recorded_ones(monkeypatch):
    monkeypatch.setattr(gpus, "current", lambda device=None: gpus.H200)
    live = {v: rng.uniform(0.01, 1.0) for v in VARIANTS["gemm"]}
    calls = []

    def measure(kind, shape, variant):
        calls.append(variant)
        return live[variant]

    result = make_explorer(measure=measure).explore("gemm", (8192, 8192, 8192), "h200")
    assert sorted(calls) == sorted(VARIANTS["gemm"])
    assert result.winner == min(live, key=live.get) and result.winner_basis == "measured live on this GPU"
    # a B200 question on an H200 machine runs nothing live
    calls.clear()
    assert make_explorer(measure=measure).explore("gemm", (8192, 8192, 8192), "b200").winner_basis != \
        "measured live on this GPU" and not calls


def test_b200_brings_the_seed_prs_numbers_labelled_as_theirs():
    seed = pd.read_csv(DATA / "pr" / "gemm_sol_final.csv").set_index("size")
    size = rng.choice(list(seed.index))
    result = make_explorer().explore("gemm", (size,) * 3, "b200")
    rows = {r.variant: r for r in result.rows}
    assert rows["cuBLASLt top-8"].recorded_ms == pytest.approx(seed.loc[size, "cublaslt_top8_us"] / 1e3)
    assert "seed 004" in rows["cuBLASLt top-8"].recorded_source
    nightly = pd.read_csv(DATA / "pr" / "kmeans_pr22_nightly.csv").sample(1, random_state=rng.randrange(1 << 30))
    n, d, k = (int(nightly[c].iloc[0]) for c in "NDK")
    result = make_explorer().explore("kmeans", (n, d, k), "b200")
    recorded = sorted(r.recorded_ms for r in result.rows if r.recorded_ms is not None)
    assert recorded == sorted([nightly["pr_ms"].iloc[0], nightly["nightly_ms"].iloc[0]])
    assert all(r.recorded_ms is None for r in make_explorer().explore("kmeans", (n, d, k), "h200").rows)


def test_refused_shapes_and_unknown_variants_are_value_errors():
    ex = make_explorer()
    with pytest.raises(ValueError, match="multiple of 16"):
        ex.explore("kmeans", (1024, 100, 64), "h200")
    with pytest.raises(ValueError, match="unknown gemm variant"):
        ex.explore("gemm", (1024, 1024, 1024), "h200", ["uniform", "7-stage-typo"])
    with pytest.raises(ValueError, match="unknown GPU"):
        ex.explore("gemm", (1024, 1024, 1024), "a100")


# ----------------------------------------------------------------------------------------- figure and UI

def test_figure_draws_one_occupancy_panel_per_distinct_tiling():
    import matplotlib.pyplot as plt
    ex = make_explorer()
    gemm = explore.figure(ex.explore("gemm", (4096, 4096, 4096), "b200"))     # uniform != balanced
    kmeans = explore.figure(ex.explore("kmeans", (65536, 128, 4096), "b200"))  # serial == ilp2
    try:
        assert len(gemm.axes) == 3 and len(kmeans.axes) == 2
        assert "CTA pair" in gemm.axes[0].get_xlabel() and "SM" in kmeans.axes[0].get_xlabel()
    finally:
        plt.close(gemm)
        plt.close(kmeans)


def test_ui_shows_a_message_not_a_traceback(capsys):
    ui = explore.build_ui(make_explorer())
    kind, dims, (_gpu, variants, go) = ui.children[0], ui.children[1].children, ui.children[2].children
    assert kind.value == "kmeans" and list(variants.options) == VARIANTS["kmeans"]
    dims[1].value = 100                                   # D not a multiple of 16
    go.click()
    assert "Cannot explore this: D=100" in capsys.readouterr().out
    kind.value = "gemm"
    assert list(variants.options) == VARIANTS["gemm"] and [d.description for d in dims] == ["M", "N", "K"]

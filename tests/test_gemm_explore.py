"""gemm_kernels.explore: the GEMM problem as the explorer sees it, through the kernels' own work lists."""
from __future__ import annotations

import math
import random

import pytest
import torch

from gemm_kernels import configs, hopper_options, seeds
from gemm_kernels.explore import BASELINE, GEMM
from workbook import explore, gpus

rng = random.Random()
H200, B200 = gpus.H200, gpus.B200


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    monkeypatch.setattr(gpus, "current", lambda device=None: None)


def random_shape():
    return tuple(rng.choice([256, 512]) * rng.randint(1, 48) for _ in range(3))


def test_it_is_an_explorer_problem_with_the_benchmarks_configurations():
    assert isinstance(GEMM, explore.Problem) and [d.name for d in GEMM.dims] == ["M", "N", "K"]
    assert GEMM.configurations(H200) == [*configs.HOPPER, BASELINE]
    assert GEMM.configurations(B200) == [*configs.BLACKWELL, BASELINE]


def test_flops_and_bytes_count_the_real_tensors():
    m, n, k = random_shape()
    meta = dict(dtype=torch.bfloat16, device="meta")
    tensors = [torch.empty(m, k, **meta), torch.empty(k, n, **meta), torch.empty(m, n, **meta)]
    assert GEMM.nbytes((m, n, k)) == sum(t.nbytes for t in tensors) and GEMM.flops((m, n, k)) == 2 * m * n * k


def test_each_configuration_is_planned_as_it_runs():
    M, N, K = random_shape()
    for name, options in configs.HOPPER.items():
        w = GEMM.waves((M, N, K), H200, name)
        cluster = options.cluster_size
        tile_n = options.tile_n
        # a 2-CTA cluster is one slot of a 256-row (or 2 tile_n-column) item: 66 of them on the H200, not 132
        assert w.slots == (H200.cluster_pairs if cluster == 2 else H200.sm_count), name
        assert w.item_flops == 2 * 128 * cluster * tile_n * math.ceil(K / 64) * 64, name
        plan = hopper_options.plan_for(M, N, options, H200)
        assert w.items == len(plan.items), name


def test_balancing_never_predicts_slower_and_the_tilings_differ():
    ex = explore.Explorer(GEMM)
    for _ in range(5):
        shape = random_shape()
        by = {r.name: r for r in ex.explore(shape, "h200").rows}
        for uniform, balanced in (("128x256x64 s4 register uniform", "128x256x64 s4 register balanced"),
                                  ("128x256x64 s4 register uniform cluster2",
                                   "128x256x64 s4 register balanced cluster2")):
            assert by[balanced].predicted_ms <= by[uniform].predicted_ms * (1 + 1e-12), shape
        assert by[BASELINE].predicted_ms is None
    by = {r.name: r for r in ex.explore((4096, 4096, 4096), "h200").rows}
    assert len({round(r.predicted_ms, 12) for r in by.values() if r.predicted_ms}) >= 3


def test_seed_004s_wave_tail_on_b200():
    """4096^3 in 256 x 256 tiles on 74 CTA pairs: 3.46 waves; the balanced plan fills the last wave."""
    names = list(configs.BLACKWELL)
    uniform, balanced = (GEMM.waves((4096,) * 3, B200, n) for n in (names[1], names[2]))
    assert (uniform.items, uniform.slots, round(uniform.waves, 2), uniform.makespan) == (256, 74, 3.46, 4.0)
    assert balanced.items == 296 and balanced.makespan < uniform.makespan and balanced.slot == "CTA pair"


def test_stream_k_spreads_the_tail_over_every_slot():
    name = "128x256x64 s4 deferred register uniform cluster2 stream-k"
    uniform = GEMM.waves((4096, 4096, 4096), H200, "128x256x64 s4 register uniform cluster2")
    split = GEMM.waves((4096, 4096, 4096), H200, name)
    assert split.items == uniform.items and split.busy == uniform.busy
    full_waves = uniform.items // uniform.slots
    tail = uniform.items % uniform.slots
    assert full_waves < split.makespan < uniform.makespan
    assert split.makespan == pytest.approx(full_waves + math.ceil(tail * 64 / uniform.slots) / 64, abs=1 / 64)
    rows = split.gantt()
    assert len(rows) == split.slots and max(s + d for r in rows for s, d, _ in r) == pytest.approx(split.makespan)


@pytest.mark.parametrize("gpu, shape, words", [("b200", (4096, 4004, 4096), "multiple of 8"),
                                               ("h200", (4096, 4096, 4100), "multiples of 8"),
                                               ("h200", (1 << 16, 1 << 16, 1 << 16), "32-bit indexing")])
def test_shapes_the_kernels_refuse_are_value_errors(gpu, shape, words):
    with pytest.raises(ValueError, match=words):
        GEMM.check(shape, gpus.get(gpu))


def test_b200_cubes_bring_seed_004s_numbers_labelled_as_theirs():
    t = seeds.gemm_table().set_index("size")
    size = rng.choice(list(t.index))
    refs = {r.name: r for r in GEMM.references((size,) * 3, B200)}
    assert refs["cuBLASLt top-8"].ms == pytest.approx(t.loc[size, "cublaslt_top8_us"] / 1e3)
    assert all(seeds.SEED_GEMM in r.source for r in refs.values())
    assert GEMM.references((size,) * 3, H200) == [] and GEMM.references((size, size, 2 * size), B200) == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_live_timings_on_this_gpu(monkeypatch):
    """On an H200 (or B200) a configuration of ours and the baseline are timed now, by the bench's method (two,
    to keep the GPU time short: every configuration's own correctness and timing are the bench's job)."""
    monkeypatch.undo()                                  # the real gpus.current
    here = gpus.current()
    if here is None or here.key not in GEMM.gpus:
        pytest.skip(f"no kernels for this GPU ({here})")
    chosen = [configs.HOPPER_DEFAULT, BASELINE] if here.key == "h200" else None
    result = explore.Explorer(GEMM).explore((4096, 4096, 4096), here.key, chosen)
    timed = {r.name: r.live_ms for r in result.rows if r.origin in ("ours", "baseline")}
    assert timed and all(ms is not None and 0 < ms < 1e3 for ms in timed.values()), timed
    assert result.winner_basis == "measured live on this GPU"

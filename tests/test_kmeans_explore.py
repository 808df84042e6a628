"""kmeans_kernels.explore: the k-means problem as the explorer sees it, with the kernels' real CTAs per SM and
tile widths (no GPU)."""
from __future__ import annotations

import math
import random

import pytest
import torch

import kmeans_kernels
from kmeans_kernels import blackwell, hopper, seeds
from kmeans_kernels.explore import BASELINE, KMEANS
from workbook import explore, gpus

rng = random.Random()
H200, B200 = gpus.H200, gpus.B200


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    monkeypatch.setattr(gpus, "current", lambda device=None: None)


def waves(shape, gpu, name):
    return KMEANS.waves(shape, gpu, name)


def test_it_is_an_explorer_problem_with_the_backends_configurations():
    assert isinstance(KMEANS, explore.Problem) and [d.name for d in KMEANS.dims] == ["N", "D", "K"]
    assert KMEANS.configurations(H200) == [*hopper.VARIANTS, "auto", BASELINE]
    assert KMEANS.configurations(B200) == [*blackwell.VARIANTS, "auto", BASELINE]
    assert KMEANS.dims[1].multiple == kmeans_kernels.D_MULTIPLE and KMEANS.dims[1].high == kmeans_kernels.D_MAX


def test_flops_and_bytes_count_the_real_tensors():
    n, d, k = rng.randint(1, 1 << 20), 16 * rng.randint(1, 32), rng.randint(1, 1 << 15)
    meta = dict(device="meta")
    tensors = [torch.empty(n, d, dtype=torch.bfloat16, **meta), torch.empty(k, d, dtype=torch.bfloat16, **meta),
               torch.empty(n, dtype=torch.int32, **meta), torch.empty(k, dtype=torch.float32, **meta)]
    assert KMEANS.nbytes((n, d, k)) == sum(t.nbytes for t in tensors)
    assert KMEANS.flops((n, d, k)) == 2 * n * k * d


def test_hopper_runs_two_ctas_per_sm_up_to_d_256_except_wide():
    for D in (16, 64, 128, 256):
        for name in ("serial", "ilp2", "norm_broadcast"):
            assert waves((65536, D, 4096), H200, name).slots == 2 * H200.sm_count, (D, name)
        assert waves((65536, D, 4096), H200, "wide").slots == H200.sm_count
    for D in (272, 384, 512):
        assert {waves((65536, D, 4096), H200, v).slots for v in hopper.VARIANTS} == {H200.sm_count}, D
    # the same numbers the kernel launches with
    assert hopper.ctas_per_sm(128) == 2 and hopper.ctas_per_sm(128, hopper.WIDE_BLOCK_N) == 1


def test_an_item_is_128_points_with_k_and_d_padded_to_whole_tiles():
    N, D, K = 128 * rng.randint(1, 4000) - rng.randint(0, 127), 16 * rng.randint(1, 32), rng.randint(1, 20000)
    d_pad = math.ceil(D / 64) * 64
    for name, width in (("norm_broadcast", 128), ("wide", 256)):
        w = waves((N, D, K), H200, name)
        assert w.items == math.ceil(N / 128)
        assert w.item_flops == 2 * 128 * math.ceil(K / width) * width * d_pad, (N, D, K, name)


def test_the_model_tells_wide_from_norm_broadcast_where_their_tilings_differ():
    ex = explore.Explorer(KMEANS)
    # 300 CTAs: two waves of 264 slots (half empty) or three of 132 (full): wide's tail is shorter
    by = {r.name: r for r in ex.explore((128 * 300, 128, 4096), "h200", ["norm_broadcast", "wide"]).rows}
    assert by["wide"].predicted_ms < by["norm_broadcast"].predicted_ms
    # K = 384: a 256-wide tile pads 384 centroids to 512, a 128-wide one not at all
    by = {r.name: r for r in ex.explore((128 * 264, 128, 384), "h200", ["norm_broadcast", "wide"]).rows}
    assert by["wide"].predicted_ms > by["norm_broadcast"].predicted_ms
    # the serial and ilp2 scans differ inside an item only: predicted alike, and the summary says why
    result = ex.explore((65536, 128, 4096), "h200", ["serial", "ilp2"])
    assert result.rows[0].predicted_ms == result.rows[1].predicted_ms and "tile alike" in result.summary()


def test_auto_is_modelled_as_the_variant_it_picks():
    for shape in [(65536, 128, 4096), (65536, 256, 4096), (65536, 256, 512), (65536, 64, 512)]:
        for gpu in (H200, B200):
            picked = kmeans_kernels.backend(gpu.arch).auto_variant(*shape)
            assert waves(shape, gpu, "auto") == waves(shape, gpu, picked), (shape, gpu.name)


def test_blackwell_x_resident_shares_an_sm_and_refuses_large_d():
    assert waves((65536, 128, 4096), B200, "x_resident").slots == 2 * B200.sm_count
    assert {waves((65536, 128, 4096), B200, v).slots for v in ("serial", "ilp2", "norm_broadcast")} == {148}
    result = explore.Explorer(KMEANS).explore((65536, 384, 4096), "b200")
    assert "x_resident" not in [r.name for r in result.rows]
    assert any("x_resident left out" in n and str(blackwell.X_RESIDENT_MAX_D) in n for n in result.notes)


def test_the_torch_baseline_is_not_modelled():
    assert waves((65536, 128, 4096), H200, BASELINE) is None


@pytest.mark.parametrize("shape, words", [((1024, 100, 64), "multiple of 16"), ((1024, 528, 64), "up to 512"),
                                          ((1 << 24, 256, 64), "32-bit indexing")])
def test_shapes_the_kernels_refuse_are_value_errors(shape, words):
    with pytest.raises(ValueError, match=words):
        KMEANS.check(shape, H200)


def test_b200_brings_the_seed_prs_numbers_labelled_as_theirs():
    row = seeds.nightly_table().sample(1, random_state=rng.randrange(1 << 30)).iloc[0]
    shape = (int(row.N), int(row.D), int(row.K))
    refs = KMEANS.references(shape, B200)
    assert sorted(r.ms for r in refs) == sorted([row.pr_ms, row.nightly_ms])
    assert all(seeds.SEED_KMEANS in r.source and "B200" in r.source for r in refs)
    assert KMEANS.references(shape, H200) == [] and KMEANS.references((12345, 128, 4096), B200) == []


def test_recorded_h200_numbers_of_a_seed_shape_come_from_one_run():
    result = explore.Explorer(KMEANS).explore((65536, 128, 4096), "h200")
    recorded = [r for r in result.rows if r.recorded_ms is not None]
    if not recorded:
        pytest.skip("data/measured/h200/kmeans_assign.csv has no row of this shape")
    assert "one run" in result.run and result.run.count("date ") == 1 and ".." not in result.run


def test_the_slots_exercise_checker():
    from kmeans_kernels.explore import check_slots
    assert check_slots(2 * H200.sm_count, H200.sm_count).startswith("Right")
    assert check_slots(None, 1).startswith("Not answered")
    assert "not alone" in check_slots(H200.sm_count, H200.sm_count)
    assert check_slots(2 * H200.sm_count, 2 * H200.sm_count).startswith("Not quite for wide")
    assert check_slots(H200.sm_count, H200.sm_count, D=384).startswith("Right")   # past D = 256: one CTA each


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_live_timings_on_this_gpu(monkeypatch):
    """On an H200 (or B200) a configuration of ours and the baseline are timed now, by the bench's method (two,
    to keep the GPU time short: every configuration's own correctness and timing are the bench's job)."""
    monkeypatch.undo()                                  # the real gpus.current
    here = gpus.current()
    if here is None or here.key not in KMEANS.gpus:
        pytest.skip(f"no kernels for this GPU ({here})")
    chosen = ["norm_broadcast", BASELINE]
    result = explore.Explorer(KMEANS).explore((65536, 128, 4096), here.key, chosen)
    timed = {r.name: r.live_ms for r in result.rows if r.origin in ("ours", "baseline")}
    assert timed and all(ms is not None and 0 < ms < 1e3 for ms in timed.values()), timed
    assert result.winner_basis == "measured live on this GPU"

"""The Hopper GEMM: what it compiles to (CPU, no GPU needed) and what it computes (GPU, marked `gpu`)."""
from __future__ import annotations

import dataclasses
import functools
import re

import pytest
import torch

from gemm_kernels import (configs, hopper_epilogue, hopper_host, hopper_options, hopper_trace, hopper_worklist, rule,
                          waves)
from workbook import gpus, sass

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
needs_hopper = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0), reason="needs an H100/H200")


@functools.lru_cache(maxsize=None)
def compiled(M, N, K, **kw):
    """One compile per configuration per test session (a compile takes seconds on a CPU)."""
    return hopper_host.compile_gemm(M, N, K, **kw)


def opcodes(art):
    return sass.histogram(art.sass)


def count(hist, prefix):
    return sum(n for op, n in hist.items() if op.startswith(prefix))


# ------------------------------------------------------------------------------------------- CPU: SASS

# the plain register epilogue (the default defers it: one more K-loop copy's worth of stores, see below)
REGISTER = dict(tile=(128, 256, 64), stages=4, epilogue="register", schedule="uniform", cluster_m=1,
                defer_epilogue=False)
STAGED = dict(tile=(128, 256, 64), stages=4, epilogue="staged", schedule="uniform", cluster_m=1)
SEVEN = dict(tile=(128, 128, 64), stages=7, epilogue="register", schedule="uniform", cluster_m=1,
             defer_epilogue=False)
CLUSTER = dict(tile=(128, 256, 64), stages=4, epilogue="register", schedule="uniform", cluster_m=2,
               defer_epilogue=False)
CLUSTER_N = dict(REGISTER, cluster_n=2)     # the pair side by side along N, sharing A
SWAPPED = dict(swap_ab=True, epilogue="staged", schedule="uniform")   # c^T = b^T a^T (`Options.swap_ab`)


@pytest.mark.parametrize("kw", [REGISTER, STAGED, SEVEN, CLUSTER], ids=["register", "staged", "7-stage", "cluster"])
def test_wgmma_and_no_spills(kw):
    hist = opcodes(compiled(4096, 4096, 4096, **kw))
    assert count(hist, f"HGMMA.64x{kw['tile'][1]}x16.F32.BF16") > 0, hist
    assert count(hist, "LDL") == 0 and count(hist, "STL") == 0, "register spills"
    assert count(hist, "UTMALDG") > 0, "operands must arrive by TMA"


# Builds whose K loops must keep WGMMAs in flight. 8192^2 balanced has a narrow width: two K-loop copies.
PIPELINED = {
    "register": (4096, REGISTER), "staged": (4096, STAGED), "cluster": (4096, CLUSTER),
    "balanced-narrow": (8192, dict(CLUSTER, schedule="balanced")),
    "deferred": (4096, dict(REGISTER, defer_epilogue=True)),
    "deferred-balanced-narrow": (8192, dict(CLUSTER, schedule="balanced", defer_epilogue=True)),
    "stream-k": (4096, dict(CLUSTER, stream_k=True)),
    "stream-k-deferred": (4096, dict(CLUSTER, stream_k=True, defer_epilogue=True)),
    # the consumers stamp a timer around each row: stamped by one lane, not a whole warp, that serialized them
    "trace": (4096, dict(CLUSTER, trace=True)),
    "trace-balanced-narrow": (8192, dict(CLUSTER, schedule="balanced", trace=True)),
    "cluster-n": (4096, CLUSTER_N),
    "cluster-n-stream-k-deferred": (4096, dict(CLUSTER_N, stream_k=True, defer_epilogue=True)),
}
# fp16 operands: the default build (deferred register epilogue, narrow width, pairs) and the staged epilogue
FP16_BUILDS = {
    "deferred-balanced-narrow": (8192, dict(CLUSTER, schedule="balanced", defer_epilogue=True, dtype=torch.float16)),
    "staged": (4096, dict(STAGED, dtype=torch.float16)),
}
PIPELINED.update({f"fp16-{name}": build for name, build in FP16_BUILDS.items()})


@pytest.mark.parametrize("name", list(PIPELINED))
def test_wgmmas_are_not_serialized(name):
    """ptxas serializes WGMMAs (warning C7511/C7515) when it cannot keep the accumulator out of other
    instructions' hands for the life of a WGMMA group: every HGMMA then gets its own WARPGROUP.DEPBAR, and
    the tensor cores idle between them (the first deferred-epilogue build ran 8-30 % slower for this). Each
    K-loop copy may wait twice: wait_group(1) in the loop and wait_group(0) after it (plus once per peeled
    K-block of a deferred epilogue)."""
    size, kw = PIPELINED[name]
    hist = opcodes(compiled(size, size, size, **kw))
    loops = 2 if kw["schedule"] == "balanced" else 1
    # a deferred epilogue peels 8 K-blocks (one per 32 columns of C) off each copy, each with the loop's wait
    waits = 2 + (256 // 32 if kw.get("defer_epilogue") else 0)
    assert count(hist, "HGMMA") >= 4 * loops, hist
    assert count(hist, "WARPGROUP.DEPBAR") == waits * loops, hist


@pytest.mark.parametrize("name", list(FP16_BUILDS))
def test_fp16_builds_multiply_and_round_in_fp16(name):
    """The fp16 build is the bf16 build with another element type: WGMMA of f16 operands into f32, the
    epilogue's conversion to f16, and nothing left of bf16 (which the kernel's name would carry too, were any
    layout or copy atom still bf16); the same instructions otherwise, and no spills."""
    size, kw = FP16_BUILDS[name]
    art = compiled(size, size, size, **kw)
    base = compiled(size, size, size, **{k: v for k, v in kw.items() if k != "dtype"})
    assert set(re.findall(r"wgmma\.mma_async\.\S*", art.ptx)) == {
        w.replace(".bf16", ".f16") for w in re.findall(r"wgmma\.mma_async\.\S*", base.ptx)}
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n256k16\.f32\.f16\.f16", art.ptx)
    assert "cvt.rn.f16x2.f32" in art.ptx and "bf16" not in art.ptx
    assert "cvt.rn.bf16x2.f32" in base.ptx                          # the check can see a bf16 conversion
    hist, ref = opcodes(art), opcodes(base)
    assert count(hist, "HGMMA.64x256x16.F32.BF16") == 0 and count(hist, "F2FP.BF16") == 0, hist
    assert count(hist, "HGMMA.64x256x16.F32") == count(ref, "HGMMA.64x256x16.F32.BF16") > 0, hist
    assert count(hist, "F2FP.F16.F32.PACK_AB") == count(ref, "F2FP.BF16.F32.PACK_AB") > 0, hist
    assert count(hist, "LDL") == count(hist, "STL") == 0, "register spills"
    assert len(sass.instructions(art.sass)) == len(sass.instructions(base.sass))


def test_dtype_is_part_of_the_compiled_config():
    """Each operand dtype compiles its own kernel: `hopper_host._launches` caches kernels on the Config."""
    bf16, _ = hopper_options.config_for(4096, 4096)
    fp16, _ = hopper_options.config_for(4096, 4096, dtype=torch.float16)
    assert bf16.dtype == torch.bfloat16 and fp16.dtype == torch.float16
    assert fp16 != bf16 and fp16 == dataclasses.replace(bf16, dtype=torch.float16)
    for bad in (torch.float32, torch.float8_e4m3fn):
        with pytest.raises(ValueError, match="bfloat16 or float16"):
            hopper_options.config_for(4096, 4096, dtype=bad)
        with pytest.raises(ValueError, match="bfloat16 or float16"):
            hopper_host.compile_gemm(4096, 4096, 4096, dtype=bad)


def test_gemm_refuses_mixed_dtypes_and_an_out_of_another_dtype(monkeypatch):
    """The dtype rules of `gemm`, on a CPU: the device checks of `check_operand` are stubbed out, so the call
    reaches the rules that tie a, b and out to one dtype (the GPU test below runs them for real)."""
    monkeypatch.setattr(hopper_host, "check_operand", lambda name, t, dtypes: None)
    a16, abf = torch.zeros(64, 64, dtype=torch.float16), torch.zeros(64, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="one dtype"):
        hopper_host.gemm(a16, abf)
    with pytest.raises(ValueError, match="one dtype"):
        hopper_host.timeline(abf, a16)
    with pytest.raises(ValueError, match="out must have the operands' dtype torch.float16"):
        hopper_host.gemm(a16, a16, out=abf)


def test_a_given_out_skips_the_named_checks_only_where_they_would_all_pass():
    """`_fits_out`, the given output's fast path: True for a plain contiguous [M, N] tensor of the dtype on the
    device, starting on 16 bytes; False for each way one check would fail (and for a subclass), so that those
    calls take the named checks. On the CPU, whose tensors report device -1."""
    M, N, bf16 = 64, 32, torch.bfloat16
    out = torch.empty(M, N, dtype=bf16)
    assert hopper_host._fits_out(out, bf16, M, N, -1)
    shifted = torch.empty(M * N + 8, dtype=bf16)[1:M * N + 1].view(M, N)      # 2 bytes past a boundary
    for bad in (out.half(), torch.empty(M, N + 8, dtype=bf16), torch.empty(N, M, dtype=bf16).t(), shifted,
                torch.nn.Parameter(out, requires_grad=False)):
        assert not hopper_host._fits_out(bad, bf16, M, N, -1), (bad.dtype, bad.shape, bad.stride(), type(bad))
    assert not hopper_host._fits_out(out, bf16, M, N, 0)


def test_register_epilogue_stores_128_bits_from_registers():
    art = compiled(4096, 4096, 4096, **REGISTER)
    hist = opcodes(art)
    assert count(hist, "STG.E.128") > 0, hist
    # every store of C is 128-bit; the one other global store is the dynamic schedule's counter reset
    assert count(hist, "STG") - count(hist, "STG.E.128") == 1, hist
    static = opcodes(compiled(4096, 4096, 4096, dynamic=False, **REGISTER))
    assert count(static, "STG") == count(static, "STG.E.128"), static
    assert count(hist, "SHFL.BFLY") > 0, "the quad transpose"
    assert count(hist, "STSM") == 0 and count(hist, "STS") == 0 and count(hist, "UTMASTG") == 0
    assert "cp.async.bulk.tensor.2d.global.shared" not in art.ptx      # no TMA store (loads are shared.global)


def test_staged_epilogue_goes_through_shared_memory_and_tma():
    art = compiled(4096, 4096, 4096, **STAGED)
    hist = opcodes(art)
    assert count(hist, "STSM") > 0, hist                       # stmatrix: registers -> shared
    assert count(hist, "UTMASTG") > 0, hist                    # TMA store: shared -> global
    assert "cp.async.bulk.tensor.2d.global.shared" in art.ptx
    assert count(hist, "STG") == count(hist, "STG.E.64") == 1     # no C from registers: only the counter reset


@pytest.mark.parametrize("cluster_m", [1, 2])
def test_dynamic_schedule_claims_items_and_hands_them_to_the_cluster(cluster_m):
    """One atomic claim per item plus one to count the cluster done; the claimed index reaches each CTA of the
    cluster by an async store into its shared memory. The static walk has neither."""
    kw = dict(REGISTER, cluster_m=cluster_m)
    dynamic, static = (opcodes(compiled(4096, 4096, 4096, dynamic=d, **kw)) for d in (True, False))
    assert count(dynamic, "ATOMG.E.ADD") >= 2 and count(dynamic, "STAS") >= cluster_m, dynamic
    assert count(static, "ATOMG") == 0 and count(static, "STAS") == 0, static


def test_cluster_multicasts_b():
    hist = opcodes(compiled(4096, 4096, 4096, **CLUSTER))
    assert count(hist, "UTMALDG.2D.MULTICAST") > 0, hist
    assert count(hist, "UTMALDG.2D") > count(hist, "UTMALDG.2D.MULTICAST"), "A stays a plain TMA load"


def test_cluster_along_n_multicasts_a_and_loads_its_own_b():
    """Along N the pair shares A: A's copy is the multicast one, B's a plain load, the reverse of cluster_m. A
    K-block of a 256-wide tile is one box of A and four of B (64-column swizzle atoms), so the loads say which
    operand is shared: one multicast per four plain loads along N, four per plain one along M."""
    def loads(kw):
        hist = opcodes(compiled(4096, 4096, 4096, **kw))
        multicast = count(hist, "UTMALDG.2D.MULTICAST")
        assert count(hist, "LDL") == 0 and count(hist, "STL") == 0, "register spills"
        return multicast, count(hist, "UTMALDG.2D") - multicast
    multicast, plain = loads(CLUSTER_N)
    assert multicast > 0 and plain == 4 * multicast, (multicast, plain)
    multicast, plain = loads(CLUSTER)
    assert plain > 0 and multicast == 4 * plain, (multicast, plain)
    multicast, plain = loads(dict(CLUSTER_N, cluster_m=2))          # 2 x 2: both operands shared
    assert multicast > 0 and plain == 0, (multicast, plain)


def test_k_block_load_bytes_count_each_ctas_share_of_what_its_cluster_shares():
    """What one CTA loads per 64-deep K-block (bf16), the figure notebook 13 compares with cuBLAS's L2 sectors."""
    def kib(**kw):
        return hopper_options.Options(tile=(128, 64, 64), schedule="uniform", **kw).k_block_load_bytes() / 1024
    assert kib(cluster_m=1) == 24 and kib(cluster_m=2) == 20 and kib(cluster_m=1, cluster_n=2) == 16
    assert kib(cluster_m=2, cluster_n=2) == 12
    assert hopper_options.Options(tile=(64, 128, 64), cluster_m=2).k_block_load_bytes(4) == 32 * 1024


def test_a_cluster_along_n_plans_double_width_uniform_items():
    for tile_n in (64, 128, 256):
        o = hopper_options.Options(tile=(128, tile_n, 64), cluster_m=1, cluster_n=2)
        plan = hopper_options.plan_for(1024, 1024, o, gpus.H200)
        assert o.cluster_size == 2 and plan.slots == gpus.H200.cluster_pairs and plan.narrow is None
        assert {t.width for t in plan.items} == {2 * tile_n}
        assert {(t.m0, t.n0) for t in plan.items} == {(m, n) for m in range(0, 1024, 128)
                                                       for n in range(0, 1024, 2 * tile_n)}
        cfg, _ = hopper_options.config_for(1024, 1024, o, gpus.H200)
        assert (cfg.tile_n, cfg.cluster_m, cfg.cluster_n, cfg.cluster_size, cfg.a_rows) == (tile_n, 1, 2, 2, None)
    o = hopper_options.Options(tile=(128, 64, 64), cluster_m=2, cluster_n=2)
    plan = hopper_options.plan_for(1024, 1024, o, gpus.H200)
    assert o.cluster_size == 4 and plan.slots == gpus.H200.cluster_quads and plan.narrow is None
    assert {(t.m0, t.n0, t.width) for t in plan.items} == {(m, n, 128) for m in range(0, 1024, 256)
                                                           for n in range(0, 1024, 128)}
    # a short M keeps the whole A box: the pair splits it between its two CTAs
    assert hopper_options.short_a_rows(16, hopper_options.Options(cluster_m=1, cluster_n=2)) is None
    assert hopper_options.short_a_rows(16, hopper_options.Options(cluster_m=1)) == 16


@pytest.mark.parametrize("kw, match", [(dict(cluster_m=4), "cluster_m"), (dict(cluster_m=1, cluster_n=3), "cluster_n"),
                                       (dict(cluster_m=1, cluster_n=2, narrow_ns=(192,)), "uniform tiles only")])
def test_a_cluster_along_n_refuses_what_it_cannot_run(kw, match):
    with pytest.raises(ValueError, match=match):
        hopper_options.Options(**kw)


def test_balanced_plan_compiles_both_tile_widths():
    plan = hopper_options.plan_for(8192, 8192, gpu=gpus.H200, schedule="balanced", cluster_m=1)
    assert plan.narrow is not None and plan.last_wave_fill == 1.0
    hist = opcodes(compiled(8192, 8192, 8192, tile=(128, 256, 64), epilogue="register", schedule="balanced",
                            cluster_m=1))
    assert count(hist, "HGMMA.64x256x16") > 0 and count(hist, f"HGMMA.64x{plan.narrow}x16") > 0, hist
    assert count(hist, "LDL") == 0 and count(hist, "STL") == 0


@pytest.mark.parametrize("schedule", ["uniform", "balanced"])
def test_mainloop_has_only_tile_wgmmas(schedule):
    """Every HGMMA is a real 64 x tile-width MMA: a compiler-made dummy group would serialise the K loop."""
    plan = hopper_options.plan_for(8192, 8192, gpu=gpus.H200, schedule=schedule, cluster_m=1)
    widths = {256} | ({plan.narrow} if plan.narrow else set())
    hist = opcodes(compiled(8192, 8192, 8192, tile=(128, 256, 64), epilogue="register", schedule=schedule,
                            cluster_m=1))
    shapes = {op.split(".")[1] for op in hist if op.startswith("HGMMA.")}
    assert shapes == {f"64x{w}x16" for w in widths}, hist


# ------------------------------------------------------------------------------------------- CPU: rules

def test_default_stage_counts_come_from_the_smem_arithmetic():
    # 128x256x64 bf16 stage = 48 KiB; 227 KiB per CTA: 4 fit with or without the 16 KiB epilogue buffers.
    assert hopper_options.stage_count((128, 256, 64), "register") == 4
    assert hopper_options.stage_count((128, 256, 64), "staged") == 4
    # 128x128x64 = 32 KiB: 7 fit with no epilogue buffer, 6 beside it.
    assert hopper_options.stage_count((128, 128, 64), "register") == 7
    assert hopper_options.stage_count((128, 128, 64), "staged") == 6


def test_quad_transpose_moves_each_lanes_column_to_it(monkeypatch):
    # Run the register epilogue's shuffle network on 4 simulated lanes at once: a "register" is a numpy
    # array of the 4 lanes' values, a butterfly shuffle reads the partner lane q ^ m.
    import numpy as np
    q = np.arange(4)
    monkeypatch.setattr(hopper_epilogue.cute.arch, "shuffle_sync_bfly", lambda x, offset: x[q ^ offset])
    monkeypatch.setattr(hopper_epilogue.cutlass, "select_", lambda c, a, b: np.where(c, a, b))
    rng = np.random.default_rng()
    W = rng.integers(0, 2**31, size=(4, 4))                # W[lane, t]: lane q starts with row q
    out = hopper_epilogue._quad_transpose([W[:, t] for t in range(4)], q)
    assert np.array_equal(np.stack(out, axis=1), W.T)      # lane q ends with column q


def test_narrow_widths_follow_the_planner_rule():
    # the register epilogue stores 8 columns per lane; the staged one whole pairs of 32-column sub-tiles
    for epilogue, step in (("register", 16), ("staged", 64)):
        for wide in (256, 128):
            for w in hopper_options.narrow_widths(wide, epilogue):
                g = w // (wide - w)
                assert w * (g + 1) == g * wide and w % step == 0
    assert hopper_options.narrow_widths(256) == (240, 224, 192, 128)
    assert hopper_options.narrow_widths(256, "staged") == (192, 128)
    assert hopper_options.narrow_widths(128) == (112, 96, 64)


def test_narrow_ns_limits_the_planners_choice():
    assert hopper_options.plan_for(8192, 8192, gpu=gpus.H200, cluster_m=1).narrow == 240
    assert hopper_options.plan_for(8192, 8192, gpu=gpus.H200, cluster_m=1, narrow_ns=(192, 128)).narrow == 192
    assert hopper_options.plan_for(8192, 8192, gpu=gpus.H200, cluster_m=1, epilogue="staged").narrow == 192
    # 4096^2 on 66 pairs: 256 tiles, 3.88 waves; only 240-wide tiles can shorten it (4 -> 3.94 rows a pair)
    assert hopper_options.plan_for(4096, 4096, gpu=gpus.H200, cluster_m=2).narrow == 240
    assert hopper_options.plan_for(4096, 4096, gpu=gpus.H200, cluster_m=2, narrow_ns=(192, 128)).narrow is None


def test_work_list_covers_the_output_once():
    M, N = 2048 + 384, 6656
    for schedule in hopper_options.SCHEDULES:
        plan = hopper_options.plan_for(M, N, gpu=gpus.H200, schedule=schedule, cluster_m=1)
        covered = torch.zeros(-(-M // 128) * 128, N + 256, dtype=torch.int32)
        for m0, n0, w in plan.items:
            assert w in (256, plan.narrow)
            covered[m0:m0 + 128, n0:n0 + w] += 1
        assert (covered[:M, :N] == 1).all()


def test_banded_order_is_a_permutation_that_keeps_the_narrow_tail():
    plan = hopper_options.plan_for(8192, 8192, gpu=gpus.H200, cluster_m=1, narrow_ns=(192,))
    items = list(plan.items)
    assert hopper_worklist.banded(items, 1) == items                     # one row per band: the planner's order
    order = hopper_worklist.banded(items, 8)
    assert sorted(order) == sorted(items) and order != items
    n_wide = sum(t.width == 256 for t in items)
    assert sorted(order[n_wide:]) == sorted(items[n_wide:])      # the narrow tail is still last ...
    assert {t.width for t in order[n_wide:]} == {192}
    tail_rows = sorted({t.m0 for t in order[n_wide:]})
    assert len(tail_rows) > 1 and [t.m0 for t in order[n_wide:n_wide + len(tail_rows)]] == tail_rows   # ... banded
    first_wave = order[:plan.slots]
    assert len({t.m0 for t in first_wave}) == 8                  # one band of 8 tile rows
    with pytest.raises(ValueError):
        hopper_worklist.banded(items, 0)


@pytest.mark.parametrize("M,N,K,kw,match", [
    (128, 128, 100, {}, "multiples of 8"),
    (128, 100, 128, {}, "multiples of 8"),
    (0, 128, 128, {}, "positive"),
    (128, 128, 128, dict(epilogue="smem"), "epilogue"),
    (128, 128, 128, dict(schedule="dynamic"), "schedule"),
    (128, 128, 128, dict(tile=(256, 256, 64)), "tile"),   # 64 or 128 rows (one or two consumer warpgroups)
    (128, 128, 128, dict(tile=(128, 96, 64)), "tile"),
    (128, 128, 128, dict(tile=(128, 256, 64), stages=5), "do not fit"),
    (128, 128, 128, dict(arch="sm_100a"), "sm_90a"),
    (128, 128, 128, dict(cluster_m=4), "cluster_m"),
    (128, 128, 128, dict(narrow_ns=(200,)), "not available"),
    (128, 128, 128, dict(epilogue="staged", narrow_ns=(224,)), "not available"),
])
def test_compile_gemm_rejects_bad_requests(M, N, K, kw, match):
    with pytest.raises(ValueError, match=match):
        hopper_host.compile_gemm(M, N, K, **kw)


def test_gemm_rejects_cpu_and_wrong_dtype():
    a = torch.zeros(64, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="CUDA"):
        hopper_host.gemm(a, a)
    with pytest.raises(ValueError, match="bfloat16"):
        hopper_host.gemm(a.float(), a.float())
    with pytest.raises(ValueError, match="torch.Tensor"):
        hopper_host.gemm([[1.0]], a)


# ------------------------------------------------------------------------------------------- CPU: options

def test_plan_for_plans_what_the_kernel_runs():
    """The default run pairs CTAs, so the default plan's slot is a pair: 66 slots of 256-row items on an
    H200, not 132 single CTAs."""
    plan = hopper_options.plan_for(4096, 4096, gpu=gpus.H200)
    cfg, same = hopper_options.config_for(4096, 4096, gpu=gpus.H200)
    assert hopper_options.Options().cluster_m == cfg.cluster_m == 2
    assert plan.slots == gpus.H200.cluster_pairs == 66 and plan.tile_m == 2 * hopper_options.TILE_M
    assert same == plan and cfg.narrow_n == plan.narrow
    single = hopper_options.plan_for(4096, 4096, gpu=gpus.H200, cluster_m=1)
    assert single.slots == gpus.H200.sm_count and single.tile_m == hopper_options.TILE_M


def test_options_are_checked_once_and_normalised():
    o = hopper_options.Options(tile=[128, 256, 64], narrow_ns=[128, 240, 128])
    assert o.tile == (128, 256, 64) and o.narrow_ns == (240, 128)
    assert hash(o) == hash(hopper_options.Options(narrow_ns=(128, 240)))      # a cache key
    assert hopper_options.Options().deferred and not hopper_options.Options(epilogue="staged").deferred
    assert hopper_options.Options().ring_stages == 4 and hopper_options.Options(tile=(128, 128, 64)).ring_stages == 7
    assert hopper_options.Options().narrow_choices == (240, 224, 192, 128)
    assert hopper_options.Options.of(None, cluster_m=1) == hopper_options.Options(cluster_m=1)
    with pytest.raises(ValueError, match="options must be"):
        hopper_options.Options.of({"cluster_m": 1})
    for bad, match in [(dict(stages=1), "stages must be >= 2"), (dict(band_rows=0), "band_rows"),
                       (dict(epilogue="staged", defer_epilogue=True), "register epilogue")]:
        with pytest.raises(ValueError, match=match):
            hopper_options.Options(**bad)


@pytest.mark.parametrize("M,tile_m,clamped", [(200, 64, True), (130, 128, True), (192, 128, True), (193, 128, False),
                                             (999, 128, False), (1000, 128, False), (4097, 128, True),
                                             (256, 128, False), (77, 128, False), (40, 64, False)])
def test_a_box_is_kept_inside_m_where_the_last_tile_is_at_most_half_full(M, tile_m, clamped):
    """`clamp_a_box=None` (the default) reaches the kernel's Config where M's last tile holds 1 .. tile_m / 2
    rows (not where M is one tile or less: no box moves there); True forces it, False and the staged epilogue
    never do, and the staged epilogue refuses True."""
    tile = dict(tile=(tile_m, 256, 64))
    assert hopper_options.config_for(M, 4096, gpu=gpus.H200, **tile)[0].clamp_a is clamped
    assert hopper_options.config_for(M, 4096, gpu=gpus.H200, clamp_a_box=True, **tile)[0].clamp_a
    assert not hopper_options.config_for(M, 4096, gpu=gpus.H200, clamp_a_box=False, **tile)[0].clamp_a
    staged = dict(tile, epilogue="staged", schedule="uniform")
    assert not hopper_options.config_for(M, 4096, gpu=gpus.H200, **staged)[0].clamp_a
    with pytest.raises(ValueError, match="clamp_a_box needs the register epilogue"):
        hopper_options.Options(clamp_a_box=True, **staged)


def test_keyword_options_are_remembered():
    a = hopper_options.Options.of(None, schedule="uniform", cluster_m=1)
    assert a is hopper_options.Options.of(None, schedule="uniform", cluster_m=1)
    assert a == hopper_options.Options.of(None, cluster_m=1, schedule="uniform") == hopper_options.Options(
        schedule="uniform", cluster_m=1)
    assert hash(a) == hash(hopper_options.Options(schedule="uniform", cluster_m=1))   # computed once, the same
    assert hopper_options.Options.of(a) is a and hopper_options.Options.of() is hopper_options.DEFAULT
    assert hopper_options.Options.of(None, narrow_ns=[192]) == hopper_options.Options(narrow_ns=(192,))   # unhashable


# ------------------------------------------------------------------------------------------- GPU: numbers

GPU_CONFIGS = {
    "default": dict(),    # 128x256x64, 4 stages, deferred register epilogue, balanced schedule, CTA pairs
    "register-balanced": dict(cluster_m=1),
    "staged-uniform": dict(epilogue="staged", schedule="uniform", cluster_m=1),
    "7-stage-128": dict(tile=(128, 128, 64), stages=7, schedule="balanced", cluster_m=1),
    "cluster2-staged": dict(cluster_m=2, epilogue="staged", schedule="uniform"),
    "static-walk": dict(dynamic=False),
    "one-cta-pair-per-item": dict(persistent=False),
    "plain-register-epilogue": dict(defer_epilogue=False),
    "plain-register-balanced-c1": dict(defer_epilogue=False, cluster_m=1),
    # stream-K forced on: at (1000, 1032, 520) all 20 items are split (three or four pieces each), at
    # (2048, 5120, 1024) the last 28 of 160, at (2560, 7168, 256) 16 items into single K-blocks
    "stream-k": dict(schedule="uniform", stream_k=True),
    "stream-k-deferred": dict(schedule="uniform", stream_k=True, defer_epilogue=True),
    "stream-k-c1-staged": dict(schedule="uniform", stream_k=True, cluster_m=1, epilogue="staged"),
    # the pair along N: rank 1 owns no columns at all where N <= tile_n (77 x 8 x 8), half an item at N tails
    "cluster2n-64": dict(tile=(128, 64, 64), schedule="uniform", cluster_m=1, cluster_n=2),
    "cluster2n-256-balanced": dict(cluster_m=1, cluster_n=2),     # balanced asks for no narrow tiles along N
    "cluster2n-128-staged": dict(tile=(128, 128, 64), schedule="uniform", cluster_m=1, cluster_n=2,
                                 epilogue="staged"),
    "cluster2n-stream-k": dict(tile=(128, 64, 64), schedule="uniform", cluster_m=1, cluster_n=2, stream_k=True),
    # 2 x 2: A shared along each row, B along each column; at (77, 8, 8) three of the four CTAs own nothing
    "cluster2x2-64": dict(tile=(128, 64, 64), schedule="uniform", cluster_m=2, cluster_n=2),
    "cluster2x2-128-staged": dict(tile=(128, 128, 64), schedule="uniform", cluster_m=2, cluster_n=2,
                                  epilogue="staged"),
    "cluster2x2-stream-k": dict(tile=(128, 64, 64), schedule="uniform", cluster_m=2, cluster_n=2, stream_k=True),
    # swapped (c^T = b^T a^T): at (77, 8, 8) the kernel's 8 rows leave three CTAs of a four with none; at M = 1000
    # a 288-wide tile's last one is 136 wide, a 96-wide one's 40
    "swapped-288-cluster4": dict(SWAPPED, tile=(128, 288, 64), cluster_m=4),
    "swapped-96-cluster4-stream-k": dict(SWAPPED, tile=(128, 96, 64), cluster_m=4, stream_k=True),
    "swapped-160-cluster1": dict(SWAPPED, tile=(128, 160, 64), cluster_m=1),
    "swapped-128-cluster2-one-per-item": dict(SWAPPED, tile=(128, 128, 64), cluster_m=2, persistent=False),
    "swapped-224-cluster2-static": dict(SWAPPED, tile=(128, 224, 64), cluster_m=2, dynamic=False),
}
# 67 items on 66 CTA pairs with 256 K-blocks each: the one tail item goes to 66 units of 3-4 K-blocks, 65 of them
# contributing to one FINISH, while the other pairs still run ~100 us rows. Claimed like rows, the units
# deadlocked (a pair's look-ahead claimed a unit its own FINISH was waiting for; a 16384^3 bench hung).
STREAM_K_DEEP = (67 * 256, 256, 16384)
# (M, N, K): tails in every dimension, a single tile, shapes whose balanced plans have narrow items (192 wide;
# 240 wide with M and N tails, with pairs or single CTAs).
GPU_SHAPES = [(1000, 1032, 520), (128, 256, 64), (77, 8, 8), (2048, 5120, 1024), (2560, 7168, 256),
              (4000, 4000, 264)]


# fp16 operands run the same kernel with another element type: the default build, stream-K, the 128-wide
# single-CTA build and the staged epilogue (its own conversion and stmatrix path) cover every place it enters.
FP16_CONFIGS = ("default", "stream-k", "7-stage-128", "staged-uniform", "cluster2n-64", "cluster2x2-64",
                "swapped-288-cluster4", "swapped-160-cluster1")
DTYPE_CONFIGS = ([pytest.param(torch.bfloat16, c, id=f"bf16-{c}") for c in GPU_CONFIGS]
                 + [pytest.param(torch.float16, c, id=f"fp16-{c}") for c in FP16_CONFIGS])


def fp32_reference(a, b):
    return a.float() @ b.float()


@pytest.mark.gpu
@needs_cuda
@needs_hopper
@pytest.mark.parametrize("dtype,config", DTYPE_CONFIGS)
@pytest.mark.parametrize("M,N,K", GPU_SHAPES)
def test_random_inputs_match_fp32_reference(dtype, config, M, N, K):
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(M, K, device="cuda", dtype=dtype)
    b = torch.randn(K, N, device="cuda", dtype=dtype)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)   # every element must be written
    c = hopper_host.gemm(a, b, out=out, **GPU_CONFIGS[config])
    assert c is out and c.dtype == dtype
    ref = fp32_reference(a, b)
    assert torch.isfinite(c).all(), "unwritten (NaN) output elements"
    rel = ((c.float() - ref).norm() / ref.norm()).item()
    # rounding c to its dtype costs about 2^-8 / sqrt(3) (bf16) or 2^-11 / sqrt(3) (fp16) in this norm: the
    # fp16 bound is below what an fp16 c rounded through bf16 would show
    assert rel < (1e-2 if dtype == torch.bfloat16 else 1e-3), f"relative error {rel:.3e}"


@pytest.mark.gpu
@needs_cuda
@needs_hopper
@pytest.mark.parametrize("dtype,config", DTYPE_CONFIGS)
@pytest.mark.parametrize("M,N,K", [(1000, 1032, 520), (2048, 5120, 512), (4000, 4000, 264)])
def test_small_integers_are_exact(dtype, config, M, N, K):
    # |a|, |b| <= 3 and K <= 520: every partial sum is an integer < 2^24, exact in fp32, so the only rounding
    # is the final one to c's dtype, which the reference does the same way (fp16 holds integers exactly only
    # up to 2048: above that both round to even).
    a = torch.randint(-3, 4, (M, K), device="cuda").to(dtype)
    b = torch.randint(-3, 4, (K, N), device="cuda").to(dtype)
    c = hopper_host.gemm(a, b, **GPU_CONFIGS[config])
    assert c.dtype == dtype and torch.equal(c, fp32_reference(a, b).to(dtype))


@pytest.mark.gpu
@needs_cuda
@needs_hopper
@pytest.mark.parametrize("cluster_m", [1, 2])
@pytest.mark.parametrize("M,N,width", [(8152, 8184, 240), (8152, 8184, 224), (8152, 8184, 192),
                                       (3000, 6000, 128)])
def test_every_narrow_width_is_exact(M, N, width, cluster_m):
    """Each width the register epilogue offers, forced: the narrow WGMMA reads the first `width` columns of the
    wide B slot (not whole 64-column swizzle blocks for 240 and 224) and the stores stop at the item's edge,
    so a narrow item must neither miss its own columns nor write over its right neighbour's."""
    K = 264
    plan = hopper_options.plan_for(M, N, cluster_m=cluster_m, narrow_ns=(width,))
    assert plan.narrow == width, plan.describe()
    a = torch.randint(-3, 4, (M, K), device="cuda").to(torch.bfloat16)
    b = torch.randint(-3, 4, (K, N), device="cuda").to(torch.bfloat16)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    hopper_host.gemm(a, b, out=out, cluster_m=cluster_m, narrow_ns=(width,))
    assert torch.equal(out, fp32_reference(a, b).to(torch.bfloat16))


@pytest.mark.gpu
@needs_cuda
@needs_hopper
def test_balanced_schedule_really_has_narrow_items():
    plan = hopper_options.plan_for(2048, 5120)       # the default: balanced, CTA pairs
    assert plan.narrow is not None, plan.describe()
    assert isinstance(plan, waves.Plan)


def test_a_remembered_signature_still_checks_what_each_call_can_change():
    """`_operands` remembers shape and dtype pairs that passed; tensors of such a pair are still checked for their
    device, layout and start: a CPU pair of a remembered signature is refused as before (the GPU test below
    runs the layout and start cases)."""
    a = torch.zeros(64, 64, dtype=torch.bfloat16)
    hopper_host._signatures[a.shape, a.shape, a.dtype, a.dtype] = (64, 64, 64)
    try:
        with pytest.raises(ValueError, match="CUDA"):
            hopper_host.gemm(a, a)
    finally:
        hopper_host._signatures.clear()


@pytest.mark.gpu
@needs_cuda
@needs_hopper
def test_a_checked_signature_still_checks_layout_start_and_device():
    """After a good call of a signature, a transposed view, a tensor off a 16-byte start and a CPU tensor of the
    same shape and dtype are each refused by name."""
    a = torch.ones(64, 64, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(hopper_host.gemm(a, a), torch.full((64, 64), 64.0, device="cuda", dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="contiguous"):
        hopper_host.gemm(a.t(), a)
    off = torch.zeros(64 * 64 + 8, device="cuda", dtype=torch.bfloat16)[1:1 + 64 * 64].view(64, 64)
    with pytest.raises(ValueError, match="16-byte"):
        hopper_host.gemm(a, off)
    with pytest.raises(ValueError, match="CUDA"):
        hopper_host.gemm(a.cpu(), a)
    with pytest.raises(ValueError, match="one device|CUDA"):
        hopper_host.gemm(a, a.cpu())


@pytest.mark.gpu
@needs_cuda
@needs_hopper
def test_each_call_without_out_gets_a_fresh_contiguous_output():
    """The output comes from empty_like of the call's expanded element: a contiguous [M, N] of a's dtype on its
    device, new storage at every call (the last call's result is never written over)."""
    for dtype in (torch.bfloat16, torch.float16):
        a = torch.ones(200, 64, device="cuda", dtype=dtype)
        b = torch.ones(64, 136, device="cuda", dtype=dtype)
        first, second = hopper_host.gemm(a, b), hopper_host.gemm(a, 2 * b)
        for c, value in ((first, 64.0), (second, 128.0)):
            assert c.shape == (200, 136) and c.stride() == (136, 1) and c.dtype == dtype and c.device == a.device
            assert torch.equal(c, torch.full_like(c, value))
        assert first.data_ptr() != second.data_ptr()


@pytest.mark.gpu
@needs_cuda
@needs_hopper
def test_autotune_runs_the_fastest_contender_and_times_each_shape_once(monkeypatch):
    """gemm(a, b, autotune=True) on a tail shape: exact on small integers, every contender that takes the shape
    timed AUTOTUNE_ROUNDS times at the first call and none at the second, the kept call one of the contenders."""
    hopper_host.clear_caches()
    timed = []
    cycles = hopper_host.timing.cycles

    def logged(fns, *args, **kw):
        rounds = cycles(fns, *args, **kw)
        timed.extend(fn.args[0].cfg for _ in rounds for fn in fns.values())   # each fn: partial(_launch, call)
        return rounds
    monkeypatch.setattr(hopper_host.timing, "cycles", logged)
    M, N, K = 1000, 1032, 520
    a = torch.randint(-3, 4, (M, K), device="cuda").to(torch.bfloat16)
    b = torch.randint(-3, 4, (K, N), device="cuda").to(torch.bfloat16)
    want = fp32_reference(a, b).to(torch.bfloat16)
    assert torch.equal(hopper_host.gemm(a, b, autotune=True), want)
    first = len(timed)
    names = rule.contenders(M, N, K)       # every one of them takes this shape (test_gemm_rule runs them all)
    # each as gemm(a, b) would run it (`rule.as_run`), a build two candidates share timed once
    builds = {rule.as_run(configs.HOPPER_CANDIDATES[n], M, N, K) for n in names}
    contenders = {hopper_host._prepare(M, N, K, a.get_device(), o, a.dtype).cfg for o in builds}
    assert first == hopper_host.AUTOTUNE_ROUNDS * len(builds) and set(timed) == contenders
    assert torch.equal(hopper_host.gemm(a, b, autotune=True), want) and len(timed) == first
    assert hopper_host._tuned[M, N, K, a.get_device(), a.dtype].cfg in contenders
    hopper_host.clear_caches()


@pytest.mark.gpu
@needs_cuda
@needs_hopper
def test_gpu_input_errors():
    a = torch.zeros(64, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="bfloat16 or float16"):
        hopper_host.gemm(a.float(), a.float())
    with pytest.raises(ValueError, match="one dtype"):
        hopper_host.gemm(a, a.half())
    with pytest.raises(ValueError, match="out must have the operands' dtype torch.float16"):
        hopper_host.gemm(a.half(), a.half(), out=a)
    with pytest.raises(ValueError, match="multiples of 8"):
        hopper_host.gemm(a[:, :60].contiguous(), a[:60].contiguous())
    with pytest.raises(ValueError, match="inner dimensions"):
        hopper_host.gemm(a, a[:32].contiguous())
    with pytest.raises(ValueError, match="inner dimensions"):     # the traced build checks its operands alike
        hopper_host.timeline(a, a[:32].contiguous())
    with pytest.raises(ValueError, match="contiguous"):
        hopper_host.gemm(a.t(), a)


@pytest.mark.gpu
@needs_cuda
@needs_hopper
@pytest.mark.parametrize("graphs", [True, False])
def test_cached_launches_follow_their_arguments(graphs, monkeypatch):
    """A call's launch comes from a marshalled template (its pointers re-aimed), and is captured into a CUDA graph
    once its argument set repeats (here: at the second sighting), then replayed (re-aimed at the call's output
    where the epilogue allows): inputs edited in place, alternating outputs and a second stream must each still
    get their own answer, with graphs and without."""
    from workbook import launch
    monkeypatch.setattr(launch, "GRAPHS", graphs)
    monkeypatch.setattr(launch, "CAPTURE_AFTER", 2)     # captured at the second sighting
    hopper_host.clear_caches()
    M, N, K = 1000, 1032, 520
    a = torch.randint(-3, 4, (M, K), device="cuda").to(torch.bfloat16)
    b = torch.randint(-3, 4, (K, N), device="cuda").to(torch.bfloat16)
    outs = [torch.empty(M, N, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    for i in range(4):
        out = outs[i % 2].fill_(float("nan"))
        a[i] = i + 1                                 # in place: same address, new data
        hopper_host.gemm(a, b, out=out)
        torch.cuda.synchronize()
        assert torch.equal(out, fp32_reference(a, b).to(torch.bfloat16)), f"call {i}"
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        got = hopper_host.gemm(a, b)
    side.synchronize()
    assert torch.equal(got, fp32_reference(a, b).to(torch.bfloat16)), "side stream"
    cache = hopper_host._call_for(M, N, K, a.get_device()).launches
    # every first sighting came from a template (one per stream), none was marshalled anew. The register epilogue
    # re-aims c: both outputs are one argument set (captured at the second call, replayed re-aimed after); the
    # staged one keys by every value: each output was used twice on the current stream, the side stream once
    if cache.reaimable:
        assert cache.counts == {"first": 2, "captured": graphs, "replayed": 3 * graphs, "direct": 3 * (not graphs)}
        assert cache.graph_count == graphs and len(cache._templates) == 2
    else:
        assert cache.counts == {"first": 3, "captured": 2 * graphs, "replayed": 2 * graphs,
                                "direct": 2 * (not graphs)}
        assert cache.graph_count == 2 * graphs and len(cache._templates) == 2
    hopper_host.clear_caches()


@pytest.mark.gpu
@needs_cuda
@needs_hopper
@pytest.mark.parametrize("M,N,K", [(2048, 5120, 256), (128, 256, 64), (1000, 1032, 520)])
@pytest.mark.parametrize("kw", [{}, dict(schedule="uniform", stream_k=True), dict(tile=(64, 128, 64)),
                                dict(tile=(64, 64, 64), schedule="uniform", stream_k=True),
                                dict(tile=(64, 256, 64), cluster_m=2, schedule="uniform", stream_k=True),
                                dict(tile=(128, 64, 64), cluster_m=1, cluster_n=2, schedule="uniform",
                                     stream_k=True),
                                dict(tile=(128, 64, 64), cluster_m=2, cluster_n=2, schedule="uniform",
                                     stream_k=True)],
                         ids=["default", "stream-k", "64x128", "64x64-stream-k", "64x256-cluster2-stream-k",
                              "64-cluster2n-stream-k", "64-cluster2x2-stream-k"])
def test_dynamic_schedule_leaves_its_counter_at_zero(M, N, K, kw):
    """The last cluster out zeroes the item counter and each stream-K FINISH its flag, so the next launch (or
    graph replay) starts clean: repeated calls stay exact and the counter reads all zeros between them."""
    a = torch.randint(-3, 4, (M, K), device="cuda").to(torch.bfloat16)
    b = torch.randint(-3, 4, (K, N), device="cuda").to(torch.bfloat16)
    want = fp32_reference(a, b).to(torch.bfloat16)
    for i in range(3):
        c = hopper_host.gemm(a, b, **kw)
        torch.cuda.synchronize()
        assert torch.equal(c, want), f"call {i}"
    call = hopper_host._call_for(M, N, K, a.get_device(), **kw)
    assert call.scratches and all(not c.any() for c, *_ in call.scratches.values())
    assert (call.partial_slots > 0) == (bool(kw.get("stream_k")) and K > 64)   # one K-block: nothing to split


def test_band_keeps_its_rows_of_a_within_the_l2_budget():
    # the three measured squares (ncu, data/measured/h200/probes/ncu_dyn_*.txt): 16, 16, 8
    assert [hopper_worklist.band_rows_for(K) for K in (4096, 8192, 16384)] == [16, 16, 8]
    for K in (64, 1000, 4096, 8192, 16384, 65536, 1 << 20):
        rows = hopper_worklist.band_rows_for(K)
        assert rows in (1, 2, 4, 8, 16)
        assert rows == 1 or rows * hopper_options.TILE_M * K * 2 <= hopper_worklist.BAND_A_BYTES
        assert rows == 16 or 2 * rows * hopper_options.TILE_M * K * 2 > hopper_worklist.BAND_A_BYTES   # the most that fit


def test_deferred_epilogue_spreads_its_stores_over_the_next_items_first_k_blocks():
    """With defer_epilogue, each of item j+1's first 8 K-blocks carries one 32-column group of item j's C: two
    16-byte stores (the two row halves) right after the K-block's HGMMAs are issued and before its WGMMA wait,
    so they leave while the tensor cores work; one more full copy after the loop stores the last item. Nothing
    spills; each peeled K-block keeps the loop's one wait."""
    base = compiled(4096, 4096, 4096, **REGISTER)
    art = compiled(4096, 4096, 4096, **dict(REGISTER, defer_epilogue=True))
    hist, ref = opcodes(art), opcodes(base)
    groups = 256 // 32
    assert count(hist, "STG.E.128") == 2 * count(ref, "STG.E.128") and count(hist, "LDL") == count(hist, "STL") == 0
    assert count(hist, "WARPGROUP.DEPBAR") == count(ref, "WARPGROUP.DEPBAR") + groups
    ops = [i.opcode for i in sass.instructions(art.sass)]
    first = next(i for i, op in enumerate(ops) if op.startswith("HGMMA"))
    waits = [i for i, op in enumerate(ops) if op.startswith("WARPGROUP.DEPBAR")]
    for a, b in zip([first] + waits[:groups - 1], waits[:groups]):   # one K-block each, up to its wait
        mmas = [i for i, op in enumerate(ops[a:b]) if op.startswith("HGMMA")]
        stores = [i for i, op in enumerate(ops[a:b]) if op == "STG.E.128"]
        assert len(mmas) == 4 and len(stores) == 2 and min(stores) > max(mmas), ops[a:b]


# ------------------------------------------------------------------------------------------- stream-K

def _segments(rows):
    for r, row in enumerate(rows):
        for s in range(len(row) // hopper_worklist.SEGMENT_COLS):
            seg = row[s * hopper_worklist.SEGMENT_COLS:(s + 1) * hopper_worklist.SEGMENT_COLS]
            if seg[4] > 0:
                yield r, s, seg


def test_split_k_cuts_every_item_into_the_same_pieces_which_start_together():
    split = configs.HOPPER_CANDIDATES["128 split-k cluster2"]
    plan = hopper_options.plan_for(1024, 1024, split, gpus.H200)
    k_blocks = 8192 // hopper_options.TILE_K
    slots = hopper_options.split_k_slots(split, len(plan.items), plan.slots, k_blocks)
    assert (len(plan.items), plan.slots, slots) == (32, 66, 64)
    rows, partials = hopper_worklist.work_rows(plan.items, 16, slots, k_blocks, stream_k=True)
    segs = [seg for _, _, seg in _segments(rows)]
    assert len(rows) == len(segs) == 64 and partials == 32          # one piece a row, one partial an item
    assert {(seg[3], seg[4]) for seg in segs} == {(0, 64), (64, 64)}
    by_item = {}
    for seg in segs:
        by_item.setdefault(seg[:3], []).append(seg[5])
    assert all(sorted(roles) == [hopper_worklist.CONTRIBUTE, hopper_worklist.FINISH] for roles in by_item.values())
    staggered, _ = hopper_worklist.work_rows(plan.items, 16, plan.slots, k_blocks, stream_k=True)
    assert len({seg[3] for _, _, seg in _segments(staggered)}) > 20    # stream-K's units start all over K
    # pieces: slots // items, at most one per K-block; under two, stream-K's own cut over every slot
    assert [hopper_options.split_k_slots(split, *args) for args in
            [(16, 66, 128), (9, 66, 3), (40, 66, 128), (33, 66, 1)]] == [64, 27, 66, 66]
    stream_k = configs.HOPPER_CANDIDATES["128 stream-k cluster2"]
    assert hopper_options.split_k_slots(stream_k, 32, 66, 128) == 66
    with pytest.raises(ValueError, match="split_k"):
        hopper_options.Options(split_k=True)


@pytest.mark.parametrize("M,N,K,pieces", [(1024, 1024, 8200, {(0, 64), (64, 65)}),
                                          (512, 1024, 16576, {(0, 64), (64, 65), (129, 65), (194, 65)}),
                                          (1000, 1000, 197, {(0, 2), (2, 2)})])
def test_split_k_pieces_cover_every_k_block_of_every_item_once_where_k_does_not_divide(M, N, K, pieces):
    split = configs.HOPPER_CANDIDATES["128 split-k cluster2"]
    plan = hopper_options.plan_for(M, N, split, gpus.H200)
    k_blocks = -(-K // hopper_options.TILE_K)
    slots = hopper_options.split_k_slots(split, len(plan.items), plan.slots, k_blocks)
    rows, _ = hopper_worklist.work_rows(plan.items, 16, slots, k_blocks, stream_k=True)
    by_item = {}
    for _, _, seg in _segments(rows):
        by_item.setdefault(tuple(seg[:3]), []).append((seg[3], seg[4]))
    assert len(by_item) == len(plan.items)
    for cut in by_item.values():
        assert set(cut) == pieces                                    # the same pieces for every item
        assert sorted(k for start, n in cut for k in range(start, start + n)) == list(range(k_blocks))


@pytest.mark.parametrize("M,N,K", [(4096, 4096, 4096), (1000, 1032, 520), (2560, 7168, 256), (2048, 5120, 1024)])
def test_stream_k_rows_cover_every_k_block_once_and_only_wait_on_later_rows(M, N, K):
    plan = hopper_options.plan_for(M, N, gpu=gpus.H200, schedule="uniform", cluster_m=2)
    k_blocks = -(-K // hopper_options.TILE_K)
    plain, none = hopper_worklist.work_rows(plan.items, 16, plan.slots, k_blocks, stream_k=False)
    rows, slots = hopper_worklist.work_rows(plan.items, 16, plan.slots, k_blocks, stream_k=True)
    assert none == 0 and all(r[5] == hopper_worklist.WHOLE and (r[3], r[4]) == (0, k_blocks) for r in plain)
    full, units = waves.stream_k(len(plain), plan.slots, k_blocks)   # the last two waves: one unit row per slot
    assert len(rows) == full + (plan.slots if units else 0)
    assert {len(r) for r in rows} == {hopper_worklist.SEGMENT_COLS * hopper_options.segments(True)}   # one tensor
    covered, contributors, finishes = {}, {}, {}
    for r, s, (m0, n0, width, k0, count, role, flag, arg) in _segments(rows):
        covered.setdefault((m0, n0, width), []).extend(range(k0, k0 + count))
        if role == hopper_worklist.CONTRIBUTE:
            assert s == 0 and k0 > 0, "a contributor starts its row: it never waits behind a FINISH"
            contributors.setdefault(flag, []).append((r, arg))
        elif role == hopper_worklist.FINISH:
            assert k0 == 0 and count < k_blocks
            assert not any(q[4] for q in [rows[r][(s + 1) * 8:(s + 2) * 8]] if q), "a FINISH ends its row"
            finishes[flag] = (r, arg)
        else:
            assert (k0, count) == (0, k_blocks)
    assert sorted(covered) == sorted((t.m0, t.n0, t.width) for t in plan.items)
    assert all(sorted(ks) == list(range(k_blocks)) for ks in covered.values())
    assert sorted(contributors) == sorted(finishes)
    for flag, (r, count) in finishes.items():
        mine = contributors[flag]
        assert count == len(mine) and sorted(a for _, a in mine) == list(range(flag, flag + count))
        assert all(q > r for q, _ in mine), "the contributors a FINISH waits for come later in the list"
        # ... in the unit rows, which the kernel hands out one per cluster (no cluster holds two)
        assert r >= len(rows) - plan.slots and all(q >= len(rows) - plan.slots for q, _ in mine)
    assert slots == sum(len(v) for v in contributors.values())


def test_stream_k_refuses_a_plan_with_narrow_items():
    with pytest.raises(ValueError, match="stream_k"):
        hopper_host.compile_gemm(8192, 8192, 8192, stream_k=True)   # balanced: narrow items fill the last wave


def test_the_register_epilogue_is_deferred_by_default_and_stream_k_is_an_option():
    cfg = hopper_options.config_for(4096, 4096)[0]
    assert cfg.defer_epilogue and not cfg.stream_k
    assert not hopper_options.config_for(4096, 4096, defer_epilogue=False)[0].defer_epilogue
    assert not hopper_options.config_for(4096, 4096, epilogue="staged")[0].defer_epilogue
    with pytest.raises(ValueError, match="register epilogue"):
        hopper_options.config_for(4096, 4096, epilogue="staged", defer_epilogue=True)


def test_stream_k_build_hands_partial_sums_over_in_16_byte_pieces():
    """The partial sums go to the workspace and come back as 128-bit accesses (n / 4 of each per thread); one
    relaxed reduction per contributing warpgroup, and acquire loads for the FINISH's wait."""
    base = opcodes(compiled(4096, 4096, 4096, **CLUSTER))
    hist = opcodes(compiled(4096, 4096, 4096, **dict(CLUSTER, stream_k=True)))
    per_thread = 64 * 256 // 128
    assert count(hist, "STG.E.128") - count(base, "STG.E.128") == per_thread // 4
    # the producer reads each segment's (m0, n0, width, k0) as one 128-bit load: two more segments per row, in
    # each of its two copies of the row's loads (the first item's, which it knows before the counter, and the loop's)
    assert count(hist, "LDG.E.128") - count(base, "LDG.E.128") == per_thread // 4 + 4
    assert count(hist, "REDG.E.ADD") == 1 and count(hist, "LDG.E.STRONG.GPU") >= 1
    assert count(hist, "LDL") == count(hist, "STL") == 0


@pytest.mark.gpu
@needs_cuda
@needs_hopper
def test_stream_k_finishes_with_many_contributors_behind_long_rows():
    M, N, K = STREAM_K_DEEP
    a = torch.randint(-3, 4, (M, K), device="cuda").to(torch.bfloat16)   # sums < 2^24: exact in fp32
    b = torch.randint(-3, 4, (K, N), device="cuda").to(torch.bfloat16)
    want = fp32_reference(a, b).to(torch.bfloat16)
    for i in range(3):
        c = hopper_host.gemm(a, b, schedule="uniform", stream_k=True)
        torch.cuda.synchronize()
        assert torch.equal(c, want), f"call {i}"


# (M, options): a CTA whose tile runs past M loads the last box inside M; rows past M in the second CTA of a pair
# (200: 64-row tiles from 192, the box from 136; 130: 128-row tiles from 128, the box from 2), a CTA wholly
# past M (77 and 40 in pairs: the second CTA's box from row 0, nothing of it stored), stream-K's partial sums
# handed over with a moved origin, pairs along N sharing one clamped A box, the balanced plan's narrow items
CLAMPED = [(200, dict(tile=(64, 128, 64), schedule="uniform")),
           (200, dict(tile=(64, 128, 64), schedule="uniform", stream_k=True)),
           (130, dict()), (77, dict()), (40, dict(tile=(64, 256, 64), schedule="uniform")),
           (1000, dict(schedule="uniform", stream_k=True)), (1000, dict(cluster_m=1, defer_epilogue=False)),
           (999, dict(tile=(128, 64, 64), schedule="uniform", cluster_m=2, cluster_n=2)),
           (300, dict(tile=(128, 128, 64), schedule="uniform", cluster_m=1, cluster_n=2, stream_k=True))]


@pytest.mark.gpu
@needs_cuda
@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("M,kw", CLAMPED)
def test_a_box_kept_inside_m_is_exact_and_writes_no_row_past_m(M, kw, dtype):
    """Forced on (`clamp_a_box=True`) and off, the same exact answer, every row written, none past M."""
    N, K = 1032, 520
    assert hopper_options.config_for(M, N, clamp_a_box=True, **kw)[0].clamp_a
    a = torch.randint(-3, 4, (M, K), device="cuda").to(dtype)    # sums < 2^24: exact in fp32
    b = torch.randint(-3, 4, (K, N), device="cuda").to(dtype)
    want = fp32_reference(a, b).to(dtype)
    for clamp in (True, False):
        out = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
        assert hopper_host.gemm(a, b, out=out, clamp_a_box=clamp, **kw) is out
        assert torch.equal(out, want), f"clamp_a_box={clamp}"
    # the rows past M of a larger buffer stay untouched: the clamped stores stop at M as the unclamped ones do
    big = torch.full((M + 64, N), 7.0, device="cuda", dtype=dtype)
    hopper_host.gemm(a, b, out=big[:M], clamp_a_box=True, **kw)
    assert torch.equal(big[:M], want) and bool((big[M:] == 7).all())


def test_stream_k_needs_persistent_ctas():
    with pytest.raises(ValueError, match="persistent"):
        hopper_options.Options(schedule="uniform", persistent=False, stream_k=True)


# ------------------------------------------------------------------------------- the timeline (trace build)

def synthetic_trace(segments_per_cta, t0=1_000_000):
    """A trace buffer as the kernel writes it: entry, exit, then (row, start, data, mma_done, stored) per
    segment, -1 where nothing was written."""
    import numpy as np
    trace = np.full((len(segments_per_cta), hopper_trace.TRACE_COLS), -1, dtype=np.int64)
    for cta, rows in enumerate(segments_per_cta):
        t = t0 + 100 * cta
        trace[cta, 0] = t
        for seq, row in enumerate(rows):
            at = 2 + seq * len(hopper_trace.TRACE_FIELDS)
            trace[cta, at:at + 5] = (row, t + 1000, t + 2000, t + 5000, t + 6000)
            t += 6000
        trace[cta, 1] = t + 500
    return trace


def test_trace_frame_reads_every_recorded_segment_in_microseconds():
    df = hopper_trace.trace_frame(synthetic_trace([[0, 2], [1], [3, 4, 5]]), cluster_size=1)
    assert list(df.row) == [0, 2, 1, 3, 4, 5] and list(df.seq) == [0, 1, 0, 0, 1, 2]
    assert list(df.columns) == ["cta", "cluster", "seq", "row", "entry", "start", "data", "mma_done", "stored",
                                "exit"]
    first = df.iloc[0]
    assert (first.entry, first.start, first.data, first.mma_done, first.stored) == (0.0, 1.0, 2.0, 5.0, 6.0)
    assert df.iloc[2].entry == 0.1 and df.iloc[-1].exit == 0.2 + 18.5
    assert list(hopper_trace.trace_frame(synthetic_trace([[0], [0]]), cluster_size=2).cluster) == [0, 0]


def test_trace_summary_says_where_a_launch_spent_its_time():
    df = hopper_trace.trace_frame(synthetic_trace([[0, 2], [1], [3, 4, 5]]), cluster_size=1)
    df["width"] = 256
    got = hopper_trace.summary(df)
    # every segment: start +1, data +2, mma_done +5, stored +6 us after the previous one's end (or the entry)
    assert got["first_data_us(med)"] == 2.0 and got["kloop_us(med)"] == 3.0 and got["epilogue_us(med)"] == 1.0
    assert got["row_wait_us(med)"] == 1.0 and got["gap_us(med)"] == 1.0 and got["kloop_us(med) w256"] == 3.0
    assert got["makespan_us"] == df.exit.max() and 0 < got["busy_frac"] <= 1
    assert got["entry_spread_us"] == 0.2


def test_trace_frame_refuses_a_launch_that_did_not_finish():
    trace = synthetic_trace([[0], [1]])
    trace[1, 1] = -1
    with pytest.raises(ValueError, match="exit"):
        hopper_trace.trace_frame(trace, cluster_size=1)
    with pytest.raises(ValueError, match="TRACE_COLS|int64"):
        hopper_trace.trace_frame(trace[:, :10], cluster_size=1)


@pytest.mark.gpu
@needs_cuda
@needs_hopper
@pytest.mark.parametrize("M,N,K,kw", [(2048, 5120, 1024, {}), (1000, 1032, 520, dict(schedule="uniform",
                                                                                      stream_k=True)),
                                     (1000, 1032, 520, dict(tile=(128, 64, 64), schedule="uniform", cluster_m=1,
                                                            cluster_n=2)),
                                     (1000, 1032, 520, dict(tile=(128, 64, 64), schedule="uniform", cluster_m=2,
                                                            cluster_n=2))])
def test_timeline_records_every_row_on_every_cta_of_its_cluster_in_order(M, N, K, kw):
    a = torch.randint(-3, 4, (M, K), device="cuda").to(torch.bfloat16)
    b = torch.randint(-3, 4, (K, N), device="cuda").to(torch.bfloat16)
    c, df = hopper_host.timeline(a, b, **kw)
    assert torch.equal(c, fp32_reference(a, b).to(torch.bfloat16))
    call = hopper_host._call_for(M, N, K, a.get_device(), trace=True, **kw)
    cluster_size, segments = call.cfg.cluster_size, call.cfg.segments
    present = (call.work.view(call.work.shape[0], segments, -1)[:, :, 4] > 0).sum().item()
    assert len(df) == present * cluster_size                   # each present segment once per CTA of a cluster
    assert (df.groupby(["row", "cluster"]).size() % cluster_size == 0).all()
    order = df[["entry", "start", "data", "mma_done", "stored", "exit"]].to_numpy()
    assert (order[:, 1:] >= order[:, :-1]).all(), "stamps out of order"
    assert (df.groupby("cta").start.diff().dropna() > 0).all()
    assert (df.width.to_numpy() == call.work[:, 2].cpu().numpy()[df.row.to_numpy()]).all()


@pytest.mark.parametrize("module", ["hopper", "blackwell"])
@pytest.mark.parametrize("M, N, K, match", [
    (2**31, 4096, 4096, "M=2147483648 is too large"),
    (4096, 2**31, 4096, "N=2147483648 is too large"),
    (4096, 4096, 2**31 - 248, "K=2147483400 is too large"),
    (4096, 4096.0, 4096, "N must be a positive int"),
])
def test_sizes_past_32_bits_are_refused_by_name(module, M, N, K, match):
    """Row and column indices are 32-bit in both GEMMs: a size they cannot take is a ValueError, not a wrap."""
    import importlib
    with pytest.raises(ValueError, match=match):
        importlib.import_module(f"gemm_kernels.{module}_options").check_shape(M, N, K)


# ------------------------------------------------------------------------------- programmatic dependent launch

def test_pdl_build_waits_for_the_kernel_before_and_only_it_does():
    """`pdl=True` puts the grid-dependency wait and the dependents' trigger in the kernel; the default has neither
    (a kernel launched as a dependent without the wait could read its operands before they are written)."""
    assert hopper_options.config_for(1024, 1024, pdl=True)[0].pdl
    with_pdl = hopper_host.compile_gemm(1024, 1024, 1024, pdl=True).ptx
    assert "griddepcontrol.wait" in with_pdl and "griddepcontrol.launch_dependents" in with_pdl
    assert "griddepcontrol" not in hopper_host.compile_gemm(1024, 1024, 1024).ptx


@pytest.mark.gpu
@needs_cuda
@needs_hopper
@pytest.mark.parametrize("kw", [dict(), dict(tile=(64, 128, 64), schedule="uniform", stream_k=True),
                                dict(cluster_m=1, cluster_n=2, schedule="uniform")])
def test_pdl_launches_back_to_back_read_what_the_one_before_wrote(kw):
    """Dependent launches with no host sync between them: each second GEMM reads the first one's output, which
    a fill has poisoned just before; every answer exact."""
    M, N, K = 1000, 1032, 128
    a = torch.randint(-1, 2, (M, K), device="cuda").to(torch.bfloat16)   # |a @ b| <= 128: exact in bf16
    b = torch.randint(-1, 2, (K, N), device="cuda").to(torch.bfloat16)
    b2 = torch.randint(-1, 2, (N, 520), device="cuda").to(torch.bfloat16)
    first = fp32_reference(a, b).to(torch.bfloat16)
    want = fp32_reference(first, b2).to(torch.bfloat16)
    mid = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    outs = [torch.full((M, 520), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(12)]
    for out in outs:   # past the launch cache's eighth sighting: the later pairs are graph replays
        mid.fill_(float("nan"))
        hopper_host.gemm(a, b, out=mid, pdl=True, **kw)
        hopper_host.gemm(mid, b2, out=out, pdl=True, **kw)
    torch.cuda.synchronize()
    assert torch.equal(mid, first)
    for i, out in enumerate(outs):
        assert torch.equal(out, want), f"pair {i}"


@pytest.mark.parametrize("width,cluster_m,stream_k", [(288, 4, False), (96, 4, True), (160, 1, False), (128, 2, False)])
def test_swapped_builds_put_our_m_along_wgmma_n(width, cluster_m, stream_k):
    """Swapped (`Options.swap_ab`): each WGMMA is 64 rows of our N by the tile's width of our M (three 96-wide ones
    per k16 step for 288), c goes out column-major through a transposing stmatrix and a TMA store, a cluster
    multicasts our A, nothing spills; the same tile unswapped stores through a plain stmatrix."""
    kw = dict(SWAPPED, tile=(128, width, 64), cluster_m=cluster_m, stream_k=stream_k)
    ops = opcodes(compiled(800, 4096, 3000, **kw))
    wgmma = 96 if width > 256 else width
    assert ops[f"HGMMA.64x{wgmma}x16.F32.BF16"] > 0 and ops["STSM.16.MT88.4"] > 0 and ops["UTMASTG.2D"] > 0
    assert count(ops, "HGMMA.64x") == ops[f"HGMMA.64x{wgmma}x16.F32.BF16"]
    assert ("UTMALDG.2D.MULTICAST" in ops) == (cluster_m > 1)
    assert "LDL" not in ops and "STL" not in ops
    assert "STSM.16.MT88.4" not in opcodes(compiled(4096, 4096, 4096, **STAGED))


def test_a_swapped_plan_is_the_kernels_of_the_transposed_output():
    """The kernel computes the (N, M) output c^T: its plan's rows are our N in clusters of 4 x 128, its columns
    our M in tiles of 288; the sizes it is launched with are swapped the same way; A's short box stays off."""
    o = hopper_options.Options(**SWAPPED, tile=(128, 288, 64), cluster_m=4)
    plan = hopper_options.plan_for(800, 5000, o, gpus.H200)
    assert plan == waves.plan(5000, 800, gpu=gpus.H200, tile_m=512, tile_ns=(288,), balanced=False,
                              schedule="static", ctas_per_item=4)
    assert len(plan.items) == 10 * 3 and plan.narrow is None
    cfg, _ = hopper_options.config_for(100, 5000, o, gpus.H200)
    assert cfg.swap_ab and cfg.a_rows is None and cfg.stages == hopper_options.stage_count((128, 288, 64), "staged")
    assert hopper_options.Options(**{**SWAPPED, "schedule": "balanced"}, tile=(128, 96, 64)).narrow_choices == ()


@pytest.mark.parametrize("kw, match", [
    (dict(tile=(128, 100, 64)), "multiple of 32"), (dict(tile=(128, 320, 64)), "multiple of 32"),
    (dict(tile=(64, 128, 64)), r"\(128, tile_n, 64\)"), (dict(epilogue="register"), "staged"),
    (dict(cluster_m=3), "cluster_m"), (dict(cluster_n=2), "cluster_n"), (dict(narrow_ns=(64,)), "uniform")])
def test_swap_ab_refuses_what_it_cannot_run(kw, match):
    with pytest.raises(ValueError, match=match):
        hopper_options.Options(**{**SWAPPED, "tile": (128, 128, 64), **kw})
    with pytest.raises(ValueError, match="swapped only"):
        hopper_options.Options(cluster_m=4)
    with pytest.raises(ValueError, match="64-column"):
        hopper_options.Options(tile=(128, 96, 64))      # 96 wide: swapped only (B's swizzle blocks are 64 wide)


def test_leash_probe_builds_keep_the_library_k_loop(load_probe):
    """The builds `probes/gemm_leash_probe.py` times (prepared, to run on a GPU): the library build as gemm(a, b) runs
    it at 1024 x 2048 x 4096, its producer on a leash of 2 K-blocks. The consumers' WGMMAs and waits are the
    library's (the leash is the producer's alone); the producer counts each chunk with a relaxed global reduction,
    polls the count with strong loads, and the last producer to finish takes one atomic ticket and zeroes the
    counts; no spills."""
    probe = load_probe("gemm_leash_probe")
    M, N, K, name = probe.BUILDS[0]
    leashed = sass.histogram(probe.compile_leashed(M, N, K, name, 2, 1).sass)
    library = sass.histogram(hopper_host.compile_gemm(M, N, K, probe.options_for(M, N, name)).sass)
    for op in ("HGMMA.64x128x16.F32.BF16", "WARPGROUP.DEPBAR.LE"):
        assert leashed[op] == library[op] > 0, (op, leashed[op], library[op])
    assert leashed["REDG.E.ADD.S32.STRONG.GPU"] >= 1 and leashed["LDG.E.STRONG.GPU"] >= 2, leashed
    assert leashed["ATOMG.E.ADD.STRONG.GPU"] == 1 and not library["REDG.E.ADD.S32.STRONG.GPU"], (leashed, library)
    assert not any(op.startswith(("LDL", "STL")) for op in leashed), leashed

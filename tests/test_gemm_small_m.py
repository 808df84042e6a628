"""The Hopper GEMM's small-M tile: 64 rows, one consumer warpgroup (`Options(tile=(64, tile_n, 64))`).

What it compiles to and how its work is laid out (CPU, no GPU needed), and what it computes (GPU, marked `gpu`).
The 128-row builds are checked in test_gemm_hopper.py; their machine code is unchanged by the small-M tile
(tools/sass_identity.py).
"""
from __future__ import annotations

import functools
import re
import shutil
import subprocess

import pytest
import torch

from gemm_kernels import hopper_host, hopper_options, hopper_worklist
from workbook import gpus, sass

needs_hopper = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0), reason="needs an H100/H200")

WIDTHS = (64, 128, 256)
UNIFORM = dict(schedule="uniform", cluster_m=1)     # the candidates' setting (gemm_kernels.configs)


def small(tile_n: int, **kw) -> dict:
    return dict(UNIFORM, tile=(64, tile_n, 64), **kw)


@functools.lru_cache(maxsize=None)
def _compiled(M, N, K, items):
    return hopper_host.compile_gemm(M, N, K, **dict(items))


def compiled(M, N, K, **kw):
    """One compile per configuration per test session (a compile takes seconds on a CPU)."""
    return _compiled(M, N, K, tuple(sorted(kw.items())))


def count(art, prefix):
    return sum(n for op, n in sass.histogram(art.sass).items() if op.startswith(prefix))


# ------------------------------------------------------------------------------------------- CPU: options

def test_the_small_m_tile_is_one_consumer_warpgroup_with_a_deeper_ring():
    """A 64-row stage holds half of A: 8 KiB + tile_n x 128 bytes of B, so more of them fit (B's ring is what
    keeps DRAM busy at skinny shapes): 14, 9 and 5 stages against 9, 7 and 4 for 128 rows."""
    for tile_n, deep, tall in ((64, 14, 9), (128, 9, 7), (256, 5, 4)):
        o = hopper_options.Options(tile=(64, tile_n, 64), **UNIFORM)
        cfg, _ = hopper_options.config_for(16, 8192, o)
        assert (o.tile_m, cfg.tile_m, cfg.consumer_warpgroups, cfg.stages) == (64, 64, 1, deep)
        budget = hopper_options.stage_budget(o.tile, "register")
        assert budget.a_bytes == 64 * 64 * 2 and budget.b_bytes == tile_n * 64 * 2
        assert hopper_options.stage_count((128, tile_n, 64), "register") == tall
    assert hopper_options.config_for(4096, 4096)[0].consumer_warpgroups == 2     # the default: 128 rows
    staged = hopper_options.stage_budget((64, 256, 64), "staged")
    assert staged.epilogue_bytes == 64 * 32 * 2 * hopper_options.STAGED_BUFFERS   # (64 x 32) sub-tile buffers


@pytest.mark.parametrize("tile", [(256, 128, 64), (32, 128, 64), (96, 128, 64), (64, 96, 64), (64, 320, 64),
                                  (64, 128, 32), (64, 128)])
def test_options_refuse_tiles_the_kernel_does_not_build(tile):
    with pytest.raises(ValueError, match=r"tile_m one of \(64, 128\).*cluster_m=2.*got"):
        hopper_options.Options(tile=tile)
    with pytest.raises(ValueError, match=r"tile_m one of \(64, 128\)"):
        hopper_host.compile_gemm(16, 8192, 4096, tile=tile)


def test_the_small_m_candidates_have_short_names_and_are_never_chosen_unmeasured():
    """The sweep's figures label them by rows too; the rule picks only what the recorded sweep measured."""
    from gemm_kernels import configs, rule, sweep_plot
    small_m = [n for n, o in configs.HOPPER_CANDIDATES.items() if o.tile_m == 64]
    assert len(small_m) >= 3 and sweep_plot.short_name("64x128 stream-k cluster1") == "64x128sk1"
    learned = rule.learned()
    unmeasured = [n for n in small_m if learned is None or n not in learned.candidates]
    for shape in [(16, 8192, 4096), (64, 8192, 4096), (256, 4096, 4096), *(learned.shapes if learned else ())]:
        assert rule.choose(*shape) not in unmeasured


def test_the_small_m_tile_keeps_every_other_option():
    """Pairs, the balanced schedule, stream-K, the staged epilogue, the trace: none depends on the tile's rows."""
    for kw in (dict(cluster_m=2), dict(schedule="balanced"), dict(schedule="uniform", stream_k=True),
               dict(epilogue="staged"), dict(trace=True), dict(persistent=False, schedule="uniform")):
        cfg, plan = hopper_options.config_for(500, 8192, hopper_options.Options(tile=(64, 128, 64), **kw))
        assert cfg.tile_m == 64 and plan.tile_m == 64 * cfg.cluster_m


@pytest.mark.parametrize("tile_m", [64, 128])
def test_a_short_m_loads_only_the_rows_it_has(tile_m):
    """Where M is shorter than a tile, A's TMA box is the power of two of rows (at least 8) that covers it; a
    whole tile otherwise, in a CTA pair, or when asked (`short_a_box=False`)."""
    want = {1: 8, 8: 8, 9: 16, 16: 16, 17: 32, 32: 32, 33: 64, 64: 64, 65: 128, 500: None}
    for M, rows in want.items():
        rows = rows if rows is not None and rows < tile_m else None
        o = hopper_options.Options(tile=(tile_m, 128, 64), **UNIFORM)
        cfg = hopper_options.config_for(M, 8192, o)[0]
        assert cfg.a_rows == rows, M
        assert cfg.a_box_rows == (rows or tile_m)
        for other in (dict(cluster_m=2), dict(short_a_box=False)):
            assert hopper_options.config_for(M, 8192, hopper_options.Options.of(o, **other))[0].a_rows is None


@pytest.mark.parametrize("M,rows", [(16, 16), (20, 32), (64, 64)])
def test_the_ring_waits_for_the_bytes_of_the_short_a_box(M, rows):
    """Each stage's barrier expects A's box (rows x 64 bf16) and B's (tile_n x 64 bf16): a box of the wrong size
    would hang the ring or let the WGMMAs read a stage still loading."""
    art = compiled(M, 8192, 4096, **small(64))
    armed = set(re.findall(r"mov\.b32 \t%r\d+, (\d+);\n\tmbarrier\.arrive\.expect_tx", art.ptx))
    assert armed == {"4", str(rows * 128 + 64 * 128)}      # 4: the dynamic schedule's queue entries


# ------------------------------------------------------------------------------------------- CPU: the plan

def _covered(M, N, items, rows_per_item):
    pad = 256
    covered = torch.zeros(-(-M // rows_per_item) * rows_per_item, N + pad, dtype=torch.int32)
    for m0, n0, w in items:
        assert m0 % rows_per_item == 0
        covered[m0:m0 + rows_per_item, n0:n0 + w] += 1
    return covered


@pytest.mark.parametrize("M", [16, 77, 500])
@pytest.mark.parametrize("N", [1032, 8192])
@pytest.mark.parametrize("tile_n", WIDTHS)
@pytest.mark.parametrize("kw", [dict(UNIFORM), dict(schedule="balanced", cluster_m=1),
                                dict(schedule="uniform", cluster_m=2)], ids=["uniform", "balanced", "cluster2"])
def test_the_plan_covers_the_output_once_in_64_row_items(M, N, tile_n, kw):
    opts = hopper_options.Options(tile=(64, tile_n, 64), **kw)
    plan = hopper_options.plan_for(M, N, opts, gpus.H200)
    rows = 64 * opts.cluster_m
    assert plan.tile_m == rows and len({t.m0 for t in plan.items}) == -(-M // rows)
    covered = _covered(M, N, plan.items, rows)
    assert (covered[:M, :N] == 1).all()
    # the work list the kernel walks holds exactly those items, in bands of 64-row CTA tiles
    band = hopper_worklist.band_rows_for(4096, 64)
    work, slots = hopper_worklist.work_rows(plan.items, band, plan.slots, 64, False, tile_m=64)
    assert slots == 0 and sorted(r[:3] for r in work) == sorted(tuple(t) for t in plan.items)


@pytest.mark.parametrize("M,N,K", [(16, 8192, 4096), (77, 1032, 520), (500, 2048, 4096), (16, 4096, 1024)])
@pytest.mark.parametrize("tile_n", WIDTHS)
def test_stream_k_rows_cover_every_k_block_of_every_64_row_item_once(M, N, K, tile_n):
    opts = hopper_options.Options(tile=(64, tile_n, 64), **UNIFORM, stream_k=True)
    cfg, plan = hopper_options.config_for(M, N, opts)
    k_blocks = -(-K // hopper_options.TILE_K)
    rows, slots = hopper_worklist.work_rows(plan.items, hopper_worklist.band_rows_for(K, 64), plan.slots,
                                            k_blocks, True, tile_m=64)
    seen = {}
    cols = hopper_worklist.SEGMENT_COLS
    for row in rows:
        for s in range(cfg.segments):
            m0, n0, width, k0, n, role, flag, arg = row[s * cols:(s + 1) * cols]
            if n:
                seen.setdefault((m0, n0, width), []).extend(range(k0, k0 + n))
    assert sorted(seen) == sorted(tuple(t) for t in plan.items)
    assert all(sorted(ks) == list(range(k_blocks)) for ks in seen.values())
    assert (slots > 0) == (len(plan.items) % plan.slots != 0 and k_blocks > 1)


def test_bands_count_64_row_tiles_and_keep_their_a_within_the_l2_budget():
    for K in (64, 4096, 16384, 65536):
        rows = hopper_worklist.band_rows_for(K, 64)
        assert rows == 1 or rows * 64 * K * 2 <= hopper_worklist.BAND_A_BYTES
        assert rows == 16 or 2 * rows * 64 * K * 2 > hopper_worklist.BAND_A_BYTES
        assert rows >= hopper_worklist.band_rows_for(K)            # a 64-row band holds half the rows of A
    assert hopper_worklist.band_rows_for(16384, 64) == 16 and hopper_worklist.band_rows_for(16384) == 8
    plan = hopper_options.plan_for(4096, 1024, hopper_options.Options(tile=(64, 256, 64), **UNIFORM), gpus.H200)
    order = hopper_worklist.banded(list(plan.items), 16, tile_m=64)
    assert [t.m0 for t in order[:17]] == [64 * i for i in range(16)] + [0]   # 16 tile rows, then the next column


def test_the_stream_k_workspace_and_flags_follow_the_tile():
    """One fp32 partial of tile_m x tile_n per CTA and slot (`HopperGemm.partial`: warpgroup w of CTA r in slot
    s starts at ((s * cluster_m + r) * warpgroups + w) * 64 * tile_n), and one flag per consumer warpgroup."""
    for tile, cluster_m, wgs in (((64, 128, 64), 1, 1), ((64, 256, 64), 2, 1), ((128, 128, 64), 2, 2)):
        cfg, plan = hopper_options.config_for(500, 2048, tile=tile, schedule="uniform", cluster_m=cluster_m,
                                              stream_k=True)
        call = hopper_host._Call(cfg, plan, torch.zeros(1, 16, dtype=torch.int32), None, (0, 0, 0, 1, 1),
                                 partial_slots=5)
        counter, partials, _ = call.scratch(0)
        assert cfg.consumer_warpgroups == wgs
        assert partials.numel() == 5 * cluster_m * tile[0] * tile[1]
        assert counter.numel() == 2 + 5 * cluster_m * wgs and not counter.any()


# ------------------------------------------------------------------------------------------- CPU: SASS

SHAPE = (16, 8192, 4096)


@pytest.mark.parametrize("stream_k", [False, True], ids=["whole", "stream-k"])
@pytest.mark.parametrize("tile_n", WIDTHS)
def test_small_m_builds_issue_64_row_wgmmas_without_spills(tile_n, stream_k):
    """One warpgroup of 64 rows: 256 threads, HGMMA.64 x tile_n x 16, four per 64-deep K-block, in the K loop
    and in each of the tile_n / 32 K-blocks the deferred epilogue peels off; nothing spills."""
    art = compiled(*SHAPE, **small(tile_n, stream_k=stream_k))
    assert re.search(r"\.reqntid 256, 1, 1", art.ptx)
    hist = sass.histogram(art.sass)
    mmas = {op: n for op, n in hist.items() if op.startswith("HGMMA")}
    assert mmas == {f"HGMMA.64x{tile_n}x16.F32.BF16": 4 * (1 + tile_n // 32)}, mmas
    assert count(art, "LDL") == 0 and count(art, "STL") == 0, "register spills"
    assert count(art, "UTMALDG") > 0
    assert set(sass.registers(art.cubin).values()) == {232}     # one consumer warpgroup: 128*40 + 128*232 < 64K
    plain = compiled(*SHAPE, **small(tile_n, stream_k=stream_k, defer_epilogue=False))
    assert count(plain, f"HGMMA.64x{tile_n}x16.F32.BF16") == 4 and count(plain, "LDL") == count(plain, "STL") == 0


def test_the_128_row_build_keeps_its_three_warpgroups():
    art = compiled(4096, 4096, 4096, tile=(128, 256, 64), **UNIFORM)
    assert re.search(r"\.reqntid 384, 1, 1", art.ptx)


# Small-M builds whose K loops must keep WGMMAs in flight: (shape, options, K-loop copies, peeled K-blocks)
PIPELINED = {
    **{f"64x{n}": (SHAPE, small(n), 1, n // 32) for n in WIDTHS},
    **{f"64x{n}-stream-k": (SHAPE, small(n, stream_k=True), 1, n // 32) for n in WIDTHS},
    "64x128-plain": (SHAPE, small(128, defer_epilogue=False), 1, 0),
    "64x128-cluster2": ((500, 8192, 4096), small(128, cluster_m=2), 1, 4),
    "64x128-cluster2-stream-k": ((500, 8192, 4096), small(128, cluster_m=2, stream_k=True), 1, 4),
    "64x256-balanced-narrow": ((8192, 8192, 4096), dict(tile=(64, 256, 64), cluster_m=1), 2, 8),
    "64x256-staged": (SHAPE, small(256, epilogue="staged"), 1, 0),
    "64x128-trace": (SHAPE, small(128, trace=True), 1, 4),
    "64x128-fp16": (SHAPE, small(128, dtype=torch.float16), 1, 4),
}


@pytest.mark.parametrize("name", list(PIPELINED))
def test_small_m_wgmmas_are_not_serialized(name):
    """As test_gemm_hopper.test_wgmmas_are_not_serialized: when ptxas serializes WGMMAs (C7511/C7515) every HGMMA
    gets its own WARPGROUP.DEPBAR. Each K-loop copy waits twice (wait_group(1) in the loop, wait_group(0) after
    it) plus once per K-block a deferred epilogue peels off."""
    shape, kw, loops, peeled = PIPELINED[name]
    art = compiled(*shape, **kw)
    assert count(art, "HGMMA") >= 4 * loops
    assert count(art, "WARPGROUP.DEPBAR") == (2 + peeled) * loops
    narrow = hopper_options.config_for(*shape[:2], **kw)[0].narrow_n
    assert (narrow is not None) == (loops == 2)                   # a narrow width: a second K-loop copy


PTXAS = shutil.which("ptxas")


@pytest.mark.skipif(PTXAS is None, reason="needs a ptxas on PATH (the CUDA toolkit)")
@pytest.mark.parametrize("name", ["64x64", "64x256", "64x256-stream-k", "64x256-balanced-narrow"])
def test_ptxas_does_not_warn_that_it_serializes_the_wgmmas(name, tmp_path):
    """ptxas's own word, from the toolkit's ptxas on the build's PTX: it says 'wgmma.mma_async instructions are
    serialized' (C7511 or C7515) when it does (it said so of the first deferred-epilogue build, 928cf43)."""
    shape, kw, _, _ = PIPELINED[name]
    ptx = tmp_path / "k.ptx"
    ptx.write_text(compiled(*shape, **kw).ptx)
    run = subprocess.run([PTXAS, "-arch=sm_90a", str(ptx), "-o", str(tmp_path / "k.cubin")], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "serialized" not in run.stdout + run.stderr and not re.search(r"C751[0-5]", run.stdout + run.stderr)


# ------------------------------------------------------------------------------------------- GPU

# (M, N, K): M far below one tile, tails in every dimension, K-deep, a long N, more than 512 rows
GPU_SHAPES = [(16, 4096, 1024), (77, 1032, 520), (500, 2048, 4096), (64, 8192, 8192), (1000, 1032, 520)]
GPU_CONFIGS = [pytest.param(small(n, stream_k=sk), id=f"64x{n}{'-stream-k' if sk else ''}")
               for n in WIDTHS for sk in (False, True)]
# the options beside the candidates' ones, on fewer shapes
GPU_EXTRA = {
    "64x128-plain": small(128, defer_epilogue=False),
    "64x128-cluster2": small(128, cluster_m=2),
    "64x64-cluster2-stream-k": small(64, cluster_m=2, stream_k=True),
    "64x256-staged": small(256, epilogue="staged"),
    "64x128-one-per-item": small(128, persistent=False),
    "64x128-static": small(128, dynamic=False),
}


def fp32_reference(a, b):
    return a.float() @ b.float()


def _exact(M, N, K, kw, dtype=torch.bfloat16):
    # |a|, |b| <= 2 and K <= 8192: every partial sum is an integer below 2^24, exact in fp32 in any order (so also
    # when stream-K adds partial sums), and the only rounding is the final one, which the reference does alike
    g = torch.Generator(device="cuda").manual_seed(M * 131 + N * 7 + K)
    a = torch.randint(-2, 3, (M, K), device="cuda", generator=g).to(dtype)
    b = torch.randint(-2, 3, (K, N), device="cuda", generator=g).to(dtype)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)   # every element must be written
    c = hopper_host.gemm(a, b, out=out, **kw)
    assert c is out
    torch.testing.assert_close(c, fp32_reference(a, b).to(dtype), rtol=0, atol=0)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("kw", GPU_CONFIGS)
@pytest.mark.parametrize("M,N,K", GPU_SHAPES)
def test_small_integers_are_exact(M, N, K, kw):
    _exact(M, N, K, kw)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("kw", GPU_CONFIGS)
@pytest.mark.parametrize("M,N,K", GPU_SHAPES)
def test_random_inputs_match_fp32_reference(M, N, K, kw):
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    c = hopper_host.gemm(a, b, out=out, **kw)
    assert torch.isfinite(c).all(), "unwritten (NaN) output elements"
    ref = fp32_reference(a, b)
    rel = ((c.float() - ref).norm() / ref.norm()).item()
    assert rel < 1e-2, f"relative error {rel:.3e}"


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("name", list(GPU_EXTRA))
@pytest.mark.parametrize("M,N,K", [(77, 1032, 520), (500, 2048, 4096), (1000, 1032, 520)])
def test_every_other_option_is_exact_with_the_small_m_tile(M, N, K, name):
    _exact(M, N, K, GPU_EXTRA[name])


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("cluster_m", [1, 2])
def test_the_balanced_plan_of_64_row_tiles_is_exact_in_both_widths(cluster_m):
    M, N, K = 1000, 8192, 520      # 528 (pairs: 264) items with 240-wide ones in the last waves
    kw = dict(tile=(64, 256, 64), schedule="balanced", cluster_m=cluster_m)
    assert hopper_options.config_for(M, N, **kw)[0].narrow_n == 240
    _exact(M, N, K, kw)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("M,N,K", [(77, 1032, 520), (500, 2048, 4096)])
def test_fp16_is_exact_with_the_small_m_tile(M, N, K):
    _exact(M, N, K, small(128, stream_k=True), dtype=torch.float16)
    _exact(M, N, K, small(256), dtype=torch.float16)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("M", [1, 8, 13, 16, 24, 31])
@pytest.mark.parametrize("kw", [small(64), small(128, stream_k=True), small(256, epilogue="staged"),
                                dict(UNIFORM, tile=(128, 256, 64))], ids=["64x64", "64x128-stream-k",
                                                                          "64x256-staged", "128x256"])
def test_a_short_a_box_is_exact_whatever_the_unloaded_rows_hold(M, kw):
    """The rows of a stage below the short box are never loaded: a call of 64 rows of NaN and inf first
    leaves them full of it, and no output row of the short call may see it."""
    assert hopper_options.config_for(M, 1032, **kw)[0].a_rows is not None
    N, K = 1032, 520
    poison = torch.full((128, K), float("nan"), device="cuda", dtype=torch.bfloat16)
    poison[::2] = float("inf")
    hopper_host.gemm(poison, torch.ones(K, N, device="cuda", dtype=torch.bfloat16), **kw)
    _exact(M, N, K, kw)


# repeated calls of 64-row tiles leaving the counter at zero: test_gemm_hopper.py's
# test_dynamic_schedule_leaves_its_counter_at_zero covers them


@pytest.mark.gpu
@needs_hopper
def test_timeline_of_the_small_m_tile_records_every_row():
    M, N, K = 500, 8192, 1024
    a = torch.randint(-2, 3, (M, K), device="cuda").to(torch.bfloat16)
    b = torch.randint(-2, 3, (K, N), device="cuda").to(torch.bfloat16)
    c, frame = hopper_host.timeline(a, b, **small(128))
    assert torch.equal(c, fp32_reference(a, b).to(torch.bfloat16))
    call = hopper_host._call_for(M, N, K, a.get_device(), **small(128, trace=True))
    assert sorted(frame.row) == list(range(call.work.shape[0]))
    assert (frame.width == 128).all() and (frame.stored >= frame.mma_done).all()

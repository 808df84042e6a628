"""The Blackwell (sm_100a) GEMM: compiled here with no GPU and checked in its SASS/PTX; run on a B200 by the
`gpu` tests (`pytest -m gpu` on a compute capability 10.0 machine).

What the CPU tests prove about the builds (each compiled once per session, shapes drawn at random, tails
included):
  * the MMA is the pair form (UTCHMMA.2CTA) fed by 2-CTA TMA loads;
  * the register build has no shared-memory epilogue: no STSM, no vector STS, no TMA store, and its
    output leaves as 128-bit STG; the staged build has all of those (so the checks can fail);
  * the ring has the designed depth: 2 mbarriers per stage in the PTX, and the shared memory the kernel
    launches with is exactly stages x 32 KiB (+ 64 KiB staging buffer) + 1 KiB of barriers;
  * a balanced build issues one MMA shape per item width of its plan (M256 x N256 and N192 for 4096^2,
    N256 and N224 for 8192^2), read from the instruction descriptors in the PTX and found again in the SASS;
  * the work list, walked the way the kernel walks it, writes every 128 x 32 subtile of c exactly once and
    feeds each item's MMA exactly the B columns of its output (seed 004's three shapes, and random tails).
"""
import dataclasses
import random
import re

import pytest
import torch

from gemm_kernels import blackwell, blackwell_host, configs, sass_checks
from gemm_kernels import blackwell_options as bw
from gemm_kernels import stages as stages_lib
from gemm_kernels import waves
from workbook import sass

KIB = 1024
IS_B200 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (10, 0)
needs_b200 = pytest.mark.skipif(not IS_B200, reason="needs a B200-class GPU (compute capability 10.0)")
B200_PAIRS = 74  # 148 SMs / 2: the slots of B200's spec, on a machine without one
# seed 004, section 2: items of the balanced schedule per square shape
SEED_ITEMS = {4096: 296, 8192: 1036, 16384: 4144}


def random_shape(rng: random.Random, max_tiles: int = 8) -> tuple[int, int, int]:
    """M any, N and K multiples of 8 (the alignment rule); mostly not multiples of the tile."""
    M = rng.randint(bw.TILE_M, bw.TILE_M * max_tiles)
    N = bw.ALIGN_ELEMENTS * rng.randint(bw.TILE_N // 8, bw.TILE_N * max_tiles // 8)
    K = bw.ALIGN_ELEMENTS * rng.randint(1, bw.TILE_K * 16 // 8)
    return M, N, K


@pytest.fixture(scope="module")
def builds():
    """{epilogue: (stages, shape, Artifacts)} for the two designed builds, compiled once."""
    rng = random.Random()
    out = {}
    for epilogue in bw.EPILOGUES:
        shape = random_shape(rng)
        stages = bw.DEFAULT_STAGES[epilogue]
        out[epilogue] = (stages, shape, blackwell_host.compile_gemm(*shape, stages=stages, epilogue=epilogue))
    return out


@pytest.fixture(scope="module")
def balanced_builds():
    """{square size: (epilogue, Artifacts)}: the balanced schedule at 4096^2 (N192 items) and 8192^2 (N224
    items), each epilogue once, K drawn at random (the plan depends on M and N only)."""
    rng = random.Random()
    epilogues = list(bw.EPILOGUES)
    rng.shuffle(epilogues)
    return {size: (epilogue, blackwell_host.compile_gemm(size, size, bw.ALIGN_ELEMENTS * rng.randint(1, 256),
                                             epilogue=epilogue, schedule="balanced"))
            for size, epilogue in zip((4096, 8192), epilogues)}


def opcodes(art) -> set[str]:
    return set(sass.histogram(art.sass))


def launch_smem_bytes(art) -> int:
    """The dynamic shared memory the host code launches the kernel with, read from the compiled host IR.

    The DSL sizes it from the kernel's allocations (a constant next to the block size); we expect exactly
    one constant in the range a persistent GEMM CTA can use."""
    found = {int(v) for v in re.findall(r"constant\((\d+) : i64\)", str(art.compiled.ir_module))
             if 64 * KIB <= int(v) <= 232448}
    assert len(found) == 1, f"expected one launch shared-memory constant in the host IR, found {sorted(found)}"
    return found.pop()


# ----------------------------------------------------------------------------------- SASS and PTX evidence

@pytest.mark.parametrize("epilogue", bw.EPILOGUES)
def test_mma_is_the_two_cta_pair_form(builds, epilogue):
    ops = opcodes(builds[epilogue][2])
    mma = {op for op in ops if op.startswith("UTC") and "MMA" in op}
    assert mma == {"UTCHMMA.2CTA"}, f"expected only the 2-CTA bf16 tcgen05 MMA, got {sorted(mma)}"
    assert "tcgen05.mma.cta_group::2" in builds[epilogue][2].ptx
    assert any(op.startswith("UTMALDG") and "2CTA" in op for op in ops), "A/B must arrive by 2-CTA TMA loads"
    assert any(op.startswith("LDTM") for op in ops), "the epilogue reads the accumulator from TMEM"


def test_register_epilogue_has_no_shared_memory_buffer(builds):
    ops = opcodes(builds["register"][2])
    assert not any(op.startswith("STSM") for op in ops), "stmatrix means a shared-memory epilogue buffer"
    vector_sts = {op for op in ops if op.startswith("STS.") and op.split(".")[1] in ("64", "128")}
    assert not vector_sts, f"vector shared-memory stores in the register build: {vector_sts}"
    assert not any(op.startswith("UTMASTG") for op in ops), "the register build must not TMA-store"
    stg = {op for op in ops if op.startswith("STG")}
    # the predicated stores at the edges of c are 128-bit too: N is a multiple of 8
    assert stg == {"STG.E.128"}, f"the output should leave as 128-bit global stores only, got {sorted(stg)}"


def test_staged_epilogue_goes_through_shared_memory(builds):
    ops = opcodes(builds["staged"][2])
    assert any(op.startswith("STSM") or op in ("STS.128", "STS.64") for op in ops)
    assert any(op.startswith("UTMASTG") for op in ops)
    assert not any(op.startswith("STG") for op in ops), "the staged build writes C only by TMA"


@pytest.mark.parametrize("epilogue", bw.EPILOGUES)
def test_ring_depth_in_the_ptx(builds, epilogue):
    stages, _, art = builds[epilogue]
    # a full and an empty mbarrier per stage and per accumulator buffer, plus the pair's TMEM-free barrier
    assert art.ptx.count("mbarrier.init.shared") == 2 * stages + 2 * blackwell.ACC_BUFFERS + 1


@pytest.mark.parametrize("epilogue", bw.EPILOGUES)
def test_launch_shared_memory_is_the_stage_budget(builds, epilogue):
    stages, _, art = builds[epilogue]
    budget = bw.stage_budget(stages, epilogue)
    assert budget.stage_bytes == 32 * KIB  # 128 x 64 of A + 64 x 128 of B, bf16, per CTA
    assert budget.epilogue_bytes == (64 * KIB if epilogue == "staged" else 0)
    expected = stages * budget.stage_bytes + budget.epilogue_bytes + budget.reserved_bytes
    assert launch_smem_bytes(art) == expected
    if epilogue == "register":
        assert expected == 7 * 32 * KIB + 1 * KIB


def test_stage_arithmetic_matches_the_builds():
    register = stages_lib.stages((bw.TILE_M, bw.TILE_N, bw.TILE_K), "register", bw.ARCH)
    assert register.stages == bw.DEFAULT_STAGES["register"] == 7
    staged = stages_lib.stages((bw.TILE_M, bw.TILE_N, bw.TILE_K), "staged", bw.ARCH)
    # seed 004's staged kernel ran 4 stages beside its 64 KiB buffer; the arithmetic has room for one more
    assert staged.stages >= bw.DEFAULT_STAGES["staged"] == 4
    with pytest.raises(ValueError):
        bw.stage_budget(register.stages + 1, "register")
    with pytest.raises(ValueError):
        bw.stage_budget(staged.stages + 1, "staged")


def test_dump_dir_keeps_ptx_and_cubin(tmp_path):
    M, N, K = random_shape(random.Random(), max_tiles=2)
    art = blackwell_host.compile_gemm(M, N, K, dump_dir=tmp_path)
    assert list(tmp_path.glob("*.ptx")) and list(tmp_path.glob("*.cubin"))
    assert art.arch == "sm_100a" and art.cubin


# ----------------------------------------------------------------------------------- MMA width per item

def mma_shapes(art) -> set[tuple[int, int]]:
    return {sass_checks.mma_shape(idesc) for idesc in sass_checks.mma_descriptors(art.ptx)}


@pytest.mark.parametrize("epilogue", bw.EPILOGUES)
def test_uniform_builds_issue_only_the_n256_mma(builds, epilogue):
    assert mma_shapes(builds[epilogue][2]) == {(bw.TILE_M, bw.TILE_N)}


@pytest.mark.parametrize("size, narrow", [(4096, 192), (8192, 224)])
def test_balanced_build_issues_one_mma_shape_per_item_width(balanced_builds, size, narrow):
    epilogue, art = balanced_builds[size]
    widths = bw.widths_of(bw.plan(size, size, schedule="balanced"))
    assert widths == (bw.TILE_N, narrow)  # seed 004: N192 tiles at 4096^2, N224 at 8192^2
    assert mma_shapes(art) == {(bw.TILE_M, w) for w in widths}, f"{epilogue} build"
    # the same descriptors reach the SASS: the pair MMA is one opcode whose shape is its idesc operand
    ops = opcodes(art)
    assert {op for op in ops if op.startswith("UTC") and "MMA" in op} == {"UTCHMMA.2CTA"}
    for idesc in sass_checks.mma_descriptors(art.ptx):
        assert re.search(rf"UMOV UR\d+, 0x{idesc:x}\b", art.sass), f"idesc 0x{idesc:x} not set in the SASS"


def test_descriptor_decoding_on_known_values():
    # an M256 x N256 and an M128 x N64 bf16 descriptor, built from the PTX ISA field positions
    assert sass_checks.mma_shape((256 >> 4) << 24 | (256 >> 3) << 17 | 0x10490) == (256, 256)
    assert sass_checks.mma_shape((128 >> 4) << 24 | (64 >> 3) << 17 | 0x10490) == (128, 64)
    with pytest.raises(ValueError, match="not a constant"):
        sass_checks.mma_descriptors("tcgen05.mma.cta_group::2.kind::f16 [%r1], %rd1, %rd2, %r9, %p1;")


# ----------------------------------------------------------------------------------- the work list

def kernel_walk(work, M: int, N: int):
    """Walk the work list as the kernel does and count what it writes, in pure Python.

    Pair p of P = min(items, slots) runs items p, p + P, ...; for item (m0, n0, w), CTA r of the pair
    (1) loads B columns [n0 + r*w/2, n0 + r*w/2 + 128) and its MMA reads the first w/2 of them,
    (2) writes the 128 x 32 subtiles (m0/128 + r, n0/32 + s) for s < w/32, clipped to the matrix.
    Returns (writes per subtile of c [ceil(M/128), ceil(N/32)], list of B-column mismatches)."""
    rows, cols = -(-M // bw.ROWS_PER_CTA), -(-N // bw.EPI_SUBTILE_N)
    writes = torch.zeros(rows, cols, dtype=torch.int32)
    mismatches = []
    pairs = min(len(work.items), work.slots)
    for p in range(pairs):
        for m0, n0, w in work.items[p::pairs]:
            mma_columns = []
            for r in range(bw.CTAS_PER_PAIR):
                origin = n0 + r * (w // bw.CTAS_PER_PAIR)
                mma_columns += range(origin, origin + w // bw.CTAS_PER_PAIR)
                assert w // bw.CTAS_PER_PAIR <= bw.TILE_N // bw.CTAS_PER_PAIR  # inside the 128-column box
                row_tile = m0 // bw.ROWS_PER_CTA + r
                for s in range(w // bw.EPI_SUBTILE_N):
                    col_tile = n0 // bw.EPI_SUBTILE_N + s
                    if row_tile < rows and col_tile < cols:  # the stores past the edges are predicated off
                        writes[row_tile, col_tile] += 1
            if mma_columns != list(range(n0, n0 + w)):
                mismatches.append((m0, n0, w))
    return writes, mismatches


@pytest.mark.parametrize("size", sorted(SEED_ITEMS))
def test_balanced_work_list_covers_c_once_at_the_seed_shapes(size):
    work = bw.plan(size, size, schedule="balanced")
    assert len(work.items) == SEED_ITEMS[size] == work.slots * (SEED_ITEMS[size] // B200_PAIRS)
    assert work.slots == B200_PAIRS and work.last_wave_fill == 1.0
    writes, mismatches = kernel_walk(work, size, size)
    assert not mismatches
    assert torch.equal(writes, torch.ones_like(writes)), "every subtile of c written exactly once"
    # the walk sees a broken list: an item dropped, or one doubled
    for broken in (work.items[:-1], work.items[:-1] + work.items[:1]):
        bad, _ = kernel_walk(dataclasses.replace(work, items=broken), size, size)
        assert not torch.equal(bad, torch.ones_like(bad))


def test_work_lists_cover_c_once_with_tails():
    rng = random.Random()
    for _ in range(6):
        M, N, _ = random_shape(rng, max_tiles=40)
        for schedule in bw.SCHEDULES:
            work = bw.plan(M, N, schedule=schedule)
            writes, mismatches = kernel_walk(work, M, N)
            assert not mismatches and torch.equal(writes, torch.ones_like(writes)), (M, N, schedule)
            assert work.slots == B200_PAIRS
            if schedule == "uniform":
                assert bw.widths_of(work) == (bw.TILE_N,)


def test_balanced_plan_is_the_planners():
    rng = random.Random()
    M, N = bw.TILE_M * rng.randint(8, 64), bw.TILE_N * rng.randint(8, 64)
    expected = waves.plan(M, N, gpu="b200", tile_m=bw.TILE_M, tile_ns=bw.TILE_WIDTHS, balanced=True)
    assert bw.plan(M, N, schedule="balanced").items == expected.items


@pytest.mark.parametrize("item", [(0, 0, 128), (128, 0, 256), (0, 16, 224), (0, 1024, 256), (1024, 0, 256)])
def test_items_the_kernel_cannot_run_are_refused(item):
    with pytest.raises(ValueError, match="work item"):
        bw.check_items([item], 1024, 1024)


# ----------------------------------------------------------------------------------- errors

@pytest.mark.parametrize("shape, match", [
    ((256, 200, 60), "K=60 is not a multiple of 8"),
    ((256, 204, 64), "N=204 is not a multiple of 8"),
    ((0, 256, 64), "M must be a positive int"),
    ((256.0, 256, 64), "M must be a positive int"),
    ((256, 256, -8), "K must be a positive int"),
])
def test_bad_shapes_are_named(shape, match):
    with pytest.raises(ValueError, match=match):
        blackwell_host.compile_gemm(*shape)


@pytest.mark.parametrize("kwargs, match", [
    ({"epilogue": "smem"}, "epilogue"),
    ({"stages": 1}, "stages"),
    ({"stages": 8, "epilogue": "register"}, "do not fit"),
    ({"stages": 6, "epilogue": "staged"}, "do not fit"),
    ({"schedule": "dynamic"}, "schedule"),
    ({"arch": "sm_90a"}, "sm_100a"),
])
def test_bad_builds_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        blackwell_host.compile_gemm(1024, 1024, 256, **kwargs)


@pytest.mark.parametrize("widths", [(), (256, 256), (192, 256), (256, 128)])
def test_bad_width_sets_are_named(widths):
    with pytest.raises(ValueError, match="widths"):
        blackwell.Sm100Gemm(7, "register", torch.bfloat16, widths)


def test_gemm_refuses_cpu_tensors():
    a = torch.randn(256, 64, dtype=torch.bfloat16)
    b = torch.randn(64, 256, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="CUDA"):
        blackwell_host.gemm(a, b)
    with pytest.raises(ValueError, match="bf16 or both fp16"):
        blackwell_host.gemm(a.float(), b.float())
    with pytest.raises(ValueError, match=r"\[M, K\]"):
        blackwell_host.gemm(a, b[:32])


def test_bench_configs_are_valid_builds():
    named = configs.BLACKWELL
    assert [(o.epilogue, o.schedule) for o in named.values()] == [
        ("staged", "uniform"), ("register", "uniform"), ("register", "balanced")]
    for options in named.values():
        assert isinstance(options, bw.Options)
        bw.stage_budget(options.stages, options.epilogue)  # fits, or raises


# ----------------------------------------------------------------------------------- on a B200

def _reference(a, b):
    return (a.float() @ b.float()).to(a.dtype)


def _balanced_shape(rng: random.Random, tails: bool) -> tuple[int, int]:
    """An (M, N) whose balanced plan really has narrow items (most shapes' does; draw until one does)."""
    while True:
        M = rng.randint(8 * bw.TILE_M, 24 * bw.TILE_M) if tails else bw.TILE_M * rng.randint(8, 24)
        N = bw.ALIGN_ELEMENTS * rng.randint(256, 768) if tails else bw.TILE_N * rng.randint(8, 24)
        if len(bw.widths_of(bw.plan(M, N, schedule="balanced"))) > 1:
            return M, N


@pytest.mark.gpu
@needs_b200
@pytest.mark.parametrize("schedule", bw.SCHEDULES)
@pytest.mark.parametrize("epilogue", bw.EPILOGUES)
@pytest.mark.parametrize("dtype", bw.DTYPES)
def test_matches_torch_on_random_inputs(schedule, epilogue, dtype):
    rng = random.Random()
    # more items than CTA pairs, so every pair walks several items and both accumulators are reused
    M, N = _balanced_shape(rng, tails=False)
    K = bw.TILE_K * rng.randint(1, 64)
    a = torch.randn(M, K, device="cuda", dtype=dtype)
    b = torch.randn(K, N, device="cuda", dtype=dtype)
    c = blackwell_host.gemm(a, b, epilogue=epilogue, schedule=schedule)
    torch.cuda.synchronize()
    ref = a.float() @ b.float()
    # one rounding to the output type, on top of fp32 accumulation in a different order
    torch.testing.assert_close(c.float(), ref, rtol=1e-2, atol=1e-2 * K ** 0.5)


@pytest.mark.gpu
@needs_b200
@pytest.mark.parametrize("schedule", bw.SCHEDULES)
@pytest.mark.parametrize("epilogue", bw.EPILOGUES)
def test_exact_on_small_integers_with_tails(schedule, epilogue):
    """Small-integer inputs make every product and partial sum exact in fp32, and |c| < 256 is exact in
    bf16, so any misplaced, dropped or doubled subtile, or a tail element read or written wrongly, shows up as
    an exact mismatch. M, N and K are drawn off the tile grid (N, K multiples of 8)."""
    rng = random.Random()
    M, N = _balanced_shape(rng, tails=True)
    K = bw.ALIGN_ELEMENTS * rng.randint(1, 64)  # mostly a K tail too
    a = torch.randint(-2, 3, (M, K), device="cuda").to(torch.bfloat16)
    b = torch.randint(-1, 2, (K, N), device="cuda").to(torch.bfloat16)
    # a guard row past the end of c: predicated or clipped stores must not spill into it
    buffer = torch.full((M + 1, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    out = buffer[:M]
    c = blackwell_host.gemm(a, b, epilogue=epilogue, schedule=schedule, out=out)
    torch.cuda.synchronize()
    assert c.data_ptr() == out.data_ptr()
    assert torch.equal(c, _reference(a, b)), "every output element must be written, exactly"
    assert torch.isnan(buffer[M]).all(), "a store went past the last row of c"


@pytest.mark.gpu
@needs_b200
@pytest.mark.parametrize("size", sorted(SEED_ITEMS)[:2])
def test_seed_shapes_balanced_match_torch(size):
    """seed 004's 4096^3 (N192 items) and 8192^3 (N224 items) through the balanced schedule."""
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    c = blackwell_host.gemm(a, b, schedule="balanced")
    torch.cuda.synchronize()
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=1e-2, atol=1e-2 * size ** 0.5)


@pytest.mark.gpu
@needs_b200
def test_gpu_input_errors():
    a = torch.randn(256, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="contiguous"):
        blackwell_host.gemm(a, b.t().contiguous().t())
    with pytest.raises(ValueError, match="out"):
        blackwell_host.gemm(a, b, out=torch.empty(256, 256, device="cuda", dtype=torch.float16))
    with pytest.raises(ValueError, match="N=252 is not a multiple of 8"):
        blackwell_host.gemm(a, torch.randn(128, 252, device="cuda", dtype=torch.bfloat16))

"""The CuTe DSL primer (workbook.primer): every lesson kernel compiled for its arch with no GPU and its SASS
read; the layout helpers checked against independent formulas; on a GPU (`pytest -m gpu`), every kernel run
on fresh random inputs into poisoned outputs, tails included, and compared with torch.
"""
from __future__ import annotations

import random
import re

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402

from workbook import sass  # noqa: E402
from workbook.primer import (draw, exercises, layouts, pipeline, tcgen05_tile,  # noqa: E402
                             tma_copy, trace_time, vector_add, wgmma_tile)

CAPABILITY = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
gpu = pytest.mark.gpu
needs_sm90_or_sm100 = pytest.mark.skipif(CAPABILITY not in ((9, 0), (10, 0)),
                                         reason="needs an sm_90 or sm_100 GPU")
needs_hopper = pytest.mark.skipif(CAPABILITY != (9, 0), reason="needs an sm_90 GPU (H100/H200)")
needs_blackwell = pytest.mark.skipif(CAPABILITY != (10, 0), reason="needs an sm_100 GPU (B200/GB200)")
SEED = random.randrange(2**31)   # fresh inputs every session; failures print it


def _with_seed(report: str) -> str:
    """For assert_close's msg: torch's own mismatch report (which elements, how far off), then the seed."""
    return f"{report}\nseed {SEED}"


def ops(art: sass.Artifacts):
    return sass.histogram(art.sass)


def count(art: sass.Artifacts, prefix: str) -> int:
    """How many instructions have an opcode starting with `prefix` ("HGMMA", "SYNCS.ARRIVE", ...)."""
    return sum(n for op, n in ops(art).items() if op.startswith(prefix))


# ------------------------------------------------------------------ CPU: each kernel's SASS

@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_vector_add_is_two_loads_an_add_and_a_store(arch):
    h = sass.histogram(vector_add.compile(arch).sass, base=True)
    assert (h["LDG"], h["FADD"], h["STG"]) == (2, 1, 1), h


def test_scale_issues_one_load_multiply_store_per_value_of_the_thread():
    per_thread = layouts.TILE[0] * layouts.TILE[1] // (layouts.THREADS[0] * layouts.THREADS[1])
    h = sass.histogram(layouts.compile(cols=200).sass, base=True)
    assert h["LDG"] == h["FMUL"] == h["STG"] == per_thread, h
    assert h["ISETP"] >= per_thread      # every value is guarded by its coordinate


@pytest.mark.parametrize("coeffs", [(0.5, 3.0), (0.5, 1.5, -3.0, 2.0, 0.25, 7.0)])
@pytest.mark.parametrize("relu", [False, True])
def test_polyval_unrolls_horner_at_trace_time_and_loops_on_the_gpu(coeffs, relu):
    h = sass.histogram(trace_time.compile(coeffs, relu).sass, base=True)
    assert h["FFMA"] == len(coeffs) - 1, h          # range_constexpr: one FFMA per coefficient
    assert h["FMNMX"] == (1 if relu else 0), h      # const_expr: the branch not taken is not compiled
    assert h["LDG"] == 1 and h["STG"] == 1, h       # cutlass.range: a loop, not unrolled


def test_trace_then_run_prints_at_trace_time(capsys):
    trace_time.trace_then_run(cutlass.Int32(5), 2)
    out = capsys.readouterr().out
    assert "trace: n = ?" in out and "unrolled step 1" in out and "unrolled step 2" not in out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tma_copy_is_one_tma_load_and_store_behind_one_mbarrier(dtype):
    art = tma_copy.compile(200, dtype)
    assert count(art, "UTMALDG") == 1 and count(art, "UTMASTG") == 1, ops(art)
    assert count(art, "SYNCS.ARRIVE.TRANS64") == 1 and count(art, "SYNCS.PHASECHK") >= 1, ops(art)
    assert count(art, "LDG") == 0 and count(art, "STG") == 0, ops(art)   # no thread touches the data
    expect = tma_copy.tx_bytes(cutlass.Float32 if dtype == torch.float32 else cutlass.BFloat16)
    assert expect == 64 * 64 * (4 if dtype == torch.float32 else 2)
    # the byte count the barrier is armed with is the tile's, as a constant in the PTX
    assert re.search(rf"mov\.b32\s+%r\d+, {expect};", art.ptx) and "mbarrier.arrive.expect_tx" in art.ptx


# a K-major bf16 tile with K = 16, 32, 64 has rows of 32, 64, 128 bytes: one row of the SW32, SW64, SW128
# swizzle atom, i.e. CuTe's Swizzle<1|2|3, 4, 3> on byte addresses and a WGMMA descriptor layout type
# (bits 62-63) of 3, 2, 1
SWIZZLE_BITS = {16: 1, 32: 2, 64: 3}
DESCRIPTOR_SWIZZLE = {16: 3, 32: 2, 64: 1}


def _descriptors(ptx: str):
    """(layout type, stride byte offset in bytes) of the constant part of each smem descriptor in the PTX."""
    consts = [int(c) % 2**64 for c in re.findall(r"or\.b64\s+%rd\d+, %rd\d+, (-?\d+);", ptx)]
    return [(d >> 62, ((d >> 32) & 0x3FFF) * 16) for d in consts]


@pytest.mark.parametrize("k, n_tile", [(16, 64), (64, 128), (32, 8), (16, 8), (16, 24), (64, 56)])
def test_wgmma_tile_issues_k_over_16_hgmma_inside_fence_and_wait(k, n_tile):
    art = wgmma_tile.compile(k, n_tile)
    assert ops(art)[f"HGMMA.64x{n_tile}x16.F32.BF16"] == k // 16, ops(art)
    assert count(art, "WARPGROUP.ARRIVE") == 1 and count(art, "WARPGROUP.DEPBAR") == 1, ops(art)
    assert count(art, "UTMALDG") == 2
    assert wgmma_tile.tx_bytes(k, n_tile) == (64 + n_tile) * k * 2
    assert re.search(rf"mov\.b32\s+%r\d+, {wgmma_tile.tx_bytes(k, n_tile)};", art.ptx)
    sequence = [i.base for i in sass.instructions(art.sass) if i.base in ("WARPGROUP", "HGMMA", "STG")]
    assert sequence.index("HGMMA") > sequence.index("WARPGROUP") and sequence[-1] == "STG"
    # both tiles arrive by 2-D TMA boxes one swizzle row (K elements) wide: a swizzled box is at most one
    # swizzle row wide, so a 1-D box (what an unswizzled, contiguous 8 x 16 tile of B coalesces to) means
    # TMA stores the tile unswizzled while the WGMMA reads it swizzled
    assert art.ptx.count("cp.async.bulk.tensor.2d") == 2 and "cp.async.bulk.tensor.1d" not in art.ptx
    (a_type, a_sbo), (b_type, b_sbo) = _descriptors(art.ptx)[:2]
    assert a_type == b_type == DESCRIPTOR_SWIZZLE[k] and a_sbo == 8 * 2 * k, _descriptors(art.ptx)
    assert b_sbo == (8 * 2 * k if n_tile > 8 else 0)   # one 8-row group of B: no stride to the next


def _wgmma_reads(row: int, col: int, k: int, sbo: int) -> int:
    """The byte (from the tile's 1024-byte-aligned start) where a WGMMA with a K-major SW32/64/128
    descriptor reads element (row, col) of a tile with K = k bf16: 8-row atoms `sbo` bytes apart, rows of 2k
    bytes, then the swizzle of the descriptor's mode (PTX ISA, matrix descriptor): byte-address bits 7.. XORed
    into bits 4.., one bit for SW32, two for SW64, three for SW128."""
    return layouts.swizzle(SWIZZLE_BITS[k], 4, 3, (row // 8) * sbo + (row % 8) * 2 * k + 2 * col)


@pytest.mark.parametrize("k", wgmma_tile.K_CHOICES)
def test_wgmma_tma_writes_b_where_the_wgmma_reads_it(k):
    """The layout the host hands the TMA for B (the byte address each element is stored at) against the
    address the WGMMA descriptor reads it from, for every N the kernel accepts."""
    def fn():
        found = {}
        for n in range(8, 257, 8):
            _, b = wgmma_tile._smem_layouts((64, n, k))
            tma = wgmma_tile.one_stage(b)
            rows = range(n) if n <= 24 else ()
            found[n] = (str(b.inner), str(tma.inner), str(tma.outer), str(cute.slice_(b.outer, (None, None, 0))),
                        [[tma.outer((r, c)) for c in range(k)] for r in rows])
        return found
    for n, (mma_swizzle, tma_swizzle, tma_outer, stage0, elements) in layouts.trace(fn).items():
        assert tma_swizzle == mma_swizzle == f"S<{SWIZZLE_BITS[k]},4,3>", n
        assert tma_outer == stage0, n
        bits, base, shift = (int(v) for v in re.fullmatch(r"S<(\d+),(\d+),(\d+)>", tma_swizzle).groups())
        for r, row in enumerate(elements):
            for c, e in enumerate(row):
                assert layouts.swizzle(bits, base, shift, 2 * e) == _wgmma_reads(r, c, k, 8 * 2 * k), (n, r, c)


@pytest.mark.parametrize("k, n_tile", [(16, 32), (16, 64), (64, 128), (16, 256)])
def test_tcgen05_tile_has_mma_commit_tmem_load_and_its_fence(k, n_tile):
    art = tcgen05_tile.compile(k, n_tile)
    assert count(art, "UTCHMMA") >= k // 16, ops(art)
    assert ops(art)["LDTM.x32"] == n_tile // tcgen05_tile.LOAD_COLUMNS, ops(art)
    assert count(art, "UTCBAR") == 1 and count(art, "UTMALDG") == 2, ops(art)
    assert count(art, "HGMMA") == 0
    # swizzled TMA boxes are one swizzle row wide: the layouts handed to the TMA kept their swizzle
    assert art.ptx.count("cp.async.bulk.tensor.2d") == 2 and "cp.async.bulk.tensor.1d" not in art.ptx
    for ptx in ("tcgen05.alloc", "tcgen05.dealloc", "tcgen05.commit", "tcgen05.wait::ld"):
        assert ptx in art.ptx, ptx
    assert art.ptx.index("tcgen05.ld.") < art.ptx.index("tcgen05.wait::ld")


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_pipeline_has_one_tma_producer_and_mbarrier_waits(arch):
    art = pipeline.compile(arch)
    h = sass.histogram(art.sass, base=True)
    assert h["UTMALDG"] == 1 and h["SHFL"] == 1 and h["STG"] == 1, h
    assert count(art, "SYNCS.ARRIVE.TRANS64") >= 2, ops(art)   # the producer arms, the consumers release
    assert art.ptx.count("mbarrier.init") == 2 * pipeline.STAGES
    loads = {op: n for op, n in ops(art).items() if op.startswith("LDS")}
    assert sum(n * int(op.split(".")[-1]) // 32 if "." in op else n for op, n in loads.items()) == \
        pipeline.COLS_PER_THREAD, loads


# ------------------------------------------------------------------ CPU: layout helpers

def test_trace_hands_back_layout_algebra():
    assert layouts.trace(lambda: cute.coalesce(cute.make_layout((2, 4), stride=(1, 2)))) == "8:1"
    assert layouts.trace(lambda: cute.coalesce(cute.make_layout((2, 4), stride=(4, 1)))) == "(2,4):(4,1)"
    assert layouts.trace(lambda: cute.size(cute.make_layout((3, (2, 5))))) == 30
    assert layouts.trace(lambda: str(cute.zipped_divide(cute.make_layout((8, 16), stride=(16, 1)), (4, 8)))) == \
        "((4,8),(2,2)):((16,1),(64,8))"


def _offsets_by_formula(shape, stride):
    """Offsets of a rank-2 layout whose modes may be nested one level: column-major within a mode."""
    def mode(extent, strides, index):
        extent = extent if isinstance(extent, tuple) else (extent,)
        strides = strides if isinstance(strides, tuple) else (strides,)
        total = 0
        for e, s in zip(extent, strides):
            total += (index % e) * s
            index //= e
        return total
    size = lambda e: int(np.prod(e)) if isinstance(e, tuple) else e  # noqa: E731
    return np.array([[mode(shape[0], stride[0], i) + mode(shape[1], stride[1], j) for j in range(size(shape[1]))]
                     for i in range(size(shape[0]))])


def test_offsets_match_the_formula_on_random_layouts():
    rng = random.Random(SEED)
    cases = [((8, 16), (16, 1)), (((2, 4), (2, 8)), ((1, 16), (8, 64)))]
    for _ in range(3):
        shape = ((rng.randint(1, 4), rng.randint(1, 4)), rng.randint(1, 6))
        stride = ((rng.randint(0, 9), rng.randint(0, 30)), rng.randint(0, 50))
        cases.append((shape, stride))
    for shape, stride in cases:
        assert np.array_equal(layouts.offsets(shape, stride), _offsets_by_formula(shape, stride)), \
            (SEED, shape, stride)
    assert layouts.offsets((8, 16), (16, 1))[3, 5] == 3 * 16 + 5


def test_partition_owners_give_each_thread_its_strided_share():
    thread, value = layouts.partition_owners(layouts.TILE, layouts.THREADS, layouts.THREAD_STRIDE)
    rows, cols = np.indices(layouts.TILE)
    assert np.array_equal(thread, (rows % 4) * 32 + cols % 32)        # thread t at (t // 32, t % 32)
    assert np.array_equal(value, rows // 4 + 4 * (cols // 32))          # values column-major over (4, 2)


def test_mma_accumulator_owners_are_the_wgmma_fragment_layout():
    thread, value = layouts.mma_accumulator_owners(16)
    # PTX ISA, wgmma .m64nNk16 D fragment: warp w owns rows 16w..16w+15; lane l holds row l // 4 (+ 8) and
    # columns 2 (l % 4) + {0, 1} of each 8-column group; value v = col % 2 + 2 (row + 8) + 4 (group)
    for t in range(128):
        warp, lane = divmod(t, 32)
        for v in range(8):
            row = 16 * warp + lane // 4 + 8 * ((v // 2) % 2)
            col = 8 * (v // 4) + 2 * (lane % 4) + v % 2
            assert (thread[row, col], value[row, col]) == (t, v), (t, v, row, col)


def test_wgmma_smem_swizzle_is_the_128_byte_pattern():
    text, chunks = layouts.wgmma_smem_chunks(64)
    assert text.startswith("S<3,4,3>")
    assert np.array_equal(chunks, np.arange(8)[None, :] ^ np.arange(8)[:, None])   # chunk XOR (row % 8)
    assert layouts.swizzle(3, 4, 3, 3 << 7 | 5 << 4) == (3 << 7 | (5 ^ 3) << 4)
    _, narrow = layouts.wgmma_smem_chunks(16)
    assert sorted(narrow.ravel()) == sorted(list(range(8)) * 2)    # 32-byte rows: four share each 128-byte line


def test_pipeline_phases_flip_at_each_wrap():
    assert pipeline.phases(9, stages=4) == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1), (2, 1), (3, 1), (0, 0)]


def test_pipeline_schedule_hides_the_load_behind_enough_stages():
    one = pipeline.schedule(8, stages=1, load=3.0, use=1.0)
    assert one[-1]["end"] == 8 * (3.0 + 1.0)                       # every load exposed
    four = pipeline.schedule(8, stages=4, load=3.0, use=1.0)
    assert four[-1]["end"] == 3.0 + 8 * 1.0                        # only the first load exposed
    for rows in (one, four):
        for r in rows:
            assert r["start"] >= r["landed"] >= r["issue"] and r["end"] > r["start"]
        for a, b in zip(rows, rows[1:]):
            assert b["start"] >= a["end"]                          # one tile at a time
    assert [(r["slot"], r["phase"]) for r in four] == pipeline.phases(8, 4)
    with pytest.raises(ValueError):
        pipeline.schedule(0)


def test_exercise_checkers_accept_the_truth_and_reject_the_rest(capsys):
    for name, ex in exercises.EXERCISES.items():
        truth = ex.truth()
        assert exercises.check(name, truth)
        wrong = tuple(t + 1 for t in truth) if isinstance(truth, tuple) else truth + 1
        assert not exercises.check(name, wrong)
        assert not exercises.check(name, "not a number")
    assert "Hint" in capsys.readouterr().out
    with pytest.raises(KeyError, match="no exercise"):
        exercises.check("nope", 1)
    assert exercises.check_value("q", 3, 3, "h") and not exercises.check_value("q", 3.5, 3, "h")
    assert not exercises.check_value("q", True, 1, "h") and not exercises.check_value("q", float("inf"), 3, "h")


# ------------------------------------------------------------------ CPU: figures and listings

def test_draw_grid_writes_one_label_per_cell_and_marks_groups():
    thread, value = layouts.partition_owners((4, 8), (2, 4), (4, 1))
    fig = draw.owners(thread, value, show="both", group=4)
    ax = fig.axes[0]
    assert len(ax.texts) == thread.size and ax.texts[0].get_text() == f"{thread[0, 0]}.{value[0, 0]}"
    assert len(ax.lines) > 0                                     # thick lines between the groups
    assert len(draw.owners(thread, show="").axes[0].texts) == 0
    fig = draw.layout(layouts.offsets((2, 3), (3, 1)), highlight=(1, 2))
    assert [t.get_text() for t in fig.axes[0].texts] == ["0", "1", "2", "3", "4", "5"] and fig.axes[0].patches
    with pytest.raises(ValueError, match="2-D"):
        draw.layout(np.arange(3))
    with pytest.raises(ValueError, match="needs the value"):
        draw.owners(thread, show="value")
    with pytest.raises(ValueError, match="shape of colours"):
        draw.grid(np.zeros((2, 2), int), np.zeros((3, 3)))
    matplotlib.pyplot.close("all")


def test_draw_timeline_draws_every_span():
    fig = draw.timeline([("producer", [(0, 1, "load 0", 0), (1, 1, "load 1", 1)]), ("consumer", [(1, 1, "", 0)])],
                        note="schematic")
    assert len(fig.axes[0].patches) == 3 and [t.get_text() for t in fig.axes[0].texts][:2] == ["load 0", "load 1"]
    with pytest.raises(ValueError):
        draw.timeline([])
    matplotlib.pyplot.close("all")


# ------------------------------------------------------------------ CPU: input checks

def test_run_functions_refuse_what_the_kernels_cannot_take():
    with pytest.raises(ValueError, match="CUDA"):
        layouts.scale(torch.zeros(4, 4), 2.0)
    with pytest.raises(TypeError, match="torch.Tensor"):
        vector_add.add([1.0], [2.0])
    with pytest.raises(ValueError, match="at least one coefficient"):
        trace_time.polyval(torch.zeros(4), ())
    with pytest.raises(ValueError, match="K must be one of"):
        wgmma_tile.compile(48)
    with pytest.raises(ValueError, match="multiple of 8"):
        wgmma_tile.compile(16, 12)
    with pytest.raises(ValueError, match="TMEM columns"):
        tcgen05_tile.compile(16, 48)


@pytest.fixture
def dry_run(monkeypatch):
    """Each run function's own arguments, compiled and checked against the compiled signature, on the CPU:
    everything a launch does except the launch (CPU tensors stand in for CUDA ones; no device checks)."""
    from cutlass.cute.runtime import make_fake_stream
    from workbook.primer import _common
    calls = []

    def compile_here(key, fn, *args, arch):
        exe = cute.compile(fn, *args, options=f"--gpu-arch {arch}")
        return lambda *runtime: calls.append((key, exe.generate_execution_args(*runtime)))

    monkeypatch.setattr(_common, "require", lambda t, name, **kw: None)
    monkeypatch.setattr(_common, "device_arch", lambda device, allowed=("sm_90a", "sm_100a"): allowed[0])
    monkeypatch.setattr(_common, "stream", lambda device: make_fake_stream())
    monkeypatch.setattr(_common, "compiled_for_device", compile_here)
    return calls


def test_run_functions_pass_what_their_compiled_kernels_take(dry_run):
    f32, bf16 = torch.float32, torch.bfloat16
    vector_add.add(torch.zeros(5), torch.zeros(5))
    layouts.scale(torch.zeros(37, 200), 2.0)
    trace_time.polyval(torch.zeros(9), (0.5, 3.0), relu=True)
    for dtype in (f32, bf16):
        tma_copy.copy(torch.zeros(65, 200, dtype=dtype))
    wgmma_tile.matmul_t(torch.zeros(100, 32, dtype=bf16), torch.zeros(40, 32, dtype=bf16), n_tile=64)
    tcgen05_tile.matmul_t(torch.zeros(100, 16, dtype=bf16), torch.zeros(40, 16, dtype=bf16), n_tile=64)
    pipeline.row_sum(torch.zeros(129, 36))
    assert [key[0] for key, _ in dry_run] == ["vector_add", "scale", "polyval", "tma_copy", "tma_copy", "wgmma",
                                              "tcgen05", "row_sum"]


# ------------------------------------------------------------------ GPU: run and compare with torch

def _generator():
    return torch.Generator(device="cuda").manual_seed(SEED)


@gpu
@needs_sm90_or_sm100
@pytest.mark.parametrize("n", [1, 127, 128, 129, 100_003])
def test_vector_add_adds(n):
    g = _generator()
    a, b = torch.randn(n, device="cuda", generator=g), torch.randn(n, device="cuda", generator=g)
    out = torch.full_like(a, float("nan"))
    torch.testing.assert_close(vector_add.add(a, b, out=out), a + b, rtol=0, atol=0, msg=_with_seed)


@gpu
@needs_sm90_or_sm100
@pytest.mark.parametrize("shape", [(1, 4), (16, 64), (37, 200), (1000, 132)])
def test_scale_matches_torch_including_tails(shape):
    x = torch.randn(shape, device="cuda", generator=_generator())
    out = torch.full_like(x, float("nan"))
    torch.testing.assert_close(layouts.scale(x, -1.5, out=out), -1.5 * x, rtol=0, atol=0, msg=_with_seed)


@gpu
@needs_sm90_or_sm100
@pytest.mark.parametrize("n", [1, 33_793, 1_000_000])
@pytest.mark.parametrize("relu", [False, True])
def test_polyval_matches_torch(n, relu):
    coeffs = (0.5, -1.0, 0.25, 2.0)
    x = torch.randn(n, device="cuda", generator=_generator())
    out = torch.full_like(x, float("nan"))
    got = trace_time.polyval(x, coeffs, relu, out=out)
    torch.testing.assert_close(got, trace_time.reference(x, coeffs, relu), rtol=1e-5, atol=1e-5, msg=_with_seed)


@gpu
@needs_sm90_or_sm100
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 8), (64, 64), (65, 200), (300, 1000)])
def test_tma_copy_copies_every_element_and_nothing_more(dtype, shape):
    x = torch.randn(shape, device="cuda", generator=_generator()).to(dtype)
    out = torch.full_like(x, float("nan"))
    assert torch.equal(tma_copy.copy(x, out=out), x), f"seed {SEED}"


def _operands(m, n, k, exact: bool):
    g = _generator()
    if exact:   # small integers: every product and sum is exact in fp32, so the answer is too
        return (torch.randint(-4, 5, (m, k), device="cuda", generator=g).bfloat16(),
                torch.randint(-4, 5, (n, k), device="cuda", generator=g).bfloat16())
    return torch.randn(m, k, device="cuda", generator=g).bfloat16(), torch.randn(n, k, device="cuda", generator=g).bfloat16()


@gpu
@needs_hopper
@pytest.mark.parametrize("m, n, k, n_tile", [(64, 64, 16, 64), (1, 8, 16, 8), (64, 8, 16, 8), (1, 64, 16, 64),
                                             (130, 16, 16, 8), (64, 8, 32, 8), (33, 20, 16, 24), (130, 48, 16, 16),
                                             (65, 40, 32, 40), (70, 48, 64, 48), (3, 56, 64, 56), (100, 40, 32, 64),
                                             (300, 200, 64, 128), (129, 260, 16, 256)])
@pytest.mark.parametrize("exact", [True, False])
def test_wgmma_tile_matches_torch(m, n, k, n_tile, exact):
    a, b = _operands(m, n, k, exact)
    out = torch.full((m, n), float("nan"), device="cuda")
    got = wgmma_tile.matmul_t(a, b, n_tile=n_tile, out=out)
    want = a.double() @ b.double().T
    tol = dict(rtol=0, atol=0) if exact else dict(rtol=1e-4, atol=1e-4)   # fp32 accumulation vs fp64
    torch.testing.assert_close(got, want.float(), **tol, msg=_with_seed)


@gpu
@needs_blackwell
@pytest.mark.parametrize("m, n, k, n_tile", [(128, 64, 16, 64), (1, 4, 16, 32), (300, 200, 64, 128),
                                             (129, 260, 32, 256)])
@pytest.mark.parametrize("exact", [True, False])
def test_tcgen05_tile_matches_torch(m, n, k, n_tile, exact):
    a, b = _operands(m, n, k, exact)
    out = torch.full((m, n), float("nan"), device="cuda")
    got = tcgen05_tile.matmul_t(a, b, n_tile=n_tile, out=out)
    tol = dict(rtol=0, atol=0) if exact else dict(rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got, (a.double() @ b.double().T).float(), **tol, msg=_with_seed)


@gpu
@needs_sm90_or_sm100
@pytest.mark.parametrize("shape", [(1, 4), (128, 32), (129, 36), (300, 1000), (5000, 4096)])
def test_pipeline_row_sum_matches_torch(shape):
    g = _generator()
    exact = torch.randint(-8, 9, shape, device="cuda", generator=g).float()   # integer sums are exact
    out = torch.full((shape[0],), float("nan"), device="cuda")
    torch.testing.assert_close(pipeline.row_sum(exact, out=out), exact.sum(1), rtol=0, atol=0, msg=_with_seed)
    x = torch.randn(shape, device="cuda", generator=g)
    # fp32 sums of K terms in a different order than fp64's: the error grows like sqrt(K)
    torch.testing.assert_close(pipeline.row_sum(x), x.double().sum(1).float(), rtol=1e-4,
                               atol=1e-4 * shape[1] ** 0.5, msg=_with_seed)

"""The Hopper (sm_90a) k-means kernels: compiled and inspected on any machine, run and checked on an H100/H200.

CPU tests compile each variant once per session and read its SASS. GPU tests (`pytest -m gpu`) run every
variant against kmeans_kernels.reference on awkward shapes, small-integer inputs (where the reference is exact,
so the answer must match bit for bit), random bf16 inputs (where a disagreement is allowed only between two
scores within fp32 accumulation error, and the test proves that for each one), and adversarial inputs.
"""
from __future__ import annotations

import functools
import re

import pytest
import torch

import kmeans_kernels
from kmeans_kernels import hopper, reference
from workbook import gpus, sass

VARIANTS = hopper.VARIANTS
POISON = -7
ON_HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)
gpu = pytest.mark.gpu
needs_hopper = pytest.mark.skipif(not ON_HOPPER, reason="needs an sm_90 GPU (H100/H200)")


takes = hopper.takes   # a ping-pong variant needs its ring to hold a whole tile (hopper.check_variant)


@functools.lru_cache(maxsize=None)
def compiled(variant: str, D: int):
    return hopper.compile(variant, 1000, D, 1000)


# ------------------------------------------------------------------ CPU: compile, SASS, validation

@pytest.mark.parametrize("variant", VARIANTS)
def test_sass_is_wgmma_with_no_local_memory(variant):
    art = compiled(variant, 128)
    ops = sass.histogram(art.sass, base=True)
    # D=128 is two 64-wide ring slots of four k=16 steps: 8 WGMMAs per centroid tile (the tile loop is
    # unrolled, so the code holds a few copies of them)
    assert ops["HGMMA"] > 0 and ops["HGMMA"] % 8 == 0, ops
    assert ops["LDL"] == 0 and ops["STL"] == 0, "register spills to local memory"
    assert ops["SYNCS"] > 0, "no mbarrier traffic: the TMA pipeline is missing"
    assert re.search(r"UTMALDG", art.sass), "no TMA loads"


def test_norm_broadcast_trades_per_column_loads_for_shuffles():
    per_column = sass.histogram(compiled("ilp2", 128).sass, base=True)
    broadcast = sass.histogram(compiled("norm_broadcast", 128).sass, base=True)
    # per column: one LDG per accumulator column a thread owns (BLOCK_N/4 per tile); broadcast: BLOCK_N/32
    # per lane, then one shuffle per column. Each copy of the unrolled tile step has the same counts.
    copies = per_column["LDG"] // (hopper.BLOCK_N // 4)
    assert copies >= 1 and per_column["LDG"] == copies * hopper.BLOCK_N // 4
    assert broadcast["LDG"] == copies * hopper.BLOCK_N // 32
    assert broadcast["SHFL"] == per_column["SHFL"] + copies * hopper.BLOCK_N // 4


def test_ilp2_keeps_two_chains():
    serial = sass.histogram(compiled("serial", 128).sass, base=True)
    ilp2 = sass.histogram(compiled("ilp2", 128).sass, base=True)
    # the chain merge adds compares that the serial scan does not have
    assert ilp2["FSETP"] > serial["FSETP"]


@pytest.mark.parametrize("D", [16, 80, 512])
def test_compiles_for_any_supported_d(D):
    art = hopper.compile("serial", 100, D, 100)
    per_tile = 4 * (-(-D // 64))        # k=16 steps per 64-wide slot x slots
    assert sass.histogram(art.sass, base=True)["HGMMA"] % per_tile == 0


@pytest.mark.parametrize("D", [8, 24 + 1, 528, 0])
def test_unsupported_d_is_named(D):
    with pytest.raises(ValueError, match=f"D={D}"):
        hopper.compile("serial", 100, D, 100)


def test_unknown_variant_and_dtype_are_named():
    with pytest.raises(ValueError, match="'fast'"):
        hopper.compile("fast", 100, 128, 100)
    with pytest.raises(ValueError, match="float32"):
        hopper.compile("serial", 100, 128, 100, dtype=torch.float32)


@pytest.mark.parametrize("staged_norms", [False, True])
@pytest.mark.parametrize("block_n", [hopper.BLOCK_N, hopper.WIDE_BLOCK_N])
def test_ring_fits_shared_memory(block_n, staged_norms):
    for D in range(16, hopper.D_MAX + 1, 16):
        stages = hopper.stages_for(D, block_n, staged_norms)
        ctas = hopper.ctas_per_sm(D, block_n, staged_norms)
        d_pad = -(-D // hopper.BLOCK_D) * hopper.BLOCK_D
        slot = block_n * hopper.BLOCK_D * 2 + (block_n * 4 if staged_norms else 0)
        used = hopper.BLOCK_M * d_pad * 2 + stages * slot + 1024
        assert 2 <= stages <= hopper.MAX_STAGES and used <= hopper.BLOCK_SMEM_MAX, (D, stages, used)
        assert ctas * (used + hopper.CTA_SMEM_RESERVED) <= hopper.SM_SMEM_BYTES, (D, ctas, used)
    expected = [2, 2, 2, 1] if block_n == hopper.BLOCK_N else [1, 1, 1, 1]
    assert [hopper.ctas_per_sm(D, block_n) for D in (64, 128, 256, 512)] == expected


@pytest.mark.parametrize("variant", ["norm_broadcast", "wide", "folded_norms"])
@pytest.mark.parametrize("D", [64, 128, 256, 512])
def test_compiled_kernel_fits_its_ctas_per_sm(variant, D):
    """Two CTAs share an SM up to D = 256 with 128-wide tiles: the compiled kernel's registers and shared
    memory must allow what ctas_per_sm promises, without spilling."""
    if not takes(variant, D):
        pytest.skip(f"{variant} does not run at D={D}")
    kernel = hopper.HopperAssign(variant, D, hopper._cutlass_dtype(torch.bfloat16))
    assert_fits_its_ctas_per_sm(kernel)


def assert_fits_its_ctas_per_sm(kernel: hopper.HopperAssign) -> str:
    """Compile `kernel`; its registers (allocated per warp in units of 256) and shared memory allow
    kernel.ctas_per_sm CTAs on one SM, without spilling. Returns the SASS."""
    art = sass.compile_for(kernel, *hopper._placeholder_args(torch.bfloat16), arch="sm_90a")
    ctas = kernel.ctas_per_sm
    regs, = sass.registers(art.cubin).values()
    assert gpus.ctas_by_registers(regs, kernel.threads) >= ctas, (kernel.D, regs, ctas)
    smem = kernel.shared_storage.size_in_bytes()
    assert ctas * (smem + hopper.CTA_SMEM_RESERVED) <= hopper.SM_SMEM_BYTES, (kernel.D, smem, ctas)
    assert "LDL" not in art.sass and "STL" not in art.sass       # the register cap costs no spills
    return art.sass


@pytest.mark.parametrize("build,variant", [("SixteenByteLoads", "lazy_index"), ("LazyWide", "lazy_index"),
                                           ("SixteenByteLoads", "folded_norms")])
@pytest.mark.parametrize("D", [64, 128])
def test_fold_instruction_probe_builds_compile_as_the_perf_log_says(build, variant, D, load_probe):
    """The builds that `probes/kmeans_fold_instructions_probe.py` times (prepared, to run on a GPU): each fits what
    its ctas_per_sm promises with no spills, and fills its accumulators' norms by 16-byte loads, four registers
    each (a thread's columns over 4: 16 loads per tile at 128 columns, 32 at 256) with none of 8 bytes."""
    probe = load_probe("kmeans_fold_instructions_probe")
    kernel = getattr(probe, build)(variant, D, hopper._cutlass_dtype(torch.bfloat16))
    ops = sass.histogram(assert_fits_its_ctas_per_sm(kernel))
    assert ops["LDS.128"] == kernel.block_n // 8 and ops["LDS.64"] == 0, (ops["LDS.128"], ops["LDS.64"])


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("form,ctas,threads", [("1 CTA/SM", 1, hopper.THREADS), ("256 threads", 2, 256)])
def test_points_in_registers_probe_builds_differ_only_in_where_the_points_are_read(D, form, ctas, threads,
                                                                                   load_probe):
    """The builds that `probes/kmeans_points_in_registers_probe.py` times (prepared, to run on a GPU), in pairs: both
    fit their CTAs per SM (one of 288 threads; two of 256, the producer warp's work done by warp 4) with no spills and
    issue the same WGMMAs with as many waits (none serialized); the register build reads the points from its
    registers (HGMMA's A operand a register, not a descriptor) after loading them once per point tile."""
    probe = load_probe("kmeans_points_in_registers_probe")
    ops = {}
    for name in (f"shared, {form}", f"registers, {form}"):
        kernel = probe.BUILDS[name][0]("lazy_index", D, hopper._cutlass_dtype(torch.bfloat16))
        assert (kernel.ctas_per_sm, kernel.threads) == (ctas, threads)
        code = assert_fits_its_ctas_per_sm(kernel)
        ops[name] = sass.histogram(code)
        a_operands = {ins.operands[1][:1] for ins in sass.instructions(code) if ins.opcode.startswith("HGMMA")}
        assert a_operands == ({"R"} if name.startswith("registers") else {"g"}), a_operands
    shared, registers = ops.values()
    hgmma = "HGMMA.64x128x16.F32.BF16"
    assert shared[hgmma] == registers[hgmma] == D // 16
    assert registers["LDS"] - shared["LDS"] == D // 4      # 64 rows x D / 128 threads / 2 per load, per tile
    assert registers["WARPGROUP.DEPBAR.LE"] == shared["WARPGROUP.DEPBAR.LE"]    # no WGMMA serialized


def test_inline_producer_takes_only_the_ping_pong_variants():
    """Warp 4 refills the ring after warpgroup 1 gives a tile back, which is last only where the two take turns:
    elsewhere the consumers would wait for slots nobody fills."""
    for variant in VARIANTS:
        kernel = hopper.HopperAssign(variant, 64, hopper._cutlass_dtype(torch.bfloat16))
        assert kernel.threads == hopper.THREADS
        if kernel.ping_pong:
            kernel.inline_producer = True
            assert kernel.threads == hopper.THREADS - 32
        else:
            with pytest.raises(ValueError, match="ping-pong"):
                kernel.inline_producer = True


def test_auto_variant_is_a_variant():
    for shape in [(1, 16, 1), (65536, 128, 4096), (1 << 20, 256, 4096)]:
        assert hopper.auto_variant(*shape) in VARIANTS
    assert hopper.auto_variant(1 << 20, 256, 4096) == hopper.auto_variant(65536, 256, 4096) == "wide"
    assert hopper.auto_variant(65536, 256, 512) == hopper.auto_variant(1 << 20, 192, 4096) == "lean_select"
    assert hopper.auto_variant(65536, 128, 512) == hopper.auto_variant(65536, 64, 2048) == "folded_norms"
    assert hopper.auto_variant(1 << 20, 128, 4096) == hopper.auto_variant(65536, 16, 16384) == "lazy_index"


@pytest.mark.parametrize("D", [320, 384, 512])
def test_wide_is_refused_where_its_ring_cannot_hold_a_tile(D):
    """Past D = 256 the wide ring holds fewer slots than a tile has D blocks, and the ping-pong warpgroups would
    wait for each other forever: auto must not pick it, and asking for it must fail before any launch."""
    assert hopper.stages_for(D, hopper.WIDE_BLOCK_N) < D // hopper.BLOCK_D
    assert hopper.auto_variant(1 << 20, D, 16384) == "lean_select"
    with pytest.raises(ValueError, match="cannot take D="):
        hopper.compile("wide", 1024, D, 4096)
    assert hopper.ping_pong_fits(256) and hopper.ping_pong_fits(128)


def test_lean_ping_pong_is_refused_where_two_ctas_leave_its_ring_short():
    """At 128-wide tiles two CTAs share an SM up to D = 256; from D = 208 their rings hold fewer slots than a tile
    has D blocks. Past 256 one CTA has the SM and the ring is deep enough again, up to D = 448."""
    refused = [D for D in range(16, 513, 16) if not takes("lean_ping_pong", D)]
    assert refused == [208, 224, 240, 256, 464, 480, 496, 512]
    with pytest.raises(ValueError, match="cannot take D=256.*4 D blocks and has 3 slots"):
        hopper.check_variant("lean_ping_pong", 256)
    hopper.check_variant("lean_ping_pong", 192)


# ------------------------------------------------------------------ GPU: answers

def small_integers(n: int, d: int, gen: torch.Generator, lo: int = -3, hi: int = 4) -> torch.Tensor:
    """bf16 values in [lo, hi): every product and every fp32 partial sum is exact, so the scores are exact."""
    return torch.randint(lo, hi, (n, d), generator=gen).to(torch.bfloat16)


def run(variant, x, c, c_sq=None):
    out = torch.full((x.shape[0],), POISON, dtype=torch.int32, device=x.device)
    kmeans_kernels.assign(x, c, variant=variant, c_sq=c_sq, out=out)
    torch.cuda.synchronize()
    assert not (out == POISON).any(), "some output rows were never written"
    return out


def assert_equal(got, want, what):
    bad = (got != want).nonzero().flatten()
    assert bad.numel() == 0, (f"{what}: {bad.numel()} rows differ, first rows {bad[:8].tolist()}: "
                              f"got {got[bad[:8]].tolist()}, want {want[bad[:8]].tolist()}")


SHAPES = ([(n, 128, k) for n in (1, 127, 129, 257) for k in (1, 3, 257, 1000)]
          + [(100003, 256, 1000), (300, 64, 300), (4096, 256, 4096)])
# other D (tails inside a 64-wide slot, the largest D): one variant, to keep the compilations few
ODD_D = [(300, 16, 129), (300, 80, 200), (300, 512, 300), (1000, 192, 1000)]


@gpu
@needs_hopper
@pytest.mark.parametrize("variant,N,D,K", [(v, *s) for s in SHAPES for v in VARIANTS if takes(v, s[1])]
                         + [("serial", *s) for s in ODD_D]
                         # the turns with a ring of exactly one tile's D blocks: folded_norms at D = 192 (3 slots)
                         + [(v, *s) for v in ("lean_ping_pong", "folded_norms") for s in ODD_D if takes(v, s[1])])
def test_exact_on_small_integers(variant, N, D, K):
    gen = torch.Generator().manual_seed(N * 7919 + D * 31 + K)
    x, c = small_integers(N, D, gen).cuda(), small_integers(K, D, gen).cuda()
    assert_equal(run(variant, x, c), reference.assign(x, c), f"{variant} N={N} D={D} K={K}")


@gpu
@needs_hopper
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("ctas", [1, 3])
def test_each_cta_walks_several_point_tiles(variant, ctas):
    """A grid capped at `ctas` CTAs: each walks every ctas-th point tile (reloading its point buffer, its winners
    started afresh, the warpgroups' turns running on), with a partial last point tile and a partial centroid
    tile, cross-tile ties and a NaN row; every row written, bit for bit the reference's."""
    D = 128 if takes(variant, 128) else 64
    N, K = 7 * hopper.BLOCK_M + 45, 3 * hopper.WIDE_BLOCK_N + 37
    gen = torch.Generator().manual_seed(ctas * 101 + D)
    x, c = small_integers(N, D, gen).cuda(), small_integers(K, D, gen).cuda()
    c[[300, 700]] = c[5].clone()    # one centroid in three tiles: the lowest index wins in every point tile
    x[N - 200] = float("nan")       # a row of a middle point tile with no winner
    c_sq = reference.centroid_norms(c)
    out = torch.full((N,), POISON, dtype=torch.int32, device="cuda")
    hopper.launcher(variant, N, D, K, torch.bfloat16, 0, ctas=ctas)(x, c, c_sq, out)
    torch.cuda.synchronize()
    assert not (out == POISON).any(), "some output rows were never written"
    assert_equal(out, reference.assign(x, c, c_sq).to(torch.int32), f"{variant} ctas={ctas}")


@gpu
@needs_hopper
def test_one_wave_where_one_cta_holds_an_sm():
    """wide at D = 256 runs one CTA per SM: its grid is one wave (`grid_cap`), and past it, at 2 x 132 + 3 point
    tiles, some CTAs walk three; folded_norms (two CTAs per SM) keeps a CTA per point tile."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert hopper.grid_cap("wide", 256, 0) == sms and hopper.grid_cap("folded_norms", 64, 0) == hopper.MAX_CTAS
    gen = torch.Generator().manual_seed(11)
    N, D, K = (2 * sms + 3) * hopper.BLOCK_M - 5, 256, 1000
    x, c = small_integers(N, D, gen).cuda(), small_integers(K, D, gen).cuda()
    assert_equal(run("wide", x, c), reference.assign(x, c), f"wide N={N}")


@gpu
@needs_hopper
def test_auto_past_d256_with_many_centroids_finishes_and_is_exact():
    """auto at D = 512, K = 4096 once picked the wide ping-pong kernel, whose ring cannot hold a tile there."""
    gen = torch.Generator().manual_seed(512)
    x, c = small_integers(300, 512, gen).cuda(), small_integers(4096, 512, gen).cuda()
    assert_equal(kmeans_kernels.assign(x, c), reference.assign(x, c), "auto N=300 D=512 K=4096")


def fp32_error_bound(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """[N, K] bound on |fp32 score - exact score|: D terms accumulated in fp32 (any order) plus the norm.

    Products of bf16 values are exact in fp32; a sum of D terms in any order errs by at most
    (D-1) * u * sum|terms| to first order (u = 2^-24), and 0.5*||c||^2 likewise. We take 2x that for
    the second-order terms and for the score's own final rounding.
    """
    u = 2.0 ** -24
    D = x.shape[1]
    xa, ca = x.double().abs(), c.double().abs()
    dot_mag = xa @ ca.t()
    norm_mag = 0.5 * (ca * ca).sum(1)
    return 2 * D * u * (dot_mag + norm_mag) + u * (dot_mag + norm_mag)


@gpu
@needs_hopper
@pytest.mark.parametrize("variant,N,D,K", [(v, *s) for s in [(4099, 128, 1000), (2048, 256, 4096), (1500, 64, 513)]
                                            for v in VARIANTS if takes(v, s[1])])
def test_random_bf16_disagrees_only_within_fp32_error(variant, N, D, K):
    gen = torch.Generator().manual_seed(N + D + K)
    x = torch.randn(N, D, generator=gen).to(torch.bfloat16).cuda()
    c = torch.randn(K, D, generator=gen).to(torch.bfloat16).cuda()
    got, want = run(variant, x, c).long(), reference.assign(x, c).long()
    bad = (got != want).nonzero().flatten()
    assert bad.numel() <= max(1, N // 100), f"{bad.numel()} of {N} rows disagree"
    if bad.numel():
        xb = x[bad]
        exact = 0.5 * (c.double() ** 2).sum(1) - xb.double() @ c.double().t()   # [bad, K], exact for bf16 inputs
        bound = fp32_error_bound(xb, c)
        rows = torch.arange(bad.numel(), device=x.device)
        gap = (exact[rows, got[bad]] - exact[rows, want[bad]]).abs()
        slack = bound[rows, got[bad]] + bound[rows, want[bad]]
        assert (gap <= slack).all(), f"rows {bad[gap > slack].tolist()} disagree by more than fp32 error"


@gpu
@needs_hopper
@pytest.mark.parametrize("variant", VARIANTS)
def test_adversarial(variant):
    gen = torch.Generator().manual_seed(5)
    N, D, K = 300, 64, 700
    x = small_integers(N, D, gen).cuda()
    c = small_integers(K, D, gen).cuda()
    # cross-tile ties: the same centroid in 128-wide tiles 0, 1, 3, 4 and twice inside tile 2 (same lane, other
    # chain); in 256-wide tiles ("wide"): tiles 0, 1 and 2
    for k in (130, 131, 400, 10, 520):
        c[k] = c[7]
    # all-equal centroids for rows whose nearest is any of them: lowest index must win
    assert_equal(run(variant, x, c), reference.assign(x, c), f"{variant} ties")
    same = c[:1].expand(K, D).contiguous()
    assert_equal(run(variant, x, same), torch.zeros(N, dtype=torch.int32, device="cuda"), f"{variant} all-equal")

    # NaN / inf in x and c
    xs, cs = x.clone(), c.clone()
    xs[0] = float("nan")                 # every score NaN: no winner (-1)
    xs[1, 3] = float("inf")              # +-inf dots: -inf wins where the centroid's d=3 is positive
    xs[2, 5] = float("-inf")
    cs[11, 0] = float("nan")             # centroid 11 never wins
    cs[12, 1] = float("inf")             # centroid 12: norm +inf
    cs[650:] = float("inf")              # a whole tail tile of +inf centroids
    assert_equal(run(variant, xs, cs), reference.assign(xs, cs), f"{variant} nan/inf")
    # a row with no finite winner at all
    allinf = torch.full((K, D), float("inf"), dtype=torch.bfloat16, device="cuda")
    assert_equal(run(variant, x[:5].contiguous(), allinf), torch.full((5,), -1, dtype=torch.int32, device="cuda"),
                 f"{variant} no winner")

    # signed zero: +0.0 and -0.0 centroids score equal; the lower index wins
    z = torch.zeros(K, D, dtype=torch.bfloat16, device="cuda")
    z[::2] = -0.0
    z[5:] = c[5:]
    xz = torch.zeros(N, D, dtype=torch.bfloat16, device="cuda")
    xz[:, 0] = -0.0
    assert_equal(run(variant, xz, z), reference.assign(xz, z), f"{variant} signed zero")


@gpu
@needs_hopper
def test_given_c_sq_is_used():
    gen = torch.Generator().manual_seed(9)
    x, c = small_integers(200, 128, gen).cuda(), small_integers(300, 128, gen).cuda()
    c_sq = reference.centroid_norms(c)
    c_sq[17] = -1e6            # makes centroid 17 win everywhere: the kernel must read c_sq, not recompute it
    for variant in VARIANTS:
        assert_equal(run(variant, x, c, c_sq), torch.full((200,), 17, dtype=torch.int32, device="cuda"), variant)


@gpu
@needs_hopper
def test_cached_launches_follow_their_arguments():
    """The launch cache reuses marshalled arguments per (addresses, sizes, stream): alternating outputs, inputs
    edited in place and a second stream must each still get exactly their own answer."""
    gen = torch.Generator().manual_seed(13)
    x, c = small_integers(500, 128, gen).cuda(), small_integers(700, 128, gen).cuda()
    outs = [torch.full((500,), POISON, dtype=torch.int32, device="cuda") for _ in range(2)]
    for i in range(4):
        out = outs[i % 2].fill_(POISON)
        c[i] = x[i]                          # in place: same address, new data
        kmeans_kernels.assign(x, c, variant="norm_broadcast", out=out)
        torch.cuda.synchronize()
        assert_equal(out, reference.assign(x, c), f"call {i}")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        got = kmeans_kernels.assign(x, c, variant="norm_broadcast")
    side.synchronize()
    assert_equal(got, reference.assign(x, c), "side stream")


@gpu
@needs_hopper
def test_fp16_inputs():
    gen = torch.Generator().manual_seed(11)
    x = small_integers(333, 128, gen).half().cuda()
    c = small_integers(555, 128, gen).half().cuda()
    for variant in VARIANTS:
        assert_equal(run(variant, x, c), reference.assign(x, c), f"{variant} fp16")


@gpu
@needs_hopper
def test_a_remembered_signature_gets_fresh_outputs_and_still_refuses_broken_inputs():
    """assign checks a signature (shapes, dtype, device, variant) once: later calls of it must each get their own
    new output, exactly right, and a view or tensor of the same signature that breaks a precondition is still
    refused by name."""
    gen = torch.Generator().manual_seed(17)
    x, c = small_integers(300, 128, gen).cuda(), small_integers(500, 128, gen).cuda()
    outs = [kmeans_kernels.assign(x, c) for _ in range(3)]
    assert len({o.data_ptr() for o in outs}) == 3
    for o in outs:
        assert o.dtype == torch.int32 and o.shape == (300,) and o.is_contiguous()
        assert_equal(o, reference.assign(x, c), "remembered signature")
    with pytest.raises(ValueError, match="contiguous"):
        kmeans_kernels.assign(x.t().contiguous().t(), c)
    with pytest.raises(ValueError, match="CUDA"):
        kmeans_kernels.assign(x.cpu(), c.cpu())
    with pytest.raises(ValueError, match="c_sq"):
        kmeans_kernels.assign(x, c, c_sq=torch.ones(500, dtype=torch.float64, device="cuda"))
    with pytest.raises(ValueError, match="out"):
        kmeans_kernels.assign(x, c, out=torch.empty(300, dtype=torch.int32))


@gpu
@needs_hopper
def test_misaligned_input_is_refused():
    x = torch.zeros(65 * 128 + 8, dtype=torch.bfloat16, device="cuda")[4:4 + 65 * 128].view(65, 128)
    c = torch.zeros(10, 128, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="16-byte"):
        kmeans_kernels.assign(x, c, variant="serial")


# ------------------------------------------------------------------ the benchmark's CPU-side behaviour

def test_bench_uses_the_13_seed_shapes():
    from kmeans_kernels import bench
    shapes = bench.seed_shapes()
    assert len(shapes) == len(set(shapes)) == 13
    assert (1048576, 256, 4096) in shapes and all(D in (64, 128, 256) for _, D, _ in shapes)


def test_bench_shape_argument():
    from kmeans_kernels import bench
    assert bench.parse_shapes("1,16,1;65536,128,4096") == [(1, 16, 1), (65536, 128, 4096)]
    with pytest.raises(ValueError, match="N,D,K"):
        bench.parse_shapes("65536,128")


def test_bench_refuses_a_gpu_it_is_not_on(monkeypatch, capsys):
    from kmeans_kernels import bench
    from workbook import gpus
    monkeypatch.setattr(gpus, "current", lambda device=None: gpus.H200)
    assert bench.main(["--gpu", "b200", "--no-record"]) == 2
    said = capsys.readouterr().out
    assert "b200" in said and "H200" in said
    monkeypatch.setattr(gpus, "current", lambda device=None: None)
    assert bench.main(["--no-record"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().out


# ------------------------------------------------------------------ programmatic dependent launch

def test_pdl_build_waits_for_the_kernel_before_and_only_it_does():
    args = hopper._placeholder_args(torch.bfloat16)
    build = lambda pdl: sass.compile_for(hopper.HopperAssign("folded_norms", 64, hopper._cutlass_dtype(
        torch.bfloat16), pdl), *args, arch="sm_90a").ptx
    assert "griddepcontrol.wait" in build(True) and "griddepcontrol.launch_dependents" in build(True)
    assert "griddepcontrol" not in build(False)


@gpu
@needs_hopper
@pytest.mark.parametrize("variant", ["folded_norms", "lean_select", "wide"])
def test_pdl_launches_back_to_back_write_out_in_stream_order(variant):
    """Dependent launches into one `out` with no host sync between them, alternating two centroid sets and ending
    on the second: `out` holds the last launch's answer (a launch that did not wait could finish before the one
    before it wrote)."""
    N, D, K = 20000, 256 if variant == "wide" else 64, 4096
    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randint(-4, 5, (N, D), device="cuda", generator=g).to(torch.bfloat16)
    cs = [torch.randint(-4, 5, (K, D), device="cuda", generator=g).to(torch.bfloat16) for _ in range(2)]
    sqs = [reference.centroid_norms(c) for c in cs]
    run = hopper.launcher(variant, N, D, K, torch.bfloat16, 0, pdl=True)
    out = torch.full((N,), POISON, dtype=torch.int32, device="cuda")
    for i in range(13):   # past the launch cache's eighth sighting: the later launches are graph replays
        run(x, cs[i % 2], sqs[i % 2], out)
    torch.cuda.synchronize()
    assert torch.equal(out, reference.assign(x, cs[0], sqs[0]).to(torch.int32))
    # and the other way round: ending on the second set
    run(x, cs[1], sqs[1], out)
    torch.cuda.synchronize()
    assert torch.equal(out, reference.assign(x, cs[1], sqs[1]).to(torch.int32))

"""The sm_100a k-means kernels, verified with no B200: compiled here, their PTX and SASS read for what the
PR claims, the dispatcher's choice of backend checked; on a B200, `pytest -m gpu` checks the answers too.

Each (variant, D) is compiled once per session (a compile takes a few seconds on a CPU).
"""
import functools

import pytest
import torch

import kmeans_kernels
from kmeans_kernels import blackwell, reference
from kmeans_kernels import sass_checks as checks
from workbook import dispatch
from workbook import sass as sass_tools

on_b200 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (10, 0)


@functools.lru_cache(maxsize=None)
def compiled(variant, D=128):
    return kmeans_kernels.compile_assign(variant, N=1000, D=D, K=1000, arch="sm_100a")


@pytest.mark.parametrize("variant", blackwell.VARIANTS)
def test_every_variant_compiles_to_tcgen05(variant):
    art = compiled(variant)
    assert art.arch == "sm_100a"
    assert "tcgen05.mma" in art.ptx and "tcgen05.ld" in art.ptx
    ops = sass_tools.histogram(art.sass, base=True)
    assert any(op.startswith("UTC") and op.endswith("MMA") for op in ops), sorted(ops)  # UTCHMMA
    assert ops["LDTM"] >= 1
    # D=128 is two 64-wide chunks of four K=16 MMAs each, issued per centroid tile
    assert art.ptx.count("tcgen05.mma") % 8 == 0


@pytest.mark.parametrize("variant", blackwell.VARIANTS)
def test_every_accumulator_release_is_fenced(variant):
    releases, unfenced = checks.unfenced_releases(compiled(variant).ptx)
    assert releases >= 1 and unfenced == []


def test_the_fence_check_catches_a_missing_wait():
    fenced = "tcgen05.ld.sync.aligned.32x32b.x128.b32 {%r1}, [%r2];\ntcgen05.wait::ld.sync.aligned;\n" \
             "mbarrier.arrive.shared.b64 %rd1, [%r3];\n"
    unfenced = "tcgen05.ld.sync.aligned.32x32b.x128.b32 {%r1}, [%r2];\nmbarrier.arrive.shared.b64 %rd1, [%r3];\n" \
               "tcgen05.wait::ld.sync.aligned;\n"
    assert checks.unfenced_releases(fenced) == (1, [])
    assert checks.unfenced_releases(unfenced) == (1, [2])


def test_ilp2_halves_the_compare_select_chain():
    """Two independent chains: the dependency depth of one tile's scan drops to about half the serial one
    while the work (number of compare-selects) stays the same."""
    serial, ilp2 = compiled("serial").sass, compiled("ilp2").sass
    d_serial, d_ilp2 = checks.compare_select_depth(serial), checks.compare_select_depth(ilp2)
    assert d_serial >= 2 * blackwell.BLOCK_N  # one FSETP -> FSEL link per column
    assert d_ilp2 <= 0.55 * d_serial
    assert abs(checks.compare_select_count(ilp2) - checks.compare_select_count(serial)) <= 8


def test_depth_counts_dependencies_not_opcodes():
    """Same opcodes, different wiring: a chain and two interleaved chains of FSETP/FSEL give different depths."""
    def block(pairs):
        lines = ["        /*0000*/                   LDTM.x128 R4, tmem[UR5] ;"]
        for i, (a, b) in enumerate(pairs):
            lines += [f"        /*{16 * (2 * i + 1):04x}*/                   FSETP.GEU.AND P0, PT, R{a}, R{b}, PT ;",
                      f"        /*{16 * (2 * i + 2):04x}*/                   FSEL R{b}, R{a}, R{b}, !P0 ;"]
        return "\n".join(lines)
    one_chain = block([(4, 100)] * 8)                      # every step reads the R100 the last one wrote
    two_chains = block([(4, 100), (5, 101)] * 4)           # R100 and R101 alternate
    assert checks.compare_select_depth(one_chain) == 16
    assert checks.compare_select_depth(two_chains) == 8


def test_norm_broadcast_drops_the_shared_norm_buffer_and_its_barriers():
    serial, bcast = compiled("serial"), compiled("norm_broadcast")
    assert sass_tools.histogram(bcast.sass, base=True)["SHFL"] >= blackwell.BLOCK_N  # one shuffle per column
    assert sass_tools.histogram(serial.sass, base=True)["SHFL"] == 0
    # the baseline stages the tile's norms with st.shared between two named-barrier syncs per tile
    assert checks.shared_stores(serial.ptx) >= 1
    assert checks.named_barrier_syncs(serial.ptx)[blackwell.NORM_BARRIER_ID] == 2
    assert checks.shared_stores(bcast.ptx) == 0
    assert checks.named_barrier_syncs(bcast.ptx)[blackwell.NORM_BARRIER_ID] == 0
    bars = lambda art: sass_tools.histogram(art.sass, base=True)["BAR"]
    assert bars(bcast) == bars(serial) - 2


def test_x_resident_has_no_specialised_warps():
    """x_resident: 4 warps (no load or MMA warp), one TMEM accumulator; WS: 6 warps, two accumulators."""
    ws, xr = blackwell.Plan.of(blackwell.DESIGNS["serial"], 128), blackwell.Plan.of(blackwell.DESIGNS["x_resident"], 128)
    assert (ws.threads, ws.acc_stages) == (192, 2) and (xr.threads, xr.acc_stages) == (128, 1)
    assert "tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32" in compiled("x_resident").ptx
    assert ".reqntid 128" in compiled("x_resident").ptx.replace(", 1, 1", "")
    assert ".reqntid 192" in compiled("serial").ptx.replace(", 1, 1", "")


@pytest.mark.parametrize("D", [16, 80, 512])
def test_d_tails_compile(D):
    """D that is not a multiple of the 64-wide TMA chunk (zero-filled by TMA) and the largest D."""
    art = compiled("ilp2", D)
    assert "tcgen05.mma" in art.ptx and checks.unfenced_releases(art.ptx)[1] == []


@pytest.mark.parametrize("bad, match", [
    (lambda: kmeans_kernels.compile_assign("warp_magic", N=128, D=128, K=128, arch="sm_100a"), "warp_magic"),
    (lambda: kmeans_kernels.compile_assign("serial", N=128, D=72, K=128, arch="sm_100a"), "D=72"),
    (lambda: blackwell.compile("serial", 0, 128, 128), "N and K"),
    (lambda: blackwell.compile("x_resident", 128, 512, 128), "x_resident supports D <= 256"),
    (lambda: blackwell.compile("serial", 128, 128, 128, dtype=torch.float32), "dtype"),
])
def test_bad_requests_are_named(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()


def test_auto_variant_follows_the_pr_table():
    for N, D, K in [(65536, 64, 512), (262144, 256, 16384), (1048576, 256, 4096)]:
        assert blackwell.auto_variant(N, D, K) == "ilp2"
    for N, D, K in [(65536, 128, 512), (1048576, 128, 4096)]:
        assert blackwell.auto_variant(N, D, K) == "norm_broadcast"


def _pretend_cuda(monkeypatch, capability):
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda", 0)))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: f"a GPU of capability {capability}")
    dispatch._arch_of_index.cache_clear()      # a stand-in device that changes its capability


def test_dispatch_picks_blackwell_on_sm100_only(monkeypatch):
    x, c = torch.randn(200, 128).bfloat16(), torch.randn(300, 128).bfloat16()
    calls = []
    monkeypatch.setattr(blackwell, "run", lambda variant, *args: calls.append(variant))
    _pretend_cuda(monkeypatch, (10, 0))
    kmeans_kernels.assign(x, c, variant="x_resident", c_sq=torch.ones(300), out=torch.empty(200, dtype=torch.int32))
    kmeans_kernels.assign(x, c, c_sq=torch.ones(300), out=torch.empty(200, dtype=torch.int32))
    assert calls == ["x_resident", "norm_broadcast"]  # the PR's choice at D=128

    _pretend_cuda(monkeypatch, (9, 0))  # Hopper: its own backend, which has no x_resident
    with pytest.raises(ValueError, match="x_resident.*sm_90a"):
        kmeans_kernels.assign(x, c, variant="x_resident", c_sq=torch.ones(300), out=torch.empty(200, dtype=torch.int32))
    _pretend_cuda(monkeypatch, (12, 0))  # consumer Blackwell: no tcgen05 kernels at all
    with pytest.raises(ValueError, match="sm_120.*sm_100a"):
        kmeans_kernels.assign(x, c, variant="ilp2", c_sq=torch.ones(300), out=torch.empty(200, dtype=torch.int32))
    assert calls == ["x_resident", "norm_broadcast"]


# ---------------------------------------------------------------------------------------------------
# On a B200 only

b200_only = pytest.mark.skipif(not on_b200, reason="needs a B200 (sm_100)")


def _integer_valued(shape, gen, dtype):
    # small integers: every product and sum is exact in fp32, so the answer is defined bit for bit
    return torch.randint(-3, 4, shape, generator=gen).to(dtype).cuda()


@pytest.mark.gpu
@b200_only
@pytest.mark.parametrize("variant", blackwell.VARIANTS)
@pytest.mark.parametrize("N, D, K", [(128, 128, 128), (1000, 64, 300), (333, 256, 1000), (77, 48, 5), (4097, 128, 4099)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_matches_reference_bit_for_bit(variant, N, D, K, dtype):
    gen = torch.Generator().manual_seed(torch.seed() % 2**31)
    x, c = _integer_valued((N, D), gen, dtype), _integer_valued((K, D), gen, dtype)
    c[K // 2] = c[K // 3]  # exact ties across tiles: the lower index must win
    ids = kmeans_kernels.assign(x, c, variant=variant)
    assert torch.equal(ids.cpu(), reference.assign(x.cpu(), c.cpu()))


@pytest.mark.gpu
@b200_only
@pytest.mark.parametrize("variant", blackwell.VARIANTS)
def test_nan_inf_rows(variant):
    x = torch.randint(-3, 4, (256, 128)).bfloat16().cuda()
    c = torch.randint(-3, 4, (300, 128)).bfloat16().cuda()
    c_sq = reference.centroid_norms(c)
    c_sq[:150] = float("nan")
    c_sq[150:] = float("inf")
    c_sq[299] = float("-inf")
    ids = kmeans_kernels.assign(x, c, variant=variant, c_sq=c_sq)
    assert torch.equal(ids.cpu(), reference.assign(x.cpu(), c.cpu(), c_sq.cpu()))
    c_sq[299] = float("inf")
    ids = kmeans_kernels.assign(x, c, variant=variant, c_sq=c_sq)
    assert (ids == -1).all()


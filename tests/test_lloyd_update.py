"""The CUDA centroid update of fit (kmeans_kernels.lloyd_update): the fixed-point rule it shares with the CPU
path, checked on every 16-bit value; the kernel's machine code, compiled here with no GPU; on a GPU (`-m gpu`)
its sums against index_add_ of the float64 definition, bit for bit, and fit with it against fit without it."""
import math
import re

import pytest
import torch

import kmeans_kernels
from kmeans_kernels import lloyd as fitmod

gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
DTYPES = (torch.bfloat16, torch.float16)


def fixed_point_fp64(x: torch.Tensor, s: int) -> torch.Tensor:
    """The definition: x * 2^s in float64 (exact), truncated toward zero to int64."""
    out = torch.empty(x.shape, dtype=torch.int64, device=x.device)
    out[:] = x.double() * math.ldexp(1.0, s)
    return out


def every_finite_value(dtype) -> torch.Tensor:
    x = torch.arange(-2**15, 2**15, dtype=torch.int32).to(torch.int16).view(dtype)
    return x[torch.isfinite(x)].reshape(-1, 1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fixed_point_rule_equals_the_float64_product_on_every_value(dtype):
    """fp32(x) * 2^s1 * 2^s2 truncated = x * 2^s truncated, for every finite bf16 / fp16 value and every s
    that fit can choose (-97..194), wherever |x * 2^s| < 2^62 as _scale_exponent guarantees."""
    x = every_finite_value(dtype)
    checked = 0
    for s in range(-100, 197):
        xs = x[(x.double().abs() * 2.0 ** s < 2.0 ** 62).reshape(-1)]
        got = fitmod.fixed_point(xs, s)
        assert torch.equal(got, fixed_point_fp64(xs, s)), f"s={s}"
        checked += xs.shape[0]
    assert checked > 4_000_000
    # the cases the argument rests on are among them: bf16 subnormals scaled up a long way, products below 1
    tiny = torch.tensor([[2.0 ** -133], [-1.5 * 2.0 ** -131]], dtype=torch.bfloat16)
    assert fitmod.fixed_point(tiny, 190).tolist() == [[2 ** 57], [-3 * 2 ** 58]]
    assert fitmod.fixed_point(torch.tensor([[0.75], [-0.75], [-0.0]], dtype=dtype), 0).tolist() == [[0], [0], [0]]


def test_one_fp32_factor_would_not_do():
    """Why two factors: 2^s itself leaves fp32 for the s of small data, and fp32(x) * inf is no fixed point."""
    assert math.isinf(torch.tensor(math.ldexp(1.0, 150), dtype=torch.float32).item())
    f1, f2 = fitmod.scale_factors(150)
    assert f1 * f2 == 2.0 ** 150 and max(f1, f2) <= 2.0 ** 127
    assert fitmod.scale_factors(-97) == (2.0 ** -49, 2.0 ** -48)
    with pytest.raises(ValueError, match="2\\^300"):
        fitmod.scale_factors(300)


def test_fixed_point_total_is_the_sum_of_the_copy(monkeypatch):
    monkeypatch.setattr(fitmod, "_CHUNK_ELEMENTS", 64)   # many chunks, the last one partial
    g = torch.Generator().manual_seed(4)
    x = (torch.randn(1003, 16, generator=g) * 2.0 ** torch.randint(-20, 6, (1003, 1), generator=g)).to(torch.bfloat16)
    s = fitmod._scale_exponent(x, fitmod._Shards(None, 1003))
    assert torch.equal(fitmod.fixed_point_total(x, s), fixed_point_fp64(x, s).sum(0))


# ---- the kernel, compiled with no GPU --------------------------------------------------------------------

@pytest.mark.parametrize("D,dtype", [(128, torch.bfloat16), (64, torch.float16), (72, torch.bfloat16)])
def test_kernel_compiles_to_int64_atomics_and_truncating_conversions(D, dtype):
    from kmeans_kernels import lloyd_update
    from workbook import sass
    art = lloyd_update.compile(D, dtype, arch="sm_90a")
    ptx = art.ptx
    assert re.search(r"\b(red|atom)\.\S*global\.add\.u64\b", ptx)      # the int64 atomic adds
    assert "cvt.rzi.s64.f32" in ptx                                     # the rule's truncation to int64
    assert "ld.global.v4.b32" in ptx or "ld.global.nc.v4" in ptx        # 16-byte row loads
    assert not re.search(r"\.ftz\b", ptx)                               # subnormal x must not be flushed
    ops = sass.histogram(art.sass)
    assert ops["F2I.S64.TRUNC"] == lloyd_update.VEC * lloyd_update.UNROLL
    assert ops["LDG.E.128"] == lloyd_update.UNROLL
    assert any(op.startswith("REDG.E.ADD.64") for op in ops)
    assert "F2F.F64.F32" not in ops and not any(op.startswith("DMUL") for op in ops)


def test_kernel_compiles_for_sm_100a():
    from kmeans_kernels import lloyd_update
    art = lloyd_update.compile(256, torch.bfloat16, arch="sm_100a")
    assert "cvt.rzi.s64.f32" in art.ptx and re.search(r"\b(red|atom)\.\S*global\.add\.u64\b", art.ptx)


def test_rows_per_group_keeps_every_sm_busy_and_runs_long():
    from kmeans_kernels import lloyd_update as lu
    assert lu.rows_per_group(1 << 20, 128, 132) == lu.ROWS_PER_GROUP
    for N, D in [(65536, 128), (262144, 128), (65536, 256), (1 << 20, 64), (1, 128), (4096, 512), (10**6, 72)]:
        rows = lu.rows_per_group(N, D, 132)
        assert lu.UNROLL <= rows <= lu.ROWS_PER_GROUP and rows % lu.UNROLL == 0
        groups = lu.THREADS // (D // lu.VEC)
        ctas = -(-N // (groups * rows))
        assert ctas >= lu.CTAS_PER_SM * 132 or rows == lu.UNROLL


def test_kernel_rejects_what_it_cannot_take():
    from kmeans_kernels import lloyd_update
    with pytest.raises(ValueError, match="multiple of 8"):
        lloyd_update.compile(60)
    with pytest.raises(ValueError, match="bf16 or fp16"):
        lloyd_update.compile(64, torch.float32)
    with pytest.raises(ValueError, match="sm_90a"):
        lloyd_update.compile(64, arch="sm_120a")
    x = torch.zeros(8, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="CUDA"):
        lloyd_update.cluster_sums(x, torch.zeros(8, dtype=torch.int32), torch.arange(8), 0,
                                  torch.zeros(2, 64, dtype=torch.int64), torch.zeros(2, dtype=torch.int64))


def test_grouping_kernels_compile_to_one_int32_atomic_per_row():
    from kmeans_kernels import lloyd_update as lu
    from workbook import sass
    for arch in lu.ARCHS:
        ranks, places = lu.compile_grouping(arch)
        assert re.search(r"\batom\.\S*global\.add\.u32\b|\batom\.global\.\S*add\.(u|s)32\b", ranks.ptx)
        assert "atom" not in places.ptx and "red." not in places.ptx       # the places: plain loads and stores
    # up to SHARED_BINS clusters: one shared atomic per row, one global atomic per non-empty bin (in a loop)
    shared = sass.histogram(lu.compile_grouping("sm_90a", k=lu.SHARED_BINS - 1)[0].sass)
    assert shared["ATOMS.ADD"] == lu.SHARED_ROWS_PER_THREAD and shared["ATOMG.E.ADD.STRONG.GPU"] == 1
    # past them: one global atomic per row, a thread's rows' atomics with no branch between them (all in flight)
    ranks, places = (sass.histogram(a.sass) for a in lu.compile_grouping("sm_90a", k=lu.SHARED_BINS))
    assert sum(n for op, n in ranks.items() if op.startswith("ATOMG.E.ADD")) == lu.ROWS_PER_THREAD
    assert not any(op.startswith(("ATOMG.E.ADD.64", "REDG", "ATOMS")) for op in ranks) and ranks["BSSY"] == 0
    assert places["STG.E.64"] == lu.ROWS_PER_THREAD         # the rows' places in the order
    with pytest.raises(ValueError, match="sm_90a"):
        lu.compile_grouping("sm_80")


def test_grouping_refuses_what_it_cannot_take():
    from kmeans_kernels import lloyd_update
    with pytest.raises(ValueError, match="1 <= N"):
        lloyd_update.Grouping(0, 4, "cpu")
    with pytest.raises(ValueError, match="k < 2"):
        lloyd_update.Grouping(8, 0, "cpu")
    group = lloyd_update.Grouping(8, 4, "cpu")
    for ids in (torch.zeros(8, dtype=torch.int64), torch.zeros(9, dtype=torch.int32),
                torch.zeros(16, dtype=torch.int32)[::2], [0] * 8):
        with pytest.raises(ValueError, match="contiguous int32 tensor of shape \\(8,\\)"):
            group(ids)


def test_cpu_path_keeps_index_add_and_refuses_the_sort():
    x = torch.randn(64, 16).to(torch.bfloat16)
    lloyd = fitmod._Lloyd(x, 4, "auto", fitmod._Shards(None, 64))
    assert lloyd.update_method == "index_add" and lloyd.xq.dtype == torch.int64
    with pytest.raises(ValueError, match="CUDA only"):
        fitmod._Lloyd(x, 4, "auto", fitmod._Shards(None, 64), update="sorted")


# ---- on a GPU ------------------------------------------------------------------------------------------

def _case(N, D, k, dtype, seed, crowd=None):
    """x with negative values over many magnitudes (so that truncation happens), ids in [-1, k) with cluster 1
    left empty and, if `crowd`, that share of the points in cluster 0."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    mag = 2.0 ** torch.randint(-40, 4, (N, 1), generator=g, device="cuda")
    x = (torch.randn(N, D, generator=g, device="cuda") * mag).to(dtype)
    ids = torch.randint(-1, k, (N,), generator=g, device="cuda", dtype=torch.int32)
    ids[ids == 1] = 2
    if crowd:
        ids[torch.rand(N, generator=g, device="cuda") < crowd] = 0
    return x, ids


def _want(x, ids, k, s):
    slot = torch.where(ids < 0, k, ids).long()
    sums = torch.zeros(k + 1, x.shape[1], dtype=torch.int64, device=x.device).index_add_(0, slot, fixed_point_fp64(x, s))
    counts = torch.zeros(k + 1, dtype=torch.int64, device=x.device).index_add_(0, slot, torch.ones_like(slot))
    return sums, counts


@gpu
@needs_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("D", [64, 72, 128, 256])
@pytest.mark.parametrize("N,k,crowd", [(1, 3, None), (5000 + 37, 40, None), (70000 + 3, 300, 0.9)])
def test_cluster_sums_equal_index_add_of_the_fixed_point_copy(dtype, D, N, k, crowd):
    from kmeans_kernels import lloyd_update
    x, ids = _case(N, D, k, dtype, seed=N + D, crowd=crowd)
    s = fitmod._scale_exponent(x, fitmod._Shards(None, N))
    want_sums, want_counts = _want(x, ids, k, s)
    assert want_counts[1] == 0 and want_counts[k] > 0 or N == 1
    # poisoned buffers: the kernel adds to what they hold
    base = torch.randint(-2**40, 2**40, (k + 1, D + 1), device="cuda")
    sums, counts = base[:, :D].contiguous(), base[:, D].contiguous()
    sorted_ids, order = lloyd_update.Grouping(N, k, x.device)(ids)
    lloyd_update.cluster_sums(x, sorted_ids, order, s, sums, counts)
    assert torch.equal(sums - base[:, :D], want_sums)
    assert torch.equal(counts - base[:, D], want_counts)
    # any order gives the same sums (more atomics): the ids as they come, the identity permutation
    sums2, counts2 = torch.zeros_like(want_sums), torch.zeros_like(want_counts)
    lloyd_update.cluster_sums(x, ids, torch.arange(N, device="cuda"), s, sums2, counts2)
    assert torch.equal(sums2, want_sums) and torch.equal(counts2, want_counts)
    sums3, counts3 = torch.zeros_like(want_sums), torch.zeros_like(want_counts)   # torch.sort's order too
    lloyd_update.cluster_sums(x, *torch.sort(ids, stable=True), s, sums3, counts3)
    assert torch.equal(sums3, want_sums) and torch.equal(counts3, want_counts)


@gpu
@needs_cuda
def test_cluster_sums_at_a_million_rows():
    """The benchmark's size, where a group walks the most rows (ROWS_PER_GROUP), plus a tail; half the points
    in one cluster."""
    from kmeans_kernels import lloyd_update
    N, D, k = (1 << 20) + 37, 128, 4096
    assert lloyd_update.rows_per_group(N, D, torch.cuda.get_device_properties(0).multi_processor_count) == 64
    x, ids = _case(N, D, k, torch.bfloat16, seed=11, crowd=0.5)
    s = fitmod._scale_exponent(x, fitmod._Shards(None, N))
    want_sums, want_counts = _want(x, ids, k, s)
    sums, counts = torch.zeros_like(want_sums), torch.zeros_like(want_counts)
    sorted_ids, order = lloyd_update.Grouping(N, k, x.device)(ids)
    for _ in range(2):                       # the second call replays the launch cache's graph
        sums.zero_()
        counts.zero_()
        lloyd_update.cluster_sums(x, sorted_ids, order, s, sums, counts)
        assert torch.equal(sums, want_sums) and torch.equal(counts, want_counts)


@gpu
@needs_cuda
@pytest.mark.parametrize("N,k,crowd", [(1, 1, None), (255, 3, None), (257, 40, 0.5), (70000 + 3, 300, None),
                                       ((1 << 20) + 37, 4096, 0.3), (16384 * 3 + 1, 32767, None),
                                       (200003, 40000, 0.2)])
def test_grouping_places_every_row_once_beside_its_cluster(N, k, crowd):
    """Fresh ids in [-1, k) (cluster 1 empty, a crowd in cluster 0), poisoned buffers, the same buffers called
    again with new ids (the launch caches' graph replays after a few calls): sorted_ids is the sorted slots,
    order a permutation that takes each row to a place in its cluster's run, count the cluster sizes. Both
    ranks kernels: k + 1 up to SHARED_BINS (the last of them exactly) and past it, and the global one below it."""
    from kmeans_kernels import lloyd_update
    group = lloyd_update.Grouping(N, k, torch.device("cuda", 0))
    assert group.shared == (k + 1 <= lloyd_update.SHARED_BINS)
    ids = torch.empty(N, dtype=torch.int32, device="cuda")
    for call in range(10):
        group.shared = group.shared and call < 6       # the last calls through ClusterRanks
        ids.copy_(_case(N, 8, k, torch.bfloat16, seed=1000 * call + N, crowd=crowd)[1])
        group.sorted_ids.fill_(-5)
        group.order.fill_(N + 9)
        group.count.fill_(77)       # zeroed by the call itself
        sorted_ids, order = group(ids)
        slot = torch.where(ids < 0, k, ids)
        assert torch.equal(sorted_ids, torch.sort(slot).values)
        assert torch.equal(torch.sort(order).values, torch.arange(N, device="cuda"))
        assert torch.equal(slot[order], sorted_ids)
        assert torch.equal(group.count.long(), torch.bincount(slot, minlength=k + 1))


@gpu
@needs_cuda
def test_cluster_sums_reject_misaligned_x():
    from kmeans_kernels import lloyd_update
    buf = torch.zeros(64 * 64 + 8, dtype=torch.bfloat16, device="cuda")
    x = buf[1:1 + 64 * 64].view(64, 64)
    ids = torch.zeros(64, dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="16-byte"):
        lloyd_update.cluster_sums(x, ids, torch.arange(64, device="cuda"), 0,
                                  torch.zeros(2, 64, dtype=torch.int64, device="cuda"),
                                  torch.zeros(2, dtype=torch.int64, device="cuda"))


@gpu
@needs_cuda
@pytest.mark.parametrize("seed,dtype,init", [(0, torch.bfloat16, None), (1, torch.float16, None),
                                             (2, torch.bfloat16, "k-means++")])
def test_fit_with_the_sorted_update_equals_index_add_bit_for_bit(monkeypatch, seed, dtype, init):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = (3 * torch.randn(60000, 128, generator=g, device="cuda")).to(dtype)
    c0 = x[torch.randperm(60000, generator=g, device="cuda")[:256]].float() if init is None else init
    runs = {}
    for update in fitmod.UPDATES:
        monkeypatch.setattr(fitmod, "_CUDA_UPDATE", update)
        runs[update] = kmeans_kernels.fit(x, 256, init=c0, iters=6, tol=None, seed=seed)
    a, b = runs["sorted"], runs["index_add"]
    assert torch.equal(a.centroids, b.centroids) and torch.equal(a.ids, b.ids) and a.inertia == b.inertia
    assert a.inertia[-1] < a.inertia[0]


@gpu
@needs_cuda
def test_a_lloyd_step_never_waits_for_the_gpu():
    """tol=None must never wait: the sort and the kernel launch, like the rest of an iteration, queue work only."""
    x = torch.randn(100000, 128, device="cuda").to(torch.bfloat16)
    lloyd = fitmod._Lloyd(x, 512, "auto", fitmod._Shards(None, x.shape[0]))
    assert lloyd.update_method == "sorted" and lloyd.xq is None
    c = x[:512].float()
    lloyd.step(c, lloyd.ids, None)            # compiles and loads the kernels
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(2):
            c, _ = lloyd.step(c, lloyd.ids, None)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


# ---- the new centroids and the inertia terms (CentroidUpdate) ------------------------------------------------

def test_update_kernel_compiles_to_the_torch_formula_operations():
    """The same IEEE operations as the torch formula: int64 -> float64, x unit, / max(n, 1), one rounding to fp32."""
    from kmeans_kernels import lloyd_update
    for arch in ("sm_90a", "sm_100a"):
        ptx = lloyd_update.compile_update(128, arch=arch).ptx
        for op in ("cvt.rn.f64.s64", "div.rn.f64", "cvt.rn.f32.f64"):
            assert op in ptx, (arch, op)
        assert not re.search(r"\b(red|atom)\.", ptx) and not re.search(r"div\.(approx|full)", ptx)


def test_update_kernel_refuses_what_it_cannot_take():
    from kmeans_kernels import lloyd_update
    k, D = 4, 64
    cpu = dict(sums=torch.zeros(k + 1, D, dtype=torch.int64), counts=torch.zeros(k + 2, dtype=torch.int64),
               c=torch.zeros(k, D), mean=torch.zeros(D, dtype=torch.float64), unit=1.0, out=torch.zeros(k, D),
               terms=torch.zeros(k * D // 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="CUDA"):
        lloyd_update.centroid_update(**cpu)
    with pytest.raises(ValueError, match="multiple of 8"):
        lloyd_update.compile_update(60)


def _update_case(k, D, seed):
    """Sums near the int64 range and small, counts 0 (empty), 1 and large, centroids and a mean of both signs."""
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, 5000, (k + 2,), generator=g)
    counts[:: 5] = 0
    counts[1:: 7] = 1
    sums = torch.randint(-2**62, 2**62, (k + 1, D), generator=g)
    sums[:: 3] //= 2**40
    c = torch.randn(k, D, generator=g) * 100
    mean = torch.randn(D, generator=g, dtype=torch.float64) * 10
    return [t.cuda() for t in (sums, counts, c, mean)]


@gpu
@needs_cuda
@pytest.mark.parametrize("k,D", [(1, 16), (37, 64), (4096, 128), (257, 72), (3, 512)])
@pytest.mark.parametrize("s", [0, 40, -30])
def test_centroid_update_equals_the_torch_formula(k, D, s):
    from kmeans_kernels import lloyd_update
    sums, counts, c, mean = _update_case(k, D, seed=k * D + s)
    unit = math.ldexp(1.0, -s)
    out = torch.full_like(c, float("nan"))                                   # poisoned: every entry written
    terms = torch.full((k * D // lloyd_update.VEC,), float("nan"), dtype=torch.float64, device="cuda")
    lloyd_update.centroid_update(sums, counts, c, mean, unit, out, terms)
    n = counts[:k]
    want = torch.where((n > 0)[:, None], ((sums[:k].double() * unit) / n.clamp(min=1).double()[:, None]).float(), c)
    assert torch.equal(out, want)
    assert torch.equal(out[n == 0], c[n == 0]) and (n == 0).any()
    nd = n.double()
    centred = c.double() - mean
    sums_c = sums[:k].double() * unit - nd[:, None] * mean
    want_terms = (nd * (centred * centred).sum(1)).sum() - 2.0 * (sums_c * centred).sum()
    assert terms.sum().item() == pytest.approx(want_terms.item(), rel=1e-12, abs=1e-9 * abs(want_terms.item()) + 1e-300)


@gpu
@needs_cuda
def test_fit_step_on_cuda_uses_the_update_kernel_and_equals_the_cpu_step():
    """One Lloyd step on exact data: the CUDA centroids equal the CPU path's bit for bit, the inertia to 1e-12."""
    g = torch.Generator().manual_seed(5)
    x = torch.randint(-8, 9, (3001, 64), generator=g).to(torch.bfloat16)
    c = x[:40].float() + 0.25
    got = {}
    for device in ("cpu", "cuda"):
        xd = x.to(device)
        lloyd = fitmod._Lloyd(xd, 40, "auto", fitmod._Shards(None, xd.shape[0]))
        new, inertia = lloyd.step(c.to(device), lloyd.ids, None)
        got[device] = (new.cpu(), inertia.item(), lloyd.ids.cpu())
    assert torch.equal(got["cpu"][2], got["cuda"][2]) and torch.equal(got["cpu"][0], got["cuda"][0])
    assert got["cuda"][1] == pytest.approx(got["cpu"][1], rel=1e-12)

"""fit's state kernels on CUDA (kmeans_kernels.lloyd_state): their machine code and grid, compiled here with no
GPU; on a GPU (`-m gpu`) the column totals against the float64 definition bit for bit and the spread against
torch's float64 pass, from poisoned partial buffers, with tails, wide exponents, signed zeros and subnormals."""
import math
import re

import pytest
import torch

from kmeans_kernels import lloyd as fitmod

gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


# ---- compiled with no GPU ------------------------------------------------------------------------------

@pytest.mark.parametrize("D,dtype", [(128, torch.bfloat16), (64, torch.float16), (72, torch.bfloat16)])
def test_totals_kernel_is_one_read_of_x_and_the_fixed_point_rule(D, dtype):
    from kmeans_kernels import lloyd_state as ls
    from workbook import sass
    art = ls.compile(D, dtype, arch="sm_90a")
    assert "cvt.rzi.s64.f32" in art.ptx                              # the update's truncation to int64
    assert not re.search(r"\b(red|atom)\.", art.ptx)                 # partials, no atomics: nothing to zero
    assert not re.search(r"\.ftz\b", art.ptx)                        # subnormal x must not be flushed
    ops = sass.histogram(art.sass)
    assert ops["F2I.S64.TRUNC"] == ls.VEC * ls.UNROLL
    assert ops["LDG.E.128"] == ls.UNROLL                             # x, 16 bytes a row-slice; nothing else read
    assert not any(op.startswith(("D", "F2F.F64")) for op in ops)    # no float64 in the totals


def test_spread_kernel_adds_in_float64():
    from kmeans_kernels import lloyd_state as ls
    from workbook import sass
    art = ls.compile(128, torch.bfloat16, arch="sm_90a", spread=True)
    ops = sass.histogram(art.sass)
    assert ops["LDG.E.128"] == ls.UNROLL and ops["DFMA"] == ls.VEC * ls.UNROLL
    assert not any(op.startswith("F2I") for op in ops)


def test_kernels_compile_for_sm_100a():
    from kmeans_kernels import lloyd_state as ls
    assert "cvt.rzi.s64.f32" in ls.compile(256, torch.bfloat16, arch="sm_100a").ptx
    assert "fma.rn.f64" in ls.compile(256, torch.float16, arch="sm_100a", spread=True).ptx


def test_grid_fills_the_gpu_keeps_groups_busy_and_indices_in_32_bits():
    from kmeans_kernels import lloyd_state as ls
    from kmeans_kernels import lloyd_update as lu
    assert ls.grid(1 << 20, 128, 132) == ls.CTAS_PER_SM * 132
    assert ls.grid(1, 128, 132) == 1 and ls.grid(100, 64, 132) == 1
    for N, D in [(65536, 64), (65536, 128), (262144, 256), (5037, 72), (lu.MAX_ROWS, 16), (lu.MAX_ROWS, 512)]:
        ctas = ls.grid(N, D, 132)
        groups = ls.row_groups(D)
        assert groups * (D // ls.VEC) <= lu.THREADS and 1 <= ctas <= ls.CTAS_PER_SM * 132
        assert N >= ctas * groups * ls.MIN_ROWS or ctas == 1
        assert N + ls.UNROLL * ctas * groups <= 2**31 - 1


def test_kernels_refuse_what_they_cannot_take():
    from kmeans_kernels import lloyd_state as ls
    with pytest.raises(ValueError, match="multiple of 8"):
        ls.compile(60)
    with pytest.raises(ValueError, match="sm_90a"):
        ls.compile(64, arch="sm_120a")
    with pytest.raises(ValueError, match="CUDA"):
        ls.column_totals(torch.zeros(8, 64, dtype=torch.bfloat16), 0)
    with pytest.raises(ValueError, match="CUDA"):
        ls.spread_about(torch.zeros(8, 64, dtype=torch.bfloat16), torch.zeros(64, dtype=torch.float64))


# ---- on a GPU ------------------------------------------------------------------------------------------

def _case(N, D, dtype, seed):
    """Rows of mixed sign and scale (16 binades), with -0, +0 and the dtype's subnormals among them."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, D, generator=g) * 2.0 ** torch.randint(-12, 4, (N, 1), generator=g)
    x = x.to(dtype)
    flat = x.view(-1)
    tiny = torch.finfo(dtype).smallest_normal
    flat[:: 7] = -0.0
    flat[3:: 11] = tiny / 4
    flat[5:: 13] = -tiny / 2
    return x.cuda()


def _poisoned(monkeypatch):
    from kmeans_kernels import lloyd_state as ls
    made = []

    def buffer(shape, dtype, device):
        t = torch.full(shape, -7 if dtype == torch.int64 else float("nan"), dtype=dtype, device=device)
        made.append(t)
        return t
    monkeypatch.setattr(ls, "_buffer", buffer)
    return made


@gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("D", [64, 72, 128, 256, 512])
@pytest.mark.parametrize("N", [1, 37, 5000 + 37, 70000 + 3])
def test_column_totals_equal_the_fixed_point_definition(monkeypatch, dtype, D, N):
    from kmeans_kernels import lloyd_state as ls
    made = _poisoned(monkeypatch)
    x = _case(N, D, dtype, seed=N * D)
    s = fitmod._scale_exponent(x, fitmod._Shards(None, N))
    want = (x.double() * math.ldexp(1.0, s)).long().sum(0)    # float64 product: exact; .long() truncates
    got = ls.column_totals(x, s)
    assert made and torch.equal(got, want)
    assert torch.equal(got, fitmod.fixed_point_total(x, s))


@gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("D,N", [(64, 1), (72, 5000 + 37), (128, 70000 + 3), (256, 37), (512, 4099)])
def test_spread_about_the_mean_equals_the_float64_pass(monkeypatch, dtype, D, N):
    from kmeans_kernels import lloyd_state as ls
    made = _poisoned(monkeypatch)
    x = _case(N, D, dtype, seed=N + D) + 3    # an offset: the spread is about the mean, not about zero
    mean = x.double().mean(0)
    got = ls.spread_about(x, mean)
    assert made and torch.isfinite(got)
    assert got.item() == pytest.approx(fitmod.spread_about(x, mean).item(), rel=1e-13, abs=1e-300)
    assert torch.equal(ls.spread_about(x, mean), got)      # the same bits, call after call


@gpu
@needs_cuda
def test_state_at_a_million_rows_and_on_a_zero_column():
    """The benchmark's size plus a tail; a constant column adds exactly nothing to the spread."""
    from kmeans_kernels import lloyd_state as ls
    N, D = (1 << 20) + 37, 128
    x = (torch.randn(N, D, device="cuda") * 3 + 1).to(torch.bfloat16)
    x[:, 5] = 2.5
    s = fitmod._scale_exponent(x, fitmod._Shards(None, N))
    assert torch.equal(ls.column_totals(x, s), fitmod.fixed_point_total(x, s))
    mean = x.double().mean(0)
    assert mean[5].item() == 2.5
    assert ls.spread_about(x, mean).item() == pytest.approx(fitmod.spread_about(x, mean).item(), rel=1e-13)
    assert ls.spread_about(x[:, 5:13].contiguous() * 0 + 2.5, mean[5:13].clone() * 0 + 2.5).item() == 0.0


@gpu
@needs_cuda
def test_state_kernels_refuse_a_misaligned_x_and_a_bad_mean():
    from kmeans_kernels import lloyd_state as ls
    x = torch.zeros(4 * 64 + 8, dtype=torch.bfloat16, device="cuda")[4:4 + 4 * 64].view(4, 64)
    with pytest.raises(ValueError, match="16-byte"):
        ls.column_totals(x, 0)
    good = torch.zeros(4, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="float64"):
        ls.spread_about(good, torch.zeros(64, device="cuda"))
    with pytest.raises(ValueError, match="float64"):
        ls.spread_about(good, torch.zeros(32, dtype=torch.float64, device="cuda"))

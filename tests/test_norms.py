"""The centroid norms in one launch (kmeans_kernels.norms): machine code and refusals here with no GPU; on a GPU
(`-m gpu`) the reference's norms bit for bit, with tails, special values and a poisoned output, and `assign(x, c)`
without c_sq equal to the call with the reference's norms."""
import pytest
import torch

import kmeans_kernels
from kmeans_kernels import reference

gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


# ---- compiled with no GPU ------------------------------------------------------------------------------

@pytest.mark.parametrize("D,dtype,arch", [(128, torch.bfloat16, "sm_90a"), (16, torch.float16, "sm_90a"),
                                          (48, torch.bfloat16, "sm_90a"), (512, torch.bfloat16, "sm_100a")])
def test_kernel_reads_each_row_in_16_byte_vectors_and_adds_in_float64(D, dtype, arch):
    from kmeans_kernels import norms
    from workbook import sass
    art = norms.compile(D, dtype, arch=arch)
    ops = sass.histogram(art.sass)
    lanes = norms.lanes_per_row(D)
    per_lane = D // lanes
    assert ops["LDG.E.128"] == per_lane // norms.VEC              # the row once, 16 bytes a load, spread over lanes
    assert ops["DFMA"] + ops["DMUL"] == per_lane                   # each element squared (and added) in float64
    assert ops["SHFL.BFLY"] == 2 * (lanes.bit_length() - 1)        # the lanes' float64 sums: two halves a step
    assert ops["F2F.F32.F64"] == 1 and ops["STG.E"] == 1           # one rounding, one store per centroid
    assert not any(op.startswith(("LDL", "STL", "FFMA", "FADD")) for op in ops)   # no spills, no float32 sums
    assert ".ftz" not in art.ptx                                   # subnormal squares are kept


def test_lanes_per_row_spread_a_row_over_at_most_a_warp():
    from kmeans_kernels import norms
    assert [norms.lanes_per_row(D) for D in (16, 48, 64, 96, 128, 256, 512)] == [2, 2, 8, 4, 16, 32, 32]
    for D in range(16, 513, 16):
        lanes = norms.lanes_per_row(D)
        assert norms.THREADS % lanes == 0 and (D // norms.VEC) % lanes == 0 and lanes & (lanes - 1) == 0


def test_kernel_refuses_what_it_cannot_take():
    from kmeans_kernels import norms
    with pytest.raises(ValueError, match="multiple of 16"):
        norms.compile(72)
    with pytest.raises(ValueError, match="bf16 or fp16"):
        norms.compile(64, torch.float32)
    with pytest.raises(ValueError, match="sm_90a"):
        norms.compile(64, arch="sm_120a")
    with pytest.raises(ValueError, match="CUDA"):
        norms.centroid_norms(torch.zeros(4, 64, dtype=torch.bfloat16))


# ---- on a GPU ------------------------------------------------------------------------------------------

def _centroids(K, D, dtype, seed):
    """Rows of mixed sign and scale (12 binades), with -0 and the dtype's subnormals among them."""
    g = torch.Generator().manual_seed(seed)
    c = torch.randn(K, D, generator=g) * 2.0 ** torch.randint(-8, 4, (K, 1), generator=g)
    c = c.to(dtype)
    flat = c.view(-1)
    tiny = torch.finfo(dtype).smallest_normal
    flat[::7] = -0.0
    flat[3::11] = tiny / 4
    return c.cuda()


@gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("D", [16, 48, 64, 128, 256, 512])
@pytest.mark.parametrize("K", [1, 127, 128, 129, 4096 + 5])
def test_norms_equal_the_reference_bit_for_bit_into_a_poisoned_output(dtype, D, K):
    from kmeans_kernels import norms
    c = _centroids(K, D, dtype, seed=K * D)
    out = torch.full((K + 1,), float("nan"), device="cuda")
    got = norms.centroid_norms(c, out=out[:K])
    torch.cuda.synchronize()
    assert got.data_ptr() == out.data_ptr()
    assert torch.equal(got, reference.centroid_norms(c))
    assert torch.isnan(out[K])                                     # nothing written past K


@gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_norms_of_special_values_follow_the_reference(dtype):
    from kmeans_kernels import norms
    big = torch.finfo(dtype).max
    c = torch.randn(6, 64).to(dtype)
    c[0, 3] = float("inf")
    c[1, 5] = float("-inf")
    c[2, 7] = float("nan")
    c[3] = big                                                     # bf16: a norm past float32's range
    c[4] = -0.0                                                    # a zero norm
    c = c.cuda()
    got = norms.centroid_norms(c)
    want = reference.centroid_norms(c)
    assert torch.equal(torch.isnan(got), torch.isnan(want)) and torch.isnan(got[2])
    assert torch.equal(got[~torch.isnan(got)], want[~torch.isnan(want)])
    assert got[0] == float("inf") and got[1] == float("inf") and got[4] == 0.0
    assert got[3].item() == (float("inf") if dtype == torch.bfloat16 else 64 * big * big)   # fp16's: exact


@gpu
@needs_cuda
def test_norms_on_a_side_stream_and_inside_a_capture():
    """The launch goes to the current stream (and so into a caller's CUDA graph)."""
    from kmeans_kernels import norms
    c = _centroids(1000, 128, torch.bfloat16, seed=3)
    want = reference.centroid_norms(c)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = norms.centroid_norms(c)
    side.synchronize()
    assert torch.equal(got, want)
    out = torch.full((1000,), float("nan"), device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        norms.centroid_norms(c, out=out)
    c.mul_(2)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, reference.centroid_norms(c))


@gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("N,D,K", [(1000, 64, 512), (4099, 128, 4096 + 3), (333, 256, 129)])
def test_assign_without_c_sq_equals_the_call_with_the_reference_norms(dtype, N, D, K):
    x = torch.randint(-4, 5, (N, D)).to(dtype).cuda()
    c = torch.randint(-4, 5, (K, D)).to(dtype).cuda()
    for _ in range(12):                                            # past the launch caches' capture of a graph
        got = kmeans_kernels.assign(x, c)
    want = kmeans_kernels.assign(x, c, c_sq=reference.centroid_norms(c))
    assert torch.equal(got, want) and torch.equal(got, reference.assign(x, c))
    c2 = torch.randint(-4, 5, (K, D)).to(dtype).cuda()             # new centroids at a new address
    assert torch.equal(kmeans_kernels.assign(x, c2), reference.assign(x, c2))

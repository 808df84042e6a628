"""The kernels inside real programs, on a GPU (`pytest -m gpu`): a caller's CUDA graph, fresh tensors at every
call, a tensor on another GPU than the current one, a misaligned view.

Inside `torch.cuda.graph` our launch cache used to start a capture of its own on a side stream, which
invalidated the caller's capture (cudaErrorStreamCaptureInvalidated) and left the process unusable (the next
capture raised "Offset increment outside graph capture encountered unexpectedly"). The kernel must become a node
of the caller's graph, and replaying that graph must give the right answer for the data in its tensors then.
As torch.cuda.graph's documentation asks of any library, each test warms up on a side stream first.
"""
from __future__ import annotations

import pytest
import torch

import gemm_kernels
import kmeans_kernels
from kmeans_kernels import reference
from workbook import launch

pytestmark = pytest.mark.gpu
HERE = torch.cuda.is_available() and torch.cuda.get_device_capability(0) in ((9, 0), (10, 0))
needs_gpu = pytest.mark.skipif(not HERE, reason="needs an sm_90 or sm_100 GPU")
needs_hopper = pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)),
                                  reason="the Hopper GEMM needs an sm_90 GPU")
needs_two = pytest.mark.skipif(not (HERE and torch.cuda.device_count() > 1), reason="needs two GPUs")


def small_integers(shape, gen, dtype=torch.bfloat16, device="cuda"):
    return torch.randint(-3, 4, shape, generator=gen, device=device).to(dtype)


def warm_up(fn):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)


def the_process_is_still_usable():
    """A capture that draws random numbers (the philox offset is what broke) and replays correctly."""
    g = torch.cuda.CUDAGraph()
    static = torch.zeros(1000, device="cuda")
    with torch.cuda.graph(g):
        static.copy_(torch.rand(1000, device="cuda") + 1)
    g.replay()
    torch.cuda.synchronize()
    assert bool(((static >= 1) & (static < 2)).all())


@needs_gpu
@pytest.mark.parametrize("fresh_out", [True, False], ids=["out-allocated", "out-given"])
def test_kmeans_assign_inside_a_users_cuda_graph(fresh_out):
    gen = torch.Generator(device="cuda").manual_seed(21)
    x, c = small_integers((3000, 128), gen), small_integers((700, 128), gen)
    out = torch.full((3000,), -7, dtype=torch.int32, device="cuda")
    run = (lambda: kmeans_kernels.assign(x, c)) if fresh_out else (lambda: kmeans_kernels.assign(x, c, out=out))
    warm_up(run)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        ids = run()
    for step in range(3):                   # new data in the graph's tensors, then a replay
        x.copy_(small_integers(x.shape, gen))
        c.copy_(small_integers(c.shape, gen))
        ids.fill_(-7)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(ids, reference.assign(x, c)), f"replay {step}"
    assert torch.equal(kmeans_kernels.assign(x, c), reference.assign(x, c))     # and eagerly after it
    the_process_is_still_usable()


@needs_hopper
def test_gemm_inside_a_users_cuda_graph():
    gen = torch.Generator(device="cuda").manual_seed(22)
    M, N, K = 1000, 1032, 520
    a, b = small_integers((M, K), gen), small_integers((K, N), gen)
    warm_up(lambda: gemm_kernels.gemm(a, b))
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        c = gemm_kernels.gemm(a, b)
        c2 = gemm_kernels.gemm(c[:, :K].contiguous(), b)     # two kernels in one graph, the second on the first's
    for step in range(3):
        a.copy_(small_integers(a.shape, gen))
        c.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        want = (a.float() @ b.float()).to(torch.bfloat16)
        assert torch.equal(c, want), f"replay {step}"
        assert torch.equal(c2, (want[:, :K].float() @ b.float()).to(torch.bfloat16)), f"replay {step}"
    assert torch.equal(gemm_kernels.gemm(a, b), (a.float() @ b.float()).to(torch.bfloat16))
    the_process_is_still_usable()


@needs_gpu
def test_fresh_tensors_at_every_call_are_launched_directly():
    """Training-style code: no graph is captured for an argument set seen once, so a first call costs a launch.
    The centroid norms' launch sees the same c at every call (a repeated set, its output re-aimed): that cache
    may capture; the assignment's, whose x and out are new each time, must not."""
    from kmeans_kernels import norms
    gen = torch.Generator(device="cuda").manual_seed(23)
    c = small_integers((300, 64), gen)
    x0 = small_integers((500, 64), gen)
    keep = [(x0, kmeans_kernels.assign(x0, c))]   # held: freed, their addresses would come back as a repeat
    repeated = norms._launches(64, c.dtype, kmeans_kernels.arch_of(0), 0)
    caches = [o for o in __import__("gc").get_objects() if isinstance(o, launch.LaunchCache) and o is not repeated]
    graphs_before = sum(cache.graph_count for cache in caches)
    repeated_before = repeated.graph_count      # other tests in this process may have filled it
    for _ in range(10):
        x = small_integers((500, 64), gen)
        keep.append((x, kmeans_kernels.assign(x, c)))           # held: every address new
    torch.cuda.synchronize()
    assert all(torch.equal(ids, reference.assign(x, c)) for x, ids in keep)
    assert sum(cache.graph_count for cache in caches) == graphs_before
    assert repeated.graph_count - repeated_before <= 1          # c repeats: at most one re-aimable capture


@needs_gpu
def test_a_view_two_bytes_in_is_refused_on_every_backend():
    x = torch.zeros(65 * 128 + 8, dtype=torch.bfloat16, device="cuda")[1:1 + 65 * 128].view(65, 128)
    c = torch.zeros(10, 128, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="16-byte"):
        kmeans_kernels.assign(x, c)


@needs_two
def test_tensors_on_another_gpu_than_the_current_one():
    gen = torch.Generator(device="cuda:1").manual_seed(24)
    x, c = small_integers((2000, 128), gen, device="cuda:1"), small_integers((300, 128), gen, device="cuda:1")
    with torch.cuda.device(0):
        ids = kmeans_kernels.assign(x, c)
        assert ids.device == x.device and torch.cuda.current_device() == 0
    torch.cuda.synchronize(1)
    assert torch.equal(ids, reference.assign(x, c))
    if torch.cuda.get_device_capability(1) == (9, 0):
        a, b = small_integers((300, 256), gen, device="cuda:1"), small_integers((256, 512), gen, device="cuda:1")
        with torch.cuda.device(0):
            got = gemm_kernels.gemm(a, b)
        torch.cuda.synchronize(1)
        assert torch.equal(got, (a.float() @ b.float()).to(torch.bfloat16))

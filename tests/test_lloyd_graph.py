"""fit's Lloyd loop replayed from CUDA graphs (`lloyd._GraphLoop`) against its eager loop: the same results bit for
bit. On the CPU the loop's bookkeeping (parities, history counter, convergence status, the final assignment, the
fallback when a capture fails) runs through stand-in graphs; on a GPU (`-m gpu`) through torch.cuda.CUDAGraph."""
import warnings

import pytest
import torch

import kmeans_kernels
from kmeans_kernels import lloyd as fitmod

bf16 = torch.bfloat16
gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def blobs(n, d, k, seed, dtype=bf16, device="cpu"):
    """Small integers around k centres 4 apart per coordinate, noise in {-1, 0, 1}: well separated, exact."""
    g = torch.Generator(device=device).manual_seed(seed)
    centres = 4 * torch.randint(-4, 5, (k, d), generator=g, device=device)
    labels = torch.randint(0, k, (n,), generator=g, device=device)
    return (centres[labels] + torch.randint(-1, 2, (n, d), generator=g, device=device)).to(dtype)


def randn(n, d, seed, dtype=bf16, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    return (3 * torch.randn(n, d, generator=g, device=device)).to(dtype)


def far_init(x, k, seed):
    """k rows of x as centroids, the last one moved far from every point: its cluster stays empty."""
    g = torch.Generator(device=x.device).manual_seed(seed)
    c0 = x[torch.randperm(x.shape[0], generator=g, device=x.device)[:k]].float()
    c0[-1] = 1000.0
    return c0


class Stand:
    """Graphs on the CPU: capture runs nothing and returns something whose replay runs the body, as a CUDA graph
    replays what was captured. Counts what happened; `fail` makes every capture raise."""

    def __init__(self, fail=False):
        self.fail, self.warm_ups, self.captures, self.replays = fail, 0, 0, 0

    def warm_up(self, body):
        self.warm_ups += 1
        body()

    def capture(self, body):
        self.captures += 1
        if self.fail:
            raise RuntimeError("operation not permitted when stream is capturing\nsecond line")
        stand = self

        class Graph:
            def replay(self):
                stand.replays += 1
                body()
        return Graph()


def prepared(x, k, init, iters, tol):
    """What fit builds before its loop: (the state, the initial centroids, the tol threshold)."""
    shards = fitmod._Shards(None, 0)
    fitmod._check(x, k, iters, tol, init, "auto", shards, fitmod._comm_device(None))
    lloyd = fitmod._Lloyd(x, k, "auto", shards)
    c = fitmod._initial_centroids(x, k, init, 0, shards)
    return lloyd, c, None if tol is None else tol * lloyd.variance


def eager_loop(x, k, init, iters, tol):
    lloyd, c, threshold = prepared(x, k, init, iters, tol)
    return fitmod._eager_loop(lloyd, c, iters, tol, threshold)


def assert_same(a, b):
    """Two loop results (centroids, ids, history, iterations, converged): equal bit for bit."""
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert torch.equal(a[2], b[2]) and a[2].dtype == b[2].dtype == torch.float64
    assert a[3:] == b[3:]


CASES = {   # name: (x, k, init, iters, tol, how it ends)
    "tol=None": (randn(3000, 16, 0), 12, "k-means++", 5, None, "all iterations"),
    "one iteration": (randn(500, 8, 1), 4, "random", 1, None, "all iterations"),
    "shift within tol": (randn(3000, 16, 0), 12, "k-means++", 300, 1e-2, "shift"),
    "ids unchanged": (blobs(2000, 16, 6, 2), 6, "k-means++", 50, 1e-4, "ids"),
    "tol=0, runs out": (randn(3000, 16, 3), 12, "random", 4, 0.0, "all iterations"),
    "empty cluster": (randn(3000, 16, 4), 12, None, 6, 1e-4, "all iterations"),
}


@pytest.mark.parametrize("name", CASES)
def test_graph_loop_equals_the_eager_loop_bit_for_bit(name):
    x, k, init, iters, tol, ends = CASES[name]
    init = far_init(x, k, 5) if init is None else init
    eager = eager_loop(x, k, init, iters, tol)
    stand = Stand()
    lloyd, c, threshold = prepared(x, k, init, iters, tol)
    graphed = fitmod._graph_loop(lloyd, c, iters, tol, threshold, graphs=stand)
    assert_same(graphed, eager)
    c_out, ids, history, iterations, converged = graphed
    strict = len(history) == iterations        # the ids stopped changing: no closing assignment
    assert (iterations == iters) == (ends == "all iterations")
    if ends != "all iterations":
        assert converged and strict == (ends == "ids")
    # the first run is the warm-up; the closing assignment (where the ids did not stop changing) is a replay,
    # with no tol of a graph of its own (it compares the ids, the iterations do not)
    runs = iterations + (not strict)
    captures = min(2, runs - 1) if tol is not None else min(2, iterations - 1) + 1
    assert stand.warm_ups == 1 and stand.replays == runs - 1 and stand.captures == captures
    if name == "empty cluster":
        assert not (ids == k - 1).any() and torch.equal(c_out[-1], init[-1])


def test_fit_falls_back_to_the_eager_body_when_a_capture_fails():
    x, k, init, iters, tol, _ = CASES["tol=None"]
    eager = eager_loop(x, k, init, iters, tol)
    stand = Stand(fail=True)
    with pytest.warns(RuntimeWarning, match=r"failed \(RuntimeError: operation not permitted[^\n]*\); running it "
                                            r"eagerly$") as caught:
        graphed = fitmod._graph_loop(*prepared(x, k, init, iters, tol)[:2], iters, tol, None, graphs=stand)
    assert len([w for w in caught if "CUDA graph" in str(w.message)]) == 1
    assert stand.captures == 1 and stand.replays == 0
    assert_same(graphed, eager)


def test_graph_loop_refuses_more_runs_than_it_has_history_for():
    """The device counter indexes the history: past its end the host refuses, before any device-side index."""
    x, k, init, iters, tol, _ = CASES["one iteration"]
    lloyd, c, _ = prepared(x, k, init, iters, tol)
    loop = fitmod._GraphLoop(lloyd, 2, None, graphs=Stand())
    loop.start(c)
    for p in (0, 1, 0):
        loop.run(p)
    with pytest.raises(RuntimeError, match="start"):
        loop.run(1)
    loop.start(c)            # a new loop on the same graphs: from the history's start
    loop.run(0)
    assert loop.runs == 1 and int(loop.count) == 1


def test_fit_on_the_cpu_and_under_a_group_stays_eager(monkeypatch):
    """The graph loop is for CUDA without a process group only; the CPU path never builds one."""
    monkeypatch.setattr(fitmod, "_graph_loop", lambda *a, **k: pytest.fail("the CPU path took the graph loop"))
    x, k, init, iters, tol, _ = CASES["tol=None"]
    r = kmeans_kernels.fit(x, k, init=init, iters=iters, tol=tol)
    assert r.iterations == iters and len(r.inertia) == iters + 1


# ---- on a GPU: torch.cuda.CUDAGraph ---------------------------------------------------------------------------

def count_replays(monkeypatch):
    """A list that grows by one at every torch.cuda.CUDAGraph.replay."""
    seen = []
    replay = torch.cuda.CUDAGraph.replay

    def counted(self):
        seen.append(1)
        return replay(self)
    monkeypatch.setattr(torch.cuda.CUDAGraph, "replay", counted)
    return seen


def both_ways(monkeypatch, x, k, **kw):
    """fit eagerly and from graphs; (eager, graphed, replays of the graphed run). A fallback warning fails."""
    monkeypatch.setattr(fitmod, "_GRAPHS", False)
    seen = count_replays(monkeypatch)
    eager = kmeans_kernels.fit(x, k, **kw)
    assert not seen
    monkeypatch.setattr(fitmod, "_GRAPHS", True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        graphed = kmeans_kernels.fit(x, k, **kw)
    return eager, graphed, len(seen)


def assert_same_fit(a, b):
    assert torch.equal(a.centroids, b.centroids) and torch.equal(a.ids, b.ids)
    assert a.inertia == b.inertia and a.iterations == b.iterations and a.converged == b.converged


@gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [bf16, torch.float16])
def test_graph_fit_equals_eager_with_tol_none_and_an_empty_cluster(monkeypatch, dtype):
    x = randn(60000, 64, 7, dtype, "cuda")
    c0 = far_init(x, 256, 8)
    eager, graphed, replays = both_ways(monkeypatch, x, 256, init=c0, iters=6, tol=None)
    assert_same_fit(graphed, eager)
    assert replays == 7 - 1                    # all but the warm-up, the closing assignment included
    assert len(graphed.inertia) == 7 and graphed.inertia[-1] < graphed.inertia[0]
    assert not (graphed.ids == 255).any() and torch.equal(graphed.centroids[-1], c0[-1])


@gpu
@needs_cuda
@pytest.mark.parametrize("dtype,tol,ends", [(bf16, 1e-4, "shift"), (torch.float16, 0.0, "ids")])
def test_graph_fit_equals_eager_when_it_stops_early(monkeypatch, dtype, tol, ends):
    """One read of the status per iteration. On these blobs the CPU path stops on the shift test at tol=1e-4
    (after 14 iterations) and on unchanged ids at tol=0 (18); exact inputs, so the GPU's answers are the same."""
    x = blobs(60000, 64, 256, 9, dtype).cuda()
    eager, graphed, replays = both_ways(monkeypatch, x, 256, iters=100, tol=tol)
    assert_same_fit(graphed, eager)
    strict = len(graphed.inertia) == graphed.iterations
    assert graphed.converged and graphed.iterations < 100 and strict == (ends == "ids")
    assert replays == len(graphed.inertia) - 1  # every run but the warm-up, the closing assignment included


@gpu
@needs_cuda
def test_graph_replays_never_wait_for_the_gpu(monkeypatch):
    """tol=None: after the warm-up and the two captures, replaying iterations queues work only."""
    x = randn(60000, 64, 11, bf16, "cuda")
    c0 = x[:256].float()
    lloyd, _, _ = prepared(x, 256, c0, 8, None)
    loop = fitmod._GraphLoop(lloyd, 8, None)
    loop.start(c0)
    for p in (0, 1, 0):                         # warm-up, capture of parity 1, capture of parity 0
        loop.run(p)
    assert len(loop.graphs) == 2 and not loop.eager
    torch.cuda.synchronize()
    seen = count_replays(monkeypatch)
    torch.cuda.set_sync_debug_mode("error")
    try:
        for p in (1, 0, 1, 0, 1):
            loop.run(p)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len(seen) == 5 and int(loop.count) == 8
    eager = eager_loop(x, 256, c0, 8, None)
    assert torch.equal(loop.history[:8], eager[2][:8])   # the same inertia, run by run


@gpu
@needs_cuda
def test_a_capture_that_really_fails_falls_back_to_the_same_answer(monkeypatch):
    """A body that waits for the GPU cannot be captured: fit warns once, runs eagerly, and loses nothing."""
    x = randn(60000, 64, 12, bf16, "cuda")
    c0 = x[:256].float()
    monkeypatch.setattr(fitmod, "_GRAPHS", False)
    eager = kmeans_kernels.fit(x, 256, init=c0, iters=5, tol=None)
    monkeypatch.setattr(fitmod, "_GRAPHS", True)
    body = fitmod._GraphLoop.body

    def waiting_body(self, p, compare):
        body(self, p, compare)
        int(self.count)                         # a host read of device data: illegal while capturing
    monkeypatch.setattr(fitmod._GraphLoop, "body", waiting_body)
    with pytest.warns(RuntimeWarning, match="running it eagerly"):
        fallen = kmeans_kernels.fit(x, 256, init=c0, iters=5, tol=None)
    assert_same_fit(fallen, eager)
    monkeypatch.setattr(fitmod._GraphLoop, "body", body)
    seen = count_replays(monkeypatch)
    with warnings.catch_warnings():            # and the process still captures and replays, to the same answer
        warnings.simplefilter("error", RuntimeWarning)
        assert_same_fit(kmeans_kernels.fit(x, 256, init=c0, iters=5, tol=None), eager)
    assert len(seen) == 6 - 1                      # every run but the warm-up: 5 iterations, the closing one


# ---- loops kept between fits on the same x (`lloyd._KeptLoops`) ---------------------------------------------------

def run(x, k, init, iters, tol, kept, graphs=None):
    """fit after its checks, as `fit` runs it: the eager loop with kept=None, else the graph loop on a kept loop."""
    shards = fitmod._Shards(None, 0)
    fitmod._check(x, k, iters, tol, init, "auto", shards, fitmod._comm_device(None))
    return fitmod._run(x, k, iters, tol, init, 0, "auto", shards, kept, graphs)


def assert_same_result(a, b):
    assert torch.equal(a.centroids, b.centroids) and torch.equal(a.ids, b.ids)
    assert a.inertia == b.inertia and a.iterations == b.iterations and a.converged == b.converged


@pytest.mark.parametrize("name", ["tol=None", "shift within tol", "ids unchanged"])
def test_a_kept_loop_serves_the_next_fit_on_the_same_x_with_no_warm_up_or_capture(name):
    x, k, _, iters, tol, _ = CASES[name]
    x = x.clone()
    kept, stand = fitmod._KeptLoops(4), Stand()
    first = run(x, k, far_init(x, k, 1), iters, tol, kept, stand)
    assert_same_result(first, run(x, k, far_init(x, k, 1), iters, tol, None))
    assert len(kept.loops) == 1 and stand.warm_ups == 1
    saved = first.centroids.clone()
    lloyd = next(iter(kept.loops.values()))[1].lloyd
    where = (lloyd.mean.data_ptr(), lloyd.spread.data_ptr())
    second = run(x, k, far_init(x, k, 2), iters, tol, kept, stand)        # another start, the same x
    assert_same_result(second, run(x, k, far_init(x, k, 2), iters, tol, None))
    # no warm-up, and no graph captured twice (one per parity, with no tol the closing one, and the state's
    # passes, captured by this second fit)
    loop = next(iter(kept.loops.values()))[1]
    assert stand.warm_ups == 1 and stand.captures == len(loop.graphs) <= 4 and "state" in loop.graphs
    captures = stand.captures
    assert torch.equal(first.centroids, saved)                            # the first answer was a copy
    x[: x.shape[0] // 2] = x[x.shape[0] // 2:][: x.shape[0] // 2]          # new values, the same scale
    third = run(x, k, far_init(x, k, 3), iters, tol, kept, stand)
    assert_same_result(third, run(x, k, far_init(x, k, 3), iters, tol, None))
    assert stand.captures == captures and (lloyd.mean.data_ptr(), lloyd.spread.data_ptr()) == where


def test_a_kept_loop_is_dropped_when_the_scale_changes_or_x_dies_and_the_oldest_goes_first():
    x, k, init, iters, tol, _ = CASES["tol=None"]
    x = x.clone()
    kept, stand = fitmod._KeptLoops(2), Stand()
    run(x, k, init, iters, tol, kept, stand)
    x.mul_(1024)                                       # a new scale: the graphs hold the old one
    again = run(x, k, init, iters, tol, kept, stand)
    assert_same_result(again, run(x, k, init, iters, tol, None))
    assert stand.warm_ups == 2 and len(kept.loops) == 1
    others = [x.clone() for _ in range(2)]
    for other in others:
        run(other, k, init, iters, tol, kept, Stand())
    assert len(kept.loops) == 2 and all(ref() is not x for ref, _ in kept.loops.values())   # x's, the oldest, went
    assert all(loop.lloyd.x is None for _, loop in kept.loops.values())                   # no strong reference
    del others, other
    import gc
    gc.collect()
    assert not kept.loops                              # each entry went with its x
    run(x, 3, init, iters, tol, kept, stand)           # another k: its own loop
    run(x, k, init, iters, tol, kept, stand)
    assert len(kept.loops) == 2 and stand.warm_ups == 4


def test_a_loop_whose_capture_failed_is_not_kept():
    """It runs eagerly to the same answer, and the next fit on x builds a loop of its own and tries to capture
    again (a kept failed capture had left the CUDA generator mid-capture on the H200)."""
    x, k, init, iters, tol, _ = CASES["tol=None"]
    kept = fitmod._KeptLoops(2)
    with pytest.warns(RuntimeWarning, match="running it eagerly"):
        fallen = run(x, k, init, iters, tol, kept, Stand(fail=True))
    assert_same_result(fallen, run(x, k, init, iters, tol, None))
    assert not kept.loops
    again = Stand()
    assert_same_result(run(x, k, init, iters, tol, kept, again), fallen)
    assert again.captures == 3 and len(kept.loops) == 1        # two parities and the closing assignment


def test_fit_keeps_four_loops_by_default():
    """The limit measured on the H200 (probes/fit_kept_loops_probe.py): enough for a few restarts on one x."""
    assert fitmod._KEPT.limit == 4


@gpu
@needs_cuda
@pytest.mark.parametrize("tol", [None, 1e-4])
def test_fit_on_a_kept_loop_replays_its_graphs_and_equals_the_eager_fit(monkeypatch, tol):
    """Three fits on one x with loops kept (another start, then new values in x): each equals the eager fit bit
    for bit, and the later fits replay the first one's graphs (no warm-up; the second captures only the state's
    passes over x, which the third replays)."""
    x = blobs(60000, 64, 256, 13).cuda()
    monkeypatch.setattr(fitmod, "_KEPT", fitmod._KeptLoops(4))
    captures = []
    capture = fitmod._CudaGraphs.capture
    monkeypatch.setattr(fitmod._CudaGraphs, "capture", lambda self, body: captures.append(1) or capture(self, body))
    results = []
    for start in range(3):
        if start == 2:
            x[:30000] = x[30000:].clone()
        c0 = far_init(x, 256, start)
        eager, graphed, replays = both_ways(monkeypatch, x, 256, init=c0, iters=8, tol=tol)
        assert_same_fit(graphed, eager)
        results.append((graphed, graphed.centroids.clone(), replays, len(captures)))
    graphs = 2 if tol is not None else 3                      # with no tol the closing assignment's graph too
    assert results[0][3] == graphs                            # the first fit's iterations ...
    assert results[1][3] == results[2][3] == graphs + 1       # ... and the second fit's state passes, once
    assert all(r[2] >= r[0].iterations - 1 for r in results)
    assert all(torch.equal(r[0].centroids, r[1]) for r in results)   # later fits did not write earlier answers

"""kmeans_kernels.fit, Lloyd's k-means on the assignment: the CPU reference path, its determinism, the
empty-cluster rule, errors, scikit-learn's answer, two gloo processes; on a GPU (`-m gpu`) the CUDA path."""
import json
import math

import numpy as np
import pytest
import torch

import kmeans_kernels
from kmeans_kernels import lloyd_distributed

from kmeans_kernels import lloyd as fitmod
bf16 = torch.bfloat16
gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def symmetric_blobs(k, per, d, seed=0, dtype=bf16, device="cpu"):
    """Small-integer points whose cluster means are exactly their integer centres (noise comes in +- pairs),
    shuffled; returns (x, labels, centres)."""
    g = torch.Generator().manual_seed(seed)
    centres = 2 * torch.randint(-8, 9, (k, d), generator=g)
    noise = torch.randint(-1, 2, (k, per, d), generator=g)
    pts = (centres[:, None] + torch.cat([noise, -noise], 1)).reshape(-1, d)
    labels = torch.arange(k).repeat_interleave(2 * per)
    order = torch.randperm(pts.shape[0], generator=g)
    return pts[order].to(dtype).to(device), labels[order], centres.float().to(device)


def one_per_cluster(x, labels, k):
    """The first point of each true cluster, as initial centroids."""
    return torch.stack([x[(labels == j).nonzero()[0, 0]] for j in range(k)]).float()


def objective(x, c, ids):
    return float(((x.double() - c.double()[ids.long()]) ** 2).sum())


def test_fit_recovers_exact_clusters():
    x, labels, centres = symmetric_blobs(6, 40, 32)
    r = kmeans_kernels.fit(x, 6, init=one_per_cluster(x, labels, 6))
    assert torch.equal(r.ids.long(), labels)
    assert torch.equal(r.centroids, centres)          # the means are exact: integer sums, one rounding
    assert r.converged and r.iterations == 2 and len(r.inertia) == 2
    assert r.inertia[-1] == objective(x, centres, labels)
    assert r.ids.dtype == torch.int32 and r.centroids.dtype == torch.float32


def test_fit_is_deterministic_and_independent_of_row_order():
    """Random (inexact) data: the same call gives the same bits, and so does any order of the rows: the sums
    are integers, so the order of the additions cannot matter (fp32 sums in another order round differently)."""
    g = torch.Generator().manual_seed(1)
    x = (3 * torch.randn(4000, 32, generator=g)).to(bf16)
    c0 = x[:20].float() + 0.5
    a = kmeans_kernels.fit(x, 20, init=c0, iters=6, tol=None)
    b = kmeans_kernels.fit(x, 20, init=c0, iters=6, tol=None)
    assert torch.equal(a.centroids, b.centroids) and torch.equal(a.ids, b.ids) and a.inertia == b.inertia
    perm = torch.randperm(4000, generator=g)
    p = kmeans_kernels.fit(x[perm].contiguous(), 20, init=c0, iters=6, tol=None)
    assert torch.equal(p.centroids, a.centroids)
    assert torch.equal(p.ids, a.ids[perm])
    assert not torch.equal(a.centroids, c0)  # the centroids did move
    assert torch.equal(kmeans_kernels.fit(x, 20, seed=3, iters=2).centroids,
                       kmeans_kernels.fit(x, 20, seed=3, iters=2).centroids)


def test_fixed_point_sums_are_order_free_where_float_sums_are_not():
    """Why the update uses integers: the same values summed in two orders."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5000, 8, generator=g).to(bf16)
    ids = torch.randint(0, 3, (5000,), generator=g)
    perm = torch.randperm(5000, generator=g)

    def float_sums(x, ids):
        return torch.zeros(3, 8).index_add_(0, ids, x.float())

    def fixed_sums(x, ids):
        s = 62 - math.ceil(math.log2(5000)) - math.frexp(float(x.float().abs().max()))[1]
        return torch.zeros(3, 8, dtype=torch.int64).index_add_(0, ids, fitmod.fixed_point(x, s))

    assert not torch.equal(float_sums(x, ids), float_sums(x[perm], ids[perm]))
    assert torch.equal(fixed_sums(x, ids), fixed_sums(x[perm], ids[perm]))


def test_kmeans_plus_plus_weights_by_distance():
    """99 points at 0 and one at 10: after the first pick, every point at 0 has distance 0, so k-means++ must
    take the far point as the second centre, whatever the seed; "random" mostly takes two zeros."""
    x = torch.zeros(100, 16, dtype=bf16)
    x[57] = 10
    for seed in range(5):
        c = kmeans_kernels.fit(x, 2, seed=seed, iters=1).centroids
        assert sorted(c[:, 0].tolist()) == [0.0, 10.0]
    rows = fitmod._Shards(None, 100)
    rows.set_sizes([100])
    picked = fitmod._initial_centroids(x, 2, "random", 0, rows)
    assert picked.shape == (2, 16)


def test_random_init_takes_distinct_rows_in_order():
    x = torch.arange(50 * 16, dtype=torch.float32).reshape(50, 16).to(bf16)
    shards = fitmod._Shards(None, 50)
    shards.set_sizes([50])
    c = fitmod._initial_centroids(x, 7, "random", 4, shards)
    starts = c[:, 0].tolist()
    assert starts == sorted(set(starts)) and len(starts) == 7
    assert torch.equal(c, fitmod._initial_centroids(x, 7, "random", 4, shards))
    assert not torch.equal(c, fitmod._initial_centroids(x, 7, "random", 5, shards))


def test_empty_cluster_keeps_its_centroid():
    x, labels, centres = symmetric_blobs(4, 30, 16, seed=3)
    far = torch.full((1, 16), 1000.0)
    c0 = torch.cat([one_per_cluster(x, labels, 4), far])
    r = kmeans_kernels.fit(x, 5, init=c0, iters=20, tol=1e-4)
    assert torch.equal(r.centroids[4], far[0])       # no points: it does not move
    assert not bool((r.ids == 4).any())
    assert torch.equal(r.centroids[:4], centres) and r.converged
    assert all(b <= a for a, b in zip(r.inertia, r.inertia[1:]))


def test_inertia_is_the_objective_of_the_returned_centroids():
    g = torch.Generator().manual_seed(4)
    x = (torch.randn(3000, 16, generator=g) + 40).to(bf16)   # far from the origin: cancellation would show
    for tol in (None, 0.0, 1e-4):
        r = kmeans_kernels.fit(x, 9, iters=8, tol=tol, seed=2)
        assert r.inertia[-1] == pytest.approx(objective(x, r.centroids, r.ids), rel=1e-12)
        assert len(r.inertia) in (r.iterations, r.iterations + 1)
        assert all(b <= a * (1 + 1e-6) for a, b in zip(r.inertia, r.inertia[1:]))
    r = kmeans_kernels.fit(x, 9, iters=7, tol=None)
    assert r.iterations == 7 and len(r.inertia) == 8


def test_fp16_gives_the_bf16_answer_on_exact_inputs():
    x, labels, centres = symmetric_blobs(5, 20, 32, seed=5)
    a = kmeans_kernels.fit(x, 5, seed=1)
    b = kmeans_kernels.fit(x.to(torch.float16), 5, seed=1)
    assert torch.equal(a.centroids, b.centroids) and torch.equal(a.ids, b.ids) and a.inertia == b.inertia


def _x(n=64, d=16):
    return torch.randn(n, d).to(bf16)


def _nan_row():
    x = _x()
    x[3, 5] = float("nan")
    return x


def _inf_row():
    x = _x()
    x[10, 0] = float("-inf")
    return x


@pytest.mark.parametrize("call, match", [
    (lambda: kmeans_kernels.fit(_x(8), 9), "k=9 is more clusters than points"),
    (lambda: kmeans_kernels.fit(_x(), 0), "k must be an integer >= 1"),
    (lambda: kmeans_kernels.fit(_x(), 2.0), "k must be"),
    (lambda: kmeans_kernels.fit(_x(), True), "k must be"),
    (lambda: kmeans_kernels.fit(_nan_row(), 4), "row 3 of x has a NaN or inf"),
    (lambda: kmeans_kernels.fit(_inf_row(), 4), "row 10 of x has a NaN or inf"),
    (lambda: kmeans_kernels.fit(_x().float(), 4), "bf16 or fp16"),
    (lambda: kmeans_kernels.fit(torch.ones(8, 4, dtype=torch.int32), 2), "bf16 or fp16"),
    (lambda: kmeans_kernels.fit(_x(16, 64).t(), 2), "contiguous"),
    (lambda: kmeans_kernels.fit(torch.ones(8, dtype=bf16), 2), "2-D"),
    (lambda: kmeans_kernels.fit(np.ones((8, 4)), 2), "torch.Tensor"),
    (lambda: kmeans_kernels.fit(torch.empty(8, 4, dtype=bf16, device="meta"), 2), "CPU or a CUDA"),
    (lambda: kmeans_kernels.fit(_x(), 4, init=torch.zeros(3, 16)), r"\[k, D\] = \[4, 16\]"),
    (lambda: kmeans_kernels.fit(_x(), 4, init=torch.full((4, 16), float("nan"))), "init tensor has NaN"),
    (lambda: kmeans_kernels.fit(_x(), 4, init="kmeans++"), "init must be one of"),
    (lambda: kmeans_kernels.fit(_x(), 4, iters=0), "iters must be"),
    (lambda: kmeans_kernels.fit(_x(), 4, tol=-1.0), "tol must be"),
    (lambda: kmeans_kernels.fit(_x(), 4, tol=float("nan")), "tol must be"),
    (lambda: kmeans_kernels.fit(_x(), 4, variant="ilp2"), "names a CUDA kernel"),
])
def test_fit_rejects_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("dtype", [bf16, torch.float32, torch.float64])
def test_fit_names_one_nonfinite_entry_of_an_init_of_any_float_dtype(bad, dtype):
    """The checks read the init's min and max: one NaN, +inf or -inf among finite entries is found wherever it
    sits, in the init's own dtype or another than x's; the same init without it is taken."""
    init = torch.randn(4, 16, dtype=torch.float64).to(dtype)
    kmeans_kernels.fit(_x(), 4, init=init, iters=1)
    init[2, 7] = bad
    with pytest.raises(ValueError, match="init tensor has NaN or inf"):
        kmeans_kernels.fit(_x(), 4, init=init, iters=1)


def test_fit_accepts_k_equal_to_n_and_does_not_touch_a_given_init():
    x = _x(12)
    init = x.float().clone()
    r = kmeans_kernels.fit(x, 12, init=init)
    assert torch.equal(r.centroids, x.float()) and torch.equal(r.ids, torch.arange(12, dtype=torch.int32))
    assert torch.equal(init, x.float())


@pytest.mark.parametrize("tol, iters", [(0.0, 300), (1e-4, 300), (1e-4, 1), (1e-4, 2)])
def test_fit_agrees_with_scikit_learn(tol, iters):
    """Same initial centroids, scikit-learn's Lloyd: the same assignment, iteration count and inertia."""
    from sklearn.cluster import KMeans
    from sklearn.datasets import make_blobs

    X, y = make_blobs(n_samples=3000, n_features=32, centers=12, cluster_std=1.0, random_state=3)
    x = torch.from_numpy(X).to(bf16)
    c0 = one_per_cluster(x, torch.from_numpy(y), 12)
    r = kmeans_kernels.fit(x, 12, init=c0, iters=iters, tol=tol)
    km = KMeans(12, init=c0.double().numpy(), n_init=1, algorithm="lloyd", max_iter=iters, tol=tol)
    km.fit(x.double().numpy())
    assert np.array_equal(r.ids.numpy(), km.labels_)
    assert r.iterations == km.n_iter_
    assert r.inertia[-1] == pytest.approx(km.inertia_, rel=1e-6)
    np.testing.assert_allclose(r.centroids.double().numpy(), km.cluster_centers_, rtol=0, atol=1e-5)


def test_timeline_times_each_iteration():
    x, labels, _ = symmetric_blobs(4, 50, 16)
    with fitmod.timeline() as marks:
        r = kmeans_kernels.fit(x, 4, iters=5, tol=None)
    times = fitmod.iteration_times(marks)
    assert len(times) == r.iterations == 5
    assert all(t > 0 and 0 <= a <= t for t, a in times)
    assert fitmod._timeline is None


def test_sharded_fit_on_two_gloo_processes_equals_one_process():
    """Uneven shards, k-means++ from a sample gathered across ranks, sums all-reduced: the same bits."""
    x = lloyd_distributed.exact_data(2001, 16, 8, seed=7, device="cpu")
    one = kmeans_kernels.fit(x, 8, seed=11, iters=30)
    ranks = lloyd_distributed.run_sharded(x, 8, world=2, sizes=[700, 1301], seed=11, iters=30)
    for r in ranks:
        assert torch.equal(r.centroids, one.centroids)
        assert (r.iterations, r.converged) == (one.iterations, one.converged)
        assert r.inertia == pytest.approx(one.inertia, rel=1e-12)
    assert torch.equal(torch.cat([ranks[0].ids, ranks[1].ids]), one.ids)
    assert one.iterations > 1


def test_sharded_scale_comes_from_the_largest_shard_when_a_shard_is_all_zeros():
    """Each rank reads its own shard's magnitude (`_top_exponent`) with its checks, and the scale comes from the
    largest over ranks: a rank of zeros must count as the smallest, not as 2^0. Two clusters at +-0.375 (max|x|
    < 2^-1), and one coordinate 2^-52, exactly the smallest step of the grid the right scale gives at N = 2000:
    a scale one step coarser would truncate it, and the cluster's centroid would lose it."""
    x = torch.zeros(2000, 4, dtype=bf16)
    x[1000:1500, 0], x[1500:, 0] = 0.375, -0.375
    x[1700, 1] = 2.0 ** -52
    init = torch.tensor([[0.375, 0, 0, 0], [-0.375, 0, 0, 0]])
    one = kmeans_kernels.fit(x, 2, init=init, iters=3, tol=None)
    assert float(one.centroids[1, 1]) > 0            # the coordinate counted, single process
    ranks = lloyd_distributed.run_sharded(x, 2, world=2, sizes=[1000, 1000], init=init, iters=3, tol=None)
    for r in ranks:
        assert torch.equal(r.centroids, one.centroids)


@pytest.mark.parametrize("values", [[0.0], [-0.0, 0.0], [0.375], [-0.375, 0.25], [3.0, -5.0], [2.0 ** -133],
                                    [1.0, 2.0 ** -20], [-65504.0]])
def test_the_checks_scale_equals_the_one_read_from_x(values):
    """fit's checks hand the fixed-point scale's magnitude on (one read of x for both): the same scale."""
    x = torch.tensor(values + [0.0] * (8 - len(values)), dtype=torch.float32).to(bf16).reshape(4, 2)
    shards = fitmod._Shards(None, 0)
    top = fitmod._check(x, 2, 1, None, "random", "auto", shards, fitmod._comm_device(None))
    assert fitmod._scale_exponent(x, shards, top) == fitmod._scale_exponent(x, shards)
    assert fitmod._top_exponent(0.0, 0.0) < fitmod._top_exponent(0.0, 2.0 ** -133)


def test_launcher_cpu_path(tmp_path, capsys):
    summary = tmp_path / "summary.json"
    assert lloyd_distributed.main(["--spawn", "2", "--n", "3001", "--d", "16", "--k", "8", "--iters", "3",
                                 "--summary", str(summary)]) == 0
    run, = json.loads(summary.read_text())["runs"]
    assert run["centroids_equal"] and run["ids_match"] == 1.0 and run["world"] == 2
    assert len(run["sharded_ms"]) == len(run["single_ms"]) == 3
    assert lloyd_distributed.main(["--n", "10"]) == 2   # neither torchrun nor --spawn: says how to start it


def test_launcher_data_and_split():
    x = lloyd_distributed.exact_data(1000, 32, 5, seed=0, device="cpu")
    assert x.dtype == bf16 and torch.equal(x.float(), x.float().round()) and float(x.abs().max()) <= 17
    assert lloyd_distributed.split(10, 3) == [4, 3, 3] and sum(lloyd_distributed.split(7, 2)) == 7
    with pytest.raises(ValueError, match="sizes"):
        lloyd_distributed.run_sharded(x, 5, world=2, sizes=[10, 10])


# ---- on a GPU ---------------------------------------------------------------------------------------------


@gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fit_cuda_equals_the_cpu_path_on_exact_inputs(dtype):
    x, labels, centres = symmetric_blobs(32, 300, 64, seed=8, dtype=dtype)
    c0 = one_per_cluster(x, labels, 32)
    cpu = kmeans_kernels.fit(x, 32, init=c0)
    cuda = kmeans_kernels.fit(x.cuda(), 32, init=c0.cuda())
    assert torch.equal(cuda.centroids.cpu(), cpu.centroids) and torch.equal(cuda.centroids.cpu(), centres)
    assert torch.equal(cuda.ids.cpu(), cpu.ids)
    assert (cuda.iterations, cuda.converged) == (cpu.iterations, cpu.converged)
    assert cuda.inertia == pytest.approx(cpu.inertia, rel=1e-12)
    shards = fitmod._Shards(None, x.shape[0])
    shards.set_sizes([x.shape[0]])
    assert torch.equal(fitmod._initial_centroids(x.cuda(), 32, "k-means++", 3, shards).cpu(),
                       fitmod._initial_centroids(x, 32, "k-means++", 3, shards))


@gpu
@needs_cuda
def test_fit_cuda_is_deterministic_bit_for_bit():
    g = torch.Generator(device="cuda").manual_seed(9)
    x = torch.randn(262144, 128, generator=g, device="cuda").to(bf16)
    c0 = x[:1024].float()
    a = kmeans_kernels.fit(x, 1024, init=c0, iters=5, tol=None)
    b = kmeans_kernels.fit(x, 1024, init=c0, iters=5, tol=None)
    assert torch.equal(a.centroids, b.centroids) and torch.equal(a.ids, b.ids) and a.inertia == b.inertia
    perm = torch.randperm(x.shape[0], device="cuda", generator=g)
    p = kmeans_kernels.fit(x[perm].contiguous(), 1024, init=c0, iters=5, tol=None)
    assert torch.equal(p.centroids, a.centroids) and torch.equal(p.ids, a.ids[perm])
    assert kmeans_kernels.fit(x, 1024, seed=1, iters=3).centroids.is_cuda


@gpu
@needs_cuda
def test_fit_cuda_rejects_what_the_kernels_cannot_do():
    with pytest.raises(ValueError, match="D=72"):
        kmeans_kernels.fit(torch.randn(256, 72, device="cuda").to(bf16), 4)
    with pytest.raises(ValueError, match="variant 'nope'"):
        kmeans_kernels.fit(torch.randn(256, 64, device="cuda").to(bf16), 4, variant="nope")


@gpu
@needs_cuda
@pytest.mark.parametrize("init_device", ["cuda", "cpu"])
def test_fit_cuda_names_a_nonfinite_row_or_init(init_device):
    """The checks' one read of x's extent and the init's finiteness, on the GPU: each failure named."""
    x = torch.randn(4096, 64, device="cuda").to(bf16)
    init = x[:8].float().to(init_device)
    bad_x = x.clone()
    bad_x[3000, 17] = float("nan")
    with pytest.raises(ValueError, match="row 3000 of x has a NaN or inf"):
        kmeans_kernels.fit(bad_x, 8, init=init, iters=2)
    bad_init = init.clone()
    bad_init[5, 0] = float("-inf")
    with pytest.raises(ValueError, match="init tensor has NaN or inf"):
        kmeans_kernels.fit(x, 8, init=bad_init, iters=2)
    assert kmeans_kernels.fit(x, 8, init=init, iters=2).ids.min() >= 0   # and the finite pair fits


def test_lloyd_bench_without_a_gpu_says_where_the_rows_are(capsys):
    from kmeans_kernels import lloyd_bench
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the bench would run")
    assert lloyd_bench.main([]) == 2
    assert "kmeans_fit.csv" in capsys.readouterr().out


@gpu
@needs_cuda
def test_lloyd_bench_tiny_run_on_the_gpu(capsys):
    from kmeans_kernels import lloyd_bench
    assert lloyd_bench.main(["--shapes", "65536,64,512", "--kernels", "ours,torch", "--iters", "2", "--rounds", "2",
                             "--no-record"]) == 0
    out = capsys.readouterr().out
    assert "lloyd/assign" in out and "issue 19's goals" in out


def test_lloyd_bench_torch_loop_is_lloyd():
    """The plain torch contender is a Lloyd loop: on separated data it finds fit's clusters and centroids."""
    from kmeans_kernels import lloyd_bench
    x, labels, centres = symmetric_blobs(5, 30, 16, seed=6)
    c0 = one_per_cluster(x, labels, 5)
    ids, used = lloyd_bench.torch_loop(x, c0, 3)
    assert torch.equal(ids, labels) and torch.equal(used, centres)
    assert lloyd_bench.match_rate(lambda x, c0, n: lloyd_bench.torch_loop(x, c0, n), [(x, c0)]) == 1.0


def test_exercise_checker(capsys):
    from kmeans_kernels import lloyd_exercises
    right = int(lloyd_exercises.after_one_iteration().ids[lloyd_exercises.POINT])
    assert right == 0   # P started in cluster 1 and leaves it: the exercise is worth doing
    x, c0 = lloyd_exercises.problem()
    assert int(kmeans_kernels.fit(x, 2, init=c0, iters=1, tol=None).ids[lloyd_exercises.POINT]) == right
    assert lloyd_exercises.check(right) and not lloyd_exercises.check(1 - right) and not lloyd_exercises.check(None)
    assert "Right" in capsys.readouterr().out


def _rows(**over):
    base = dict(kernel="ours", variant="fit", N=65536, D=128, K=4096, iters=5, ms_median=1.0, ms_min=1.0,
                ms_max=1.0, tflops=1.0, match_rate=1.0, date="2026-12-01T00:00:00Z")
    return {**base, **over}


# ms per call of each contender of `fake_lloyd_run` (5 iterations a call): lloyd 1.15x assign, flashlib 1.5x lloyd
FAKE_CALL_MS = {("ours", "fit"): 10.0, ("ours", "lloyd"): 5.75, ("ours", "assign"): 5.0,
                ("flashlib", "flash_kmeans"): 8.625}


def fake_lloyd_run(iters=5, rounds=8, noise=0.0):
    """lloyd_bench.measure's rows for contenders of known times on a fake clock: each call advances the clock by
    its contender's time (times a seeded +-noise) and returns the reference's ids for its centroids."""
    import random
    from kmeans_kernels import lloyd_bench, reference
    state = {"now": 0.0, "rng": random.Random(3)}
    x, labels, centres = symmetric_blobs(4, 20, 16, seed=2)
    sets = [(x, one_per_cluster(x, labels, 4))]

    def contender(ms):
        def call(x, c0, n=iters):
            state["now"] += n / iters * ms * (1 + state["rng"].uniform(-noise, noise)) / 1e3
            return reference.assign(x, c0.to(x.dtype)), c0
        return call
    fns = {name: contender(ms) for name, ms in FAKE_CALL_MS.items()}
    return lloyd_bench.measure(fns, sets, iters, rounds=rounds, calls=2, warmup=1, clock=lambda: state["now"])


def test_bench_rows_are_per_iteration_with_ratios_and_intervals():
    frame = fake_lloyd_run(noise=0.01)
    for col in ("timing", "ms_lo", "ms_hi", "vs", "ratio", "ratio_lo", "ratio_hi", "ratio_flashlib",
                "ratio_flashlib_lo", "ratio_flashlib_hi", "iters", "rounds"):
        assert col in frame, col
    assert set(frame.timing) == {"kernel", "latency"} and set(frame.vs) == {"ours/assign"}
    assert frame[["ratio", "ratio_lo", "ratio_hi", "ratio_flashlib", "ratio_flashlib_lo"]].notna().all().all()
    lloyd = frame[frame.variant == "lloyd"].set_index("timing")
    for t in ("kernel", "latency"):
        assert lloyd.ms_median[t] == pytest.approx(5.75 / 5, rel=0.02)           # per iteration, not per call
        assert lloyd.ms_lo[t] <= lloyd.ms_median[t] <= lloyd.ms_hi[t] < 5.75 / 5 * 1.02
        assert lloyd.ratio[t] == pytest.approx(1.15, rel=0.02) and lloyd.ratio_lo[t] < 1.15 * 1.02
        assert lloyd.ratio_flashlib[t] == pytest.approx(1 / 1.5, rel=0.02)
    assert (frame.tflops > 0).all() and (frame.match_rate == 1.0).all()


def test_bench_summary_and_scaling_tables():
    import pandas as pd
    from kmeans_kernels import lloyd_bench
    old = pd.DataFrame([_rows(), _rows(variant="lloyd", ms_median=0.9), _rows(variant="assign", ms_median=0.75),
                        _rows(variant="lloyd_eager", ms_median=1.125),
                        _rows(variant="lloyd_index_add", ms_median=1.5),
                        _rows(kernel="flashlib", variant="flash_kmeans", ms_median=1.8),
                        _rows(variant="fit", ms_median=5.0, date="2026-11-01T00:00:00Z")])
    t = lloyd_bench.summary(old)                      # rows from before the timing column: latency, no interval
    assert len(t) == 1 and t["ours/fit ms"][0] == 1.0 and t["timing"][0] == "latency"
    assert t["lloyd/assign"][0] == pytest.approx(1.2) and t["flashlib/lloyd"][0] == pytest.approx(2.0)
    assert t["lloyd_index_add/assign"][0] == pytest.approx(2.0) and t["lloyd_eager/assign"][0] == pytest.approx(1.5)
    assert "lloyd/assign lo" not in t
    assert lloyd_bench.summary(old.iloc[0:0]).empty

    new = fake_lloyd_run(noise=0.02).assign(date="2026-12-02T00:00:00Z")
    both = pd.concat([old, new], ignore_index=True)       # the table as read: the old rows' timing is blank
    t = lloyd_bench.summary(both).set_index("timing")     # the newest run, both timings, with intervals
    assert sorted(t.index) == ["kernel", "latency"] and t["ours/fit ms"].tolist() == pytest.approx([2.0, 2.0], rel=0.03)
    for t_ in ("kernel", "latency"):
        assert t.loc[t_, "lloyd/assign"] == pytest.approx(1.15, rel=0.03)
        assert t.loc[t_, "lloyd/assign lo"] <= t.loc[t_, "lloyd/assign"] <= t.loc[t_, "lloyd/assign hi"]
        assert t.loc[t_, "flashlib/lloyd"] == pytest.approx(1.5, rel=0.03)
        assert t.loc[t_, "flashlib/lloyd lo"] <= t.loc[t_, "flashlib/lloyd"] <= t.loc[t_, "flashlib/lloyd hi"]
    assert "lloyd_eager/assign" not in t                  # not timed in that run
    older = both.assign(date=both.date.where(both.date != "2026-12-02T00:00:00Z", "2026-10-01T00:00:00Z"))
    assert lloyd_bench.summary(older)["timing"].tolist() == ["latency"]   # the newest run is the old one again

    dd = pd.DataFrame([_rows(variant="fit_single", N=2_000_000, world=1, ms_median=4.0, allreduce_share=0.0,
                             centroids_equal=1),
                       _rows(variant="fit_2ranks", N=2_000_000, world=2, ms_median=2.5, allreduce_share=0.1,
                             centroids_equal=1)])
    s = lloyd_distributed.scaling(dd)
    assert s["speedup"][0] == pytest.approx(1.6) and s["efficiency"][0] == pytest.approx(0.8) and s["equal"][0]
    assert lloyd_distributed.scaling(dd.iloc[0:0]).empty


def test_bench_goals_count_shapes_by_interval():
    import pandas as pd
    from kmeans_kernels import lloyd_bench
    big = dict(N=1048576, D=128, K=4096)
    table = pd.DataFrame([
        dict(**big, timing="kernel", **{"lloyd/assign": 1.12, "lloyd/assign lo": 1.10, "lloyd/assign hi": 1.16,
                                        "flashlib/lloyd": 1.3, "flashlib/lloyd lo": 1.2, "flashlib/lloyd hi": 1.4}),
        dict(N=65536, D=64, K=512, timing="kernel", **{"lloyd/assign": 3.0, "lloyd/assign lo": 2.9,
                                                       "lloyd/assign hi": 3.1, "flashlib/lloyd": 0.98,
                                                       "flashlib/lloyd lo": 0.95, "flashlib/lloyd hi": 1.01}),
        dict(N=65536, D=64, K=4096, timing="kernel", **{"lloyd/assign": 3.0, "lloyd/assign lo": 2.9,
                                                        "lloyd/assign hi": 3.1, "flashlib/lloyd": 0.7,
                                                        "flashlib/lloyd lo": 0.6, "flashlib/lloyd hi": 0.8})])
    g = lloyd_bench.goals(table).loc["kernel"]
    assert "whole fit call faster / slower / noise" not in g      # a run that did not time ours/fit's ratio
    table["flashlib/fit"], table["flashlib/fit lo"], table["flashlib/fit hi"] = [1.2, 0.5, 0.9], [1.1, 0.4, 0.8], \
        [1.3, 0.6, 1.1]
    g = lloyd_bench.goals(table).loc["kernel"]
    assert g["whole fit call faster / slower / noise"] == "1 / 1 / 1"
    assert g["lloyd/assign at 1M x 128 x 4096"] == "1.120 [1.100, 1.160]"
    assert not g["<= 1.15x, whole interval"]                      # 1.12, but the interval reaches 1.16
    assert (g["faster than flashlib's loop"], g["slower"], g["noise"], g["shapes"]) == (1, 1, 1, 3)
    old = table.drop(columns=[c for c in table if c.endswith((" lo", " hi"))]).assign(timing="latency")
    g = lloyd_bench.goals(old).loc["latency"]
    assert g["<= 1.15x, whole interval"] and not g["by interval"]
    assert (g["faster than flashlib's loop"], g["slower"], g["noise"]) == (1, 2, 0)


def test_fixed_point_precision_is_as_documented():
    """bf16 values down to max|x| / 2^(55 - L) are exact on the grid; below it, truncation toward zero."""
    N = 1000                                 # L = 10
    x = torch.zeros(N, 2, dtype=bf16)
    x[0, 0] = 1.5                            # max|x| < 2^1: e = 1, s = 62 - 10 - 1 = 51
    x[1, 0] = 2.0 ** -44 * 1.9921875         # 2^(e - 55 + L) = 2^-44: the smallest exponent that is exact
    x[2, 0] = -(2.0 ** -52) * 1.5            # below the grid step 2^-51: truncated to 0
    shards = fitmod._Shards(None, N)
    s = fitmod._scale_exponent(x, shards)
    q = fitmod.fixed_point(x, s)
    assert s == 51
    assert q[1, 0] / 2.0 ** s == float(x[1, 0]) and q[0, 0] / 2.0 ** s == 1.5
    assert int(q[2, 0]) == 0


def test_lloyd_bench_contenders_run_on_the_cpu_path(tmp_path, monkeypatch):
    """The bench's own loops (all but the CUDA-only kernel call, stood in for by the reference), timed by
    lloyd_bench.measure through the harness's CPU clock, and its rows go into the recorded table as it is."""
    import shutil
    from kmeans_kernels import lloyd_bench, reference
    from workbook import records, timing
    x, labels, centres = symmetric_blobs(8, 40, 32, seed=9)
    sets = [(x, one_per_cluster(x, labels, 8))]
    fns = lloyd_bench.contenders({"ours", "torch"}, 3, sets)
    assert set(fns) == {("ours", "fit"), ("ours", "lloyd"), ("ours", "lloyd_eager"), ("ours", "lloyd_index_add"),
                        ("ours", "sums"), ("ours", "assign"), ("torch", "loop")}
    fns["ours", "assign"] = lambda x, c0, n=3: (reference.assign(x, c0.to(x.dtype)), c0)
    fns["flashlib", "flash_kmeans"] = fns["torch", "loop"]           # a second reference, as flashlib's loop
    frame = lloyd_bench.measure(fns, sets, 3, rounds=2, calls=1, warmup=1)
    assert len(frame) == 2 * len(fns) and set(frame.timing) == set(timing.TIMINGS)
    assert frame[["ratio", "ratio_lo", "ratio_hi", "ratio_flashlib", "ratio_flashlib_lo",
                  "ratio_flashlib_hi"]].notna().all().all()
    assert (frame.match_rate == 1.0).all() and (frame.ms_lo <= frame.ms_hi).all()
    for key, fn in fns.items():
        ids, used = fn(*sets[0], n=3)
        # the sums alone move no centroid: they return the ids of c0 and c0; so does the stand-in assignment
        moved = key not in (("ours", "sums"), ("ours", "assign"))
        assert torch.equal(ids.long(), labels) and torch.equal(used, centres if moved else sets[0][1])
    # the committed table takes these rows (its header has every column the bench writes)
    monkeypatch.setattr(records, "_static_provenance", lambda: (("gpu", "NVIDIA H200"), ("sm_count", 132),
                                                                 ("driver", ""), ("torch", ""), ("cutlass_dsl", "")))
    (tmp_path / "h200").mkdir()
    shutil.copy(records.path("h200", lloyd_bench.TABLE), tmp_path / "h200")
    records.append("h200", lloyd_bench.TABLE, frame, root=tmp_path)
    back = lloyd_bench.summary(records.read("h200", lloyd_bench.TABLE, root=tmp_path))
    assert len(back) == 2 and "lloyd/assign lo" in back and "flashlib/lloyd hi" in back


def test_kmeans_plus_plus_picks_in_proportion_to_squared_distance():
    """Three points; after the origin is picked the others weigh 1 and 9: the far one must come ~90 % of the time."""
    sample = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 3.0]])
    seconds = []
    for seed in range(900):
        c = fitmod._kmeans_plus_plus(sample, 2, torch.Generator().manual_seed(seed))
        if torch.equal(c[0], sample[0]):
            seconds.append(int(c[1, 1] == 3.0))
    assert 200 < len(seconds) < 400                        # the first pick is uniform
    assert np.mean(seconds) == pytest.approx(0.9, abs=0.05)

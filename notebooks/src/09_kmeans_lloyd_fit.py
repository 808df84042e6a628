# %% [markdown]
# # 09 · From the assignment to k-means: Lloyd's loop, deterministic, on one GPU or several
#
# Notebooks 03–08 built one kernel: the nearest centroid of every point. k-means needs one more step, moving each
# centroid to the mean of its points, and then the two again, until nothing changes. This notebook builds that
# loop, `kmeans_kernels.fit`, on the kernel.
#
# **After this notebook you will know**
#
# * what one Lloyd iteration costs next to the assignment, and where the rest of the time goes;
# * when folding a pass over `x`, or a chain of small operations, into one kernel pays, and when it does not;
# * why the centroid update sums **integers** (and what that buys: the same bits run after run, and on any
#   number of GPUs);
# * what happens to a cluster that loses all its points, how k-means++ picks the first centroids, and what the
#   all-reduce of a multi-GPU run carries;
# * how `fit` compares with scikit-learn on a real data set (the handwritten digits that scikit-learn ships),
#   and the time per iteration on the H200 against flashlib's loop.
#
# Everything here runs on a CPU in well under a minute: there `fit` assigns through `kmeans_kernels.reference`
# (the same answers as the kernel on exact inputs) and the timings come from the recorded data files.

# %%
import difflib
import inspect
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import display
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits

import kmeans_kernels
from kmeans_kernels import lloyd_bench, lloyd_distributed, lloyd_exercises, lloyd_state, lloyd_update
from workbook import ROOT, gpus, plots, records, stepper

from kmeans_kernels import lloyd as fitmod
FIT_FILE = records.path("h200", lloyd_bench.TABLE).relative_to(ROOT)
SCALING_FILE = records.path("h200x2", lloyd_distributed.TABLE).relative_to(ROOT)
print(gpus.describe())

# %% [markdown]
# ## 1. The idea and its arithmetic
#
# One Lloyd iteration on `N` points, `K` centroids, `D` dimensions:
#
# 1. **assign**: `ids = assign(x, c)`, the kernel of the previous notebooks, `2·N·K·D` flops on tensor cores;
# 2. **update**: `c_k = (sum of the points with id k) / (their count)`, `N·D` additions, a memory-bound pass.
#
# At `1M × 128 × 4096` the assignment is `1.1 TFLOP` and the update `134 M` additions: the update should cost a
# few per cent of an iteration. Two details decide whether it does, and whether the answer can be trusted:
#
# * **Determinism.** The natural GPU update adds each point into its cluster's sum with a floating-point atomic.
#   Floating-point addition is not associative, and atomics land in whatever order the hardware schedules, so two
#   runs give centroids that differ in the last bits, and after a few iterations in the assignments too. `fit`
#   turns every coordinate once, at the start, into a 64-bit fixed-point integer `round_toward_zero(x · 2^s)`, with
#   `s` chosen from the largest `|x|` and `N` so that no sum of `N` of them can overflow (62 − ⌈log₂ N⌉ bits below the
#   largest magnitude: 42 at `N = 1M`). Integer addition is associative: whatever the order, the same bits.
# * **The cost of it**, done naively: an int64 copy of `x` (8 bytes per coordinate, four times a bf16 `x`) read every
#   iteration, and one 64-bit atomic per coordinate (128 M at 1M × 128). On the GPU, `fit` instead groups the rows
#   by id (a counting sort: a rank per row, the counts' prefix sums, each row to its place) and runs a small kernel
#   (`kmeans_kernels.lloyd_update`) that walks the points in cluster order, reads each bf16 row through that
#   order, converts it to the integers in registers and adds a whole run of one cluster before one atomic per
#   coordinate: `x` read once in 16 bits, about 50× fewer atomics, the same integers. The mean
#   is formed in float64 and rounded once to fp32, the same operations on a CPU and a GPU.
#
# The same values summed in two orders, as floats and as integers:

# %%
g = torch.Generator().manual_seed(0)
vals = torch.randn(100_000, generator=g).to(torch.bfloat16)
perm = torch.randperm(len(vals), generator=g)
print(f"fp32 sum, two orders:  {vals.float().sum().item():.9g}  {vals[perm].float().cumsum(0)[-1].item():.9g}")
s = 62 - math.ceil(math.log2(len(vals))) - math.frexp(float(vals.abs().max()))[1]   # fit's rule for the scale
q = (vals.double() * 2.0**s).long()
print(f"int64 sum, two orders: {q.sum().item()}  {q[perm].cumsum(0)[-1].item()}  (= {q.sum().item() / 2**s:.9g})")

# %% [markdown]
# `fit` applies exactly this, per cluster: on the CPU with `index_add_` into an int64 buffer, on the GPU with the
# grouping and the sums kernel (the same integers, bit for bit: `tests/test_lloyd_update.py`). The other rules of the loop:
#
# * **Empty clusters keep their centroid.** A cluster that gets no points has no mean; `fit` leaves its centroid
#   where it was (deterministic, the same on every rank, and the objective does not rise). scikit-learn instead moves
#   it onto a far point, so on data where a cluster empties the two differ.
# * **k-means++ initialisation** picks the first centroid uniformly, then each next one with probability proportional
#   to the squared distance to the nearest centroid so far. That is one new centre at a time, a matrix-vector product
#   the tensor-core kernel has no use for; `fit` runs it on a seeded sample of at most `max(16K, 8192)` rows, with the
#   assignment's own score: `d² = ‖x‖² + 2·(½‖c‖² − ⟨x, c⟩)`, in float64.
# * **Convergence**, scikit-learn's rule: stop when the assignment no longer changes, or when the summed squared centroid
#   shift falls below `tol` × the mean per-feature variance; then assign once more, so that the returned ids belong to
#   the returned centroids. The centroids are kept in fp32 and **cast to bf16 (or fp16) for the assignment**.
#
# ## 2. The code
#
# One iteration is one method of the fit's state; the update is integer sums and one rounding:

# %%
print(inspect.getsource(fitmod._Lloyd.step))
print(inspect.getsource(fitmod._Lloyd.update))

# %% [markdown]
# What changed from the loop a user writes in plain torch (`kmeans_kernels.lloyd_bench.torch_loop`): the float sums
# become integer sums (on the GPU the grouping and the sums kernel, on the CPU `index_add_` of the fixed-point copy), and
# the division happens in float64:

# %%
def lines_with(fn, *keys):
    """The source lines of fn holding each key, in order: the update, without the rest of the function."""
    src = [line.strip() for line in inspect.getsource(fn).splitlines()]
    return [next(line for line in src if key in line) for key in keys]


plain = lines_with(lloyd_bench.torch_loop, "index_add_", "bincount", "torch.where((counts")
ours = lines_with(fitmod._Lloyd.accumulate, "self.grouping(ids)", "self.cluster_sums(", "self.sums.index_add_",
                  "self.ones") + lines_with(fitmod._Lloyd.update, "mean =", "torch.where")
print("\n".join(difflib.unified_diff(plain, ours, "plain torch loop (fp32 atomics)", "kmeans_kernels.fit (int64)",
                                     lineterm="", n=0)))

# %% [markdown]
# ## 3. A real data set: scikit-learn's handwritten digits
#
# `load_digits` ships with scikit-learn: 1797 images of 8 × 8 pixels, each pixel an integer 0–16, so `D = 64` and
# every value is exact in bf16. Ten clusters, k-means++ from seed 0:

# %%
X, y = load_digits(return_X_y=True)
x = torch.from_numpy(X).to(torch.bfloat16)
assert torch.equal(x.double(), torch.from_numpy(X))     # nothing lost in bf16
r = kmeans_kernels.fit(x, 10, seed=0)
print(f"{x.shape[0]} points, D = {x.shape[1]}: {r.iterations} iterations, converged: {r.converged}, "
      f"inertia {r.inertia[-1]:.6g}")
purity = sum(np.bincount(y[r.ids.numpy() == j]).max() for j in range(10)) / len(y)
print(f"each cluster's most common digit covers {purity:.1%} of the points (k-means never saw the labels)")

# %% [markdown]
# The centroids are images: the mean digit of each cluster, and the objective (inertia, the sum of squared
# distances) at each iteration's assignment:

# %%
fig, axes = plt.subplots(2, 6, figsize=(11, 4), gridspec_kw={"width_ratios": [1] * 5 + [2.4]})
order = torch.argsort(torch.tensor([np.bincount(y[r.ids.numpy() == j], minlength=10).argmax() for j in range(10)]))
for ax, j in zip(axes[:, :5].ravel(), order.tolist()):
    ax.imshow(r.centroids[j].reshape(8, 8).numpy(), cmap="gray_r")
    ax.set_title(f"cluster {j}: {int((r.ids == j).sum())}", fontsize=9)
    ax.axis("off")
gs = axes[0, 5].get_gridspec()
for ax in axes[:, 5]:
    ax.remove()
ax = fig.add_subplot(gs[:, 5])
ax.plot(range(1, len(r.inertia) + 1), r.inertia, "o-")
ax.set_xlabel("assignment pass")
ax.set_ylabel("inertia")
ax.set_title("objective per iteration")
fig.suptitle("kmeans_kernels.fit on scikit-learn's digits (1797 x 64, k = 10, k-means++ seed 0), computed here")
fig.tight_layout()

# %% [markdown]
# ## 4. The check: scikit-learn's Lloyd from the same centroids
#
# Same initial centroids, `KMeans(init=c0, n_init=1, algorithm="lloyd")`. The test suite holds `fit` to the same
# assignment, iteration count and inertia within 1e-6 on well-separated data (`tests/test_fit.py`). Digits are not
# well separated, and `fit` ranks by the centroids **rounded to bf16** while scikit-learn ranks by float64 ones, so
# a point that lies almost halfway between two centroids can go either way. Six starts:

# %%
rows = []
for seed in range(6):
    c0 = x[torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[:10]].float()
    ours = kmeans_kernels.fit(x, 10, init=c0, iters=300, tol=1e-4)
    km = KMeans(10, init=c0.double().numpy(), n_init=1, algorithm="lloyd", max_iter=300, tol=1e-4).fit(X)
    rows.append({"start": seed, "same ids": f"{int((ours.ids.numpy() == km.labels_).sum())} / {len(X)}",
                 "iterations (fit, sklearn)": (ours.iterations, int(km.n_iter_)),
                 "inertia, relative difference": f"{ours.inertia[-1] / km.inertia_ - 1:+.1e}"})
display(pd.DataFrame(rows).set_index("start"))

# %% [markdown]
# ## 5. Exercise: where does P go?
#
# Six points on a line, `A=0, B=1, P=3, C=4, D=5, E=13` (second coordinate 0), and two starting centroids at 0 and 2.
# After **one** Lloyd iteration (assign, move the centroids, assign again), which cluster does P belong to, 0 or 1?
# Work it out by hand (mind B, exactly halfway), then check:

# %%
answer = None   # 0 or 1
lloyd_exercises.check(answer);

# %% [markdown]
# <details><summary>Solution</summary>
#
# First assignment: A → 0; B is 1 from both centroids, a tie, and the lowest index wins → 0; P, C, D, E → 1.
# The centroids move to the means: (0 + 1) / 2 = 0.5 and (3 + 4 + 5 + 13) / 4 = 6.25. P is 2.5 from the first and
# 3.25 from the second, so **P joins cluster 0**: E dragged its centroid away. `lloyd_exercises.check(0)`.
# </details>

# %% [markdown]
# ## 6. Several processes: the all-reduce
#
# With `group=` a `torch.distributed` process group, each rank holds a consecutive slice of the rows. Per iteration
# each rank sums its own points into the int64 buffer (K rows of sums, K counts, and how many ids changed), and one
# `all_reduce` adds the buffers: an exact integer sum, so every rank forms the same centroids, and they are the
# centroids of the single-process run, bit for bit. k-means++ runs on rank 0 on a sample drawn by *global* row index
# (the same rows whatever the sharding), gathered from the ranks, and is broadcast. On GPUs the backend is NCCL,
# here gloo: two CPU processes on the digits, split unevenly (this cell starts two Python processes, a few seconds):

# %%
ranks = lloyd_distributed.run_sharded(x, 10, world=2, sizes=[700, 1097], seed=0)
same = all(torch.equal(q.centroids, r.centroids) for q in ranks)
print(f"centroids equal to the single-process run, bit for bit, on both ranks: {same}")
print(f"ids equal: {torch.equal(torch.cat([q.ids for q in ranks]), r.ids)}; "
      f"iterations {[q.iterations for q in ranks]} vs {r.iterations}")

# %% [markdown]
# ## 7. The number: time per Lloyd iteration on the H200
#
# `python -m kmeans_kernels.lloyd_bench` times, on each seed shape and bf16 random data, a loop of 5 iterations from
# the same centroids: `ours/fit` (the whole `fit` call, per iteration, including its setup and closing assignment),
# `ours/lloyd` (the loop body alone, as `fit` runs it: where the table also lists `ours/lloyd_eager`, `ours/lloyd`
# is replayed from a CUDA graph and `ours/lloyd_eager` launches it op by op), `ours/assign` (the kernel alone),
# flashlib 0.4.0's own loop and a plain torch loop. The contenders take turns in interleaved rounds, and each is
# timed both ways: synchronised calls (`latency`, what a user waiting for the answer sees) and calls back to back
# (`kernel`, the GPU's own time). A ratio is the median over rounds of the ratio within a round, with a 95 %
# interval (`lo`, `hi`). Issue 19's goals: `lloyd/assign ≤ 1.15` at 1M × 128 × 4096, and faster than flashlib's
# loop (`flashlib/lloyd > 1`) everywhere. Read the `ours/fit` column beside them: flashlib's figure is its whole
# call (its setup included), `ours/lloyd` our loop alone. A first `fit` call on an `x` pays its setup too (the
# fixed-point scale, the mean and spread of `x`, an eager warm-up iteration, the graph captures: several ms,
# `probes/fit_phases_*.csv`). `fit` keeps the loop, its buffers and its graphs for the next fit on the same `x`
# (another start, as scikit-learn's `n_init` restarts; at 65536 × 64 × 512 a second call took 1.42 ms instead of
# 3.37, `probes/fit_kept_loops_53c0788.csv`), and the bench calls `fit` again and again on its inputs, so its
# `ours/fit` is such a later call: the state and the closing assignment on top of the iterations. From the data file,
# its newest run (a run recorded before the bench took both timings has synchronised calls only, and no intervals):

# %%
fit_rows = records.read("h200", lloyd_bench.TABLE)
table = lloyd_bench.summary(fit_rows)
if table.empty:
    print(f"not measured yet: {FIT_FILE} has no run. On an H200: python -m kmeans_kernels.lloyd_bench")
else:
    run = records.last_run(fit_rows, [("ours", "fit")])
    how = ("both timings, 95 % intervals over rounds" if "ratio_lo" in run and run.ratio_lo.notna().any()
           else "synchronised calls only, no intervals")
    print(f"{FIT_FILE}: run of {run.date.iloc[0]} at commit {run.commit.iloc[0]}, {run.gpu.iloc[0]}; "
          f"ms per Lloyd iteration; {how}")
    display(table.round(3))
    display(lloyd_bench.goals(table))

# %% [markdown]
# ### The state in one read of `x`
#
# Before its first iteration `fit` measures `x`: the fixed-point scale (from the largest `|x|`), the exact column
# totals in fixed point (the mean, about which the inertia's sums are taken) and the spread `Σ‖x − mean‖²` (the
# inertia's first term, and scikit-learn's tolerance). Done in torch, chunk by chunk through 32- and 64-bit copies
# of `x`, those two passes took 4.8 ms at 1M × 128, more than two iterations. Both are reductions of `x` to `D`
# numbers or one, so a kernel that reads `x` once, each thread keeping its 8 columns' running values in registers,
# costs about the bytes of `x` (`kmeans_kernels.lloyd_state`). The totals stay integers (each row group writes its
# partial row and torch adds the rows): exact, whatever the grid. The loop of that kernel:

# %%
display(stepper.excerpt(lloyd_state, "for r in cutlass.range", "acc.store(acc.load() + (values[u]"))

# %% [markdown]
# Measured on the H200: `measure()` alone (CUDA events), then whole second `fit` calls of 5 iterations with the new
# passes, with torch's passes swapped in, and flashlib's call, taking turns, back to back. Then two host-side steps
# after it, in whole later calls taking turns (ratio to the call before both, with its 95 % interval): the checks
# read `x`'s extent and the init's finiteness in one pass and one wait, and hand `x`'s magnitude on to the scale,
# which had read `x` again (`one read`); and a later fit on the same `x` replays the state's passes from a graph its
# kept loop holds, one launch where there were a dozen (`fit`):

# %%
STATE_FILE = ROOT / "data/measured/h200/probes/fit_state_kernels_43b0b02.csv"
HOST_FILE = ROOT / "data/measured/h200/probes/fit_host_steps_a64b0dc.csv"
state = pd.read_csv(STATE_FILE)
display(state[state.timing != "latency"].pivot_table(index=["N", "D", "K"], columns="contender", values="ms").round(2))
calls = state[state.timing == "kernel"].pivot_table(index=["N", "D", "K"], columns="contender", values="ms")
plots.dumbbell([f"{n}×{d}×{k}" for n, d, k in calls.index], {c: calls[c] for c in calls.columns},
               title="a second fit(iters=5) call against flashlib's, back to back", xlabel="ms per call (log scale)",
               source=f"H200, {STATE_FILE.relative_to(ROOT)}, commit {state.commit.iloc[0]}")
plt.show()
if HOST_FILE.exists():
    host = pd.read_csv(HOST_FILE)
    host["ratio [95 %]"] = [f"{r:.3f} [{lo:.3f}, {hi:.3f}]" for r, lo, hi in zip(host.ratio, host.ratio_lo, host.ratio_hi)]
    print(f"{HOST_FILE.relative_to(ROOT)}, commit {host.commit.iloc[0]}: a later call's time over the time of 'fit, "
          f"before' (kernel: back to back; latency: synchronised)")
    display(host[host.kernel != "fit, before"].pivot_table(index=["N", "D", "K"], columns=["timing", "kernel"],
                                                           values="ratio [95 %]", aggfunc="first"))

# %% [markdown]
# The kernels made the state's GPU passes short (4.8 ms at 1M rows before them): the whole call at 1M × 128 × 4096
# became a quarter shorter (0.767 [0.759, 0.774] of the torch state's time back to back, 0.756 [0.750, 0.765]
# synchronised, the first file above) and ahead of flashlib's. What stayed was about 0.35 ms of host time at every
# size (the scale's read-back, a dozen launches), which at 65536 rows is a quarter of the call. The two host steps
# (the second table) take a later call at the 65536-row shapes to 0.67-0.87 of its time and at 262144 × 128 × 4096 to
# 0.87-0.89, in both timings, and 65536 × 128 × 4096 is now ahead of flashlib's call as well. At 1M × 128 × 4096 they
# did not pay: 1.02-1.03x the time before them back to back in two runs (one interval reaching 1.00), level within
# the interval synchronised; a second contender running the same shipped code with loops of its own measured the same
# (`probes/fit_host_steps_twin_33c0122.csv`), so it is not where the buffers sit. Why the call that reads x once more
# is not slower there, this probe does not say.

# %% [markdown]
# ### The update in one kernel
#
# After the sums, each iteration forms the new centroids (each cluster's mean, rounded once to fp32) and the inertia
# (its per-cluster terms about the data mean). In torch that was about twenty small operations over `k × D`
# numbers: microseconds of work each, but each a launch, and a node of the replayed graph. One kernel does both
# (`lloyd_update.CentroidUpdate`): a group of `D / 8` threads per cluster, the torch formula's own IEEE operations
# (int64 → float64, × 2⁻ˢ, ÷ max(n, 1), one rounding to fp32), so the same centroids bit for bit; each thread
# writes its part of the inertia and torch adds the parts. Per cluster and column:

# %%
display(stepper.excerpt(lloyd_update, "# the mean as torch forms it", "term +="))

# %% [markdown]
# Measured on the H200, whole later `fit` calls of 5 iterations with the kernel and with the torch formula swapped
# back in, flashlib's call in the same turns (back to back, ratio to the torch formula with its 95 % interval;
# the file's synchronised calls give 0.80-0.85 at the 65536-row shapes and 0.998 [0.981, 1.032] at 1M rows):

# %%
UPDATE_FILE = ROOT / "data/measured/h200/probes/fit_update_kernel_0f21842.csv"
upd = pd.read_csv(UPDATE_FILE)
b2b = upd[upd.timing == "kernel"].pivot_table(index=["N", "D", "K"], columns="contender", values=["ms", "ratio", "lo", "hi"])
display(b2b.round(3))
print(f"{UPDATE_FILE.relative_to(ROOT)}, commit {upd.commit.iloc[0]}; the kernel's call against flashlib's:")
for (n, d, k), r in b2b.iterrows():
    print(f"  {n}×{d}×{k}: {r[('ms', 'fit')]:.2f} ms against {r[('ms', 'flashlib')]:.2f} "
          f"({r[('ms', 'fit')] / r[('ms', 'flashlib')]:.2f}x its time)")

# %% [markdown]
# ### What grouping the rows bought
#
# The sums kernel needs the rows of a cluster side by side, not sorted within the cluster. `torch.sort(ids)` (seven
# launches, several passes over 1M keys and values) does more than that; a **counting sort** does just that
# (`lloyd_update.Grouping`): each row takes its rank in its cluster from an atomic add on the cluster's count, the
# counts' prefix sums give each cluster's start, and each row goes to start + rank. The order within a cluster is
# whatever order the atomics landed in, which the integer sums cannot see. One atomic per row on 4096 addresses
# makes 256 rows wait on each address at 1M rows, so the ranks are first counted in a **shared-memory histogram** per
# CTA and each non-empty bin goes to the global count once. The A/B, one run taking turns (the accumulate is
# zero + group + sums; the iteration is `fit`'s whole graph-replayed iteration):

# %%
AB_FILE = ROOT / "data/measured/h200/probes/lloyd_update_ab_7343d2f.csv"
ab = pd.read_csv(AB_FILE)
ab = ab[ab.vs.isin(["torch.sort", "iteration old"]) & (ab.contender != "torch.sort")]
ab["contender"] = ab.contender.replace({"grouping": "grouping, shared ranks (fit's)",
                                        "iteration new": "iteration, grouping (fit's)",
                                        "iteration global ranks": "iteration, global ranks"})
display(ab.pivot_table(index=["N", "D", "K", "part", "contender"], columns="timing", values=["ms", "ratio", "lo", "hi"])
        [["ms", "ratio", "lo", "hi"]].round(3))
acc = ab[(ab.part == "accumulate") & (ab.timing == "kernel")]
fig, ax = plt.subplots(figsize=(7, 2.8))
for i, (shape, g) in enumerate(acc.groupby(["N", "D", "K"], sort=False)):
    labels = [f"{shape[0]}×{shape[1]}×{shape[2]}: {c}" for c in g.contender]
    ax.barh(labels, g.ratio, xerr=[g.ratio - g.lo, g.hi - g.ratio], color=f"C{i}")
ax.axvline(1.0, color="gray", ls="--")
ax.set_xlabel("accumulate time / torch.sort's, back to back (95 % interval)")
ax.set_title(f"the grouping against torch.sort, H200 ({AB_FILE.relative_to(ROOT)}, commit {ab.commit.iloc[0]})",
             fontsize=8)
fig.tight_layout()

# %% [markdown]
# With one global atomic per row the grouping only matches the sort at 1M rows (the atomics queue on each cluster's
# count); counted in shared memory first, the accumulate takes about four fifths of the sort's time there and three
# fifths at 65536 × 64 × 512. The whole iteration moves less (about 3 % at 1M × 128 × 4096) because the assignment
# is most of it; at the small shape, where the update is most of it, about 20 %. The third contender, the sums
# kernel with 8 rows in flight instead of 4, is 1 % slower at 1M rows and 4 % faster at the small shape: not a clear
# win, so the library keeps 4.
#
# Two H200s (issue 20): `torchrun --nproc_per_node=2 -m kmeans_kernels.lloyd_distributed --n 2000000,8000000` times each
# iteration on two GPUs and on one, and checks that the answers are equal. From its data file, if recorded:

# %%
scale = lloyd_distributed.scaling(records.read("h200x2", lloyd_distributed.TABLE))
if scale.empty:
    print(f"not measured yet: no rows in {SCALING_FILE} (it needs a machine with two H200s)")
else:
    display(scale.round(3))
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar([f"N = {n / 1e6:g}M" for n in scale.N], scale.efficiency)
    ax.axhline(1.0, color="gray", ls="--")
    ax.set_ylabel("scaling efficiency")
    ax.set_title(f"fit on 2 H200s vs 1, measured ({SCALING_FILE})", fontsize=9)

# %% [markdown]
# ## Take-away
#
# * `fit` is a complete k-means on the assignment kernel: k-means++ or random starts, scikit-learn's convergence
#   rule, the inertia per iteration, and an answer that does not depend on the run or on the number of processes,
#   because the cluster sums are exact integers.
# * Determinism need not cost much. Done with an int64 copy of `x` and one atomic per coordinate, the update takes
#   about half an assignment (the `lloyd_index_add/assign` column, the same run); grouping the rows by id and summing
#   runs of one cluster in registers, from the bf16 points, brings it to the `lloyd/assign` column: the 15 % over
#   the kernel is that column at 1M × 128 × 4096, printed above from the data file.
# * A counting sort in place of `torch.sort` paid only once its atomics stopped queueing (a shared-memory histogram
#   per CTA first): a step that is right in principle can be level in practice until its contention is removed.
#   At the small shapes the update, not the assignment, still sets the pace (the iteration is several assignments
#   long at K = 512): that is where an update fused into fewer launches would pay next.
# * A short `fit` call is more than its iterations: measuring `x` first (now one read of `x` per pass) and assigning
#   once more at the end, on top of about a millisecond of host work (the checks and the state's launches) at every
#   size. Folding the update's twenty launches into one kernel shortened a later call at 65536 rows by a sixth to a
#   fifth and did nothing measurable at 1M rows, where the assignment is the iteration; with it a later call beats
#   flashlib's at most seed shapes (the `flashlib/fit` column in section 7). What is left there is host time.
# * Ranking by bf16 centroids costs exactness against a float64 k-means on points near a boundary (a point or two of
#   the 1797 digits); on well-separated data the answers are the same.

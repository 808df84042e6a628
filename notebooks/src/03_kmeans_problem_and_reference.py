# %% [markdown]
# # 01 · The k-means assignment problem, and the answer every kernel must give
#
# Lloyd's k-means alternates two steps: **assign** every point to its nearest centroid, then move each centroid
# to the mean of its points. The assignment is nearly all the work: for `N` points and `K` centroids in `D`
# dimensions it is `N × K` distances of `D` terms each. The first kernel family of this workbook computes it.
#
# Before any kernel: what exactly is the right answer? This notebook pins it down and measures what is at stake.
#
# **After this notebook you will know**
#
# * why the kernels minimise the **score** `0.5·‖c‖² − ⟨x, c⟩` instead of the distance, and why that is a GEMM;
# * the contract for **ties, NaN, ±inf and −0.0**, each rule shown on a worked example run through
#   `kmeans_kernels.reference`;
# * why the scores must be kept in **fp32**: with bf16 scores, a measurable share of points gets the wrong centroid;
# * how much work the 13 shapes of the seed PR are, and the **fastest any kernel could run them** on an H200 and a
#   B200 (the roofline), next to what the PR's kernel measured on a B200.
#
# Everything here runs on a CPU in seconds.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import display

from kmeans_kernels import reference
from kmeans_kernels import seeds as pr
from workbook import gpus, plots

print(gpus.describe())

# %% [markdown]
# ## From distance to score
#
# For a point `x` and a centroid `c`, expand the squared distance:
#
# $$\lVert x - c\rVert^2 = \lVert x\rVert^2 - 2\langle x, c\rangle + \lVert c\rVert^2
#   = \lVert x\rVert^2 + 2\left(\tfrac12\lVert c\rVert^2 - \langle x, c\rangle\right)
#   = \lVert x\rVert^2 + 2\,s(x, c).$$
#
# `‖x‖²` is the same for every centroid, and `2 > 0`, so **the centroid with the smallest score `s` is the nearest
# one**. Dropping `‖x‖²` saves work, and what is left has the shape of a matrix product:
#
# $$S = \tfrac12\,\mathbf{1}\,n^\top - X C^\top, \qquad n_k = \lVert c_k\rVert^2 \quad(\text{computed once per } K),$$
#
# so the `N × K × D` part runs on tensor cores as a GEMM, and the kernel's own job is the **argmin** over each row of
# `S`, fused into the GEMM so the `N × K` scores never touch memory.
#
# A check on random data, against distances from `torch.cdist`:

# %%
g = torch.Generator().manual_seed(0)
x, c = torch.randn(2000, 32, generator=g), torch.randn(300, 32, generator=g)
by_distance = torch.cdist(x.double(), c.double()).argmin(dim=1)
by_score = reference.assign(x, c)
print(f"nearest centroid by distance == by score for {int((by_distance == by_score).sum())} of {len(x)} points")

# %% [markdown]
# ## The contract
#
# `kmeans_kernels.reference` defines the answer (see its docstring and `DESIGN.md`); every kernel must equal it
# bit for bit when the products are exact, and agree with it up to fp32 rounding otherwise.
#
# 1. The score is `0.5·‖c‖² − ⟨x, c⟩`, an **fp32** value (inputs are bf16 or fp16). The kernels accumulate both
#    terms in fp32; the reference accumulates them in float64 and rounds once to fp32, which is at least as
#    accurate and makes a centroid's score independent of its position (two equal centroids always tie).
# 2. The winner is the smallest score under a strict `<`, scanning `k` upward: **the lowest index wins ties**.
# 3. **−0.0 equals +0.0** (they tie, so the lower index wins).
# 4. A **NaN** score never wins; a **+inf** score never wins; **−inf** beats every finite score.
# 5. A row where no score can win gets **−1**.
#
# Why these rules: (2) makes the answer independent of how a kernel splits `K` into tiles and merges them; (3) is
# IEEE-754 `==`, which a comparison of raw bits would break; (4)–(5) make sure a poisoned input never silently
# becomes centroid 0. Each rule on a tiny example (2-D bf16 points, all values exact):

# %%
bf16 = torch.bfloat16


def case(name, x, cs, rule, c_sq=None):
    x, c = torch.tensor([x], dtype=bf16), torch.tensor(cs, dtype=bf16)
    c_sq = None if c_sq is None else torch.tensor(c_sq)
    s = reference.scores(x, c, c_sq)[0]
    return {"case": name, "x": fmt(x[0]), "centroids": "  ".join(fmt(r) for r in c),
            "scores (fp32)": "  ".join(f"{v:g}" for v in s.tolist()),
            "winner": int(reference.assign(x, c, c_sq)[0]), "rule": rule}


def fmt(v):
    return "[" + ", ".join(f"{t:g}" if abs(t) < 1e6 or not math.isfinite(t) else f"2^{math.log2(abs(t)):g}"
                           for t in v.float().tolist()) + "]"


examples = pd.DataFrame([
    case("nearest", [1, 1], [[0, 0], [1, 1], [2, 2]], "smallest score wins"),
    case("tie", [1, 0], [[0, 0], [2, 0], [0, 2]], "x is halfway between c0 and c1: lowest index"),
    case("NaN in the point", [float("nan"), 0], [[0, 0], [1, 1]], "every score is NaN: no winner, -1"),
    case("NaN in a centroid", [1, 1], [[1, float("nan")], [2, 2], [-1, -1]], "one NaN coordinate makes the score NaN: it never wins"),
    case("norm overflows", [1, 1], [[2 ** 66, 0], [3, 3]], "0.5*(2^66)^2 = inf in fp32: +inf never wins"),
    case("only +inf", [1, 1], [[2 ** 66, 0]], "no score can win: -1"),
    case("dot overflows", [2 ** 127, 0], [[1, 0], [4, 0], [4, 0]], "2^127 * 4 = inf: score -inf beats finite; tie: lowest"),
    case("signed zero", [1, 1], [[0, 0], [0, 0]], "-0.0 == +0.0: tie, lowest index wins", c_sq=[0.0, -0.0]),
])
display(examples.style.hide(axis="index").set_properties(**{"text-align": "left"}))

# %% [markdown]
# The signed-zero row passes the norms in (`c_sq`, as a Lloyd loop would, to skip recomputing them) because a
# computed `‖c‖²` is never −0.0. Its second score is −0.0 (the table prints `-0`), and it does not beat the +0.0
# before it. All of these cases, plus ties across 128-wide tiles, are in `tests/test_reference.py`.
#
# ## Why fp32 scores: an experiment
#
# A kernel could save registers by keeping scores in bf16, which has 8 significant bits. Both terms of the score are
# large (`0.5·‖c‖²` is about `D·(1 + μ²)/2` for the data below), while the difference between the two best
# centroids of a point can be small. If it is smaller than the bf16 spacing of those terms, bf16 cannot tell the two
# apart.
#
# The experiment: random bf16 points and centroids, `N = 4096, D = 128, K = 1024`, drawn from a normal
# distribution around a common offset `μ` (real data is rarely centred at 0; an offset moves every point and
# centroid together, so the distances and the right answers do not change at all, but ‖c‖² and ⟨x, c⟩ grow).
# Each point's winner is computed three ways:
#
# * **exact**: float64 scores (the products of bf16 numbers, and their sums here, are exact in float64 to
#   well below the gaps that matter);
# * **fp32**: `kmeans_kernels.reference`, the contract;
# * **bf16**: both terms rounded to bf16 and subtracted in bf16, as a kernel storing its scores in bf16 would.

# %%
N, D, K = 4096, 128, 1024
OFFSETS = [0.0, 0.5, 1.0, 2.0, 4.0, 8.0]


def bf16_step(v: torch.Tensor) -> torch.Tensor:
    """The spacing of bf16 numbers at |v|: 2^(exponent - 7), since bf16 keeps 8 significant bits."""
    _, exponent = torch.frexp(v.abs())  # v = m * 2^e with 0.5 <= m < 1
    return torch.ldexp(torch.ones_like(v), exponent - 8)


def experiment(mu: float, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = (mu + torch.randn(N, D, generator=g)).to(bf16)
    c = (mu + torch.randn(K, D, generator=g)).to(bf16)
    exact = 0.5 * (c.double() ** 2).sum(1) - x.double() @ c.double().T
    half, dot = 0.5 * reference.centroid_norms(c), x.float() @ c.float().T
    in_bf16 = half.to(bf16) - dot.to(bf16)  # both terms rounded to bf16, difference rounded to bf16
    best = exact.argmin(1)
    two = exact.topk(2, dim=1, largest=False).values
    rows = torch.arange(N)
    return {
        "mu": mu,
        "fp32 wrong %": 100 * (reference.assign(x, c).long() != best).double().mean().item(),
        "bf16 wrong %": 100 * (in_bf16.argmin(1) != best).double().mean().item(),
        # how far apart the two best centroids are, in bf16 steps of the larger score term of the winner
        "gap_steps": ((two[:, 1] - two[:, 0]) / bf16_step(torch.maximum(half[best], dot[rows, best].abs())).double()),
        "bf16_wrong": in_bf16.argmin(1) != best,
    }


runs = [experiment(mu, seed=100 + i) for i, mu in enumerate(OFFSETS)]
wrong = pd.DataFrame([{k: v for k, v in r.items() if "%" in k or k == "mu"} for r in runs]).set_index("mu")
wrong.index.name = "offset μ"
display(wrong.round(2))
# what the text below says, checked: fp32 never misses here; bf16 misses, more so off 0
assert (wrong["fp32 wrong %"] == 0).all() and wrong["bf16 wrong %"].is_monotonic_increasing
assert wrong["bf16 wrong %"].iloc[0] > 1 and wrong["bf16 wrong %"].iloc[-1] > 50

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")

for r, color in ((runs[0], "#2b7bba"), (runs[3], "#c44e52")):
    steps = r["gap_steps"].clamp_min(1e-3).numpy()
    bins = np.logspace(-3, 3, 61)
    left.hist(steps, bins=bins, histtype="step", color=color, linewidth=1.5,
              label=f"μ = {r['mu']:g}: all points")
    left.hist(steps[r["bf16_wrong"].numpy()], bins=bins, color=color, alpha=0.35,
              label=f"μ = {r['mu']:g}: points bf16 gets wrong")
left.axvline(1, color="0.2", linestyle="--", linewidth=1)
left.annotate("one bf16 step", xy=(1, 0.62), xycoords=("data", "axes fraction"), xytext=(-4, 0),
              textcoords="offset points", ha="right", fontsize="small")
left.set_xscale("log")
left.set_ylim(top=1.5 * left.get_ylim()[1])
left.set_xlabel("score gap between the two nearest centroids, in bf16 steps of the score's terms\n"
                "(gaps under $10^{-3}$ steps, exact ties included, are drawn at $10^{-3}$)")
left.set_ylabel("points")
left.set_title("Wrong picks are the points whose gap is under a few bf16 steps", fontsize="medium")
left.legend(fontsize="small", frameon=False, loc="upper left", ncols=2)

right.plot(wrong.index, wrong["bf16 wrong %"], "o-", color="#c44e52", label="bf16 scores")
right.plot(wrong.index, wrong["fp32 wrong %"], "s-", color="#2b7bba", label="fp32 scores (the contract)")
right.set_xlabel("offset μ of the data (points and centroids ~ N(μ, 1))")
right.set_ylabel("points assigned to the wrong centroid (%)")
right.set_title("bf16 scores fail more as the data moves off 0", fontsize="medium")
right.set_ylim(bottom=0, top=105)
right.set_xlim(left=-0.6)
for mu, pct in wrong["bf16 wrong %"].items():
    if mu in (0, 2, 4, 8):  # the crowded ones in between are in the table above
        right.annotate(f"{pct:.1f}%", (mu, pct), xytext=(-4 if mu == 0 else 0, 7), textcoords="offset points",
                       ha="right" if mu == 0 else "center", fontsize="small", color="#c44e52")
right.legend(frameon=False)
for ax in (left, right):
    ax.spines[["top", "right"]].set_visible(False)
plots.caption(right, f"this notebook, CPU, N={N}, D={D}, K={K}, bf16 inputs; wrong = not the float64 winner")
plt.show()

# %% [markdown]
# In this run the fp32 scores of the contract pick the exact winner for every point at every offset (a miss could
# only be a near-tie within fp32 rounding), while bf16 scores pick a wrong centroid for over 1% of the points of
# centred data, and for most points once the data sits a few standard deviations off 0. An offset does not
# change a single distance, so this is pure rounding. The kernels therefore keep the GEMM accumulator and the
# norms in fp32 all the way to the comparison.
#
# ## How much work, and the fastest it could go
#
# The 13 shapes below are the ones flashlib PR #22 measured on a B200 (seed 000, transcribed in `data/pr/`).
# Counting only what no kernel can avoid:
#
# * **FLOPs** `= 2·N·K·D`: one multiply and one add per term of every dot product. (The `N·K` norm additions and
#   comparisons are not counted: they run on the CUDA cores, not the tensor cores.)
# * **bytes** `= N·D·2 + K·D·2 + N·4 + K·4`: read the bf16 points and centroids once, write one int32 id per point,
#   read one fp32 norm per centroid. The `N × K` scores never leave the chip.
#
# The **roofline** bound is the larger of *FLOPs / peak bf16 tensor throughput* and *bytes / peak HBM bandwidth*
# (`workbook.gpus.roofline_ms`, with each peak's datasheet source in `workbook.gpus`). The ratio FLOPs/bytes, the
# arithmetic intensity, is about `K` when `N ≫ K`; a shape is **compute-bound** when it exceeds the GPU's
# peak FLOP/s ÷ peak bytes/s.

# %%
shapes = pr.nightly_table()
rows = []
for _, r in shapes.iterrows():
    n, d, k = int(r.N), int(r.D), int(r.K)
    flops = 2 * n * k * d
    nbytes = n * d * 2 + k * d * 2 + n * 4 + k * 4
    b200, h200 = gpus.roofline_ms(flops, nbytes, "b200"), gpus.roofline_ms(flops, nbytes, "h200")
    rows.append({"N": n, "D": d, "K": k, "GFLOP": flops / 1e9, "MB": nbytes / 1e6, "FLOP/byte": flops / nbytes,
                 "H200 bound (ms)": h200.ms, "H200 bound by": h200.bound,
                 "B200 bound (ms)": b200.ms, "B200 bound by": b200.bound,
                 "PR on B200, measured (ms)": r.pr_ms, "PR / B200 bound": b200.ms / r.pr_ms})
work = pd.DataFrame(rows)
ridge = {spec.name: spec.bf16_dense_tflops * 1e12 / (spec.hbm_tbps * 1e12) for spec in (gpus.H200, gpus.B200)}
print("compute-bound above (FLOP/byte): " + ", ".join(f"{name} {v:.0f}" for name, v in ridge.items()))
display(work.style.hide(axis="index").format({
    "N": "{:,}", "K": "{:,}", "GFLOP": "{:.1f}", "MB": "{:.1f}", "FLOP/byte": "{:,.0f}",
    "H200 bound (ms)": "{:.4f}", "B200 bound (ms)": "{:.4f}", "PR on B200, measured (ms)": "{:.4f}",
    "PR / B200 bound": "{:.0%}"}))

# %% [markdown]
# Every one of the 13 shapes is compute-bound on both GPUs: even `K = 512` gives about 500 FLOP/byte, above both
# ridges. The last column is the share of the B200 roofline the PR's kernel reached, in the PR author's
# measurement (not ours: we have no B200).

# %%
labels = pr.shape_labels(work)
pos = np.arange(len(work))
fig, (roof, bars) = plt.subplots(1, 2, figsize=(13, 4.8), layout="constrained",
                                 gridspec_kw={"width_ratios": [1, 1.5]})

# left: the classic roofline, attainable TFLOP/s against arithmetic intensity
ai = np.logspace(1, 4.5, 200)
for spec, color in ((gpus.H200, "#dd8452"), (gpus.B200, "#2b7bba")):
    roof.plot(ai, np.minimum(spec.bf16_dense_tflops, ai * spec.hbm_tbps), color=color,
              label=f"{spec.name.split()[-1]} roofline (datasheet peaks)")
for spec, color in ((gpus.H200, "#dd8452"), (gpus.B200, "#2b7bba")):
    r = ridge[spec.name]
    roof.vlines(r, 10, spec.bf16_dense_tflops, color=color, linestyle=":", linewidth=1)
    roof.annotate(f"ridge {r:.0f}", (r, 12), xytext=(3, 0), textcoords="offset points", color=color,
                  fontsize="x-small", rotation=90, va="bottom")
achieved = work["GFLOP"] / work["PR on B200, measured (ms)"]  # GFLOP / ms = TFLOP/s
for k, marker in ((512, "^"), (4096, "D"), (16384, "s")):
    at = work["K"] == k
    roof.scatter(work["FLOP/byte"][at], achieved[at], color="k", marker=marker, s=24, zorder=3,
                 label=f"PR #22 kernel, K = {k:,}")
roof.set_xscale("log")
roof.set_yscale("log")
roof.set_xlabel("arithmetic intensity (FLOP/byte)")
roof.set_ylabel("TFLOP/s")
roof.set_title("The 13 shapes on the roofline", fontsize="medium")
roof.set_ylim(10, 5e3)
roof.legend(fontsize="small", frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2,
            title="points: measured on a B200 by the PR author", title_fontsize="small")

# right: per shape, the bound on each GPU and the PR's measured time
for spec, color, dx in ((gpus.H200, "#dd8452", -0.2), (gpus.B200, "#2b7bba", 0.0)):
    col = work[f"{spec.name.split()[-1]} bound (ms)"]
    compute = work[f"{spec.name.split()[-1]} bound by"] == "compute"
    bars.scatter(pos[compute] + dx, col[compute], color=color, marker="o", s=30,
                 label=f"{spec.name.split()[-1]} bound (compute-bound: filled)")
    bars.scatter(pos[~compute] + dx, col[~compute], facecolors="none", edgecolors=color, marker="o", s=30,
                 label=f"{spec.name.split()[-1]} bound (memory-bound)" if (~compute).any() else None)
bars.scatter(pos + 0.2, work["PR on B200, measured (ms)"], color="k", marker="D", s=22,
             label="PR #22 on a B200, measured by the PR author")
bars.set_yscale("log")
bars.set_xticks(pos, labels, rotation=45, ha="right", fontsize="small")
bars.set_xlabel("N x D x K")
bars.set_ylabel("ms (log scale)")
bars.set_title("Fastest possible time per shape, and the PR kernel's", fontsize="medium")
bars.legend(fontsize="small", frameon=False, loc="lower right")
bars.grid(axis="y", which="major", color="0.9")
for ax in (roof, bars):
    ax.spines[["top", "right"]].set_visible(False)
plots.caption(bars, "bounds from workbook.gpus (datasheet peaks); measured ms from seed 000 "
              "(data/pr/kmeans_pr22_nightly.csv, PR column), a B200 that is not ours")
plt.show()

# %% [markdown]
# Two things to take away.
#
# * **The bound is a floor, not a forecast.** It counts only the tensor-core math and the compulsory HBM traffic,
#   and leaves out everything else a kernel does: the `N × K` score scan on the CUDA cores, filling and draining the
#   pipeline, the launch. Where the whole bound is a few microseconds (`K = 512`), those other costs are most of the
#   time; on the largest shapes the PR kernel gets to about half of the bound:

# %%
share = work.groupby("K")["PR / B200 bound"].agg(["min", "max"])
for k, (lo, hi) in share.iterrows():
    print(f"K = {k:>6,}: the PR kernel runs at {lo:.0%} to {hi:.0%} of the B200 bound")
largest = work.nlargest(4, "GFLOP")["PR / B200 bound"]
assert share.loc[512, "max"] < 0.15 and largest.between(0.4, 0.6).all()  # what the text says

# %% [markdown]
# * **The scan is the part to optimise.** Per score, the tensor cores do `2·D` FLOPs, but the scan (add the norm,
#   compare, keep the index) costs the same whatever `D` is. The smaller `D`, the larger its share. That scan is what
#   PR #22 optimised (a two-chain argmin, register-staged norms), and what the kernel notebooks build step by step.
#
# Next, the kernel notebooks build this fused GEMM + argmin step by step: Hopper first, then Blackwell
# (`05_kmeans_blackwell_tcgen05`), each checked against `kmeans_kernels.reference`.

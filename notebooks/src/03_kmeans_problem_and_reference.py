# %% [markdown]
# # 03 · The k-means assignment problem, and the answer every kernel must give
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
# * how much work the 13 shapes of the seed PR are, and the **floor** of each on the H200: the largest of the
#   tensor-core time, the CUDA-core time of the argmin and the DRAM time, the yardstick every later step is
#   measured against; and the B200 roofline next to what the PR's kernel measured there.
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
from kmeans_kernels import seeds
from workbook import gpus, plots
from workbook.primer import exercises

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


# %%
runs = [experiment(mu, seed=100 + i) for i, mu in enumerate(OFFSETS)]
wrong = pd.DataFrame([{k: v for k, v in r.items() if "%" in k or k == "mu"} for r in runs]).set_index("mu")
wrong.index.name = "offset μ"
display(wrong.round(2))
# what the text below says, checked: fp32 never misses here; bf16 misses, more so off 0
assert (wrong["fp32 wrong %"] == 0).all() and wrong["bf16 wrong %"].is_monotonic_increasing
assert wrong["bf16 wrong %"].iloc[0] > 1 and wrong["bf16 wrong %"].iloc[-1] > 50

# %%
fig, left = plt.subplots(figsize=(8, 4), layout="constrained")
bins = np.logspace(-3, 3, 61)
for r, color in ((runs[0], "#2b7bba"), (runs[3], "#c44e52")):
    steps = r["gap_steps"].clamp_min(1e-3).numpy()
    left.hist(steps, bins=bins, histtype="step", color=color, linewidth=1.5, label=f"μ = {r['mu']:g}: all points")
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
left.spines[["top", "right"]].set_visible(False)
plots.caption(left, f"this notebook, CPU, N={N}, D={D}, K={K}, bf16 inputs; wrong = not the float64 winner")
plt.show()

# %%
fig, right = plt.subplots(figsize=(6.5, 3.8), layout="constrained")
right.plot(wrong.index, wrong["bf16 wrong %"], "o-", color="#c44e52", label="bf16 scores")
right.plot(wrong.index, wrong["fp32 wrong %"], "s-", color="#2b7bba", label="fp32 scores (the contract)")
right.set(xlabel="offset μ of the data (points and centroids ~ N(μ, 1))", ylim=(0, 105), xlim=(-0.6, None),
          ylabel="points assigned to the wrong centroid (%)")
right.set_title("bf16 scores fail more as the data moves off 0", fontsize="medium")
for mu, pct in wrong["bf16 wrong %"].items():
    if mu in (0, 2, 4, 8):  # the crowded ones in between are in the table above
        right.annotate(f"{pct:.1f}%", (mu, pct), xytext=(-4 if mu == 0 else 0, 7), textcoords="offset points",
                       ha="right" if mu == 0 else "center", fontsize="small", color="#c44e52")
right.legend(frameon=False)
right.spines[["top", "right"]].set_visible(False)
plots.caption(right, "the same six runs as the table (one random draw each, CPU)")
plt.show()

# %% [markdown]
# In this run the fp32 scores of the contract pick the exact winner for every point at every offset (a miss could
# only be a near-tie within fp32 rounding), while bf16 scores pick a wrong centroid for over 1% of the points of
# centred data, and for most points once the data sits a few standard deviations off 0. An offset does not
# change a single distance, so this is pure rounding. The kernels therefore keep the GEMM accumulator and the
# norms in fp32 all the way to the comparison.
#
# ## How much work, and the floor
#
# The 13 shapes below are the ones flashlib PR #22 measured on a B200 (seed 000, transcribed in `data/pr/`). A
# kernel cannot avoid three costs, and on the H200 each has a rate:
#
# * **tensor cores**: `2·N·D·K` FLOPs (a multiply and an add per term of every dot product) at about 790 TFLOP/s,
#   the dense bf16 rate a tuned GEMM reaches on our H200 (cuBLAS's, in `gemm_kernels.ceiling`; the datasheet's
#   989 is a peak nobody reaches);
# * **CUDA cores**: the argmin, about 4 operations per score (the score from the half norm and the dot product,
#   compare, select the score, select the index) for `N·K` scores, on 132 SMs × 128 lanes at 1.98 GHz;
# * **DRAM**: `N·D·2 + K·D·2 + N·4 + K·4` bytes (the bf16 points and centroids once, a norm per centroid, an
#   int32 id per point; the `N × K` scores never leave the chip) at about 4.3 TB/s, a large copy's rate here.
#
# The **floor** of a shape is the largest of the three (DESIGN.md, measurement method). No kernel runs faster;
# every later step is reported as a share of it.

# %%
TENSOR_TFLOPS, EPILOGUE_OPS, LANES, CLOCK_GHZ, DRAM_TBPS = 790.0, 4, 132 * 128, 1.98, 4.3  # the H200 rates above


def floor_us(n: int, d: int, k: int) -> dict:
    """The three unavoidable costs of one assignment on the H200, in microseconds, and the floor."""
    terms = {"tensor cores": 2 * n * d * k / (TENSOR_TFLOPS * 1e12) * 1e6,
             "CUDA cores (argmin)": EPILOGUE_OPS * n * k / (LANES * CLOCK_GHZ * 1e9) * 1e6,
             "DRAM": (n * d * 2 + k * d * 2 + n * 4 + k * 4) / (DRAM_TBPS * 1e12) * 1e6}
    bound = max(terms, key=terms.get)
    return {**terms, "floor": terms[bound], "bound by": bound}


shapes = seeds.nightly_table()
work = pd.DataFrame([{"N": int(r.N), "D": int(r.D), "K": int(r.K), **floor_us(int(r.N), int(r.D), int(r.K))}
                     for r in shapes.itertuples()])
us = {c: "{:,.1f}" for c in ("tensor cores", "CUDA cores (argmin)", "DRAM", "floor")}
print("microseconds on the H200:")
display(work.style.hide(axis="index").format({"N": "{:,}", "K": "{:,}", **us}))

# %%
labels, pos = seeds.shape_labels(work), np.arange(len(work))
fig, ax = plt.subplots(figsize=(12, 4.6), layout="constrained")
for term, marker, color in (("tensor cores", "o", "#2b7bba"), ("CUDA cores (argmin)", "s", "#55a868"),
                            ("DRAM", "^", "#9a9a9a")):
    ax.scatter(pos, work[term], marker=marker, color=color, s=40, label=term, zorder=3)
ax.scatter(pos, work["floor"], s=190, facecolors="none", edgecolors="k", linewidths=1.2, zorder=4,
           label="the floor: the largest of the three")
ax.set_yscale("log")
ax.set_xticks(pos, labels, rotation=35, ha="right", fontsize="small")
ax.set(xlabel="N x D x K", ylabel="µs (log scale)")
ax.set_title("The unavoidable costs of each seed shape on the H200", fontsize="medium")
ax.grid(axis="y", which="major", color="0.9")
ax.legend(frameon=False, fontsize="small", ncols=4, loc="upper left")
ax.spines[["top", "right"]].set_visible(False)
plots.caption(ax, "rates of DESIGN.md: 790 TFLOP/s; 4 operations per score on 132 x 128 lanes at 1.98 GHz; "
              "4.3 TB/s. Computed, not measured")
plt.show()
argmin_share = (work["CUDA cores (argmin)"] / work["tensor cores"]).groupby(work["D"]).first()
print("the argmin's CUDA-core time as a share of the tensor-core time:",
      ", ".join(f"D = {d}: {v:.0%}" for d, v in argmin_share.items()))
assert (work["bound by"] == "tensor cores").all()

# %% [markdown]
# Every seed shape's floor is the tensor cores', and DRAM is far below it: these shapes are compute-bound. But
# the argmin's CUDA-core time is not small next to the floor, and it does not depend on `N` or `K`, only on
# `D`: per score the tensor cores do `2·D` FLOPs, the argmin a fixed handful of operations. At `D = 64` the scan
# needs most of the floor's time on the CUDA cores, so a kernel can approach the floor only if the scan of one
# tile runs *while* the tensor cores compute the next, and only if the scan itself wastes nothing. That is what
# the kernel steps of notebooks 04-07 work on.
#
# ## On a B200, and what the PR measured there
#
# We have no B200. For the PR's own numbers, the yardstick is the B200's datasheet roofline (tensor peak and HBM
# bandwidth, `workbook.gpus.roofline_ms`): the times below were **measured by the PR's author**, on their B200.

# %%
b200 = pd.DataFrame([{"K": int(r.K), "GFLOP": 2 * r.N * r.D * r.K / 1e9, "PR ms": r.pr_ms,
                      "B200 roofline ms": gpus.roofline_ms(2 * r.N * r.D * r.K, r.N * r.D * 2 + r.K * r.D * 2 +
                                                           r.N * 4 + r.K * 4, "b200").ms}
                     for r in shapes.itertuples()])
b200["share of the roofline"] = b200["B200 roofline ms"] / b200["PR ms"]
fig, ax = plt.subplots(figsize=(6.5, 3.8), layout="constrained")
for k, marker in ((512, "^"), (4096, "D"), (16384, "s")):
    at = b200["K"] == k
    ax.scatter(b200["GFLOP"][at], 100 * b200["share of the roofline"][at], marker=marker, color="k",
               label=f"K = {k:,}")
ax.set_xscale("log")
ax.set(xlabel="GFLOP of the shape (log scale)", ylabel="% of the B200 roofline", ylim=(0, 100))
ax.set_title("PR #22's kernel on a B200, as a share of its roofline", fontsize="medium")
ax.legend(frameon=False, fontsize="small")
ax.spines[["top", "right"]].set_visible(False)
plots.caption(ax, "seed 000 (data/pr/kmeans_pr22_nightly.csv, PR column), measured by the PR author on a B200 "
              "that is not ours; roofline from workbook.gpus (datasheet peaks)")
plt.show()
for k, (lo, hi) in b200.groupby("K")["share of the roofline"].agg(["min", "max"]).iterrows():
    print(f"K = {k:>6,}: the PR kernel runs at {lo:.0%} to {hi:.0%} of the B200 roofline")

# %% [markdown]
# The roofline is a floor, not a forecast: where the whole bound is a few microseconds (`K = 512`), launch,
# pipeline fill and drain and the scan are most of the time; the largest shapes reach about half of it.
#
# ## Exercises
#
# 1. **The contract.** A point `x = (1, 0)` and three centroids `c0 = (NaN, 0)`, `c1 = (3, 0)`, `c2 = (−1, 0)`.
#    Which index does `kmeans_kernels.reference.assign` return? Work out the three scores first.
# 2. **The crossover.** With the H200 rates above, at which `D` (to the nearest integer) does the argmin's
#    CUDA-core time equal the tensor-core time? (It does not depend on `N` or `K`.)
#
# Replace each `None` with your answer.

# %%
point = torch.tensor([[1.0, 0.0]], dtype=bf16)
centroids = torch.tensor([[float("nan"), 0.0], [3.0, 0.0], [-1.0, 0.0]], dtype=bf16)
exercises.check_value("the index the reference assigns to x = (1, 0)", None,
                      int(reference.assign(point, centroids)[0]),
                      hint="a NaN score never wins; of two equal scores the lower index wins")
exercises.check_value("the D at which the argmin's CUDA-core time equals the tensor-core time", None,
                      round(EPILOGUE_OPS * TENSOR_TFLOPS * 1e12 / (2 * LANES * CLOCK_GHZ * 1e9)),
                      hint="set 2·N·D·K / (tensor FLOP/s) equal to 4·N·K / (CUDA-core operations/s), solve for D");

# %% [markdown]
# <details><summary>Solutions (click to open)</summary>
#
# 1. Scores `0.5·‖c‖² − ⟨x, c⟩`: `c0` is NaN (a NaN coordinate), `c1` is `4.5 − 3 = 1.5`, `c2` is `0.5 + 1 = 1.5`.
#    NaN never wins and `c1`, `c2` tie, so the lowest index of the tie wins: **1**. (Both are at distance 2 from
#    `x`; the score agrees.)
# 2. `2·D / 790e12 = 4 / (132·128·1.98e9)` gives `D = 4 · 790e12 / (2 · 132 · 128 · 1.98e9) ≈ 47.2`: **47**.
#    Below it the scan, not the tensor cores, would set the floor; every seed shape has `D ≥ 64`.
#
# </details>
#
# ## Take-away
#
# The answer is pinned down before any kernel: the lowest-index winner of fp32 scores, with rules for ties, NaN,
# ±inf and −0.0 that `kmeans_kernels.reference` implements and every kernel must match bit for bit on exact
# inputs. fp32 is not optional: in the experiment above bf16 scores pick a wrong centroid for a share of the
# points that grows to most of them as the data moves off 0. And the floor of each seed shape on the H200 is its
# tensor-core time, with the argmin needing a large share of that time again on the CUDA cores (the printed
# shares): the kernels must overlap the two to come near the floor. Next, notebook 04 builds
# the first Hopper kernel (the fused GEMM and serial argmin); notebook 08 turns to Blackwell.

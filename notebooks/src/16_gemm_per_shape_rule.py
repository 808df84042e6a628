# %% [markdown]
# # 16 · GEMM: a configuration per shape, chosen by a rule learned from a sweep
#
# cuBLAS does not run one kernel for every matrix product: it picks a tile shape, a cluster shape and a split of K
# per problem. Our Hopper GEMM (notebooks 10-13) had one default, a 128 × 256 tile in 2-CTA clusters, tuned on
# large squares. This notebook times a set of candidate configurations on the shapes users run, learns a small rule
# from the recording, and shows, class by class, what it buys and what it does not.
#
# **After this notebook you will know**
#
# * why tile width, clusters and split-K matter when a problem has **few waves**, is **skinny** (M ≤ 512) or is
#   **K-heavy**, with the arithmetic: tiles per wave on 132 SMs, bytes of B per CTA;
# * the three timings of the sweep (synchronised, back to back, the GPU's own kernel durations) and why the third
#   is needed at small shapes, where the host sets the pace;
# * the nearest-shapes rule (`gemm_kernels.rule`) and how leave-one-out judges it on shapes it has not seen;
# * where the rule stands against the goal of issue 18 (median ≥ 103 % of `torch.matmul` in every class, no shape
#   below 95 %), and why small and skinny problems fall short here;
# * one kernel change the skinny class asked for: at M ≤ 32, load only the rows of A there are.
#
# Everything below is computed from `data/measured/h200/gemm_config_sweep.csv`; without an H100/H200 the live
# check is replaced by the recorded rows, and the notebook says so.

# %%
import dataclasses

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import HTML, display

from gemm_kernels import configs, hopper, hopper_host, hopper_options, rule, rule_exercises, sweep, sweep_plot
from workbook import ROOT, gpus, plots, records, stepper
from workbook.explore import provenance_text

pd.set_option("display.precision", 1)
pd.set_option("display.width", 180)
print(gpus.describe())
frame = rule.latest_run(records.read("h200", sweep.TABLE))
learned = rule.learned()           # the committed rule (gemm_kernels/rule_h200.json): what gemm(a, b) runs
if learned.provenance.get("date") != sorted(set(frame.date)):
    print("note: the committed rule was fitted on another run than the sweep's latest:", learned.provenance["date"])
check = records.read("h200", sweep.DEFAULT_TABLE)
check = rule.latest_run(check) if not check.empty else None
print(f"sweep: {sweep_plot.source_line(frame)}")
print("rule check (gemm() as shipped):", sweep_plot.CHECK_SOURCE if check is not None else
      f"{sweep_plot.CHECK_SOURCE} is not recorded yet (python -m gemm_kernels.sweep --default-only on an H200)")

# %% [markdown]
# ## 1. The idea: candidates, shapes, classes
#
# Each candidate is a tile (128 rows × 64 … 256 columns, two consumer warpgroups; or, for skinny problems, 64 rows
# and one consumer warpgroup, so that a 16-row A is not mostly zero fill), a cluster (1 CTA; 2 stacked along M
# sharing each B tile by TMA multicast; `cluster2n`, 2 side by side along N sharing each A tile; or `cluster2x2`,
# four sharing A along each row and B along each column) and a
# schedule: *balanced* (the last wave filled with narrower tiles, notebook 12), *stream-K* (the last wave, or the
# whole grid when the tiles are fewer than the SMs, split along K), *uniform*, or *one-per-item* (a CTA per tile
# instead of persistent CTAs). The short names in the figures read width, schedule, cluster:
# `256b2` is the fixed default, `64x128u1` a 64-row tile, `64u2n` a pair along N (notebook 13, finding 7),
# `128sk2x2` a 2 × 2 cluster with stream-K (finding 8). The rule
# is learned from each class's latest sweep (`rule.latest_run`): every candidate of a class is judged against
# `torch.matmul` in one run.

# %%
rows = [{"short": sweep_plot.short_name(name), "name": name, "tile": "x".join(map(str, o.tile)),
         "cluster": f"{o.cluster_m}x{o.cluster_n}", "schedule": o.schedule, "stream_k": o.stream_k, "persistent": o.persistent}
        for name, o in configs.HOPPER_CANDIDATES.items()]
display(pd.DataFrame(rows).set_index("short"))
shapes = frame.drop_duplicates(["M", "N", "K"])
print(f"{len(rows)} candidates timed on {len(shapes)} shapes:", shapes["class"].value_counts().to_dict())

# %% [markdown]
# **Few waves.** A 128-row tile of width *W* makes ⌈M / 128⌉ · ⌈N / W⌉ tiles, and 132 SMs run 132 of them at a
# time. Below one wave most SMs idle, whatever the kernel does inside a tile; narrower tiles (or splitting K)
# make more work items of the same problem:

# %%
SMS = gpus.H200.sm_count
rows = []
for M, N, K in [(1024, 1024, 1024), (1024, 2048, 4096), (1024, 1024, 32768), (16, 8192, 4096)]:
    for width in (256, 128, 64):
        tiles = -(-M // 128) * -(-N // width)
        rows.append({"shape": f"{M}x{N}x{K}", "tile": f"128x{width}", "tiles": tiles,
                     "waves": tiles / SMS, "SMs busy %": 100 * min(tiles, SMS) / SMS,
                     "K-blocks per tile": K // 64})
display(pd.DataFrame(rows).set_index(["shape", "tile"]))

# %% [markdown]
# **K-heavy** problems (K ≥ 4 · max(M, N)) have few tiles and a long K loop each: only splitting K into parts
# that different SMs sum fills the GPU, and each CTA streams its operands for the whole K, so what it reads per
# K-block matters too (2 × 2 clusters halve it: notebook 13, finding 8). **Skinny** problems (M = 16: a decode
# step) are different again: the tensor cores do almost nothing, and the time is reading B once from DRAM. A
# 128-row tile over 16 real rows computes 8 × the needed work (cheap, it is idle anyway); what matters is how many
# SMs pull B at once:

# %%
M, N, K = 16, 8192, 4096
b_bytes = N * K * 2
floor_us = b_bytes / (gpus.H200.hbm_tbps * 1e12) * 1e6
print(f"{M}x{N}x{K}: B is {b_bytes / 2**20:.0f} MiB (bf16); at the datasheet's {gpus.H200.hbm_tbps} TB/s that is "
      f"{floor_us:.1f} µs at the least")
for width in (256, 128, 64):
    ctas = N // width
    print(f"  128x{width} tiles: {ctas:>3} CTAs ({100 * ctas / SMS:.0f} % of the SMs), "
          f"{width * K * 2 / 2**20:.2f} MiB of B each; split K in two: {2 * ctas} CTAs")

# %% [markdown]
# ## 2. Three timings, and why the GPU's own is needed
#
# The sweep (`gemm_kernels.sweep`, `workbook.timing.compare`) times every candidate and `torch.matmul` in turns:
# **latency** (each call synchronised, the seeds' method: what a user sees), **kernel** (calls back to back between
# two events) and **gpu** (the kernels' own durations from a CUPTI trace). Back to back, a call cannot finish
# before the host has issued it: if the host needs longer per call than the GPU, back-to-back timing measures the
# host. At 1024³:

# %%
here = frame[(frame.M == 1024) & (frame.N == 1024) & (frame.K == 1024)]
us = here.pivot_table(index="variant", columns="timing", values="ms_median", aggfunc="last") * 1e3
ours, torch_us = us.drop("torch.matmul"), us.loc["torch.matmul"]
print(f"back to back, our {len(ours)} candidates: {ours.kernel.min():.1f} .. {ours.kernel.max():.1f} µs per call; "
      f"their GPU time: {ours.gpu.min():.1f} .. {ours.gpu.max():.1f} µs")
print(f"torch.matmul: back to back {torch_us.kernel:.1f} µs per call, GPU time {torch_us.gpu:.1f} µs")
print(f"so our host path costs about {ours.kernel.median():.0f} µs per call against torch's {torch_us.kernel:.0f} µs")

# %% [markdown]
# Back to back, our candidates all take about the same time per call while their GPU times differ widely (the
# ranges above): the host, not the kernel, sets that number, and only the gpu timing still tells the
# configurations apart. The rule therefore scores a candidate by all three timings.
#
# ## 3. The rule
#
# Score each candidate at each measured shape by the mean of the logs of its three ratios to `torch.matmul`
# (< 0: faster than torch). A measured shape takes the candidate measured best there. For any other shape, take
# the three measured shapes nearest to it in (log2 M, log2 N, log2 K) and pick the candidate with the best mean
# score over them, each neighbour weighted by 1 / (its squared distance + 0.25). (Why not let a measured shape's
# neighbours temper its own measurement: 4097 × 4104 × 4104 lies at distance 0 from 4096³ in log size, and
# stream-K pays at the first and not at the second.)
#
# Nearness in log size misleads where few waves run: 384 rows are three 128-row tiles but one and a half CTA
# pairs, so a neighbour at 512 rows says nothing about the half-empty pair at 384. Below two waves of the default
# tiles the rule therefore carries each neighbour's score over by the wave model (`gemm_kernels.waves`): score
# here = score there + log(planned time here / planned time there), the planned time being the candidate's
# makespan in tiles x a tile's size x K (`rule.planned_log_time`). Nothing is timed at call time; the scores and
# the planned times are package data (`gemm_kernels/rule_h200.json`, with the sweep's provenance). The whole
# choice, and the one place `gemm(a, b)` uses it (when the caller gives no options):

# %%
display(stepper.excerpt(rule, "    def choose("))
display(stepper.excerpt(hopper_host, "def _options_for("))

# %% [markdown]
# A measured shape is its own nearest neighbour, so judging the rule on the shapes it was fitted on would flatter
# it. **Leave-one-out** asks, for each measured shape, what the rule picks *without* that shape's measurement, and
# reads that candidate's measured time there (`rule.leave_one_out`). All the "rule" numbers below are of this kind.
#
# ## 4. Check: the rule's kernel against an fp32 reference

# %%
spec = gpus.current()
if spec is not None and spec.arch == "sm_90a":
    import random

    import torch

    import gemm_kernels
    rng = random.Random()
    M, N, K = rng.randint(1, 3000), 8 * rng.randint(1, 800), 8 * rng.randint(1, 800)   # rows on 16-byte boundaries
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    err = ((gemm_kernels.gemm(a, b).float() - ref).norm() / ref.norm()).item()
    print(f"{M}x{N}x{K}: the rule picks {rule.choose(M, N, K)}; relative error {err:.2e} (band {sweep.REL_TOL})")
    assert err < sweep.REL_TOL
else:
    print("No H100/H200 here: the recorded check instead. Every candidate's first input set was compared with an "
          "fp32 reference at every shape; the lowest match rate of each over the sweep:")
    ours = frame[frame.kernel == "ours"]
    display(ours.groupby("variant").match_rate.agg(["min", "count"]).rename(columns={"count": "rows"}))
print("the rule's choice at 24 x 11008 x 4096 (not measured):", rule.choose(24, 11008, 4096))

# %% [markdown]
# ## 5. The figures
#
# % of `torch.matmul` (100 / ratio; > 100: ours faster) over the M × N grid of the rectangle and square shapes, one
# panel per K, each cell with the rule's leave-one-out choice. Grey cells were not measured (M = N ≠ K is neither
# class).

# %%
sweep_plot.heatmaps(frame, learned, timing="kernel")
plt.show()
if check is not None:
    sweep_plot.heatmaps(check, learned, variant=sweep_plot.SHIPPED, source=sweep_plot.CHECK_SOURCE)
    plt.show()

# %% [markdown]
# A box per class: the fixed default (`256b2` everywhere), the rule (leave-one-out), and the per-shape best of the
# sweep by the rule's own score, all three timings together (the oracle: the most a rule over these candidates
# reaches by that score; in one timing alone another candidate can be ahead), in the kernel and the latency timing,
# with the goal (103 %) and floor (95 %). With the rule-check table, gemm() as shipped is a fourth box.

# %%
sweep_plot.class_boxes(frame, learned, check)
plt.show()

# %% [markdown]
# The same, as numbers: per class, median and minimum % of torch and the worst shape.

# %%
table = sweep_plot.class_table(frame, learned, check)
display(table)
print("Source:", sweep_plot.source_line(frame), *(["and", sweep_plot.source_line(check, sweep_plot.CHECK_SOURCE)]
                                                   if check is not None else []))

# %% [markdown]
# The skinny class in detail (gpu timing, the kernel's own time): % of torch against M, one line per N and K.

# %%
sweep_plot.skinny_panel(frame, learned, timing="gpu")
plt.show()

# %% [markdown]
# ## 6. Where the time goes at small shapes
#
# A synchronised call pays every layer of Python above its launch in full. At 1024³, each layer of one `gemm(a, b)`
# call timed as the seeds time a call (three input sets in turn, 400 calls each):
#
# | what is called | µs per call | data (H200) |
# | --- | ---: | --- |
# | `torch.matmul(a, b)` | 22.7 | `probes/gemm_latency_layers_7158d30.csv` |
# | `gemm_kernels.gemm(a, b)`: dispatch, checks, rule, output, launch | 28.5 | same file |
# | `hopper_host.gemm(a, b)`: without the dispatch | 23.6 | same file |
# | the same with `out=` given: no output to allocate | 20.4 | same file |
# | the launch cache alone: no checks, no rule | 14.1 | same file |
# | its CUDA graph launched bare | 10.7 | same file |
# | the same kernel launched directly (`cuLaunchKernelEx`) | 13.6 | same file |
# | two events with nothing between them | 7.3 | same file |
#
# So the graph is the cheapest launch, and most of what lay above it was Python: the dispatch built `a.device`
# four times, and the operands were checked in full at every call. Now a pair of shapes and dtypes is checked once
# and then only for what a new tensor can change (its layout, its start, its device), the rule's call is found by
# the sizes alone, and the output is `empty_like` of an expanded element (before and after, new / old per call:
# `probes/gemm_host_signatures_43e1344.csv`, `probes/gemm_out_alloc_c107f57.csv`).
#
# Below, from the sweep: microseconds per call in the three timings, ours (the fastest and the slowest candidate on
# the GPU, and the rule's choice) against torch's, at a small square and at a skinny decode-like shape. "host gap" is
# back to back minus GPU time: the host's share.

# %%
split = sweep_plot.time_split(frame, [(1024, 1024, 1024), (16, 8192, 4096)], learned)
display(split)
skinny = split.loc["16x8192x4096"]
b_mib = 8192 * 4096 * 2 / 2**20
rate = {who: b_mib * 2**20 / (r["gpu µs"] * 1e-6) / 1e12 for who, r in skinny.iterrows()}
for who, tbps in rate.items():
    print(f"16x8192x4096, {who}: B read at {tbps:.2f} TB/s ({100 * tbps / rate['torch.matmul']:.0f} % of cuBLAS's)")

# %% [markdown]
# ## 7. Short M: load only the rows of A there are
#
# At M = 16 a 64-row tile's A box is 64 × 64 bf16 = 8 KiB per K-block, of which 2 KiB are rows of A and 6 KiB are
# TMA's zero fill for rows past M; B's box beside it (64 × 64 for the 64x64 tile) is the traffic that matters. Yet
# in the sweep the same candidate took 1.1-1.45x as long at M = 16 as at M = 64, where B's traffic is the same: the
# zero fill is not free, and where one CTA per SM must stream B as fast as it can, it shows. The change: where M is
# shorter than a tile (and the CTAs are not paired), A's box has the power of two of rows that covers M (at least 8,
# one 128-byte swizzle atom), written at the top of each stage's A tile; the ring's byte count shrinks with it. The
# WGMMAs still multiply all 64 rows: the rows below the box hold whatever an earlier stage left there, and the
# output rows they make are past M and never stored (a row of C depends on its own row of A alone; a GPU test
# fills those rows with NaN and inf first). The code that changed:

# %%
display(stepper.excerpt(hopper_options, "def short_a_rows(M"))
display(stepper.excerpt(hopper, "a_rows = cfg.a_box_rows", "num_multicast=cfg.cluster_n)"))
display(stepper.excerpt(hopper, "a_rows = self.cfg.a_box_rows", "sA_box ="))

# %% [markdown]
# Measured new box against old, the same candidate, torch.matmul in the same turns, M ∈ {8, 16, 32} at seven (N, K):

# %%
BOX_FILE = ROOT / "data/measured/h200/probes/gemm_short_a_box_53c0788.csv"
box = pd.read_csv(BOX_FILE)
b2b = box[box.timing == "kernel"]
for name, r in b2b.groupby("candidate").ratio:
    print(f"{name:26s} new / old box, back to back: geomean {np.exp(np.log(r).mean()):.3f} "
          f"(range {r.min():.3f}-{r.max():.3f})")
one = b2b[b2b.candidate == "64x64 uniform cluster1"].sort_values(["M", "N", "K"])
plots.dumbbell([f"{m}×{n}×{k}" for m, n, k in zip(one.M, one.N, one.K)],
               {"whole 64-row box": one.old_us, "short box": one.new_us, "torch.matmul": one.torch_us},
               title="64x64 uniform cluster1 at M ≤ 32, back to back", xlabel="µs per call (log scale)",
               source=f"H200, {BOX_FILE.relative_to(ROOT)}, commit {box.commit.iloc[0]}")
plt.show()

# %% [markdown]
# The uniform candidates, which stream B at one item per SM, gain most (a quarter of their time for the 64x64
# tile); the stream-K one, whose CTAs split K and wait on each other's partial sums, hardly moves. With the short box
# the best of the three is level with cuBLAS at these shapes (from 0.93x to 1.08x its time), where it took 1.19x
# before. The sweep's skinny class above was measured with it.

# %% [markdown]
# ## Exercise
#
# `gemm(a, b)` on 24 × 11008 × 4096, a shape the sweep did not measure: which measured shapes does the rule average
# over, and which configuration does it pick? Work it out from `rule.features` and `learned.scores` (not from
# `rule.choose`), then check (replace the `None`).

# %%
print(rule_exercises.question())
answer = None      # e.g. ("64 uniform cluster1", {(16, 4096, 4096), (64, 4096, 4096), (16, 8192, 4096)})
print(rule_exercises.check(answer) if answer is not None else "set your answer and run this cell")

# %%
display(HTML("<details><summary>Solution (click to open)</summary><pre>"
             f"{rule_exercises.solution()}</pre></details>"))

# %% [markdown]
# ## Take-aways
#
# The goal of issue 18, per class and timing, for the rule (leave-one-out) and for the per-shape best, computed
# from the table above:

# %%
for who in (sweep_plot.CONTENDERS["rule"], sweep_plot.CONTENDERS["oracle"]):
    v = sweep_plot.goal_verdict(table, who)
    met = v[v["median >= goal"] & v["none below floor"]]
    print(f"{who}: goal met in {len(met)} of {len(v)} (class, timing) pairs")
    for r in v.to_dict("records"):
        print(f"  {r['class']:>9} {r['timing']:>7}: median {r['median %']:5.1f} % (goal {sweep_plot.GOAL_PCT:g}), "
              f"min {r['min %']:5.1f} % (floor {sweep_plot.FLOOR_PCT:g})")
gain = table.xs(sweep_plot.CONTENDERS["rule"], level="contender")["kernel median %"] - \
    table.xs(sweep_plot.CONTENDERS["default"], level="contender")["kernel median %"]
print("rule minus fixed default, kernel median, points of % of torch:", gain.round(1).to_dict())
best = sweep_plot.goal_verdict(table, sweep_plot.CONTENDERS["oracle"])
print("classes where even the per-shape best misses the median goal (kernel timing):",
      list(best[(best.timing == "kernel") & ~best["median >= goal"]]["class"]))

# %% [markdown]
# * **A per-shape choice pays where one default was wrong**: where the default's wide tiles leave most SMs idle
#   (few waves, skinny, K-heavy), the rule's gain over the fixed default is largest (the "rule minus fixed default"
#   line above). Where the default already suited the shape it mostly keeps it, and where a shape's nearest measured
#   neighbours are unlike it (a negative gain above), it can pick worse than the default.
# * **The oracle bounds any rule**: in the classes where even the per-shape best misses the goal (the last line
#   above), no rule over these candidates can reach it. There the gap is in the kernels, not in the choice.
# * **Small shapes are host-bound**: back to back, every candidate costs the same microseconds per call, more than
#   torch's host path, while the GPU time differs (section 6). A faster launch path, not a tile, closes that gap.
# * **Skinny problems are a DRAM-rate problem**: at M = 16 the work is reading B once. Even our fastest tile for it,
#   64 rows with one consumer warpgroup, reads B slower than cuBLAS's kernel does (section 6 prints the rates): what
#   remains is how fast each SM pulls B (more loads in flight per SM, or K split over more CTAs with a reduction of
#   their own), not the choice among these configurations.

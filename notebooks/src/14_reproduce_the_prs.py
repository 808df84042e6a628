# %% [markdown]
# # 14 · Reproducing the seed PRs' tables and figures
#
# Three documents started this project (`../shared/seeds/`, transcribed into `data/pr/`):
#
# | seed | what it is | its numbers here |
# | --- | --- | --- |
# | 000 (001: the same PR before its follow-up) | flashlib PR #22: the ILP2 argmin and register-staged norms in a **Blackwell k-means assignment** kernel | `data/pr/kmeans_pr22_main.csv` (% over main), `data/pr/kmeans_pr22_nightly.csv` (ms, nightly vs PR) |
# | 004 | cuda-oxide `gemm_sol_final`: a 7-stage ring once the epilogue buffer is gone, and wave-tail balancing in a **Blackwell GEMM** | `data/pr/gemm_sol_final.csv` (three cubes against cuBLASLt) |
#
# **After this notebook you will know**
#
# * how each table and figure of the seeds comes back from `data/pr/` (`kmeans_kernels.seeds`, `gemm_kernels.seeds`);
# * why a summary number recomputed from a rounded table need not give the stated digits back, and how to check
#   that it is still *consistent* with the table (`workbook.pr.Headline`);
# * what the same steps did on our H200, measured by the seeds' method, beside each seed figure.
#
# The PRs measured on a **B200**; we have an H200 only. The two are never mixed in one bar, only placed side by
# side, and every figure says which machine and file its numbers come from. Without a GPU this notebook runs
# entirely from the recorded files (`data/measured/h200/`); nothing here is timed live.

# %%
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from gemm_kernels import blackwell_options, configs, stages
from gemm_kernels import seeds as gemm_seeds
from kmeans_kernels import seeds as kmeans_seeds
from workbook import explore, gpus, plots, records, timing

print(gpus.describe())
KMEANS_CSV, GEMM_CSV = "data/measured/h200/kmeans_assign.csv", "data/measured/h200/gemm.csv"
ours_kmeans, ours_gemm = records.read("h200", "kmeans_assign"), records.read("h200", "gemm")
for path, df in ((KMEANS_CSV, ours_kmeans), (GEMM_CSV, ours_gemm)):
    print(f"{path}: {len(df)} rows" + (f" from {df['date'].nunique()} runs" if len(df) else
                                      " (none yet: an H200 writes them with the package's bench)"))

# %% [markdown]
# ## 1. Seed 000's main table: PR #22 against main, B200
#
# The paths: `ws` is the warp-specialized kernel with a serial argmin scan, `ilp2` two independent argmin chains
# (notebook 05), `norm_broadcast` the centroid norms staged in registers and broadcast by warp shuffle
# (notebook 06), `x_resident` a kernel that keeps the point tile resident for large N.
#
# **Checking a summary.** The PR states a geometric-mean improvement. A geometric mean of speedups is
# `(∏ (1 + pᵢ/100))^(1/n) − 1`, not the plain mean of the pᵢ. The table prints each pᵢ to 0.1 %, so the stated
# number is *consistent* with it if some choice of the unrounded pᵢ, each within ±0.05 of its printed value,
# gives it; `Headline` computes that range and says which case holds.

# %%
main = kmeans_seeds.main_table()
display(main.drop(columns="source"))
print(kmeans_seeds.main_geomean_improvement())

# %% [markdown]
# The seed's headline figure (left), and the same step on our H200 (right): for each seed shape, the step the PR
# took there (`ilp2` at D = 64 and 256, `norm_broadcast` at D = 128) against our `serial` scan, from the newest
# benchmark run that timed all three steps on all 13 shapes (`kmeans_seeds.ours_step`: one process, the same
# inputs, as the method asks).

# %%
step = kmeans_seeds.ours_step(ours_kmeans)
fig, axes = plt.subplots(1, 2, figsize=(16, 4.6), layout="constrained", sharey=True)
plots.speedup_bars(kmeans_seeds.shape_labels(main, sep="\n"), main["improvement_pct"],
                   geomean_pct=kmeans_seeds.main_geomean_improvement().stated, ax=axes[0],
                   title="flashlib PR #22 vs main, B200 (the PR author's)", ylabel="improvement (%)",
                   source=f"{kmeans_seeds.MAIN_CSV}, seed {kmeans_seeds.SEED_KMEANS}")
if step.empty:
    axes[1].text(0.5, 0.5, f"no run in {KMEANS_CSV} timed serial, ilp2 and norm_broadcast on all 13 shapes",
                 ha="center", transform=axes[1].transAxes)
else:
    plots.speedup_bars(kmeans_seeds.shape_labels(step, sep="\n"), step["improvement_pct"], ax=axes[1],
                       title="ours: the PR's step vs our serial scan, H200", ylabel="improvement (%)",
                       source=f"{KMEANS_CSV}, run of {step['date'].iloc[0]} at commit {step['commit'].iloc[0]}")
    display(step.drop(columns=["commit", "date"]).round(4))

# %%
if not step.empty:
    for name, part in step.groupby("step", sort=False):
        print(f"{name} vs serial on our H200, the {len(part)} shapes where the PR took {name}: geometric mean "
              f"{timing.geomean_speedup_pct(part['improvement_pct']):+.2f}% "
              f"(from {part['improvement_pct'].min():+.1f}% to {part['improvement_pct'].max():+.1f}%)")
    print(f"Source: {KMEANS_CSV}, run of {step['date'].iloc[0]} at {step['commit'].iloc[0]}")

# %% [markdown]
# ## 2. Seed 000's nightly comparison: per-shape latency, B200
#
# The follow-up comment timed the PR against the nightly branch in milliseconds. Its table, and every summary
# number it states recomputed from that table; the per-shape percentages are checked against the latencies too.

# %%
nightly = kmeans_seeds.nightly_table()
display(nightly.drop(columns="source"))
for h in kmeans_seeds.headlines()[1:]:
    print(h)
print(kmeans_seeds.nightly_per_shape_discrepancy().explanation)

# %% [markdown]
# The same shapes as dumbbells, one row per shape, on **one shared time axis** (logarithmic: the shapes span a
# factor of about 40 in time, torch's unfused matmul + argmin another factor of ten): left the PR author's B200,
# right our H200 (`kmeans_seeds.ours_latencies`: one run, the same one for every shape).

# %%
labels = kmeans_seeds.shape_labels(nightly)
series, run = kmeans_seeds.ours_latencies(ours_kmeans)
fig, axes = plt.subplots(1, 2, figsize=(16, 5.4), layout="constrained", sharex=True, sharey=True)
speedup = kmeans_seeds.nightly_geomean_speedup()
plots.dumbbell(labels, {"nightly": nightly["nightly_ms"], "PR #22": nightly["pr_ms"]}, ax=axes[0],
               title=f"B200, the PR author's: PR #22 {speedup.stated:.2f}% faster than nightly by geomean",
               source=f"{kmeans_seeds.NIGHTLY_CSV}, seed {kmeans_seeds.SEED_KMEANS}")
if series:
    plots.dumbbell(labels, series, ax=axes[1], title="ours on H200, the same 13 shapes",
                   source=f"{KMEANS_CSV} ({explore.provenance_text(run)})")
else:
    axes[1].set_title(f"no run in {KMEANS_CSV} timed serial, both steps and torch on all 13 shapes")

# %%
if series:
    mine = pd.DataFrame(series, index=labels)
    print("geometric-mean latency over the 13 shapes:")
    for name, col in [("B200 nightly (theirs)", nightly["nightly_ms"]), ("B200 PR #22 (theirs)", nightly["pr_ms"]),
                      *[(f"H200 {k}", mine[k]) for k in mine]]:
        print(f"  {name:<30} {timing.geomean(col.dropna()):.4f} ms")
    print(f"Sources: {kmeans_seeds.NIGHTLY_CSV}; {KMEANS_CSV} ({explore.provenance_text(run)})")

# %% [markdown]
# ## 3. Seed 004: the GEMM panel, B200
#
# Seed 004 prints TFLOP/s and microseconds side by side. Each TFLOP/s is `2·M·N·K / time`, so the two columns
# must describe the same run within their rounding: recomputed here, with the ratio to cuBLASLt top-8.

# %%
gemm = gemm_seeds.gemm_per_size()
display(gemm[["size", "before_tflops", "after_tflops", "cublaslt_top8_tflops", "cublaslt_exhaustive_tflops",
              "vs_top8_pct", "vs_top8_pct_recomputed", "after_tflops_from_us", "after_consistent"]])
for line in gemm_seeds.gemm_inconsistencies() or ["every TFLOP/s entry agrees with its time within rounding"]:
    print(line)

# %% [markdown]
# Seed 004's figure (left), and ours (right): every configuration of our Hopper GEMM that the benchmark times
# (`gemm_kernels.configs.HOPPER`: the 4-stage ring with a staged epilogue, the register epilogue, the deeper
# ring it allows, the balanced schedule, CTA pairs, the deferred epilogue) beside `torch.matmul` (cuBLAS), from
# one run that timed them all on the three cubes; each bar its own colour. The H200's dense bf16 peak is well
# under half the B200's: compare the shapes of the two panels, not their heights.

# %%
seed_bars = pd.DataFrame({"before (4 stages, staged epilogue)": gemm["before_tflops"],
                          "after (7 stages, balanced)": gemm["after_tflops"],
                          "cuBLASLt top-8": gemm["cublaslt_top8_tflops"],
                          "cuBLASLt exhaustive (offline search)": gemm["cublaslt_exhaustive_tflops"]}) / 1000
seed_bars.index = [f"{s}\u00b3" for s in gemm["size"]]
cubes = gemm_seeds.ours_at_cubes(ours_gemm, configs.HOPPER)
fig, axes = plt.subplots(1, 2, figsize=(17, 5.2), layout="constrained", gridspec_kw={"width_ratios": [1, 1.8]})
plots.grouped_bars(seed_bars, ax=axes[0], fmt="%.3f", ylabel="PFLOP/s (bf16)", xlabel="M = N = K", legend="inside",
                   title="cuda-oxide gemm_sol_final on B200 (the PR author's)",
                   source=f"{gemm_seeds.GEMM_CSV}, seed {gemm_seeds.SEED_GEMM}")
if cubes.empty:
    axes[1].set_title(f"no run in {GEMM_CSV} timed every configuration on the three cubes")
else:
    plots.grouped_bars(cubes.set_axis([f"{m}\u00b3" for m in cubes.index]), ax=axes[1], ylabel="TFLOP/s (bf16)",
                       xlabel="M = N = K", title="ours on H200: each configuration, and torch.matmul (cuBLAS)",
                       reference=(gpus.H200.bf16_dense_tflops, "H200 dense bf16 peak (datasheet)"),
                       source=f"{GEMM_CSV} ({explore.provenance_text(cubes.attrs['run'])})")

# %%
if not cubes.empty:
    best = cubes.drop(columns="torch.matmul").idxmax(axis=1)
    for m, name in best.items():
        print(f"{m}\u00b3: fastest of ours {name!r} at {cubes.loc[m, name]:.0f} TFLOP/s = "
              f"{cubes.loc[m, name] / cubes.loc[m, 'torch.matmul']:.1%} of torch.matmul's {cubes.loc[m, 'torch.matmul']:.0f}")
    after = gemm.set_index("size")["vs_top8_pct"]
    print("seed 004's after vs cuBLASLt top-8 on B200: " + ", ".join(f"{s}\u00b3 {v:.2f}%" for s, v in after.items()))
    print(f"Sources: {GEMM_CSV} ({explore.provenance_text(cubes.attrs['run'])}); {gemm_seeds.GEMM_CSV}")

# %% [markdown]
# ## 4. Seed 004's wave-tail table and its shared-memory arithmetic
#
# Seed 004 explains its win with two text tables: uniform 256 x 256 tiles leave CTA pairs idle in the last wave
# on B200's 74 pairs, and the shared memory splits into more pipeline stages once the epilogue buffer is gone.
# Both are arithmetic, so both are recomputed: the waves with the B200 kernel's own work list
# (`blackwell_options.plan`: the planner with the seed's N256 / N224 / N192 widths), the stages with `gemm_kernels.stages`.

# %%
display(gemm_seeds.wave_table().style.hide(axis="index").format({"predicted gain (ours)": "{:+.1%}"}))
for epilogue in ("staged", "register"):
    print(stages.stages((256, 256, 64), epilogue, "sm_100a").describe())

# %% [markdown]
# The first row as a picture: which CTA pair is busy when, with uniform tiles and with the balanced plan. Time is in
# units of one 256 x 256 tile; a 192-wide tile takes 0.75 of it.

# %%
fig, axes = plt.subplots(1, 2, figsize=(16, 4.4), layout="constrained", sharey=True)
plans = {schedule: blackwell_options.plan(4096, 4096, schedule=schedule) for schedule in ("uniform", "balanced")}
for ax, (schedule, plan) in zip(axes, plans.items()):
    plots.wave_occupancy(plan.gantt(), ax=ax, slot_label="CTA pair", title=f"4096\u00b3 on B200, {schedule} tiles",
                         source="gemm_kernels.blackwell_options.plan for B200's 74 CTA pairs "
                                "(a model, not a measurement)")
axes[0].set_ylim(max(p.makespan for p in plans.values()), 0)      # one time axis for both

# %% [markdown]
# ## 5. Exercise: a geometric mean
#
# Recompute the main table's geometric-mean improvement (in percent) from `main["improvement_pct"]`, without
# `kmeans_seeds.main_geomean_improvement` or `workbook.timing`. The checker says whether it matches, and if not,
# which slip it looks like.

# %%
answer = None   # your number, e.g. computed with numpy from main["improvement_pct"]
print(kmeans_seeds.check_geomean(answer))

# %% [markdown]
# <details><summary>Solution (click to open)</summary>
#
# ```python
# import numpy as np
# ratios = 1 + main["improvement_pct"] / 100
# answer = (np.exp(np.log(ratios).mean()) - 1) * 100
# ```
#
# The plain mean of the percentages is a different statistic; it is larger, because a mean of ratios exceeds
# their geometric mean whenever they differ.
# </details>

# %% [markdown]
# ## Take-away
#
# * Every table and figure of the three seeds comes back from `data/pr/`, and every summary number they state is
#   consistent with their own rounded tables; where the recomputed digits differ (the nightly speedup) it is by
#   less than the tables' rounding allows, and section 2 prints by how much.
# * One thing the seed tables do not settle: seed 004's cuBLASLt top-8 TFLOP/s and microseconds disagree by more
#   than their rounding at every size (section 3), so those two columns were not summarised from the same samples.
# * The same step need not pay on another GPU. Section 1 prints, per step, what it did on our H200 against our
#   serial scan; section 3 prints how far our fastest GEMM configuration is from cuBLAS at each cube. Those are
#   our numbers on our machine, from the runs named under each figure, not a reproduction of the B200 numbers:
#   for that, `python -m kmeans_kernels.bench --gpu b200` and `python -m gemm_kernels.bench --gpu b200` on a B200.
#
# | figure / table | numbers | measured on |
# | --- | --- | --- |
# | 1, main table and bars | `data/pr/kmeans_pr22_main.csv` | the PR author's B200 (seed 000) |
# | 1 and 2, ours | `data/measured/h200/kmeans_assign.csv` (the run named in each caption) | our H200 |
# | 2, nightly dumbbells | `data/pr/kmeans_pr22_nightly.csv` | the PR author's B200 (seed 000) |
# | 3, GEMM panel | `data/pr/gemm_sol_final.csv` | the PR author's B200 (seed 004) |
# | 3, ours | `data/measured/h200/gemm.csv` (the run named in the caption) | our H200 |
# | 4, waves and stages | computed here (`gemm_kernels.blackwell_options.plan`, `gemm_kernels.stages`) | nothing: arithmetic |

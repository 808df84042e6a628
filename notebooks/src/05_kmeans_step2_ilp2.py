# %% [markdown]
# # 05 · k-means step 2: ILP2, two compare-select chains per row instead of one
#
# Step 1 scans each row with one chain: every compare waits for the select before it. The first change of the seed PR
# (flashlib #22, on a B200) splits that chain in two, over the even and the odd columns, and merges the two winners once
# at the very end: the same work with half the dependency depth, so the scheduler can hide each compare-select's latency
# behind the other chain. `kmeans_kernels/steps/step2_ilp2.py` is step 1 with that change and nothing else.
#
# **Objectives.** After this notebook you can
#
# * read the change as a diff of two files, and say why the answer (ties, NaN) cannot change;
# * measure "two independent chains" in the SASS (the chain depth, at an unchanged instruction count);
# * read the H200's verdict on it, with its 95 % interval, and explain it with the WGMMA layout, the issue budget of a
#   tile's scan and the profiler's stall reasons.

# %%
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from kmeans_kernels import sass_checks
from kmeans_kernels.steps import anatomy, evidence, exercises, results, step1_serial, step2_ilp2, trial, try_step
from workbook import ROOT, gpus, plots, records, stepper, timing

run, NOTE = results.latest_run()
print(gpus.describe())
print(NOTE)

# %% [markdown]
# ## 1. The idea and its arithmetic: latency, not work
#
# A thread scans 32 columns per row and tile. Serial: one chain of 32 compare-selects per row, each link an `FSETP`
# then the `FSEL` the next `FSETP` reads, 64 dependent instructions. Two chains over the even and odd columns: 32 per
# chain, the same 64 scores × (compare + 2 selects) of work, plus one `(score, index)` merge per row after the last
# tile (not per tile). If the scan waits on latency, that halves its time; if it waits on issue slots, it changes
# nothing.
#
# ## 2. The code that changed
#
# The diff from step 1 to step 2 (the module docstrings left out; they are the prose of this notebook):

# %%
stepper.diff(step1_serial, step2_ilp2, module_docstring=False)

# %% [markdown]
# **Why the answer does not change.** Each chain is itself a serial scan in increasing column order: it keeps the
# lowest index among its own equal scores and never a NaN. Tied columns in different chains (an even and an odd one)
# meet in `merge_chains`, which compares `(score, index)` pairs, a total order: the lower index wins, whichever chain
# holds it. The check in section 4 tests exactly that case (centroid 2 and its copy in column 3, the other chain).
#
# **Exercise 1 (predict).** How deep is the longest compare-select chain per tile in step 2? And how many independent
# chains did a thread of step 1 already have (look at section 3 of notebook 04)?

# %%
my_depth, my_chains = None, None   # your predictions
for checker, answer in ((exercises.ilp2_depth, my_depth), (exercises.independent_chains, my_chains)):
    print(checker(answer) if answer is not None else f"{checker.__name__}: set your prediction and re-run.")

# %% [markdown]
# <details><summary>Solution</summary>
#
# 32 (each chain scans 16 columns of a row: `exercises.ilp2_depth(32)`), and 2: one per row, and a thread holds rows
# `r0` and `r0 + 8` (`exercises.independent_chains(2)`). ILP2 makes that 4.
# </details>
#
# ## 3. The evidence in the SASS
#
# Both steps compiled for `sm_90a`. The table is `kmeans_kernels.steps.anatomy` per tile and thread; under it, the
# opcode counts of one tile's scan that changed (`workbook.stepper.sass_delta` of the two scan blocks).

# %%
arts = {"step1_serial": trial.compiled(step1_serial), "step2_ilp2": trial.compiled(step2_ilp2)}
display(anatomy.table(arts))
blocks = {n: sass_checks.scan_block(a.sass, after=None) for n, a in arts.items()}
display(stepper.sass_delta(blocks["step1_serial"], blocks["step2_ilp2"], changed_only=True))
chains = evidence.chains({"step1_serial": step1_serial, "step2_ilp2": step2_ilp2})
display(chains)

# %%
fig, ax = plt.subplots(figsize=(7, 2.8), layout="constrained")
depth = chains.loc["chain depth per tile"]
bars = ax.barh(list(depth.index), depth.values, color=["#9ecae1", "#fdae6b"])
ax.bar_label(bars, fmt="%.3g", padding=3)
ax.invert_yaxis()
ax.set_xlabel("longest compare-select chain per tile (SASS, sm_90a, D = 128)")
ax.set_title("The same compare-selects per tile, half the critical path", fontsize="medium")
ax.spines[["top", "right"]].set_visible(False)
plots.caption(ax, "compiled here; kmeans_kernels.sass_checks.compare_select_depth on the scan block")
plt.show()

# %% [markdown]
# ## 4. Check it, time it

# %%
try_step(step2_ilp2)

# %% [markdown]
# ## 5. The number: step 2 / step 1 on the H200
#
# Both timings from the step benchmark (interleaved rounds: each round times every contender both ways within
# milliseconds, so the clock's drift cancels in each round's ratio; the interval is a bootstrap over the rounds). One
# point per shape; a ratio whose interval straddles 1 is noise.

# %%
if run.empty:
    print(NOTE)
else:
    for t in timing.TIMINGS[::-1]:
        display(results.table_3sig(results.ratios(run, "ours/step2_ilp2", t)).set_caption(f"{t} time"))
    fig = results.plot_ratios(run, ["ours/step2_ilp2"], NOTE)
    plt.show()

# %%
if not run.empty:
    for t in timing.TIMINGS[::-1]:
        r = results.ratios(run, "ours/step2_ilp2", t)
        g = results.geomean_ci(r.ratio, r.lo, r.hi)
        verdict = "faster" if g[2] < 1 else "slower" if g[1] > 1 else "no different (noise)"
        print(f"{t}: step 2 / step 1 = {g[0]:.3g} [{g[1]:.3g}, {g[2]:.3g}] geomean over {len(r)} shapes: {verdict}; "
              f"per shape {dict(r.verdict.value_counts())}")

# %% [markdown]
# The production kernels (`kmeans_kernels.hopper`, two CTAs per SM) have the same two scans; the assignment
# benchmark has timed them side by side on the H200 since the first run (`data/measured/h200/kmeans_assign.csv`):

# %%
assign_runs = records.read("h200", "kmeans_assign")
both = records.last_run(assign_runs, [("ours", "serial"), ("ours", "ilp2")], min_shapes=13)
if both.empty:
    print("no run of kmeans_assign.csv timed both serial and ilp2 on the 13 seed shapes")
else:
    per_shape = records.versus(both, "ilp2", "serial", ["N", "D", "K"])
    print(f"production ilp2 vs serial, {len(per_shape)} shapes, run of {both.date.iloc[0]} (commit "
          f"{both.commit.iloc[0]}): geomean serial time / ilp2 time = "
          f"{timing.geomean(per_shape['serial ms'] / per_shape['ilp2 ms']):.3g} (the seeds' synchronised median, "
          "no interval: that benchmark predates the rounds)")

# %% [markdown]
# ## 6. Why ILP2 does not pay on Hopper, where it does not
#
# Three pieces of evidence, two of them computed here:
#
# 1. **The layout.** Each thread already holds two rows (section 3 of notebook 04), so step 1 already has two
#    independent chains per thread, and with 8 consumer warps on an SM's 4 schedulers each scheduler picks among
#    2 warps × 2 chains. The seed's B200 kernel gives a thread one row of TMEM: there ILP2 goes from 1 chain to 2.
# 2. **The issue budget.** A tile's scan is a few hundred instructions per thread, issued one per cycle per
#    scheduler for 2 warps; against the WGMMA time of the same tile (the floor's tensor rate per SM):

# %%
display(pd.DataFrame({n: evidence.issue_budget(a, 128) for n, a in arts.items()}).style.format("{:.3g}"))

# %% [markdown]
#    The critical path of a chain is its depth times the latency of a dependent compare-select pair (a few cycles),
#    far below the issue cycles: the scan is bound by how many instructions it issues, and ILP2 issues as many.
# 3. **The profiler.** `python tools/ncu_kmeans_steps.py` on the H200 profiles steps 1-3 at one shape for stall
#    reasons (warps stalled per issued instruction) and issue-slot use:

# %%
NCU = records.MEASURED / "h200" / "kmeans_steps_ncu.txt"
if NCU.exists():
    print(NCU.read_text().splitlines()[0].lstrip("# "))
    display(evidence.stall_table(evidence.read_ncu(NCU)).style.format("{:.3g}"))
else:
    print(f"not recorded yet: {NCU.relative_to(ROOT)} is written by `python tools/ncu_kmeans_steps.py` on an H200")

# %% [markdown]
# How to read it: a latency-bound scan shows warps stalled on `short scoreboard` / `wait` (waiting for a result) with
# few eligible warps and issue slots idle; an issue-bound one shows busy issue slots and `not selected` / `math pipe
# throttle` stalls (a warp was ready but another issued). ILP2 can only help the first.
#
# ## 7. Exercise 2 (edit and run): merge the chains by score only
#
# In an editable copy of step 2, change `merge_chains` to take chain 1 when its score is strictly smaller, ignoring the
# index (`take = best_score[1, r] < best_score[0, r]`). Is the answer still right? Predict, then run `try_step` on the
# copy (on an H100/H200 the check answers; here it compiles and shows the SASS change).

# %%
path = stepper.copy_for_editing(step2_ilp2, ROOT / "build" / "my_steps")
print(f"your copy: {path.relative_to(ROOT)}; edit it, then run try_step(path)")

# %% [markdown]
# <details><summary>Solution</summary>
#
# Wrong on some ties. Chain 0 holds the first best column among the even `j`, chain 1 among the odd `j`, and the first
# of a tie can be in either: the check's "ties across chains" case puts centroid 3 in an odd column (chain 1 of lane 1)
# and copies of it at 10 and 130 (chain 0 of the same lane). Chain 1 keeps 3, chain 0 keeps 10, and a merge by score
# alone keeps chain 0's 10 where the reference says 3. The index in `beats` is what makes the merge right.
# </details>
#
# ## Take-aways

# %%
if run.empty:
    print(f"The H200 verdict on ILP2 appears here once the step benchmark has run ({NOTE}).")
else:
    r = results.ratios(run, "ours/step2_ilp2")
    g = results.geomean_ci(r.ratio, r.lo, r.hi)
    said = "did not pay" if g[1] <= 1 <= g[2] else ("paid" if g[2] < 1 else "cost time")
    print(f"On the H200 ILP2 {said}: step 2 / step 1 kernel time {g[0]:.3g} [{g[1]:.3g}, {g[2]:.3g}] (geomean, 95 %).")

# %% [markdown]
# * ILP2 keeps the work and halves the scan's dependency depth; the SASS shows both.
# * The answer cannot change: chains and lanes merge by `(score, index)`.
# * What it buys depends on what else the SM has to do. In these step kernels one CTA owns an SM, so its scan runs
#   while the tensor cores wait; four chains per thread instead of two let the schedulers issue the scan a little
#   faster (the ncu table above: more issue slots busy, more tensor-pipe activity, a shorter kernel), and the
#   ratio printed above is what that bought. The production kernel runs two CTAs per SM, and one CTA's WGMMAs run
#   while the other scans: the scan is already hidden there, and its `serial` and `ilp2` variants time the same
#   (`data/measured/h200/kmeans_assign.csv`). What pays on Hopper instead is fewer instructions per score (the next
#   notebook, `06_kmeans_step3_norm_broadcast`) and that overlap (step 4).

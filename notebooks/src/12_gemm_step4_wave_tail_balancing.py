# %% [markdown]
# # 12 · GEMM step 4: a persistent grid, and a last wave balanced with narrower tiles
#
# A GEMM's tiles run in *waves*: as many at once as the GPU has slots (here one CTA per SM). When the tile count is
# not a multiple of the slots, the last wave runs partly empty and the GPU waits for a few stragglers. Seed 004 fixes
# this on a B200 by re-cutting a few wide tiles into narrower ones so that the last wave is full. This notebook
# builds that as step 4, [`step4_persistent_wave_tail.py`](../gemm_kernels/steps/step4_persistent_wave_tail.py): a
# persistent grid walking a work list that `gemm_kernels.waves` plans.
#
# **After this notebook you will know**
#
# * the difference between **waves** (items ÷ slots: 3.88 means three full waves and a fourth 88 % full) and the
#   **makespan** (when the last slot finishes: 4 tile times for those 3.88 waves of work);
# * the **re-cutting rule**: *g* wide tiles become *g + 1* narrow ones, one item more and no work more;
# * how the planner derives seed 004's three B200 plans from the shape, 74 CTA pairs and the allowed widths alone;
# * what the step file changes, and what balancing measured on the H200, against its prediction;
# * where the four steps stand against `torch.matmul`, shape by shape (the closing figure).
#
# The plans are arithmetic and run anywhere; checks and timings need an H100/H200 (recorded rows otherwise).

# %%
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import HTML, display

from gemm_kernels import steps, waves
from gemm_kernels.steps import drawings, exercises, figures, findings
from gemm_kernels.steps import step3_more_stages as step3
from gemm_kernels.steps import step4_persistent_wave_tail as step4
from workbook import gpus, plots, stepper

pd.set_option("display.precision", 3)
print(gpus.describe())

# %% [markdown]
# ## 1. Waves, makespan and the tail
#
# With *T* equal tiles on *S* slots, dealt out in order (tile *i* on slot *i mod S*), the work is *T / S* tiles per
# slot, the **waves**; the busiest slot runs ⌈*T / S*⌉ tiles, and that is the **makespan** in tile times. The
# difference is the tail: slots that sit idle while the last wave finishes. On the H200, one 128 × 256 tile per SM:

# %%
uniform = step4.plan(4096, 4096, schedule="uniform", gpu=gpus.H200)
balanced = step4.plan(4096, 4096, gpu=gpus.H200)
print(uniform.describe())
print(balanced.describe())
drawings.wave_tail(uniform, balanced, last=2)
plt.show()

# %% [markdown]
# Uniform: 512 tiles on 132 SMs, 3.88 waves of work, but a makespan of 4 tile times, with 16 SMs idle through the
# fourth. Balanced: the fourth wave is full, of shorter tiles, and the makespan ends earlier.
#
# ## 2. The re-cutting rule
#
# Re-cut a group of *g* wide tiles (*g · W* columns of one tile row) into *g + 1* tiles of width *w = g · W / (g + 1)*:
# the same columns, so the same work, and one more item. *(−T) mod S* re-cuts make the item count a multiple of *S*.
# The narrow tiles go last, so the final waves run the shorter tiles. Which *g*? The planner simulates every width the
# kernel can run (step 4: steps of 16 columns, so 240, 224, 192, 128 for *W* = 256) and keeps the shortest makespan,
# or the uniform plan when none is shorter. The model has one assumption: **a tile's time is proportional to its
# width**, which is optimistic for narrow tiles (less reuse per loaded byte), so a predicted gain is an upper bound.
# For a shape with a poor last wave, 2048 × 6656:

# %%
rows = []
for narrow, p in waves.alternatives(2048, 6656, gpu=gpus.H200, tile_m=128, tile_ns=(256, 240, 224, 192, 128)).items():
    if p is None:
        rows.append(dict(plan=f"N{narrow}", items=None, makespan=None, note="too few whole groups in a tile row"))
        continue
    g = None if narrow is None else narrow // (256 - narrow)
    rows.append(dict(plan="uniform N256" if narrow is None else f"{p.groups} re-cuts of {g} x N256 -> {g + 1} x N{narrow}",
                     items=len(p.items), waves=p.waves, makespan=p.makespan, note=""))
display(pd.DataFrame(rows).astype({"items": "Int64"}))

# %% [markdown]
# Every candidate that fits makes the item count a multiple of 132 (four waves exactly); they differ in how much each
# SM's four tiles add up to. The shortest wins.
#
# ## 3. The planner against seed 004's table
#
# On the B200 the seed computes each 256 × 256 tile with a CTA pair (`cta_group::2`), so its 148 SMs give **74 slots**,
# and it allows widths 256, 224 and 192. Seed 004 states its three plans (transcribed in
# `gemm_kernels.steps.findings.SEED_004_BALANCING`); the planner derives them from the shape and those rules alone:

# %%
derived = findings.seed_vs_planner()
seed_cols = list(findings.SEED_004_BALANCING.columns)
agree = bool((derived[seed_cols] == findings.SEED_004_BALANCING).all(axis=None))
display(derived)
print("the planner reproduces seed 004's table exactly:", agree)
assert agree

# %% [markdown]
# At 4096³ the seed's "40 of 74 CTA pairs sit idle in wave 4" is the 3.46 waves; its re-cut of 40 triplets into
# N192 quads gives 296 = 4 × 74 items, and each pair runs 1 + 1 + 0.75 + 0.75 = 3.5 tile times instead of 4. At 8192³
# and 16384³ the tail is one wave in 14 and in 56, so the predicted gain is about a percent.
#
# ## 4. Where it should pay on the H200
#
# The H200 has 132 SMs and step 4 runs one 128-row tile per SM: **132 slots**, single CTAs (no pairs). Over square
# sizes and the linear layers of two public decoder models, the shapes where the planner predicts ≥ 5 %:

# %%
H200_STEP4 = dict(gpu="h200", tile_m=128, tile_ns=(256, *waves.narrow_widths(256, multiple_of=step4.WIDTH_STEP)))
pays = waves.candidates(**H200_STEP4)
display(pays[["shape", "tiles", "waves", "last_wave_fill", "narrow", "items", "makespan_uniform",
              "makespan_balanced", "gain"]])
print(f"{len(pays)} of {len(waves.sweep(**H200_STEP4))} swept shapes; the benchmark's poor-wave shape:")
poor = step4.plan(2560, 7168, schedule="uniform", gpu=gpus.H200), step4.plan(2560, 7168, gpu=gpus.H200)
drawings.wave_tail(*poor, last=2)
plt.show()

# %% [markdown]
# ## 5. The step file: what changed from step 3
#
# Three things, all host-visible in the diff below: the grid is `min(items, 132)` CTAs and each walks items
# *s, s + grid, …* (the static schedule the planner simulates); each item's corner comes from the work list
# `(m0, n0, width)`; and a narrow item runs a second, narrower WGMMA over the first *w* columns of the same B stage
# into the first registers of the same accumulator, and stores only its *w* columns. The ring keeps running across
# items, so the producer loads the next item while the consumers store this one. The tile goes back to 128 × 256
# (4 stages by step 3's rule): step 3's deeper ring on 128 × 128 did not beat it (notebook 11).

# %%
stepper.diff(step3, step4, module_docstring=False)

# %%
steps.try_step(4)

# %% [markdown]
# Two HGMMA shapes in one build (`64x256x16` and the narrow one), two K-loop copies each with its own two waits, and
# still no spills: the width branch is once per item, outside the WGMMA issue.
#
# ## 6. The H200 result
#
# The production Hopper kernel has been timed with the uniform and the balanced schedule of this very plan (one CTA
# per 128 × 256 item) in every benchmark run (`data/measured/h200/gemm.csv`). Measured gain (uniform's time /
# balanced's − 1) over the runs, beside the prediction. Earlier runs offered narrow widths in 64-column steps only, so
# both predictions are shown; where they differ, the runs mix the two plans.

# %%
gains = findings.schedule_gains()
display(gains.round(1))

# %%
fig, ax = plt.subplots(figsize=(6.8, 4.4), layout="constrained")
pred = gains["predicted % (widths 240, 224, 192, 128)"]
ax.errorbar(pred, gains["median %"], yerr=[gains["median %"] - gains["lowest %"], gains["highest %"] - gains["median %"]],
            fmt="o", capsize=3, color=plots.GAIN, label="measured: median and range over runs")
for m, n, k, x, y in zip(gains.M, gains.N, gains.K, pred, gains["median %"]):
    ax.annotate(f"{m}x{n}x{k}", (x, y), xytext=(5, 3), textcoords="offset points", fontsize="x-small")
top = max(pred.max(), gains["highest %"].max()) + 3
ax.plot([-top, top], [-top, top], color="0.4", ls="--", lw=0.8, label="measured = predicted")
ax.axhline(0, color="0.3", lw=0.6)
ax.set(xlim=(-2, pred.max() + 4), ylim=(gains["lowest %"].min() - 3, top), xlabel="predicted gain (%)",
       ylabel="measured gain (%)", title="Balanced vs uniform, 128 x 256 tiles, one CTA per SM")
ax.legend(fontsize="small", frameon=False, loc="upper left")
plots.caption(ax, f"{findings.relative(findings.H200 / 'gemm.csv')}, every run that timed both schedules")
plt.show()
label = [f"{m}x{n}x{k}" for m, n, k in zip(gains.M, gains.N, gains.K)]
straddle = (gains["lowest %"] < 0) & (gains["highest %"] > 0)
print("runs straddle zero at:", ", ".join(l for l, s in zip(label, straddle) if s) or "none")
print("median below the prediction at:", ", ".join(l for l, m, p in zip(label, gains["median %"], pred) if m < p))

# %% [markdown]
# Where the last wave is poor (the three K = 8192 shapes) the median gain is large and below the prediction, the
# model's upper bound; at the squares the prediction is a few percent, and where the runs straddle zero (the lines
# above) the tail is too small to see in one run. The step benchmark times step 4 itself against step 3 and
# `torch.matmul` (`gemm_steps.csv`):

# %%
table, note = steps.recorded_report(["step3_more_stages", "step4_persistent_wave_tail"])
print(note)
if table is not None:
    display(table[table.contender != "step3_more_stages"])

# %% [markdown]
# ## Exercise
#
# For 2048 × 6656 on the H200 (128 × 256 tiles, one per SM): (a) how many waves, and what makespan, for the uniform
# plan? (b) Which narrow width balances it best, and what is the makespan then? Use the rule, not the planner, then
# check (replace the `None`s).

# %%
print(exercises.question("waves"))
print(exercises.question("balance"))
waves_answer, balance_answer = None, None   # e.g. (3.0, 3.0) and (240, 3.5)
for name, answer in (("waves", waves_answer), ("balance", balance_answer)):
    print(name, exercises.check(name, answer) if answer is not None else "set your answer and run this cell")

# %%
display(HTML("<details><summary>Solutions (click to open)</summary><pre>"
             f"{exercises.solution('waves')}\n\n{exercises.solution('balance')}</pre></details>"))

# %% [markdown]
# ## 7. The progression: every step against cuBLAS
#
# Each step of notebooks 10-12 and the production default, as a share of `torch.matmul` (cuBLAS) at the four shapes
# of the step benchmark, kernel time back to back, with 95 % intervals from the interleaved rounds:

# %%
rows = steps.recorded(["step1_four_stages", "step2_register_epilogue", "step3_more_stages",
                       "step4_persistent_wave_tail", "production default"])
if rows.empty:
    print("data/measured/h200/gemm_steps.csv holds no run of all the steps yet: on an H200, "
          "`python -m gemm_kernels.steps.bench` records one; re-run this notebook afterwards.")
else:
    from workbook import explore
    figures.progression(rows, source=f"data/measured/h200/gemm_steps.csv ({explore.provenance_text(rows)})")
    plt.show()
    display(figures.progression_table(rows).round(1))

# %% [markdown]
# ## Take-aways
#
# * Waves are work per slot; the makespan is when the last slot finishes. A tiling's tail is the difference, and it
#   matters most with few waves and a nearly empty last one.
# * Re-cutting *g* wide tiles into *g + 1* narrow ones adds one item and no work; *(−T) mod S* re-cuts fill the last
#   wave, and simulating each width picks the best. From the shape, the slots and the widths alone, the planner
#   derives the seed's N192 at 4096³ and N224 at 8192³ and 16384³.
# * On the H200 the prediction is an upper bound: balancing pays where the last wave is poor, less than predicted,
#   and is lost in the run-to-run spread at the squares. Notebook 13 (an appendix) collects what else was measured
#   on the way: DRAM bytes and the clock, stream-K, the deferred epilogue, 240- versus 248-wide tails, and a fair
#   turn order for the benchmark.

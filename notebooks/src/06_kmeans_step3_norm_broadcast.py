# %% [markdown]
# # 06 · k-means step 3: norm broadcast, each half norm loaded once per warp and handed out by shuffle
#
# Every score needs its centroid's half norm `0.5·‖c_k‖²`. In steps 1 and 2 every thread fetches the half norm of each
# of its 32 columns, per tile, from global memory. The second change of the seed PR stages a tile's norms in
# registers with one coalesced load per warp and register, and hands each one to the threads that need it with a
# **warp shuffle**. `kmeans_kernels/steps/step3_norm_broadcast.py` is step 2 with that change and nothing else.
#
# **Objectives.** After this notebook you can
#
# * say who needs which norm in the WGMMA layout, and count the loads and shuffles of both ways;
# * read the change as a diff, and see the trade `LDG → SHFL` (and the guards that go with it) in the SASS;
# * read the H200's verdict with its interval, and connect it to the number of instructions a tile's scan issues.
#
# A difference from the seed, stated up front: the seed's B200 baseline staged the norms in *shared memory* (stores,
# then named barriers) and replaced that with shuffles. Our Hopper steps never had that buffer; they read the norms
# straight from global memory through L1. So the trade here is `LDG → SHFL`.

# %%
import matplotlib.patches as patches
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import display

from kmeans_kernels import sass_checks
from kmeans_kernels.steps import anatomy, evidence, exercises, results, step2_ilp2, step3_norm_broadcast, trial, try_step
from workbook import gpus, plots, stepper, timing

step3 = step3_norm_broadcast
run, NOTE = results.latest_run()
print(gpus.describe())
print(NOTE)

# %% [markdown]
# ## 1. The idea and its arithmetic: who needs which norm
#
# Lane `l` holds the columns `8g + 2(l % 4) + {0, 1}` of a 128-column tile: 32 columns, the same 32 for the 8 lanes with
# equal `l % 4`. So each norm is wanted by 8 lanes of every warp, and in step 2 a warp issues 32 load instructions per
# tile (1024 values) for 128 distinct ones, each with its own clamp and `+inf` select past `K`.
#
# Staged, lane `l` loads the columns `l, l + 32, l + 64, l + 96` into 4 registers (each load one 128-byte request for the
# warp, one guard each). A thread that needs column `col` reads register `col // 32` of lane `col % 32` with `shfl.sync`.
# Per thread and tile: 32 loads → 4 loads + 32 shuffles. The 128 half norms of one tile as a warp holds them, with the
# 32 that lane 5 needs outlined:

# %%
def draw_staging(ax, lane=5, block_n=128):
    wanted = {8 * g + 2 * (lane % 4) + h for g in range(block_n // 8) for h in (0, 1)}
    for slot in range(block_n // 32):
        for src in range(32):
            col = src + 32 * slot
            need = col in wanted
            ax.add_patch(patches.Rectangle((src, slot), 0.95, 0.9, facecolor="#fdae6b" if need else "#deebf7",
                                           edgecolor="#e6550d" if need else "none", linewidth=1.2))
            ax.text(src + 0.47, slot + 0.45, str(col), ha="center", va="center", fontsize=5.5)
    ax.set_xlim(-0.2, 32.2)
    ax.set_ylim(block_n // 32 + 0.1, -0.2)
    ax.set_xticks(np.arange(32) + 0.47, range(32), fontsize=6)
    ax.set_yticks(np.arange(block_n // 32) + 0.45, [f"register {t}" for t in range(block_n // 32)], fontsize=8)
    ax.set_xlabel("lane that loaded it (column % 32)")
    ax.set_title(f"A tile's {block_n} half norms in a warp's registers; orange: the 32 lane {lane} needs, each one "
                 "shuffle away", fontsize="medium")
    ax.spines[["top", "right", "left", "bottom"]].set_visible(False)


fig, ax = plt.subplots(figsize=(12, 2.6), layout="constrained")
draw_staging(ax)
plots.caption(ax, "schematic of stage_half_norms (step3_norm_broadcast.py) in the WGMMA accumulator layout")
plt.show()

# %% [markdown]
# ## 2. The code that changed

# %%
stepper.diff(step2_ilp2, step3, module_docstring=False)

# %% [markdown]
# Two details. The staged load keeps its guard (`if col < K`, +inf past `K`) but once per lane and register instead of
# once per column. And `shuffle_sync` is a full-warp operation: it works because every lane runs the same unrolled code
# with its own `col`; a lane-dependent branch around it would be a bug.
#
# **Exercise 1 (predict).** Per thread and tile, how many global loads and how many shuffles does step 3 issue for the
# half norms?

# %%
my_loads, my_shuffles = None, None   # your predictions
print(exercises.norm_traffic(my_loads, my_shuffles) if my_loads is not None else "Set both predictions and re-run.")

# %% [markdown]
# <details><summary>Solution</summary>
#
# 4 loads (128 norms over 32 lanes) and 32 shuffles (one per column the thread scores): `exercises.norm_traffic(4, 32)`.
# </details>
#
# ## 3. The evidence in the SASS
#
# Per tile and thread (`kmeans_kernels.steps.anatomy`), and the opcodes of one tile's scan that changed:

# %%
arts = {"step2_ilp2": trial.compiled(step2_ilp2), "step3_norm_broadcast": trial.compiled(step3)}
display(anatomy.table(arts))
blocks = {n: sass_checks.scan_block(a.sass, after=None) for n, a in arts.items()}
delta = stepper.sass_delta(blocks["step2_ilp2"], blocks["step3_norm_broadcast"], changed_only=True)
display(delta)

# %%
shown = [op for op in ("LDG", "SHFL", "ISETP", "FSEL", "VIMNMX", "FMUL") if op in delta.index]
fig, ax = plt.subplots(figsize=(8, 3), layout="constrained")
for i, (name, color) in enumerate(zip(("old", "new"), ("#fdae6b", "#74c476"))):
    bars = ax.bar(np.arange(len(shown)) + (i - 0.5) * 0.4, delta.loc[shown, name], 0.4, color=color,
                  label={"old": "step 2", "new": "step 3"}[name])
    ax.bar_label(bars, fmt="%g", fontsize="x-small", padding=1)
ax.set_xticks(range(len(shown)), shown)
ax.set_ylabel("in one tile's scan (per thread)")
ax.legend(frameon=False)
ax.spines[["top", "right"]].set_visible(False)
plots.caption(ax, "compiled here for sm_90a, D = 128; workbook.stepper.sass_delta of the two scan blocks")
plt.show()

# %% [markdown]
# ## 4. Check it, time it

# %%
try_step(step3)

# %% [markdown]
# ## 5. The number: step 3 / step 2 on the H200

# %%
if run.empty:
    print(NOTE)
else:
    for t in timing.TIMINGS[::-1]:
        display(results.table_3sig(results.ratios(run, "ours/step3_norm_broadcast", t)).set_caption(f"{t} time"))
    fig = results.plot_ratios(run, ["ours/step2_ilp2", "ours/step3_norm_broadcast"], NOTE)
    plt.show()

# %% [markdown]
# ## 6. Why: fewer instructions in a tile's scan
#
# The previous notebook's issue budget put the scan's bound in the instructions it issues. Step 3 removes the
# per-column loads, clamps and guards from it; the issue budget of a tile, before and after:

# %%
display(pd.DataFrame({n: evidence.issue_budget(a, 128) for n, a in arts.items()}).style.format("{:.3g}"))

# %% [markdown]
# The loads of step 2 also go through L1, the same SRAM that the WGMMAs read their shared-memory operands from;
# the shuffles do not touch it. The profiler's report of steps 1-3 (`tools/ncu_kmeans_steps.py`, shown in notebook
# 05 when recorded) holds both steps' issue-slot use.
#
# **Exercise 2 (predict).** Step 4's wide variant scans 256-wide tiles with the same broadcast. Per thread and tile,
# how many loads and shuffles for the norms?

# %%
wide_loads, wide_shuffles = None, None   # your predictions
print(exercises.norm_traffic(wide_loads, wide_shuffles, block_n=256) if wide_loads is not None else
      "Set both predictions and re-run.")

# %% [markdown]
# <details><summary>Solution</summary>
#
# 8 loads (256 norms over 32 lanes) and 64 shuffles (a thread scores 64 columns per row of a 256-wide tile):
# `exercises.norm_traffic(8, 64, block_n=256)`.
# </details>
#
# ## Take-aways

# %%
if run.empty:
    print(f"The H200 verdict on the norm broadcast appears here once the step benchmark has run ({NOTE}).")
else:
    r = results.ratios(run, "ours/step3_norm_broadcast")
    g = results.geomean_ci(r.ratio, r.lo, r.hi)
    said = "did not pay" if g[1] <= 1 <= g[2] else ("paid" if g[2] < 1 else "cost time")
    print(f"On the H200 the norm broadcast {said}: step 3 / step 2 kernel time {g[0]:.3g} [{g[1]:.3g}, {g[2]:.3g}] "
          f"(geomean, 95 %); faster at {int((r.verdict == 'faster').sum())} of {len(r)} shapes.")

# %% [markdown]
# * Each half norm is loaded once per warp (coalesced, one guard per lane and register) and reaches the 8 lanes that
#   need it by shuffle: per thread and tile, 32 loads become 4 loads and 32 shuffles, and most per-column guards go.
# * The SASS shows the trade, and the issue budget shows what it is worth: a tile's scan issues fewer instructions,
#   which is what bounds it on Hopper.
# * Steps 1-3 still leave the tensor cores idle while the CTA folds a tile. The next notebook,
#   `07_kmeans_step4_hopper_two_ctas_wide`, fills that gap, and maps the result onto the production kernel.

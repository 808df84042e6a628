# %% [markdown]
# # 04 · k-means step 1: a fused GEMM + argmin on Hopper, one compare-select chain per row
#
# Notebook 03 fixed the answer: for every point the centroid with the smallest score `0.5·‖c‖² − ⟨x, c⟩`, lowest
# index on ties, NaN and +inf never winning. This notebook reads the first kernel that computes it on an H100/H200,
# `kmeans_kernels/steps/step1_serial.py`: one complete file of about 280 lines, the baseline the next three steps
# change one idea at a time.
#
# **Objectives.** After this notebook you can
#
# * name the kernel's **warp roles** (a TMA producer warp, two WGMMA consumer warpgroups) and the **mbarrier ring**
#   between them, and find each in the file;
# * say which thread holds which score of a WGMMA tile, and why that shapes the argmin;
# * predict the **compare-select chain** of a tile and check your number in the SASS;
# * run the kernel's check against the reference (live on an H100/H200) and edit a copy of the file to see the
#   check catch a broken tie rule.
#
# Everything runs on a CPU: the kernel is compiled for `sm_90a` here and its SASS read; it runs where a Hopper GPU is.

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import display

from kmeans_kernels.steps import anatomy, evidence, exercises, results, step1_serial, trial, try_step
from kmeans_kernels import seeds as pr
from workbook import ROOT, gpus, plots, sass, stepper

step1 = step1_serial
run, NOTE = results.latest_run()
print(gpus.describe())
print(NOTE)

# %% [markdown]
# ## 1. The idea and its arithmetic
#
# Nothing of size `N × K` is ever written: a CTA owns `BLOCK_M = 128` points, streams **every** centroid past them,
# keeps one running winner per point in registers and stores 4 bytes per point. In each CTA (288 threads):
#
# * **warp 8, the producer**, loads the point tile `x[128, D]` into shared memory once with TMA, then streams centroid
#   tiles `c[128, 64]` (128 centroids × a 64-wide slice of `D`) through a **ring** of shared-memory slots. Each slot has
#   two mbarriers: *full* (the TMA bytes landed) and *empty* (both consumer warpgroups are done with it);
# * **warps 0-7, two consumer warpgroups** of 64 points each, issue `WGMMA 64 × 128 × 16` instructions over the slots
#   of a centroid tile into a 64 × 128 fp32 register accumulator, give the slots back, and fold the tile into their
#   points' winners.
#
# The sizes, computed from the file's constants: the ring takes whatever shared memory the resident point tile leaves.

# %%
sizes = pd.DataFrame([{"D": D, "point tile (KiB)": step1.BLOCK_M * D * 2 / 1024,
                       "ring slot (KiB)": step1.BLOCK_N * step1.BLOCK_D * 2 / 1024,
                       "ring slots": step1.stages_for(D), "slots per centroid tile": -(-D // step1.BLOCK_D),
                       "accumulator registers per thread": 64 * step1.BLOCK_N // 128}
                      for D in (64, 128, 256, 512)])
display(sizes.style.hide(axis="index").format("{:.3g}"))

# %% [markdown]
# ## 2. A guided read of the file
#
# **The constants and the ring.** A ring slot is one 128-byte swizzle atom of 64 bf16 columns for 128 centroids; the
# ring depth is what a CTA's 227 KiB hold after the point tile.

# %%
stepper.excerpt(step1, "BLOCK_M = 128", "def _d_padded")

# %% [markdown]
# **The producer.** One warp issues every TMA: the point tile once, then for every centroid tile one copy per 64-wide
# slice of `D`, each into the next ring slot after waiting for it to be empty (`producer_acquire`). The TMA engine
# arrives on the slot's *full* barrier when the bytes have landed; `tx_count` told it how many to expect.

# %%
stepper.excerpt(step1, "x_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer", "producer_tail")

# %% [markdown]
# **The consumers.** For each centroid tile: wait for each slot to be *full*, issue its four `k = 16` WGMMAs
# (`ACCUMULATE` off for the first, so the accumulator starts from zero), commit them as one group; then wait for all
# groups (`wait_group(0)`), release the slots, and fold the tile. While all slots are held (a ring shorter than a tile,
# `D = 512`) the oldest group is retired first: otherwise the producer could never fill the slot being waited for.

# %%
stepper.excerpt(step1, "# WGMMA over the tile's d blocks", "self.argmin(acc")

# %% [markdown]
# ## 3. Who holds which score: the WGMMA accumulator layout
#
# A warpgroup's `m64 n128` accumulator lives in its 128 threads, 64 fp32 values each, in a layout fixed by the hardware
# (PTX ISA, the wgmma register fragment): warp `w` holds rows `16w .. 16w + 15`; lane `l` of it holds rows
# `16w + l/4` and `16w + l/4 + 8`, and in every 8-column group `g` the columns `8g + 2(l % 4) + {0, 1}`. So one row is
# spread over the 4 lanes of a **quad**, 32 columns each, and every thread holds **two rows**:

# %%
print(evidence.rows_per_thread(step1.BLOCK_N))
lanes = np.array([[evidence.accumulator_owner(r, c)[1] for c in range(16)] for r in range(16)])
fig, ax = plt.subplots(figsize=(6, 4.2), layout="constrained")
ax.imshow(lanes % 4, cmap=plt.matplotlib.colors.ListedColormap(["#c6dbef", "#9ecae1", "#fdd0a2", "#fdae6b"]))
for r in range(16):
    for c in range(16):
        ax.text(c, r, f"T{lanes[r, c]}", ha="center", va="center", fontsize=6)
ax.set_xlabel("column of the tile (centroid)")
ax.set_ylabel("row of the tile (point)")
ax.set_title("Warp 0, rows 0-15, columns 0-15: the lane holding each score", fontsize="medium")
plots.caption(ax, "kmeans_kernels.steps.evidence.accumulator_owner (the PTX wgmma fragment of .m64nNk16)")
plt.show()

# %% [markdown]
# The file names this view once: `ROW_COL` sees a thread's 64 registers as (2 rows) × (32 columns in increasing
# order), the order the scan's tie rule relies on.

# %%
stepper.excerpt(step1, "# A thread's accumulator, viewed", "return (j % 2)")

# %% [markdown]
# ## 4. The argmin: one chain per row, then the quad's merge
#
# `argmin` loads the half norm `0.5·c_sq[k]` of each of the thread's 32 columns (+inf past `K`) and hands the tile to
# `scan_tile`: for each row, scan the columns in increasing order with a strict `<`. An equal score never replaces the
# holder (the lowest index wins), and a NaN compares false (it never wins).

# %%
stepper.excerpt(step1, "def scan_tile")

# %% [markdown]
# After the last tile the 4 lanes of a quad hold 4 winners of the same row. `merge_lanes` folds them in two butterfly
# shuffles, comparing **(score, index) pairs** (`beats`): tied columns can sit in different lanes, and the pair order
# is total, so both sides of every exchange agree on the lowest index.

# %%
stepper.excerpt(step1, "def beats")

# %% [markdown]
# **Exercise 1 (predict).** Per tile a thread scores 2 rows × 32 columns, each score one compare and two selects. How
# many compare-select instructions does a thread's scan of one tile issue (leave out the guards for centroids past
# `K`)? And since `take = s < score` needs the `score` the previous column's select produced: how many *dependent*
# compare-selects does one row's chain hold per tile? Put your numbers in and run the cell.

# %%
my_count, my_depth = None, None   # your predictions
for checker, answer in ((exercises.compare_selects, my_count), (exercises.chain_depth, my_depth)):
    print(checker(answer) if answer is not None else f"{checker.__name__}: set your prediction and re-run.")

# %% [markdown]
# <details><summary>Solution</summary>
#
# 64 scores × 3 = 192 compare-selects (`exercises.compare_selects(192)`). On the chain, each column costs one compare
# (FSETP) and one select of the score (FSEL); the index select hangs off it: 32 columns × 2 = 64 per row and tile
# (`exercises.chain_depth(64)`). The SASS below shows both, with the guards on top.
# </details>
#
# ## 5. The evidence in the machine code
#
# Compiled for `sm_90a` here (no GPU needed; `N` and `K` are runtime values, `D` is baked in). One table holds every
# per-tile count of the workbook (`kmeans_kernels.steps.anatomy`): the scan block is the branch-free run with the most
# compare-selects, and every score is one `FADD`.

# %%
art = trial.compiled(step1, 128)
ops = sass.histogram(art.sass, base=True)
facts = pd.Series({"HGMMA (WGMMA)": ops["HGMMA"], "UTMALDG (TMA loads)": ops["UTMALDG"],
                   "SYNCS (mbarrier ops)": ops["SYNCS"], "LDL + STL (spills)": ops["LDL"] + ops["STL"],
                   "registers per thread": max(sass.registers(art.cubin).values())}, name="step 1, D = 128")
display(facts.to_frame())
display(pd.DataFrame({"measured (SASS)": anatomy.scan(art.sass), "model": anatomy.model(128, chains=1)})
        .style.format("{:.3g}", na_rep=""))
assert ops["HGMMA"] > 0 and ops["LDL"] + ops["STL"] == 0

# %% [markdown]
# The model counts one compare and two selects per score; the SASS holds more compare-selects because each column's
# half norm is guarded (an `ISETP` for `k < K` and an `FSEL` for +inf), and fewer `SEL` because ptxas folds some index
# selects into one predicated `SEL`. The chain depth is the model's plus the first column's guard.
#
# ## 6. Check it, time it: `try_step`
#
# `try_step` compiles a step (or your edited copy), runs every adversarial case of `kmeans_kernels.steps.cases`
# against the reference bit for bit (ties within and across tiles, NaN, ±inf, signed zero, tails, fp16, a given
# `c_sq`; outputs poisoned first), times it against the step before with interleaved rounds (step 1: against
# `torch`'s matmul + argmin), and shows the SASS change. On a CPU it says what it could not run.

# %%
result = try_step(step1)
result

# %% [markdown]
# ## 7. The number: step 1 on the H200
#
# From the step benchmark (`python -m kmeans_kernels.steps.bench`, which times every step, the production kernel
# and flashlib's Hopper CuTe kernel on the 13 seed shapes in interleaved rounds, both ways). Here: step 1's kernel
# time per shape against the floor of that shape (`kmeans_kernels.floor`: the largest of tensor-core, CUDA-core and
# DRAM time) and against flashlib.

# %%
if run.empty:
    print(NOTE)
else:
    table = results.versus_floor(run, "ours/step1_serial")
    display(results.table_3sig(table))
    fig, ax = plt.subplots(figsize=(10, 3.2), layout="constrained")
    ax.bar(range(len(table)), table["% of floor"], color="#9ecae1")
    ax.set_xticks(range(len(table)), pr.shape_labels(table.reset_index()), rotation=30, ha="right", fontsize="small")
    ax.set_ylabel("step 1: % of the floor (kernel time)")
    ax.spines[["top", "right"]].set_visible(False)
    plots.caption(ax, NOTE)
    plt.show()

# %% [markdown]
# ## 8. Exercise 2 (edit and run): break the tie rule
#
# Make an editable copy of the step, change the scan's `take = s < score` to `take = s <= score` in the copy, save it,
# and run the next cell. The checker confirms that your edit reached the machine code (the compare's predicate
# changes) and, on an H100/H200, runs `try_step`'s check: equal scores now replace the holder within a lane, so the
# tie cases must fail. `try_step(path)` shows the whole report of your copy against the original.

# %%
path = stepper.copy_for_editing(step1, ROOT / "build" / "my_steps")
print(f"your copy: {path.relative_to(ROOT)}")
exercises.tie_rule(path)

# %% [markdown]
# <details><summary>Solution</summary>
#
# In `scan_tile` of the copy: `take = s <= score`. The compare becomes `FSETP.GTU` (it was `FSETP.GEU`: the select takes
# the new score unless `s >= score`, now unless `s > score`). On the GPU, "ties across tiles" and "all centroids equal"
# come back wrong: centroid 2's copies in lane 1 (columns 3, 10, 130, ...) replace it. A second edit to try: change
# `BLOCK_N = 128` to `64` and call `exercises.tile_size(path, your_register_count)`.
# </details>
#
# ## Take-aways
#
# * The kernel is a TMA producer warp and two WGMMA consumer warpgroups coupled by an mbarrier ring; the point tile
#   stays resident and only centroids stream.
# * The WGMMA layout gives each thread 2 rows × 32 columns of a tile and spreads a row over a quad: hence a per-thread
#   scan in increasing column order and a 2-step butterfly merge by `(score, index)`.
# * One chain per row: 64 dependent compare-selects per tile, 2 rows per thread. In this step the CTA alternates
#   between WGMMA and argmin, and the tensor cores wait while it folds: the table above shows how far that leaves it
#   from the floor. The next step, `05_kmeans_step2_ilp2`, halves the chain; step 4 removes the wait.

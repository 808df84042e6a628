# %% [markdown]
# # 15 · The shape explorer: which kernel wins at the shape you pick
#
# Pick a problem (a k-means assignment `N, D, K` or a GEMM `M, N, K`), a GPU and the configurations, for one
# shape or a range of one dimension, and see each configuration's latency: **predicted** by a wave model,
# **recorded** by our benchmarks (`data/measured/<gpu>/`), **published** by the seed PRs (`data/pr/`, B200), or
# **live** (timed now, on a GPU of the chosen kind), each drawn in its own style; and which one wins, saying on
# which kind of number the verdict rests.
#
# **After this notebook you will know**
#
# * the wave model: how a configuration's tiles, CTAs per SM and tail turn into a predicted time, and what it
#   cannot see;
# * the one interface (`workbook.explore.Problem`) through which the kernel packages describe their problems;
# * how far the recorded kernels are from the model's floor, read off the explorer's tables and figures.
#
# On a machine without a GPU everything here runs, from the model and the recorded data, and says so. Static
# examples come first, so the page shows results where widgets do not render (GitHub, the HTML report).

# %%
import inspect

from IPython.display import display

from gemm_kernels.explore import GEMM
from kmeans_kernels import explore as kmeans_explore
from kmeans_kernels.explore import KMEANS
from workbook import explore, gpus

print(gpus.describe())
kmeans, gemm = explore.Explorer(KMEANS), explore.Explorer(GEMM)

# %% [markdown]
# ## 1. The idea: slots, waves, makespan
#
# A kernel cuts its output into **work items** (a CTA's 128 points for k-means; a tile of C for a GEMM). A GPU
# runs a fixed number of them at once, its **slots**: one per SM, two per SM when two CTAs fit in one SM's shared
# memory and registers, or one per CTA pair. `items / slots` is the number of **waves**; 3.46 waves means three
# full waves and a fourth with 46 % of the slots busy and the rest idle. The **makespan** is when the last slot
# finishes, in units of one full item: 4.00 for those 3.46 waves of equal items.
#
# The prediction gives each slot `1/slots` of the tensor cores' datasheet peak, so
#
# `predicted = max(makespan × item FLOPs × slots / peak FLOP/s,  bytes / peak bandwidth)`
#
# where an item's FLOPs count the padding of a tile that hangs over the edge. With full waves and no padding this
# is the roofline. Configurations that tile differently (CTAs per SM, tile widths, a balanced tail) predict
# differently; configurations that differ only inside an item (a scan, an epilogue, the ring depth) predict the
# same, and only a measurement separates them.

# %% [markdown]
# ## 2. The one interface
#
# `workbook` knows no kernel: each package implements `workbook.explore.Problem` (`kmeans_kernels/explore.py`,
# `gemm_kernels/explore.py`, each with its tests). Its members: `dims` (names, default, range, the multiple
# the kernels need), `check`, `flops`, `nbytes`, `configurations`, `waves` (the wave model), `table` (the
# benchmark's CSV), `references` (published numbers) and `measure` (the live runner). The k-means wave model, in
# full: the real CTAs per SM come from `kmeans_kernels.hopper.ctas_per_sm`, the tile widths from each variant.

# %%
print(inspect.getsource(kmeans_explore.tiling))
print(inspect.getsource(kmeans_explore.KmeansAssign.waves))

# %% [markdown]
# ## 3. k-means on our H200, one shape
#
# A shape of seed 000's table. The summary says how many slots each variant has at this D (the 128-wide ones and
# `wide` differ); `auto` is modelled as the variant it picks. Recorded numbers come from one benchmark run of this
# shape, named in the summary.

# %%
result = kmeans.explore((65536, 128, 4096), gpu="h200")
print(result.summary())
display(result.table().drop(columns="recorded in"))

# %%
explore.figure(result);

# %% [markdown]
# **The check.** The model is a floor at datasheet peaks, so no measurement of ours may beat its prediction; a
# measurement that did would mean the model miscounts (slots, padding) or the peak is wrong. The same view as a
# fraction of the roofline shows how far each kernel is from it, without torch's long bar squashing the others.

# %%
below = [(r.name, r.recorded_ms, r.predicted_ms) for r in result.rows
         if r.recorded_ms is not None and r.predicted_ms is not None and r.recorded_ms < r.predicted_ms]
print("no recorded time beats its prediction" if not below else f"faster than the model: {below}")
explore.figure(result, view="roofline", max_wave_panels=0);

# %% [markdown]
# ## 4. A sweep: N from a few waves to many
#
# The same configurations over a range of N at D = 128, K = 4,096. Where N / 128 CTAs fall just past a multiple of
# the slots, a variant with two CTAs per SM and one with one leave different tails, and the predictions part.
# Recorded points appear where the benchmark measured that exact shape.

# %%
values = sorted({*(1 << p for p in range(14, 21)), 128 * 300, 128 * 700, 128 * 1500})   # powers of 2, and tails
sweep = kmeans.sweep((65536, 128, 4096), "N", values, gpu="h200",
                     configurations=["norm_broadcast", "wide", "torch matmul_argmin"])
explore.sweep_figure(sweep);
print("\n".join(sweep.notes) or f"recorded runs used: {len(sweep.runs)}")

# %% [markdown]
# ## 5. A GEMM on the B200: our model beside seed 004's measurements
#
# We have no B200: for ours there are only predictions, and seed 004's table brings the PR author's measurements
# of the cuda-oxide kernel and cuBLASLt at this cube, drawn as published, not as ours.

# %%
result = gemm.explore((4096, 4096, 4096), gpu="b200")
print(result.summary())
explore.figure(result, view="roofline");

# %% [markdown]
# ## 6. A shape the kernels refuse gets a message
#
# The Blackwell GEMM's TMA loads need 16-byte aligned rows, so N and K must be multiples of 8; the explorer says
# so instead of drawing a wrong picture (in the widgets the same message appears under the button).

# %%
try:
    gemm.explore((4096, 4004, 4096), gpu="b200")
except ValueError as err:
    print("Cannot explore this:", err)

# %% [markdown]
# ## 7. Exercise: slots
#
# How many CTAs of `norm_broadcast`, and how many of `wide`, run at once on an H200 at D = 128? Work it out from
# `kmeans_kernels.hopper` (its docstring and `ctas_per_sm`), not from the explorer's table.

# %%
norm_broadcast_slots, wide_slots = None, None    # your two numbers
print(kmeans_explore.check_slots(norm_broadcast_slots, wide_slots))

# %% [markdown]
# <details><summary>Solution (click to open)</summary>
#
# `hopper.ctas_per_sm(128)` is 2: the point tile and a three-deep ring fit in half an SM's shared memory, and a
# 64 x 128 fp32 accumulator leaves registers for two CTAs. `wide`'s 64 x 256 accumulator does not, so
# `hopper.ctas_per_sm(128, hopper.WIDE_BLOCK_N)` is 1. Slots are SMs times that:
# `2 * gpus.H200.sm_count` and `gpus.H200.sm_count`.
# </details>

# %% [markdown]
# ## 8. Explore
#
# Change the problem, the shape, the GPU and the configurations; choose one shape or a sweep of one dimension,
# milliseconds on a log axis or the fraction of the roofline; then press **explore**. With a GPU of the chosen
# kind here, tick *time live*. (Widgets need a live Jupyter kernel; in a static rendering this cell shows nothing.)

# %%
explore.build_ui([kmeans, gemm])

# %% [markdown]
# ## Take-away
#
# * The wave model tells configurations apart only by how they tile: CTAs per SM, tile widths, a balanced or
#   stream-K tail. It predicts the serial and ILP2 scans alike, and every GEMM pipeline depth alike.
# * It is a floor, not a forecast: section 3's table prints how far each recorded kernel is from it (its
#   `% of roofline` column), and that distance is the scan, the epilogue and the pipeline the model does not see.
# * Only a measurement ranks configurations that tile alike, so the explorer names its winner by the best kind of
#   number it has, live over recorded over published over predicted, and says which it used.

# %% [markdown]
# # 02 · k-means on Hopper: a fused GEMM + argmin with one compare-select chain
#
# Notebook 01 fixed the answer: for every point, the centroid with the smallest score `0.5·‖c‖² − ⟨x, c⟩`, lowest
# index on ties, NaN and +inf never winning. This notebook builds the first kernel that computes it on an H100/H200
# (`sm_90a`), `kmeans_kernels.hopper` with `variant="serial"`. It is the baseline the next two notebooks improve.
#
# **After this notebook you will know**
#
# * the kernel's **warp roles**: one producer warp that issues every TMA load, two consumer warpgroups that issue
#   WGMMA and scan the results, coupled only by an **mbarrier ring** in shared memory;
# * the **WGMMA accumulator layout**: which thread holds which (row, column) of a 64 × 128 tile, and why that
#   decides how the argmin is organised;
# * the **serial scan** (`reduce.scan_serial`) and the **lane merge** (`reduce.merge_lanes`), and why they give the
#   reference's answer on ties and NaN;
# * how to read the evidence in the SASS, compiled here for `sm_90a` with no GPU: `HGMMA` present, the length of
#   the compare-select chain, no local memory;
# * where the H200 latency of this kernel is recorded, next to `torch`.
#
# Everything runs on a CPU: the kernel is compiled, not run, unless an H100/H200 is present.

# %%
import inspect

import matplotlib.patches as patches
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import Markdown, display

from kmeans_kernels import hopper, reduce, reference, sass_checks
from workbook import gpus, plots, pr, records
from workbook import sass as sass_tools

print(gpus.describe())

# %% [markdown]
# ## 1. Structure of the kernel
#
# One CTA owns `BLOCK_M = 128` points and streams **every** centroid past them. Per CTA:
#
# * **warp 8 (producer)** loads the point tile `x[128, D]` once with TMA (it stays in shared memory for the whole
#   kernel), then streams centroid tiles `c[128, 64]` (128 centroids × one 64-wide slice of `D`) into a **ring**
#   of shared-memory slots. Each slot has two mbarriers: *full* (the TMA engine arrives when the bytes have
#   landed) and *empty* (each consumer warp arrives when it has finished reading).
# * **warps 0-7, two consumer warpgroups**, own 64 points each. For every centroid tile they issue WGMMA
#   `64 × 128 × 16` instructions over the slots of that tile into one fp32 **register** accumulator, give the slots
#   back as soon as the WGMMAs are done (the producer refills them during the argmin), and fold the 64 × 128 dot
#   products into one running winner per row. Nothing of size `N × K` is ever written: the kernel stores 4 bytes
#   per point.
#
# Within a CTA the WGMMAs and the argmin take turns. The overlap comes from **two CTAs per SM**: the kernel is
# small enough (288 threads, at most 112 registers each, about half an SM's shared memory up to `D = 256`) that two
# share every SM, and while one folds, the other's WGMMAs keep the tensor cores busy. (An earlier version overlapped
# *inside* the CTA with two accumulators per thread; at 232 registers that fit one CTA per SM and measured no
# faster: notebook 04, section 5.) The sizes, from the package:

# %%
D = 128
print(f"BLOCK_M = {hopper.BLOCK_M} points per CTA, BLOCK_N = {hopper.BLOCK_N} centroids per tile, "
      f"BLOCK_D = {hopper.BLOCK_D} columns of D per ring slot, {hopper.THREADS} threads")
ring = pd.DataFrame([{"D": d, "x tile resident (KiB)": hopper.BLOCK_M * d * 2 / 1024,
                      "CTAs per SM": hopper.ctas_per_sm(d), "ring slots": hopper.stages_for(d),
                      "slots per centroid tile": -(-d // hopper.BLOCK_D)}
                     for d in (64, 128, 256, 512)])
display(ring.style.hide(axis="index").format({"x tile resident (KiB)": "{:g}"}))

# %% [markdown]
# The ring is as deep as the CTA's share of shared memory allows after the resident point tile
# (`hopper.stages_for`): half an SM where two CTAs fit, at most 8 slots of 16 KiB. At `D = 512` the point tile
# alone takes 128 KiB, so one CTA gets the SM and 6 slots, fewer than the 8 slots a centroid tile needs: the
# consumers must give slots back one by one as their WGMMAs finish, not all at the end of a tile, or the producer
# could never fill the slot they are waiting for (`HopperAssign._issue` does this).
#
# The timeline of one SM at `D = 128` (two slots per centroid tile), two CTAs, schematic:

# %%
def draw_timeline(ax, tiles=4, stages=5):
    """Two CTAs on one SM: each alternates WGMMA (tensor cores) and argmin (CUDA cores); the SM's tensor cores
    take whichever CTA has WGMMAs ready, so one CTA's argmin runs under the other's WGMMAs."""
    lanes = {"CTA 0: argmin\n(CUDA cores)": 0, "tensor cores\n(shared by both)": 1, "CTA 1: argmin\n(CUDA cores)": 2}
    colors = ("#4c72b0", "#dd8452")
    mma, fold = 1.0, 0.9
    t_free = 0.3                                   # when the tensor cores are next free
    ready = [0.3, 0.3]                             # when each CTA has its next tile's WGMMAs ready to issue
    for t in range(tiles):
        for cta in (0, 1):
            start = max(t_free, ready[cta])
            ax.add_patch(patches.Rectangle((start, 1.15), mma - 0.05, 0.7, color=colors[cta]))
            ax.text(start + mma / 2, 1.5, f"CTA {cta}\ntile {t}", ha="center", va="center", fontsize=7, color="white")
            t_free = start + mma
            lane = 0.15 if cta == 0 else 2.15
            ax.add_patch(patches.Rectangle((t_free, lane), fold - 0.05, 0.7, color=colors[cta], alpha=0.5))
            ax.text(t_free + fold / 2, lane + 0.35, f"scan {t}", ha="center", va="center", fontsize=7)
            ready[cta] = t_free + fold
    ax.set_yticks([v + 0.5 for v in lanes.values()], list(lanes))
    ax.set_xlim(0, t_free + fold + 0.3)
    ax.set_ylim(0, 3)
    ax.set_xticks([])
    ax.set_xlabel(f"time (schematic; each CTA's producer warp keeps its ring of {stages} slots filled meanwhile)")
    ax.set_title(f"One SM of the Hopper k-means kernel, D = {D}: two CTAs, each WGMMA then argmin, interleaved",
                 fontsize="medium")
    ax.spines[["top", "right"]].set_visible(False)


fig, ax = plt.subplots(figsize=(11, 3.2), layout="constrained")
draw_timeline(ax, stages=hopper.stages_for(D))
plt.show()

# %% [markdown]
# The kernel body, from the package (`inspect.getsource`, so this is the code that runs, not a copy). Read the
# `if warp == PRODUCER_WARP` branch for the producer and the `else` branch for the consumers (the `ping_pong`
# branches belong to the `wide` variant of notebook 04); the per-tile steps (`_issue`, `_retire`, `_argmin`) are
# plain Python that runs while the kernel is traced, so their loops unroll.

# %%
print(inspect.getsource(hopper.HopperAssign.kernel))

# %% [markdown]
# ## 2. Who holds which score: the WGMMA accumulator layout
#
# A warpgroup's WGMMA `m64 n128` leaves a 64 × 128 fp32 tile in the registers of its 128 threads, 64 values each.
# The layout is fixed by the hardware (PTX ISA, "wgmma register fragment" for `.m64nNk16`): warp `w` of the
# warpgroup holds rows `16w .. 16w + 15`; in it, lane `l` holds rows `16w + l/4` and `16w + l/4 + 8`, and in every
# 8-column group `g` the two columns `8g + 2·(l % 4) + {0, 1}`.
#
# So **one row of the tile is spread over the 4 lanes of a quad** (lanes `4r .. 4r + 3`), each holding 32 of its 128
# columns, in increasing order. That is the whole design of the argmin: each thread scans its own 32 columns of its
# two rows, and the four lanes of a quad merge their winners at the end.

# %%
def owner(row, col):
    """(warp, lane) of the thread holding (row, col) of a warpgroup's 64 x N WGMMA accumulator."""
    return row // 16, 4 * (row % 8) + (col % 8) // 2


fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6), layout="constrained", gridspec_kw={"width_ratios": [1, 1.5]})
zoom_rows, zoom_cols = 16, 16
grid = np.array([[owner(r, c)[1] for c in range(zoom_cols)] for r in range(zoom_rows)])
left.imshow(grid % 4, cmap=plt.matplotlib.colors.ListedColormap(["#c6dbef", "#9ecae1", "#fdd0a2", "#fdae6b"]))
for r in range(zoom_rows):
    for c in range(zoom_cols):
        left.text(c, r, f"T{grid[r, c]}", ha="center", va="center", fontsize=5.5)
left.set_xticks(range(0, zoom_cols, 2))
left.set_yticks(range(zoom_rows))
left.set_xlabel("column of the tile")
left.set_ylabel("row of the tile")
left.set_title("Warp 0, rows 0-15, columns 0-15:\nthe lane holding each score", fontsize="medium")

tile = np.full((16, hopper.BLOCK_N), np.nan)   # warp 0's 16 rows; warps 1-3 repeat the pattern below
for r in range(16):
    for c in range(hopper.BLOCK_N):
        w, lane = owner(r, c)
        if lane // 4 == 0:
            tile[r, c] = lane % 4
right.imshow(np.ones_like(tile), cmap="Greys", vmin=0, vmax=8, aspect="auto")
right.imshow(tile, cmap=plt.matplotlib.colors.ListedColormap(["#3182bd", "#6baed6", "#e6550d", "#fd8d3c"]),
             aspect="auto", interpolation="nearest")
for q, color in enumerate(["#3182bd", "#6baed6", "#e6550d", "#fd8d3c"]):
    right.add_patch(patches.Rectangle((0, 0), 0, 0, color=color, label=f"lane {q}"))
right.legend(loc="center", ncols=4, fontsize="small", frameon=False, bbox_to_anchor=(0.5, 0.25))
right.set_yticks(range(16))
right.set_xlabel("column of the tile (centroid within the tile)")
right.set_ylabel("row (point), warp 0")
right.set_title("Lanes 0-3 (one quad) share rows 0 and 8; each holds 32 of\ntheir 128 columns. "
                "Rows 16-63 belong to warps 1-3, in the same pattern", fontsize="medium")
plt.show()

# %% [markdown]
# The kernel names this view once, in `hopper._row_col_layout`: the thread's 64 accumulator registers seen as
# (2 rows) × (32 columns in increasing order), which is the order the scan relies on for its tie rule.

# %%
print(inspect.getsource(hopper._row_col_layout))
print(inspect.getsource(hopper._flat_index))

# %% [markdown]
# ## 3. The argmin: one chain per row, then a merge across the quad
#
# `HopperAssign._argmin` turns one tile into scores and hands them to a scan from `kmeans_kernels.reduce`, the
# module both the Hopper and the Blackwell backends share. For each of its 32 columns a thread reads the half norm
# `0.5·c_sq[k]` (from global memory, L1-cached; +inf for a centroid past `K`), and then:

# %%
print(inspect.getsource(reduce.scan_serial))

# %% [markdown]
# Each score waits for the compare before it: `take = s < score` needs the `score` that the previous `select_`
# produced. Per row and tile that is a chain of 32 compare-selects, and the running winner carries the chain across
# all `K / 128` tiles. The strict `<` is the tie rule: scanning upward, an equal score never replaces the holder, so
# the lowest index of the thread's columns wins; NaN compares false and never wins.
#
# After the last tile, the four lanes of each quad hold four winners of the same row. `merge_lanes` folds them with
# two butterfly shuffles (lane `l` exchanges with `l ^ 1`, then with `l ^ 2`), comparing **(score, index) pairs**:

# %%
print(inspect.getsource(reduce.beats))
print(inspect.getsource(reduce.merge_lanes))


# %%
def draw_chain_and_merge(chain_ax, merge_ax, shown=6):
    for j in range(shown):
        chain_ax.add_patch(patches.FancyBboxPatch((j * 1.4, 0), 1.0, 0.8, boxstyle="round,pad=0.05", color="#9ecae1"))
        chain_ax.text(j * 1.4 + 0.5, 0.4, f"s{j} < best?\nselect", ha="center", va="center", fontsize=7)
        if j:
            chain_ax.annotate("", xy=(j * 1.4 - 0.05, 0.4), xytext=(j * 1.4 - 0.35, 0.4),
                              arrowprops=dict(arrowstyle="->", color="0.2"))
    chain_ax.text(shown * 1.4 - 0.1, 0.4, "...  x32 per tile, x K/128 tiles", va="center", fontsize=8)
    chain_ax.set_xlim(-0.2, shown * 1.4 + 3.6)
    chain_ax.set_ylim(-0.4, 1.2)
    chain_ax.axis("off")
    chain_ax.set_title("scan_serial: each compare-select waits for the previous one (one chain per row)",
                       fontsize="medium")

    xs = {0: 0.0, 1: 1.0, 2: 2.0, 3: 3.0}
    for lane, x in xs.items():
        merge_ax.text(x, 2.0, f"lane {lane}\n(s, k)", ha="center", va="center", fontsize=8,
                      bbox=dict(boxstyle="round", fc="#fdd0a2", ec="none"))
        merge_ax.text(x, 0.0, "winner", ha="center", va="center", fontsize=8,
                      bbox=dict(boxstyle="round", fc="#a1d99b", ec="none"))
    for step, (y0, y1, offset) in enumerate(((1.75, 1.2, 1), (0.85, 0.25, 2))):
        for lane in xs:
            merge_ax.annotate("", xy=(xs[lane ^ offset], y1), xytext=(xs[lane], y0),
                              arrowprops=dict(arrowstyle="->", color="0.35", lw=0.8))
        merge_ax.text(3.6, (y0 + y1) / 2, f"shuffle xor {offset}", fontsize=7, va="center")
        if step == 0:
            for lane in xs:
                merge_ax.text(xs[lane], 1.0, "min by\n(s, k)", ha="center", va="center", fontsize=6)
    merge_ax.set_xlim(-0.6, 4.6)
    merge_ax.set_ylim(-0.4, 2.5)
    merge_ax.axis("off")
    merge_ax.set_title("merge_lanes: the quad's 4 winners in 2 butterfly steps", fontsize="medium")


fig, (chain_ax, merge_ax) = plt.subplots(1, 2, figsize=(12, 2.8), layout="constrained",
                                          gridspec_kw={"width_ratios": [1.8, 1]})
draw_chain_and_merge(chain_ax, merge_ax)
plt.show()

# %% [markdown]
# Why the pair and not just the score: the strict `<` of the scan gives each lane the *lowest* index among its own
# tied columns, but tied columns can sit in different lanes (column 0 is lane 0's, column 2 is lane 1's). Comparing
# `(score, index)` lexicographically is a total order, so the merge picks the lowest index among equal scores no
# matter in which order the lanes are combined, and both sides of every butterfly exchange agree.
#
# ### The rule, checked on the CPU
#
# The function below mimics that data flow in plain Python for one row: four lanes each scan their own columns of
# every tile with the strict `<`, then the butterfly merges by `(score, index)`. It is a model of the reduction order,
# not the kernel (which needs a GPU); run on scores from `kmeans_kernels.reference` with many exact ties (small
# integers) and some NaN centroids, it must give the reference's answer on every row.

# %%
def quad_model(row_scores):
    """The kernel's reduction order for one row: 4 lanes scan their columns upward, then a butterfly merge."""
    lanes = []
    for q in range(4):
        best, index = float("inf"), reduce.NO_WINNER
        for k, s in enumerate(row_scores):
            if (k % 8) // 2 == q and s < best:   # lane q owns columns 8g + 2q + {0, 1}
                best, index = s, k
        lanes.append((best, index))
    for offset in (1, 2):   # butterfly: every lane takes its partner's pair if that one comes first
        lanes = [lanes[q ^ offset] if beats_pair(lanes[q ^ offset], lanes[q]) else lanes[q] for q in range(4)]
    assert len(set(lanes)) == 1   # after the merge all four lanes agree
    return lanes[0][1]


def beats_pair(a, b):
    """reduce.beats in Python: (score, index) a comes before b."""
    return a[0] < b[0] or (a[0] == b[0] and a[1] < b[1])


g = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ()).item()))  # fresh data on every run
x = torch.randint(-2, 3, (300, 32), generator=g).to(torch.bfloat16)
c = torch.randint(-2, 3, (256, 32), generator=g).to(torch.bfloat16)
c[torch.randperm(256, generator=g)[:20], 0] = float("nan")   # 20 centroids whose every score is NaN
s = reference.scores(x, c)
want = reference.assign(x, c)
got = torch.tensor([quad_model(row.tolist()) for row in s], dtype=torch.int32)
tied = ((s == s.nan_to_num(float("inf")).min(1, keepdim=True).values).sum(1) > 1)
print(f"{int(tied.sum())} of {len(x)} rows have a tie for the best score; "
      f"the quad model agrees with the reference on {int((got == want).sum())} of {len(x)} rows")
assert torch.equal(got, want)

# %% [markdown]
# NaN never reaches the merge: a NaN score never beats the initial +inf in the scan, so a lane whose columns are all
# NaN keeps (+inf, −1), and only a row with no finite score at all ends with −1.
#
# ## 4. The evidence in the machine code
#
# The kernel is compiled here for `sm_90a` with no GPU (`hopper.compile`, a few seconds); `N` and `K` are runtime
# values, `D` is baked in. We read the SASS that `ptxas` made:

# %%
art = hopper.compile("serial", 65536, D, 4096)
ops = sass_tools.histogram(art.sass, base=True)
evidence = pd.Series({
    "HGMMA (WGMMA on the tensor cores)": ops["HGMMA"],
    "UTMALDG (TMA loads)": ops["UTMALDG"],
    "SYNCS (mbarrier wait/arrive)": ops["SYNCS"],
    "LDG (half norms from global)": ops["LDG"],
    "FSETP + FSEL + SEL (compare-select)": ops["FSETP"] + ops["FSEL"] + ops["SEL"],
    "SHFL (lane merge)": ops["SHFL"],
    "LDL + STL (local memory: spills)": ops["LDL"] + ops["STL"],
    "registers per thread": max(sass_tools.registers(art.cubin).values()),
}, name="serial, D = 128")
display(evidence.to_frame())
assert ops["HGMMA"] > 0 and ops["UTMALDG"] > 0 and ops["LDL"] + ops["STL"] == 0
assert ops["SHFL"] == 2 * 2 * 2   # what the text below says: 2 rows x 2 butterfly steps x (score, index)


# %% [markdown]
# `HGMMA` is the SASS of `wgmma.mma_async`; `UTMALDG` the TMA loads; no `LDL`/`STL`: the 64-value accumulator and
# the scan fit the register cap that two CTAs per SM impose (`launch(min_blocks_per_mp=2)`: 64 Ki registers over
# 2 × 288 threads is at most 112 each; `workbook.sass.registers` reads what `ptxas` allocated from the cubin). The
# 8 `SHFL` are the lane merge: 2 rows × 2 steps × (score, index).
#
# **How long is the chain?** `kmeans_kernels.sass_checks.compare_select_depth` builds a def-use graph over
# registers and predicates in the scan's straight-line code and returns the longest path through compare-select
# ops. It was written for the Blackwell kernels, whose scan starts after the TMEM load (`LDTM`); Hopper has no TMEM
# (the accumulator is already in registers), so we hand it the Hopper scan block: the branch-free run of the
# kernel with the most compare-selects. Every score is exactly one `FADD` (`half_norm − dot`), which tells how many
# tiles that block scans.

# %%
def chain_depth(sass_text):
    """(compare-select depth, tiles scanned) of the Hopper scan block."""
    block = sass_checks.scan_block(sass_text, after=None)
    depth = sass_checks.compare_select_depth(sass_text, after=None)
    return depth, sass_checks.scan_tiles(block)       # 2 rows x 32 columns per thread and tile


depth, tiles = chain_depth(art.sass)
print(f"the scan block holds {tiles:g} tiles; its longest compare-select chain is {depth} deep, "
      f"{depth / tiles:.0f} per tile (32 columns x FSETP + FSEL = 64)")
assert 64 <= depth / tiles <= 66

# %% [markdown]
# The first compare-selects of the block, as `ptxas` scheduled them (the `FSEL ..., +INF` that turn the half norm
# of a centroid past `K` into +inf are left out). Follow one register: an `FSEL` writes the running best score, and
# the next `FSETP` of that row compares the new score against it.

# %%
block = sass_checks.scan_block(art.sass, after=None)
chain_ops = [i for i in block if i.base in ("FSETP", "FSEL") and "+INF" not in i.operands]
for ins in chain_ops[:10]:
    print(f"  {str(ins)}")

# %% [markdown]
# ## 5. The number: H200 latency against `torch` and the public kernels
#
# `python -m kmeans_kernels.bench` (or `make bench-kmeans`) on an H200 times every variant, `torch`
# (`(0.5·c_sq − x @ c.T).argmin(1)`) and, where installed on the GPU machine, flashlib's Hopper kernels (its CuTe DSL
# and Triton assign, the public kernels a user would pick instead) on the seed's 13 shapes, by the seed's method
# (three rotating input sets, 10 warm-up calls, median of 30 CUDA-event-timed calls). It appends the rows to
# `data/measured/h200/kmeans_assign.csv`. This cell reads that file and shows the most recent run that measured both
# `serial` and `torch`, so that every number compared comes from one process on the same inputs.

# %%
TABLE = records.path("h200", "kmeans_assign")
SOURCE = TABLE.relative_to(records.DATA.parent)
SHAPE = ["N", "D", "K"]
SERIAL, TORCH = ("ours", "serial"), ("torch", "matmul_argmin")


run = records.last_run(records.read("h200", "kmeans_assign"), [SERIAL, TORCH], min_shapes=13)   # all seed shapes
contenders = [SERIAL, TORCH] + sorted({(k, v) for k, v in zip(run.kernel, run.variant) if k == "flashlib"})
if run.empty:
    table = pd.DataFrame()
    display(Markdown(f"**No H200 run with both `serial` and `torch` in `{SOURCE}` yet.** They are recorded on an H200 "
                     "with `make bench-kmeans` (= `python -m kmeans_kernels.bench`); re-run this notebook afterwards. "
                     "No number is shown until it is measured."))
else:
    name = lambda k, v: v if k == "ours" else f"{k} {v}"  # noqa: E731
    table = pd.concat({name(k, v): run[(run.kernel == k) & (run.variant == v)].set_index(SHAPE)["ms_median"]
                       for k, v in contenders}, axis=1).sort_index()
    ratio = table.drop(columns="serial").div(table["serial"], axis=0)   # > 1: serial is faster
    display(pd.concat({"median ms": table, "time / serial's time": ratio}, axis=1)
            .style.format("{:.4f}").format("{:.2f}x", subset=["time / serial's time"]))
    rates = run.set_index(["kernel", "variant"]).loc[contenders].groupby(["kernel", "variant"]).match_rate.min()
    for column in ratio:
        print(f"serial is faster than {column} at {int((ratio[column] > 1).sum())} of {len(ratio)} shapes")
    print("lowest match rate vs the fp32 reference over the shapes:",
          {name(k, v): round(r, 4) for (k, v), r in rates.items()})
    print(f"Source: {SOURCE}; provenance of this run:")
    display(run[list(records.PROVENANCE)].drop_duplicates().style.hide(axis="index"))

# %%
if not table.empty:
    fig, ax = plt.subplots(figsize=(11, 4), layout="constrained")
    pos = np.arange(len(table))
    width = 0.8 / len(table.columns)
    colors = ["#4c72b0", "0.6", "#dd8452", "#55a868", "#8172b3"]
    for i, column in enumerate(table.columns):
        ax.bar(pos + (i - (len(table.columns) - 1) / 2) * width, table[column], width, label=column,
               color=colors[i % len(colors)])
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 5)   # room for the legend
    ax.set_xticks(pos, pr.shape_labels(table.reset_index()), rotation=30, ha="right", fontsize="small")
    ax.set_xlabel("N x D x K")
    ax.set_ylabel("median latency (ms, log scale)")
    ax.set_title("H200: the fused serial kernel against torch and the public kernels", fontsize="medium")
    ax.legend(frameon=False, fontsize="small", ncols=len(table.columns))
    plots.caption(ax, f"{SOURCE} ({', '.join(run['gpu'].unique())}, run of {run['date'].iloc[0]}), "
                "measured by kmeans_kernels.bench")
    plt.show()

# %% [markdown]
# `torch` writes the `N × K` score matrix to memory and reads it back for the argmin; the fused kernel never does,
# which is where most of its lead over `torch` comes from. flashlib's kernels are tuned Hopper kernels: the counts
# above say where this first step stands against them, and notebooks 03 and 04 show what each next step changes.
# `torch`'s matmul also rounds the dot products to bf16 before the argmin
# (notebook 01 showed what that can cost); on the bench's data (standard normal, no offset) its match rate above shows
# how often that changed a winner.
#
# **For scale, the seed's B200 numbers** (measured by the PR author on a B200, not here): flashlib's warp-specialised
# kernels before PR #22 (`nightly`: the warp-specialised `ws` path with a serial scan, and `x_resident` for one
# shape) on the same 13 shapes. A different GPU and a different kernel: a point of reference, not a comparison.

# %%
nightly = pr.nightly_table()
display(nightly[["N", "D", "K", "nightly_path", "nightly_ms"]].rename(
    columns={"nightly_ms": "B200 nightly ms (PR author)"}).style.hide(axis="index").format(
    {"B200 nightly ms (PR author)": "{:.4f}"}))
print(f"Source: data/pr/kmeans_pr22_nightly.csv, transcribed from seed {pr.SEED_KMEANS}; measured on a B200 by the "
      "PR author, not here")

# %% [markdown]
# ## 6. On an H100/H200: run it
#
# With a Hopper GPU present, this cell runs the kernel on small-integer inputs (every product and partial sum is
# exact, so the answer must equal the reference bit for bit) and with ties and NaN. Elsewhere it says so.

# %%
spec = gpus.current()
if spec is not None and spec.arch == "sm_90a":
    import kmeans_kernels
    g = torch.Generator(device="cuda").manual_seed(int(torch.randint(0, 2**31, ()).item()))
    x = torch.randint(-3, 4, (4099, D), device="cuda", generator=g).to(torch.bfloat16)
    c = torch.randint(-3, 4, (1000, D), device="cuda", generator=g).to(torch.bfloat16)
    c[7, 0] = float("nan")
    ids = kmeans_kernels.assign(x, c, variant="serial")
    print("serial equals the reference bit for bit:", torch.equal(ids.cpu(), reference.assign(x, c).cpu()))
else:
    print(f"No H100/H200 here ({gpus.describe()}): the kernel above was compiled and inspected, not run. "
          "On a Hopper GPU: pytest -m gpu tests/test_kmeans_hopper.py")

# %% [markdown]
# ## Take-aways
#
# * The Hopper kernel splits into a TMA producer warp and two WGMMA consumer warpgroups, coupled by an mbarrier
#   ring; the point tile stays resident and only centroids stream; two such CTAs share each SM, so one's argmin
#   runs under the other's WGMMAs.
# * The WGMMA layout gives each thread 2 rows × 32 columns of a tile, and spreads a row over the 4 lanes of a quad:
#   hence a per-thread scan and a 2-step butterfly merge by `(score, index)`.
# * The serial scan is one compare-select chain per row: about 64 dependent instructions per tile in the SASS.
#   That chain is what the next notebook, `03_kmeans_ilp2`, halves.

# %% [markdown]
# # 04 · Norm broadcast: load each half norm once per warp, hand it out by shuffle
#
# Every score needs the centroid's half norm `0.5·‖c_k‖²`. In the serial and ILP2 kernels each thread fetches the
# half norm of each of its 32 columns, per tile, from global memory. The second change of flashlib PR #22 (seed 000)
# stages the norms of a tile in **registers**, one coalesced load per warp and slot, and hands each one to the threads
# that need it with a **warp shuffle**.
#
# **After this notebook you will know**
#
# * who needs which norm in the WGMMA layout, and how `reduce.stage_half_norms` and `reduce.broadcast_half_norm`
#   deliver it with 4 loads and 32 shuffles per thread and tile instead of 32 loads;
# * how the trade shows in the SASS: `LDG` replaced by `SHFL`, per variant, per tile;
# * what it did on the H200, what the PR author measured on a B200, and which variant `variant="auto"` picks;
# * the step after it, which is not about the argmin at all: **occupancy and tile width**. Two CTAs per SM (one
#   accumulator, 288 threads, 96 registers) where a 64 × 128 tile fits, and a `wide` variant with 256-wide centroid
#   tiles whose two warpgroups **ping-pong** where it does not. That step is what made the Hopper kernel faster than
#   flashlib's.
#
# **A difference from the seed, stated up front.** The PR's B200 baseline staged the norms in *shared memory*
# (`st.shared`, then two named barriers per tile) and the PR replaced that with shuffles: `LDS + BAR → SHFL`
# (notebook 05 shows it on our Blackwell kernels). Our Hopper baseline never had that buffer: it reads the norms
# straight from global memory through L1. So the trade here is `LDG → SHFL`.

# %%
import inspect

import matplotlib.patches as patches
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import Markdown, display

from kmeans_kernels import hopper, reduce, reference, sass_checks
from workbook import gpus, plots, pr, records, timing
from workbook import sass as sass_tools

print(gpus.describe())

# %% [markdown]
# ## 1. Who needs which norm
#
# In the WGMMA layout (notebook 02) lane `l` holds the columns `8g + 2·(l % 4) + {0, 1}` of a 128-column tile: 32
# columns, and the same 32 for all 8 lanes with the same `l % 4`. So each norm is wanted by 8 lanes of every warp, and a
# warp issues 32 load instructions per tile (1024 values) for 128 distinct ones.
#
# Norm broadcast loads the 128 values once per warp: lane `l` loads columns `l, l + 32, l + 64, l + 96` into 4
# registers (each of the 4 loads is one coalesced 128-byte request for the warp). Then a thread that needs column `col`
# reads register `col // 32` of lane `col % 32` with `shfl.sync`. Below, the 128 half norms of one tile as the warp holds
# them after staging (a row per register slot, a column per lane), with the 32 columns lane 5 needs outlined:

# %%
def draw_staging(ax, lane=5):
    q = lane % 4
    wanted = {8 * g + 2 * q + h for g in range(hopper.BLOCK_N // 8) for h in (0, 1)}
    for slot in range(hopper.BLOCK_N // 32):
        for src in range(32):
            col = src + 32 * slot
            need = col in wanted
            ax.add_patch(patches.Rectangle((src, slot), 0.95, 0.9, facecolor="#fdae6b" if need else "#deebf7",
                                           edgecolor="#e6550d" if need else "none", linewidth=1.2))
            ax.text(src + 0.47, slot + 0.45, str(col), ha="center", va="center", fontsize=5.5)
    ax.set_xlim(-0.2, 32.2)
    ax.set_ylim(4.1, -0.2)
    ax.set_xticks(np.arange(32) + 0.47, range(32), fontsize=6)
    ax.set_yticks(np.arange(4) + 0.45, [f"register {t}" for t in range(4)], fontsize=8)
    ax.set_xlabel("lane that loaded it (column % 32)")
    ax.set_title(f"A tile's 128 half norms in a warp's registers after stage_half_norms. Orange: the 32 that lane {lane} "
                 f"(l % 4 = {q}) needs,\neach fetched by one shuffle from lane col % 32, register col // 32",
                 fontsize="medium")
    ax.spines[["top", "right", "left", "bottom"]].set_visible(False)


fig, ax = plt.subplots(figsize=(12, 2.9), layout="constrained")
draw_staging(ax)
plt.show()

# %% [markdown]
# ## 2. The code
#
# The two device functions, shared with the Blackwell backend (`kmeans_kernels/reduce.py`), and the branch of the
# Hopper kernel's per-tile step that uses them, against the per-column load it replaces:

# %%
print(inspect.getsource(reduce.stage_half_norms))
print(inspect.getsource(reduce.broadcast_half_norm))
src = inspect.getsource(hopper.HopperAssign._argmin)
print(src[src.index("        if self.broadcast_norms"):src.index("        if self.scan ==")].rstrip())

# %% [markdown]
# Two details. The per-column path clamps the address and then selects +inf for a centroid past `K` (no branch per
# column); the staged path does that test once per lane and slot. And `shuffle_sync` is a full-warp operation: it
# works here because every lane of the warp runs the same unrolled code with its own `col`; a lane-dependent branch
# around it would be a bug.
#
# ## 3. The evidence: loads become shuffles
#
# The three reduction steps compiled for `sm_90a` at `D = 128` (`wide`, section 5, scans the same way as
# `norm_broadcast`). Counts are per tile and thread, taken from the scan block
# (the branch-free run with the most compare-selects; every score is one `FADD`, which counts the tiles in it).

# %%
STEPS = ("serial", "ilp2", "norm_broadcast")      # the tutorial's three reductions; "wide" comes in section 5
arts = {v: hopper.compile(v, 65536, 128, 4096) for v in STEPS}


OPS = ("LDG", "SHFL", "LDS", "STS", "BAR", "FSETP", "FSEL", "ISETP")


def per_tile(sass_text):
    block = sass_checks.scan_block(sass_text, after=None)
    tiles = sass_checks.scan_tiles(block)       # 2 rows x 32 columns per thread and tile
    counts = pd.Series([ins.base for ins in block]).value_counts()
    return {op: counts.get(op, 0) / tiles for op in OPS}


counts = pd.DataFrame({v: per_tile(a.sass) for v, a in arts.items()}).T
counts.index.name = "per tile and thread"
display(counts.style.format("{:g}"))
whole = pd.DataFrame({v: {op: sass_tools.histogram(a.sass, base=True)[op] for op in ("LDS", "STS", "BAR")}
                      for v, a in arts.items()}).T
print("whole kernel, LDS / STS / BAR:", whole.to_dict("index"))
assert counts.loc["ilp2", "LDG"] == hopper.BLOCK_N // 4 and counts.loc["norm_broadcast", "LDG"] == hopper.BLOCK_N // 32
assert counts.loc["norm_broadcast", "SHFL"] == hopper.BLOCK_N // 4 and counts.loc["ilp2", "SHFL"] == 0

# %%
fig, ax = plt.subplots(figsize=(8, 3.2), layout="constrained")
shown = ["LDG", "SHFL", "FSEL", "ISETP"]
width = 0.27
for i, (variant, color) in enumerate(zip(STEPS, ("#9ecae1", "#fdae6b", "#74c476"))):
    bars = ax.bar(np.arange(len(shown)) + (i - 1) * width, counts.loc[variant, shown], width, label=variant, color=color)
    ax.bar_label(bars, fmt="%g", fontsize="x-small", padding=1)
ax.set_xticks(range(len(shown)), shown)
ax.set_ylabel("instructions per tile and thread")
ax.set_title("SASS of the scan, sm_90a, D = 128: 32 loads become 4 loads + 32 shuffles", fontsize="medium")
ax.legend(frameon=False)
ax.spines[["top", "right"]].set_visible(False)
plots.caption(ax, "compiled here with hopper.compile; counted over the scan block")
plt.show()

# %% [markdown]
# Reading it: per tile and thread, 32 `LDG` (one per column) become 4 `LDG` and 32 `SHFL`; the per-column `ISETP`
# (column < K) and one `FSEL` per column (the +inf select) go away with them. No variant touches shared memory
# outside the TMA/mbarrier machinery (no `LDS`/`STS` for norms). A shuffle is not free either (it is issued to the
# same memory pipe as shared-memory accesses), so whether this wins is a question for the clock.
#
# ## 4. The number: H200
#
# From `data/measured/h200/kmeans_assign.csv` (`make bench-kmeans` on an H200; the most recent run that measured all
# three steps on all 13 seed shapes). First the three against each other, then norm broadcast against ILP2, the step
# this notebook adds.

# %%
TABLE = records.path("h200", "kmeans_assign")
SOURCE = TABLE.relative_to(records.DATA.parent)
SHAPE = ["N", "D", "K"]


SEED_SHAPES = 13
recorded = records.read("h200", "kmeans_assign")
measured = records.last_run(recorded, [("ours", v) for v in hopper.VARIANTS], min_shapes=SEED_SHAPES)
ours = measured[(measured.kernel == "ours") & measured.variant.isin(STEPS)] if not measured.empty else measured
if ours.empty or set(ours.variant) != set(STEPS):
    display(Markdown(f"**`{SOURCE}` has no H200 rows for all three variants yet.** They are recorded on an H200 with "
                     "`make bench-kmeans`; re-run this notebook afterwards. No number is shown until it is measured."))
else:
    order = {v: i for i, v in enumerate(STEPS)}
    ours = ours.sort_values([*SHAPE, "variant"], key=lambda col: col.map(order) if col.name == "variant" else col)
    ours = ours.assign(shape=pr.shape_labels(ours))
    fig = plots.latency_vs_shape(ours, x="shape", hue="variant", title="H200: the three Hopper variants",
                                 source=f"{SOURCE} ({', '.join(ours['gpu'].unique())}), kmeans_kernels.bench")
    fig.set_size_inches(11, 4.2)
    plt.show()

# %%
table = records.versus(measured, "norm_broadcast", "ilp2", SHAPE) if not measured.empty else pd.DataFrame()
if not table.empty:
    display(table.style.hide(axis="index").format(precision=4).format({"speedup %": "{:+.1f}"}))
    fig = plots.speedup_bars(pr.shape_labels(table, sep="\n"), table["speedup %"].tolist(),
                             title="H200: norm broadcast vs ILP2 (our kernels)", xlabel="N x D x K",
                             source=f"{SOURCE} ({', '.join(measured['gpu'].unique())}), kmeans_kernels.bench")
    plt.show()
    resolved = (table["ilp2 ms"] - table["norm_broadcast ms"]).abs() > table[["ilp2 range", "norm_broadcast range"]].max(axis=1)
    print(f"{int(resolved.sum())} of {len(table)} shapes differ by more than the larger min-max spread of the two "
          "kernels.")
    print("provenance of these rows:")
    display(measured[list(records.PROVENANCE)].drop_duplicates().style.hide(axis="index"))

# %% [markdown]
# ## 5. The step after the argmin: occupancy and tile width
#
# With the argmin as cheap as it gets, what was left? The kernel of the first three steps gave every consumer thread
# **two** 64 × 128 accumulators, so that the argmin of tile `t` could run while the WGMMAs of tile `t + 1` filled
# the other one. That took 232 registers per consumer thread and 384 threads per CTA: **one CTA per SM**. A probe on
# the H200 compared it, in one process, with three prototypes (`tools/probes/probe_variants.py`, the patches in
# `notes/patches/`):
#
# * **one accumulator**, no overlap inside the CTA (issue the tile's WGMMAs, wait, fold);
# * **256-wide centroid tiles**, one accumulator (flashlib's tile at these shapes);
# * **two CTAs per SM**: one accumulator, 288 threads (two consumer warpgroups and one producer warp, no
#   `setmaxnreg`), launched with `min_blocks_per_mp=2` so that `ptxas` fits it in 112 registers (it used 96), and a
#   ring sized to half an SM's shared memory. The overlap now comes from the *other* CTA on the SM.

# %%
PROBE = records.DATA / "measured" / "h200" / "probes" / "kmeans_structures.csv"
probe = pd.read_csv(PROBE)
names = {"ours_norm_broadcast": "two accumulators, 1 CTA/SM (before)", "hopper_bn128_1acc": "one accumulator",
         "hopper_bn256_1acc": "256-wide tiles", "hopper_2cta_288": "two CTAs per SM",
         "flashlib_heuristic": "flashlib CuTe (static tiles)"}
grid = probe.assign(design=probe.kernel.map(names)).pivot_table(index=SHAPE, columns="design", values="synced_ms")
grid = grid[list(names.values())]
display(grid.style.format("{:.4f}").highlight_min(axis=1, props="font-weight: bold"))
assert probe["match"].min() == 1.0       # every prototype agreed with the reference on the rows checked
rel = grid.div(grid[names["ours_norm_broadcast"]], axis=0)
fig, ax = plt.subplots(figsize=(11, 3.6), layout="constrained")
pos = np.arange(len(rel))
w = 0.8 / len(rel.columns)
for i, column in enumerate(rel.columns):
    ax.bar(pos + (i - (len(rel.columns) - 1) / 2) * w, rel[column], w, label=column,
           color=["0.6", "#9ecae1", "#fdae6b", "#74c476", "#8172b3"][i])
ax.axhline(1, color="k", lw=0.8)
ax.set_xticks(pos, pr.shape_labels(rel.reset_index()), fontsize="small")
ax.set_ylabel("latency / two-accumulator kernel")
ax.set_title("H200, one process: which structure? (lower is faster)", fontsize="medium")
ax.legend(frameon=False, fontsize="x-small", ncols=3)
plots.caption(ax, f"{PROBE.relative_to(records.DATA.parent)} (probe of commit f664284 + prototypes; "
                  "synced = the seeds' method)")
plt.show()

# %% [markdown]
# Reading it. **One accumulator is as fast as two** at the 1M-point shapes and faster at the small ones: the
# overlap the second accumulator was built for did not happen, and its bookkeeping cost instructions. **Two CTAs
# per SM** win or tie almost everywhere: while one CTA folds, the other's WGMMAs keep the tensor cores busy, and a
# 65536-point grid (512 CTAs) runs in two waves instead of four. **256-wide tiles** win at `D = 256`, where the
# point tile is re-read from shared memory once per 256 centroids instead of 128.
#
# So the kernel became the two-CTA one for every variant (`hopper.ctas_per_sm`, `hopper.stages_for`), and a fourth
# variant, `wide`, keeps 256-wide tiles for `D = 256`. A 64 × 256 accumulator is 128 registers, so `wide` runs one
# CTA per SM, and with no second CTA to overlap with, its two warpgroups **ping-pong**: warpgroup 0 issues its
# WGMMAs for tile `t` and signals warpgroup 1 (a named barrier, `bar.arrive`); warpgroup 1 issues its own (they queue
# behind), signals back, and meanwhile warpgroup 0 folds tile `t`. The lines that do it:

# %%
src = inspect.getsource(hopper.HopperAssign.kernel)
start = src.index("            consumer_wg = tidx // 128")
print(src[start:src.index("                self._argmin(ctx, acc, tile)", start)].rstrip())
wide = hopper.compile("wide", 1 << 20, 256, 4096)
turns = [ins for ins in sass_tools.instructions(wide.sass) if ins.base == "BAR" and "0x100" in ins.operands]
print(f"wide, D = 256: {max(sass_tools.registers(wide.cubin).values())} registers per thread; the turn-taking "
      f"barriers (256 threads = both warpgroups): {', '.join(f'{i.opcode} {i.operands[0]}' for i in turns)}")
assert {i.opcode.split(".")[1] for i in turns} == {"SYNC", "ARV"}

# %% [markdown]
# **The number.** The last full run of the 13 seed shapes times every variant, `auto`, and flashlib 0.4.0's kernels
# (its CuTe DSL kernel autotuned per shape, and its Triton kernel) in one process, in interleaved rounds. `auto`
# and the variant it runs are one kernel timed twice, so their difference at a shape (up to 5 % in the 7062732 run)
# is the noise of a single run. In that run `auto` still followed the earlier rule (`wide` only from N = 262144);
# section 7 shows the rule its numbers led to.

# %%
def standings(run):
    """Median ms per shape for ours (auto, norm_broadcast, wide) and flashlib's two kernels, from one run."""
    keep = {("ours", "auto"): "ours auto", ("ours", "norm_broadcast"): "norm_broadcast", ("ours", "wide"): "wide",
            ("flashlib", "cute"): "flashlib CuTe (autotuned)", ("flashlib", "triton"): "flashlib Triton"}
    rows = run[[(k, v) in keep for k, v in zip(run.kernel, run.variant)]]
    return rows.assign(name=[keep[k, v] for k, v in zip(rows.kernel, rows.variant)]).pivot_table(
        index=SHAPE, columns="name", values="ms_median")[[n for n in keep.values()]]


NEEDED = [("ours", "auto"), ("ours", "wide"), ("flashlib", "cute")]
full = records.last_run(recorded, NEEDED, min_shapes=SEED_SHAPES)
if full.empty:
    display(Markdown(f"No full run with `wide`, `auto` and flashlib's autotuned kernel in `{SOURCE}` yet."))
else:
    final = standings(full)
    display(Markdown(f"**Full run** (commit {full.commit.iloc[0]}, {full.date.iloc[0]}):"))
    display(final.style.format("{:.4f}").highlight_min(axis=1, props="font-weight: bold"))
    for other in ("flashlib CuTe (autotuned)", "flashlib Triton"):
        ratio = final[other] / final["ours auto"]
        print(f"ours auto vs {other}: geomean of their time / ours {timing.geomean(ratio):.2f}x; "
              f"ours slower by more than 3 % at {int((ratio < 1 / 1.03).sum())} of {len(ratio)} shapes "
              f"({', '.join(pr.shape_labels(ratio[ratio < 1 / 1.03].reset_index())) or 'none'})")
    later = records.last_run(recorded, NEEDED)
    if later.date.iloc[0] != full.date.iloc[0]:
        again = standings(later)
        display(Markdown(f"**The ping-pong `wide`, re-timed** (commit {later.commit.iloc[0]}, {later.date.iloc[0]}):"))
        display(again.style.format("{:.4f}").highlight_min(axis=1, props="font-weight: bold"))
        ratio = again["flashlib CuTe (autotuned)"] / again["ours auto"]
        print("ours auto vs flashlib CuTe (autotuned) there, their time / ours:",
              {"x".join(map(str, k)): round(v, 3) for k, v in ratio.items()})
    print(f"Source: {SOURCE}, kmeans_kernels.bench on the H200")

# %% [markdown]
# ## 6. What the PR author measured on a B200 (not here)
#
# The shapes where seed 000's PR ships the norm-broadcast path, and its gain over `main` there (`data/pr/`,
# transcribed; measured on a B200 by the PR author, not here):

# %%
main = pr.main_table()
nb_rows = main[main.pr_path == "norm_broadcast"]
display(nb_rows.drop(columns="source").style.hide(axis="index"))
fig = plots.speedup_bars(pr.shape_labels(nb_rows, sep="\n"), nb_rows["improvement_pct"].tolist(),
                         title="PR #22 vs main, shapes where it ships norm broadcast\n(B200, measured by the PR author)",
                         xlabel="N x D x K", source=f"data/pr/kmeans_pr22_main.csv (seed {pr.SEED_KMEANS}); "
                                                    "B200, not measured here")
plt.show()

# %% [markdown]
# ## 7. Which variant `variant="auto"` runs, and why
#
# `kmeans_kernels.assign(x, c)` asks the backend's `auto_variant(N, D, K)`. Its rule and its reason, from the package:

# %%
print(inspect.getsource(hopper.auto_variant))

# %% [markdown]
# A rule is only as good as the measurements behind it. The table puts it next to them: per measured shape, the
# fastest variant on the H200 and by how much it beat the runner-up, and the variant `auto` picks (from the last full
# run, so `wide` there is the version before its ping-pong).

# %%
every = measured[(measured.kernel == "ours") & measured.variant.isin(hopper.VARIANTS)] if not measured.empty else measured
if every.empty:
    display(Markdown(f"No H200 measurements of every variant in `{SOURCE}` yet: `auto` cannot be checked here."))
else:
    rows = []
    for (n, d, k), group in every.groupby(SHAPE):
        ranked = group.sort_values("ms_median")
        pick = hopper.auto_variant(int(n), int(d), int(k))
        picked = group.set_index("variant").loc[pick]
        rows.append({"N": n, "D": d, "K": k, "fastest": ranked.variant.iloc[0],
                     "lead over runner-up %": 100 * (ranked.ms_median.iloc[1] / ranked.ms_median.iloc[0] - 1),
                     "auto picks": pick, "auto's cost vs fastest %": 100 * (picked.ms_median / ranked.ms_median.iloc[0] - 1),
                     "spread of the pick (ms)": picked.ms_max - picked.ms_min})
    choice = pd.DataFrame(rows)
    display(choice.style.hide(axis="index").format({"lead over runner-up %": "{:.1f}", "auto's cost vs fastest %": "{:.1f}",
                                                    "spread of the pick (ms)": "{:.4f}"}))
    cost = choice["auto's cost vs fastest %"] / 100
    print(f"auto picks the fastest measured variant at {int((choice['auto picks'] == choice['fastest']).sum())} of "
          f"{len(choice)} shapes; where it does not, it costs at most {100 * cost.max():.1f} % "
          f"(geomean over all shapes: {100 * (np.exp(np.log1p(cost).mean()) - 1):.1f} %).")

# %% [markdown]
# Where the runner-up is within the spread of the measurement, "fastest" is a coin toss, and a fixed rule is the honest
# choice: it is one compiled kernel per `D`, it never loses by more than the table shows, and it changes only when new
# measurements show a shape where it loses by more than their noise.
#
# ## 8. On an H100/H200: run it

# %%
spec = gpus.current()
if spec is not None and spec.arch == "sm_90a":
    import kmeans_kernels
    g = torch.Generator(device="cuda").manual_seed(int(torch.randint(0, 2**31, ()).item()))
    x = torch.randint(-3, 4, (4099, 128), device="cuda", generator=g).to(torch.bfloat16)
    c = torch.randint(-3, 4, (1000, 128), device="cuda", generator=g).to(torch.bfloat16)
    want = reference.assign(x, c)
    for v in hopper.VARIANTS:
        print(v, "equals the reference bit for bit:", torch.equal(kmeans_kernels.assign(x, c, variant=v), want))
else:
    print(f"No H100/H200 here ({gpus.describe()}): the kernels above were compiled and inspected, not run.")

# %% [markdown]
# ## Take-aways
#
# * The WGMMA layout makes 8 lanes of a warp want the same 32 norms; staging them once per warp (4 coalesced loads per
#   lane) and shuffling them out replaces 32 loads per thread and tile with 4 loads and 32 shuffles.
# * The SASS shows exactly that, plus the per-column bounds checks that disappear with the loads.
# * On Hopper the baseline read norms through L1, not through a shared-memory buffer with barriers as on the B200, so
#   the gain to expect is different from the PR's; section 4 says what it was on our H200, and `auto` follows it.
# * The larger step was structural: one accumulator and two CTAs per SM instead of two accumulators in one, and
#   256-wide tiles with ping-ponging warpgroups at `D = 256`. Section 5 has the probe that chose it and the run that
#   measured it against flashlib.

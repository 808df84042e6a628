# %% [markdown]
# # 03 · ILP2: two compare-select chains instead of one
#
# The serial kernel of notebook 02 scans each row with one chain: every compare waits for the select before it.
# The first change of flashlib PR #22 (seed 000) splits that chain in two, over the even and the odd columns, and
# merges the two winners once at the very end. Same work, half the dependency depth: the scheduler can interleave
# the two chains and hide the latency of each compare-select behind the other.
#
# **After this notebook you will know**
#
# * what `reduce.scan_ilp2` and `reduce.merge_chains` do, and why the answer (ties, NaN) does not change;
# * how to *measure* "two independent chains" in the SASS: the compare-select dependency depth, serial vs ILP2;
# * what it did on the H200 per shape, and what the PR author measured on a B200.
#
# Everything runs on a CPU; the kernels are compiled for `sm_90a`, not run, unless an H100/H200 is present.

# %%
import inspect

import matplotlib.patches as patches
import matplotlib.pyplot as plt
import pandas as pd
import torch
from IPython.display import Markdown, display

from kmeans_kernels import hopper, reduce, reference, sass_checks
from workbook import gpus, plots, pr, records

print(gpus.describe())

# %% [markdown]
# ## 1. The idea: latency, not work
#
# A compare-select pair (`FSETP` then `FSEL`) takes a few cycles of latency before its result can be used. With
# one chain, a warp issues one pair and waits; with two independent chains it issues a pair of each and waits
# once. The count of instructions is the same; the length of the critical path halves. Schematic, for 8 columns
# of one row:

# %%
def draw_chains(ax, columns=8, latency=1.0):
    for name, y, chains, color in (("serial: 1 chain", 1.2, 1, "#9ecae1"), ("ilp2: 2 chains", 0.0, 2, "#fdae6b")):
        for j in range(columns):
            chain = j % chains
            step = j // chains
            x0 = step * latency
            ax.add_patch(patches.FancyBboxPatch((x0, y + 0.45 * chain), 0.85 * latency, 0.38,
                                                boxstyle="round,pad=0.02", color=color))
            ax.text(x0 + 0.42 * latency, y + 0.45 * chain + 0.19, f"col {j}", ha="center", va="center", fontsize=7)
            if step:
                ax.annotate("", xy=(x0, y + 0.45 * chain + 0.19), xytext=(x0 - 0.15 * latency, y + 0.45 * chain + 0.19),
                            arrowprops=dict(arrowstyle="->", color="0.3", lw=0.8))
        ax.text(columns * latency + 0.1, y + 0.2 * chains, f"{name}\ndepth {columns // chains}", va="center",
                fontsize=8)
    merge_x = columns // 2 * latency + 0.3
    ax.add_patch(patches.FancyBboxPatch((merge_x, 0.2), 0.85 * latency, 0.45, boxstyle="round,pad=0.02",
                                        color="#a1d99b"))
    ax.text(merge_x + 0.42 * latency, 0.42, "merge\n(s, k)", ha="center", va="center", fontsize=7)
    for y in (0.19, 0.64):
        ax.annotate("", xy=(merge_x, 0.42), xytext=(merge_x - 0.45, y), arrowprops=dict(arrowstyle="->", lw=0.8))
    ax.set_xlim(-0.2, columns * latency + 1.8)
    ax.set_ylim(-0.2, 1.8)
    ax.axis("off")
    ax.set_title("One compare-select per column; a box waits for the box before it in its chain. "
                 "ILP2 pays one merge at the end (after the last tile, not per tile).", fontsize="medium")


fig, ax = plt.subplots(figsize=(11, 2.6), layout="constrained")
draw_chains(ax)
plt.show()

# %% [markdown]
# ## 2. The code
#
# `scan_ilp2` keeps two (score, index) pairs per row, chain 0 over the even columns and chain 1 over the odd ones
# (from the package, `kmeans_kernels/reduce.py`):

# %%
print(inspect.getsource(reduce.scan_ilp2))

# %% [markdown]
# The chains live in the running-winner tensors `(chains, rows)` from `reduce.new_winners`, so they carry across
# all centroid tiles. Only after the last tile does the kernel fold chain 1 into chain 0, by (score, index), and then
# merge the four lanes of the quad as in notebook 02:

# %%
print(inspect.getsource(reduce.merge_chains))
src = inspect.getsource(hopper.HopperAssign.kernel)
start = src.index("            reduce.merge_chains")
print("...in HopperAssign.kernel, after the tile loop:\n" + src[start:].rstrip())

# %% [markdown]
# In the Hopper backend the choice is one table, `hopper.VARIANT_SPECS` (variant → scan, and what else the
# variant changes), and `chains_of` sizes the winner tensors:

# %%
print("scan per variant:", {v: spec.scan for v, spec in hopper.VARIANT_SPECS.items()})
print({scan: reduce.chains_of(scan) for scan in reduce.SCANS})

# %% [markdown]
# **Why the answer does not change.** Each chain is itself a serial scan in increasing column order, so it keeps the
# lowest index among its own equal scores, and never a NaN. Two tied columns in different chains (an even and an odd
# one) are resolved by the merge, which compares `(score, index)` pairs: the lower index wins. That is a total order,
# so the result is the reference's whatever the split. A model of the data flow in plain Python, on fresh random
# small-integer data with many exact ties and some NaN centroids, against `kmeans_kernels.reference`:

# %%
def beats_pair(a, b):
    """reduce.beats in Python: (score, index) a comes before b."""
    return a[0] < b[0] or (a[0] == b[0] and a[1] < b[1])


def ilp2_model(row_scores):
    """Per lane of the quad: chains over even / odd columns, merge_chains; then merge_lanes."""
    lanes = []
    for q in range(4):
        chains = [(float("inf"), reduce.NO_WINNER)] * 2
        mine = [k for k in range(len(row_scores)) if (k % 8) // 2 == q]   # lane q's columns, increasing
        for j, k in enumerate(mine):
            if row_scores[k] < chains[j % 2][0]:
                chains[j % 2] = (row_scores[k], k)
        lanes.append(chains[1] if beats_pair(chains[1], chains[0]) else chains[0])
    for offset in (1, 2):
        lanes = [lanes[q ^ offset] if beats_pair(lanes[q ^ offset], lanes[q]) else lanes[q] for q in range(4)]
    return lanes[0][1]


g = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ()).item()))  # fresh data on every run
x = torch.randint(-2, 3, (300, 32), generator=g).to(torch.bfloat16)
c = torch.randint(-2, 3, (256, 32), generator=g).to(torch.bfloat16)
c[torch.randperm(256, generator=g)[:20], 0] = float("nan")
s = reference.scores(x, c)
want = reference.assign(x, c)
got = torch.tensor([ilp2_model(row.tolist()) for row in s], dtype=torch.int32)
best = s.nan_to_num(nan=float("inf")).min(1, keepdim=True).values
split_ties = sum(len({k % 2 for k in torch.nonzero(row == b).flatten().tolist()}) == 2 for row, b in zip(s, best))
print(f"{split_ties} rows have their best score tied between an even and an odd column; the model agrees with "
      f"the reference on {int((got == want).sum())} of {len(x)} rows")
assert torch.equal(got, want)

# %% [markdown]
# ## 3. The evidence: the chain is half as deep
#
# Both variants compiled for `sm_90a` (a few seconds each). `sass_checks.compare_select_depth` walks a def-use graph
# over registers and predicates and returns the longest path through compare-select ops; as in notebook 02 we give it
# the Hopper scan block (the branch-free run with the most compare-selects; Hopper has no TMEM load to start from).
# Every score is one `FADD`, which counts the tiles in that block.

# %%
arts = {v: hopper.compile(v, 65536, 128, 4096) for v in ("serial", "ilp2")}


def scan_evidence(sass_text):
    block = sass_checks.scan_block(sass_text, after=None)
    depth = sass_checks.compare_select_depth(sass_text, after=None)
    work = sass_checks.compare_select_count(sass_text, after=None)
    tiles = sass_checks.scan_tiles(block)       # 2 rows x 32 columns per thread and tile
    return {"tiles in the scan block": tiles, "compare-select ops": work, "per tile": work / tiles,
            "chain depth": depth, "depth per tile": depth / tiles}


evidence = pd.DataFrame({v: scan_evidence(a.sass) for v, a in arts.items()}).T
display(evidence.style.format("{:g}"))
ratio = evidence.loc["ilp2", "chain depth"] / evidence.loc["serial", "chain depth"]
print(f"ILP2 / serial depth = {ratio:.2f}, with {evidence.loc['ilp2', 'per tile']:g} vs "
      f"{evidence.loc['serial', 'per tile']:g} compare-selects per tile")
assert ratio < 0.6 and evidence.loc["ilp2", "per tile"] == evidence.loc["serial", "per tile"]

# %%
fig, ax = plt.subplots(figsize=(6, 3), layout="constrained")
bars = ax.barh(["serial", "ilp2"], evidence["depth per tile"], color=["#9ecae1", "#fdae6b"])
ax.bar_label(bars, fmt="%g", padding=3)
ax.invert_yaxis()
ax.set_xlabel("longest compare-select chain per tile (SASS, sm_90a, D = 128)")
ax.set_title("Same work, half the critical path", fontsize="medium")
ax.spines[["top", "right"]].set_visible(False)
plots.caption(ax, "compiled here with hopper.compile; depth by sass_checks.compare_select_depth")
plt.show()

# %% [markdown]
# A caveat the SASS already hints at: a Hopper thread scans **two rows** (`r` and `r + 8` of the WGMMA layout), and
# those are independent chains already. So the serial kernel has 2 chains in flight per thread and ILP2 has 4. The
# B200 kernel of the PR gives each thread one row (one TMEM lane), so there ILP2 goes from 1 chain to 2. Expect a
# smaller effect here than in the PR; the measurements decide.
#
# ## 4. The number: H200, serial vs ILP2
#
# From `data/measured/h200/kmeans_assign.csv` (written by `make bench-kmeans` on an H200; the most recent run that
# measured both variants). Speedup = serial median / ILP2 median − 1.

# %%
TABLE = records.path("h200", "kmeans_assign")
SOURCE = TABLE.relative_to(records.DATA.parent)
SHAPE = ["N", "D", "K"]


measured = records.last_run(records.read("h200", "kmeans_assign"), [("ours", "serial"), ("ours", "ilp2")],
                            min_shapes=13)   # a run that timed all 13 seed shapes
table = records.versus(measured, "ilp2", "serial", SHAPE) if not measured.empty else pd.DataFrame()
if table.empty:
    display(Markdown(f"**No H200 run with both `serial` and `ilp2` in `{SOURCE}` yet.** They are recorded on an "
                     "H200 with `make bench-kmeans`; re-run this notebook afterwards. No number is shown until it "
                     "is measured."))
else:
    display(table.style.hide(axis="index").format(precision=4).format({"speedup %": "{:+.1f}"}))
    fig = plots.speedup_bars(pr.shape_labels(table, sep="\n"), table["speedup %"].tolist(),
                             title="H200: ILP2 vs serial (our kernels)", xlabel="N x D x K",
                             source=f"{SOURCE} ({', '.join(measured['gpu'].unique())}), kmeans_kernels.bench")
    plt.show()
    resolved = (table["serial ms"] - table["ilp2 ms"]).abs() > table[["serial range", "ilp2 range"]].max(axis=1)
    print(f"{int(resolved.sum())} of {len(table)} shapes differ by more than the larger min-max spread of the two "
          "kernels; the others are within the noise of the measurement.")
    print("provenance of these rows:")
    display(measured[list(records.PROVENANCE)].drop_duplicates().style.hide(axis="index"))

# %% [markdown]
# How to read it: the `range` columns are the spread (slowest − fastest of the 30 timed calls) of each kernel. A
# speedup smaller than that spread is not a result, however the bar looks.
#
# ## 5. What the PR author measured on a B200 (not here)
#
# Seed 000 lists, per shape, which path the PR ships and how much faster than `main` it was. The rows where that path
# is ILP2 (`data/pr/`, transcribed; measured on a B200 by the PR author, not here):

# %%
main = pr.main_table()
ilp2_rows = main[main.pr_path == "ilp2"]
display(ilp2_rows.drop(columns="source").style.hide(axis="index"))
fig = plots.speedup_bars(pr.shape_labels(ilp2_rows, sep="\n"), ilp2_rows["improvement_pct"].tolist(),
                         title="PR #22 vs main, shapes where it ships ILP2\n(B200, measured by the PR author)",
                         xlabel="N x D x K", source=f"data/pr/kmeans_pr22_main.csv (seed {pr.SEED_KMEANS}); "
                                                    "B200, not measured here")
plt.show()
at_d64 = ilp2_rows[ilp2_rows.D == 64].sort_values("K")["improvement_pct"]
assert at_d64.is_monotonic_increasing and ilp2_rows[ilp2_rows.D == 256]["improvement_pct"].max() > at_d64.max()

# %% [markdown]
# On the B200, the gain grows with `K` at `D = 64` (0.1 % → 5.3 %), is largest at `D = 256` (9 % to 16 % from
# `K = 4096` up), and is nothing at `65,536 x 64 x 512`, a kernel of a few tens of microseconds where the scan is a
# small part of the time. (At `D = 128` the PR ships norm broadcast instead: next notebook.)
#
# ## 6. On an H100/H200: run it

# %%
spec = gpus.current()
if spec is not None and spec.arch == "sm_90a":
    import kmeans_kernels
    g = torch.Generator(device="cuda").manual_seed(int(torch.randint(0, 2**31, ()).item()))
    x = torch.randint(-3, 4, (4099, 128), device="cuda", generator=g).to(torch.bfloat16)
    c = torch.randint(-3, 4, (1000, 128), device="cuda", generator=g).to(torch.bfloat16)
    want = reference.assign(x, c)
    for v in ("serial", "ilp2"):
        print(v, "equals the reference bit for bit:", torch.equal(kmeans_kernels.assign(x, c, variant=v), want))
else:
    print(f"No H100/H200 here ({gpus.describe()}): the kernels above were compiled and inspected, not run.")

# %% [markdown]
# ## Take-aways
#
# * ILP2 keeps the work and halves the dependency depth of the scan; the SASS shows it: the same compare-selects
#   per tile, a chain half as deep.
# * The answer is unchanged because both the chain merge and the lane merge compare `(score, index)` pairs.
# * How much it buys depends on how many chains were in flight before: one per thread on the B200, two per thread
#   on Hopper (two rows). The next notebook, `04_kmeans_norm_broadcast`, attacks the other per-column cost: loading
#   the half norms.

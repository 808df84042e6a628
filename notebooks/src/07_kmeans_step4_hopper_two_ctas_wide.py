# %% [markdown]
# # 07 · k-means step 4: keep the tensor cores busy while the argmin runs (two CTAs per SM, or wide ping-pong tiles)
#
# Steps 1-3 made a tile's argmin cheaper. They all share one shape of time: both consumer warpgroups issue a tile's
# WGMMAs, wait for them, then fold the tile on the CUDA cores, and meanwhile the SM's tensor cores have nothing to do.
# `kmeans_kernels/steps/step4_hopper.py` is what the Hopper kernel needs beyond the seed to fill that gap, and it is
# the production kernel: this notebook maps it onto `kmeans_kernels.hopper` and measures what is left between them.
#
# **Objectives.** After this notebook you can
#
# * explain the two ways to overlap the argmin with WGMMA: **two CTAs per SM** (what shared memory and registers that
#   costs) and **one CTA with 256-wide tiles whose warpgroups ping-pong** (why it needs them);
# * compute, before compiling, whether two CTAs fit (ring slots, the register cap) and check it in the cubin;
# * read the whole progression, step 1 to step 4, as % of flashlib's kernel and % of the floor, with intervals;
# * read Nsight Compute's PC samples by code region, and test whether two kinds of work overlap by running them apart.
# * start the MMA's accumulator at the negated half norms, so that the fold reads finished scores, and count in the
#   SASS what that removes from each tile.

# %%
import matplotlib.patches as patches
import matplotlib.pyplot as plt
import pandas as pd
import torch
from IPython.display import display

from kmeans_kernels import bench, hopper
from kmeans_kernels.steps import exercises, host, results, step3_norm_broadcast, step4_hopper, trial, try_step
from workbook import gpus, plots, sass, stepper

step4 = step4_hopper
run, NOTE = results.latest_run()
print(gpus.describe())
print(NOTE)

# %% [markdown]
# ## 1. The idea and its arithmetic
#
# **Two CTAs per SM** (`wide=False`, 128-wide tiles): while one CTA folds a tile, the other's WGMMAs run. Each CTA then
# gets half the SM's shared memory (the ring shrinks) and at most 96 registers per thread, which the launch asks ptxas
# for with `min_blocks_per_mp=2`. Not the 112 that 65536 / (2 × 288) suggests: the register file is four sub-partitions
# of 16384, one per warp scheduler, the 18 warps are dealt to them in turn (five to some), and 16384 / (5 × 32) = 102,
# in steps of 8, is 96 (`gpus.register_cap`). A 64 × 128 fp32 accumulator is 64 of them. **Wide ping-pong** (`wide=True`): a 64 × 256 accumulator is 128 registers, too many for two
# CTAs; instead the two warpgroups take turns at the tensor cores (named barriers 1 and 2), one folding tile `t` while
# the other's WGMMAs for `t` run, and every WGMMA reads the point tile once per 256 centroids instead of 128.

# %%
def draw_two_ctas(ax, tiles=3, mma=1.0, fold=0.8):
    """Two CTAs on one SM: each alternates WGMMA and argmin; the tensor cores take whichever has WGMMAs ready."""
    colors, t_free, ready = ("#4c72b0", "#dd8452"), 0.2, [0.2, 0.2]
    for t in range(tiles):
        for cta in (0, 1):
            start = max(t_free, ready[cta])
            ax.add_patch(patches.Rectangle((start, 1.15), mma - 0.05, 0.7, color=colors[cta]))
            ax.text(start + mma / 2, 1.5, f"CTA {cta} tile {t}", ha="center", va="center", fontsize=7, color="white")
            t_free = start + mma
            ax.add_patch(patches.Rectangle((t_free, 0.15 if cta == 0 else 2.15), fold - 0.05, 0.7, color=colors[cta],
                                           alpha=0.5))
            ready[cta] = t_free + fold
    ax.set_yticks([0.5, 1.5, 2.5], ["CTA 0 argmin\n(CUDA cores)", "tensor cores", "CTA 1 argmin\n(CUDA cores)"])
    ax.set_xlim(0, t_free + fold + 0.2)
    ax.set_ylim(0, 3)
    ax.set_xticks([])
    ax.set_xlabel("time (schematic)")
    ax.spines[["top", "right"]].set_visible(False)


fig, ax = plt.subplots(figsize=(10, 2.6), layout="constrained")
draw_two_ctas(ax)
ax.set_title("Step 4, two CTAs per SM: one CTA's argmin runs under the other's WGMMAs", fontsize="medium")
plots.caption(ax, "schematic; the ping-pong of the wide variant is the same picture with two warpgroups of one CTA")
plt.show()

# %% [markdown]
# What that costs in shared memory, per `D` (computed from the files' own rules):

# %%
rows = [{"D": D, "step 3 ring slots (1 CTA)": step3_norm_broadcast.stages_for(D), "step 4 CTAs per SM": step4.ctas_per_sm(D),
         "step 4 ring slots": step4.stages_for(D), "wide ring slots": step4.stages_for(D, step4.WIDE_BLOCK_N),
         "wide possible": step4.stages_for(D, step4.WIDE_BLOCK_N) >= -(-D // step4.BLOCK_D)}
        for D in (64, 128, 256, 512)]
display(pd.DataFrame(rows).style.hide(axis="index"))

# %% [markdown]
# **Exercise 1 (predict).** Up to which `D` do two CTAs share an SM? How many registers may a thread use then? And how
# many ring slots does a CTA get at `D = 128`?

# %%
my_d_max, my_registers, my_slots = None, None, None   # your predictions
for checker, answer in ((exercises.two_ctas_up_to, my_d_max), (exercises.register_cap, my_registers),
                        (exercises.ring_slots, my_slots)):
    print(checker(answer) if answer is not None else f"{checker.__name__}: set your prediction and re-run.")

# %% [markdown]
# <details><summary>Solution</summary>
#
# `exercises.two_ctas_up_to(256)`, `exercises.register_cap(96)`, `exercises.ring_slots(5)`: at `D = 256` the point
# tile is 64 KiB and three 16 KiB slots still fit half an SM; past it a CTA would get two. Two CTAs of 256 threads
# would get 128 registers each (`gpus.register_cap(256, 2)`): the producer warp costs every thread 32.
# </details>
#
# ## 2. The code that changed

# %%
stepper.diff(step3_norm_broadcast, step4, module_docstring=False)

# %% [markdown]
# ## 3. The evidence in the cubin
#
# Registers per thread (from the cubin), the shared memory a CTA takes (point tile, ring, barriers) and what fits on
# an SM, for both forms:

# %%
facts, arts = [], {}
for D, wide in ((128, False), (256, True)):
    kernel = step4.AssignKernel(D, host.DTYPES[torch.bfloat16], wide)
    arts[wide] = art = trial.compiled(step4, D, wide=wide)
    regs = max(sass.registers(art.cubin).values())
    smem = step4.BLOCK_M * kernel.d_blocks * step4.BLOCK_D * 2 + kernel.stages * kernel.block_n * step4.BLOCK_D * 2 + 1024
    fits = min(65536 // (9 * -(-regs * 32 // 256) * 256), step4.SM_SMEM_BYTES // (smem + 1024))
    facts.append({"D": D, "wide": wide, "registers per thread": regs, "shared memory per CTA (KiB)": smem / 1024,
                  "CTAs that fit an SM": fits, "promised": kernel.ctas,
                  "WGMMA": sorted({i.opcode for i in sass.instructions(art.sass) if i.base == "HGMMA"})[0]})
display(pd.DataFrame(facts).style.hide(axis="index").format({"shared memory per CTA (KiB)": "{:.3g}"}))
assert all(f["CTAs that fit an SM"] >= f["promised"] for f in facts)

# %% [markdown]
# ## 4. Check it, time it

# %%
try_step(step4)

# %% [markdown]
# ## 5. The number: step 4 / step 3 on the H200
#
# In the benchmark step 4 runs as `assign` picks (`wide_for`: wide where `D >= 256` and `K >= 4096`).

# %%
if run.empty:
    print(NOTE)
else:
    display(results.table_3sig(results.ratios(run, "ours/step4_hopper")).set_caption("kernel time"))
    fig = results.plot_ratios(run, ["ours/step4_hopper"], NOTE)
    plt.show()

# %% [markdown]
# ## 6. Step 4 and the production kernel
#
# The production kernels (`kmeans_kernels/hopper.py`) are one class for all variants, with the launch path of
# `kmeans_kernels.assign`. Compiled here, the step's two forms against the production variants they correspond to
# (opcode counts of the whole kernel). They were identical until the production kernel learned to walk several point
# tiles per CTA (`hopper.grid_cap`, one wave where one CTA holds an SM); step 4 keeps a CTA per point tile. The
# opcodes that differ are what that loop brought: the point buffer's release and reload (`SYNCS`), the L2 prefetch of
# the next tile (`UTMAPF`), the division that counts a CTA's tiles (`I2F`, `MUFU`, `F2I`), the loop's
# uniform-register arithmetic, and a few different choices ptxas made around them.

# %%
pairs = {"norm_broadcast": (128, False), "wide": (256, True)}
same = {}
for variant, (D, wide) in pairs.items():
    ours = arts[wide]
    theirs = hopper.compile(variant, 65536, D, 4096)
    delta = stepper.sass_delta(theirs.sass, ours.sass, changed_only=True)
    same[f"step 4 (wide={wide}) vs hopper {variant}, D={D}"] = "identical opcode counts" if delta.empty else \
        f"{len(delta)} opcodes differ"
display(pd.Series(same, name="SASS").to_frame())
rules = pd.DataFrame([{"N": N, "D": D, "K": K, "step 4 wide": step4.wide_for(N, D, K),
                       "production auto": hopper.auto_variant(N, D, K)} for N, D, K in bench.seed_shapes()])
print("seed shapes where step 4's rule and production auto pick differently:",
      int((rules["step 4 wide"] != (rules["production auto"] == "wide")).sum()), "of", len(rules))

# %% [markdown]
# What is left between them is the call path (validation and dispatch in `kmeans_kernels.assign`, the same launch
# cache). The benchmark times production `auto` against step 4 on every shape; the ratio measures what that costs.
# The rows shown were recorded when `auto` ran `norm_broadcast` outside `wide`. It now runs the same kernel with a
# leaner scan there (`lean_select`: two scores per compare-select step, 6-8 % faster at D = 128, `kmeans_floor.csv`),
# and at D <= 128 with its two warpgroups taking turns at the tensor cores as `wide`'s do and the half norms in the
# accumulator (`lean_ping_pong`, a further 1-7 %, `kmeans_lean_ping_pong.csv`; then `folded_norms`, section 10):

# %%
if run.empty:
    print(NOTE)
else:
    r = results.ratios(run, "ours/auto")
    display(results.table_3sig(r))
    g = results.geomean_ci(r.ratio, r.lo, r.hi)
    print(f"production auto / step 4: {g[0]:.3g} [{g[1]:.3g}, {g[2]:.3g}] geomean kernel time, "
          f"per shape {dict(r.verdict.value_counts())}")

# %% [markdown]
# ## 7. The progression, step 1 to step 4
#
# Every step as % of flashlib's Hopper CuTe kernel (its time / ours: above 100 % is faster than flashlib) and as % of
# the floor (`kmeans_kernels.floor`), geometric means over the seed shapes with 95 % intervals; the production kernel as
# a dashed line. Both from the same benchmark run.

# %%
table = results.progression(run) if not run.empty else pd.DataFrame()
if table.empty:
    print(NOTE)
else:
    display(results.table_3sig(table))
    fig = results.plot_progression(table, NOTE)
    plt.show()

# %% [markdown]
# ## 8. The same turns on 128-wide tiles: `lean_ping_pong`
#
# With two CTAs per SM nothing orders the four consumer warpgroups: within a CTA both issue a tile's WGMMAs at once,
# wait, then both fold, and the schematic of section 1 is the best case. At D = 64 a 128 x 128 tile is about 0.35 us of
# tensor work and 0.45 us of issue-bound argmin per SM, and the kernel takes close to their sum (`tools/host_cost.py
# --kmeans`, CUPTI). `lean_ping_pong` is `lean_select` with `wide`'s turns: one field of the recipe changes, and the
# kernel's ping-pong branch (named barriers 1 and 2) does the rest. The A/B below takes turns with `lean_select` round
# by round, in both timings; the last lines are two experiments that did not pay: one CTA of four warpgroups in a
# single ring of turns, and the next tile's centroid norms fetched a tile ahead (`prefetch_norms`).

# %%
from kmeans_kernels import variants
from workbook import DATA, records

print("lean_select:   ", variants.recipe("sm_90a", "lean_select"))
print("lean_ping_pong:", variants.recipe("sm_90a", "lean_ping_pong"))
ab = records.read("h200", "kmeans_lean_ping_pong")
if ab.empty:
    print("not recorded yet: python tools/kmeans_ab.py --new lean_ping_pong --old lean_select")
else:
    ab = ab[ab.date == ab.date.max()]
    ab_note = f"NVIDIA H200, {ab.date.iloc[0][:10]}, commit {ab.commit.iloc[0]}: data/measured/h200/kmeans_lean_ping_pong.csv"
    for timing in ("kernel", "latency"):
        display(results.table_3sig(results.ratios(ab, "ours/lean_ping_pong", timing=timing))
                .set_caption(f"lean_ping_pong / lean_select, {timing} ({ab_note})"))
    fig = results.plot_ratios(ab, ["ours/lean_ping_pong"], ab_note)
    plt.show()
for probe, variant in (("kmeans_four_warpgroups_fba53fb", "four_warpgroups"), ("kmeans_prefetch_norms_dfb3984", "prefetch_norms")):
    tried = pd.read_csv(DATA / f"measured/h200/probes/{probe}.csv")
    tried = tried[(tried.variant == variant) & (tried.timing == "kernel")]
    print(f"{variant}, time / its reference (lean_ping_pong at D <= 128, wide at 256), by D:",
          tried.groupby("D").ratio.agg(["min", "max"]).round(2).to_dict("index"))

# %% [markdown]
# The turns pay a few per cent at D = 64 and less at D = 128, well below the schematic's promise: they order the two
# warpgroups of one CTA, but the SM's two CTAs still meet at the tensor cores unordered. Ordering all four in one ring
# (one CTA of 256 points) is much slower, and more so the larger the MMA's share: only one warpgroup's 64-row WGMMAs
# are then in flight at a time, and one such stream does not keep the tensor cores busy. Fetching the next tile's
# norms ahead was 4-14 % slower: its loads sit before the turn barrier and delay the warpgroup's WGMMA issue, and the
# MMA issue is what these kernels wait on (the profiler: the tensor pipe 39 -> 35 % busy; `notes/perf-log.md`).
# `auto` ran `lean_ping_pong` at D <= 128 until the change of section 10.

# %% [markdown]
# ## 9. Where the warps stand: the profiler's samples
#
# Nsight Compute can sample, every few thousand cycles, the program counter and stall reason of each warp on each
# SM (`ncu --section SourceCounters`; `ncu -i report --page source --csv --print-source sass` exports them per SASS
# instruction). Sorting `lean_ping_pong`'s samples by the code they land on says where its time goes. A second
# probe takes the two roles apart in one kernel: warpgroup 0 only multiplies, warpgroup 1 only folds, and they
# share nothing but the ring (`notes/patches/kmeans-probe-roles.patch`); if the folds hid under the MMAs, both
# together would take as long as the slower one alone.

# %%
from kmeans_kernels.steps import evidence

probes = DATA / "measured/h200/probes"
where = evidence.where_warps_are(evidence.pc_sampling(probes / "kmeans_pc_sampling_8e2dd7a.csv.gz"))
where.index = ["65536 x 64 x 16384", "262144 x 128 x 4096"]          # in the order they were profiled
display(where.style.format("{:.1f}").set_caption("% of sampled warps (NVIDIA H200, lean_ping_pong, commit 8e2dd7a)"))
evidence.plot_where_warps_are(where, "NVIDIA H200, lean_ping_pong, commit 8e2dd7a: probes/kmeans_pc_sampling_8e2dd7a.csv.gz")
plt.show()
roles = evidence.roles_table(pd.read_csv(probes / "kmeans_roles_8e2dd7a.csv"))
display(roles.style.format("{:.2f}").set_caption("us per call, median of 7 rounds of 10 calls (probes/kmeans_roles_8e2dd7a.csv)"))
evidence.plot_roles(roles, "NVIDIA H200, lean_ping_pong + notes/patches/kmeans-probe-roles.patch: probes/kmeans_roles_8e2dd7a.csv")
plt.show()

# %% [markdown]
# Two thirds of the samples find a consumer warp at work on a tile, and only about a tenth each waiting for its own
# WGMMAs, for ring data, or for its turn: the schedule is not what leaves the tensor cores idle. The roles probe
# says what does. At D = 64 the MMAs alone take 91 us and the folds alone 131 us, and the two at once (no turns, no
# dependence between them but the shared ring) take 220 us: their sum (both / sum 0.99), where full overlap would
# have cost 131. At D = 128 running them together saves 15 % of the sum, still far from the longer alone. On the
# H200 the folds and the WGMMAs of another warpgroup on the same SM slow each other down about as much as if they
# took turns. What they compete for is the board's power. Run back to back for seconds on an H100, whose limit is
# the H200's 700 W (`nvidia_h100_80gb_hbm3/probes/kmeans_ablation_clocks_e644209.csv`, nvidia-smi sampling),
# `lazy_index` holds the board at its power cap with the SM clock at 1.56 GHz at 262144 x 128 x 16384; a build
# without the fold is at the cap too (1.49 GHz), and only one with a quarter of the WGMMAs runs faster (1.88 GHz;
# 1.98, off the cap, at 65536 x 64 x 16384). At
# the cap a kernel's time is its energy, and the fold's energy adds to the WGMMAs' however the two are scheduled.
# The lever left on Hopper is less energy per score, not more overlap. Fewer instructions alone is not it: a build
# that fills the accumulators' norms with 16-byte loads, 32 register copies fewer per tile and thread, ran 5-22 %
# *slower* on an H100, with more cycles at the same or a higher clock
# (`nvidia_h100_80gb_hbm3/probes/kmeans_fold_instructions_4717722.csv`). What did lower the energy is reading the
# points from registers instead of shared memory (the RS form of WGMMA: a third less shared-memory traffic per
# score): at one CTA per SM it took 0.86-0.93 of the time at D = 128 and 5 % less energy per call at the cap
# (`kmeans_points_in_registers_4717722.csv`). It does not fit the two-CTA kernel: two CTAs of nine warps put five
# warps on one sub-partition, which caps a thread at 96 registers (`gpus.register_cap`), and ptxas then spills; and
# one CTA per SM costs more than the registers give back. Blackwell keeps the accumulators in tensor memory, away
# from the registers the fold works in (notebook 08).

# %% [markdown]
# ## 10. Fewer instructions per score: the half norms in the accumulator (`folded_norms`)
#
# WGMMA computes `D = A·B + D`. Start `D` at `-0.5 ||c_k||^2` instead of zero and the tensor cores hand back
# `dot - 0.5 ||c_k||^2`, the score negated: the fold's subtraction is gone, one FADD per score. So are the norms'
# shuffles and their staging arithmetic: the producer warp, idle most of the time (section 9), writes the tile's 128
# negated half norms beside the tile's first ring slot before that slot's "full" arrive, so they are published with
# the TMA bytes, and each consumer thread copies its 32 columns' norms into both of its rows' accumulators (16
# shared-memory loads of two floats, 32 register copies). The scan is `lean_select`'s pairs scan on `-acc`, a sign
# on the compares' operands. Prediction from the count below: the tile block about 28 % shorter at D = 64, and since
# the time is close to MMA time + fold time (section 9), about 15 % faster there and less at D = 128. Exact inputs
# stay bit for bit: the sum of `-h` and the exact products is exact, and `-(dot - h) = h - dot` carries NaN, the
# infinities and the tie rule unchanged. (Only where the products are finite and their *sum* overflows fp32 can
# the running sum that starts at `-h` stay finite where the reference's dot is +inf.)

# %%
import inspect

print(f"lean_ping_pong: {variants.recipe('sm_90a', 'lean_ping_pong')}\nfolded_norms:   {variants.recipe('sm_90a', 'folded_norms')}\n")
for method in (hopper.HopperAssign._stage_norms, hopper.HopperAssign._norms_into_acc):
    print(inspect.getsource(method))
fold = evidence.fold_block()          # compiled here, no GPU: the tile block of each variant's SASS
display(fold.style.set_caption("the tile block (scan, norms, next MMA issue) per thread and tile, SASS opcodes"))

# %%
ab = records.read("h200", "kmeans_folded_norms")
if ab.empty:
    print("not recorded yet: python tools/kmeans_ab.py --new folded_norms --old lean_ping_pong")
else:
    ab = ab[ab.commit == ab.commit.iloc[-1]]         # the newest build's runs (one per reference)
    ab_note = (f"NVIDIA H200, {ab.date.iloc[0][:10]}, commit {ab.commit.iloc[0]}: "
               "data/measured/h200/kmeans_folded_norms.csv (against lean_ping_pong; at D = 256 against wide)")
    for timing in ("kernel", "latency"):
        display(results.table_3sig(results.ratios(ab, "ours/folded_norms", timing=timing))
                .set_caption(f"folded_norms / its reference, {timing} ({ab_note})"))
    fig = results.plot_ratios(ab, ["ours/folded_norms"], ab_note)
    plt.show()

# %% [markdown]
# It paid, though not as predicted: 6-7 % at D = 64 with K >= 4096 and 11-15 % at D = 128, in both timings; level
# with `wide` at 65536 x 256 x 4096 and 2 % slower at 262144 x 256 x 4096, where the 256-wide tiles' fewer re-reads
# of the point tile matter more than the fold. D = 64 gained less than its shorter block promised: the fold is not
# the only cost there (one ring slot fewer, and the 32 register copies land inside the block at D = 64, outside it at
# D = 128). `auto` runs `folded_norms` at D <= 128; the floor table (`kmeans_floor.csv`) moved from 1.62x to 1.46x
# the floor, geometric mean back to back.
#
# One step further along the same lever is `lazy_index` (`reduce.scan_lazy`): a tree of FMNMX finds each row's best
# score of the tile (one instruction per score), and the column is searched only where that beats the row's winner,
# which past the first tiles is rare (about half the tiles at K = 4096, a fifth at 16384). Timed on an H100 against
# `folded_norms` (`data/measured/nvidia_h100_80gb_hbm3/kmeans_lazy_index.csv`), its first build paid where the fold
# sets the pace, at D <= 64 (0.89x the time at K = 16384), and was 3-8 % *slower* from D = 96 up, with fewer
# instructions: each row was one dependent chain (tree, shuffles, vote, branch, search), where the pairs scan runs
# four independent ones, and while the other warpgroup's longer MMA hides instructions, a chain's latency is what
# delays the next turn. Taking both rows' maxima together and searching in four chains, the same instruction count,
# bought 3-4 % back at D = 96 and 128 and made D = 64 faster still: 0.96x at K = 4096, 0.86x at 16384
# (`kmeans_lazy_rows.csv`). On the later build whose CTAs walk their point tiles in a loop, D = 96 and 128 gained
# too (`kmeans_lazy_index.csv`, an H100, kernel / latency): 262144 x 128 x 16384 0.929 [0.921, 0.931] / 0.932
# [0.923, 0.940], 1M x 128 x 4096 0.983 [0.982, 0.989] / 0.980 [0.975, 0.989], but 65536 x 128 x 512 1.095 [1.087,
# 1.103] / 1.045 [1.034, 1.063]: `auto` runs it at D <= 128 with K >= 4096.
#
# What did *not* pay: splitting each warpgroup's tile into two 64-wide accumulators, so that one half is folded while
# the other half's MMAs run (`probes/kmeans_halves_263b938.csv`, an H100, the variants kept only in the history). The
# barrier stalls of the turns went (ncu), but the tensor pipe was no busier (46 % against 44 % at 65536 x 64 x 16384,
# 60 % against 62 % at 65536 x 128 x 4096), and the time went up (halves / auto, kernel / latency: 1M x 128 x 4096
# 1.074 [1.058, 1.093] / 1.038 [1.006, 1.055], 262144 x 256 x 4096 1.300 [1.267, 1.316] / 1.253 [1.231, 1.275]). One cost we
# can name: a 64-wide WGMMA reads the point tile once per 64 centroids instead of 128; the profile does not say
# whether that is what sets the pace.
#
# **Exercise 2 (predict).** Each ring slot of `folded_norms` also holds its tile's 128 fp32 norms. How many slots
# does it get at D = 64, where `lean_ping_pong` gets 6? Check with `exercises.folded_slots(n)`.

# %%
my_folded_slots = None   # your prediction
print(exercises.folded_slots(my_folded_slots) if my_folded_slots is not None else "set your prediction and re-run.")

# %% [markdown]
# **Exercise 3 (edit and run).** In a copy of step 4, set `MIN_STAGES_TWO_CTAS = 2`. At which `D` does the kernel now
# run two CTAs per SM that did not before, and with how many ring slots? Load the copy with `stepper.load(path)` and call
# its `ctas_per_sm` and `stages_for`; on an H100/H200, `try_step(path)` times it against the original.
#
# <details><summary>Solution</summary>
#
# `D = 272` to `D = 320` (a padded point tile of 80 KiB): half an SM then holds two 16 KiB slots, and two CTAs share
# the SM, each with a ring shorter than a centroid tile (5 slices of 64), so the consumers retire WGMMA groups slot by
# slot. Whether the second CTA makes up for the short ring is a question for `try_step` on the GPU.
# </details>
#
# ## Take-aways

# %%
if table.empty:
    print(f"The progression appears here once the step benchmark has run ({NOTE}).")
else:
    last, first = table.loc["step4_hopper"], table.loc["step1_serial"]
    print(f"step 1 -> step 4: {first['geomean ms']:.3g} -> {last['geomean ms']:.3g} ms geomean kernel time; step 4 "
          f"at {last['% of floor']:.3g} % of the floor" + (f" and {last['% of flashlib']:.3g} % of flashlib's speed"
                                                        if "% of flashlib" in table else ""))

# %% [markdown]
# * In steps 1-3 the tensor cores wait while a CTA folds a tile. Step 4 overlaps the two: a second CTA per SM where
#   a 128-wide accumulator leaves room for one (the register cap and half the shared memory), or two warpgroups taking
#   turns on 256-wide tiles where the point tile is large and the centroid rows long.
# * Whether two CTAs fit follows from three numbers computed before compiling (point tile, ring slots, registers),
#   and the cubin confirms them.
# * Step 4 compiles to the machine code of the production variants but for one loop production added later (a CTA
#   walking several point tiles, section 6); what else remains between them is the call path, measured above.
# * The turns pay on 128-wide tiles too, but only a little (section 8): they order each CTA's warpgroups, not the two
#   CTAs that share the tensor cores; one ring over all four warpgroups orders them and starves the tensor cores.
# * Why overlap pays so little on the H200 (section 9): the warps are mostly at work, not waiting, and the MMAs and
#   the folds, run apart at once, take the sum of their times at D = 64 (0.85 of it at D = 128): the board runs at
#   its 700 W cap, where time is energy (clocks sampled on an H100). What is left is fewer instructions per score.
# * Fewer instructions per score is what paid (section 10): the MMA starts its sum at the negated half norms, and the
#   fold loses its subtraction and the norms' shuffles; 6-7 % at D = 64, 11-15 % at D = 128.

# %% [markdown]
# # 08 · Wave-tail balancing: fill the last wave of a persistent GEMM
#
# A persistent GEMM keeps one CTA (or one CTA pair) resident per *slot* and lets each walk a list of output
# tiles. When the number of tiles is not a multiple of the number of slots, the last wave runs partly empty
# and the GPU waits for a few stragglers. Seed 004 (cuda-oxide `gemm_sol_final` on B200) fixes this by
# re-cutting a few wide tiles into narrower ones so that the last wave is full.
#
# **You will learn**
#
# * how many waves a tiling takes, and what the partial last wave costs (the *tail*);
# * the seed's re-cutting rule: *g* wide tiles become *g + 1* narrow ones, adding one item and no work;
# * how `gemm_kernels.waves.plan` derives the seed's three B200 plans from M, N, 74 slots and the allowed
#   tile widths alone (no table of answers), and why it picks N192 at 4096³ but N224 at 8192³;
# * on which H200 shapes the same trick should pay (≥ 5 % predicted), and what was measured there;
# * why a persistent GEMM that matches cuBLAS clock for clock can still lose to it: DRAM bytes, power and the
#   clock, and how handing out tiles dynamically and in L2-sized bands wins that back (section 5);
# * stream-K and a deferred epilogue for the last percent at 4096³, and why neither paid at first (section 6);
# * how a timeline of every CTA, stamped by the kernel itself, found what the epilogue really cost, and what
#   deferring it properly moved (section 7);
# * why 4096³ could not be balanced with tiles in 64-column steps, how 240-wide tiles do it, why 248-wide ones
#   do not pay, and how a fairer turn order in the benchmark stopped handicapping cuBLAS (section 8).
#
# **What runs where.** Everything in sections 1 and 2 is arithmetic and runs on any CPU: the plans are
# *computed*, with one modelling assumption, stated where it is used. Section 3 puts measurements next to
# the predictions: the seed's B200 table, and our H200 runs when `data/measured/h200/gemm.csv` holds them.

# %%
import inspect

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Markdown, display

from gemm_kernels import bench as gemm_bench
from gemm_kernels import configs, hopper, hopper_options, hopper_worklist, waves
from workbook import explore, gpus, ncu, plots, pr, records

pd.set_option("display.width", 160)
print(gpus.describe())

# %% [markdown]
# ## 1. Slots, waves and the tail
#
# On B200 the seed computes each 256 × 256 output tile with a CTA pair (`tcgen05` with `cta_group::2`:
# each CTA holds 128 rows of the tile), so the 148 SMs give **S = 74 slots**. With *T* equal tiles,
#
# $$\text{waves} = \frac{T}{S}, \qquad \text{makespan} = \Big\lceil \frac{T}{S} \Big\rceil, \qquad
# \text{ideal} = \frac{T}{S}$$
#
# in units of one tile's run time. At 4096³, *T* = 16 × 16 = 256 and 256 / 74 = 3.46: three full waves,
# then 34 tiles on 74 pairs while the other 40 pairs sit idle.
#
# **The rule.** Re-cut a group of *g* wide tiles (*g · W* columns of one tile row) into *g + 1* tiles of
# width *w = g · W / (g + 1)*. The columns are the same, so the work is the same, and there is one more
# item. Making *r = (−T) mod S* such re-cuts turns the item count into a multiple of *S*. The narrow tiles
# go last in the schedule, so the tail waves run the shorter tiles.
#
# **The model** (the one assumption): a tile's run time is proportional to its width, 1.0 for a full
# N256 tile, and nothing else costs time. Our kernels hand items to slots round-robin (CTA *i* runs items
# *i, i + S, i + 2S, …*), and the planner simulates exactly that.
#
# Below, each column is one CTA pair and time runs downward; hatched grey is idle.

# %%
SEED = dict(gpu="b200", tile_m=256, tile_ns=(256, 224, 192))  # seed 004: M256 pair tiles, N256 / N224 / N192
MODEL = "gemm_kernels.waves (model: tile time proportional to width; not a measurement)"


def before_after(M, N, *, last_waves=None, slot_label="CTA pair", **config):
    # uniform above, balanced below, on one time axis so the shorter makespan shows as a shorter bar
    uniform = waves.plan(M, N, balanced=False, **config)
    balanced = waves.plan(M, N, **config)
    fig, axes = plt.subplots(2, 1, figsize=(11, 6.8), sharex=True, layout="constrained")
    for ax, p, name in zip(axes, (uniform, balanced), ("uniform tiles", "balanced tiles")):
        plots.wave_occupancy(p.gantt(), ax=ax, slot_label=slot_label, source=MODEL,
                             title=f"{M} x {N} on {p.gpu}, {name}")
        ax.set_ylim(uniform.makespan, 0 if last_waves is None else uniform.makespan - last_waves)
    if balanced.makespan < uniform.makespan:
        axes[1].axhline(balanced.makespan, color="0.15", linestyle="--", linewidth=1)
        axes[1].annotate(f"done at {balanced.makespan:g} instead of {uniform.makespan:g} "
                         f"({uniform.makespan / balanced.makespan - 1:+.1%} throughput)",
                         xy=(0.5, (balanced.makespan + uniform.makespan) / 2), xycoords=("axes fraction", "data"),
                         ha="center", va="center", fontsize="small", color="0.15")
    if last_waves is not None:
        fig.suptitle(f"last {last_waves} waves of {uniform.makespan:g}", fontsize="medium")
    return uniform, balanced, fig


uniform, balanced, fig = before_after(4096, 4096, **SEED)
plt.show()
print(uniform.describe())
print(balanced.describe())

# %% [markdown]
# The balanced plan re-cuts 40 triplets of N256 tiles (768 columns each) into four N192 tiles: 296 = 4 × 74
# items. Slots 0–61 now run two wide tiles and two narrow ones, 1 + 1 + 0.75 + 0.75 = 3.5 tile-times; the
# seed's "cuts waves 3 & 4 from 1.0 + 1.0 to 0.75 + 0.75". The model predicts 4.0 → 3.5 tile-times against an
# ideal of 3.46: 12.5 % less time, or 14.3 % more throughput. Below, *gain* always means the latter,
# uniform time / balanced time − 1, the way the seed's TFLOP/s compare.
#
# **Which width?** The planner tries every allowed narrow width that has enough whole groups in the matrix,
# simulates the schedule, and keeps the shortest (the uniform plan if none is shorter). At 8192³ the two
# candidates give:

# %%
rows = []
for narrow, p in waves.alternatives(8192, 8192, **SEED).items():
    if narrow is None:
        rows.append(dict(plan="uniform N256", narrow_tiles=0, slots_with_no_narrow_tile=p.slots, makespan=p.makespan))
        continue
    g = narrow // (256 - narrow)
    without = sum(all(p.items[r.item].width == 256 for r in runs) for runs in p.timeline)
    rows.append(dict(plan=f"{p.groups} re-cuts {g} x N256 -> {g + 1} x N{narrow}",
                     narrow_tiles=p.width_counts[narrow], slots_with_no_narrow_tile=without, makespan=p.makespan))
display(pd.DataFrame(rows).style.format({"makespan": "{:g}"}).hide(axis="index"))

# %% [markdown]
# 12 re-cuts fill the last wave either way. With N192 they make only 48 narrow tiles, fewer than the 74
# slots, so some slot still runs 14 wide tiles and the makespan stays 14. With N224 they make 96: every slot
# gets at least one 0.875-long tile, and the makespan drops to 13.875. In general, with round-robin slots,
# the makespan is *a + (k − a) · w/W*, where *k* is the number of waves and *a* the most wide tiles on one
# slot; it only improves when there are at least *S* narrow tiles. At 4096³ the opposite limit bites: 40
# re-cuts are needed, but a 16-tile row holds only two groups of 7, 32 in all, so N224 is not possible.
#
# Here is what seed 004 states next to what the planner derives:

# %%
# Seed 004, section 2 ("Wave-Tail Tile Balancing Across 74 B200 CTA Pairs"), transcribed
seed_says = pd.DataFrame([
    dict(size=4096, tiles=256, waves=3.46, idle_pairs=40, recut="3 x 256 -> 4 x 192", recuts=40, items=296),
    dict(size=8192, tiles=1024, waves=13.84, idle_pairs=12, recut="7 x 256 -> 8 x 224", recuts=12, items=1036),
    dict(size=16384, tiles=4096, waves=55.35, idle_pairs=48, recut="7 x 256 -> 8 x 224", recuts=48, items=4144),
])

derived = []
for size in seed_says["size"]:
    u = waves.plan(size, size, balanced=False, **SEED)
    b = waves.plan(size, size, **SEED)
    g = b.narrow // (256 - b.narrow)
    derived.append(dict(size=size, tiles=len(u.items), waves=round(u.waves, 2),
                        idle_pairs=round((1 - u.last_wave_fill) * u.slots), recut=f"{g} x 256 -> {g + 1} x {b.narrow}",
                        recuts=b.groups, items=len(b.items), makespan_uniform=u.makespan,
                        makespan_balanced=b.makespan, ideal=round(b.ideal, 3),
                        predicted_gain=f"{u.makespan / b.makespan - 1:.1%}"))
derived = pd.DataFrame(derived)
agree = (derived[seed_says.columns] == seed_says).all(axis=None)
display(derived)
print("planner reproduces seed 004 exactly:", agree)
assert agree

# %%
for size in (8192, 16384):
    before_after(size, size, last_waves=3, **SEED)
    plt.show()

# %% [markdown]
# At 8192³ and 16384³ the tail is a small part of the whole (1 wave in 14, in 56), so the predicted gain is
# small too: 0.9 % and 1.1 %. Balancing is worth most where there are few waves and a nearly empty last one.
#
# ## 2. Where should balancing pay on the H200?
#
# The H200 has 132 SMs. Our Hopper GEMM (`gemm_kernels.hopper`) computes a 128 × N256 tile per CTA, one CTA
# per SM, so **132 slots**. Not every narrow width suits it: `hopper.narrow_widths(256)` lists those it can
# run (its docstring says why), and the sweep below allows only those. A variant with 2-CTA clusters
# (256-row items, B shared by TMA multicast) would have **66 slots**
# (`cutlass.utils.HardwareInfo().get_max_active_clusters(2)` on our H200).
#
# The sweep covers square sizes and the linear layers of two public decoder models at a few token counts
# (M = tokens, N = out features, K = in features; K does not change a plan).

# %%
H200_1CTA = dict(gpu="h200", tile_m=hopper_options.TILE_M, tile_ns=(256, *hopper_options.narrow_widths(256)))
H200_2CTA = dict(H200_1CTA, tile_m=2 * hopper_options.TILE_M, ctas_per_item=2)
COLUMNS = ["shape", "M", "N", "K", "tiles", "waves", "last_wave_fill", "narrow", "items",
           "makespan_uniform", "makespan_balanced", "ideal", "gain"]


def show(table):
    display(table[COLUMNS].style.format({"gain": "{:.1%}", "last_wave_fill": "{:.0%}", "ideal": "{:.2f}",
                                         "waves": "{:.2f}", "makespan_uniform": "{:g}", "makespan_balanced": "{:g}"},
                                        na_rep="").hide(axis="index"))


print(f"H200, 1-CTA 128 x 256 tiles, {waves.slots_for('h200', 1)} slots, widths {H200_1CTA['tile_ns']}:")
pays_1cta = waves.candidates(**H200_1CTA)
show(pays_1cta)

# %%
print(f"H200, 2-CTA clusters of 256 x 256 items, {waves.slots_for('h200', 2)} slots:")
pays_2cta = waves.candidates(**H200_2CTA)
show(pays_2cta)
sweep_1cta = waves.sweep(**H200_1CTA)
print(f"{len(pays_1cta)} of {len(sweep_1cta)} swept shapes should gain >= 5 % with 1-CTA tiles; "
      f"the rest gain {sweep_1cta.gain[sweep_1cta.gain < 0.05].max():.1%} at most.")

# %% [markdown]
# Only shapes with few waves and a sparse last wave qualify. The LLM shapes at these token counts run many
# waves, so their tails are a few percent at most. The same holds for every square size, on both GPUs:

# %%
squares = [waves.Shape(s, s, s) for s in range(1024, 16384 + 1, 256)]
curves = []
for name, config in (("B200, 74 CTA pairs, M256 tiles", SEED), ("H200, 132 SMs, M128 tiles", H200_1CTA)):
    t = waves.sweep(shapes=squares, **config)
    curves.append(t.assign(gpu=name, size=t.M, gain_pct=100 * t.gain))
curves = pd.concat(curves, ignore_index=True)
fig = plots.latency_vs_shape(curves, x="size", y="gain_pct", hue="gpu", logx=False, logy=False,
                             ylabel="predicted gain (%)", title="Predicted gain of balancing, square GEMMs",
                             source=MODEL)
ax = fig.axes[0]
ax.set_xlabel("M = N = K")
ax.axhline(5, color="0.4", linestyle="--", linewidth=0.8)
ax.annotate("5 %: worth measuring", xy=(1.0, 5), xycoords=("axes fraction", "data"), xytext=(-4, 3),
            textcoords="offset points", ha="right", va="bottom", fontsize="small", color="0.3")
plt.show()

# %%
best = pays_1cta.iloc[0]
u, b, _ = before_after(int(best.M), int(best.N), slot_label="SM", **H200_1CTA)
plt.show()
g = b.narrow // (u.wide - b.narrow)
print(f"{best['shape']}: {len(u.items)} tiles fill {u.waves:.2f} waves of {u.slots}. {b.groups} re-cuts of {g} x N{u.wide} "
      f"into {g + 1} x N{b.narrow} give {len(b.items)} = {b.full_waves} x {b.slots} items, and the makespan "
      f"goes {u.makespan:g} -> {b.makespan:g} (ideal {b.ideal:.2f}).")

# %% [markdown]
# **How far to trust these numbers.** The model counts only tile widths. A narrow tile does the same work
# per column with less reuse: per multiply-add, a 128 × 128 tile loads 4/3 as many operand bytes as a
# 128 × 256 one (a 128 × 192 tile 10/9), and each tile pays a whole pipeline fill and epilogue for less
# output. So the predicted gain is an upper
# bound; a prediction of a few percent can turn into a loss, which is why we only name shapes that should
# gain ≥ 5 %. Measurements decide.
#
# ## 3. What was measured
#
# **B200, seed 004** (we have no B200; these are the seed's numbers, `data/pr/gemm_sol_final.csv`). The
# seed's before → after changes several things at once (7 pipeline stages instead of 4, the register
# epilogue, balancing, CLC prefetch, hoisted descriptors), so its table cannot isolate balancing. Next to it
# is what the model predicts for balancing alone:

# %%
seed = pr.gemm_table()
seed["after_vs_before"] = seed.after_tflops / seed.before_tflops - 1
seed = seed.merge(derived[["size", "predicted_gain"]], on="size")
display(seed[["size", "before_tflops", "after_tflops", "cublaslt_top8_tflops", "after_vs_before",
              "predicted_gain"]].style.format({"after_vs_before": "{:.1%}", "before_tflops": "{:.1f}",
                                               "after_tflops": "{:.1f}", "cublaslt_top8_tflops": "{:.1f}"})
        .hide(axis="index"))

# %% [markdown]
# **H200, our kernel.** `python -m gemm_kernels.bench` on an H200 times the Hopper GEMM with the uniform and
# the balanced schedule on the same inputs and appends the rows to `data/measured/h200/gemm.csv`. Below is the
# most recent run that timed both schedules of our default configuration (128 × 256 tiles in CTA pairs, so an
# item is 256 × 256) on at least three shapes: the measured gain (uniform median / balanced median − 1) sits
# next to the prediction for the plans the kernel walked (`hopper.plan_for`, the kernel's own planner call).
# Where the planner keeps the uniform plan, both schedules run the *same* work list, so their difference
# measures nothing but the noise of the measurement itself.

# %%
measured = records.read("h200", "gemm")
source = records.path("h200", "gemm").relative_to(records.DATA.parent)


def schedule_pairs(measured):
    # The bench names a configuration "128x256x64 s4 register balanced": tile, stages, epilogue, schedule.
    # One row per configuration and shape timed with both schedules.
    if measured.empty:
        return pd.DataFrame()
    ours = measured[measured["kernel"] == "ours"]
    config = ours["variant"].str.extract(r"^(?P<config>.*\S)\s+(?P<schedule>uniform|balanced)$")
    ours = ours.assign(**config).dropna(subset=["schedule"])
    table = ours.pivot_table(index=["config", "M", "N", "K"], columns="schedule",
                             values=["ms_median", "ms_min", "ms_max"], aggfunc="median")
    table.columns = [f"{schedule}_{stat[3:]}" for stat, schedule in table.columns]  # e.g. uniform_median
    wanted = [f"{s}_{t}" for s in ("uniform", "balanced") for t in ("median", "min", "max")]
    return table.reindex(columns=wanted).dropna().reset_index() if set(wanted) <= set(table) else pd.DataFrame()


def with_predictions(pairs):
    rows = []
    for row in pairs.itertuples():
        tile_n = int(row.config.split("x")[1])
        cluster_m = 2 if row.config.endswith("cluster2") else 1
        u, b = (hopper_options.plan_for(int(row.M), int(row.N), gpu=gpus.H200, tile=(128, tile_n, 64), schedule=s,
                                        cluster_m=cluster_m)
                for s in ("uniform", "balanced"))
        rows.append(dict(same_work_list=u.items == b.items, predicted_gain=u.makespan / b.makespan - 1))
    out = pd.concat([pairs, pd.DataFrame(rows, index=pairs.index)], axis=1)
    out["measured_gain"] = out.uniform_median / out.balanced_median - 1
    return out


DEFAULT_PAIR = [("ours", f"128x256x64 s4 register {schedule} cluster2") for schedule in ("uniform", "balanced")]
measured = records.last_run(measured, DEFAULT_PAIR, min_shapes=3) if not measured.empty else measured
pairs = schedule_pairs(measured)
if pairs.empty:
    why = "does not exist yet" if not records.path("h200", "gemm").exists() else \
          "has no shape measured with both the uniform and the balanced schedule"
    display(Markdown(f"**No H200 measurement to show:** `{source}` {why}. The tables above are predictions "
                     f"only. On an H200, `make bench-gemm` records them; re-run this notebook after."))
else:
    pairs = with_predictions(pairs)
    print(f"measured: {source} ({explore.provenance_text(measured)})")
    ms = "{:.3f}".format
    display(pairs.assign(
        uniform_ms=[f"{ms(a)} ({ms(lo)}-{ms(hi)})" for a, lo, hi in
                    zip(pairs.uniform_median, pairs.uniform_min, pairs.uniform_max)],
        balanced_ms=[f"{ms(a)} ({ms(lo)}-{ms(hi)})" for a, lo, hi in
                     zip(pairs.balanced_median, pairs.balanced_min, pairs.balanced_max)],
    )[["config", "M", "N", "K", "uniform_ms", "balanced_ms", "same_work_list", "predicted_gain", "measured_gain"]]
        .style.format({"predicted_gain": "{:+.1%}", "measured_gain": "{:+.1%}"}).hide(axis="index"))

    same = pairs[pairs.same_work_list]
    noise = same.measured_gain.abs().max() if len(same) else float("nan")
    fig, ax = plt.subplots(figsize=(6.4, 4.6), layout="constrained")
    for flag, style in ((False, dict(color=plots.GAIN, label="different work lists")),
                        (True, dict(color=plots.IDLE, label="same work list (noise)"))):
        part = pairs[pairs.same_work_list == flag]
        # the bar spans the gains the fastest and slowest calls allow: uniform min / balanced max - 1 .. max / min
        low = part.uniform_min / part.balanced_max - 1
        high = part.uniform_max / part.balanced_min - 1
        ax.errorbar(100 * part.predicted_gain, 100 * part.measured_gain, fmt="o", capsize=3, zorder=3,
                    yerr=[100 * (part.measured_gain - low), 100 * (high - part.measured_gain)], **style)
        for i, r in enumerate(part.itertuples()):  # labels alternate above and below: neighbours collide less
            ax.annotate(f"{r.M}x{r.N}x{r.K}", (100 * r.predicted_gain, 100 * r.measured_gain), fontsize="x-small",
                        xytext=(5, 3 if i % 2 == 0 else -9), textcoords="offset points")
    top = 5 + 100 * max(pairs.predicted_gain.max(), (pairs.uniform_max / pairs.balanced_min - 1).max(),
                        (1 - pairs.uniform_min / pairs.balanced_max).max())
    ax.plot([-top, top], [-top, top], color="0.4", linestyle="--", linewidth=0.8, label="measured = predicted")
    if noise == noise:
        ax.axhspan(-100 * noise, 100 * noise, color="0.85", alpha=0.6, zorder=0, label=f"noise floor ±{noise:.1%}")
    ax.set_xlim(-2, 5 + 100 * pairs.predicted_gain.max())
    ax.set_ylim(-top, top)
    ax.axhline(0, color="0.3", linewidth=0.6)
    ax.set_xlabel("predicted gain (%)")
    ax.set_ylabel("measured gain (%), median and min-max")
    ax.set_title(f"Balanced vs uniform schedule on the H200\nSource: {source}", fontsize="medium")
    ax.legend(fontsize="small", frameon=False, loc="lower right")
    plt.show()

    lines = []
    if len(same):
        names = ", ".join(f"{r.M}x{r.N}x{r.K}" for r in same.itertuples())
        lines.append(f"* At {names} the two schedules run the identical work list, yet the medians differ by "
                     f"{noise:.1%}: in this file, a difference of that size can be run-to-run noise alone.")
    for r in pairs[~pairs.same_work_list].itertuples():
        overlap = r.uniform_min <= r.balanced_max and r.balanced_min <= r.uniform_max
        verdict = ("within the noise floor of the prediction" if abs(r.measured_gain - r.predicted_gain) <= noise
                   else "below the prediction by more than the noise floor" if r.measured_gain < r.predicted_gain
                   else "above the prediction by more than the noise floor, which the tail model cannot explain")
        lines.append(f"* {r.M}x{r.N}x{r.K}: measured {r.measured_gain:+.1%}, predicted {r.predicted_gain:+.1%}: "
                     f"{verdict}" + ("; the min-max ranges of the two schedules overlap" if overlap else "") + ".")
    display(Markdown("\n".join(lines)))

# %% [markdown]
# ## 4. Against cuBLAS, over a grid of shapes
#
# The planner chooses among *our* tilings. cuBLAS chooses among its own (the profiler names kernels like
# `nvjet_sm90_tst_320x128_64x3_1x2` and `..._192x192_...` at these shapes: other tile shapes, other waves), so a
# shape where our uniform tiling leaves a poor last wave need not be one where cuBLAS does. `python -m
# gemm_kernels.bench --sweep` times `torch.matmul` and our default (balanced, 2-CTA clusters) on every M, N in
# 2048 … 8192 (step 512) at K = 8192, 169 shapes, in one process, into `data/measured/h200/gemm_sweep.csv`. Each
# cell below is torch's median time over ours: above 100 % we are faster. Dots mark the shapes where the planner
# predicts a poor last wave for uniform 256 × 256 cluster tiles (less than half full).

# %%
sweep = records.read("h200", "gemm_sweep")
sweep_source = records.path("h200", "gemm_sweep").relative_to(records.DATA.parent)
if sweep.empty:
    display(Markdown(f"**No sweep recorded yet in `{sweep_source}`.** On an H200: "
                     "`python -m gemm_kernels.bench --sweep`."))
else:
    last = sweep[sweep.date == sweep.date.max()]
    grid = last.pivot_table(index=["M", "N"], columns="kernel", values="ms_median")
    grid["pct"] = 100 * grid["torch"] / grid["ours"]
    fill = {(m, n): hopper_options.plan_for(m, n, gpu=gpus.H200, schedule="uniform").last_wave_fill
            for m, n in grid.index}
    grid["poor_wave"] = [fill[i] < 0.5 for i in grid.index]
    pct = grid["pct"].unstack("N")
    fig, ax = plt.subplots(figsize=(8.5, 6.4), layout="constrained")
    im = ax.imshow(pct.values, origin="lower", cmap="RdBu", vmin=80, vmax=120)
    ax.set_xticks(range(len(pct.columns)), pct.columns, rotation=90, fontsize="small")
    ax.set_yticks(range(len(pct.index)), pct.index, fontsize="small")
    ax.set_xlabel("N")
    ax.set_ylabel("M")
    poor = grid[grid.poor_wave].reset_index()
    ax.scatter([list(pct.columns).index(n) for n in poor.N], [list(pct.index).index(m) for m in poor.M],
               s=12, color="k")
    fig.colorbar(im, ax=ax, label="torch.matmul time / ours (%); > 100: ours faster")
    ax.set_title("H200, K = 8192: our default GEMM against cuBLAS, one run\n"
                 "(dots: the planner predicts a uniform last wave under 50 % full)", fontsize="medium")
    plots.caption(ax, f"{sweep_source} ({explore.provenance_text(last)})")
    plt.show()
    on_poor = grid[grid.poor_wave]
    print(f"{len(grid)} shapes: median {grid.pct.median():.0f} % of torch.matmul's speed; ours faster at "
          f"{int((grid.pct >= 100).sum())}, by 5 % or more at {int((grid.pct >= 105).sum())}.")
    print(f"On the {len(on_poor)} poor-last-wave shapes: median {on_poor.pct.median():.0f} %; >= 105 % at "
          f"{int((on_poor.pct >= 105).sum())}: "
          + ", ".join(f"{m}x{n}" for (m, n) in on_poor[on_poor.pct >= 105].index))

# %% [markdown]
# **How much to trust one cell.** The sweep is one run; the same shape timed in another run of the same day can
# move by several percent (2560 × 7168 × 8192 read 101 % of torch in the benchmark run and 112 % in the sweep,
# `gemm.csv` and `gemm_sweep.csv` of commit 8967d93). The map's large-scale pattern is what it shows reliably: our
# 256 × 256 cluster tiles lose where the grid is small (few waves, where cuBLAS's choice of tile shapes matters
# most), and hold their own or win where the grid is large. The map above is the latest sweep (commit 9f89ee8,
# after section 5's dynamic schedule); the sweep before it (8967d93, static walk) had a median of 98 % and 68
# shapes at or above 100 %, against 102 % and 116 here.

# %% [markdown]
# ## 5. The last few percent: DRAM bytes, power and the clock
#
# After balancing, our kernel still trailed cuBLAS by 2–5 % at 16384³, where the wave tail is 0.3 % of the
# run and cannot be the reason. The question was answered by measuring, not by guessing. First, clocks:
# `tools/probes/probe_clocks.py` ran each kernel back to back for 3 s while `nvidia-smi` sampled the SM
# clock and the board power (the kernel then was the static walk of section 3, commit a1f3516):

# %%
PROBES = records.DATA / "measured" / "h200" / "probes"


def clock_run(name):
    """Per shape and kernel, the means of a probe_clocks.py output: TFLOP/s, MHz, W, TFLOP/s per GHz."""
    runs = pd.read_csv(PROBES / name, sep=r"\s+").rename(columns={"TFLOP/s/GHz": "per_GHz"})
    return runs.groupby(["shape", "kernel"])[["TFLOP/s", "MHz", "W", "per_GHz"]].mean().unstack("kernel")


clock_runs = {"static walk (a1f3516)": clock_run("gemm_clocks.txt"),
              "dynamic schedule (7062732)": clock_run("gemm_clocks_after.txt")}
fig, axes = plt.subplots(1, 3, figsize=(11, 3.2), layout="constrained", sharey=True)
for ax, (col, label) in zip(axes, (("MHz", "SM clock"), ("per_GHz", "work per clock (TFLOP/s per GHz)"),
                                   ("TFLOP/s", "TFLOP/s"))):
    ratio = pd.DataFrame({run: 100 * (by[col]["ours"] / by[col]["torch"] - 1) for run, by in clock_runs.items()})
    ratio.plot.bar(ax=ax, rot=0, color=[plots.IDLE, plots.GAIN], width=0.7, legend=ax is axes[0])
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xlabel("M = N = K")
    ax.set_title(f"{label}: ours vs cuBLAS", fontsize="medium")
axes[0].set_ylabel("ours / torch.matmul - 1 (%)")
axes[0].legend(fontsize="small", frameon=False, title="our kernel", title_fontsize="small")
plots.caption(axes[0], "data/measured/h200/probes/gemm_clocks{,_after}.txt (tools/probes/probe_clocks.py)")
plt.show()
display(pd.concat(clock_runs, names=["run"]).round(0))

# %% [markdown]
# Grey bars first (the static walk). Both kernels hold the board at its power cap (about 690 W). Ours does
# 3–4 % *more* work per clock at 8192³ and 16384³, and still did not win, because the chip gave it 3–4 % *less*
# clock. At a power cap that is the rule, not an accident: watts = work per second x energy per unit of work, so
# the throughput a kernel gets is the cap divided by its energy per flop, and more work per clock just buys a
# lower clock. To be faster at the cap, a kernel must spend less energy per flop. Nsight Compute named where
# ours spent more (`ncu --metrics dram__bytes_read.sum,...` around one call of each,
# `tools/probes/probe_ncu.py`): at 16384³ our kernel read **1.8 times the DRAM bytes** cuBLAS did (27 against
# 16 GB, L2 hit rate 48 % against 68 %). Each profile below ran in its own process, and cuBLAS's own bytes move
# between them (12–16 GB), so each bar is our bytes over cuBLAS's *in the same profile*:

# %%
STEPS = [  # (what, probe file, contender as the probe printed it) - each file's "default" is the kernel of its day
    ("static walk, bands of 8 rows (session 2)", "ncu_bytes_16384.txt", "16384^3 ours default"),
    ("static walk, bands of 32 rows", "ncu_bytes_16384.txt", "16384^3 ours {'band_rows': 32}"),
    ("static walk, no CTA pairs (no multicast)", "ncu_bytes_16384.txt", "16384^3 ours {'cluster_m': 1}"),
    ("one CTA pair per item, hardware order", "ncu_np_16384.txt", "16384^3 ours {'persistent': 0}"),
    ("static walk, bands of 16 rows", "ncu_dyn_16384.txt", "16384^3 ours {'dynamic': 0}"),
    ("dynamic schedule, bands of 16", "ncu_dyn_16384.txt", "16384^3 ours default"),
    ("dynamic schedule, bands of 8", "ncu_dyn_16384.txt", "16384^3 ours {'band_rows': 8}"),
    ("dynamic, bands of 8, banded tail (default now)", "ncu_tail_16384.txt", "16384^3 ours default"),
]
rows = []
for what, name, contender in STEPS:
    prof = ncu.read(PROBES / name).set_index("contender")
    ours, cublas = prof.loc[contender], prof.loc["16384^3 torch"]
    rows.append(dict(step=what, file=name, dram_GB=ours["dram__bytes_read.sum"],
                     vs_cublas=ours["dram__bytes_read.sum"] / cublas["dram__bytes_read.sum"],
                     clock_GHz=ours["sm__cycles_elapsed.avg.per_second"],
                     cublas_clock_GHz=cublas["sm__cycles_elapsed.avg.per_second"],
                     time_vs_cublas=ours["gpu__time_duration.sum"] / cublas["gpu__time_duration.sum"]))
dram = pd.DataFrame(rows)
fig, ax = plt.subplots(figsize=(8.5, 3.8), layout="constrained")
colors = [plots.GAIN if w.startswith("dynamic") else plots.IDLE for w in dram.step]
ax.barh(dram.step[::-1], dram.vs_cublas[::-1], color=colors[::-1])
ax.axvline(1.0, color="k", ls="--", lw=1)
for y, (v, t) in enumerate(zip(dram.vs_cublas[::-1], dram.time_vs_cublas[::-1])):
    ax.annotate(f"{v:.2f}x bytes, {t:.2f}x time", (v, y), xytext=(4, -3), textcoords="offset points",
                fontsize="x-small")
ax.set_xlabel("DRAM bytes read / cuBLAS's in the same profile (16384³)")
ax.set_xlim(0, dram.vs_cublas.max() * 1.35)
ax.set_title("Where our 16384³ GEMM's extra power went, and what brought it back", fontsize="medium")
plots.caption(ax, "data/measured/h200/probes/ncu_{bytes,np,dyn,tail}_16384.txt (ncu, --clock-control none)")
plt.show()
display(dram.round(3))

# %% [markdown]
# Three things in that picture:
#
# * **The raster matters, but is not the whole story.** Bands of 32 tile rows read less than bands of 8, yet a
#   static walk stays at 1.6–1.8x. Its items are dealt out in advance: slot *i* runs items *i*, *i* + 66, … .
#   Over 63 items per slot the SMs drift apart, so after a while the items *in flight* are no longer
#   neighbours in the raster, and the L2 cannot serve one item's panels to the next.
# * **Launching one CTA pair per item** lets the hardware hand out items in order, which keeps the items in
#   flight together: the bytes fall to 1.2x, at the price of a pipeline fill and a launch per item.
# * **A dynamic schedule** gets the same order without giving up persistence. Rank 0's producer warp claims
#   the next item from a global counter when it has issued the current item's last loads (so the claim's
#   round trip hides behind the `stages` K-blocks still in the ring), and stores the index straight into the
#   shared memory of both CTAs of its pair (`st.async`, counted by an mbarrier); every warp reads it there:

# %%
print(inspect.getsource(hopper.HopperGemm.claim))
print(inspect.getsource(hopper.HopperGemm.take))

# %% [markdown]
# With dynamic order, the band height decides how much of A a window shares. A band's rows of A must stay in
# L2 while its windows of B stream past; `band_rows_for` keeps them within 32 MiB (16 rows up to K = 8192,
# 8 at 16384). The planner's narrow tail, laid out row by row across every column of B, is now banded too.

# %%
print(inspect.getsource(hopper_worklist.band_rows_for))

# %% [markdown]
# **What it bought.** The blue bars of the clock figure above are the same probe on the final kernel: at 16384³
# the clock gap to cuBLAS halved (−4.3 % → −2.1 %) while the work per clock stayed 3 % ahead, so at the power
# cap ours now runs slightly faster (−0.9 % → +0.7 % TFLOP/s). At 4096³ the gap narrowed but remains (−3.6 % →
# −1.7 %). The benchmark's method gives the same picture. Same-run ratios, cuBLAS's time over ours, from
# `tools/probes/probe_gemm_order.py`: ten rounds that alternate the two kernels, per call synchronised (the
# seeds' method) and back to back:

# %%
rounds = pd.read_csv(PROBES / "gemm_squares_10_rounds.csv")
wide = rounds.pivot_table(index=["shape", "round"], columns="config", values=["synced_ms", "b2b_ms"])
ratio = pd.DataFrame({m: 100 * wide[m]["torch"] / wide[m]["default"] for m in ("synced_ms", "b2b_ms")})
summary = ratio.groupby(level=0).agg(["median", "min", "max"]).round(1)
summary.columns = [f"{'synced' if m == 'synced_ms' else 'back to back'}: {s}" for m, s in summary.columns]
print("% of torch.matmul's speed, 10 rounds, commit 7062732: data/measured/h200/probes/gemm_squares_10_rounds.csv")
display(summary)

# %% [markdown]
# And on the shapes where our uniform tiling leaves a poor last wave: our default (the default of each run's
# commit: the plain register epilogue before session 5, the deferred one since, section 7) against `torch.matmul`
# in the four most recent runs that timed at least four of those shapes (the benchmark's `gemm.csv` and the sweep's
# `gemm_sweep.csv`, one column per run, oldest first; each run is one commit), shapes timed in at least three of
# them. Section 6's runs timed only the benchmark's three default shapes and are left out here. Where cuBLAS is
# weak, our balanced tiles stay ahead run after run.

# %%
PLAIN_DEFAULT = "128x256x64 s4 register balanced cluster2"    # gemm()'s default before session 5
DEFERRED = {"81a3001", "78d89e8", "41feef5", "808db20"}        # commits whose default defers the epilogue
both = pd.concat([records.read("h200", "gemm").assign(table="bench"),
                  records.read("h200", "gemm_sweep").assign(table="sweep")])
default_then = both.commit.map(lambda c: configs.HOPPER_DEFAULT if c in DEFERRED else PLAIN_DEFAULT)
both = both[(both.kernel == "torch") | (both.variant == default_then)]
runs = both.pivot_table(index=["M", "N", "K", "commit", "table"], columns="kernel", values="ms_median",
                        aggfunc="last").dropna()
runs["pct"] = 100 * runs["torch"] / runs["ours"]
fills = {(m, n): hopper_options.plan_for(m, n, gpu=gpus.H200, schedule="uniform").last_wave_fill
         for m, n, *_ in runs.index}
runs = runs.reset_index()
runs["last_wave_fill"] = [fills[m, n] for m, n in zip(runs.M, runs.N)]
poor = runs[(runs.last_wave_fill < 0.5) & (runs.K == 8192)]
covered = poor.groupby(["commit", "table"]).size()
dates = both.groupby(["commit", "table"]).date.max()
recent = list(dates[covered[covered >= 4].index].sort_values().index[-4:])   # the four latest such runs
poor = poor.set_index(["commit", "table"]).loc[recent].reset_index()
table = poor.pivot_table(index=["M", "N", "K", "last_wave_fill"], columns=["commit", "table"], values="pct")
table = table.reindex(columns=[c for c in recent if c in table.columns])
table = table[table.notna().sum(axis=1) >= 3]
display(table.round(0).style.format("{:.0f}", na_rep="").background_gradient(cmap="RdBu", vmin=80, vmax=120))
print("poor-last-wave shapes at or above 105 % in every one of these runs that timed them: "
      + ", ".join(f"{m}x{n}x{k}" for (m, n, k, _), r in table.iterrows() if (r.dropna().round() >= 105).all()))

# %% [markdown]
# ## 6. The last percent at 4096³: two ideas that did not pay, measured
#
# After section 5, 4096³ is the one square still a little behind cuBLAS: 97–99 % in the benchmark runs,
# 98–101 % in alternating rounds. It has 256 items of 256 × 256 (CTA pairs) on 66 pairs: 3.88 waves, so
# in the fourth wave 8 pairs idle for a whole item, about 0.12 of a ~50 µs item per pair on average, ~3 % of
# the run. Two classic remedies were built, tested and timed in session 4, and neither moved the number.
# Stream-K stays in the kernel as an option (`gemm(..., stream_k=True)`) with its tests, because what it costs
# is the lesson. The deferred epilogue came back in section 7, once a timeline showed what it was up against.
#
# ### 6a. Stream-K: split the last wave along K
#
# `waves.stream_k` keeps the first three waves whole and cuts the last 58 items' K-blocks into 66 equal
# *units*, one per pair: each unit is the end of one item and the start of the next. A unit that starts
# mid-item hands its fp32 partial sum to the pair that holds the item's first K-block, which adds it and
# writes C. The model's tail shrinks from 1.0 item to 58 / 66 = 0.88:

# %%
full, units = waves.stream_k(256, 66, 64)
fig, axes = plt.subplots(1, 2, figsize=(11, 3.4), layout="constrained", sharey=True)
for ax, title in zip(axes, ("uniform: the 4th wave, 58 items on 66 pairs", "stream-K: 66 units of 56-57 K-blocks")):
    ax.set_title(title, fontsize="medium")
    ax.set_xlabel("time in the last wave (items of 64 K-blocks)")
    ax.axvline(1.0, color="k", ls=":", lw=1)
for slot in range(66):
    if slot < 58:
        axes[0].broken_barh([(0, 1.0)], (slot, 0.8), color=plots.GAIN)
    t = 0.0
    for seg in units[slot]:
        length = (seg.k1 - seg.k0) / 64
        axes[1].broken_barh([(t, length)], (slot, 0.8),
                            color=plots.GAIN if seg.k0 == 0 else plots.IDLE)
        t += length
axes[0].set_ylabel("CTA pair")
axes[1].legend(handles=[plt.Rectangle((0, 0), 1, 1, color=plots.IDLE), plt.Rectangle((0, 0), 1, 1, color=plots.GAIN)],
               labels=["hands a partial sum on", "holds K-block 0: adds, writes C"], fontsize="small",
               loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
plots.caption(axes[0], "computed: gemm_kernels.waves.stream_k(256, 66, 64), no GPU")
plt.show()
print(f"{full} whole items, then {len(units)} units; the longest unit: "
      f"{max(sum(s.k1 - s.k0 for s in u) for u in units) / 64:.3f} items, where the uniform tail takes 1")

# %% [markdown]
# The hand-over is `settle`, called after each segment's K loop. A contributing warpgroup stores its
# 128 partial sums per thread as 16-byte stores, and one thread counts them on a flag with a release; the
# finishing warpgroup spins on the flag with acquire loads, then adds the partials:

# %%
print(inspect.getsource(hopper.HopperGemm.settle))

# %% [markdown]
# **Prediction** (written before the run, `notes/perf-log.md`): the tail loses ~6 µs of ~200, and a partial
# sum costs ~1 µs to store and ~1 µs to read, so +1.5–2 %. **Measured:** 2–3 % *slower*. A diagnostic probe
# (`tools/probes/probe_stream_k.py`) timed four builds side by side. Two of them are built to isolate a cost.
# *whole rows* is the stream-K build with no item split, which isolates the build's own cost. *halves* cuts each
# tail item into two halves on two pairs: a hand-over per item, with no gain possible.

# %%
diag = pd.read_csv(PROBES / "gemm_stream_k_diagnosis.csv")
med = diag.groupby("config")[["synced_ms", "b2b_ms"]].median() * 1000
order = ["torch", "no stream-k", "stream-k whole rows", "stream-k", "stream-k halves"]
med = med.loc[order]
fig, ax = plt.subplots(figsize=(8, 3.0), layout="constrained")
ax.barh(order[::-1], med.b2b_ms[::-1], color=[plots.GAIN if "stream" in o else plots.IDLE for o in order[::-1]])
ax.set_xlim(med.b2b_ms.min() * 0.95, med.b2b_ms.max() * 1.02)
for y, v in enumerate(med.b2b_ms[::-1]):
    ax.annotate(f"{v:.1f} µs", (v, y), xytext=(3, -3), textcoords="offset points", fontsize="x-small")
ax.set_xlabel("4096³, µs per call, back to back (median of 6 rounds)")
ax.set_title("Where stream-K's time went", fontsize="medium")
plots.caption(ax, "data/measured/h200/probes/gemm_stream_k_diagnosis.csv (commit 3f03e44)")
plt.show()
cost = med.b2b_ms["stream-k halves"] - med.b2b_ms["no stream-k"]
build = med.b2b_ms["stream-k whole rows"] - med.b2b_ms["no stream-k"]
net = med.b2b_ms["stream-k"] - med.b2b_ms["no stream-k"]
print(f"the build itself: {build:+.1f} µs; one hand-over round (halves): {cost:+.1f} µs; "
      f"stream-K as designed: {net:+.1f} µs")
display(med.round(1))

# %% [markdown]
# The build is free. A hand-over is not: about 10 µs, against the ~6 µs that the tail costs. A CTA pair's
# partial is 256 KiB of fp32 (two CTAs × 128 × 256), and 58 of them cross the L2 at once, each on some unit's
# critical path twice (store, then load). Stream-K pays where the tail is large against that cost: at
# 4096³ on the H200 it is not. Where the tail *is* large, the balanced schedule of sections 1–3 removes it
# without any hand-over.
#
# **A deadlock, found by the benchmark.** The first version let pairs claim units from the counter like
# any row. At 16384³ the single-tail-item units are only 15–16 K-blocks long, and a pair done early claimed
# its next row while still loading the current one (section 5's look-ahead). That could be the very unit
# whose partial its own FINISH was waiting for. The bench hung (`probes/gemm_bench_stream_k_hang.txt`).
# The fix is in `claim` above: the last 66 rows are the units, and pair *c* runs unit *c* after its whole
# rows. A FINISH then waits only for units that start with their contribution, each on a pair of its own.
# The test `test_stream_k_finishes_with_many_contributors_behind_long_rows` reproduces the case: 65
# contributors to one item, behind ~100 µs rows.
#
# ### 6b. Deferring the epilogue
#
# The register epilogue stalls the tensor cores for about 1 µs per item while C goes out. With
# `defer_epilogue=True` the accumulator is packed to bf16 (64 registers per thread), and the stores wait. They
# go out after the next item's first K-block of WGMMAs is issued, so they overlap the tensor cores. Its
# first build taught a ptxas lesson. With a narrow tile width the kernel has two K-loop copies, and the extra
# registers made ptxas *serialize every WGMMA* (warning C7511, one `WARPGROUP.DEPBAR` per HGMMA). That build
# ran 8–30 % slower at every shape with narrow items. The fix: each K-loop copy zeroes its own accumulator
# and waits for its own last WGMMA group, so no group spans the width branch. A CPU test now counts the waits
# in six builds (`test_wgmmas_are_not_serialized`). Fixed, the deferred epilogue measured:

# %%
DEFER_RUNS = [  # (probe file, commit, the config name of the plain epilogue, of the deferred one)
    ("gemm_deferred_rounds.csv", "27307ef", "default", "deferred"),
    ("gemm_stream_k_rounds.csv", "14d7510", "no stream-k", "deferred"),
    ("gemm_deferred_default_rounds.csv", "21d0c79", "plain register", "default"),
]
rows = []
for name, commit, plain, deferred in DEFER_RUNS:
    runs = pd.read_csv(PROBES / name)
    for shape, g in runs.groupby("shape"):
        m = g.groupby("config")[["synced_ms", "b2b_ms"]].median()
        rows.append({"file": name, "commit": commit, "shape": shape, "rounds": g["round"].nunique(),
                     **{f"deferred vs plain, {w} (%)": 100 * (m.loc[plain, c] / m.loc[deferred, c] - 1)
                        for c, w in (("synced_ms", "synced"), ("b2b_ms", "back to back"))}})
defer_table = pd.DataFrame(rows).round(1)
display(defer_table)

# %% [markdown]
# Positive means the deferred epilogue was faster. Synchronised: −1.5 to +1.1 %; back to back: −0.4 to +0.5 %.
# At most half a percent, inside the noise of one run. The benchmark read it 3–5 % *slower* at 16384³ in three
# runs (`gemm.csv`), which these alternating rounds do not reproduce. The ~1 µs per item was either not on
# the critical path, or the overlap stole as much as it hid. Session 4 left it an option and kept the plain
# epilogue. Both of this section's predictions were wrong in sign or size, and "~1 µs per item" was itself a
# guess. Section 7 replaces the guess with a measurement.

# %% [markdown]
# ## 7. Where the time goes, CTA by CTA
#
# Timing a launch gives one number. To see *where* a launch spends it, the kernel can stamp the GPU's global
# nanosecond timer itself. `Config.trace` compiles a separate build (the timed kernel carries none of it) in
# which the first consumer warp of every CTA writes `%globaltimer` when the CTA starts and ends and, for each
# work row it runs: when it has the row, when the row's first K-block has landed, when its last WGMMA is done,
# and when C is written. `hopper.timeline(a, b)` runs that build once and returns the stamps as a table
# (`trace_frame`), one line per row a CTA ran. The stamp, and why a whole warp writes it:

# %%
print(inspect.getsource(hopper.HopperGemm.stamp))

# %% [markdown]
# (A first build stamped from one lane. ptxas then serialized every WGMMA again, as in section 6b. The test
# `test_wgmmas_are_not_serialized` now compiles the traced builds too.)
#
# Here is one launch of 4096³ with the plain register epilogue, measured on the H200
# (`tools/probes/probe_timeline.py`): 132 CTAs, four rows each, except 16 that get only three. Blue is the
# K loop, red the epilogue, grey the wait for a row's first K-block.

# %%
TIMELINES = PROBES / "gemm_timeline_78d89e8"


def traced_launch(shape, variant, launch=0):
    """One launch of a probe_timeline.py file: the rows of every CTA, as hopper_trace.trace_frame returned them."""
    runs = pd.read_csv(TIMELINES / f"gemm_timeline_{shape}_{variant}.csv")
    return runs[runs.launch == launch]


def timeline_source(shape, variant):
    return (f"data/measured/h200/probes/gemm_timeline_78d89e8/gemm_timeline_{shape}_{variant}.csv "
            f"(H200, commit 78d89e8, launch 0)")


plain = traced_launch("4096x4096x4096", "plain")
plots.cta_timeline(plain, title="4096³, plain register epilogue", source=timeline_source("4096x4096x4096", "plain"))
plt.show()
ends = plain[plain.seq == 0].mma_done
print(f"row 1's last WGMMA finishes between {ends.min():.1f} and {ends.max():.1f} µs on all {len(ends)} CTAs; "
      f"the epilogue then takes {(plain.stored - plain.mma_done).median():.2f} µs (median over every row)")

# %% [markdown]
# Three things show up that no single number showed:
#
# * **The epilogue costs about 1.8 µs per row**, not the ~1 µs guessed in section 6b. At four rows per CTA,
#   that is ~7 µs, 4 % of the launch. At 8192³ rows are twice as long (2 %), at 16384³ four times (1 %).
#   That is the same ordering as our deficit against cuBLAS per clock at 4096³ and surplus at the larger
#   squares (section 5).
# * **All 132 CTAs end a row within about two microseconds of each other.** The dynamic schedule keeps them in step,
#   so 8.4 MB of C leave the SMs at the same moment and meet in the L2. That is why 64 KiB of stores per CTA
#   take so long.
# * **The ring never runs dry.** A row's first K-block has always landed by the time the consumers want it (the
#   grey is barely visible). So claiming the next row earlier cannot help. It was tried anyway and measured
#   nothing (`notes/perf-log.md`, session 5).
#
# Zoom in on the end of the first row, plain against the default, which defers the epilogue (below):

# %%
default = traced_launch("4096x4096x4096", "default")
fig, axes = plt.subplots(1, 2, figsize=(13, 3.8), layout="constrained", sharey=True)
for ax, (frame, name) in zip(axes, ((plain, "plain"), (default, "default"))):
    label = {"plain": "plain epilogue", "default": "deferred epilogue (the default)"}[name]
    plots.cta_timeline(frame, ax=ax, title=f"4096³, {label}", window=(38, 50),
                       source=timeline_source("4096x4096x4096", name))
axes[0].get_legend().remove()
plt.show()

# %% [markdown]
# Session 4's deferral stored all of item *j*'s C behind item *j + 1*'s first K-block, and its timeline
# (`probes/gemm_timeline_969303c/`) shows what happened. The epilogue shrank to 0.16 µs (the pack to bf16).
# But that K loop grew by 1.1–1.4 µs: warps busy issuing 16 stores do not issue the next WGMMAs, and the
# stores still crowd the L2. The default now spreads them out. Each of the next row's first 8 K-blocks
# carries one 32-column group of C: two 16-byte stores, issued right after the K-block's WGMMAs and before
# the wait for them.

# %%
src = inspect.getsource(hopper.HopperGemm.mainloop)
print(src[src.index("        acc.fill"):src.index("        for kb in range(first")])

# %% [markdown]
# The timeline cannot tell the two deferrals apart: the K loop grows by ~1 µs either way, because C's bytes
# cost the L2 what they cost. Every row still saves about 0.8 µs net. Per launch, all three traced variants at
# both squares (medians over three launches; µs):

# %%
traced = pd.read_csv(TIMELINES / "gemm_timeline_summary.csv")
phases = {"makespan_us": "launch", "first_data_us(med)": "to 1st K-block", "kloop_us(med)": "K loop per row",
          "epilogue_us(med)": "epilogue per row", "gap_us(med)": "between rows"}
display(traced.groupby(["shape", "variant"])[list(phases)].median().rename(columns=phases).round(2))
print("data/measured/h200/probes/gemm_timeline_78d89e8/gemm_timeline_summary.csv (H200, commit 78d89e8; "
      "staged = the TMA-store epilogue of notebook 06)")

# %% [markdown]
# **Prediction** (`notes/perf-log.md`, before the run): the spread deferral takes the 1.8 µs epilogue down to
# ~0.2 and costs the K loop ~0.2, so about +2 % at 4096³, +1.5 % at 8192³ and +0.5 % at 16384³. **Measured**:
# the epilogue went to 0.16 µs as predicted, but the K loop paid ~1 µs, not 0.2. What that left, against the
# plain epilogue and against `torch.matmul`, timed side by side in alternating rounds (three files, each
# config's median):

# %%
ROUNDS = [("gemm_spread_rounds.csv", "ffc0b2c", "launch default", "launch deferred"),
          ("gemm_spread_rounds2.csv", "ffc0b2c", "launch default", "launch deferred"),
          ("gemm_deferral_forms_rounds.csv", "9c53411", "plain register", "default")]
rows = []
for name, commit, plain_cfg, spread_cfg in ROUNDS:
    runs = pd.read_csv(PROBES / name)
    for shape, g in runs.groupby("shape", sort=False):
        m = g.groupby("config")[["synced_ms", "b2b_ms"]].median()
        row = {"file": name, "commit": commit, "shape": shape, "rounds": g["round"].nunique()}
        for col, how in (("b2b_ms", "back to back"), ("synced_ms", "synced")):
            row[f"spread vs plain, {how} (%)"] = 100 * (m.loc[plain_cfg, col] / m.loc[spread_cfg, col] - 1)
            row[f"% of torch.matmul, {how}"] = 100 * m.loc["torch", col] / m.loc[spread_cfg, col]
        rows.append(row)
display(pd.DataFrame(rows).round(1))
print("data/measured/h200/probes/gemm_spread_rounds{,2}.csv (commit ffc0b2c: 'launch default' = plain, "
      "'launch deferred' = spread) and gemm_deferral_forms_rounds.csv (the kernel of 78d89e8)")

# %% [markdown]
# Positive in the first column means the spread deferral was faster. Back to back it gains 1.5–3.1 % at
# 4096³ in all three files. At the larger squares the two timing methods disagree by more than the effect.
# Synced at 16384³ the plain epilogue was even faster in the last file. The third file also timed session 4's
# deferral side by side (`notes/perf-log.md`): back to back, the spread form was 1.3 % ahead of it at 4096³,
# 0.6 % at 16384³ and level at 8192³. So the default is now `defer_epilogue=None`, which spreads the register epilogue.
#
# One kernel at a time, at one clock: Nsight Compute profiles each once (clocks not locked; all three ran at
# 1.57–1.58 GHz).

# %%
prof = ncu.read(PROBES / "ncu_deferred_4096.txt").set_index("contender")
prof = prof.rename(index={"4096^3 torch": "cuBLAS", "4096^3 ours default": "ours (spread deferral)",
                          "4096^3 ours {'defer_epilogue': 0}": "ours (plain epilogue)"})
cols = {"gpu__time_duration.sum": "ms", "sm__cycles_elapsed.avg.per_second": "GHz",
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed": "tensor pipe active (%)",
        "dram__bytes_read.sum": "DRAM read (GB)"}
display(prof[list(cols)].rename(columns=cols).round(4))
print("data/measured/h200/probes/ncu_deferred_4096.txt (ncu --clock-control none, commit 81a3001)")

# %% [markdown]
# At one clock our kernel went from 3.5 % behind cuBLAS at 4096³ (section 5's `ncu_dyn_4096.txt`) to under
# 1 %. And the benchmark, the seeds' method, where the GPU's clock is whatever its power cap allows?

# %%
def default_runs(commits):
    """gemm.csv's rows of `commits` for torch.matmul and our default, and per benchmark run (commit, date) and
    shape the default's TFLOP/s as % of torch.matmul's (`pct`)."""
    rows = records.read("h200", "gemm")
    rows = rows[rows.commit.isin(list(commits))
                & ((rows.kernel == "torch") | (rows.variant == configs.HOPPER_DEFAULT))]
    runs = rows.pivot_table(index=["commit", "date", "M", "N", "K"], columns="kernel", values="tflops",
                            aggfunc="last").dropna()
    return rows, (100 * runs["ours"] / runs["torch"]).rename("pct").reset_index()


_, per_run = default_runs(["81a3001", "78d89e8"])
per_run = per_run[(per_run.M == per_run.N) & (per_run.N == per_run.K)]
runs_table = per_run.pivot_table(index="date", columns="M", values="pct").round(0)
runs_table.index = [f"run {i + 1}" for i in range(len(runs_table))]
runs_table.columns = [f"{m}³" for m in runs_table.columns]
display(runs_table)
print(f"data/measured/h200/gemm.csv, variant {configs.HOPPER_DEFAULT!r}, commits 81a3001 and 78d89e8 "
      "(the same kernel), one row per benchmark run")

# %% [markdown]
# 8192³ stays above cuBLAS (103–106 %) and 16384³ level with it (99–101 %). 4096³ does not reach it reliably:
# the benchmark's 30 calls a run read 97–101 %, while every alternating-rounds file puts the back-to-back median
# just above 100 % (100.4–101.3 %; synced 99.3–105.0 %). The timeline says where the rest goes. Of a ~177 µs
# launch, 169 µs is K loop at the tensor pipe's peak for the clock. About 5 µs is fixed cost: ~2 µs from launch
# to the first K-block, ~0.35 µs between rows, and ~1.5 µs to store the last row's C. The rest is the clock the
# 690 W cap allows. Two attempts at the fixed cost measured nothing: claiming rows earlier, and passing the work
# row through shared memory (`notes/perf-log.md`, session 5). The timeline also shows a bigger item that section 1
# already named: 16 of the 132 CTAs run only three rows and then wait ~42 µs. Section 8 removes that wait.

# %% [markdown]
# ## 8. Balancing 4096³ after all: narrow tiles in 16-column steps
#
# With CTA pairs, 4096³ is 256 items of 256 × 256 on 66 pairs: 3.88 waves, so every pair runs four rows and 8
# pairs idle through the fourth. For the launch to end sooner, *every* pair must get a narrow item, and a pair's
# four widths must add up to between 993 columns (the average, 16 × 4096 / 66) and 1023. Until session 6 the
# kernel allowed narrow widths in 64-column steps only, and sums of those are 960 or 1024, never in between; so
# the planner, rightly, kept the uniform plan. Three wide rows and one of 240 make 1008:

# %%
for narrow_ns, label in (((192, 128), "64-column steps (until session 6)"), (None, "16-column steps (now)  ")):
    p = hopper_options.plan_for(4096, 4096, gpu=gpus.H200, narrow_ns=narrow_ns)
    print(f"{label}: {p.describe()}")
u, b, fig = before_after(4096, 4096, last_waves=2, slot_label="CTA pair", **H200_2CTA)
plt.show()

# %% [markdown]
# Why 64-column steps? The N-major B tile sits in shared memory in 64-column swizzle blocks, and the narrow
# WGMMA read B through a view of the first `narrow_n` columns, which had to be whole blocks. But a WGMMA never
# sees a "view": it gets shared-memory descriptors (a start address, the stride between 64-column blocks, the
# stride between 8-row K groups), and those are the same whatever its N. So the narrow WGMMA now takes the wide
# operand fragments as they are, and its smaller N makes it read the first 240 columns, three blocks and three
# quarters:

# %%
src = inspect.getsource(hopper.HopperGemm.consume)
print(src[src.index("        if cutlass.const_expr(has_narrow):"):src.index("        if cutlass.const_expr(self.staged):")])
src = inspect.getsource(hopper.HopperGemm.store_words)
print("    ...\n" + "\n".join(line for line in src.splitlines() if "col_end" in line))

# %% [markdown]
# The stores stop at the item's own right edge, one compare per 16-byte store as before (it used to compare
# with N). The staged epilogue keeps 64-column steps: it TMA-stores whole 32-column sub-tiles, two buffers in
# turn. `gemm(..., narrow_ns=(192, 128))` still asks for the old choice. A GPU test checks every width exactly,
# on shapes with M and N tails (`test_every_narrow_width_is_exact`).
#
# **Why 16 and not 8?** WGMMA's N goes in steps of 8, and so does a lane's 16-byte store, so the first build
# allowed 248 too, and at 8192³ the planner took it (1024 of 1056 items 248 wide; the model said +3.0 %). The
# launch got 3.5 % *slower*. The timeline (section 7's traced build, two launches of each build) shows why: the
# K loop of a narrow row against that of a 256-wide row of the 64-column-step launch at the same shape (steady
# rows: a build's own wide rows are its first rows at 8192³, which start cold), next to the model's
# "proportional to width":

# %%
STEP8 = PROBES / "gemm_timeline_step8"
rows = []
for shape, variant in (("4096x4096x4096", "default"), ("4096x4096x4096", "narrow64"), ("8192x8192x8192", "default"),
                       ("8192x8192x8192", "narrow64")):
    frame = pd.read_csv(STEP8 / f"gemm_timeline_{shape}_{variant}.csv")
    kloop = (frame.mma_done - frame.data).groupby(frame.width).median()
    for width, us in kloop.items():
        rows.append(dict(shape=shape, build=variant, width=width, kloop_us=us, model=width / 256))
kloops = pd.DataFrame(rows)
steady_256 = kloops[(kloops.build == "narrow64") & (kloops.width == 256)].set_index("shape").kloop_us
kloops["vs_256"] = kloops.kloop_us / kloops["shape"].map(steady_256)
narrow_rows = kloops[kloops.width < 256].drop_duplicates("width").sort_values("width")
fig, ax = plt.subplots(figsize=(7, 3.2), layout="constrained")
x = range(len(narrow_rows))
ax.bar([i - 0.2 for i in x], narrow_rows.model, width=0.4, color=plots.IDLE, label="model: width / 256")
ax.bar([i + 0.2 for i in x], narrow_rows.vs_256, width=0.4, color=plots.GAIN, label="measured: K loop / a 256-wide row's")
ax.set_xticks(list(x), [f"N = {w}\n({s.split('x')[0]}³)" for w, s in zip(narrow_rows.width, narrow_rows["shape"])])
ax.set_ylim(0.6, 1.2)
ax.axhline(1.0, color="k", lw=0.8)
for i, (m, v) in enumerate(zip(narrow_rows.model, narrow_rows.vs_256)):
    ax.annotate(f"{v:.3f}", (i + 0.2, v), xytext=(0, 2), textcoords="offset points", ha="center", fontsize="small")
ax.set_ylabel("time of a row's K loop")
ax.legend(fontsize="small", frameon=False, loc="upper left", ncol=2)
ax.set_title("A narrow row's K loop against a 256-wide row's (64-column-step launch, same shape)", fontsize="medium")
plots.caption(ax, "data/measured/h200/probes/gemm_timeline_step8/ (H200; the 8-column-step build, just before 41feef5)")
plt.show()
display(kloops.round(3))

# %% [markdown]
# A 248-wide row costs what a 256-wide one costs; 240 costs 0.95 of it (the model says 0.9375) and 192 about
# 0.79 (0.75). So a 248-wide item does a 256-wide item's time of work and only adds an item. Why is not settled
# here: either the tensor cores step through N 16 columns at a time, or 248 columns (496 bytes, 15.5 L2 sectors)
# make neighbouring items share 32-byte sectors of C and start B's boxes mid-sector, where 240 (480 bytes) keeps
# whole sectors. Either way widths now go in 16-column steps (`WIDTH_STEP`; 240, 224, 192 and 128 for 256), and
# 8192³ uses 240. The model still assumes time proportional to width, which is why its gains are upper bounds.
#
# **What it bought, with the clock's drift cancelled.** Rounds of whole benchmarks put minutes between
# contenders, and in the same hour torch.matmul at 4096³ read 0.175 ms in one round and 0.205 ms in the next
# (`probes/gemm_narrow_rounds.csv`). `tools/probes/probe_ab.py` instead runs the contenders in turn, one call
# each, back to back, 150 cycles, and takes the median over cycles of each one's time over torch.matmul's in the
# same cycle:

# %%
ab = pd.read_csv(PROBES / "gemm_ab_narrow" / "gemm_ab_summary.csv")
ab["% of torch.matmul"] = 100 / ab.ratio_to_first
ab_table = ab[ab.config != "torch"].pivot_table(index="shape", columns="config", values="% of torch.matmul",
                                                sort=False)
ab_table = ab_table.rename(columns={"default": "16-column steps (default)", "narrow64": "64-column steps"})
display(ab_table.round(1))
print("data/measured/h200/probes/gemm_ab_narrow/gemm_ab_summary.csv (H200, back to back, per-cycle ratios; "
      "the 16-column-step build)")

# %% [markdown]
# +2.0 % at 4096³ (the 240-wide tail against no balancing), +0.8 % at 8192³ (240 against 192), level at
# 16384³, where the tail is 1 wave in 62.
#
# **A fairer turn order for the benchmark.** The benchmark took each contender's 30 calls in three rounds of 10,
# so with 11 contenders a round lasts long enough for the clock to drift inside it. Taking turns call by call
# (warm-up once, then one timed call per contender per round, the order rotating, the input sets rotating over
# all calls together) should share the drift out best. Its first run read torch.matmul at 4096³ at 573 TFLOP/s,
# against 649–663 in every earlier run, while our builds read as before. That is not a result, it is an artefact:
# `tools/probes/probe_turns.py` timed torch.matmul alone, taking turns with itself, and taking turns with our
# kernel (which is launched by replaying a CUDA graph), with and without an untimed *settling* call of the same
# contender before each timed one:

# %%
turns = pd.concat([pd.read_csv(PROBES / "gemm_turns.csv").assign(run="first probe"),
                   pd.read_csv(PROBES / "gemm_turns_settled.csv").assign(run="second probe")])
turns = turns[(turns.contender == "torch") & (turns.graphs == 1)]
display(turns.pivot_table(index=["shape", "method"], columns="run", values="ms_median", sort=False).round(4))
print("torch.matmul's median ms, synchronised per call; data/measured/h200/probes/gemm_turns{,_settled}.csv")

# %% [markdown]
# In the first probe torch.matmul taking turns with our graph launches read 3 % slower at 4096³ than taking turns
# with itself; the second probe did not repeat it, so the cause is not pinned down. Settling removes the
# question: every later turn now starts with one untimed call of the same contender, so a timed call always
# follows a call of its own kind (`workbook.timing.bench_interleaved(settle=1)`). The unsettled run is kept apart
# (`probes/gemm_bench_unsettled_turns_4c5b42d.csv`), not in `gemm.csv`. The benchmark runs since:

# %%
SESSION_6 = {"41feef5": "rounds of 10", "808db20": "settled turns"}
bench6, per_run6 = default_runs(SESSION_6)
per_run6["run"] = [f"{c}, {SESSION_6[c]}, {d[11:16]}" for c, d in zip(per_run6.commit, per_run6.date)]
per_run6["shape"] = [f"{m}x{n}x{k}" for m, n, k in zip(per_run6.M, per_run6.N, per_run6.K)]
table6 = per_run6.pivot_table(index="run", columns="shape", values="pct", sort=False)
squares6 = [f"{s}x{s}x{s}" for s in gemm_bench.SQUARE]
table6 = table6[squares6 + [c for c in table6.columns if c not in squares6]]
display(table6.round(1).style.format("{:.1f}", na_rep="").background_gradient(cmap="RdBu", vmin=80, vmax=120))
print(f"% of torch.matmul, data/measured/h200/gemm.csv, variant {configs.HOPPER_DEFAULT!r}; "
      f"torch.matmul at 4096³: " + ", ".join(f"{r.tflops:.0f}" for r in bench6[(bench6.kernel == "torch")
                                                                               & (bench6.M == 4096)].itertuples())
      + " TFLOP/s")

# %% [markdown]
# In both runs with settled turns the default beats cuBLAS at all three squares, and by 5 % or more at 2560 × 7168,
# 4608 × 7680, 5632 × 7168 and 7680 × 5120; the one run in the old order read 101 / 103 / 99 % at the squares.
# torch.matmul's own numbers are back where they were before the turn order changed. Two shapes show what one run
# is worth: 2048 × 6656 read 102 % and 107 % in two runs of one commit, and 2048 × 5120 stays under cuBLAS
# (97–99 %), where our balanced plan is mostly 192-wide tiles and cuBLAS is strong.

# %% [markdown]
# ## Take-aways
#
# * A tiling's tail costs *⌈T/S⌉ − T/S* waves. It matters most when there are few waves and the last one is
#   nearly empty.
# * Re-cutting *g* wide tiles into *g + 1* narrow ones adds one item and no work, so *(−T) mod S* re-cuts
#   fill the last wave. Which *g* is best depends on whether the re-cuts yield at least *S* narrow tiles and
#   on how many whole groups fit in a tile row; the planner simulates each and derives the seed's N192 at
#   4096³ and N224 at 8192³ and 16384³ on its own.
# * On the H200 with 128 × 256 tiles, balancing should pay only on the handful of swept shapes listed in
#   section 2; for the others it predicts a few percent at most, about what narrower tiles can lose in
#   efficiency. The prediction is an upper bound: section 3 shows how the measurements compare, and how
#   large their own noise is.
# * Once the tail is fixed, the next limit on the H200 is power: at its 690 W cap, every DRAM byte costs clock.
#   A persistent kernel must keep the tiles *in flight* close together in the raster; handing them out
#   dynamically, in bands whose A fits in L2, brought our DRAM bytes from 1.8x cuBLAS's to 1.07x.
# * Measure where the time goes before choosing a remedy. A timeline stamped by the kernel itself showed an
#   epilogue twice as long as guessed, every SM storing C at the same moment, and a ring that never ran dry.
#   That ruled out one remedy (claiming earlier) and explained why another (deferral) had barely paid.
# * The planner's model is only as good as its unit of cost. Tiles in 16-column steps balance 4096³, which
#   64-column steps could not (+2 %), but a 248-wide tile costs what a 256-wide one does, which a model
#   "proportional to width" could not know.
# * A fair benchmark gives every contender the same chip *and* the same neighbour: the call before a timed call
#   should be its own.
# * A remedy is only as good as its cost on this machine. Stream-K removes a tail of 0.12 waves but hands
#   256 KiB partial sums across the L2, ~10 µs a time at 4096³: it lost 2–3 %. Measure the cost of the
#   mechanism (section 6's *halves* build), not only the idle time it removes.
#
# The planner: `gemm_kernels/waves.py`; its tests: `tests/test_waves.py`. The stage arithmetic that the
# register epilogue pays into is `gemm_kernels/stages.py`.

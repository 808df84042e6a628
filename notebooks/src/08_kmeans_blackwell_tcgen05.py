# %% [markdown]
# # 08 · k-means assignment on Blackwell: tcgen05, TMEM and a faster argmin
#
# **After this notebook you will know**
#
# 1. How a Blackwell (sm_100a) kernel splits into warp roles: a TMA warp, an MMA warp issuing `tcgen05.mma` into
#    **tensor memory (TMEM)**, and four epilogue warps that read TMEM back with `tcgen05.ld`: the pieces of the
#    primer's tcgen05 lesson (notebook 02, section 3), put to work.
# 2. Why the accumulator is double-buffered in TMEM, and why each load must be fenced (`tcgen05.wait::ld`)
#    before its buffer goes back to the MMA warp.
# 3. The changes of flashlib PR #22 to the argmin epilogue (two-chain **ILP2** scan, **norm broadcast** by warp
#    shuffle), and how to *see* each of them in the machine code.
#
# **No Blackwell number in this notebook is measured by us: we have no B200.** Our Blackwell kernels are
# *compiled* here for `sm_100a` with no GPU and read from their PTX and SASS; the numerical contract is checked
# by the torch reference and, on a B200, by `pytest -m gpu`. The only B200 timings shown are the PR author's,
# from the seed document, and every figure and table that shows one says so.

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import display

import kmeans_kernels
from kmeans_kernels import blackwell, sass_checks, seeds
from workbook import gpus, plots, stepper
from workbook import sass as sass_tools
from workbook.primer import draw, exercises, tcgen05_tile

print(gpus.describe())

# %% [markdown]
# ## The computation
#
# For points `x [N, D]` and centroids `c [K, D]` the winner of row *i* is the centroid with the smallest score
#
# $$ s_{ik} = \tfrac12\lVert c_k\rVert^2 - \langle x_i, c_k\rangle ,$$
#
# which ranks centroids exactly as the squared distance does (notebook 03). The dot products are a GEMM
# `x @ c.T` (tensor cores); the half-norms and the argmin are a per-row epilogue on CUDA cores. Ties go to the
# lowest index, NaN and +inf never win: the contract of `kmeans_kernels.reference`.
#
# ## Structure of the kernel: roles and the TMEM double buffer
#
# A CTA owns 128 points. The point tile is loaded once and stays in shared memory; the centroids stream through
# in tiles of 128. As in the primer's `tcgen05_tile`, the MMA result lands in **tensor memory**, 128 lanes × 512
# columns of 32-bit cells per SM, not in registers. A 128 × 128 fp32 accumulator takes 128 columns, so two fit,
# and the MMA warp fills one while the epilogue drains the other. The schematic below is drawn, not measured.
# On the H200 the same overlap paid little: a Hopper warpgroup's folds and another's WGMMAs, run apart at once,
# took nearly the sum of their times (notebook 07, section 9), and Hopper's WGMMA accumulates in the warps'
# registers. Whether TMEM, away from the epilogue's registers, lets the two hide under each other on a B200 is a
# question this machine cannot answer: nothing here ran on one.

# %%
tiles = 5
roles = [("warp 5: TMA", [(t, 0.9, f"load C{t}", 7) for t in range(tiles)]),
         ("warp 4: MMA", [(t + 1, 0.9, f"MMA {t} → acc {t % 2}", t % 2) for t in range(tiles)]),
         ("warps 0-3: epilogue", [span for t in range(tiles) for span in
                                  ((t + 2, 0.25, "ld", t % 2), (t + 2.25, 0.7, f"scan {t}", 2))])]
fig, (timeline_ax, tmem_ax) = plt.subplots(1, 2, figsize=(15, 3.4), layout="constrained",
                                           gridspec_kw={"width_ratios": [1.35, 1]})
draw.timeline(roles, ax=timeline_ax, xlabel="time (schematic: one unit per centroid tile)",
              title="three roles, coupled only by mbarriers", note="ld = tcgen05.ld + wait::ld, then release")
blocks = np.array([[0 if c < 128 else 1 if c < 256 else 7 for c in range(0, 512, 32)] for _ in range(4)])
text = np.where(blocks < 2, np.char.add("acc", blocks.astype(str)), "")
draw.grid(blocks, text, ax=tmem_ax, fontsize=7, xlabel="TMEM columns, in blocks of 32", ylabel="lanes (warp w: 32w..32w+31)",
          title="TMEM of one SM: two 128-column accumulators, 256 of 512 columns")
tmem_ax.set_xticks(range(16), [str(c) for c in range(0, 512, 32)], fontsize="x-small", rotation=90)
tmem_ax.set_yticks(range(4), [f"w{w}" for w in range(4)])
plt.show()

# %% [markdown]
# Each epilogue warp may only read its own quarter of the TMEM lanes (warp *w* reads lanes 32w..32w+31), which is
# why the epilogue is warps 0-3 and thread *t* owns point row *t*, exactly the reading side of the primer's
# `tcgen05_tile`. `tcgen05.ld` is asynchronous: the registers are valid only after `tcgen05.wait::ld`. Releasing
# the accumulator before that wait would let the MMA warp overwrite the cells while they are still being read;
# the kernel fences every load before the release. The epilogue's step per tile, from `kmeans_kernels/blackwell.py`:

# %%
stepper.excerpt(blackwell, "full = acc_consumer.wait_and_advance()", "full.release()")

# %% [markdown]
# ## The variants: one change each
#
# | variant | what changes (seed: flashlib PR #22) | what to look for in the code the compiler made |
# | --- | --- | --- |
# | `serial` | the WS baseline: one compare-select chain over the 128 columns; half-norms staged in shared memory between two named barriers per tile | dependency depth ~ 2 x 128 |
# | `ilp2` | two independent chains (even / odd columns), merged by (score, index) once at the end | depth halves, same number of compare-selects |
# | `norm_broadcast` | each warp loads its tile's 128 half-norms into registers (4 per lane) and broadcasts each with `shuffle_sync` | `SHFL` appears; no `st.shared`, no norm barrier |
# | `x_resident` | no specialised warps: 4 warps, warp 0 issues TMA and MMA between its epilogue steps, one TMEM accumulator | 128 threads instead of 192, 128 TMEM columns instead of 256 |
#
# `x_resident` is the PR's *main* path for N = 1M, D = 128: half the size of the WS CTA in threads and TMEM, so
# two CTAs share an SM and one's scan overlaps the other's MMA. In our version the registers act as the second
# buffer: warp 0 issues the next tile's MMA as soon as the current tile is loaded and fenced.
#
# Compile all four for D = 128 (a few seconds each; N and K are runtime values of the kernel), and read the
# evidence from their SASS and PTX:

# %%
arts = {v: kmeans_kernels.compile_assign(v, N=65536, D=128, K=4096, arch="sm_100a") for v in blackwell.VARIANTS}


def evidence(art):
    ops = sass_tools.histogram(art.sass, base=True)
    releases, unfenced = sass_checks.unfenced_releases(art.ptx)
    return {
        "UTCHMMA (tcgen05.mma)": ops["UTCHMMA"], "UTCBAR (tcgen05.commit)": ops["UTCBAR"],
        "LDTM (tcgen05.ld)": ops["LDTM"], "tcgen05.wait::ld (PTX)": art.ptx.count("tcgen05.wait::ld"),
        "FSETP": ops["FSETP"], "FSEL": ops["FSEL"], "SHFL": ops["SHFL"],
        "compare-select depth": sass_checks.compare_select_depth(art.sass),
        "st.shared (PTX)": sass_checks.shared_stores(art.ptx),
        "norm bar.sync (PTX)": sass_checks.named_barrier_syncs(art.ptx)[blackwell.NORM_BARRIER_ID],
        "releases after a wait::ld": f"{releases - len(unfenced)}/{releases}",
    }


table = pd.DataFrame({v: evidence(a) for v, a in arts.items()}).T
display(table.drop(columns="compare-select depth"))
lesson = sass_tools.histogram(tcgen05_tile.compile().sass, base=True)
print("the primer's tcgen05_tile (notebook 02), one tile and no pipeline:",
      ", ".join(f"{op} {lesson[op]}" for op in ("UTCHMMA", "UTCBAR", "LDTM")))

# %% [markdown]
# Reading the table:
#
# * every variant issues `tcgen05.mma` (SASS `UTCHMMA`), commits it to an mbarrier (`UTCBAR`), and reads TMEM
#   with `LDTM`, the instructions of the primer's `tcgen05_tile` (notebook 02), here inside a pipeline;
# * **norm broadcast** trades the shared-memory buffer (`st.shared`, two `bar.sync` per tile) for `SHFL`;
# * every accumulator release comes after a `tcgen05.wait::ld` in program order (`sass_checks.unfenced_releases`
#   reads the PTX). In the SASS the wait has no instruction of its own: the registers `LDTM` writes are waited
#   for before their first use, like a load's. Around the first TMEM load of `norm_broadcast`:

# %%
code = sass_tools.instructions(arts["norm_broadcast"].sass)
first = next(i for i, ins in enumerate(code) if ins.base == "LDTM")
for ins in code[max(0, first - 3): first + 4]:
    print(f"  {ins.address:05x}  {ins}")
lines = [line.strip() for line in arts["norm_broadcast"].ptx.splitlines()]
load = next(i for i, line in enumerate(lines) if line.startswith("tcgen05.ld"))
wait = next(i for i in range(load, len(lines)) if lines[i].startswith("tcgen05.wait::ld"))
release = next(i for i in range(wait, len(lines)) if lines[i].startswith("mbarrier.arrive"))
print("\nthe same step in PTX, in program order (line numbers of the PTX):")
for i in (load, wait, release):
    print(f"  {i:5d}  {lines[i][:100]}")

# %% [markdown]
# **ILP2** keeps the same work (128 `FSETP` + 128 `FSEL` per tile) but makes the longest def-use chain through
# them shorter: the depth is computed from a register/predicate def-use graph over the scan block
# (`kmeans_kernels.sass_checks.compare_select_depth`), not from opcode names. The serial scan's depth is about
# two instructions per column; before you look, predict ILP2's (the exercise at the end checks it). Below, the
# first compare-selects of one tile's scan, serial against ILP2: in the serial code each `FSETP` compares
# against the `FSEL` result just before it; in ILP2 each chain reads only its own previous result, and the other
# chain's instructions are scheduled elsewhere in the block, so the two chains' latencies overlap.

# %%
for v in ("serial", "ilp2"):
    block = [i for i in sass_checks.scan_block(arts[v].sass) if i.base in ("FSETP", "FSEL")][:8]
    print(f"--- {v}")
    for ins in block:
        print(f"  {ins.opcode:18s} {', '.join(ins.operands)}")
print(f"\nserial: compare-select depth {table.loc['serial', 'compare-select depth']} over one 128-column tile")

# %% [markdown]
# ## What the PR measured on a B200 (not measured here)
#
# The numbers below are transcribed from the PR (seed `000_1326c6fcbc937f5e.txt`, in `data/pr/`). They were
# **measured on a B200 by the PR's author**, with three rotating input sets, 10 warm-up and the median of 30
# calls. We have not measured them: we have no B200. `kmeans_kernels.blackwell.auto_variant` follows the PR's
# choice of path per D (ILP2 at D = 64 and 256, norm broadcast at D = 128) for the same reason.

# %%
main, nightly = seeds.main_table(), seeds.nightly_table()
fig, (vs_main, vs_nightly) = plt.subplots(2, 1, figsize=(12, 8.5), layout="constrained")
for ax, frame, column, against in ((vs_main, main, "improvement_pct", "main"),
                                   (vs_nightly, nightly, "pr_faster_pct", "nightly")):
    plots.speedup_bars(seeds.shape_labels(frame), frame[column], ax=ax, xlabel="N x D x K",
                       title=f"flashlib PR #22 vs {against} on a B200 (measured by the PR author, not here)",
                       source=f"data/pr/ (seed {seeds.SEED_KMEANS}); not measured here")
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right", fontsize="small")
plt.show()
print(seeds.main_geomean_improvement())
display(nightly[["N", "D", "K", "nightly_path", "pr_path", "nightly_ms", "pr_ms", "pr_faster_pct"]]
        .style.hide(axis="index").format({"N": "{:,}", "K": "{:,}", "nightly_ms": "{:.4f}", "pr_ms": "{:.4f}",
                                          "pr_faster_pct": "{:+.1f}"}))

# %% [markdown]
# ## On a B200
#
# If you have one, these check and time our kernels against the reference and against each other
# (`blackwell.pr_cases()` lists the PR's 13 shapes with the main and PR variant of each):
#
# ```bash
# pytest -m gpu tests/test_kmeans_blackwell.py      # every variant, bit for bit on exact inputs, ties, NaN/inf
# python -m kmeans_kernels.bench --gpu b200          # the PR's 13 shapes, main vs PR variant, into data/measured/b200/
# ```
#
# The cell below runs the variants live when it finds a B200 and says so when it does not.

# %%
spec = gpus.current()
if spec is not None and spec.arch == "sm_100a":
    import torch
    from kmeans_kernels import reference
    x = torch.randint(-3, 4, (4097, 128), device="cuda").bfloat16()
    c = torch.randint(-3, 4, (1000, 128), device="cuda").bfloat16()
    want = reference.assign(x, c)
    for v in blackwell.VARIANTS:
        print(v, "matches the reference:", torch.equal(kmeans_kernels.assign(x, c, variant=v), want))
else:
    print(f"No B200 here ({gpus.describe()}): the kernels above were compiled and inspected, not run.")

# %% [markdown]
# ## Exercise
#
# The serial scan's longest chain of compare-selects over one 128-column tile is in the last line printed under
# the SASS listing above. Predict the depth of the ILP2 scan's longest chain (two chains, even and odd columns,
# merged once at the end), then replace `None` with your answer.

# %%
exercises.check_value("ILP2's compare-select depth over one 128-column tile", None,
                      int(table.loc["ilp2", "compare-select depth"]),
                      hint="each chain scans half of the columns, with the same two instructions per column");

# %% [markdown]
# <details><summary>Solution (click to open)</summary>
#
# Half the serial depth: each of the two chains runs over 64 columns with one `FSETP` and one `FSEL` per column,
# `2 × 64 = 128`, and the chains are independent until the single merge at the end. The work is unchanged
# (still 128 compare-selects of each kind per tile); only the critical path is halved.
#
# </details>
#
# ## Take-away
#
# The Blackwell kernel is the primer's tcgen05 lesson in a pipeline: one thread issues `tcgen05.mma` into a TMEM
# accumulator, the commit arrives on an mbarrier, four epilogue warps `tcgen05.ld` their lanes and fence the load
# before handing the accumulator back, and two accumulators let the MMA of one tile overlap the scan of the
# previous. The PR's changes are visible in the machine code (half the scan's dependency depth with ILP2,
# shuffles instead of a shared-memory norm buffer with norm broadcast). What they are worth on a B200 is the PR
# author's measurement, not ours: we have not run these kernels.

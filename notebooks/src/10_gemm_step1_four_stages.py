# %% [markdown]
# # 06 · GEMM on Hopper: a 4-stage TMA → WGMMA pipeline with a staged epilogue
#
# The second kernel family of the workbook is the GEMM itself, `c = a @ b` in bf16 with fp32 accumulation. Seed 004
# (cuda-oxide `gemm_sol_final`, on a B200) starts from a kernel with a **4-stage** shared-memory ring and an epilogue
# that stages the output through a 64 KiB shared-memory buffer, and ends with **7 stages** and no buffer. This notebook
# builds the "before" on Hopper (`gemm_kernels.hopper`, `sm_90a`); notebook 07 takes the step.
#
# **After this notebook you will know**
#
# * how a producer warp and two consumer warpgroups share a **ring of shared-memory stages** through two mbarriers per
#   stage (*full*, *empty*), drawn as a timeline;
# * the **stage arithmetic**: how many stages fit beside the epilogue buffer, for our Hopper tiles and for the seed's
#   B200 tile (`gemm_kernels.stages`), drawn as a bar of shared memory;
# * the **staged epilogue** path registers → shared memory (`stmatrix`) → global (TMA store), and its SASS;
# * what the 4-stage kernel does on the H200 against `torch.matmul` (cuBLAS), next to the seed's B200 "before".
#
# Everything runs on a CPU: the kernel is compiled for `sm_90a`, not run, unless an H100/H200 is present.

# %%
import inspect

import matplotlib.patches as patches
import matplotlib.pyplot as plt
import pandas as pd
import torch
from IPython.display import Markdown, display

from gemm_kernels import hopper, hopper_host, hopper_options, stages
from workbook import gpus, plots, pr, records
from workbook import sass as sass_tools

print(gpus.describe())

# %% [markdown]
# ## 1. The kernel's structure
#
# A persistent kernel: one CTA per SM (132 on an H200), each walking a list of 128 × `tile_n` output tiles. Per CTA,
# 384 threads in three warpgroups:
#
# * **warp 0 (producer)**: for each 64-deep K-block of a tile, TMA-loads `A[128, 64]` and `B[64, tile_n]` into the next
#   free **stage** of the ring;
# * **warpgroups 1 and 2 (consumers)**: each owns 64 rows of the tile and issues WGMMA `m64 × tile_n × k16` straight
#   from shared memory into fp32 registers (128 per thread for `tile_n = 256`); at the end of the tile they run the
#   epilogue.
#
# Per stage, two mbarriers: **full** (armed by the producer with the byte count of the stage; the TMA engine arrives
# when those bytes have landed) and **empty** (each consumer warp arrives when its WGMMAs on that stage are done). The
# producer may run at most `stages` K-blocks ahead: that is the latency the ring can hide. The timeline, schematic:

# %%
def draw_ring(ax, stages_n=4, k_blocks=10, load=1.6, mma=1.0):
    """One row per stage: the TMA fill of K-block k into stage k % stages starts once the WGMMAs of block
    k - stages (the stage's previous contents) are done ('empty'); WGMMA k starts once its fill landed ('full')."""
    mma_done = []
    issue = 0.0
    mma_row = -1.2
    for kb in range(k_blocks):
        s = kb % stages_n
        start = max(issue, mma_done[kb - stages_n] if kb >= stages_n else 0.0)
        issue = start + 0.15                          # the producer issues the next load right away
        m0 = max(start + load, mma_done[-1] if mma_done else 0.0)
        mma_done.append(m0 + mma)
        color = plt.cm.tab10(s)
        ax.add_patch(patches.Rectangle((start, s - 0.35), load, 0.7, color=color, alpha=0.45))
        ax.text(start + load / 2, s, f"TMA k{kb}", ha="center", va="center", fontsize=7)
        ax.add_patch(patches.Rectangle((m0, mma_row - 0.35), mma, 0.7, color=color))
        ax.text(m0 + mma / 2, mma_row, f"k{kb}", ha="center", va="center", fontsize=7, color="white")
        ax.annotate("", xy=(m0 + 0.05, mma_row + 0.35), xytext=(start + load, s - 0.35),
                    arrowprops=dict(arrowstyle="->", color=color, lw=0.7))
        if kb >= stages_n:
            ax.plot([mma_done[kb - stages_n]] * 2, [mma_row + 0.35, s - 0.35], color="0.5", lw=0.7, ls=":")
    ax.set_yticks([*range(stages_n), mma_row], [f"stage {s}" for s in range(stages_n)] + ["WGMMA\n(WG 1-2)"])
    ax.set_xlabel("time (schematic: a load takes 1.6 MMA-steps of latency)\nsolid arrow: 'full' (the bytes landed); "
                  "dotted line: 'empty' (the WGMMAs that read the stage are done) lets the next fill start")
    ax.set_xlim(0, mma_done[-1] + 0.3)
    ax.set_ylim(stages_n - 0.4, mma_row - 0.5)
    ax.set_xticks([])
    ax.set_title(f"A {stages_n}-stage ring: warp 0 keeps up to {stages_n} K-blocks in flight, one per stage; "
                 "the tensor cores never wait once the ring is primed", fontsize="medium")
    ax.spines[["top", "right"]].set_visible(False)


fig, ax = plt.subplots(figsize=(11, 3.6), layout="constrained")
draw_ring(ax)
plt.show()

# %% [markdown]
# With enough stages, the loads for K-blocks ahead are already in flight when the tensor cores need them, and the
# WGMMA row has no gaps. With too few, every gap is memory latency the tensor cores wait for. How many stages a CTA can
# afford is a shared-memory question (section 2).
#
# The producer, the consumers' walk over the work list, and their K loop, from the package (`inspect.getsource`, the
# code that runs). A row of the work list is one segment of K-blocks: all of an item's K, except with notebook 08's
# stream-K option, where a row may hold the end of one item and the start of the next. (The `tracing` lines are
# compiled only into notebook 08's timeline build; the `pending` stores are its deferred epilogue.)

# %%
print(inspect.getsource(hopper.HopperGemm.produce))
print(inspect.getsource(hopper.HopperGemm.load_k_blocks))
src = inspect.getsource(hopper.HopperGemm.consume)
print(src[src.index("        taken = pipeline.make_pipeline_state"):src.index("                    to_c = cutlass.Boolean(True)")])
print(inspect.getsource(hopper.HopperGemm.mainloop))

# %% [markdown]
# Two things to notice. The consumer keeps **one K-block of WGMMAs in flight** (`wait_group(1)`): a stage is released
# only once the WGMMAs of the block *after* it have been issued, so the tensor cores always have the next block queued.
# And the producer's `producer_acquire` is the wait on *empty*; the consumers' `consumer_wait` is the wait on *full*.
#
# ## 2. The stage arithmetic
#
# One stage holds one K-block of both operands. One CTA's shared memory (227 KiB on both GPUs, `workbook.gpus`) is
# split between the stages, the epilogue's output buffer (if the output leaves through shared memory), and a small
# reserve for the barriers. `gemm_kernels.stages.stages(tile, epilogue, arch)` does the bookkeeping:

# %%
print(inspect.getsource(stages.stages).split('"""')[1])

# %% [markdown]
# Four configurations: our Hopper kernel's two tile widths with the staged epilogue of this notebook (two 128 × 32
# sub-tile buffers, 16 KiB, `hopper.STAGED_BUFFERS`), the same with a whole-tile buffer (as the seed's kernel had),
# and the seed's B200 tile: a CTA pair computing 256 × 256, each CTA holding half of A and B per stage and a 128 × 256
# bf16 output buffer of 64 KiB (`SMEM_OUT`).

# %%
SUBTILE = dict(epilogue_tile=(hopper_options.TILE_M, hopper_options.EPI_N), epilogue_buffers=hopper_options.STAGED_BUFFERS)
budgets = {
    "H200 128x256x64\nstaged, 2 sub-tiles": stages.stages((128, 256, 64), "staged", "sm_90a", **SUBTILE),
    "H200 128x256x64\nstaged, whole tile": stages.stages((128, 256, 64), "staged", "sm_90a"),
    "H200 128x128x64\nstaged, 2 sub-tiles": stages.stages((128, 128, 64), "staged", "sm_90a", **SUBTILE),
    "B200 256x256x64 pair\nstaged (seed: 4 stages)": stages.stages((256, 256, 64), "staged", "sm_100a", depth=4),
}
for name, b in budgets.items():
    print(f"{name.replace(chr(10), ', '):45s} {b.describe()}")
most = stages.stages((256, 256, 64), "staged", "sm_100a").stages
print(f"(the B200 arithmetic fits {most} stages beside SMEM_OUT; the seed's kernel ran 4)")


# %%
def draw_budgets(ax, budgets):
    names = list(budgets)
    for i, name in enumerate(names):
        b = budgets[name]
        left = 0.0
        for s in range(b.stages):
            ax.barh(i, b.stage_bytes / 1024, left=left, color="#6baed6" if s % 2 == 0 else "#9ecae1",
                    edgecolor="white")
            ax.text(left + b.stage_bytes / 2048, i, f"stage {s}\n{b.stage_bytes // 1024} KiB", ha="center",
                    va="center", fontsize=6.5)
            left += b.stage_bytes / 1024
        for part, nbytes, color in (("epilogue", b.epilogue_bytes, "#fd8d3c"), ("reserved", b.reserved_bytes, "0.35"),
                                    ("unused", b.leftover, "#f0f0f0")):
            if nbytes:
                ax.barh(i, nbytes / 1024, left=left, color=color, edgecolor="white")
                if part == "epilogue":
                    ax.text(left + nbytes / 2048, i, f"epilogue\n{nbytes // 1024} KiB", ha="center", va="center",
                            fontsize=6.5)
                left += nbytes / 1024
    ax.axvline(227, color="k", linewidth=1)
    ax.text(227, len(names) - 0.45, " 227 KiB per CTA", fontsize=7, va="bottom")
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("shared memory of one CTA (KiB); dark grey: barriers reserve, light: unused")
    ax.spines[["top", "right"]].set_visible(False)


fig, ax = plt.subplots(figsize=(11, 3.6), layout="constrained")
draw_budgets(ax, budgets)
ax.set_title("Stages vs epilogue buffer (gemm_kernels.stages)", fontsize="medium")
plt.show()

# %% [markdown]
# * On the H200 a 128 × 256 stage is 48 KiB: four fit, with or without the 16 KiB sub-tile buffer. The epilogue
#   buffer is not what limits this tile; only a whole-tile buffer (64 KiB) would cost a stage.
# * A 128 × 128 stage is 32 KiB: six fit beside the sub-tile buffer, and notebook 07 shows the seventh.
# * On the B200 the seed's 64 KiB `SMEM_OUT` leaves room for four stages with 34 KiB to spare (five would fit by
#   this arithmetic; the seed's kernel ran four). Removing it is what gives seven.
#
# ## 3. The staged epilogue
#
# After the main loop each consumer thread holds its part of the fp32 tile in registers, in the WGMMA layout (notebook
# 02 draws it). The staged epilogue moves it out in 128 × 32 sub-tiles:
#
# 1. convert 32 columns of the accumulator to bf16 in registers;
# 2. `stmatrix` (SASS `STSM`): each warp writes 8 × 8 matrices of 16-bit values into a shared-memory buffer, in the
#    swizzled layout the TMA store expects;
# 3. a proxy fence (the TMA engine reads shared memory through the *async proxy*, so the generic-proxy writes must be
#    made visible to it) and a named barrier of the 256 consumer threads;
# 4. one warp (warp 4) issues the TMA store (`UTMASTG`) of the sub-tile; the buffer is reused only once that store has read
#    it (`store_ring.producer_acquire`), which is why there are two buffers: one is written while the other drains.

# %%
def draw_path(ax):
    steps = [("fp32 accumulator\n(registers)", "#9ecae1"), ("bf16\n(registers)", "#9ecae1"),
             ("128 x 32 sub-tile\n(shared memory, swizzled)", "#fd8d3c"), ("C in global memory", "#a1d99b")]
    ops = ["convert", "stmatrix (STSM)\n+ fence + barrier", "TMA store (UTMASTG)\none warp, async"]
    for i, (label, color) in enumerate(steps):
        ax.text(i * 3.0, 0, label, ha="center", va="center", fontsize=8,
                bbox=dict(boxstyle="round,pad=0.5", fc=color, ec="none"))
        if i < len(ops):
            ax.annotate("", xy=(i * 3.0 + 1.9, 0), xytext=(i * 3.0 + 1.1, 0), arrowprops=dict(arrowstyle="->"))
            ax.text(i * 3.0 + 1.5, 0.35, ops[i], ha="center", va="bottom", fontsize=7)
    ax.set_xlim(-1.3, 10.3)
    ax.set_ylim(-0.6, 1.0)
    ax.axis("off")
    ax.set_title("Staged epilogue, per 128 x 32 sub-tile (x tile_n / 32 per tile)", fontsize="medium")


fig, ax = plt.subplots(figsize=(11, 1.8), layout="constrained")
draw_path(ax)
plt.show()
print(inspect.getsource(hopper.HopperGemm.staged_epilogue))

# %% [markdown]
# ## 4. The evidence in the machine code
#
# The 4-stage, staged-epilogue kernel compiled for `sm_90a` here (about two seconds; the kernel is shape-generic, the
# shape only picks the work list):

# %%
art = hopper_host.compile_gemm(4096, 4096, 4096, tile=(128, 256, 64), stages=4, epilogue="staged", schedule="uniform")
ops = sass_tools.histogram(art.sass)
base = sass_tools.histogram(art.sass, base=True)
evidence = pd.Series({
    "HGMMA (WGMMA)": base["HGMMA"],
    "UTMALDG (TMA loads of A and B)": base["UTMALDG"],
    "SYNCS (mbarrier traffic)": base["SYNCS"],
    "STSM (stmatrix to the epilogue buffer)": base["STSM"],
    "UTMASTG (TMA store of a sub-tile)": base["UTMASTG"],
    "BAR (named barriers of the epilogue)": base["BAR"],
    "STG.E.128 (direct 16-byte stores of C)": ops["STG.E.128"],
    "other STG (the work schedule's counter reset)": base["STG"] - ops["STG.E.128"],
    "LDL + STL (spills)": base["LDL"] + base["STL"],
}, name="128x256x64, 4 stages, staged")
display(evidence.to_frame())
print("opcodes with modifiers:", {op: n for op, n in ops.items() if op.startswith(("HGMMA", "STSM", "UTMASTG"))})
assert base["HGMMA"] and base["UTMALDG"] and base["STSM"] and base["UTMASTG"] and not ops["STG.E.128"]
assert base["STG"] == ops["STG.E.64"] == 1

# %% [markdown]
# `HGMMA.64x256x16` is the WGMMA of the full tile width; the output leaves only through `STSM` + `UTMASTG` (8 sub-tiles
# of 32 columns per tile), with no `STG` of C (the single 64-bit `STG` is the dynamic work schedule zeroing its item
# counter at the end, notebook 08 section 5), and nothing spills.
#
# ## 5. The number: H200, against `torch.matmul`
#
# `make bench-gemm` (= `python -m gemm_kernels.bench`) on an H200 times each configuration and `torch.matmul` (cuBLAS)
# on the same inputs by the seeds' method and appends rows to `data/measured/h200/gemm.csv`. The configuration of this
# notebook is named `128x256x64 s4 staged uniform` there. The most recent run that measured it and `torch.matmul`:

# %%
TABLE = records.path("h200", "gemm")
SOURCE = TABLE.relative_to(records.DATA.parent)
SHAPE = ["M", "N", "K"]
THIS_STEP = "128x256x64 s4 staged uniform"


def against_torch(df, variant):
    """TFLOP/s of `variant` and of torch.matmul per shape measured for both, and the ratio."""
    mine = df[(df.kernel == "ours") & (df.variant == variant)].set_index(SHAPE)
    ref = df[df.kernel == "torch"].set_index(SHAPE)
    both = mine.index.intersection(ref.index)
    return pd.DataFrame({"ours TFLOP/s": mine.loc[both, "tflops"], "torch TFLOP/s": ref.loc[both, "tflops"],
                         "% of torch": 100 * mine.loc[both, "tflops"] / ref.loc[both, "tflops"],
                         "ours ms": mine.loc[both, "ms_median"], "match rate": mine.loc[both, "match_rate"]}
                        ).reset_index()


measured = records.last_run(records.read("h200", "gemm"), [("ours", THIS_STEP), ("torch", "torch.matmul")])
table = against_torch(measured, THIS_STEP) if not measured.empty else pd.DataFrame()
if table.empty:
    display(Markdown(f"**No H200 rows for `{THIS_STEP}` and `torch.matmul` in `{SOURCE}` yet.** They are recorded on "
                     "an H200 with `make bench-gemm`; re-run this notebook afterwards. No number is shown until it is "
                     "measured."))
else:
    table["shape"] = [f"{m}x{n}x{k}" for m, n, k in zip(table.M, table.N, table.K)]
    display(table[["shape", "ours TFLOP/s", "torch TFLOP/s", "% of torch", "ours ms", "match rate"]]
            .style.hide(axis="index").format(precision=1).format({"ours ms": "{:.4f}", "match rate": "{:.2f}"}))
    print(f"Source: {SOURCE}; provenance of these rows:")
    rows = measured[(measured.variant == THIS_STEP) | (measured.kernel == "torch")]
    display(rows[list(records.PROVENANCE)].drop_duplicates().style.hide(axis="index"))

# %% [markdown]
# **The seed's B200 "before"** (measured by the PR author on a B200, not here; `data/pr/gemm_sol_final.csv` from seed
# 004): the 4-stage kernel with the 64 KiB `SMEM_OUT`, against cuBLASLt's best of its top-8 heuristics, on square sizes.

# %%
seed = pr.gemm_table()
seed["before % of cuBLASLt"] = 100 * seed.before_tflops / seed.cublaslt_top8_tflops
display(seed[["size", "before_tflops", "cublaslt_top8_tflops", "before % of cuBLASLt"]].style.hide(axis="index")
        .format(precision=1))

# %%
if not table.empty:
    square = table[(table.M == table.N) & (table.N == table.K)].sort_values("M")
    fig, ax = plt.subplots(figsize=(9, 3.8), layout="constrained")
    ax.plot(square.M, square["% of torch"], "o-", color="#dd8452", label="H200: ours, 4 stages, staged, vs torch.matmul")
    ax.plot(seed["size"], seed["before % of cuBLASLt"], "s--", color="#2b7bba",
            label="B200: seed's 4-stage kernel vs cuBLASLt top-8 (PR author)")
    ax.axhline(100, color="0.5", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(seed["size"]) | set(square.M)), [f"{s}³" for s in sorted(set(seed["size"]) | set(square.M))])
    ax.set_ylabel("% of the vendor library (TFLOP/s)")
    ax.set_xlabel("M = N = K")
    ax.set_ylim(0, 110)
    ax.legend(frameon=False, fontsize="small", loc="lower right")
    ax.set_title("The 4-stage kernel as a share of the vendor GEMM on each GPU", fontsize="medium")
    ax.spines[["top", "right"]].set_visible(False)
    plots.caption(ax, f"{SOURCE} ({', '.join(measured['gpu'].unique())}); seed 004 via data/pr/gemm_sol_final.csv "
                "(B200, not measured here)")
    plt.show()

# %% [markdown]
# Two different GPUs and two different vendor libraries, so compare shares, not TFLOP/s. The seed's "before" was
# already at 80-97 % of cuBLASLt; the table above says where our Hopper kernel stands against cuBLAS on the H200.
#
# ## 6. On an H100/H200: run it

# %%
spec = gpus.current()
if spec is not None and spec.arch == "sm_90a":
    import gemm_kernels
    g = torch.Generator(device="cuda").manual_seed(int(torch.randint(0, 2**31, ()).item()))
    a = torch.randint(-3, 4, (1000, 776), device="cuda", generator=g).to(torch.bfloat16)   # tails in M, N, K
    b = torch.randint(-3, 4, (776, 1032), device="cuda", generator=g).to(torch.bfloat16)
    c = gemm_kernels.gemm(a, b, tile=(128, 256, 64), stages=4, epilogue="staged", schedule="uniform")
    print("exact on small integers:", torch.equal(c.float(), (a.float() @ b.float()).bfloat16().float()))
else:
    print(f"No H100/H200 here ({gpus.describe()}): the kernel above was compiled and inspected, not run. "
          "On a Hopper GPU: pytest -m gpu tests/test_gemm_hopper.py")

# %% [markdown]
# ## Take-aways
#
# * The ring decouples memory from math: `stages` K-blocks of loads can be in flight, guarded by a *full* and an
#   *empty* mbarrier per stage.
# * Shared memory is the budget: stages × stage size + the epilogue's buffer + barriers ≤ 227 KiB. For the seed's B200
#   tile, a 64 KiB output buffer held the ring at 4 stages.
# * The staged epilogue is `STSM` into shared memory, a barrier, and a TMA store per sub-tile. Notebook
#   `07_gemm_7_stages_register_epilogue` removes that buffer and spends the bytes on stages.

# %% [markdown]
# # 10 · GEMM step 1: a 4-stage TMA → WGMMA pipeline with a staged epilogue
#
# The second kernel family of the workbook is the GEMM itself, `c = a @ b` in bf16 with fp32 accumulation, on
# Hopper (`sm_90a`). Seed 004 (cuda-oxide `gemm_sol_final`, a B200) starts from a kernel with a **4-stage**
# shared-memory ring and an epilogue that stages the output through shared memory, and ends with **7 stages** and no
# buffer. This notebook builds that "before" as one short, complete file,
# [`gemm_kernels/steps/step1_four_stages.py`](../gemm_kernels/steps/step1_four_stages.py); notebooks 11 and 12 change
# it one idea at a time.
#
# **After this notebook you will know**
#
# * how a producer warp and two consumer warpgroups share a **ring of stages** through two mbarriers per stage;
# * the **stage arithmetic**: how many 48 KiB stages fit beside the epilogue buffer in 227 KiB, and how to check it
#   in the compiled kernel;
# * the **staged epilogue**, registers → `stmatrix` → shared memory → TMA store, and its SASS;
# * how to run a step through `gemm_kernels.steps.try_step` and where its H200 number is recorded.
#
# **What runs where.** Everything here runs on a CPU: the kernel is compiled for `sm_90a` and inspected. Checks and
# timings run on an H100/H200; without one, the recorded H200 rows are shown, and the notebook says so.

# %%
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import HTML, Markdown, display

from gemm_kernels import stages, steps
from gemm_kernels.steps import drawings, evidence, exercises
from gemm_kernels.steps import step1_four_stages as step1
from gemm_kernels import seeds as pr
from workbook import gpus, stepper

pd.set_option("display.precision", 3)
print(gpus.describe())

# %% [markdown]
# ## 1. The kernel in one picture
#
# One CTA computes one 128 × 256 tile of `c`; the grid holds every tile once. Its 384 threads are three warpgroups:
#
# * **warpgroup 0, the producer**: one warp issues, for each 64-deep K-block, the TMA loads of `A[128, 64]` and
#   `B[64, 256]` into the next free **stage** of the ring;
# * **warpgroups 1 and 2, the consumers**: 64 rows of the tile each, WGMMA `m64 × n256 × k16` straight from shared
#   memory into 128 fp32 registers per thread; at the end of the tile, the epilogue.
#
# Each stage has a **full** mbarrier (the producer arms it with the stage's byte count, the TMA engine completes it
# when the bytes have landed) and an **empty** one (each consumer warp arrives when its WGMMAs on the stage are done).
# The producer can run `stages` K-blocks ahead of the tensor cores, and that is the memory latency the ring hides:

# %%
drawings.ring_timeline(stages=4)
plt.show()

# %% [markdown]
# ## 2. The step file, in three excerpts
#
# The whole file is one screen of docstring and about 200 lines of code. Its docstring says what the kernel is and
# why, with the arithmetic; the three functions below are its core. First the producer: `producer_acquire` waits on
# *empty* and arms *full*; the two `cute.copy` calls are the TMA loads, counted on that *full* barrier.

# %%
stepper.excerpt(step1, "def produce")

# %% [markdown]
# The consumers wait on *full* (`consumer_wait`), issue the four k16 WGMMAs of a K-block, and keep **one K-block of
# WGMMAs in flight** (`wait_group(1)`): a stage goes back to the producer only once the WGMMAs of the block after it
# have been issued, so the tensor cores always have the next block queued.

# %%
stepper.excerpt(step1, "def consume")

# %% [markdown]
# The staged epilogue, 32 columns at a time: convert to bf16, `stmatrix` into a swizzled 128 × 32 buffer, a proxy
# fence (the TMA engine reads shared memory through the *async proxy*) and a barrier of the 256 consumer threads,
# then one warp issues the TMA store. Two buffers take turns, so one store drains while the next one is written.

# %%
stepper.excerpt(step1, "def epilogue")

# %% [markdown]
# ## 3. The shared-memory arithmetic
#
# A stage holds one K-block of both operands. A CTA may use 227 KiB (`workbook.gpus`), shared by the stages, the
# epilogue's buffer and 1 KiB of mbarriers: `stages × stage + buffer + 1 KiB ≤ 227 KiB`.
# `gemm_kernels.stages.stages(tile, epilogue, arch)` does the bookkeeping, for this step's tile and two others:

# %%
SUBTILES = dict(epilogue_tile=(step1.TILE_M, step1.EPI_N), epilogue_buffers=step1.EPI_BUFFERS)
budgets = {
    "H200 128x256x64, two 128x32 buffers (step 1)": stages.stages((128, 256, 64), "staged", "sm_90a", **SUBTILES),
    "H200 128x256x64, a whole-tile buffer": stages.stages((128, 256, 64), "staged", "sm_90a"),
    "H200 128x128x64, two 128x32 buffers": stages.stages((128, 128, 64), "staged", "sm_90a", **SUBTILES),
    "B200 256x256x64 pair, 64 KiB SMEM_OUT (seed 004)": stages.stages((256, 256, 64), "staged", "sm_100a", depth=4),
}
display(pd.DataFrame([{"configuration": name, "stage KiB": b.stage_bytes / 1024, "buffer KiB": b.epilogue_bytes / 1024,
                       "stages": b.stages, "unused KiB": b.leftover / 1024} for name, b in budgets.items()]))

# %%
drawings.smem_budgets(budgets)
plt.show()

# %% [markdown]
# * Step 1's tile: a stage is 16 KiB of A and 32 KiB of B. Four stages and the two 8 KiB buffers leave 18 KiB
#   unused, and a fifth stage would need 48. The buffer is not what limits this tile: only a whole-tile buffer
#   (64 KiB) would cost a stage.
# * A 128 × 128 stage is 32 KiB: six fit beside the buffers. Notebook 11 shows the seventh.
# * The seed's B200 kernel (a CTA pair per 256 × 256 tile, each CTA holding half of A and B per stage) ran four
#   32 KiB stages beside its 64 KiB output buffer (this arithmetic fits five). Removing the buffer gives seven.
#
# ## 4. What it compiles to
#
# Compiled for `sm_90a` here (a few seconds; the kernel is shape-generic, so any shape will do), the machine code
# must show the step: WGMMA of the full tile width, TMA loads, `STSM` + `UTMASTG` for the output and no `STG`, two
# mbarriers per stage, and a launch shared-memory size equal to the arithmetic above.

# %%
art = step1.compile(4096, 4096, 4096)
facts = evidence.facts(art)
display(pd.Series(facts, name="step 1").to_frame().T)
b = budgets["H200 128x256x64, two 128x32 buffers (step 1)"]
expected_kib = (b.stages * b.stage_bytes + b.epilogue_bytes + b.reserved_bytes) / 1024
print(f"launch shared memory {facts['smem KiB']:g} KiB; the arithmetic: {b.stages} x {b.stage_bytes // 1024} + "
      f"{b.epilogue_bytes // 1024} + {b.reserved_bytes // 1024} = {expected_kib:g} KiB; "
      f"mbarriers {facts['mbarriers']} = 2 x {b.stages} stages")
assert facts["smem KiB"] == expected_kib and facts["mbarriers"] == 2 * b.stages
assert facts["STSM"] and facts["UTMASTG"] and not facts["STG.E.128"] and not facts["spills (LDL+STL)"]

# %% [markdown]
# `HGMMA.64x256x16` is the WGMMA of one warpgroup's 64 rows; `UTMASTG` appears 8 times, once per 32-column sub-tile;
# `WARPGROUP.DEPBAR` twice (the wait in the K loop and the one after it: ptxas kept the WGMMAs pipelined); nothing
# spills. `tests/test_gemm_steps.py` checks the same facts for every step.
#
# ## 5. Try it
#
# `steps.try_step(1)` compiles the step (or your edited copy: `try_step("my_steps/step1_four_stages.py")`, after
# `stepper.copy_for_editing(step1, "my_steps")`), and on an H100/H200 checks it against fp32 torch (small integers,
# exact, with tails in M, N and K, into an output poisoned with NaN; random bf16 within 1e-2; fp16) and times it
# against `torch.matmul` with both timings and 95 % intervals. Without a Hopper GPU it says so and shows the rows
# recorded on the H200.

# %%
trial = steps.try_step(1)
trial

# %% [markdown]
# ## 6. The number: H200, against `torch.matmul`
#
# `python -m gemm_kernels.steps.bench` on an H200 times every step, the production default and `torch.matmul`
# (cuBLAS) in interleaved rounds on the same inputs, and appends the rows to `data/measured/h200/gemm_steps.csv`.
# *latency* is the seeds' method (each call synchronised, as a user sees it); *kernel* is calls back to back. The
# "% of torch" column is torch's time over ours, median over rounds, with its 95 % interval:

# %%
table, note = steps.recorded_report(["step1_four_stages"])
print(note)
if table is not None:
    display(table)

# %% [markdown]
# For scale, the seed's B200 "before" (the PR author's numbers on a B200, not measured here; transcribed from seed 004
# into `data/pr/gemm_sol_final.csv`) against cuBLASLt's best of its top-8 heuristics. Two GPUs and two libraries:
# compare shares, not TFLOP/s.

# %%
seed = pr.gemm_table()
seed["before % of cuBLASLt"] = 100 * seed.before_tflops / seed.cublaslt_top8_tflops
display(seed[["size", "before_tflops", "cublaslt_top8_tflops", "before % of cuBLASLt"]].round(1))

# %% [markdown]
# ## Exercise
#
# Change the tile to 128 × 192 (three 64-column swizzle blocks of B) and keep the staged epilogue. How many stages
# fit? Work it out by hand, then check your answer (replace `None`).

# %%
print(exercises.question("stages"))
answer = None   # your answer, an int
exercises.check("stages", answer) if answer is not None else print("set `answer` and run this cell")

# %%
display(HTML(f"<details><summary>Solution (click to open)</summary><pre>{exercises.solution('stages')}</pre>"
             "</details>"))

# %% [markdown]
# ## Take-aways
#
# * The ring decouples memory from math: up to `stages` K-blocks of loads in flight, guarded by a *full* and an
#   *empty* mbarrier per stage, and one K-block of WGMMAs in flight on the consumer side.
# * Shared memory is the budget: stages × stage + the epilogue's buffer + barriers ≤ 227 KiB. On this tile four
#   48 KiB stages fit with or without the 16 KiB of epilogue buffers; the compiled kernel's launch size says so.
# * The staged epilogue is `STSM` into shared memory, a fence and a barrier, and a TMA store per 32-column sub-tile.
#   Notebook 11 removes it and asks what the freed bytes buy.

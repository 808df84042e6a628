# %% [markdown]
# # 11 · GEMM steps 2 and 3: the register epilogue, and the stages it buys
#
# Seed 004's main change on the B200 removes the epilogue's shared-memory buffer: the output goes from registers
# straight to global memory, 16 bytes per instruction, and the freed 64 KiB become three more pipeline stages
# (4 → 7). This notebook takes the two halves of that change on Hopper, one step file each:
# [`step2_register_epilogue.py`](../gemm_kernels/steps/step2_register_epilogue.py) (the epilogue) and
# [`step3_more_stages.py`](../gemm_kernels/steps/step3_more_stages.py) (the stages), and then asks what they did on
# the H200, and why.
#
# **After this notebook you will know**
#
# * why a 16-byte store needs each thread to hold 8 consecutive columns, why WGMMA does not give that, and how two
#   **butterfly shuffles** inside each quad of lanes fix it;
# * the **stage arithmetic per tile and per GPU**: on Hopper a 128 × 256 × 64 stage is 48 KiB, three times what the
#   epilogue freed, so the bytes buy a stage only on a smaller tile;
# * the B200 side: the seed's `tcgen05.ld.16x256b` + `shfl.bfly` transpose, and what our Blackwell build compiles to;
# * what the H200 measured for both steps, and the evidence for why neither moves the number there.
#
# Everything runs on a CPU (compiled, not run, for `sm_90a` and `sm_100a`); checks and timings need an H100/H200.

# %%
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import HTML, display

from gemm_kernels import blackwell_host, blackwell_options, stages, steps
from gemm_kernels.steps import drawings, evidence, exercises, findings
from gemm_kernels.steps import step1_four_stages as step1
from gemm_kernels.steps import step2_register_epilogue as step2
from gemm_kernels.steps import step3_more_stages as step3
from workbook import gpus, stepper

pd.set_option("display.precision", 3)
print(gpus.describe())

# %% [markdown]
# ## 1. Step 2: why a direct store needs a transpose
#
# A 16-byte store (`st.global.v4`, SASS `STG.E.128`) writes 8 consecutive bf16 values of one row. After WGMMA, lane
# `q` of a quad (`q = lane % 4`) holds, in each 8-column group `g` of its two rows, only columns `8g + 2q` and
# `8g + 2q + 1`: one 32-bit word (a bf16 pair) per group. Four adjacent groups, 32 columns, are then a 4 × 4 matrix of
# words spread over the quad: **lane q holds row q of it, a store wants a column**. Two butterfly steps (xor 1, then
# xor 2), each swapping the 2 × 2 blocks that are out of place between lanes `q` and `q ^ m`, transpose it:

# %%
drawings.quad_transpose()
plt.show()
after = drawings.quad_transpose_model(drawings.wgmma_words())
assert after == [[drawings.wgmma_words()[t][q] for t in range(4)] for q in range(4)]   # lane q: group q, in order

# %% [markdown]
# In the step file the transpose is eight lines of plain Python that unroll while the kernel is traced: per pair of
# words, one `shuffle_sync_bfly` and two selects. Four shuffles per row half and 32 columns: 64 per thread for a
# 256-wide tile.

# %%
stepper.excerpt(step2, "def quad_transpose")

# %% [markdown]
# ## 2. The diff from step 1
#
# Everything else is step 1's: the ring, the WGMMAs, the raster. The diff (code only, docstrings aside) removes the
# TMA store descriptor, the buffer and the `stmatrix` loop, and adds the packing, the transpose and one predicated
# store per row half and 32 columns: the predicate (`row < M and col < N`) is all the tail handling it needs.

# %%
stepper.diff(step1, step2, module_docstring=False)

# %%
steps.try_step(2)

# %% [markdown]
# The SASS delta says it in opcodes: `STSM`, `UTMASTG` and the epilogue's 16 `BAR.SYNC` are gone; 16 `STG.E.128` and
# 64 `SHFL.BFLY` are new (plus the `SEL`s of the transpose), and the launch needs 16 KiB less shared memory.
#
# ## 3. Step 3: what the freed bytes buy, per tile and per GPU
#
# `gemm_kernels.stages` once more, now with both epilogues. The staged epilogue on Hopper keeps two 128 × 32 buffers
# (16 KiB); the seed's B200 kernel kept a whole 128 × 256 accumulator per CTA (64 KiB, its `SMEM_OUT`).

# %%
SUBTILES = dict(epilogue_tile=(128, 32), epilogue_buffers=2)
tiles = {"H200 128x256x64": ((128, 256, 64), "sm_90a", SUBTILES, None),
         "H200 128x128x64": ((128, 128, 64), "sm_90a", SUBTILES, None),
         "B200 256x256x64 pair (seed 004)": ((256, 256, 64), "sm_100a", {}, 4)}
pairs, rows = {}, []
for name, (tile, arch, extra, seed_depth) in tiles.items():
    staged = stages.stages(tile, "staged", arch, depth=seed_depth, **extra)
    register = stages.stages(tile, "register", arch)
    pairs[f"{name}, staged"], pairs[f"{name}, register"] = staged, register
    rows.append({"tile": name, "stage KiB": staged.stage_bytes / 1024, "freed KiB": staged.epilogue_bytes / 1024,
                 "staged: stages": staged.stages, "register: stages": register.stages,
                 "stage bought": register.stages > staged.stages})
display(pd.DataFrame(rows))

# %%
drawings.smem_budgets(pairs, title="Removing the epilogue buffer: 4 -> 4 and 6 -> 7 on the H200, 4 -> 7 on the B200")
plt.show()

# %% [markdown]
# * **H200, 128 × 256.** A stage is 16 KiB of A + 32 KiB of B = 48 KiB; the epilogue freed 16. The ring stays at
#   four: on this tile the register epilogue can only pay by being a cheaper epilogue, not by a deeper ring.
# * **H200, 128 × 128.** A stage is 32 KiB, as on the B200; the freed 16 KiB and the 18 left over make the seventh.
#   So step 3 takes this tile. It pays for its stages in reuse: each loaded element of A now meets 128 columns of B,
#   not 256, a third more operand traffic per multiply-add.
# * **B200 (seed 004).** Each CTA of the pair holds half of A and half of B per stage, 32 KiB; without `SMEM_OUT`
#   seven fit, the seed's 4 → 7 (the B200 build, `blackwell_options.DEFAULT_STAGES`, uses exactly these depths).
#
# Step 3's kernel is step 2's; the diff is the depth it is compiled with and the tile it defaults to:

# %%
assert blackwell_options.DEFAULT_STAGES == {"register": 7, "staged": 4}
stepper.diff(step2, step3, module_docstring=False)

# %%
steps.try_step(3)

# %% [markdown]
# ## 4. The B200 side: the seed's transpose, and ours
#
# Seed 004 describes its epilogue as `tcgen05.ld.16x256b.x8 → shfl.sync.bfly (xor 1, 2) → st.global.v4.b32`. In the
# 16x256b shape (PTX ISA, tensor-memory fragments), register `r` of lane `l` holds row `l/4` (+8 for the second pair
# of each four registers) and columns `2(l % 4) + r % 2` of 8-column group `r/4`: per 8-column group, each lane of a
# quad holds one bf16 pair in each of two rows. That is, register for register, the layout a Hopper WGMMA leaves, so
# the seed's two butterfly shuffles are step 2's quad transpose:

# %%
same = all(evidence.fragment_16x256b(lane, r) == evidence.wgmma_fragment(lane, r) for lane in range(32) for r in range(64))
print("tcgen05.ld.16x256b fragment == Hopper WGMMA accumulator layout, all 32 lanes x 64 registers:", same)
print("lane 5, registers 0-7 hold (row, column):", [evidence.fragment_16x256b(5, r) for r in range(8)])
assert same

# %% [markdown]
# Our Blackwell GEMM (`gemm_kernels.blackwell`, compiled here for `sm_100a`, never run: we have no B200) chose the
# other TMEM load shape, `32x32b`: one TMEM lane, that is one row of `c`, per thread and 32 consecutive columns per
# load, so a thread's registers are already four 16-byte pieces of its row and no shuffle is needed. The SASS of both
# of its builds, beside step 2 on Hopper and the seed's own description:

# %%
b200 = {f"B200 ours, {ep}": evidence.blackwell_epilogue(blackwell_host.compile_gemm(4096, 4096, 4096, epilogue=ep))
        for ep in ("register", "staged")}
h200 = evidence.facts(step2.compile(4096, 4096, 4096))
table = pd.DataFrame(b200).T
table.loc["H200 step 2"] = {"tcgen05.ld (PTX)": "(none: WGMMA accumulates in registers)", "LDTM (SASS)": "",
                            "SHFL.BFLY (SASS)": h200["SHFL.BFLY"], "STG.E.128 (SASS)": h200["STG.E.128"],
                            "UTMASTG (SASS)": h200["UTMASTG"], "STSM / STS.128 (SASS)": h200["STSM"]}
table.loc["B200 seed 004 (its text)"] = {"tcgen05.ld (PTX)": evidence.SEED_EPILOGUE["tcgen05.ld"],
                                         "shfl.sync.bfly (PTX)": evidence.SEED_EPILOGUE["shuffle"],
                                         "st.global.v4 (PTX)": evidence.SEED_EPILOGUE["store"]}
display(table.fillna("").astype(str))

# %% [markdown]
# One more name from the seed: **CLC**, *cluster launch control*, a Blackwell feature. A running cluster can ask the
# hardware scheduler to cancel a cluster of the grid that has not launched yet and take over its tile
# (`clusterlaunchcontrol.try_cancel`): work stealing done by the GPU itself, so a persistent kernel gets the next tile
# without a global counter. The seed issues that request four K-blocks before a tile ends, so the answer is back when
# the tile is. Hopper has no CLC; the production Hopper GEMM claims tiles from an atomic counter instead
# (notebook 13), and our Blackwell build walks a static list.
#
# ## 5. The number on the H200, and why it does not move
#
# The step benchmark (`python -m gemm_kernels.steps.bench`, `data/measured/h200/gemm_steps.csv`) times each step against
# the one before it in interleaved rounds; "vs previous" is the median ratio of their times (below 1: faster) with its
# 95 % interval, and *noise* means the interval straddles 1:

# %%
table, note = steps.recorded_report(["step1_four_stages", "step2_register_epilogue", "step3_more_stages"])
print(note)
if table is not None:
    display(table[table.contender != "step1_four_stages"])

# %% [markdown]
# The production kernel was timed with the same two changes many times before (`data/measured/h200/gemm.csv`, every
# benchmark run that timed both configurations, each run a different day or commit): the register epilogue against
# the staged one at 4 stages on 128 × 256, and 7 stages with the register epilogue against 6 with the staged one on
# 128 × 128. Gains in % (before's time / after's − 1), per shape, over the runs:

# %%
gains = {"register vs staged epilogue (128x256, 4 stages)": ("128x256x64 s4 staged uniform", "128x256x64 s4 register uniform"),
         "7 vs 6 stages (128x128, register vs staged)": ("128x128x64 s6 staged uniform", "128x128x64 s7 register uniform")}
for title, (before, after) in gains.items():
    g = findings.variant_gains(before, after)
    straddle = bool(((g["lowest %"] < 0) & (g["highest %"] > 0)).all())
    print(f"{title}: runs straddle 0 at every shape: {straddle}; median gains {g['median %'].min():+.1f} .. "
          f"{g['median %'].max():+.1f} %")
    display(g.round(1))

# %% [markdown]
# Where the runs of a shape straddle zero, the change does not move the number beyond what a run moves by itself; the
# cell says where that holds. The why, from three kinds of evidence:
#
# **The arithmetic.** The ring of step 1 already runs ~2.8 µs of loads ahead of the tensor cores (4 K-blocks of
# ~0.7 µs), several DRAM round trips. A deeper ring hides latency that is already hidden. And the epilogue is a small
# part of a tile: its 64 KiB of `c` leave once per K loop of K/64 K-blocks.
#
# **The kernel's own timeline.** The production kernel stamps the global timer around every row it runs
# (`hopper_host.timeline`; notebook 13 draws it). Per row, plain register epilogue against the staged one:

# %%
phases = findings.timeline_phases()
display(phases[phases.variant.isin(["plain", "staged"])])
rows = phases.set_index(["shape", "variant"]).loc["4096x4096x4096"]
rows = rows.loc[["plain", "staged"]]
share = rows["epilogue per row (µs)"] / (rows["K loop per row (µs)"] + rows["epilogue per row (µs)"])
print("epilogue as a share of a row at 4096³:", {k: f"{v:.1%}" for k, v in share.items()},
      f"\nsource: {findings.relative(findings.TIMELINE)}")

# %% [markdown]
# The staged epilogue was *not* the slower one: its TMA store runs asynchronously, while the register epilogue's
# stores hold the warps until they are issued, and either way 132 SMs store `c` at the same moment and the bytes meet
# in the L2. The wait for a row's first K-block is a few tens of nanoseconds: the ring never runs dry, so more stages
# have nothing to remove. (What does shorten the epilogue is to overlap it with the next row's K loop, the production
# default's deferred epilogue, notebook 13.)
#
# **Nsight Compute**, per step at 8192³ (`tools/ncu_gemm_steps.py`, `ncu --clock-control none`): how busy the tensor
# pipe is, where the warps stall, and how much shared-memory traffic goes through the load/store unit. If steps 2 and
# 3 leave the tensor pipe as busy as step 1, there was no stall for them to remove.

# %%
NCU = findings.H200 / "gemm_steps_ncu.txt"
if NCU.exists():
    display(findings.ncu_table(NCU).T)
    print(f"source: {findings.relative(NCU)}")
else:
    print(f"{findings.relative(NCU)} is not recorded yet: on an H200, `python tools/ncu_gemm_steps.py` writes it.")
    old = findings.ncu_table(findings.PROBES / "ncu_deferred_4096.txt")
    display(old[["time (ms)", "SM clock (GHz)", "tensor pipe busy (%)"]])
    print(f"meanwhile, the production kernel and cuBLAS at 4096³: {findings.relative(findings.PROBES / 'ncu_deferred_4096.txt')}")

# %% [markdown]
# **What pays on Hopper instead** is what changes the *work* or its *order*, not the epilogue's path: filling the last
# wave when it is poor (step 4, notebook 12), and in the production kernel, CTA pairs sharing B by TMA multicast, a
# dynamic tile order that keeps the tiles in flight close in L2, and the deferred epilogue (notebook 13).
#
# ## Exercise
#
# For which tile widths does the register epilogue buy a stage on the H200? Work it out from the arithmetic above
# (a stage of a 128 × w tile is `(128 + w) × 64 × 2` bytes), then check (replace `None` with a set).

# %%
print(exercises.question("stage_gain"))
answer = None   # e.g. {64}
exercises.check("stage_gain", answer) if answer is not None else print("set `answer` and run this cell")

# %%
display(HTML(f"<details><summary>Solution (click to open)</summary><pre>{exercises.solution('stage_gain')}</pre>"
             "</details>"))

# %% [markdown]
# ## Take-aways
#
# * A 16-byte store wants 8 consecutive columns in one thread. WGMMA (and the seed's `tcgen05.ld.16x256b`) spread them
#   over a quad, and two butterfly shuffles put them in place; TMEM's `32x32b` load hands a thread whole rows instead.
# * Removing the epilogue buffer buys stages only where a stage is small: 4 → 7 on the seed's B200 tile, 6 → 7 on a
#   128 × 128 Hopper tile, none on the 128 × 256 tile, whose stage is 48 KiB.
# * On the H200 the register epilogue (step 2) barely moves the kernel time, either way by shape (the table above):
#   the 4-stage ring never ran dry, the epilogue is a few percent of a row, and its cost is C's bytes in the L2, not
#   the path through shared memory. The seventh stage (step 3) comes with the 128 x 128 tile, and at the squares that
#   tile costs more than the stage gives (step 3 is slower there); at the poor-wave shape it is faster, because
#   smaller tiles fill the last wave better, which is notebook 12's effect, not the ring's. Neither idea paid on
#   Hopper; the wave tail (notebook 12) and the tile order do.

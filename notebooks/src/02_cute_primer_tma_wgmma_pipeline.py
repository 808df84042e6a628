# %% [markdown]
# # 02 · CuTe DSL primer, part 2: TMA, one WGMMA, tcgen05, and an mbarrier pipeline
#
# A fast Hopper or Blackwell kernel is three machines working at once: the **TMA** unit moves tiles between
# global and shared memory, the **tensor cores** multiply tiles out of shared memory, and ordinary threads do
# everything else. They run asynchronously and meet at **mbarriers** in shared memory. This notebook builds each
# piece as a tiny kernel of `workbook/primer/` and shows the machine code it becomes.
#
# **After this notebook you will be able to**
#
# * set up a TMA copy (`make_tiled_tma_atom`, `tma_partition`) and say what the mbarrier's **transaction count**
#   is and why it must match the box;
# * issue one WGMMA `64 x N x 16` from swizzled shared memory (`make_trivial_tiled_mma`, `make_smem_layout_a/b`,
#   fragments, `fence` / `commit_group` / `wait_group`) and find it in SASS (`HGMMA`);
# * say what changes on Blackwell with `tcgen05`: one thread issues the MMA, the accumulator lives in **tensor
#   memory**, `tcgen05.ld` brings it to registers, two CTAs can share one MMA;
# * follow a ring of shared-memory stages between one producer warp and two consumer warpgroups
#   (`PipelineTmaAsync`: `producer_acquire` / `consumer_wait` / `consumer_release`, pipeline states and phases).
#
# Everything compiles here with no GPU (Hopper lessons for `sm_90a`, the tcgen05 lesson for `sm_100a`). The
# Hopper lessons run and are checked against torch on an H100/H200; the tcgen05 one only on a B200, which we
# do not have: it is compiled and read, never run here.

# %%
import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import display

import cutlass

from workbook import gpus, sass, stepper
from workbook.primer import draw, exercises, layouts, pipeline, tcgen05_tile, tma_copy, wgmma_tile

print(gpus.describe())
HERE = gpus.current()
ON_HOPPER = HERE is not None and HERE.arch == "sm_90a"
ON_BLACKWELL = HERE is not None and HERE.arch == "sm_100a"


def opcodes(art, *prefixes):
    """{opcode: count} of the SASS instructions whose opcode starts with one of `prefixes`."""
    return {op: n for op, n in sorted(sass.histogram(art.sass).items()) if op.startswith(prefixes)}

# %% [markdown]
# ## 1. A copy with TMA
#
# With plain loads every thread computes addresses and issues its own `LDG`s (notebook 01's `scale`: 8 per
# thread). With TMA, the host encodes a **tensor map** once: the tensor's address, shape and strides, and the
# size of the **box** to move. In the kernel, one thread hands the unit a box coordinate and a shared-memory
# address; the unit does the rest, clipping at the tensor's edge. `make_tiled_tma_atom` builds the map from the
# global tensor and the shared-memory layout of one tile:

# %%
stepper.excerpt(tma_copy, "smem_layout =", "store, tma_out")

# %% [markdown]
# How does the kernel know the bytes have landed? An **mbarrier** (8 bytes of shared memory) counts two things:
# *arrivals* (here one is expected) and *transaction bytes*. The issuing thread arrives and announces the bytes
# to expect (`mbarrier_arrive_and_expect_tx`); the TMA unit counts them down as the data lands. When both reach
# zero the barrier's **phase** completes, and `mbarrier_wait(bar, 0)` (wait for phase 0 to complete) returns in
# every thread. `tma_partition` gives the TMA view of the tile: the whole box is one "value".

# %%
stepper.excerpt(tma_copy, "if tidx == 0:", "cp_async_bulk_wait_group")

# %% [markdown]
# ### What it compiles to, next to plain loads
#
# The TMA copy has no `LDG`/`STG` at all: one `UTMALDG` (the load of the whole box), one `UTMASTG` (the store),
# and `SYNCS` instructions, which are the mbarrier operations. The PTX says which is which.

# %%
tma_art, ldg_art = tma_copy.compile(200, torch.float32), layouts.compile(200)
table = pd.DataFrame({"notebook 01's scale (LDG)": opcodes(ldg_art, "LDG", "STG", "UTMA", "SYNCS"),
                      "tma_copy (TMA)": opcodes(tma_art, "LDG", "STG", "UTMA", "SYNCS")}).fillna(0).astype(int)
display(table)
PTX_OF = {"mbarrier.init": "SYNCS.EXCH", "mbarrier.arrive.expect_tx": "SYNCS.ARRIVE.TRANS64",
          "mbarrier.try_wait.parity": "SYNCS.PHASECHK", "cp.async.bulk.tensor.2d.shared::cta.global": "UTMALDG",
          "cp.async.bulk.tensor.2d.global.shared::cta": "UTMASTG"}
for ptx, sass_op in PTX_OF.items():
    print(f"{ptx:44s} in PTX {tma_art.ptx.count(ptx)} x  ->  SASS {sass_op}")

# %% [markdown]
# **The transaction count.** The barrier is armed with the byte count of the *whole box*, `64 × 64 × 4 = 16384`
# for fp32, whatever part of it lies past the tensor's edge: TMA writes zeros there, and those bytes count too.
# Arm it with fewer and the phase completes before the data is all there; with more, it never completes and
# the kernel hangs. The PTX carries the constant:

# %%
expected = tma_copy.tx_bytes(cutlass.Float32)
armed = [line.strip() for line in tma_art.ptx.splitlines() if re.search(rf"mov\.b32\s+%r\d+, {expected};", line)]
print(f"tx_bytes(fp32 tile) = {tma_copy.TILE[0]} x {tma_copy.TILE[1]} x 4 = {expected}")
print("PTX:", armed[0], "  ...  ",
      next(line.strip() for line in tma_art.ptx.splitlines() if "expect_tx" in line))
assert armed

# %%
if HERE is not None and HERE.arch in ("sm_90a", "sm_100a"):
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(300, 200, device="cuda").to(dtype)   # 300 = 4 x 64 + 44 rows, 200 = 3 x 64 + 8 columns
        out = torch.full_like(x, float("nan"))
        assert torch.equal(tma_copy.copy(x, out=out), x)
    print(f"tma_copy on {HERE.name}: every element copied, fp32 and bf16, tails in both directions")
else:
    print("No Hopper or Blackwell GPU here: compiled and read above, not run.")

# %% [markdown]
# ## 2. One WGMMA from shared memory
#
# A Hopper **warpgroup** (4 warps, 128 threads) issues `wgmma.mma_async` together: a `64 × N × 16` product, A and
# B read straight from shared memory through 64-bit descriptors, the fp32 accumulator in the registers of the
# 128 threads (the thread-value layout of notebook 01, section 5). `wgmma_tile.matmul_t` computes
# `C = A @ Bᵀ` for bf16 `A [M, K]`, `B [N, K]`, one CTA per `64 × N` tile of C.
#
# **Swizzled shared memory.** Each WGMMA reads 8-row "core matrices" of A and B. If the rows of a 128-byte-wide
# tile were stored one after the other, the 8 rows' same 16-byte chunk would hit the same shared-memory banks.
# `make_smem_layout_a` picks a layout whose **swizzle** (`S<3,4,3>`: XOR three address bits into three others)
# stores chunk `c` of row `r` at position `c XOR (r % 8)` of its 128-byte line. TMA writes that pattern and
# WGMMA reads it; neither needs to be told more than the layout.

# %%
text, chunks = layouts.wgmma_smem_chunks(64)      # chunks[r, c]: where chunk c of row r is stored
print("shared-memory layout of a (64, 64) bf16 tile:", text)
stored = np.argsort(chunks, axis=1)                # stored[r, p]: which chunk sits at position p
name = np.vectorize(lambda c: f"c{c}")
fig, (logical, physical) = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
draw.grid(np.tile(np.arange(8), (8, 1)), name(np.tile(np.arange(8), (8, 1))), ax=logical,
          xlabel="16-byte chunk c of the row (8 bf16 of K)", title="what each row of the tile holds")
draw.grid(stored, name(stored), ax=physical, xlabel="position in the row's 128-byte line",
          title="where it is stored: position = c XOR (row % 8)")
plt.show()
assert (chunks == np.arange(8)[None, :] ^ np.arange(8)[:, None]).all()

# %% [markdown]
# Read the right grid down a column: every row's chunk in a given bank position is a different `c`, so the 8
# rows of a core matrix spread over all banks. With `K = 16` (32-byte rows) the helper picks a 32-byte swizzle
# instead; `wgmma_smem_chunks(16)` shows it.
#
# **Fragments and the three fences.** `make_fragment_A/B` of the partitioned shared-memory tiles are not data
# but descriptors; the accumulator is a register tensor of the shape `partition_C` gives. Then:

# %%
stepper.excerpt(wgmma_tile, "thr_mma = tiled_mma.get_slice(tidx)", "warpgroup.wait_group(0)")

# %% [markdown]
# `fence` orders the registers the MMAs touch against earlier instructions; `cute.gemm` issues the MMAs (the
# `ACCUMULATE` flag: the first overwrites, the next add); `commit_group` closes a group of them; `wait_group(0)`
# waits until no group is pending. Only then may the accumulator be read. In SASS:

# %%
rows = {}
for k in (16, 64):
    art = wgmma_tile.compile(k, 64)
    rows[f"K = {k}"] = opcodes(art, "HGMMA", "WARPGROUP", "UTMALDG", "SYNCS.ARRIVE")
display(pd.DataFrame(rows).fillna(0).astype(int))
body = [i for i in sass.instructions(art.sass) if i.base in ("WARPGROUP", "HGMMA")]
print("\n".join(f"  {ins}" for ins in body))
assert [i.base for i in body] == ["WARPGROUP"] + ["HGMMA"] * 4 + ["WARPGROUP"]

# %% [markdown]
# One `HGMMA.64x64x16.F32.BF16` per 16 of K, between `WARPGROUP.ARRIVE` (the fence) and `WARPGROUP.DEPBAR`
# (the wait). Between the fence and the wait, the MMAs run asynchronously: a kernel would do other work there.

# %%
if ON_HOPPER:
    for (m, n, k) in [(64, 64, 16), (300, 200, 64), (1, 8, 32)]:
        a, b = torch.randn(m, k, device="cuda").bfloat16(), torch.randn(n, k, device="cuda").bfloat16()
        out = torch.full((m, n), float("nan"), device="cuda")
        got = wgmma_tile.matmul_t(a, b, n_tile=64 if n >= 64 else 8, out=out)
        torch.testing.assert_close(got, (a.double() @ b.double().T).float(), rtol=1e-4, atol=1e-4)
    print(f"wgmma_tile on {HERE.name}: matches torch (in fp64) to fp32 accumulation error, tails included")
else:
    print("No Hopper GPU here: compiled and read above, not run.")

# %% [markdown]
# ## 3. The same product on Blackwell: tcgen05
#
# `workbook/primer/tcgen05_tile.py` computes the same `C = A @ Bᵀ` for `sm_100a`, one CTA per `128 × N` tile.
#
# | | Hopper `wgmma` | Blackwell `tcgen05.mma` |
# |---|---|---|
# | who issues | a warpgroup, 128 threads together | **one thread** (the DSL elects it for `cute.gemm`) |
# | shape per instruction | 64 × N × 16 | 128 × N × 16 (256 × N × 16 for a 2-CTA pair) |
# | accumulator | registers of the 128 threads | **tensor memory** (TMEM): 128 lanes × 512 columns per SM, allocated in columns |
# | completion | `wgmma.wait_group` in the issuing threads | `tcgen05.commit` arrives on an **mbarrier**; anyone may wait on it |
# | result to registers | already there | `tcgen05.ld` (warp w reads lanes 32w..32w+31), then `tcgen05.wait::ld` |
#
# Below, the issuing side (warp 0: load both operands by TMA, wait, one thread issues `K/16` MMAs and commits),
# then the reading side (all 4 warps, after waiting on the commit's barrier): a TMEM copy atom `Ld32x32bOp`
# (32 lanes × 32 bits, repeated over 32 columns) gives each thread its row, then the fence before the registers
# are used.

# %%
print(stepper.excerpt(tcgen05_tile, '"""Warp 0: TMA both operands', "tcgen05.commit"), end="\n\n")
stepper.excerpt(tcgen05_tile, "t2r =", "fence_view_async_tmem_load")

# %%
tc = tcgen05_tile.compile(16, 64)
hopper = wgmma_tile.compile(16, 64)
prefixes = ("HGMMA", "WARPGROUP", "UTCHMMA", "UTCBAR", "LDTM", "UTCATOMSWS", "UTMALDG")
display(pd.DataFrame({"wgmma_tile, sm_90a": opcodes(hopper, *prefixes),
                      "tcgen05_tile, sm_100a": opcodes(tc, *prefixes)}).fillna(0).astype(int))
for ptx in ("tcgen05.alloc", "tcgen05.mma", "tcgen05.commit", "tcgen05.ld", "tcgen05.wait::ld", "tcgen05.dealloc"):
    print(f"{ptx:18s} in the sm_100a PTX: {tc.ptx.count(ptx)}")
print("\n".join(f"  {i}" for i in sass.instructions(tc.sass) if i.base in ("UTCHMMA", "UTCBAR", "LDTM")))

# %% [markdown]
# `UTCHMMA` is the MMA (its operands: two shared-memory descriptors `gdesc`, the TMEM accumulator address, an
# instruction descriptor `idesc`), `UTCBAR` the commit to the mbarrier, `LDTM.x32` the TMEM loads (64 columns:
# two of them), and `UTCATOMSWS` stands where the PTX allocates and frees TMEM. `tcgen05.wait::ld` has no SASS
# instruction of its own in this kernel: the stores wait on the loads' registers like after any load.
#
# **Tensor memory, and the 2-CTA pair.** The accumulator takes N of the 512 TMEM columns, lane i = row i; warp w
# of the CTA may read only lanes `32w..32w+31`, which is why the reading side is exactly 4 warps. With
# `CtaGroup.TWO`, two CTAs on neighbouring SMs (a cluster of 2) run one `256 × N × 16` MMA issued by one thread
# of the pair: each CTA holds 128 rows of A and of the accumulator and **half** of B's N rows, so each SM loads
# half as much of B for the same work (`gemm_kernels/blackwell.py` uses it; this lesson keeps one CTA).

# %%
columns = np.arange(16) * 32                       # TMEM in blocks of 32 lanes x 32 columns
used = np.array([[1 if c < 64 else 0 for c in columns] for _ in range(4)])
text = np.array([[f"w{w}" if c < 64 else "" for c in columns] for w in range(4)])
fig, (tmem_ax, pair_ax) = plt.subplots(1, 2, figsize=(14, 2.8), layout="constrained",
                                       gridspec_kw={"width_ratios": [2.2, 1]})
draw.grid(np.where(used == 1, 0, 7), text, ax=tmem_ax, xlabel="TMEM columns, in blocks of 32 (512 in all)",
          ylabel="lanes, 32 per row", title="this lesson's 128 x 64 fp32 accumulator in TMEM: 64 columns")
tmem_ax.set_xticks(range(16), [str(c) for c in columns], fontsize="small")
tmem_ax.set_yticks(range(4), [f"{32 * w}-{32 * w + 31}" for w in range(4)])
who = np.array([[0, 0, 2], [1, 1, 3]])
draw.grid(who, np.array([["A rows 0-127", "C rows 0-127", "B rows 0 - N/2-1"],
                         ["A rows 128-255", "C rows 128-255", "B rows N/2 - N-1"]]), ax=pair_ax, fontsize=8,
          xlabel="", ylabel="", title="a 2-CTA pair: 256 x N x 16, B split in two")
pair_ax.set_xticks([]); pair_ax.set_yticks([0, 1], ["CTA 0 (SM 2i)", "CTA 1 (SM 2i+1)"])
plt.show()

# %%
if ON_BLACKWELL:
    a, b = torch.randn(300, 64, device="cuda").bfloat16(), torch.randn(200, 64, device="cuda").bfloat16()
    got = tcgen05_tile.matmul_t(a, b, n_tile=128)
    torch.testing.assert_close(got, (a.double() @ b.double().T).float(), rtol=1e-4, atol=1e-4)
    print(f"tcgen05_tile on {HERE.name}: matches torch")
else:
    print("No Blackwell GPU here (we have none): tcgen05_tile is compiled for sm_100a and read, not run.")

# %% [markdown]
# ## 4. A pipeline: one producer warp, two consumer warpgroups
#
# Real kernels stream many tiles through a **ring** of shared-memory slots so that loading tile k+1 overlaps the
# work on tile k. `pipeline.row_sum` computes the row sums of an fp32 matrix that way: per CTA, 128 rows walked in
# (128, 32) tiles through 4 slots; warp 8 issues the TMA loads, warps 0-7 (two warpgroups, two threads per row)
# add. Each slot has a *full* barrier (armed by the producer with the tile's bytes, completed by TMA) and an
# *empty* barrier (completed when all 8 consumer warps have released the slot).
#
# A **pipeline state** is `(index, phase)`: which slot, and the parity of the barrier phase to wait for. The k-th
# use of slot s waits for the k-th completion of its barrier, so the phase flips every time the index wraps.
# The consumers start at phase 0; the producer starts at phase 1 on the empty barriers, which therefore let it
# through at once the first time round. A schematic (computed by `pipeline.schedule`, not measured): grey is a
# load in flight, blue and orange a tile being added up at phase 0 and 1. With one slot every load waits for the
# previous tile to be released, and its latency shows; with four, the producer runs ahead and only the first
# load is exposed.

# %%
fig, axes = plt.subplots(2, 1, figsize=(15, 4.8), sharex=True, layout="constrained",
                         gridspec_kw={"height_ratios": [1, pipeline.STAGES]})
for ax, stages in zip(axes, (1, pipeline.STAGES)):
    rows = pipeline.schedule(8, stages=stages, load=3.0, use=1.0)
    lanes = [(f"slot {s}", [span for r in rows if r["slot"] == s for span in (
        (r["issue"], r["landed"] - r["issue"], f"load T{r['tile']}", 7),
        (r["start"], r["end"] - r["start"], f"T{r['tile']}", r["phase"]))]) for s in range(stages)]
    draw.timeline(lanes, ax=ax, xlabel="" if stages == 1 else "time (schematic: a load takes 3 units, adding up a tile 1)",
                  title=f"{stages} slot{'s' if stages > 1 else ''}: 8 tiles done at t = {rows[-1]['end']:g}")
axes[0].set_xlim(0, 32.5)
fig.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=draw.PALETTE[i]) for i in (7, 0, 1)],
           labels=["load in flight", "tile used at phase 0", "tile used at phase 1"], loc="outside right upper",
           frameon=False, fontsize="small")
plt.show()
display(pd.DataFrame(pipeline.phases(10), columns=["index", "phase"]).T.rename_axis("consumer step k", axis=1))
# the two roles, from workbook/primer/pipeline.py
print(stepper.excerpt(pipeline, "state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer", "producer_tail"),
      end="\n\n")
stepper.excerpt(pipeline, "state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer", "state.advance()")

# %%
art = pipeline.compile()
display(pd.DataFrame({"row_sum, sm_90a": opcodes(art, "SYNCS", "UTMALDG", "LDS", "SHFL")}))
arrives = art.ptx.count("mbarrier.arrive")
print({"mbarrier.init": art.ptx.count("mbarrier.init"), "mbarrier.arrive.expect_tx": art.ptx.count("expect_tx"),
       "mbarrier.arrive (plain)": arrives - art.ptx.count("expect_tx"),
       "mbarrier.try_wait.parity": art.ptx.count("mbarrier.try_wait.parity"),
       "cp.async.bulk.tensor": art.ptx.count("cp.async.bulk.tensor")})
assert art.ptx.count("mbarrier.init") == 2 * pipeline.STAGES

# %% [markdown]
# Eight `mbarrier.init` (a full and an empty barrier per slot), one TMA load in the producer's loop, the waits
# (`SYNCS.PHASECHK`, each with a sleeping retry), the producer's armed arrive and the consumers' plain arrive
# (`SYNCS.ARRIVE.TRANS64...`), and `LDS.128`: each consumer thread reads its 16 floats of a row in 4 vector
# loads.

# %%
if HERE is not None and HERE.arch in ("sm_90a", "sm_100a"):
    x = torch.randint(-8, 9, (1000, 1000), device="cuda").float()   # integer sums are exact in fp32
    torch.testing.assert_close(pipeline.row_sum(x), x.sum(1), rtol=0, atol=0)
    print(f"row_sum on {HERE.name}: exact on 1000 x 1000 (tails: 1000 = 7 x 128 + 104 rows, 31 x 32 + 8 columns)")
else:
    print("No Hopper or Blackwell GPU here: compiled and read above, not run.")

# %% [markdown]
# ## Exercises
#
# 1. **A transaction count.** `wgmma_tile` loads its A tile and its B tile behind *one* mbarrier. Compiled with
#    `K = 64` and `n_tile = 128` (bf16), what byte count is that barrier armed with?
# 2. **A pipeline state.** A 4-stage consumer state starts at `(index 0, phase 0)`. After 6 calls of
#    `advance()`, which `(index, phase)` does it wait for?

# %%
exercises.check("tx_bytes", None);
exercises.check("phase", None);

# %% [markdown]
# <details><summary>Solutions (click to open)</summary>
#
# 1. A is `64 × 64`, B is `128 × 64`, 2 bytes each: `(64 + 128) × 64 × 2 = 24576` bytes. Both boxes count in
#    full, also where they hang over the matrix's edge (TMA writes zeros there, and those bytes arrive too).
#    `wgmma_tile.tx_bytes(64, 128)` computes it from the shared-memory layouts, and the PTX of
#    `wgmma_tile.compile(64, 128)` holds it as a constant.
# 2. The index is `6 % 4 = 2`; the ring has wrapped once (`6 // 4 = 1`), so the phase has flipped once: `(2, 1)`.
#
# </details>
#
# ## Take-away
#
# TMA turns a tile load into one instruction from one thread plus a byte count on an mbarrier; WGMMA turns a
# `64 × N × 16` product into one instruction per warpgroup, read from a swizzled shared-memory layout that TMA
# wrote; tcgen05 goes further (one thread, the accumulator in TMEM, completion on an mbarrier). A pipeline is
# nothing but these barriers, two per slot, and the `(index, phase)` bookkeeping that `PipelineTmaAsync` does.
# The k-means kernels of notebooks 04-08 are these pieces together: a producer warp streams centroid tiles
# through a ring, consumer warpgroups multiply with WGMMA (tcgen05 on Blackwell) and fold each tile's scores
# into an argmin.

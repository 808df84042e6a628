# %% [markdown]
# # 01 · CuTe DSL primer, part 1: layouts, tensors, and who computes what when
#
# Every kernel in this workbook is written in **CuTe DSL**, CUTLASS's Python front end. If you know CUDA C++,
# most of it will feel familiar: a kernel function, blocks and threads, shared memory. What is new is how CuTe
# describes *where data is*: every tensor is a pointer plus a **layout**, and tiling a matrix among CTAs or
# threads is algebra on layouts rather than index arithmetic written by hand.
#
# **After this notebook you will be able to**
#
# * read a layout `shape:stride` and compute the offset of any coordinate;
# * say what `coalesce`, `composition`, `zipped_divide`, `logical_divide` and `local_tile` do to a layout;
# * follow how a kernel cuts out its CTA's tile, gives each thread its share (`local_partition`, the thread-value
#   layout of an MMA), guards the tail with a coordinate tensor (`make_identity_tensor`) and computes in
#   registers (`make_rmem_tensor`);
# * tell what runs while Python **traces** a kernel (`const_expr`, `range_constexpr`, `print`) from what runs on
#   the **GPU** (`cutlass.range`, `cute.printf`), and see the difference in SASS.
#
# Each lesson is a tiny kernel in `workbook/primer/`, compiled here with no GPU, and run against torch when a
# GPU is present. The whole notebook executes on a CPU in well under a minute.

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import display

import cutlass
import cutlass.cute as cute

from workbook import gpus, sass, stepper
from workbook.primer import draw, exercises, layouts, trace_time

print(gpus.describe())
HERE = gpus.current()
ON_GPU = HERE is not None and HERE.arch in ("sm_90a", "sm_100a")

# %% [markdown]
# ## 1. A layout is a function from coordinates to offsets
#
# A layout is written `shape:stride`. For a coordinate `(i, j)` in the shape, the offset is the dot product with
# the strides: `(8,16):(16,1)` maps `(i, j)` to `16·i + 1·j`, a row-major 8 × 16 matrix. Leave the stride out and
# CuTe picks the **column-major** (leftmost mode fastest) compact one, `(8,16):(1,8)`.
#
# Static layouts are ordinary values while Python traces a `@cute.jit` function, so we can compute with them on
# any machine: `layouts.trace(fn)` runs `fn` inside such a trace and hands back what it returned.

# %%
row_major = layouts.trace(lambda: cute.make_layout((8, 16), stride=(16, 1)))
default = layouts.trace(lambda: cute.make_layout((8, 16)))
print("row-major:", row_major, "   default:", default)
print("offset of (3, 5) in the row-major layout:",
      layouts.trace(lambda: cute.make_layout((8, 16), stride=(16, 1))((3, 5))))

fig, (left, right) = plt.subplots(1, 2, figsize=(13, 3.6), layout="constrained")
draw.layout(layouts.offsets((8, 16), (16, 1)), ax=left, title=f"{row_major}: offset of each (i, j)",
            highlight=(3, 5))
draw.layout(layouts.offsets((8, 16), (1, 8)), ax=right, title=f"{default}: the same shape, column-major")
plt.show()

# %% [markdown]
# Darker cells are larger offsets. Read the left grid along a row: consecutive offsets, so a warp reading a row
# reads contiguous memory. The right grid is contiguous down a column. Same shape, same coordinates, different
# memory order: the layout alone decides.
#
# ## 2. Nested modes, `coalesce`, `composition`
#
# A mode can itself be a tuple. `((2,4),(2,8)):((1,16),(8,64))` is still an 8 × 16 matrix (a coordinate `i` in
# 0..7 is split into `(i % 2, i // 2)`), but its memory order is a tiled one. Three operations you will meet:
#
# * `coalesce(L)` merges modes that are contiguous with each other into one: same function, fewest modes.
# * `composition(A, B)` is the function `A ∘ B`: first `B` maps a coordinate to an index, then `A` maps that
#   index to an offset. It is how CuTe re-indexes a tensor (a tile, a thread's slice) without moving data.
# * `size`, `cosize`: how many coordinates, and one past the largest offset.

# %%
examples = {
    "coalesce((2,4):(1,2))": lambda: cute.coalesce(cute.make_layout((2, 4), stride=(1, 2))),
    "coalesce((2,4):(4,1))": lambda: cute.coalesce(cute.make_layout((2, 4), stride=(4, 1))),
    "coalesce((2,(4,8)):(1,(2,8)))": lambda: cute.coalesce(cute.make_layout((2, (4, 8)), stride=(1, (2, 8)))),
    "composition((8,16):(16,1), (4,2):(2,1))": lambda: cute.composition(
        cute.make_layout((8, 16), stride=(16, 1)), cute.make_layout((4, 2), stride=(2, 1))),
    "size / cosize of ((2,4),(2,8)):((1,16),(8,64))": lambda: (
        cute.size(cute.make_layout(((2, 4), (2, 8)), stride=((1, 16), (8, 64)))),
        cute.cosize(cute.make_layout(((2, 4), (2, 8)), stride=((1, 16), (8, 64))))),
}
display(pd.DataFrame({"result": {name: str(layouts.trace(fn)) for name, fn in examples.items()}}))
draw.layout(layouts.offsets(((2, 4), (2, 8)), ((1, 16), (8, 64))), cell_in=0.36,
            title="((2,4),(2,8)):((1,16),(8,64)): an 8 x 16 matrix stored as 2 x 8 blocks")
plt.show()

# %% [markdown]
# `(2,4):(1,2)` is just 8 consecutive offsets (`8:1`); `(2,4):(4,1)` is row-major and cannot be merged. The
# composition feeds the indices 0..7 that `(4,2):(2,1)` produces into the row-major 8 × 16 matrix, which reads a
# 1-D index column-major: indices 0..7 are its first column, at offsets `16·k`; so `(i, j)` lands at
# `16·(2i + j)`, the layout `(4,2):(32,16)`.
#
# ## 3. Tiling: `zipped_divide`, `logical_divide`, `local_tile`
#
# Dividing a layout by a tiler `(4, 8)` splits each mode into *(inside the tile, which tile)*.
# `logical_divide` keeps the two halves per mode, `((4,2),(8,2))`; `zipped_divide` gathers them as
# `((tile), (rest))`, so that indexing mode 1 picks a tile. `local_tile(tensor, tiler, coord)` is exactly
# `zipped_divide(tensor, tiler)[(None, coord)]`: the tile at `coord`, which is how a CTA finds its block.

# %%
L = lambda: cute.make_layout((8, 16), stride=(16, 1))  # noqa: E731
print("logical_divide:", layouts.trace(lambda: cute.logical_divide(L(), (4, 8))))
print("zipped_divide: ", layouts.trace(lambda: cute.zipped_divide(L(), (4, 8))))
print("local_tile(x, (4, 8), (1, 1)) is the tile",
      layouts.trace(lambda: cute.local_tile(cute.make_identity_tensor((8, 16)), (4, 8), (1, 1))[0]), "and on")
tiles = layouts.tile_index((8, 16), (4, 8))
draw.grid(tiles, layouts.offsets((8, 16), (16, 1)), groups=tiles, cell_in=0.36,
          title="(8,16):(16,1) cut into (4, 8) tiles: colour = tile, number = offset")
plt.show()

# %% [markdown]
# ## 4. A kernel that uses all of it: `scale`, out = α·x
#
# `workbook/primer/layouts.py` holds `scale`: a row-major fp32 matrix, one CTA per (16, 64) tile, 128 threads.
# Its first move cuts out the CTA's tile of the input, of the output, and of a **coordinate tensor**: an
# identity tensor holds at each position its own coordinate `(i, j)` (no memory behind it), and tiling it the
# same way tells every thread which element of `x` it is looking at.

# %%
stepper.excerpt(layouts, "# this CTA's (16, 64) tile", "g_ij =")

# %% [markdown]
# The second move gives each thread its share of the tile. `local_partition(tile, threads, t)` lays the thread
# layout `(4,32):(32,1)` over the tile like a stamp, repeated: thread `t` sits at `(t // 32, t % 32)` of the
# stamp and owns every element the stamp puts it on. A warp covers 32 consecutive columns of one row, so each
# of its loads reads 128 contiguous bytes.

# %%
print(stepper.excerpt(layouts, "this thread's share", "t_ij ="))
thread, value = layouts.partition_owners(layouts.TILE, layouts.THREADS, layouts.THREAD_STRIDE)
draw.owners(thread[:, :32], cell_in=0.4, fontsize=7,
            title="scale's (16, 64) tile, columns 0-31 (32-63 repeat them): the thread that owns each element")
plt.show()
print("thread 37 owns", int((thread == 37).sum()), "elements, at (row, col):",
      [tuple(map(int, rc)) for rc in np.argwhere(thread == 37)])

# %% [markdown]
# The last move: load what lies inside `x` into a **register fragment** (`make_rmem_tensor`, one fp32 register
# per owned element), scale it with one vector expression, store it back. The tail tiles hang over the edge of
# `x`; the coordinate tensor says which of a thread's elements exist (`elem_less(coord, shape)`).

# %%
stepper.excerpt(layouts, "frag = ", "t_out[k] = frag[k]")

# %% [markdown]
# ### What it compiles to
#
# Compiled for `sm_90a` with no GPU (`layouts.compile` hands fake tensors, a dtype and a shape, to
# `cute.compile`), the SASS has one `LDG`, one `FMUL` and one `STG` per owned element, each behind its bounds
# check: the fragment lives in registers, nothing spills.

# %%
art = layouts.compile(cols=200)
h = sass.histogram(art.sass, base=True)
per_thread = layouts.TILE[0] * layouts.TILE[1] // (layouts.THREADS[0] * layouts.THREADS[1])
print(f"elements per thread: {per_thread};  LDG {h['LDG']}, FMUL {h['FMUL']}, STG {h['STG']}, "
      f"ISETP {h['ISETP']}, local memory (LDL/STL) {h['LDL'] + h['STL']}")
for ins in [i for i in sass.instructions(art.sass) if i.base in ("LDG", "FMUL", "STG")][:3]:
    print("   ", ins)
assert h["LDG"] == h["FMUL"] == h["STG"] == per_thread and h["LDL"] + h["STL"] == 0

# %% [markdown]
# ### The check (needs an H100/H200 or B200)
#
# On a GPU, `layouts.scale` compiles for it and runs; the output is poisoned first, and the shape has tails in
# both directions (37 rows, 200 columns: neither a multiple of the tile).

# %%
if ON_GPU:
    x = torch.randn(37, 200, device="cuda")
    out = torch.full_like(x, float("nan"))
    torch.testing.assert_close(layouts.scale(x, -1.5, out=out), -1.5 * x, rtol=0, atol=0)
    print(f"scale on {HERE.name}: matches -1.5 * x exactly, every element written")
else:
    print("No Hopper or Blackwell GPU here: compiled and read above, not run. "
          "On one, this cell runs it (and `pytest -m gpu tests/test_primer.py` checks more shapes).")

# %% [markdown]
# ## 5. The thread-value layout of an MMA
#
# Tensor-core instructions fix which thread holds which element of the result. For a Hopper WGMMA (notebook
# 02), the 64 × N fp32 accumulator is spread over the 128 threads of a warpgroup in a pattern the hardware
# defines. CuTe encodes it as a **TV layout**, `(thread, value) → (row, column)`, and a kernel reads it the same
# way as above: `thr_mma.partition_C(identity_tensor)` gives each thread the coordinates of its values.

# %%
thread, value = layouts.mma_accumulator_owners(16)
fig, (whole, zoom) = plt.subplots(1, 2, figsize=(14, 8.5), layout="constrained",
                                  gridspec_kw={"width_ratios": [0.4, 1]})
draw.owners(thread, ax=whole, show="", ticks=4, title="64 x 16 accumulator: colour = warp")
draw.owners(thread[:16], value[:16], ax=zoom, show="both", colour_by="lane", fontsize=8.5,
            title="rows 0-15 (warp 0): thread.value, colour = thread")
plt.show()
print("thread 5 holds", [(int(r), int(c)) for v in range(8) for r, c in np.argwhere((thread == 5) & (value == v))])

# %% [markdown]
# Each warp owns 16 rows; within them, lane `l` holds rows `l // 4` and `l // 4 + 8`, and in every 8-column
# group the two columns `2·(l % 4)` and `2·(l % 4) + 1`. A row's values are spread over 4 threads, which is why
# any per-row reduction over a WGMMA result ends with shuffles between those 4 lanes.
#
# ## 6. Trace time and run time
#
# A `@cute.jit` or `@cute.kernel` function is run once by Python to **trace** it into IR, which is compiled;
# the compiled code runs later. The DSL rewrites the function's loops and `if`s into IR, so by default they
# run in the compiled code; `cutlass.range_constexpr` (a loop) and `cutlass.const_expr` (a condition) make Python
# run them during the trace instead, leaving no instruction behind. The host function below (it runs on the CPU,
# no GPU needed) shows the split: `print` runs while tracing and sees a runtime value only as `?`; `cute.printf`
# runs in the compiled code.

# %%
print(stepper.excerpt(trace_time, "print(f\"trace: n", "cute.printf"))
trace_time.trace_then_run(cutlass.Int32(5), 2)

# %% [markdown]
# In a kernel the same split decides what the SASS contains. `polyval` evaluates a polynomial with compile-time
# coefficients by Horner's rule: `range_constexpr` unrolls the coefficient loop during the trace (one FFMA per
# coefficient), `const_expr(relu)` keeps or drops the clamp, and `cutlass.range` is a real loop on the GPU (a
# grid-stride loop over the elements, with runtime bounds).

# %%
stepper.excerpt(trace_time, "for i in cutlass.range(bidx", "out[i] = acc")

# %%
rows = []
for coeffs, relu in [((0.5, 3.0), False), ((0.5, 3.0, -1.0, 0.25), False), ((0.5, 3.0, -1.0, 0.25), True),
                     ((0.5, 3.0, -1.0, 0.25, 2.0, -0.75, 1.5), False)]:
    h = sass.histogram(trace_time.compile(coeffs, relu).sass, base=True)
    rows.append({"degree": len(coeffs) - 1, "relu": relu, "FFMA": h["FFMA"], "FMNMX": h["FMNMX"],
                 "LDG": h["LDG"], "STG": h["STG"], "BRA": h["BRA"]})
counts = pd.DataFrame(rows)
display(counts.style.hide(axis="index"))
assert (counts.FFMA == counts.degree).all() and (counts.FMNMX == counts.relu).all() and (counts.LDG == 1).all()

# %% [markdown]
# The FFMA count follows the degree and the FMNMX count follows `relu`: both were decided while tracing. The
# single `LDG` and `STG` are the body of the runtime loop, which the compiler kept as a loop (its branch back
# is among the `BRA`s). Python's own `range` in a kernel gives the same runtime loop as `cutlass.range`, which
# adds controls such as `unroll=1`; only `range_constexpr` unrolls while tracing.
#
# (A trap: a register fragment indexed by a *runtime* loop index cannot stay in registers, so loops over
# fragments, like the ones in `scale`, are `range_constexpr`.)

# %%
if ON_GPU:
    x = torch.randn(1_000_003, device="cuda")
    coeffs = (0.5, 3.0, -1.0, 0.25)
    for relu in (False, True):
        got = trace_time.polyval(x, coeffs, relu)
        torch.testing.assert_close(got, trace_time.reference(x, coeffs, relu), rtol=1e-5, atol=1e-5)
    print(f"polyval on {HERE.name}: matches torch's Horner evaluation, with and without relu")
else:
    print("No Hopper or Blackwell GPU here: polyval was compiled and read, not run.")

# %% [markdown]
# ## Exercises
#
# 1. **Predict an offset.** What is the offset of coordinate `(3, 9)` in the layout `(8,(4,4)):(4,(1,32))`?
#    Work it out by hand, then replace `None` with your answer.
# 2. **Find an owner.** In the 64 × 16 WGMMA accumulator of section 5, which thread holds element
#    (row 41, column 13), and at which index of its fragment? Answer `(thread, value)`, worked out from the rule
#    under the figure (the figure numbers warp 0 only).

# %%
exercises.check("offset", None);
exercises.check("owner", None);

# %% [markdown]
# <details><summary>Solutions (click to open)</summary>
#
# 1. Mode 0: `3·4 = 12`. Mode 1 is nested: `9` in shape `(4,4)` is the coordinate `(9 % 4, 9 // 4) = (1, 2)`,
#    at `1·1 + 2·32 = 65`. The offset is `12 + 65 = 77`.
# 2. Row 41 is in warp 2 (rows 32-47), row 9 of it, a "+ 8" row: `l // 4 = 1`, so lanes 4-7. Column 13 is in
#    the second 8-column group, position 5 of it: `2·(l % 4) + 1 = 5`, so `l % 4 = 2`, lane 6, thread
#    `64 + 6 = 70`. Its value index: `col % 2 = 1`, plus 2 for the "+ 8" row, plus 4 for the second group: 7.
#    Answer `(70, 7)`.
#
# </details>
#
# ## Take-away
#
# A CuTe tensor is a pointer and a layout, and the layout does all the index arithmetic: `local_tile` finds a
# CTA's tile, `local_partition` or an MMA's `partition_C` finds a thread's elements, and an identity tensor
# tiled the same way finds their coordinates for the tail checks. Everything static (layouts, tile sizes,
# `range_constexpr` loops, `const_expr` branches) is settled while Python traces, so it costs nothing at run
# time and shows up in SASS as straight-line code; only `cutlass.range` loops and runtime values remain.
# Next, notebook 02 moves tiles with TMA, multiplies them with WGMMA (and tcgen05 on Blackwell), and couples a
# producer and its consumers with an mbarrier pipeline.

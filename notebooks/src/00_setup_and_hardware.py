# %% [markdown]
# # 00 · Setup: this machine, what a CuTe DSL kernel becomes, and how we time it
#
# Every later notebook builds GPU kernels in Python with **CuTe DSL** (`nvidia-cutlass-dsl`), reads the machine
# code they turn into, and times them. This page checks the tools and shows each of those once.
#
# **After this notebook you will know**
#
# * which machine you are on, and what the workbook does on it (no GPU, a Hopper, a Blackwell);
# * how a CuTe DSL kernel is compiled for a GPU you do not have (`sm_90a`: H100/H200, `sm_100a`: B200) and how
#   to read and count its **SASS**, the instructions the GPU runs;
# * the **two timings** every number in the workbook comes with, and why one is not enough.
#
# Nothing here needs a GPU; on a laptop it runs in seconds.

# %%
import importlib.metadata
import platform

import matplotlib.pyplot as plt
import pandas as pd
import torch
from IPython.display import display

from workbook import gpus, plots, records, sass, stepper
from workbook.primer import exercises, vector_add

print(gpus.describe())
here = gpus.current()
family = here.family if here is not None else "none"
where = pd.DataFrame(
    [("no GPU (laptop, CI)", "none", "none: compiled and read only", "recorded: data/measured/, data/pr/"),
     ("Hopper: H100, H200", "Hopper", "Hopper kernels, checked against the reference", "live, and recorded"),
     ("Blackwell: B200, GB200", "Blackwell", "Blackwell kernels, checked against the reference", "live, and recorded")],
    columns=["machine", "family", "kernels that run", "timings"])
where.insert(0, "", ["◀" if f == family else "" for f in where["family"]])
display(where.drop(columns="family").style.hide(axis="index"))

# %% [markdown]
# Every kernel is compiled for both `sm_90a` and `sm_100a` on every machine; the numerics always have the torch
# reference. We measure on an H200 and have no B200: every Blackwell kernel here is verified by compiling it
# and reading its SASS, and every B200 time shown is somebody else's measurement (the seed PRs'), labelled so.
#
# The versions below are what each measurement row in `data/measured/` records about the machine and the code.

# %%
versions = {**records.provenance(), "python": platform.python_version()}
for package in ("nvidia-cuda-nvdisasm", "numpy", "pandas", "matplotlib"):
    versions[package] = importlib.metadata.version(package)
with pd.option_context("display.max_colwidth", None):
    display(pd.Series(versions, name="").to_frame())

# %% [markdown]
# ## The smallest kernel: `out = a + b`
#
# A CuTe DSL program has two halves. The `@cute.kernel` function is **device code**: every thread runs it once.
# The `@cute.jit` function is **host code**: it picks the grid (one block of 128 threads per 128 elements) and
# launches (on the caller's stream if given one: `const_expr` decides that while Python traces, notebook 01). Both live in `workbook/primer/vector_add.py`, because CuTe DSL compiles only functions whose source is in
# a file. (Notebooks 01 and 02 are a primer of the DSL built from such small lessons.)

# %%
stepper.excerpt(vector_add, "THREADS = 128", "kernel.launch(grid=grid, block=block, stream=stream)")

# %% [markdown]
# ## Compiling for a GPU that is not here
#
# `cute.compile` needs to know what the kernel will be called with, not the data: `vector_add.compile` hands it
# *fake tensors* (a dtype and a shape, no memory), the length a runtime symbol. `workbook.sass.compile_for` adds
# `--gpu-arch`, keeps the PTX (a virtual instruction set, what the DSL emits) and the cubin (the binary `ptxas`
# made of it), and disassembles the cubin into SASS with `nvdisasm`.

# %%
ARCHS = ("sm_90a", "sm_100a")
art = {arch: vector_add.compile(arch) for arch in ARCHS}
for arch, a in art.items():
    print(f"{arch}: {len(a.ptx.splitlines())} lines of PTX, a {len(a.cubin):,}-byte cubin, "
          f"{len(sass.instructions(a.sass))} SASS instructions")

# %% [markdown]
# ## Reading SASS
#
# The two architectures' SASS side by side (the `NOP`s that pad each function to 128 bytes left out); shaded
# rows differ. `@P0 EXIT` is *predicated*: it runs only in threads where predicate `P0` is true. `R9` is a
# per-thread register, `UR4` a *uniform* register (one value for the warp), `c[0x0][...]` a constant-bank
# slot (where kernel parameters arrive), `desc[UR4][R2.64]` a global address with its memory descriptor.

# %%
def listing(a: sass.Artifacts) -> pd.Series:
    return pd.Series({f"{i.address:04x}": str(i) for i in sass.instructions(a.sass) if i.opcode != "NOP"},
                     name=a.arch)


side_by_side = pd.concat([listing(a) for a in art.values()], axis=1).fillna("")
side_by_side.index.name = "address"
shade = lambda row: ["background-color: #fff3cd" if row.iloc[0] != row.iloc[1] else ""] * len(row)  # noqa: E731
display(side_by_side.style.apply(shade, axis=1).set_properties(**{"font-family": "monospace", "text-align": "left"}))

# %% [markdown]
# Same work in the same order on both: read the thread and block index (`S2R`), compute `i`, compare it with the
# length (`ISETP`) and leave if past the end (`@P0 EXIT`), load `a[i]` and `b[i]` (`LDG`), add (`FADD`), store
# (`STG`). The differences are plumbing: parameters sit at other constant-bank offsets, and `sm_100a` loads
# uniform values with `LDCU` where `sm_90a` uses `ULDC`. Counting opcodes (`sass.histogram`) makes such
# statements checkable, which is how the later notebooks state what a kernel change did to the code:

# %%
counts = pd.DataFrame({arch: sass.histogram(a.sass, base=True) for arch, a in art.items()}).fillna(0).astype(int)
counts = counts.drop(index="NOP").sort_values(list(ARCHS), ascending=False)
display(counts.T)
assert all(counts.loc[op].tolist() == [n, n] for op, n in (("LDG", 2), ("FADD", 1), ("STG", 1)))

# %%
if here is not None and here.arch in ARCHS:
    a, b = torch.randn(100_003, device="cuda"), torch.randn(100_003, device="cuda")
    out = torch.full_like(a, float("nan"))
    torch.testing.assert_close(vector_add.add(a, b, out=out), a + b, rtol=0, atol=0)
    print(f"ran on {here.name}: out == a + b for all {len(a):,} elements")
else:
    print("No Hopper or Blackwell GPU here: compiled and read, not run. On one, this cell launches it and checks it.")

# %% [markdown]
# ## Two timings, and why
#
# Every time in the workbook is reported two ways, measured in one process with the contenders taking turns:
#
# 1. **Latency as a user sees it**, the seed PRs' method: three input sets rotated between calls (no call finds
#    its inputs in L2), 10 warm-up calls, the median of 30 calls, each between two CUDA events and followed by a
#    synchronisation. The interval starts when the *host* records the first event, so the Python and launch
#    cost of the call is inside it (our launch path marshals arguments once and replays a CUDA graph,
#    `workbook.launch`, to keep that small).
# 2. **Kernel time back to back**: many launches between two events, no host sync in between: the GPU's time
#    alone, which is what a kernel change moves, as long as the host issues calls faster than the GPU runs them.
#    Where it does not, back to back measures the host, and a faster launch path is what moves it (a captured
#    graph re-aimed at each new output, `workbook.launch`). k-means at K = 512 sits on that edge: a 14.5 us
#    kernel and 12.5 us of host per call on one H100 (an earlier H200 host took about 19,
#    `probes/host_pieces_kmeans_e3855c3.txt`), where back to back read the kernel plus about 1 us between launches,
#    and the synchronised latency the kernel plus the host's 11
#    (`nvidia_h100_80gb_hbm3/probes/kmeans_launch_gaps_4d519cf.csv`).
#
# Why not one number: the first is what a caller pays, but host time blurs a kernel change; the second resolves
# the kernel but hides a slow launch path. And neither is stable over a run: the GPU clock drifts as the chip
# heats. The figure is `torch.matmul` at 4096³ and three variants of our GEMM, timed both ways in four rounds
# (the order rotating) in one process on the H200:

# %%
ROUNDS = records.DATA / "measured" / "h200" / "probes" / "gemm_narrow_rounds.csv"
rounds = pd.read_csv(ROUNDS)
rounds = rounds[rounds["shape"] == "4096x4096x4096"]
colour = dict(zip(rounds["config"].unique(), plt.rcParams["axes.prop_cycle"].by_key()["color"]))
fig, (raw, ratio) = plt.subplots(1, 2, figsize=(12, 4.4), layout="constrained")
for config, rows in rounds.groupby("config", sort=False):
    raw.plot(rows["round"], rows["synced_ms"], "o-", color=colour[config], label=f"{config}: latency (synced)")
    raw.plot(rows["round"], rows["b2b_ms"], "s--", color=colour[config], alpha=0.6, label=f"{config}: back to back")
torch_ms = rounds[rounds.config == "torch"].set_index("round")
for config, rows in rounds[rounds.config != "torch"].groupby("config", sort=False):
    rows = rows.set_index("round")
    ratio.plot(rows.index, rows["b2b_ms"] / torch_ms["b2b_ms"], "s--", color=colour[config],
               label=f"{config} / torch, back to back")
raw.set(xlabel="round", ylabel="ms per call", title="the same four calls, round after round")
ratio.axhline(1, color="0.3", lw=0.8)
ratio.set(xlabel="round", ylabel="time / torch's in the same round", title="ratios within a round")
for ax in (raw, ratio):
    ax.set_xticks(sorted(rounds["round"].unique()))
    ax.legend(fontsize="x-small", frameon=False, ncols=2, loc="upper center", bbox_to_anchor=(0.5, -0.16))
plots.caption(ratio, f"{ROUNDS.relative_to(records.DATA.parent)} (H200, one process, order rotating)", below=40)
plt.show()
spread = 100 * (torch_ms["synced_ms"].max() / torch_ms["synced_ms"].min() - 1)
gap = 100 * (1 - (rounds["b2b_ms"] / rounds["synced_ms"])).median()
print(f"torch.matmul's latency moved {spread:.0f} % between rounds; back to back was {gap:.0f} % below the "
      f"latency (median over rows)")

# %% [markdown]
# Two things to read. The synced latency sits above the back-to-back time: that gap is host time and the
# synchronisation, the same for every kernel, so it shrinks every ratio towards 1. And the whole group moves
# together from round to round by far more than the few percent a kernel step changes; even a ratio within a
# round moves, when the clock changed in the middle of it. So the workbook's comparisons
# (`workbook.timing.compare`) interleave the contenders call by call in many rounds, take each ratio per round,
# and report the median ratio with a 95 % confidence interval from the rounds; a difference inside it is called
# **noise**, not a result. The order of turns matters too: a contender that follows a long, hot kernel runs at the
# clock that kernel left, so the orders form a Williams design (`timing.turn_orders`: each contender leads, and
# follows each other one, equally often). Behind the same neighbour in every round, one k-means kernel read up to
# 17 % slower than its own copy (an H100, `nvidia_h100_80gb_hbm3/probes/timing_turn_order_435d0f1.csv`).
#
# ## Exercise
#
# `vector_add.compile("sm_90a")` compares `i` with a runtime length (`ISETP.GE.AND P0, PT, R9, UR4`). Compiled for
# one length only, `vector_add.compile("sm_90a", n=1000)`, the length becomes a constant in the instruction. Predict
# the constant, in decimal, before you compile it; replace `None` with your answer.

# %%
exercises.check("bound", None);

# %% [markdown]
# <details><summary>Solution (click to open)</summary>
#
# `999` (`0x3e7`): the compiler turned `if i < 1000` into `ISETP.GT.AND P0, PT, R9, 0x3e7` and `@P0 EXIT`, "leave
# if i > 999". The kernels of later notebooks keep their sizes runtime values for that reason: one compiled
# kernel then serves every `N`.
#
# </details>
#
# ## Take-away
#
# A CuTe DSL kernel is ordinary Python that compiles, on any machine, to PTX and SASS you can read and count;
# on a Hopper or Blackwell GPU the same object runs. A time means little alone: the workbook always gives the
# latency a user sees and the kernel's back-to-back time, measured in turns, and calls a difference noise unless
# its confidence interval says otherwise. Next: the CuTe DSL primer (01, 02), then the k-means problem (03).

# %% [markdown]
# # 00 · Setup: this machine, and what a CuTe DSL kernel becomes
#
# Every later notebook builds GPU kernels in Python with **CuTe DSL** (`nvidia-cutlass-dsl`) and looks at the
# machine code they turn into. This first page checks the tools and shows the whole path once, on the smallest
# kernel there is.
#
# **After this notebook you will know**
#
# * which machine you are on, and what the workbook does on it (no GPU, a Hopper, a Blackwell);
# * how to compile a CuTe DSL kernel for a GPU you do not have: `sm_90a` (H100/H200) and `sm_100a` (B200);
# * the two things a compile produces, **PTX** (a virtual instruction set) and **SASS** (the real one), and how to
#   count the SASS instructions with `workbook.sass`;
# * how every number in the workbook is timed, and two traps that moved our own numbers by 10-20 %: host time
#   inside the timed call, and a GPU clock that falls as the chip warms.
#
# Nothing here needs a GPU. On a laptop it runs in a few seconds.

# %%
import importlib.metadata
import inspect
import platform

import matplotlib.pyplot as plt
import pandas as pd
import torch
from IPython.display import display

from workbook import gpus, launch, plots, records, sass, timing
from workbook.primer import vector_add as demo

print(gpus.describe())

# %% [markdown]
# ## What runs where
#
# The same notebooks run on three kinds of machine. Without a GPU every kernel is still **compiled** (for both
# architectures), its SASS is inspected, and the numerics go through the torch reference; timings then come from
# recorded data. With a GPU, the kernels of that GPU's family also **run**, are checked against the reference, and
# are timed live. The row marked `◀` is this machine.

# %%
here = gpus.current()
family = here.family if here is not None else "none"
where = pd.DataFrame(
    [("no GPU (laptop, CI)", "none", "sm_90a and sm_100a", "none", "torch reference on the CPU", "recorded: data/measured/, data/pr/"),
     ("Hopper: H100, H200", "Hopper", "sm_90a and sm_100a", "Hopper kernels, checked against the reference", "reference and kernels", "live on this GPU, and recorded"),
     ("Blackwell: B200, GB200", "Blackwell", "sm_90a and sm_100a", "Blackwell kernels, checked against the reference", "reference and kernels", "live on this GPU, and recorded")],
    columns=["machine", "family", "compiled for", "kernels that run", "numerics", "timings"],
)
where.insert(0, "", ["◀" if f == family else "" for f in where["family"]])
display(where.drop(columns="family").style.hide(axis="index"))

# %% [markdown]
# We have an H200 to measure on, and no B200. Every Blackwell kernel in this workbook is verified by compiling it,
# reading its SASS and checking the reference; every B200 latency shown is one **somebody else measured** (the seed
# PRs' authors), and says so. On a B200, `make bench-kmeans` and `make bench-gemm` measure them for real.
#
# ## The tools and their versions
#
# `records.provenance()` is what every measurement row in `data/measured/` carries, so a number can always be traced
# to the machine and the code that produced it.

# %%
versions = {**records.provenance(), "python": platform.python_version()}
for package in ("nvidia-cuda-nvdisasm", "numpy", "pandas", "matplotlib"):
    versions[package] = importlib.metadata.version(package)
versions["nvdisasm"] = str(sass.nvdisasm_path())
with pd.option_context("display.max_colwidth", None):
    display(pd.Series(versions, name="").to_frame())

# %% [markdown]
# ## The smallest kernel: `out = a + b`
#
# A CuTe DSL program has two halves. The `@cute.kernel` function is the **device code**: every thread runs it, once.
# The `@cute.jit` function is the **host code** that launches it: here, one block of 128 threads per 128 elements.
# Both live in `workbook/primer/vector_add.py`, because CuTe DSL compiles only functions whose source is in a file.

# %%
print(inspect.getsource(demo.vector_add_kernel))
print(inspect.getsource(demo.vector_add))

# %% [markdown]
# ## Compiling for a GPU that is not here
#
# `cute.compile` needs arguments that say what the kernel will be called with. Real tensors work
# (`from_dlpack(torch_tensor)`), but a **fake tensor** is enough: a dtype and a shape, no memory. A length given as
# `cute.sym_int32()` stays a runtime value; an integer would be compiled in as a constant.
#
# `workbook.sass.compile_for` wraps `cute.compile(..., options="--gpu-arch sm_100a --keep-ptx --keep-cubin ...")`
# and hands back the PTX text, the cubin (the GPU binary) and its SASS, disassembled with `nvdisasm`.

# %%
import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor

n = cute.sym_int32()
args = [make_fake_compact_tensor(cutlass.Float32, (n,)) for _ in range(3)]  # a, b, out: float32 of length n
ARCHS = ("sm_90a", "sm_100a")
art = {arch: sass.compile_for(demo.vector_add, *args, arch=arch) for arch in ARCHS}
for arch, a in art.items():
    print(f"{arch}: {len(a.ptx.splitlines())} lines of PTX, a {len(a.cubin):,}-byte cubin, "
          f"{len(sass.instructions(a.sass))} SASS instructions")

# %% [markdown]
# ## PTX: the portable middle
#
# PTX is a virtual instruction set with unlimited registers. The DSL emits it, and `ptxas` (inside the DSL)
# compiles it for one real GPU. For this kernel the two PTX files differ only in their `.target` line:

# %%
ptx_lines = {arch: a.ptx.splitlines() for arch, a in art.items()}
differing = [(x, y) for x, y in zip(*ptx_lines.values()) if x != y]
print(f"{len(differing)} differing line(s) out of {len(ptx_lines['sm_90a'])}:")
for x, y in differing:
    print(f"  sm_90a : {x.strip()}\n  sm_100a: {y.strip()}")
body = [line for line in ptx_lines["sm_100a"] if "global" in line or "add.f32" in line or "setp" in line]
print("\nthe loads, the add, the store and the bounds check, in PTX:")
print("\n".join(body))

# %% [markdown]
# ## SASS: what the GPU actually runs
#
# Here the two architectures part ways. Below, the SASS of each, aligned by address; rows that differ are shaded.
# (Each function ends in `NOP`s that pad it to a 128-byte boundary; they are left out.)
#
# How to read a line: `@P0 EXIT` is *predicated*: it runs only in threads where predicate register `P0` is true.
# `R9` is a per-thread register, `UR4` a *uniform* register (one value for the whole warp), `c[0x0][0x210]` a
# constant-bank slot (this is where kernel parameters arrive), `desc[UR4][R2.64]` a global memory address with its
# memory descriptor.

# %%
def listing(a: sass.Artifacts) -> pd.Series:
    code = {f"{i.address:04x}": str(i) for i in sass.instructions(a.sass) if i.opcode != "NOP"}
    return pd.Series(code, name=a.arch)


side_by_side = pd.concat([listing(a) for a in art.values()], axis=1).fillna("")
side_by_side.index.name = "address"


def shade_differences(row):
    return ["background-color: #fff3cd" if row.iloc[0] != row.iloc[1] else ""] * len(row)


display(side_by_side.style.apply(shade_differences, axis=1).set_properties(**{"font-family": "monospace",
                                                                                "text-align": "left"}))

# %% [markdown]
# Same work, same order: read the thread and block index (`S2R`), compute `i`, compare with `n` (`ISETP`) and leave
# early if past the end (`@P0 EXIT`), load `a[i]` and `b[i]` (`LDG`), add (`FADD`), store (`STG`). The differences
# are in the plumbing: kernel parameters arrive at different constant-bank offsets, and the architectures load
# the uniform values through different instructions. Counting opcodes makes that precise.

# %%
hist = {arch: sass.histogram(a.sass, base=True) for arch, a in art.items()}
counts = pd.DataFrame(hist).fillna(0).astype(int).drop(index="NOP")
counts = counts.loc[counts.sum(axis=1).sort_values(ascending=False, kind="stable").index]
only = {arch: sorted(set(counts.index[counts[arch] > 0]) - set(counts.index[counts[other] > 0]))
        for arch, other in (ARCHS, ARCHS[::-1])}
print("opcodes only one architecture uses:", only)
# the kernel's own work is the same on both: two loads, one add, one store
assert all(h["LDG"] == 2 and h["FADD"] == 1 and h["STG"] == 1 for h in hist.values())

# %%
KIND = {  # what each opcode is for, to color the bars
    "LDG": "global memory", "STG": "global memory",
    "LDC": "constants, parameters", "ULDC": "constants, parameters", "LDCU": "constants, parameters",
    "S2R": "thread/block index", "S2UR": "thread/block index",
    "FADD": "arithmetic", "IMAD": "arithmetic", "LEA": "arithmetic", "IADD3": "arithmetic",
    "ISETP": "control", "EXIT": "control", "BRA": "control",
}
COLORS = {"global memory": "#2b7bba", "constants, parameters": "#9a9a9a", "thread/block index": "#8172b3",
          "arithmetic": "#55a868", "control": "#c44e52", "other": "#dd8452"}

kinds = [KIND.get(op, "other") for op in counts.index]
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True, layout="constrained")
for ax, arch in zip(axes, ARCHS):
    col = counts[arch]
    ax.barh(counts.index, col, color=[COLORS[k] for k in kinds])
    for y, v in enumerate(col):
        if v:
            ax.text(v + 0.05, y, str(v), va="center", fontsize="small")
    ax.set_title(f"{arch}: {sum(col)} instructions (NOP padding left out)", fontsize="medium")
    ax.set_xlabel("count")
    ax.xaxis.get_major_locator().set_params(integer=True)
axes[0].invert_yaxis()
used = [k for k in COLORS if k in kinds]
fig.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=COLORS[k]) for k in used], labels=used,
           loc="outside right upper", fontsize="small", frameon=False, title="used for")
fig.suptitle("SASS opcodes of vector_add (float32), compiled without a GPU")
plots.caption(axes[1], f"workbook.sass.compile_for, nvidia-cutlass-dsl {versions['cutlass_dsl']}")
plt.show()

# %% [markdown]
# ## Static shapes are compiled in
#
# Pass a real tensor instead of a fake one and its length becomes a constant: the bounds check then compares with
# an immediate instead of a parameter. (That is why the kernels of later notebooks mark their shapes dynamic: one
# compiled kernel then serves every `N`.)

# %%
from cutlass.cute.runtime import from_dlpack

static = sass.compile_for(demo.vector_add, *[from_dlpack(torch.zeros(1000)) for _ in range(3)], arch="sm_90a")
for label, a in (("symbolic n", art["sm_90a"]), ("n = 1000", static)):
    (check,) = [i for i in sass.instructions(a.sass) if i.base == "ISETP"]
    print(f"{label:>10}: {check}")

# %% [markdown]
# `0x3e7` is 999: with `n` known, `i < 1000` became `i > 999 → exit`.
#
# ## Running it (only with a GPU)
#
# `Artifacts.compiled` is the callable `cute.compile` returned. On a GPU of the family it was compiled for it runs
# the kernel; here is the check the test suite does too (`tests/test_sass.py`).

# %%
ARCH_OF_FAMILY = {"Hopper": "sm_90a", "Blackwell": "sm_100a"}
if here is not None and here.family in ARCH_OF_FAMILY:
    a, b = torch.randn(100_000, device="cuda"), torch.randn(100_000, device="cuda")
    out = torch.empty_like(a)
    tensors = [from_dlpack(t) for t in (a, b, out)]
    live = sass.compile_for(demo.vector_add, *tensors, arch=ARCH_OF_FAMILY[here.family])
    live.compiled(*tensors)
    torch.cuda.synchronize()
    print(f"ran on {here.name}: out == a + b is {torch.equal(out, a + b)}")
else:
    print("No Hopper or Blackwell GPU here: compiled, not run. On one, this cell launches the kernel and checks it.")

# %% [markdown]
# ## How a kernel is timed here, and two traps
#
# Every latency in the workbook comes from `workbook.timing.bench`, the seeds' method: three input sets rotated
# between calls (so no call finds its inputs in L2 from the call before), 10 warm-up calls, then 30 calls, each
# between two CUDA events and followed by a synchronisation; the median is the number. Because each call is
# synchronised, the interval starts when the *host* records the first event: everything Python does before the
# launch is inside it.
#
# **Trap 1: host time.** On the H200 machine a call of our k-means kernel cost 80 µs of host time, and of the
# GEMM 89 µs, before anything ran on the GPU (torch.matmul: 18 µs). Most of it was building arguments:
# `make_ptr`, `cutlass.Int32`, ctypes marshalling. `workbook.launch.LaunchCache` does that once per argument set
# and then calls the compiled host code directly:

# %%
print(inspect.getsource(launch.LaunchCache.__call__))


def host_us(path):
    """The 'us per call' lines of a probe_host.py output: {(problem, what): microseconds}."""
    found, problem = {}, None
    for line in path.read_text().splitlines():
        if "us per call" in line:
            problem = line.split(",")[0].split()[0]
        elif problem and line.startswith("  ") and line.split()[-1].replace(".", "").isdigit():
            found[problem, line.rsplit(None, 1)[0].strip()] = float(line.split()[-1])
    return found


PROBES = records.DATA / "measured" / "h200" / "probes"
before, after = host_us(PROBES / "host_path_before.txt"), host_us(PROBES / "host_path_after.txt")
graphs = host_us(PROBES / "host_path_graphs.txt")
host = pd.DataFrame({
    "k-means assign()": [before["kmeans", "assign()"], after["kmeans", "assign()"],
                         graphs["kmeans", "assign() graphs on"], after["kmeans", "run_compiled_program(exe args)"]],
    "GEMM gemm(out=)": [before["gemm", "gemm()"], after["gemm", "gemm()"], graphs["gemm", "gemm(out=o) graphs on"],
                        after["gemm", "run_compiled_program(exe args)"]],
}, index=["before", "with LaunchCache", "LaunchCache replaying a CUDA graph", "the compiled host code alone"])
fig, ax = plt.subplots(figsize=(7.5, 3.0), layout="constrained")
host.T.plot.barh(ax=ax, color=["#dd8452", "#55a868", "#4c72b0", "0.6"], width=0.8)
ax.axvline(graphs["gemm", "torch.matmul(out=o)"], color="k", ls="--", lw=1, label="torch.matmul(out=)")
ax.set_xlabel("host microseconds per call (H200 machine's CPU)")
ax.legend(frameon=False, fontsize="small")
ax.set_title("Host time per launch: marshal each argument set once, then replay it", fontsize="medium")
plots.caption(ax, "data/measured/h200/probes/host_path_{before,after,graphs}.txt (tools/probes/probe_host.py)")
plt.show()
display(host.round(1))

# %% [markdown]
# With marshalled arguments, what remained (about 10 µs) was the compiled host code itself: it encodes the TMA
# descriptors and calls `cuLaunchKernelEx` on every call. The cache now *captures* that one launch into a CUDA
# graph the first time it sees an argument set, and afterwards replays it with a single `cuGraphLaunch` (the
# descriptors were encoded at capture): a `gemm()` call costs 7 µs, less than `torch.matmul`'s 15. In the
# seeds' synchronised timing that is worth 5 % at 4096³: in one run (`host_path_graphs.txt`), our kernel read
# 95 % of torch's speed without graphs and 100 % with them, while back to back ours was ahead either way.
# A 4096³ GEMM runs about 180 µs on the GPU, so the 70 µs of Python we started with was a 30 % handicap in this
# method, and none at all in a back-to-back loop: a benchmark that only launches back to back never sees it.

# %%
print(inspect.getsource(launch.capture_graph))
#
# **Trap 2: the clock drifts.** A GPU lowers its clock as it heats. Timed one after the other, the contender that
# runs last runs on the warmest chip. Our k-means benchmark once timed `auto` right after `norm_broadcast`, which is
# *the same kernel* at most shapes, and read `auto` slower at every large shape; the GEMM probe timed torch.matmul
# three times in one process, interleaved with our kernels:

# %%
kmeans = records.read("h200", "kmeans_assign")
seq = kmeans[kmeans.commit == "c3fd2f6"]          # the run that timed them one after the other
same = seq[seq.variant.isin(["auto", "norm_broadcast"]) & (seq.kernel == "ours")].pivot_table(
    index=["N", "D", "K"], columns="variant", values="ms_median")
inter = kmeans[kmeans.commit == "7f811bc"]        # the first interleaved run: auto is norm_broadcast where D < 256
inter = inter[inter.variant.isin(["auto", "norm_broadcast"]) & (inter.kernel == "ours") & (inter.D < 256)]
inter = inter.pivot_table(index=["N", "D", "K"], columns="variant", values="ms_median")
order = pd.read_csv(PROBES / "gemm_timing_order.csv")
torch_rounds = order[(order.config == "torch") & (order["shape"] == "4096x4096x4096")].synced_ms.tolist()
fig, axes = plt.subplots(1, 2, figsize=(12, 3.4), layout="constrained")
for frame, label, color in ((same, "one after the other", "#dd8452"), (inter, "interleaved rounds", "#55a868")):
    drift = 100 * (frame["auto"] / frame["norm_broadcast"] - 1)
    flops = [2 * n * d * k for n, d, k in frame.index]
    axes[0].scatter(flops, drift, label=label, color=color)
axes[0].set_xscale("log")
axes[0].axhline(0, color="k", lw=0.8)
axes[0].set_xlabel("FLOPs of the shape")
axes[0].set_ylabel("auto / norm_broadcast − 1 (%)")
axes[0].set_title("The same kernel, timed twice in one process", fontsize="medium")
axes[0].legend(frameon=False, fontsize="small")
plots.caption(axes[0], "data/measured/h200/kmeans_assign.csv, rows of c3fd2f6 and 7f811bc")
axes[1].bar(["round 1", "round 2", "round 3"], torch_rounds, color="0.6")
axes[1].set_ylabel("torch.matmul 4096³, median ms")
axes[1].set_ylim(0, max(torch_rounds) * 1.15)
axes[1].bar_label(axes[1].containers[0], fmt="%.3f", fontsize="small")
axes[1].set_title("One process, three rounds of the same call", fontsize="medium")
plots.caption(axes[1], "data/measured/h200/probes/gemm_timing_order.csv")
plt.show()
print(f"one after the other, auto read {100 * (same['auto'] / same['norm_broadcast'] - 1).max():.0f} % slower at worst; "
      f"torch.matmul at 4096^3 moved {100 * (max(torch_rounds) / min(torch_rounds) - 1):.0f} % between rounds")

# %% [markdown]
# So both benchmarks time their contenders interleaved (`timing.bench_interleaved`): each still gets 10 warm-up
# calls and 30 timed calls by the seeds' method, but the contenders take turns, and the drift is shared out
# instead of charged to whoever comes last. Until session 6 of the GEMM work the turns were three rounds of 10
# calls; the clock can move 15 % within a minute (torch.matmul at 4096³ read 0.175 and 0.205 ms two rounds apart,
# `probes/gemm_narrow_rounds.csv`), so now the contenders take turns **call by call**, the order rotating, and the
# three input sets rotate over all calls together so that no call finds its inputs left in L2 by the call before.
# It does not remove the noise between runs; that is why every ratio the workbook reports compares contenders
# from *one* run, and why the same shape can read a few percent differently in two runs of the same day.

# %% [markdown]
# ## What's next
#
# Notebook 01 states the problem the first kernel family solves, **k-means assignment** (the nearest centroid of
# every point), with its reference implementation, its numerical contract, and how fast any kernel could possibly
# solve it on an H200 and a B200.

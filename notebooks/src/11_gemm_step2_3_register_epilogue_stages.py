# %% [markdown]
# # 07 · The register-direct epilogue, and what the freed bytes buy: 4 → 7 stages
#
# Notebook 06 ended with a GEMM whose output leaves through a shared-memory buffer. Seed 004's main change removes that
# buffer on the B200: the epilogue stores straight from registers to global memory, 16 bytes per instruction, and the
# 64 KiB it freed become three more pipeline stages (4 → 7). This notebook takes the same step on Hopper, and checks the
# B200 version of it by compilation.
#
# **After this notebook you will know**
#
# * why a direct store needs each thread to hold **8 consecutive columns**, why the WGMMA layout does not give that, and
#   how a **4 × 4 transpose inside each quad of lanes** (two butterfly shuffles) fixes it;
# * how the freed shared memory turns into stages: 4 → 7 for the seed's B200 tile, and what it is worth for our Hopper
#   tiles (not the same!);
# * the SASS evidence on both GPUs: no `STSM`/`STS` and no `UTMASTG` in the epilogue, `STG.E.128` instead;
# * what it did on the H200, next to the seed's B200 before/after table.
#
# Everything runs on a CPU; the kernels are compiled (for `sm_90a` and `sm_100a`), not run, unless a GPU is present.

# %%
import inspect

import matplotlib.patches as patches
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import Markdown, display

from gemm_kernels import blackwell, blackwell_host, blackwell_options, stages
from gemm_kernels import hopper, hopper_epilogue, hopper_host, hopper_options
from workbook import gpus, plots, pr, records
from workbook import sass as sass_tools

print(gpus.describe())

# %% [markdown]
# ## 1. The layout problem
#
# A 128-bit store writes 16 contiguous bytes: 8 bf16 values of one row. After WGMMA, lane `q` of a quad (`q = lane % 4`)
# holds, in every 8-column group `g` of its two rows, only the columns `8g + 2q` and `8g + 2q + 1`: one 32-bit word
# (a bf16 pair) per group. Take 4 adjacent groups (32 columns): the quad holds a 4 × 4 matrix of words, **lane q has
# row q of it (one word of each group), but a store wants a column (all four words of one group)**. Transposing the
# 4 × 4 matrix across the 4 lanes gives lane `q` all 8 columns of group `4j + q`: one `st.global.v4`.
#
# The transpose takes two butterfly steps. In step `m` (1, then 2), lanes `q` and `q ^ m` swap the 2 × 2 blocks that are
# in the wrong place, one shuffle per pair of words. A model of the exchange in plain Python (the kernel's version,
# `hopper._quad_transpose`, follows below):

# %%
def quad_transpose_model(words):
    """words[q][t]: word t of lane q. The same two butterfly steps as hopper_epilogue._quad_transpose, lanes as list entries."""
    w = [list(row) for row in words]
    for m in (1, 2):
        sent = [[None] * 4 for _ in range(4)]
        for q in range(4):                      # what each lane puts on the shuffle, per pair (t, t | m)
            upper = (q & m) != 0
            for t in range(4):
                if t & m == 0:
                    sent[q][t] = w[q][t] if upper else w[q][t | m]
        for q in range(4):                      # shuffle_sync_bfly(offset=m): lane q receives lane q ^ m's value
            upper = (q & m) != 0
            for t in range(4):
                if t & m == 0:
                    got = sent[q ^ m][t]
                    lo, hi = w[q][t], w[q][t | m]
                    w[q][t], w[q][t | m] = (got, hi) if upper else (lo, got)
    return w


before = [[f"g{t}:c{8 * t + 2 * q},{8 * t + 2 * q + 1}" for t in range(4)] for q in range(4)]
after = quad_transpose_model(before)
assert after == [[before[t][q] for t in range(4)] for q in range(4)]   # lane q now holds group q, in column order
print(pd.DataFrame(before, index=[f"lane {q}" for q in range(4)], columns=["word 0", "word 1", "word 2", "word 3"])
      .to_string(), "\n")
print(pd.DataFrame(after, index=[f"lane {q}" for q in range(4)], columns=["word 0", "word 1", "word 2", "word 3"])
      .to_string())


# %%
def draw_transpose(axes, before, after):
    colors = ["#9ecae1", "#fdae6b", "#a1d99b", "#bcbddc"]
    for ax, grid, title in zip(axes, (before, after), ("after WGMMA: lane q holds word (q, t) of group t",
                                                       "after 2 butterfly shuffles: lane q holds group q")):
        for q in range(4):
            for t in range(4):
                group = int(grid[q][t].split(":")[0][1:])
                ax.add_patch(patches.Rectangle((t, q), 0.95, 0.9, color=colors[group]))
                ax.text(t + 0.47, q + 0.45, grid[q][t].replace(":", "\n"), ha="center", va="center", fontsize=7)
        ax.set_xlim(-0.1, 4.1)
        ax.set_ylim(4.1, -0.1)
        ax.set_yticks(np.arange(4) + 0.45, [f"lane {q}" for q in range(4)])
        ax.set_xticks(np.arange(4) + 0.45, [f"word {t}" for t in range(4)])
        ax.set_title(title, fontsize="medium")
        ax.spines[["top", "right", "left", "bottom"]].set_visible(False)
    axes[1].text(4.2, 2, "each row =\n8 consecutive\ncolumns =\none STG.E.128", va="center", fontsize=8)


fig, axes = plt.subplots(1, 2, figsize=(11, 3.4), layout="constrained")
draw_transpose(axes, before, after)
plt.show()

# %% [markdown]
# The kernel's epilogue and transpose, from the package. `coords` (the MMA's own partition of an identity tensor) gives
# each value's (row, column), so the store address is derived, not hard-coded; every 16-byte store is predicated on the
# row and the column, which is all the tail handling it needs.

# %%
for part in (hopper.HopperGemm.register_epilogue, hopper.HopperGemm.pack_accumulator, hopper.HopperGemm.store_words):
    print(inspect.getsource(part))
print(inspect.getsource(hopper_epilogue._quad_transpose))

# %% [markdown]
# On the **B200** no transpose is needed: the Blackwell accumulator lives in tensor memory, and the epilogue's
# `tcgen05.ld` gives each thread one row (TMEM lane) and 32 consecutive columns of it, so a thread's registers are
# already four 16-byte chunks of its row (`gemm_kernels.blackwell`, `register_epilogue`, the loop body):

# %%
src = inspect.getsource(blackwell.Sm100Gemm.register_epilogue)
print(src[src.index("            for s in cutlass.range(subtiles)"):src.index("            item += pairs")].rstrip())

# %% [markdown]
# One more detail of the seed, kept in our B200 build: the accumulator is handed back to the MMA warp right after the
# last TMEM load is fenced, *before* the last global stores, so the next tile's MMAs start earlier.
#
# ## 2. The freed bytes become stages
#
# `gemm_kernels.stages` again (notebook 06), now with the register epilogue, which needs no output buffer:

# %%
SUBTILE = dict(epilogue_tile=(hopper_options.TILE_M, hopper_options.EPI_N), epilogue_buffers=hopper_options.STAGED_BUFFERS)
pairs = {
    "B200 256x256x64 pair (seed 004)": (stages.stages((256, 256, 64), "staged", "sm_100a", depth=4),
                                         stages.stages((256, 256, 64), "register", "sm_100a")),
    "H200 128x256x64": (stages.stages((128, 256, 64), "staged", "sm_90a", **SUBTILE),
                        stages.stages((128, 256, 64), "register", "sm_90a")),
    "H200 128x128x64": (stages.stages((128, 128, 64), "staged", "sm_90a", **SUBTILE),
                        stages.stages((128, 128, 64), "register", "sm_90a")),
}
summary = pd.DataFrame([{"tile": name, "stage (KiB)": s.stage_bytes // 1024, "staged: buffer (KiB)": s.epilogue_bytes // 1024,
                         "staged: stages": s.stages, "register: stages": r.stages, "register: unused (KiB)": r.leftover / 1024}
                        for name, (s, r) in pairs.items()])
display(summary.style.hide(axis="index").format({"register: unused (KiB)": "{:g}"}))
assert summary["staged: stages"].tolist() == [4, 4, 6] and summary["register: stages"].tolist() == [7, 4, 7]
assert blackwell_options.DEFAULT_STAGES == {"register": 7, "staged": 4}   # the B200 builds use exactly these depths


# %%
def draw_budget_pairs(ax, pairs):
    labels = []
    y = 0
    for name, budgets in pairs.items():
        for b in budgets:
            left = 0.0
            for s in range(b.stages):
                ax.barh(y, b.stage_bytes / 1024, left=left, color="#6baed6" if s % 2 == 0 else "#9ecae1",
                        edgecolor="white")
                left += b.stage_bytes / 1024
            ax.text(left / 2, y, f"{b.stages} stages x {b.stage_bytes // 1024} KiB", ha="center", va="center",
                    fontsize=7)
            if b.epilogue_bytes:
                ax.barh(y, b.epilogue_bytes / 1024, left=left, color="#fd8d3c", edgecolor="white")
                ax.text(left + b.epilogue_bytes / 2048, y, f"{b.epilogue_bytes // 1024}", ha="center", va="center",
                        fontsize=7)
                left += b.epilogue_bytes / 1024
            ax.barh(y, b.reserved_bytes / 1024, left=left, color="0.35")
            labels.append(f"{name}\n{b.epilogue} epilogue")
            y += 1
        y += 0.4
    ax.axvline(227, color="k", linewidth=1)
    ax.set_yticks([i + 0.4 * (i // 2) for i in range(len(labels))], labels, fontsize=7.5)
    ax.invert_yaxis()
    ax.set_xlabel("shared memory of one CTA (KiB); orange: epilogue buffer, dark grey: barriers; line: 227 KiB")
    ax.spines[["top", "right"]].set_visible(False)


fig, ax = plt.subplots(figsize=(11, 4.4), layout="constrained")
draw_budget_pairs(ax, pairs)
ax.set_title("Removing the epilogue buffer: 4 -> 7 stages on the B200 tile, 4 -> 4 and 6 -> 7 on our Hopper tiles",
             fontsize="medium")
plt.show()

# %% [markdown]
# * **B200 (seed 004).** A CTA's stage of the 256 × 256 pair tile is 32 KiB; the 64 KiB buffer held the ring at four,
#   and without it seven fit (224 KiB), exactly the seed's 4 → 7.
# * **H200, 128 × 256.** A stage is 48 KiB; our staged epilogue only used 16 KiB (two 128 × 32 sub-tiles), and freeing
#   them does not make room for a fifth stage. On this tile the register epilogue can only win by being a cheaper
#   epilogue (no barrier, no `STSM`, no TMA-store wait), not by more stages.
# * **H200, 128 × 128.** A stage is 32 KiB, as on the B200, and the freed 16 KiB plus the slack make the seventh stage.
#   But a 128 × 128 tile does half the math per byte loaded of a 128 × 256 one, so more stages may not pay for the
#   narrower tile. Section 4 says what the H200 measured.
#
# ## 3. The evidence in the machine code
#
# Hopper: the staged and the register build of the same 4-stage 128 × 256 kernel, and the 7-stage 128 × 128 register
# build. Blackwell: seed 004's two builds, staged with 4 stages and register with 7 (`blackwell.compile_gemm`, compiled
# for `sm_100a` here, not run). About two seconds each.

# %%
# the plain register epilogue, as this notebook builds it (gemm() now defers it: notebook 08, section 7)
builds = {
    "H200 128x256 s4 staged": hopper_host.compile_gemm(4096, 4096, 4096, tile=(128, 256, 64), stages=4, epilogue="staged",
                                                  schedule="uniform"),
    "H200 128x256 s4 register": hopper_host.compile_gemm(4096, 4096, 4096, tile=(128, 256, 64), stages=4,
                                                    epilogue="register", schedule="uniform", defer_epilogue=False),
    "H200 128x128 s7 register": hopper_host.compile_gemm(4096, 4096, 4096, tile=(128, 128, 64), stages=7,
                                                    epilogue="register", schedule="uniform", defer_epilogue=False),
    "B200 256x256 s4 staged": blackwell_host.compile_gemm(4096, 4096, 4096, stages=4, epilogue="staged"),
    "B200 256x256 s7 register": blackwell_host.compile_gemm(4096, 4096, 4096, stages=7, epilogue="register"),
}
COLUMNS = {"STG.E.128": lambda h: h["STG.E.128"],
           "other STG": lambda h: sum(n for op, n in h.items() if op.startswith("STG") and op != "STG.E.128"),
           "STSM / STS.128 (to a buffer)": lambda h: h["STSM.16.M88.4"] + h["STS.128"],
           "UTMASTG (TMA store)": lambda h: sum(n for op, n in h.items() if op.startswith("UTMASTG")),
           "SHFL.BFLY": lambda h: h["SHFL.BFLY"],
           "BAR": lambda h: sum(n for op, n in h.items() if op.startswith("BAR")),
           "MMA (HGMMA / UTCHMMA)": lambda h: sum(n for op, n in h.items() if op.startswith(("HGMMA", "UTCHMMA"))),
           "LDL + STL": lambda h: sum(n for op, n in h.items() if op.startswith(("LDL", "STL")))}
evidence = pd.DataFrame({name: {col: f(sass_tools.histogram(art.sass)) for col, f in COLUMNS.items()}
                         for name, art in builds.items()}).T
display(evidence)
for name in builds:
    row = evidence.loc[name]
    if "register" in name:
        assert row["STG.E.128"] > 0 and row["UTMASTG (TMA store)"] == 0 and row["STSM / STS.128 (to a buffer)"] == 0
    else:
        assert row["STG.E.128"] == 0 and row["UTMASTG (TMA store)"] > 0 and row["STSM / STS.128 (to a buffer)"] > 0
# the shuffle counts the text below explains: the quad transpose on Hopper, none on the B200
assert evidence["SHFL.BFLY"].to_dict() == {"H200 128x256 s4 staged": 0, "H200 128x256 s4 register": 64,
                                      "H200 128x128 s7 register": 32, "B200 256x256 s4 staged": 0,
                                      "B200 256x256 s7 register": 0}

# %% [markdown]
# Reading the table:
#
# * every **register** build stores C with `STG.E.128` only (16 bytes per instruction) and has no `STSM`/`STS.128` and
#   no `UTMASTG`; every **staged** build is the reverse (the one "other STG" of the Hopper builds is not C: it is the
#   dynamic work schedule zeroing its item counter, notebook 08 section 5);
# * on Hopper the register build adds butterfly shuffles (`SHFL.BFLY`), the quad transpose: 2 steps × 2 pairs of words = 4 shuffles per row and
#   32 columns, × 2 rows × 8 blocks of 32 columns = 64 for a 256-wide tile (32 for the 128-wide one); and it drops the
#   epilogue's named barriers (`BAR`);
# * on the B200 neither build shuffles: TMEM hands each thread whole rows;
# * nothing spills.
#
# ## 4. The number: H200
#
# From `data/measured/h200/gemm.csv` (`make bench-gemm` on an H200; for each comparison, the most recent run that
# measured both configurations and `torch.matmul`).
# Two comparisons isolate the two effects: the epilogue alone (`128x256x64 s4`, staged vs register: same stages), and the
# epilogue with the extra stage (`128x128x64`, staged with 6 stages vs register with 7). `torch.matmul` for scale.

# %%
TABLE = records.path("h200", "gemm")
SOURCE = TABLE.relative_to(records.DATA.parent)
SHAPE = ["M", "N", "K"]
STEPS = {"epilogue only (128x256, 4 stages)": ("128x256x64 s4 staged uniform", "128x256x64 s4 register uniform"),
         "epilogue + 7th stage (128x128)": ("128x128x64 s6 staged uniform", "128x128x64 s7 register uniform")}


def step_table(df, before, after):
    """Per shape measured for both configurations and torch: TFLOP/s of each and the gain of `after`."""
    pick = lambda kernel, variant=None: df[(df.kernel == kernel) & ((df.variant == variant) if variant else True)
                                           ].set_index(SHAPE)  # noqa: E731
    b, a, t = pick("ours", before), pick("ours", after), pick("torch")
    both = b.index.intersection(a.index).intersection(t.index)
    out = pd.DataFrame({"before TFLOP/s": b.loc[both, "tflops"], "after TFLOP/s": a.loc[both, "tflops"],
                        "torch TFLOP/s": t.loc[both, "tflops"],
                        "gain %": 100 * (b.loc[both, "ms_median"] / a.loc[both, "ms_median"] - 1),
                        "spread %": 100 * (pd.concat([(b.loc[both, "ms_max"] - b.loc[both, "ms_min"]) / b.loc[both, "ms_median"],
                                                      (a.loc[both, "ms_max"] - a.loc[both, "ms_min"]) / a.loc[both, "ms_median"]],
                                                     axis=1).max(axis=1))}).reset_index()
    out.insert(0, "shape", [f"{m}x{n}x{k}" for m, n, k in zip(out.M, out.N, out.K)])
    return out.drop(columns=SHAPE)


recorded = records.read("h200", "gemm")
runs = {name: records.last_run(recorded, [("ours", before), ("ours", after), ("torch", "torch.matmul")])
        for name, (before, after) in STEPS.items()}
tables = {name: step_table(run, *STEPS[name]) for name, run in runs.items() if not run.empty}
if not tables or all(t.empty for t in tables.values()):
    display(Markdown(f"**No H200 rows for these configurations in `{SOURCE}` yet.** They are recorded on an H200 with "
                     "`make bench-gemm`; re-run this notebook afterwards. No number is shown until it is measured."))
else:
    for name, t in tables.items():
        before, after = STEPS[name]
        display(Markdown(f"**{name}**: `{before}` → `{after}`"))
        display(t.style.hide(axis="index").format(precision=1).format({"gain %": "{:+.1f}", "spread %": "{:.1f}"}))
    print(f"Source: {SOURCE}; spread % = the larger (slowest - fastest) / median of the two configurations' "
          "30 timed calls. Provenance of the runs:")
    display(pd.concat(runs.values())[list(records.PROVENANCE)].drop_duplicates().style.hide(axis="index"))

# %%
if tables and not all(t.empty for t in tables.values()):
    fig, axes = plt.subplots(1, len(tables), figsize=(12, 3.8), layout="constrained", sharey=True)
    for ax, (name, t) in zip(np.atleast_1d(axes), tables.items()):
        pos = np.arange(len(t))
        colors = ["#2b7bba" if g >= 0 else "#c44e52" for g in t["gain %"]]
        ax.bar(pos, t["gain %"], color=colors)
        ax.errorbar(pos, t["gain %"], yerr=t["spread %"], fmt="none", ecolor="0.3", capsize=3, linewidth=0.8)
        ax.axhline(0, color="0.3", linewidth=0.8)
        ax.set_xticks(pos, t["shape"], rotation=30, ha="right", fontsize="small")
        ax.set_title(name, fontsize="medium")
        ax.spines[["top", "right"]].set_visible(False)
    np.atleast_1d(axes)[0].set_ylabel("gain of the register epilogue (%)\nwhiskers: the measurement's spread")
    gpu_names = ", ".join(pd.concat(runs.values())["gpu"].unique())
    plots.caption(ax, f"{SOURCE} ({gpu_names}), gemm_kernels.bench")
    fig.suptitle("H200: what the register epilogue changed", fontsize="medium")
    plt.show()

# %% [markdown]
# A bar inside its whisker is not a result: the two configurations are indistinguishable at that shape.
#
# **The seed's B200 table** (measured by the PR author on a B200, not here; `data/pr/gemm_sol_final.csv` from seed 004).
# Its before → after changes several things at once (7 stages and the register epilogue, but also wave-tail balancing,
# CLC prefetch and hoisted descriptors; notebook 08 isolates balancing), so it bounds, not isolates, this step:

# %%
seed = pr.gemm_table()
seed["after vs before %"] = 100 * (seed.after_tflops / seed.before_tflops - 1)
seed["after % of cuBLASLt top-8"] = 100 * seed.after_tflops / seed.cublaslt_top8_tflops
display(seed[["size", "before_tflops", "after_tflops", "cublaslt_top8_tflops", "after vs before %",
              "after % of cuBLASLt top-8"]].style.hide(axis="index").format(precision=1))

# %% [markdown]
# ## 5. On a GPU: run it
#
# On an H100/H200 the cell below checks the register build against torch on small integers (exact), with tails in M, N
# and K; on a B200 the Blackwell build. Elsewhere it says so.

# %%
spec = gpus.current()
if spec is not None and spec.arch in ("sm_90a", "sm_100a"):
    import gemm_kernels
    g = torch.Generator(device="cuda").manual_seed(int(torch.randint(0, 2**31, ()).item()))
    a = torch.randint(-3, 4, (1000, 776), device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randint(-3, 4, (776, 1032), device="cuda", generator=g).to(torch.bfloat16)
    c = gemm_kernels.gemm(a, b, epilogue="register")
    print(f"{spec.name}: register epilogue exact on small integers:",
          torch.equal(c.float(), (a.float() @ b.float()).bfloat16().float()))
else:
    print(f"No H100/H200 or B200 here ({gpus.describe()}): the kernels above were compiled and inspected, not run.")

# %% [markdown]
# ## Take-aways
#
# * A 128-bit store wants 8 consecutive columns in one thread. TMEM (B200) gives a thread whole rows; WGMMA (Hopper)
#   spreads them over a quad, and two butterfly shuffles transpose them into place.
# * Without the output buffer, the seed's B200 ring goes from 4 to 7 stages. On Hopper the freed bytes buy a stage only
#   where a stage is small enough (the 128 × 128 tile: 6 → 7), not for the 128 × 256 tile (48 KiB stages).
# * The SASS of every build shows which path the output takes: `STSM` + `UTMASTG` (staged) or `STG.E.128` (register).
#   Which one wins on the H200 is the table in section 4.

"""Why ILP2 does not pay on Hopper: the evidence, from the layout, the machine code and the profiler.

    evidence.rows_per_thread()              # the WGMMA fragment: every thread holds 2 rows of the tile
    evidence.chains(modules)                # per step: chains per thread, chain depth, compare-selects / depth
    evidence.issue_budget(art, D=128)       # issue cycles of a tile's scan per scheduler vs the tile's WGMMA cycles
    evidence.read_ncu(path)                 # tools/ncu_kmeans_steps.py's report: stall reasons, issue slots
    evidence.where_warps_are(evidence.pc_sampling(path))   # PC sampling: share of warps per code region

The argument. A serial scan is latency-bound only if the scheduler has nothing else to issue while a compare
waits for its select. In the WGMMA layout each thread already holds two rows, so step 1 has two independent
chains per thread, and with 8 consumer warps on an SM's 4 schedulers each scheduler picks from 2 warps x 2
chains. If the scan's instructions, issued one per cycle per scheduler, already fill the time, more chains
cannot help: only fewer instructions can (step 3), or overlapping the scan with the tensor cores (step 4).
`issue_budget` does that arithmetic from the SASS; the profiler's stall reasons and issue-slot use test it.
"""
from __future__ import annotations

import gzip
import io
import re
from pathlib import Path

import pandas as pd

from kmeans_kernels import floor, sass_checks
from kmeans_kernels.steps import anatomy, trial

CONSUMER_WARPS, SCHEDULERS_PER_SM = 8, 4
STALLS = ("barrier", "branch_resolving", "dispatch_stall", "drain", "imc_miss", "lg_throttle", "long_scoreboard",
          "math_pipe_throttle", "membar", "mio_throttle", "misc", "no_instruction", "not_selected", "selected",
          "short_scoreboard", "sleeping", "tex_throttle", "wait")
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
METRICS = ("gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second",
           "smsp__issue_active.avg.pct_of_peak_sustained_active", "smsp__inst_executed.sum",
           "smsp__warps_eligible.avg.per_cycle_active", "smsp__warps_active.avg.per_cycle_active",
           "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
           *(STALL_METRIC.format(s) for s in STALLS))


def accumulator_owner(row: int, col: int) -> tuple[int, int]:
    """(warp in the warpgroup, lane) holding (row, col) of a warpgroup's 64 x N WGMMA fp32 accumulator (PTX ISA,
    the register fragment of wgmma .m64nNk16): warp row // 16, lane 4 * (row % 8) + (col % 8) // 2."""
    return row // 16, 4 * (row % 8) + (col % 8) // 2


def rows_per_thread(block_n: int = 128) -> dict[str, int]:
    """From the fragment layout: how many rows and columns of the tile each thread holds (the same for all)."""
    rows, cols = {}, {}
    for r in range(64):
        for c in range(block_n):
            owner = accumulator_owner(r, c)
            rows.setdefault(owner, set()).add(r)
            cols.setdefault(owner, set()).add(c)
    counts = {(len(rows[o]), len(cols[o])) for o in rows}
    if len(counts) != 1 or len(rows) != 128:
        raise AssertionError(f"the layout does not share the tile evenly: {counts}")
    (n_rows, n_cols), = counts
    return {"threads": len(rows), "rows per thread": n_rows, "columns per row": n_cols}


def chains(modules: dict, D: int = 128) -> pd.DataFrame:
    """Per step module (compiled here at D): independent chains per thread (rows x the module's CHAINS per row,
    1 without it), the longest compare-select chain of a tile, the compare-selects of a tile, and their ratio:
    how many compare-selects the schedulers can issue per link of the critical path."""
    rows = {}
    for name, module in modules.items():
        a = anatomy.scan(trial.compiled(module, D).sass)
        rows[name] = {"independent chains per thread": anatomy.ROWS_PER_THREAD * getattr(module, "CHAINS", 1),
                      "chain depth per tile": a["chain depth"], "compare-selects per tile": a["compare-selects"],
                      "compare-selects per link of the chain": a["compare-selects"] / a["chain depth"]}
    return pd.DataFrame(rows).round(1).astype(object).map(lambda v: int(v) if float(v).is_integer() else v)


def issue_budget(art, D: int, block_n: int = 128) -> dict[str, float]:
    """Cycles of one tile on one SM: the scan block's instructions issued by 2 warps per scheduler (one
    instruction per cycle each), against the tile's WGMMAs (2 * 128 * block_n * D flops at the floor's tensor
    rate per SM and cycle). In steps 1-3 the two add up (the tensor cores idle during the scan)."""
    block = sass_checks.scan_block(art.sass, after=None)
    warps_per_scheduler = CONSUMER_WARPS // SCHEDULERS_PER_SM
    flops_per_cycle = floor.TENSOR_TFLOPS * 1e12 / (floor.SMS * floor.CLOCK_GHZ * 1e9)
    scan_cycles = len(block) * warps_per_scheduler
    mma_cycles = 2 * 128 * block_n * D / flops_per_cycle
    return {"instructions in a tile's scan (per thread)": len(block), "warps per scheduler": warps_per_scheduler,
            "scan issue cycles per tile": scan_cycles, "WGMMA cycles per tile": round(mma_cycles),
            "scan / WGMMA": scan_cycles / mma_cycles}


_UNITLESS = re.compile(r"^\s+([a-z_]+__[\w.]+)\s+([\d.,]+)\s*$")


def read_ncu(path) -> pd.DataFrame:
    """tools/ncu_kmeans_steps.py's report: one row per profiled step (index: what it profiled), one column per
    metric. workbook.ncu.read does the pairing; ratio metrics, which ncu prints without a unit, are read here."""
    from workbook import ncu
    df = ncu.read(path)
    extra, k = [], -1
    for line in Path(path).read_text().splitlines():
        if ncu._KERNEL.match(line):
            k += 1
            extra.append({})
        elif (m := _UNITLESS.match(line)) and k >= 0:
            extra[k][m.group(1)] = float(m.group(2).replace(",", ""))
    for i, values in enumerate(extra):
        for name, v in values.items():
            df.loc[i, name] = v
    return df.set_index("contender")


def stall_table(df: pd.DataFrame, top: int = 6) -> pd.DataFrame:
    """The largest stall reasons (warps stalled per issued instruction) of the profiled steps, plus issue use."""
    cols = {STALL_METRIC.format(s): s.replace("_", " ") for s in STALLS}
    have = [c for c in cols if c in df.columns]
    stalls = df[have].rename(columns=cols).T
    keep = stalls.max(axis=1).sort_values(ascending=False).index[:top]
    out = stalls.loc[keep]
    extra = {"smsp__issue_active.avg.pct_of_peak_sustained_active": "issue slots busy (%)",
             "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed": "tensor pipe active (%)",
             "smsp__warps_eligible.avg.per_cycle_active": "eligible warps per cycle",
             "gpu__time_duration.sum": "duration (ms)"}
    more = df[[c for c in extra if c in df.columns]].rename(columns=extra).T
    return pd.concat([out, more])


# Where a warp of the Hopper assignment kernel stands, from Nsight Compute's PC sampling, by the code it is at.
PC_REGIONS = ("a tile's work (MMA issue, norms, fold)", "waiting for its own WGMMAs",
              "turn barrier, warpgroup converging", "waiting for ring data", "the producer warp")
_SAMPLES = "Warp Stall Sampling (All Samples)"


def pc_sampling(path) -> pd.DataFrame:
    """`ncu --page source --csv --print-source sass` of a report (plain or .gz; `ncu --section SourceCounters`):
    one row per instruction of each kernel, in address order: kernel (0, 1, ... in report order), source (the
    SASS), executed (warp instructions), samples, and one column per stall reason (`stall_<reason>`, the samples
    of warps stalled there for that reason)."""
    raw = Path(path).read_bytes()
    text = (gzip.decompress(raw) if str(path).endswith(".gz") else raw).decode()
    blocks = re.split(r'^"Kernel Name",.*$', text, flags=re.M)[1:]
    if not blocks:
        raise ValueError(f"{path}: no kernel in this export (expected ncu --page source --csv --print-source sass)")
    frames = []
    for k, block in enumerate(blocks):
        df = pd.read_csv(io.StringIO(block.strip()), dtype=str)
        reasons = [c for c in df.columns if c.startswith("stall_") and "(Not" not in c]
        num = lambda c: pd.to_numeric(df[c], errors="coerce").fillna(0).astype(int)   # noqa: E731
        frames.append(pd.DataFrame({"kernel": k, "source": df["Source"].str.strip(),
                                    "executed": num("Instructions Executed"), "samples": num(_SAMPLES),
                                    **{c: num(c) for c in reasons}}))
    return pd.concat(frames, ignore_index=True)


def _region(source: str, reason: str, producer: bool, after_wait: bool) -> str:
    if producer:
        return PC_REGIONS[4]
    if "DEPBAR" in source:
        return PC_REGIONS[1]
    if reason == "stall_barrier":
        # a named barrier (the turn), or WARPGROUP.ARRIVE waiting for the warpgroup's other warps, which ncu
        # charges to the instruction after it
        return PC_REGIONS[2]
    if re.search(r"SYNCS|NANOSLEEP", source) or after_wait:
        return PC_REGIONS[3]
    return PC_REGIONS[0]


def where_warps_are(samples: pd.DataFrame) -> pd.DataFrame:
    """Per kernel (rows), the share of sampled warps (%) at each of PC_REGIONS (columns). The producer warp's code
    runs from the first mbarrier wait after the kernel's __syncthreads (BAR.SYNC 0x0) to its EXIT; a consumer
    at its WGMMA wait (WARPGROUP.DEPBAR) waits for its own WGMMAs; a consumer stalled on a barrier elsewhere waits
    for its turn or for its warpgroup; a consumer at an mbarrier wait loop waits for a ring slot's data."""
    out = {}
    for kernel, rows in samples.groupby("kernel", sort=True):
        src = rows.source.tolist()
        try:
            sync = next(i for i, s in enumerate(src) if s.startswith("BAR.SYNC") and s.endswith(" 0x0"))
            first = next(i for i in range(sync, len(src)) if "TRYWAIT" in src[i])
            last = next(i for i in range(first, len(src)) if src[i].endswith("EXIT"))
        except StopIteration:
            raise ValueError(f"kernel {kernel}: no producer section (BAR.SYNC 0x0, an mbarrier wait, EXIT) in its SASS") \
                from None
        reasons = [c for c in rows.columns if c.startswith("stall_")]
        share = dict.fromkeys(PC_REGIONS, 0)
        for i, row in enumerate(rows.itertuples(index=False)):
            after_wait = src[i].startswith("@!P0") and "BRA" in src[i] and i > 0 and "SYNCS" in src[i - 1]
            for reason in reasons:
                share[_region(src[i], reason, first <= i <= last, after_wait)] += getattr(row, reason)
        total = sum(share.values())
        out[kernel] = {k: 100 * v / total for k, v in share.items()} if total else share
    return pd.DataFrame.from_dict(out, orient="index")[list(PC_REGIONS)]


def plot_where_warps_are(table: pd.DataFrame, note: str, ax=None):
    """One stacked bar per profiled kernel (the table's rows): where its sampled warps stood, in %."""
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.6 + 0.7 * len(table)))
    left = pd.Series(0.0, index=table.index)
    for region, colour in zip(table.columns, ("tab:blue", "tab:orange", "tab:red", "tab:purple", "tab:gray")):
        ax.barh([str(i) for i in table.index], table[region], left=left, color=colour, label=region)
        left += table[region]
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of sampled warps")
    ax.invert_yaxis()
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=2, fontsize=8, frameon=False)
    ax.set_title(f"Where the warps stand ({note})", fontsize=9)
    return ax.figure


ROLE_MODES = ("kernel as shipped", "MMAs only", "folds only", "both, apart")


def roles_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The roles probe (`probes/kmeans_roles_probe.py`): per shape (rows), the median us per call of each mode
    (ROLE_MODES), the two roles' times added, and "both / sum": 1 where running them at once saves nothing
    over running them one after the other, max / sum where the shorter hides wholly under the longer."""
    t = frame.pivot_table(index=["N", "D", "K"], columns="mode", values="us_median", sort=False)
    missing = [m for m in ROLE_MODES if m not in t.columns]
    if missing:
        raise ValueError(f"the roles probe has no {missing} rows")
    t = t[list(ROLE_MODES)]
    t["MMAs + folds"] = t["MMAs only"] + t["folds only"]
    t["both / sum"] = t["both, apart"] / t["MMAs + folds"]
    t["max / sum"] = t[["MMAs only", "folds only"]].max(axis=1) / t["MMAs + folds"]
    return t


def plot_roles(table: pd.DataFrame, note: str, ax=None):
    """Per shape: the two roles alone, stacked (what running them one after the other costs), beside the two at
    once; a tick at the longer role alone (what perfect overlap would cost)."""
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.8 + 0.9 * len(table)))
    labels = [f"{N} x {D} x {K}" for N, D, K in table.index]
    y = range(len(table))
    ax.barh([i - 0.2 for i in y], table["MMAs only"], height=0.36, color="tab:orange", label="MMAs only")
    ax.barh([i - 0.2 for i in y], table["folds only"], height=0.36, left=table["MMAs only"], color="tab:blue",
            label="folds only (after the MMAs: the sum)")
    ax.barh([i + 0.2 for i in y], table["both, apart"], height=0.36, color="tab:green", label="both at once")
    longer = table[["MMAs only", "folds only"]].max(axis=1)
    ax.scatter(longer, [i + 0.2 for i in y], marker="|", s=400, color="black", label="the longer alone (full overlap)")
    ax.set_yticks(list(y), labels)
    ax.invert_yaxis()
    ax.set_xlabel("us per call")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, fontsize=8, frameon=False)
    ax.set_title(f"The two roles apart and at once ({note})", fontsize=9)
    return ax.figure


FOLD_OPS = ("FADD", "SHFL", "LDS", "IMAD", "FSETP", "FMNMX", "FSEL", "SEL")


def fold_block(variants=("lean_ping_pong", "folded_norms"), Ds=(64, 128)) -> pd.DataFrame:
    """Per production variant and D: the instructions of the Hopper kernel's tile block (the branch-free run that
    holds the scan, `sass_checks.scan_block`) and the counts of FOLD_OPS in it, from the compiled SASS (no GPU)."""
    from collections import Counter

    from kmeans_kernels import hopper
    rows = []
    for D in Ds:
        for variant in variants:
            block = sass_checks.scan_block(hopper.compile(variant, 65536, D, 4096).sass, after=None)
            ops = Counter(ins.base for ins in block)
            rows.append({"D": D, "variant": variant, "instructions": len(block), **{op: ops[op] for op in FOLD_OPS}})
    return pd.DataFrame(rows).set_index(["D", "variant"])

"""cuda-oxide `gemm_sol_final` (seed 004): its GEMM table, its numbers recomputed, its wave-tail table from our
planner, and our H200 measurement of the same steps beside them.

    seeds.gemm_table()            TFLOP/s and us before / after / cuBLASLt on B200, at 4096^3, 8192^3, 16384^3
    seeds.gemm_per_size()         each TFLOP/s recomputed from the us beside it, and the ratio to cuBLASLt top-8
    seeds.gemm_inconsistencies()  in words, every entry whose TFLOP/s and time do not describe the same run
    seeds.wave_table()            the seed's uniform tiles and balanced items next to gemm_kernels.waves.plan's
    seeds.ours_at_cubes(measured) our H200 steps and torch.matmul at the seed's three cubes, one benchmark run
"""
from __future__ import annotations

import pandas as pd

from workbook import records
from workbook.pr import table

SEED_GEMM = "004_eb05cde9e86beab2.txt"
GEMM_CSV = "data/pr/gemm_sol_final.csv"
GEMM_TFLOPS_STEP = 0.1    # "1857.5 TFLOPS": the rounding step of each transcribed column
GEMM_US_STEP = 0.01       # "73.99 us"
GEMM_PCT_STEP = 0.01      # "100.97%"
# Seed 004's wave-tail table on B200 (M256 x N256 tiles, 74 CTA pairs): uniform tiles, items once balanced
STATED_WAVES = {4096: (256, 296), 8192: (1024, 1036), 16384: (4096, 4144)}
TORCH = ("torch", "torch.matmul")        # the baseline as gemm_kernels.bench records it


def gemm_table() -> pd.DataFrame:
    """size (M = N = K), before/after/cuBLASLt top-8 TFLOP/s and us, cuBLASLt exhaustive TFLOP/s, vs_top8_pct.

    The PR's bar chart prints cuBLASLt top-8 at 8192^3 as 2.080 PFLOP/s where its table says 2077.2
    TFLOP/s; the table (which also gives the time) is what is transcribed here."""
    return table("gemm_sol_final")


def gemm_flops(size: int) -> float:
    """Operations of an M = N = K = size GEMM: one multiply and one add per term."""
    return 2.0 * float(size) ** 3


def gemm_per_size() -> pd.DataFrame:
    """The GEMM table plus, for each of before / after / cublaslt_top8: TFLOP/s recomputed from its us column
    (`<side>_tflops_from_us`) and whether the two agree within their printed rounding
    (`<side>_consistent`); and the after / top-8 ratio recomputed from the TFLOP/s columns
    (`vs_top8_pct_recomputed`) with the TFLOP/s margin over top-8 (`margin_over_top8_tflops`)."""
    t = gemm_table()
    flops = t["size"].map(gemm_flops)
    for side in ("before", "after", "cublaslt_top8"):
        us = t[f"{side}_us"]
        t[f"{side}_tflops_from_us"] = flops / (us * 1e-6) / 1e12
        slowest = flops / ((us + GEMM_US_STEP / 2) * 1e-6) / 1e12
        fastest = flops / ((us - GEMM_US_STEP / 2) * 1e-6) / 1e12
        stated = t[f"{side}_tflops"]
        t[f"{side}_consistent"] = ((slowest - GEMM_TFLOPS_STEP / 2 <= stated)
                                   & (stated <= fastest + GEMM_TFLOPS_STEP / 2))
    t["vs_top8_pct_recomputed"] = t["after_tflops"] / t["cublaslt_top8_tflops"] * 100
    t["margin_over_top8_tflops"] = t["after_tflops"] - t["cublaslt_top8_tflops"]
    return t


def gemm_inconsistencies() -> list[str]:
    """In words, every GEMM table entry whose TFLOP/s and time do not describe the same run."""
    t = gemm_per_size()
    out = []
    for _, r in t.iterrows():
        for side in ("before", "after", "cublaslt_top8"):
            if not r[f"{side}_consistent"]:
                n = int(r["size"])
                out.append(f"{n}^3 {side}: {r[f'{side}_tflops']:.1f} TFLOP/s is stated, but "
                           f"2 x {n}^3 / {r[f'{side}_us']:.2f} us = {r[f'{side}_tflops_from_us']:.1f} TFLOP/s "
                           f"({r[f'{side}_tflops'] - r[f'{side}_tflops_from_us']:+.1f}), more than their rounding allows; "
                           f"seed 004 does not say how each column was summarized")
    return out


def wave_table() -> pd.DataFrame:
    """Seed 004's wave-tail table recomputed: per cube, the B200 kernel's uniform and balanced work lists
    (`gemm_kernels.blackwell_options.plan`, the planner with the seed's N256 / N224 / N192 widths) against the
    tile and item counts the seed states, and the makespan gain the model predicts."""
    from gemm_kernels import blackwell_options
    rows = []
    for size, (stated_tiles, stated_items) in STATED_WAVES.items():
        uniform = blackwell_options.plan(size, size, schedule="uniform")
        balanced = blackwell_options.plan(size, size, schedule="balanced")
        rows.append({"size": f"{size}\u00b3", "slots (CTA pairs)": uniform.slots,
                     "uniform tiles (seed)": stated_tiles, "uniform tiles (ours)": len(uniform.items),
                     "uniform waves": round(uniform.waves, 2),
                     "idle pairs in last wave": uniform.slots - round(uniform.last_wave_fill * uniform.slots),
                     "balanced items (seed)": stated_items, "balanced items (ours)": len(balanced.items),
                     "narrow width (ours)": balanced.narrow,
                     "predicted gain (ours)": uniform.makespan / balanced.makespan - 1})
    return pd.DataFrame(rows)


def ours_at_cubes(measured: pd.DataFrame, variants) -> pd.DataFrame:
    """TFLOP/s of every one of `variants` (our configurations, by name) and torch.matmul at the seed's three
    cubes, from the newest run that timed all of them on all three: one row per cube (index M), one column per
    contender in the order given, torch.matmul last; `.attrs["run"]` holds that run's rows (for its
    provenance). Empty if no run did."""
    variants = list(variants)
    needed = [("ours", v) for v in variants] + [TORCH]
    sizes = gemm_table()["size"].tolist()
    if measured.empty or not {"M", "N", "K", "date"} <= set(measured.columns):
        return pd.DataFrame()
    cubes = measured[(measured.M == measured.N) & (measured.N == measured.K) & measured.M.isin(sizes)]
    run = records.last_run(cubes, needed, min_shapes=len(sizes))
    if run.empty:
        return pd.DataFrame()
    out = run.pivot_table(index="M", columns="variant", values="tflops", aggfunc="last")
    out = out[variants + [TORCH[1]]]
    out.attrs["run"] = run
    return out

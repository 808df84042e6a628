"""For the probes that time builds taking turns: their rows, and the CSV with the run's provenance.
    rows = timed_rows(fns, sets, "baseline name", rounds=8, M=M, N=N, K=K)   # both timings with intervals, GPU time
    rows = timed_rows(fns, sets, "base", 8, against={"b2": "b1"}, N=N)     # b2's ratios to b1's, the rest to base's
    save(rows, f"{out_dir}/name.csv")                                         # a DataFrame, provenance columns added"""
import pandas as pd

from gemm_kernels import sweep
from workbook import records, timing


def timed_rows(fns, sets, baseline, rounds, against=None, **shape):
    """The builds `fns` taking turns against `baseline` (both timings, `rounds` interleaved rounds of 20 calls) and
    their CUPTI GPU time: one row per build and timing, ratios to the baseline's, or to `against[build]`'s where
    given (column `vs`)."""
    cmp = timing.compare(fns, sets, baseline=baseline, rounds=rounds, calls=20)
    gpu = sweep.gpu_ms(fns, sets)
    rows = []
    for f in fns:
        ref = (against or {}).get(f, baseline)
        for t in (timing.LATENCY, timing.KERNEL):
            r = cmp.ratio(f, t, against=ref)
            rows.append(dict(**shape, contender=f, vs=ref, timing=t, us_median=1e3 * cmp.timing(f, t).ms_median,
                             ratio=r.value, ratio_lo=r.lo, ratio_hi=r.hi, rounds=r.rounds))
        rows.append(dict(**shape, contender=f, vs=ref, timing="gpu", us_median=1e3 * gpu[f], ratio=gpu[f] / gpu[ref]))
    print(*shape.values(), {k: round(1e3 * v, 1) for k, v in gpu.items()}, flush=True)
    return rows


def save(rows, path):
    """`rows` as a DataFrame with the run's provenance columns, written to `path`."""
    df = pd.DataFrame(rows)
    for key, value in records.provenance().items():
        df[key] = value
    df.to_csv(path, index=False)
    return df

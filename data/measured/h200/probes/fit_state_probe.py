"""Probe: where fit's state (`_Lloyd.measure`: x's fixed-point scale, its mean, its spread) spends its time at a
large shape, piece by piece, and two candidate rewrites of the spread pass; CUDA-event times, median of 7 calls
after 2 warm-ups, ms. Each spread candidate's value is printed beside the shipped one's (relative difference).
    python fit_state_probe.py OUT_DIR [N,D ...]"""
import math
import sys

import pandas as pd
import torch

from kmeans_kernels import lloyd
from workbook import records

shapes = [tuple(map(int, s.split(","))) for s in sys.argv[2:]] or [(1048576, 128), (65536, 128)]


def timed(fn, reps=7):
    for _ in range(2):
        fn()
    out, times = None, []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        a.record()
        out = fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2], out


def spread_shipped(x, mean, chunk):
    spread = torch.zeros((), dtype=torch.float64, device=x.device)
    for r0 in range(0, x.shape[0], chunk):
        spread += (x[r0:r0 + chunk] - mean).square_().sum()
    return spread


def spread_dot(x, mean, chunk):
    spread = torch.zeros((), dtype=torch.float64, device=x.device)
    for r0 in range(0, x.shape[0], chunk):
        d = (x[r0:r0 + chunk] - mean).view(-1)
        spread += torch.dot(d, d)
    return spread


def spread_about_columns(x, mean, chunk):
    """sum_d sum_i (x_id - m_d)^2 as sum_d [sum_i x_id^2 - 2 m_d sum_i x_id + n m_d^2], the sums in float64."""
    sq = torch.zeros(x.shape[1], dtype=torch.float64, device=x.device)
    lin = torch.zeros(x.shape[1], dtype=torch.float64, device=x.device)
    for r0 in range(0, x.shape[0], chunk):
        xc = x[r0:r0 + chunk].double()
        sq += xc.square().sum(0)
        lin += xc.sum(0)
    n = x.shape[0]
    return (sq - 2 * mean * lin + n * mean * mean).sum()


rows = []
for N, D in shapes:
    x = (torch.randn(N, D, device="cuda") * 3 + 1).to(torch.bfloat16)
    shards = lloyd._Shards(None, N)
    step = max(1, lloyd._CHUNK_ELEMENTS // D)
    t_scale, s = timed(lambda: lloyd._scale_exponent(x, shards))
    t_total, total = timed(lambda: lloyd.fixed_point_total(x, s))
    mean = (total.double() * math.ldexp(1.0, -s)) / N
    state = lloyd._Lloyd(x, 8, "auto", shards)
    t_all, _ = timed(state.measure)
    found = dict(scale=t_scale, total=t_total, measure_whole=t_all)
    ref = None
    for name, fn in (("shipped", spread_shipped), ("dot", spread_dot), ("about_columns", spread_about_columns)):
        for chunk in (step, 4 * step):
            t, v = timed(lambda: fn(x, mean, chunk))
            ref = v.item() if ref is None else ref
            found[f"spread_{name}_{chunk}"] = t
            print(f"{N}x{D} spread {name:14s} chunk {chunk:7d}: {t:.3f} ms, rel. diff {(v.item() - ref) / ref:.2e}",
                  flush=True)
    for what, ms in found.items():
        rows.append(dict(N=N, D=D, what=what, ms=ms))
    print(f"{N}x{D}: scale {t_scale:.3f} total {t_total:.3f} whole state {t_all:.3f} ms", flush=True)
df = pd.DataFrame(rows)
for k, v in records.provenance().items():
    df[k] = v
df.to_csv(f"{sys.argv[1]}/fit_state.csv", index=False)

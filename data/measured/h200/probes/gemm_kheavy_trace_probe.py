"""Probe: where the K-heavy few-tile shapes' time goes, segment by segment, against cuBLAS's GPU time.

The placement probe (`gemm_placement_probe.py`, an H100) found the rule's pick at 1024 x 1024 x 8192, `128 stream-k
cluster2x2`, reading fewer L2 sectors than cuBLAS (4.42 M against 5.26 M) and still taking 32.6 us of GPU time to
cuBLAS's 26.7, and the one-wave builds' CTAs drifting apart by 5-11 us of a 31-34 us K loop. Here three traced launches
per build (`hopper_host.timeline`: per CTA and segment, when the consumers had the row, when its first K-block
landed, when its last WGMMA finished and when its C or partial was written) at three K-heavy shapes, every segment's
role (whole item, a partial contributed, the item finished) and K-block count read from the work list, beside each
untraced build's CUPTI GPU time and cuBLAS's. The frames are kept whole, one row per segment run.

    python gemm_kheavy_trace_probe.py OUT_DIR   (gemm_kheavy_trace_<commit>.csv, every segment of every launch)"""
import os
import sys

import pandas as pd
import torch

from gemm_kernels import configs, hopper_host, hopper_options, sweep
from gemm_kernels.hopper_worklist import SEGMENT_COLS
from probe_rows import save

SHAPES = [(1024, 1024, 8192), (1536, 1024, 8192), (1024, 1024, 32768)]
BUILDS = ("128 stream-k cluster2x2", "64 uniform cluster2n", "64x128 uniform cluster2")
REPS = 3
ROLES = {0: "whole", 1: "contribute", 2: "finish"}


def segments(work: torch.Tensor) -> dict:
    """{row: [(role, k0, k_count), ...]} of the segments each work-list row runs, in order (absent ones left out)."""
    out = {}
    for r, row in enumerate(work.cpu().tolist()):
        segs = [row[s:s + SEGMENT_COLS] for s in range(0, len(row), SEGMENT_COLS)]
        out[r] = [(ROLES[s[5]], s[3], s[4]) for s in segs if s[4] > 0]
    return out


def main(out_dir: str) -> None:
    commit = os.environ.get("WORKBOOK_COMMIT", "local")
    g = torch.Generator(device="cuda").manual_seed(7)
    frames, gpu_rows = [], []
    for M, N, K in SHAPES:
        a = torch.randn(M, K, device="cuda", generator=g).bfloat16()
        b = torch.randn(K, N, device="cuda", generator=g).bfloat16()
        want = torch.matmul(a, b)
        options = {name: hopper_options.one_wave(configs.HOPPER_CANDIDATES[name], M, N) for name in BUILDS}
        fns = {"torch.matmul": torch.matmul}
        fns.update({name: (lambda x, y, o=o: hopper_host.gemm(x, y, o)) for name, o in options.items()})
        gpu = sweep.gpu_ms(fns, [(a, b)])
        print(M, N, K, {k: round(1e3 * v, 1) for k, v in gpu.items()}, flush=True)
        for name, o in options.items():
            segs = segments(hopper_host._call_for(M, N, K, torch.cuda.current_device(), o).work)
            for rep in range(REPS):
                c, frame = hopper_host.timeline(a, b, o)
                torch.testing.assert_close(c, want, rtol=2e-2, atol=2e-1)
                frame = frame.sort_values(["cta", "seq"]).copy()
                nth = frame.groupby(["cta", "row"]).cumcount()
                frame["role"] = [segs[r][i][0] for r, i in zip(frame.row, nth)]
                frame["k0"] = [segs[r][i][1] for r, i in zip(frame.row, nth)]
                frame["k_count"] = [segs[r][i][2] for r, i in zip(frame.row, nth)]
                frame = frame.assign(M=M, N=N, K=K, build=name, rep=rep, gpu_us=1e3 * gpu[name],
                                     torch_gpu_us=1e3 * gpu["torch.matmul"])
                frames.append(frame)
        df = save(pd.concat(frames), f"{out_dir}/gemm_kheavy_trace_{commit}.csv")
    df = df.assign(kloop=df.mma_done - df.data, per_kblock_ns=1e3 * (df.mma_done - df.data) / df.k_count,
                   epi=df.stored - df.mma_done, wait=df.data - df.start)
    pd.set_option("display.width", 250)
    print(df.groupby(["M", "N", "K", "build", "role"]).agg(
        n=("cta", "size"), gpu_us=("gpu_us", "first"), torch_us=("torch_gpu_us", "first"),
        makespan=("exit", "max"), k_count=("k_count", "median"), per_kblock_ns=("per_kblock_ns", "median"),
        per_kblock_p90=("per_kblock_ns", lambda s: s.quantile(0.9)), wait=("wait", "median"), epi=("epi", "median"),
        epi_p90=("epi", lambda s: s.quantile(0.9))).round(2).to_string())


if __name__ == "__main__":
    main(*sys.argv[1:])

"""Probe: the fixed costs of a one-tile-per-SM GEMM, where `gemm_k_slope_probe.py` found the gap to cuBLAS.

At 1024 x 2048 x K (128 tiles of 128 x 128, one per SM) our `128 balanced cluster2` runs the K loop at cuBLAS's
pace (5.51 against 5.47 us per 1024 of K on an H100) and loses about 2 us of intercept. Five traced launches per
build and K (`hopper_host.timeline`, global-timer stamps per CTA) split a launch into: entry -> the consumers have
their row -> its first K-block landed -> last WGMMA done -> C written -> exit, beside the untraced build's CUPTI
GPU time (what lies outside the CTAs' entry and exit: the launch and the teardown). The builds: the pick, the same
tile with the staged (TMA-store) epilogue, the register epilogue not deferred, the static walk (no global counter)
and one CTA pair per item (no persistent loop).

    python gemm_fixed_costs_trace_probe.py OUT_DIR   (its run: gemm_fixed_costs_trace_<commit>.csv)"""
import dataclasses
import sys

import pandas as pd
import torch

from gemm_kernels import configs, hopper_host, sweep
from gemm_kernels.hopper_trace import summary
from probe_rows import save

SHAPES = [(1024, 2048, 1024), (1024, 2048, 4096), (1024, 2048, 16384)]
PICK = configs.HOPPER_CANDIDATES["128 balanced cluster2"]
BUILDS = {
    "128 balanced cluster2": PICK,
    "staged epilogue": dataclasses.replace(PICK, epilogue="staged", stages=None),
    "register, not deferred": dataclasses.replace(PICK, defer_epilogue=False),
    "static walk": dataclasses.replace(PICK, dynamic=False),
    "one pair per item": dataclasses.replace(PICK, persistent=False),
}
REPS = 5


def main(out_dir: str) -> None:
    g = torch.Generator(device="cuda").manual_seed(5)
    rows = []
    for M, N, K in SHAPES:
        a = torch.randn(M, K, device="cuda", generator=g).bfloat16()
        b = torch.randn(K, N, device="cuda", generator=g).bfloat16()
        want = torch.matmul(a, b)
        fns = {"torch.matmul": torch.matmul}
        fns.update({name: (lambda x, y, o=o: hopper_host.gemm(x, y, o)) for name, o in BUILDS.items()})
        gpu = sweep.gpu_ms(fns, [(a, b)])
        for name, options in BUILDS.items():
            for rep in range(REPS):
                c, frame = hopper_host.timeline(a, b, options)
                torch.testing.assert_close(c, want, rtol=2e-2, atol=2e-1)
                first = frame[frame.seq == 0]
                s = {k: float(v) for k, v in summary(frame).items()}
                s.update(M=M, N=N, K=K, build=name, rep=rep, gpu_us=1e3 * gpu[name],
                         torch_gpu_us=1e3 * gpu["torch.matmul"],
                         entry_to_start=float((first.start - first.entry).median()),
                         start_to_data=float((first.data - first.start).median()),
                         stored_to_exit=float((first.exit - first.stored).median()))
                rows.append(s)
        df = save(rows, f"{out_dir}/gemm_fixed_costs_trace.csv")
    cols = ["gpu_us", "torch_gpu_us", "makespan_us", "entry_spread_us", "entry_to_start", "start_to_data",
            "kloop_us(med)", "epilogue_us(med)", "stored_to_exit", "last_stored_spread_us"]
    pd.set_option("display.width", 250)
    print(df.groupby(["M", "N", "K", "build"])[cols].median().round(2).to_string())


if __name__ == "__main__":
    main(*sys.argv[1:])

"""Clock, power and throughput while one GEMM runs back to back (scratch probe, one device call).

For each shape and contender (torch.matmul, our default), run ~3 s of back-to-back calls while nvidia-smi
samples the SM clock and the board power every 50 ms; print TFLOP/s, mean clock and mean power, and
TFLOP/s per GHz (work per clock: what is left once the clock is divided out).
    python tools/probes/probe_clocks.py [N ...]
"""
import statistics
import subprocess
import sys
import time

import torch

from gemm_kernels import hopper


def sampled(fn, sets, seconds=3.0):
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                            "--format=csv,noheader,nounits", "-lms", "50"], stdout=subprocess.PIPE, text=True)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls = 0
    t0 = time.perf_counter()
    start.record()
    while time.perf_counter() - t0 < seconds:
        for _ in range(5):
            fn(*sets[calls % len(sets)])
            calls += 1
        torch.cuda.synchronize()
    end.record()
    end.synchronize()
    smi.terminate()
    rows = [line.split(",") for line in smi.communicate()[0].splitlines() if line.count(",") == 2]
    rows = rows[len(rows) // 5:]            # drop the first fifth: the clock settles
    clock = statistics.mean(float(r[0]) for r in rows)
    power = statistics.mean(float(r[1]) for r in rows)
    temp = statistics.mean(float(r[2]) for r in rows)
    return start.elapsed_time(end) / calls, clock, power, temp


def main():
    sizes = [int(s) for s in sys.argv[1:]] or [4096, 8192, 16384]
    print(f"{'shape':>8} {'kernel':>6} {'ms/call':>9} {'TFLOP/s':>8} {'MHz':>6} {'W':>6} {'C':>4} {'TFLOP/s/GHz':>11}")
    for n in sizes:
        sets = [(torch.randn(n, n, device="cuda", dtype=torch.bfloat16),
                 torch.randn(n, n, device="cuda", dtype=torch.bfloat16)) for _ in range(3)]
        for rnd in range(2):
            for name, fn in (("torch", torch.matmul), ("ours", hopper.gemm)):
                fn(*sets[0])
                ms, mhz, watts, temp = sampled(fn, sets)
                tf = 2 * n ** 3 / ms / 1e9
                print(f"{n:>8} {name:>6} {ms:9.4f} {tf:8.1f} {mhz:6.0f} {watts:6.0f} {temp:4.0f} {tf / mhz * 1e3:11.1f}",
                      flush=True)


if __name__ == "__main__":
    main()

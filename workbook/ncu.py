"""Profile under Nsight Compute and read the metric tables it prints (`ncu --metrics ...`, text output).

    ncu.read("data/measured/h200/probes/ncu_dyn_16384.txt")
    -> one row per profiled kernel: contender, kernel, and one column per metric in the metric's own unit
       (dram__bytes_read.sum in the unit ncu chose is normalised to GB, durations to ms, clocks to GHz)
    ncu.run_child(script, ["--inside"], metrics, out)   # `python script --inside` under ncu, its report into out
    ncu.profile_each([(what, fn), ...])                  # in that child: one launch of each in the profiler window

The profiled child (`profile_each`, in `tools/ncu_*_steps.py` and the probes) prints `profiled: <what>` to stderr
before each kernel it profiles, in the order ncu then reports them; `read` pairs the two lists. A file whose counts differ is refused, so a number is never attached to the wrong
contender.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd

from workbook import ROOT

_SCALE = {"byte": 1e-9, "Kbyte": 1e-6, "Mbyte": 1e-3, "Gbyte": 1.0, "Tbyte": 1e3,      # -> GB
          "ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3,                                   # -> ms
          "hz": 1e-9, "Khz": 1e-6, "Mhz": 1e-3, "Ghz": 1.0}                              # -> GHz
_KERNEL = re.compile(r"^  (\S+) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)")
_METRIC = re.compile(r"^\s+([a-z_]+__[\w.]+)\s+(\S+)\s+([\d.,]+)\s*$")


def read(path) -> pd.DataFrame:
    """One row per profiled kernel (see the module docstring)."""
    contenders, kernels = [], []
    for line in Path(path).read_text().splitlines():
        if line.startswith("profiled: "):
            contenders.append(line[len("profiled: "):].strip())
        elif (k := _KERNEL.match(line)):
            kernels.append({"kernel": k.group(1)})
        elif (m := _METRIC.match(line)) and kernels:
            name, unit, value = m.groups()
            kernels[-1][name] = float(value.replace(",", "")) * _SCALE.get(unit, 1.0)
    if len(contenders) != len(kernels):
        raise ValueError(f"{path}: {len(contenders)} 'profiled:' lines but {len(kernels)} kernels in ncu's report")
    return pd.DataFrame([{"contender": c, **k} for c, k in zip(contenders, kernels)])


def run_child(script, args, metrics, out, *, ncu: str = "ncu", ncu_args=(), header: str | None = None,
              timeout: float | None = None) -> subprocess.CompletedProcess:
    """`python script *args` under ncu with `metrics` (and `ncu_args`, sections say), profiling only inside the
    child's profiler window (`profile_each`), the GPU clocks as they run; its report goes to `out` after `header`
    (by default the command with its metrics). The child launches one kernel per call (no graphs) and imports this
    tree first."""
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--metrics", ",".join(metrics), *ncu_args,
           sys.executable, str(Path(script).resolve()), *args]
    env = {**os.environ, "WORKBOOK_LAUNCH_GRAPHS": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with Path(out).open("w") as f:
        f.write(header if header is not None else f"# {' '.join(cmd[:6])} {cmd[6]}\n")
        f.flush()
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT, check=False,
                              timeout=timeout)


def profile_each(runs, warmup: int = 3) -> None:
    """The profiled child's part: every fn of `runs` ((what, fn) pairs) called `warmup` times round, then each once
    inside the profiler window, `profiled: <what>` on stderr before it (the line `read` pairs with ncu's report)."""
    import torch
    for _ in range(warmup):
        for _, fn in runs:
            fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for what, fn in runs:
        print(f"profiled: {what}", file=sys.stderr, flush=True)
        fn()
        torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()

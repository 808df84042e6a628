"""Probe: does the order of the work list, which decides where each tile runs, change how many L2 sectors a launch
reads and how long it takes?

The L2 probe (`ncu_l2_sectors_e614724.txt`, an H100, 1024 x 2048 x 4096): cuBLAS's 128 x 128 pairs and ours deliver
the same 268 MB to the SMs, but cuBLAS's L2 serves it with 3.59 M sectors and ours with 5.32 M. Pairs sharing one
operand by multicast read 6.3 M; both kernels read less, so the L2 (or the coalescer in front of it) serves some
requests of different clusters for the same lines with one lookup, cuBLAS's more often. Where the L2 binds (the
few-tile K-heavy shapes: `nvidia_h100_80gb_hbm3/probes/ncu_kheavy_pairs.txt`, the L2 at 70-74 % for ours, 64 % for
cuBLAS) that is time. Which clusters' requests merge could depend on where they run: the block scheduler places
clusters on GPCs in launch order, and a static walk (`one_wave`) gives cluster c row c of the work list. So the
same build runs here with its rows in six orders: as planned (banded), row-major, column-major, random, and dealt
round-robin in steps of 8 and 4 (rows c, c + G, c + 2G, ... taken from consecutive banded rows, so that clusters
the scheduler puts side by side hold tiles that share operands, if it deals clusters out across the GPCs); an order
equal to an earlier one at a shape is left out.
Every order is checked exact on small integers, then timed taking turns (`probe_rows.timed_rows`, CUPTI GPU time,
back to back and synchronised with 95 % intervals) against the planned order; a second process under ncu reads each
order's L2 sectors and the coalescer's counters (one launch each).

The second part (`where`): the same builds in their banded and row-major orders as a traced build whose exit stamp
is replaced by the SM the CTA ran on (`SmidGemm`), three launches each, so that each CTA's SM, row and first-K-block
time can be read together; and ncu again with the coalescer's input-side counters (sectors asked for, sectors
coalesced by hardware and by multicast, sectors sent to the GPCs) for the banded and row-major orders and cuBLAS.

    python gemm_placement_probe.py OUT_DIR            (gemm_placement_<commit>.csv, ncu_placement_<commit>.txt)
The third part (`spread`), after the second found consecutive clusters placed on neighbouring SMs, GPC by GPC,
and the orders that keep a panel's sharers out of one group of SMs reading fewer sectors: the rows in a `spread`
order, each next row the earliest left whose tile shares the fewest panels (its m0 or its n0) with the 7 rows
before it, against banded, row-major and random, at the builds above, 2048 x 1024 x 4096 and the rule's stream-K
pick at 1024 x 1024 x 8192 (its units handed to clusters in list order, as the one-wave builds' rows).

    python gemm_placement_probe.py OUT_DIR            (gemm_placement_<commit>.csv, ncu_placement_<commit>.txt)
    python gemm_placement_probe.py OUT_DIR where      (gemm_placement_smid_<commit>.csv, ncu_placement_lrc_<commit>.txt)
    python gemm_placement_probe.py OUT_DIR spread     (gemm_placement_spread_<commit>.csv,
                                                       ncu_placement_spread_<commit>.txt)"""
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import cutlass
import torch

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

import cutlass.cute as cute  # noqa: E402
from cutlass.cute.runtime import make_fake_stream  # noqa: E402

from gemm_kernels import configs, hopper_host, hopper_options  # noqa: E402
from gemm_kernels.hopper import HopperGemm  # noqa: E402
from workbook import launch, ncu  # noqa: E402

# (M, N, K, candidate): one item per cluster, static walk (`one_wave`), no stream-K
BUILDS = [(1024, 2048, 4096, "128 balanced cluster2"), (1024, 1024, 8192, "64 uniform cluster2n"),
          (1024, 1024, 8192, "64x128 uniform cluster2"), (1024, 1024, 1024, "64 uniform cluster1")]
ORDERS = ("banded", "row-major", "column-major", "random", "dealt 8", "dealt 4")
METRICS = ["gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second", "dram__bytes_read.sum",
           "lts__t_sectors_srcunit_tex_op_read.sum", "lts__t_requests_srcunit_tex_op_read.sum",
           "lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum", "lts__throughput.avg.pct_of_peak_sustained_elapsed",
           "l1tex__m_xbar2l1tex_read_bytes.sum",
           "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"]
LRC_METRICS = ["gpu__time_duration.sum", "lts__t_sectors_srcunit_tex_op_read.sum", "lrc__xbar2lrc_requests_op_read.sum",
               "lrc__request_sectors_op_read_coalescable.sum",
               "lrc__request_sectors_op_read_coalescing_achieved_type_hardware.sum",
               "lrc__request_sectors_op_read_coalescing_achieved_type_programmatic.sum",
               "lrc__lts2lrc_sectors_op_read.sum", "lrc__lrc2xbar_sectors_op_read.sum",
               "lrc__lrc2xbar_sectors_op_read_coalescing_achieved_type_hardware.sum",
               "lrc__xbar2gpc_sectors_op_read.sum",
               "lrc__xbar2gpc_sectors_op_read_coalescing_achieved_type_hardware.sum",
               "lrc__xbar2gpc_sectors_op_read_coalescing_achieved_type_programmatic.sum"]
WHERE_ORDERS = ("banded", "row-major")
SPREAD_BUILDS = BUILDS + [(2048, 1024, 4096, "128 balanced cluster2"), (1024, 1024, 8192, "128 stream-k cluster2x2")]
SPREAD_ORDERS = ("banded", "row-major", "random", "spread")
SPREAD_METRICS = METRICS + ["lrc__request_sectors_op_read_coalescing_achieved_type_hardware.sum",
                            "lrc__request_sectors_op_read_coalescing_achieved_type_programmatic.sum"]
PARTS = {"orders": (BUILDS, ORDERS, METRICS, ""), "where": (BUILDS[:3], WHERE_ORDERS, LRC_METRICS, "_lrc"),
         "spread": (SPREAD_BUILDS, SPREAD_ORDERS, SPREAD_METRICS, "_spread")}


class SmidGemm(HopperGemm):
    """The traced build with the exit stamp (trace column 1) replaced by the SM the CTA runs on."""

    @cute.jit
    def stamp(self, trace, cta, col, ctidx):
        if ctidx < 32:
            if cutlass.const_expr(isinstance(col, int) and col == 1):
                trace[cta, col] = cutlass.Int64(cute.arch.smid())
            else:
                trace[cta, col] = cute.arch.globaltimer()


def order(rows: torch.Tensor, name: str) -> torch.Tensor:
    """The permutation of the work list's rows (m0 in column 0, n0 in column 1) that `name` asks for."""
    n = rows.shape[0]
    m0, n0 = rows[:, 0].tolist(), rows[:, 1].tolist()
    if name == "banded":
        return torch.arange(n)
    if name == "row-major":
        return torch.tensor(sorted(range(n), key=lambda i: (m0[i], n0[i])))
    if name == "column-major":
        return torch.tensor(sorted(range(n), key=lambda i: (n0[i], m0[i])))
    if name == "random":
        return torch.randperm(n, generator=torch.Generator().manual_seed(5))
    if name == "spread":                     # the earliest row sharing the fewest panels with the 7 before it
        left, out = list(range(n)), []
        while left:
            recent = out[-7:]
            pick = min(left, key=lambda i: (sum((m0[i] == m0[j]) + (n0[i] == n0[j]) for j in recent), i))
            left.remove(pick)
            out.append(pick)
        return torch.tensor(out)
    step = int(name.split()[1])              # "dealt G": position c takes banded row (c % G) * ceil(n / G) + c // G
    per = -(-n // step)
    picks = [(c % step) * per + c // step for c in range(step * per)]
    return torch.tensor([p for p in picks if p < n])


def contenders(M: int, N: int, K: int, name: str, orders=ORDERS, smid: bool = False) -> dict:
    """{order name: fn(a, b)}: the candidate as `gemm(a, b)` runs it, its work list in each order; `smid`: as
    `SmidGemm`, each fn returning the trace [CTAs, TRACE_COLS] instead of C."""
    options = hopper_options.one_wave(configs.HOPPER_CANDIDATES[name], M, N)
    # rows go to clusters in list order: the static walk with one row per cluster, or stream-K's units
    assert options.stream_k or not options.dynamic, (M, N, K, name, options)
    device = torch.cuda.current_device()
    base = hopper_host._call_for(M, N, K, device, dataclasses.replace(options, trace=True) if smid else options)
    if smid:
        dummy = hopper_host._args(base.cfg, 16, 16, 16, 16, 16, 16, 16, 1, hopper_options.ALIGN,
                                  hopper_options.ALIGN, 1, 1, make_fake_stream())
        compiled = cute.compile(SmidGemm(base.cfg), *dummy, options=f"--gpu-arch {hopper_options.ARCH}")
        base = dataclasses.replace(base, launches=launch.LaunchCache(compiled, device=device, pointers=7))
    assert base.work.shape[0] <= base.sizes[4] // base.cfg.cluster_size, "more rows than clusters"
    fns, seen = {}, set()
    for o in orders:
        perm = order(base.work.cpu(), o)
        assert sorted(perm.tolist()) == list(range(base.work.shape[0])), o
        if tuple(perm.tolist()) in seen:      # an order that equals an earlier one at this shape runs once
            continue
        seen.add(tuple(perm.tolist()))
        call = dataclasses.replace(base, work=base.work[perm.to(base.work.device)].contiguous(), scratches={}, tails={})

        def fn(a, b, call=call):
            out = torch.empty_like(call.out_like)
            stream = torch.cuda.current_stream().cuda_stream
            if smid:
                call.scratch(stream)[2].fill_(-1)
            hopper_host._launch(call, a, b, out, stream)
            return call.scratch(stream)[2].clone() if smid else out
        fns[f"{M}x{N}x{K} {name}: {o}"] = fn
    return fns


def profile(part: str) -> None:
    """The child under ncu: everything compiled and warmed, then one launch per order inside the profiler window."""
    runs = []
    builds, orders = PARTS[part][:2]
    for M, N, K, name in builds:
        a = torch.randn(M, K, device="cuda").bfloat16()
        b = torch.randn(K, N, device="cuda").bfloat16()
        runs += [(f, lambda fn=fn, a=a, b=b: fn(a, b)) for f, fn in contenders(M, N, K, name, orders).items()]
        runs.append((f"{M}x{N}x{K} torch.matmul", lambda a=a, b=b: torch.matmul(a, b)))
    ncu.profile_each(runs)


def under_ncu(out: Path, part: str = "orders") -> None:
    query = subprocess.run(["ncu", "--query-metrics"], capture_output=True, text=True).stdout
    lrc = [line.split()[0] for line in query.splitlines() if line.startswith("lrc__")]
    metrics = (METRICS + [f"{m}.sum" for m in lrc if "sectors" in m or "requests" in m][:12] if part == "orders"
               else PARTS[part][2])
    ncu.run_child(__file__, ["--inside", part], metrics, out,
                  header=f"# ncu --clock-control none --profile-from-start off --metrics {','.join(metrics)}\n"
                         "# lrc metrics this ncu lists: " + " ".join(lrc) + "\n")


def where(out_dir: str, commit: str) -> None:
    """Each CTA's SM, row and stamps, three traced launches per build and order; then the coalescer's counters."""
    import pandas as pd
    from probe_rows import save
    rows = []
    for M, N, K, name in BUILDS:
        a = torch.randn(M, K, device="cuda").bfloat16()
        b = torch.randn(K, N, device="cuda").bfloat16()
        for f, fn in contenders(M, N, K, name, WHERE_ORDERS, smid=True).items():
            for rep in range(3):
                trace = fn(a, b).cpu()
                assert (trace[:, :2] >= 0).all(), f
                t0 = trace[:, 0].min().item()
                for cta, t in enumerate(trace.tolist()):
                    rows.append(dict(M=M, N=N, K=K, candidate=name, order=f.split(": ")[-1], rep=rep, cta=cta,
                                     smid=t[1], row=t[2], entry_us=(t[0] - t0) / 1e3,
                                     **{k: (t[3 + i] - t0) / 1e3 for i, k in enumerate(("start_us", "data_us",
                                                                                        "mma_done_us", "stored_us"))}))
        save(rows, f"{out_dir}/gemm_placement_smid_{commit}.csv")
    df = pd.DataFrame(rows)
    print(df.groupby(["M", "N", "K", "candidate", "order", "rep"]).agg(sms=("smid", "nunique"),
                                                                       data_spread=("data_us", "std")).to_string())
    under_ncu(Path(out_dir) / f"ncu_placement_lrc_{commit}.txt", "where")
    table = ncu.read(Path(out_dir) / f"ncu_placement_lrc_{commit}.txt")
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.float_format", "{:.4g}".format):
        print(table.drop(columns=["kernel"]).T.to_string())


def main(out_dir: str, part: str = "orders") -> None:
    from probe_rows import save, timed_rows
    commit = os.environ.get("WORKBOOK_COMMIT", "local")
    if part == "where":
        return where(out_dir, commit)
    builds, orders, _, suffix = PARTS[part]
    g = torch.Generator(device="cuda").manual_seed(29)
    rows = []
    for M, N, K, name in builds:
        fns = {"torch.matmul": torch.matmul, **contenders(M, N, K, name, orders)}
        ints = [torch.randint(-2, 3, s, device="cuda", generator=g).bfloat16() for s in ((M, K), (K, N))]
        want = torch.matmul(ints[0].float(), ints[1].float()).bfloat16()
        for f, fn in fns.items():
            if f != "torch.matmul":
                for _ in range(2):
                    assert torch.equal(fn(*ints), want), f
        sets = [(torch.randn(M, K, device="cuda", generator=g).bfloat16(),
                 torch.randn(K, N, device="cuda", generator=g).bfloat16()) for _ in range(3)]
        rows += timed_rows(fns, sets, f"{M}x{N}x{K} {name}: banded", 10, M=M, N=N, K=K, candidate=name)
        save(rows, f"{out_dir}/gemm_placement{suffix}_{commit}.csv")
    under_ncu(Path(out_dir) / f"ncu_placement{suffix}_{commit}.txt", part)
    import pandas as pd
    table = ncu.read(Path(out_dir) / f"ncu_placement{suffix}_{commit}.txt")
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.float_format", "{:.4g}".format):
        print(table.drop(columns=["kernel"]).to_string())


if __name__ == "__main__":
    if sys.argv[1] == "--inside":
        profile(sys.argv[2])
    else:
        main(*sys.argv[1:])

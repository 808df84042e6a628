"""Probe: do our CTAs read fewer L2 sectors, and finish sooner, when no producer may run ahead of the others?

The coalescer's counters (`nvidia_h100_80gb_hbm3/probes/ncu_placement_lrc_a658e26.txt`, 1024 x 2048 x 4096): of the
6.29 M sectors both kernels ask the L2 for, the hardware merges 1.37 M of ours with another cluster's identical
request and 2.72 M of cuBLAS's (multicast merges 2.10 M of each), and the L2 serves ours with 4.93 M sectors, cuBLAS
with 3.58 M. Two requests merge only when they arrive close together, and our CTAs drift apart during the K loop:
their first K-blocks arrive within about 1 us, their K loops end 5-10 us apart (`gemm_placement_smid_a658e26.csv`).
So here each producer is held on a leash: at every `chunk`-th K-block, once its slot is free, it counts the chunk
on a global counter and waits until every CTA has counted the chunk `lag` chunks back; its TMA loads of a K-block
then leave at most chunk x lag K-blocks after the slowest producer's. The counters are zeroed by the last producer
to finish (a probe-sized scratch in place of the library's two-word counter; the library build ignores it).

Where it can run: one item per CTA, the static walk (`hopper_options.one_wave`), every CTA resident at once (the
grid is the rows), no stream-K: a leash on CTAs that are not all running, or that walk different K ranges, would
wait for ever. The first launch of every build is watched: one still running after 10 s ends the process.

Each leashed build is checked exact on small integers, then timed taking turns with the library build and
torch.matmul (`probe_rows.timed_rows`: CUPTI GPU time, back to back and synchronised with 95 % intervals); a second
process under ncu reads each one's L2 sectors and the coalescer's counters (one launch each).

    python gemm_leash_probe.py OUT_DIR     (gemm_leash_<commit>.csv, ncu_leash_<commit>.txt)"""
import dataclasses
import os
import sys
import time
from pathlib import Path

import cutlass
import torch

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

import cutlass.cute as cute  # noqa: E402
from cutlass.cute.runtime import make_fake_stream  # noqa: E402

from gemm_kernels import configs, gemm, hopper_host, hopper_options  # noqa: E402
from gemm_kernels.hopper import HopperGemm  # noqa: E402
from workbook import launch, ncu  # noqa: E402

# (M, N, K, candidate): shapes where one wave of one-item clusters runs behind cuBLAS (the placement probe's)
BUILDS = [(1024, 2048, 4096, "128 balanced cluster2"), (1024, 1024, 8192, "64 uniform cluster2n")]
LEASHES = [(2, 1), (4, 2), (8, 2)]      # (chunk, lag): at most 2, 8 and 16 K-blocks ahead of the slowest producer
LEASH_WORDS = 2 + 256                   # [unused, producers done, one count per chunk]: K up to 256 x 64 x chunk
METRICS = ["gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second", "lts__t_sectors_srcunit_tex_op_read.sum",
           "lrc__request_sectors_op_read_coalescable.sum",
           "lrc__request_sectors_op_read_coalescing_achieved_type_hardware.sum",
           "lrc__request_sectors_op_read_coalescing_achieved_type_programmatic.sum",
           "lrc__lts2lrc_sectors_op_read.sum",
           "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"]


class LeashGemm(HopperGemm):
    """The library kernel whose producer waits, at every `chunk`-th K-block, until every CTA's producer has reached
    the chunk `lag` chunks back. The counters live in the scratch passed as the counter (`LEASH_WORDS` words)."""
    chunk, lag = 4, 2

    @cute.jit
    def produce(self, tma_a, mA, tma_b, mB, sA, sB, ring, work, queue_pipe, queue, counter, cluster, num_clusters,
                rank, num_items):
        self.counts = counter.iterator + 2                       # traced once: read by load_k_blocks below
        self.producers = num_clusters * self.cfg.cluster_size
        HopperGemm.produce(self, tma_a, mA, tma_b, mB, sA, sB, ring, work, queue_pipe, queue, counter, cluster,
                           num_clusters, rank, num_items)
        if cute.arch.lane_idx() == 0:
            # every producer counts itself done after its last wait: the last one zeroes the counts for the next launch
            done = cute.arch.atomic_add(counter.iterator + 1, cutlass.Int32(1), sem="acq_rel", scope="gpu")
            if done == self.producers - 1:
                words = cute.make_tensor(counter.iterator, cute.make_layout(LEASH_WORDS))
                for j in range(1, LEASH_WORDS):
                    words[j] = cutlass.Int32(0)

    @cute.jit
    def load_k_blocks(self, ring, tma_a, tAgA, tAsA, tma_b, tBgB, tBsB, k0, count, rank, state):
        """The library's loop with the leash before each chunk's first K-block (after its slot is free)."""
        cm, cn = self.cfg.cluster_m, self.cfg.cluster_n
        row_mask, column_mask = 0, (1 << cm) - 1
        for j in cutlass.range_constexpr(cn):
            row_mask |= 1 << (cm * j)
        to_row = cutlass.Int16(row_mask) << (rank % cm)
        to_column = cutlass.Int16(column_mask) << (cm * (rank // cm))
        for i in range(count):
            kb = k0 + i
            ring.producer_acquire(state)
            if kb % self.chunk == 0:
                self.keep_pace(kb // self.chunk)
            full = ring.producer_get_barrier(state)
            if cutlass.const_expr(cn > 1):
                cute.copy(tma_a, tAgA[(None, kb)], tAsA[(None, state.index)], tma_bar_ptr=full, mcast_mask=to_row)
            else:
                cute.copy(tma_a, tAgA[(None, kb)], tAsA[(None, state.index)], tma_bar_ptr=full)
            if cutlass.const_expr(cm > 1):
                cute.copy(tma_b, tBgB[(None, kb)], tBsB[(None, state.index)], tma_bar_ptr=full, mcast_mask=to_column)
            else:
                cute.copy(tma_b, tBgB[(None, kb)], tBsB[(None, state.index)], tma_bar_ptr=full)
            state.advance()
        return state

    @cute.jit
    def keep_pace(self, chunk):
        """Count `chunk` reached, then wait until every producer has counted chunk - lag (relaxed: only the counts
        order anything here; the data moves by TMA and the ring's barriers)."""
        if cute.arch.lane_idx() == 0:
            cute.arch.red(self.counts + chunk, cutlass.Int32(1), op="add", dtype=cutlass.Int32, sem="relaxed",
                          scope="gpu")
            if chunk >= self.lag:
                seen = cute.arch.load(self.counts + (chunk - self.lag), cutlass.Int32, sem="relaxed", scope="gpu")
                while seen < self.producers:
                    seen = cute.arch.load(self.counts + (chunk - self.lag), cutlass.Int32, sem="relaxed",
                                          scope="gpu")
        cute.arch.sync_warp()


def leashed(chunk: int, lag: int) -> type:
    return type(f"Leash{chunk}x{lag}", (LeashGemm,), {"chunk": chunk, "lag": lag})


def options_for(M: int, N: int, name: str) -> hopper_options.Options:
    """The candidate as gemm(a, b) runs it where it fits one wave: one item per cluster, the static walk."""
    options = hopper_options.one_wave(configs.HOPPER_CANDIDATES[name], M, N)
    assert not (options.dynamic or options.stream_k), (M, N, name, options)
    return options


def compile_leashed(M: int, N: int, K: int, name: str, chunk: int, lag: int, arch: str = "sm_90a"):
    """The leashed build with no GPU (`workbook.sass.Artifacts`), as `hopper_host.compile_gemm` compiles the
    library's."""
    from workbook import gpus, sass
    cfg, _ = hopper_options.config_for(M, N, options_for(M, N, name), gpus.H200)
    args = hopper_host._args(cfg, 16, 16, 16, 16, 16, 16, 16, M, N, K, 1, cfg.cluster_size, make_fake_stream())
    return sass.compile_for(leashed(chunk, lag)(cfg), *args, arch=arch)


def watched(fn, a, b, seconds=10.0):
    """fn(a, b), ending the process if the launch is still running after `seconds` (a leash waiting for ever)."""
    out = fn(a, b)
    done = torch.cuda.Event()
    done.record()
    t = time.monotonic()
    while not done.query():
        if time.monotonic() - t > seconds:
            print(f"hung after {seconds} s: ending the probe", file=sys.stderr, flush=True)
            os._exit(3)
        time.sleep(0.01)
    return out


def contenders(M: int, N: int, K: int, name: str) -> dict:
    """{name: fn(a, b)}: the library build as gemm(a, b) runs it here, and each leashed build."""
    options = options_for(M, N, name)
    device = torch.cuda.current_device()
    base = hopper_host._call_for(M, N, K, device, options)
    rows, ctas = base.work.shape[0], base.sizes[4]
    assert rows * base.cfg.cluster_size == ctas, f"{M}x{N}x{K} {name}: {rows} rows on {ctas} CTAs"
    assert -(-K // 64) <= (LEASH_WORDS - 2) * min(c for c, _ in LEASHES), K
    dummy = hopper_host._args(base.cfg, 16, 16, 16, 16, 16, 16, 16, 1, hopper_options.ALIGN, hopper_options.ALIGN,
                              1, 1, make_fake_stream())
    fns = {f"{M}x{N}x{K} {name}": lambda a, b: gemm(a, b, options)}
    for chunk, lag in LEASHES:
        compiled = cute.compile(leashed(chunk, lag)(base.cfg), *dummy, options=f"--gpu-arch {hopper_options.ARCH}")
        counts = torch.zeros(LEASH_WORDS, dtype=torch.int32, device="cuda")
        call = dataclasses.replace(base, launches=launch.LaunchCache(compiled, device=device, pointers=7),
                                   scratches={}, tails={})
        stream = torch.cuda.current_stream().cuda_stream
        call.scratches[stream] = (counts, counts, counts)     # counter (and the unused workspace and trace)

        def fn(a, b, call=call, stream=stream):
            assert torch.cuda.current_stream().cuda_stream == stream
            out = torch.empty_like(call.out_like)
            hopper_host._launch(call, a, b, out, stream)
            return out
        fns[f"{M}x{N}x{K} {name}: leash {chunk}x{lag}"] = fn
    return fns


def profile() -> None:
    """The child under ncu: everything compiled and warmed, then one launch of each inside the profiler window."""
    runs = []
    for M, N, K, name in BUILDS:
        a = torch.randn(M, K, device="cuda").bfloat16()
        b = torch.randn(K, N, device="cuda").bfloat16()
        runs += [(f, lambda fn=fn, a=a, b=b: fn(a, b)) for f, fn in contenders(M, N, K, name).items()]
        runs.append((f"{M}x{N}x{K} torch.matmul", lambda a=a, b=b: torch.matmul(a, b)))
    ncu.profile_each(runs)


def under_ncu(out: Path) -> None:
    ncu.run_child(__file__, ["--inside"], METRICS, out, timeout=240)


def main(out_dir: str) -> None:
    from probe_rows import save, timed_rows
    commit = os.environ.get("WORKBOOK_COMMIT", "local")
    g = torch.Generator(device="cuda").manual_seed(31)
    rows = []
    for M, N, K, name in BUILDS:
        fns = {"torch.matmul": torch.matmul, **contenders(M, N, K, name)}
        ints = [torch.randint(-2, 3, s, device="cuda", generator=g).bfloat16() for s in ((M, K), (K, N))]
        want = torch.matmul(ints[0].float(), ints[1].float()).bfloat16()
        for f, fn in fns.items():
            if f != "torch.matmul":
                for _ in range(3):          # the counts must come back to zero between launches
                    assert torch.equal(watched(fn, *ints), want), f
        sets = [(torch.randn(M, K, device="cuda", generator=g).bfloat16(),
                 torch.randn(K, N, device="cuda", generator=g).bfloat16()) for _ in range(3)]
        rows += timed_rows(fns, sets, f"{M}x{N}x{K} {name}", 10, M=M, N=N, K=K, candidate=name)
        save(rows, f"{out_dir}/gemm_leash_{commit}.csv")
    under_ncu(Path(out_dir) / f"ncu_leash_{commit}.txt")
    import pandas as pd
    table = ncu.read(Path(out_dir) / f"ncu_leash_{commit}.txt")
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.float_format", "{:.4g}".format):
        print(table.drop(columns=["kernel"]).T.to_string())


if __name__ == "__main__":
    if sys.argv[1] == "--inside":
        profile()
    else:
        main(*sys.argv[1:])

"""The GEMM problem as the shape explorer (`workbook.explore`) sees it.

    from gemm_kernels.explore import GEMM
    from workbook.explore import Explorer
    Explorer(GEMM).explore((4096, 4096, 4096), gpu="b200")

The wave model is the kernels' own work list: `hopper_options.plan_for` (H200) and `blackwell_options.plan`
(B200) give each named configuration's (`gemm_kernels.configs`) items, their widths and the slots they run on,
from its options: tile, cluster, epilogue (which narrow widths it allows) and schedule. An item of the widest
width does 2 x tile_m x tile_n x K' FLOPs (K rounded up to whole 64-deep K-blocks; an edge tile costs what a
full one does); a narrow item takes its share. A 2-CTA cluster (Hopper's cluster2) or a CTA pair (Blackwell) is
one slot of a 256-row item. Stream-K splits the uniform list's last partial wave along K over every slot
(`waves.stream_k`); the hand-over of
partial sums is not modelled, which is why it predicts a gain that the H200 did not show.
"""
from __future__ import annotations

import dataclasses
import math

from gemm_kernels import bench, blackwell_options, configs, hopper_options, seeds
from workbook.explore import MAX_ELEMENTS, Dim, Problem, Reference, Waves

BASELINE = "torch.matmul"
K_BLOCK = 64          # K per pipeline stage on both architectures
OPTIONS = {"sm_90a": hopper_options, "sm_100a": blackwell_options}   # each backend's options, plan and shape rule


# What this module needs of the kernels, in one place: the named configurations of an arch (name -> Options,
# the benchmark's own table), and each one's work list as the kernel plans it.

def _named(arch: str) -> dict:
    return configs.for_arch(arch)


def _work_list(M: int, N: int, gpu, configuration: str):
    """(the planner's Plan of this configuration's run, what one slot is, whether the tail is stream-K)."""
    options = _named(gpu.arch)[configuration]
    if gpu.arch == "sm_90a":
        plan = hopper_options.plan_for(M, N, options, gpu)
        size = options.cluster_size
        slot = {1: "SM", 2: "CTA pair (cluster of 2)"}.get(size, f"cluster of {size} CTAs")
        return plan, slot, options.stream_k
    return blackwell_options.plan(M, N, options), "CTA pair", False


def _differences(options) -> str:
    """The fields of `options` that differ from its backend's default, as keyword arguments."""
    default = type(options).default()
    changed = [f"{f.name}={getattr(options, f.name)!r}" for f in dataclasses.fields(options)
               if getattr(options, f.name) != getattr(default, f.name)]
    return ", ".join(changed) if changed else "the default options"


def _k_blocks(K: int) -> int:
    return math.ceil(K / K_BLOCK)


def _from_plan(plan, K: int, slot: str, stream_k: bool = False) -> Waves:
    """A planner's work list as explorer Waves; with `stream_k`, its last partial wave split along K."""
    item_flops = 2.0 * plan.tile_m * plan.wide * _k_blocks(K) * K_BLOCK
    busy = sum(t.width for t in plan.items) / plan.wide
    if not stream_k or len(plan.items) % plan.slots == 0:
        return Waves(items=len(plan.items), slots=plan.slots, makespan=plan.makespan, busy=busy,
                     item_flops=item_flops, slot=slot, tile=f"M{plan.tile_m} x N{plan.wide}", schedule=plan.gantt)
    from gemm_kernels import waves
    kb = _k_blocks(K)
    full, units = waves.stream_k(len(plan.items), plan.slots, kb)
    waves_done = full // plan.slots
    longest = max(sum(s.k1 - s.k0 for s in unit) for unit in units)

    def schedule():
        label = f"M{plan.tile_m} x N{plan.wide}"
        rows = [[(float(w), 1.0, label) for w in range(waves_done)] for _ in range(plan.slots)]
        for slot, unit in enumerate(units):
            t = float(waves_done)
            for seg in unit:
                rows[slot].append((t, (seg.k1 - seg.k0) / kb, "stream-K share of the tail"))
                t += (seg.k1 - seg.k0) / kb
        return rows

    return Waves(items=len(plan.items), slots=plan.slots, makespan=waves_done + longest / kb, busy=busy,
                 item_flops=item_flops, slot=slot, tile=f"M{plan.tile_m} x N{plan.wide}, stream-K tail",
                 schedule=schedule)


class Gemm(Problem):
    name = "GEMM"
    dims = (Dim("M", 4096, 256, 65536), Dim("N", 4096, 256, 65536, 8), Dim("K", 4096, 256, 65536, 8))
    table = "gemm"
    baselines = (BASELINE,)
    model = "gemm_kernels.explore's wave model (the kernels' own work lists)"

    def check(self, shape, gpu):
        M, N, K = shape
        if gpu.arch not in OPTIONS:
            raise ValueError(f"no GEMM kernels for {gpu.name} ({gpu.arch}); kernels exist for {sorted(OPTIONS)}")
        OPTIONS[gpu.arch].check_shape(M, N, K)
        for tensor, elements in (("A", M * K), ("B", K * N), ("C", M * N)):
            if elements > MAX_ELEMENTS:
                raise ValueError(f"{tensor} would have {elements:,} elements, more than the {MAX_ELEMENTS:,} that "
                                 f"32-bit indexing allows")

    def flops(self, shape):
        M, N, K = shape
        return 2.0 * M * N * K

    def nbytes(self, shape):
        """A and B (bf16) in, C (bf16) out."""
        M, N, K = shape
        return (M * K + K * N + M * N) * 2

    def configurations(self, gpu):
        return [*_named(gpu.arch), BASELINE]

    def describe(self, configuration, gpu):
        return "cuBLAS" if configuration == BASELINE else _differences(_named(gpu.arch)[configuration])

    def waves(self, shape, gpu, configuration) -> Waves | None:
        if configuration == BASELINE:
            return None                     # cuBLAS's tiles are not ours to model
        M, N, K = shape
        plan, slot, stream_k = _work_list(M, N, gpu, configuration)
        return _from_plan(plan, K, slot, stream_k)

    def references(self, shape, gpu):
        """Seed 004's B200 table, where the shape is one of its cubes."""
        M, N, K = shape
        if gpu.key != "b200" or not M == N == K:
            return []
        t = seeds.gemm_table()
        src = f"{seeds.GEMM_CSV} (cuda-oxide gemm_sol_final on the PR author's B200, seed {seeds.SEED_GEMM})"
        out = []
        for r in t[t["size"] == M].itertuples():
            out += [Reference("cuda-oxide before (4-stage)", r.before_us / 1e3, src),
                    Reference("cuda-oxide after (7-stage, balanced)", r.after_us / 1e3, src),
                    Reference("cuBLASLt top-8", r.cublaslt_top8_us / 1e3, src)]
        return out

    def measure(self, shape, configuration):
        """The benchmark's configuration of that name (or torch.matmul), timed by its method."""
        import torch
        from gemm_kernels import arch_of
        from workbook import timing
        if configuration == BASELINE:
            fn = torch.matmul
        else:
            chosen = bench.contenders(arch_of(torch.device("cuda")))
            if configuration not in chosen:
                return None
            gemm, options = chosen[configuration]
            fn = lambda a, b: gemm(a, b, options)       # noqa: E731
        sets = bench.input_sets(*shape)
        try:
            return timing.bench(fn, sets).ms_median
        finally:
            del sets
            torch.cuda.empty_cache()


GEMM = Gemm()

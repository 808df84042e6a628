"""The k-means assignment problem as the shape explorer (`workbook.explore`) sees it.

    from kmeans_kernels.explore import KMEANS
    from workbook.explore import Explorer
    Explorer(KMEANS).explore((65536, 128, 4096), gpu="h200")

The wave model. One CTA owns BLOCK_M = 128 points (a work item) and scans all K centroids in tiles of
`block_n` (128; 256 for Hopper's `wide`), D in slices of 64; a tile that hangs over the edge of K or D costs
what a full one does, so an item does 2 x 128 x K' x D' FLOPs with K' and D' rounded up to whole tiles. The
grid is not persistent: items fill the GPU's CTA slots wave by wave. Slots = SMs x CTAs per SM: on Hopper
`hopper.ctas_per_sm(D, block_n)`, two up to D = 256 with 128-wide tiles and one otherwise; on Blackwell the
warp-specialised variants fill an SM's shared memory (one CTA) and `x_resident` is small enough for two (the
kernel's docstring). CTAs sharing an SM share its tensor cores, so each slot gets 1 / slots of the peak.
"""
from __future__ import annotations

import math

import kmeans_kernels
from kmeans_kernels import seeds, variants
from workbook import gpus
from workbook.explore import MAX_ELEMENTS, Dim, Problem, Reference, Waves, record_label, uniform_waves

BLOCK_D = 64                   # D per MMA slice on both architectures (one 128-byte swizzle row of bf16)
BASELINE = "torch matmul_argmin"
BLACKWELL_CTAS_PER_SM = {"x_resident": 2}   # the others: 1


def _backend(gpu: gpus.GpuSpec):
    return kmeans_kernels.backend(gpu.arch)


def _resolve(shape, gpu: gpus.GpuSpec, configuration: str) -> str:
    """The variant a configuration runs at this shape (`auto` picks one per shape)."""
    return _backend(gpu).auto_variant(*shape) if configuration == "auto" else configuration


def tiling(shape, gpu: gpus.GpuSpec, variant: str) -> tuple[int, int]:
    """(centroids per tile, CTAs per SM) of one variant at this shape on this GPU."""
    _, D, _ = shape
    be = _backend(gpu)
    if gpu.arch == "sm_90a":
        block_n = variants.recipe(gpu.arch, variant).tile_n
        return block_n, be.ctas_per_sm(D, block_n)
    if variant == "x_resident" and D > be.X_RESIDENT_MAX_D:
        raise ValueError(f"x_resident takes D <= {be.X_RESIDENT_MAX_D}, not {D}")
    return be.BLOCK_N, BLACKWELL_CTAS_PER_SM.get(variant, 1)


class KmeansAssign(Problem):
    name = "k-means assignment"
    dims = (Dim("N", 65536, 1024, 1 << 22), Dim("D", 128, 16, kmeans_kernels.D_MAX, kmeans_kernels.D_MULTIPLE),
            Dim("K", 4096, 128, 1 << 17))
    table = "kmeans_assign"
    baselines = (BASELINE,)
    model = "kmeans_kernels.explore's wave model (128-point CTAs, real CTAs per SM)"

    def check(self, shape, gpu):
        N, D, K = shape
        kmeans_kernels.check_d(D)
        for tensor, elements in (("x", N * D), ("c", K * D)):
            if elements > MAX_ELEMENTS:
                raise ValueError(f"{tensor} would have {elements:,} elements, more than the {MAX_ELEMENTS:,} that "
                                 f"32-bit indexing allows")
        _backend(gpu)                       # a ValueError for a GPU without these kernels

    def flops(self, shape):
        """The N x K scores, each a D-long dot product."""
        N, D, K = shape
        return 2.0 * N * D * K

    def nbytes(self, shape):
        """x and c (bf16) in, ids (int32) out, and the K fp32 centroid norms."""
        N, D, K = shape
        return (N * D + K * D) * 2 + N * 4 + K * 4

    def configurations(self, gpu):
        return [*_backend(gpu).VARIANTS, "auto", BASELINE]

    def describe(self, configuration, gpu):
        if configuration == BASELINE:
            return "x @ c.T in cuBLAS, then argmin: the N x K scores go through HBM"
        if configuration == "auto":
            return "the variant kmeans_kernels.assign picks for the shape"
        return ""

    def waves(self, shape, gpu, configuration) -> Waves | None:
        if configuration == BASELINE:
            return None                     # cuBLAS's tiles are not ours to model
        N, D, K = shape
        variant = _resolve(shape, gpu, configuration)
        block_n, ctas = tiling(shape, gpu, variant)
        block_m = _backend(gpu).BLOCK_M
        k_pad, d_pad = math.ceil(K / block_n) * block_n, math.ceil(D / BLOCK_D) * BLOCK_D
        tile = f"{block_m} points x {K:,} centroids, {block_n}-wide tiles"
        return uniform_waves(math.ceil(N / block_m), gpu.sm_count * ctas, 2.0 * block_m * k_pad * d_pad,
                             slot="SM" if ctas == 1 else f"CTA ({ctas} per SM)", tile=tile)

    def references(self, shape, gpu):
        """Seed 000's nightly comparison, the PR author's B200: both sides of exactly this shape."""
        if gpu.key != "b200":
            return []
        t = seeds.nightly_table()
        N, D, K = shape
        out = []
        for r in t[(t.N == N) & (t.D == D) & (t.K == K)].itertuples():
            src = f"{seeds.NIGHTLY_CSV} (flashlib PR #22's author on a B200, seed {seeds.SEED_KMEANS})"
            out.append(Reference(f"flashlib nightly ({seeds.PATH_LABELS[r.nightly_path]})", float(r.nightly_ms), src))
            out.append(Reference(f"flashlib PR #22 ({seeds.PATH_LABELS[r.pr_path]})", float(r.pr_ms), src))
        return out

    def measure(self, shape, configuration):
        """The benchmark's contender of that name, timed by its method on its seeded input sets."""
        import torch
        from kmeans_kernels import bench
        from workbook import timing
        arch = kmeans_kernels.arch_of(torch.device("cuda"))
        fns = {record_label(k, v): fn for k, v, fn in bench.contenders(arch, {"ours", "torch"}, False)}
        if configuration not in fns:
            return None
        sets = bench.input_sets(*shape)
        try:
            return timing.bench(fns[configuration], sets).ms_median
        finally:
            del sets
            torch.cuda.empty_cache()


KMEANS = KmeansAssign()


def check_slots(norm_broadcast, wide, D: int = 128) -> str:
    """Notebook 15's exercise: how many CTAs of each variant run at once on an H200 at this D (its slots)."""
    want = {name: waves.slots for name in ("norm_broadcast", "wide")
            for waves in [KMEANS.waves((65536, D, 4096), gpus.H200, name)]}
    got = {"norm_broadcast": norm_broadcast, "wide": wide}
    if any(v is None for v in got.values()):
        return "Not answered yet: give the CTAs that run at once for norm_broadcast and for wide."
    wrong = [name for name in got if got[name] != want[name]]
    if not wrong:
        return (f"Right: {want['norm_broadcast']} and {want['wide']}. The 64 x 128 accumulator leaves registers for "
                f"two CTAs per SM; the 64 x 256 one of wide does not.")
    if got["norm_broadcast"] == gpus.H200.sm_count:
        return "norm_broadcast is not alone on its SM at this D: see hopper.ctas_per_sm."
    return f"Not quite for {', '.join(wrong)}: slots = SMs x CTAs per SM (hopper.ctas_per_sm(D, block_n))."

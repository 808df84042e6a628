"""The GPUs this workbook targets, what they can do on paper, and which one (if any) is here.

    workbook.gpus.B200, workbook.gpus.H200          specs with the source of every number
    workbook.gpus.get("b200")                       by short name, GPU name or spec
    workbook.gpus.for_arch("sm_90a")                the spec whose machine code an arch is (H200 for sm_90a)
    workbook.gpus.current()                         the GPU present (live SM count), or None
    workbook.gpus.describe()                        one sentence: what this machine does with the notebooks
    workbook.gpus.roofline_ms(flops, nbytes, "b200")   the fastest any kernel could be, and why

Datasheet numbers are peaks: no kernel reaches them. `GpuSpec.measured` holds ceilings we did
reach on our own machine, so that a figure can show a realistic line next to the paper one; they
are for orientation only and say where they come from in `measured_source`.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

import torch

# The kernel families of the workbook, by the arch they are compiled for.
FAMILIES = {"sm_90a": "Hopper", "sm_100a": "Blackwell"}
KIB = 1024


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model. Units: KiB, MiB, TB/s (1e12 B/s), TFLOP/s (1e12 FLOP/s)."""
    name: str
    arch: str                  # the `--gpu-arch` the kernels are compiled for, e.g. "sm_100a"
    sm_count: int
    cluster_pairs: int         # 2-CTA clusters resident at once: the "slots" of a persistent 2-CTA kernel
    smem_per_sm_kib: int
    smem_per_block_kib: int    # the most one CTA may opt in to (the SM's capacity minus 1 KiB reserved by CUDA)
    hbm_tbps: float
    bf16_dense_tflops: float
    l2_mib: float
    source: str                # where each number above comes from
    measured: Mapping[str, float] = field(default_factory=dict, compare=False, hash=False)
    measured_source: str = ""
    cluster_quads: int | None = None   # 4-CTA clusters resident at once (one CTA per SM), where the driver was asked

    def __post_init__(self):
        # a read-only view, so that the module-level specs cannot be edited by accident
        object.__setattr__(self, "measured", MappingProxyType(dict(self.measured)))

    @property
    def smem_per_sm_bytes(self) -> int:
        return self.smem_per_sm_kib * KIB

    @property
    def smem_per_block_bytes(self) -> int:
        """The most shared memory one CTA may opt in to."""
        return self.smem_per_block_kib * KIB

    @property
    def smem_reserved_per_block_bytes(self) -> int:
        """What CUDA keeps of an SM's shared memory for each resident CTA (1 KiB on sm_90 and sm_100)."""
        return (self.smem_per_sm_kib - self.smem_per_block_kib) * KIB

    @property
    def family(self) -> str:
        return FAMILIES.get(self.arch, "")

    @property
    def key(self) -> str:
        """The short lowercase name used for folders, e.g. data/measured/h200/."""
        for k, spec in _KNOWN.items():
            if spec.arch == self.arch and k in self.name.lower():
                return k
        return "".join(ch if ch.isalnum() else "_" for ch in self.name.lower()).strip("_")


B200 = GpuSpec(
    name="NVIDIA B200",
    arch="sm_100a",
    sm_count=148,
    cluster_pairs=74,
    smem_per_sm_kib=228,
    smem_per_block_kib=227,
    hbm_tbps=8.0,
    bf16_dense_tflops=2250.0,
    l2_mib=126.5,
    source=(
        "HBM 8 TB/s and 2.25 PFLOP/s dense BF16 (4.5 with 2:4 sparsity, halved): NVIDIA Blackwell architecture "
        "technical brief, resources.nvidia.com/en-us-blackwell-architecture (pp. 19-20), HGX B200 at 1,000 W. "
        "148 SMs, 228 KiB shared memory per SM, L2 126.5 MiB: cudaGetDeviceProperties on a B200 as posted in "
        "github.com/pytorch/ao/pull/4002, which also notes that the driver reports a 7680-bit bus, i.e. "
        "about 7.7 TB/s theoretical. 227 KiB per block: the SM's 228 KiB minus the 1 KiB CUDA reserves "
        "(cutlass.cutlass_dsl SMEM_CAPACITY_MAP['sm_100'] in nvidia-cutlass-dsl 4.8.1). 74 = 148 / 2 "
        "cta_group::2 pairs (the two CTAs of a pair share one MMA). We have no B200: nothing here was measured "
        "by us."
    ),
)

H200 = GpuSpec(
    name="NVIDIA H200",
    arch="sm_90a",
    sm_count=132,
    cluster_pairs=66,
    cluster_quads=30,    # asked of the driver on the lent H200 (cluster occupancy, one CTA per SM): not 132 / 4
    smem_per_sm_kib=228,
    smem_per_block_kib=227,
    hbm_tbps=4.8,
    bf16_dense_tflops=989.0,
    l2_mib=60.0,
    source=(
        "HBM 4.8 TB/s and 1,979 TFLOP/s BF16 with 2:4 sparsity (989 dense): NVIDIA H200 Tensor Core GPU "
        "datasheet, nvidia.com/en-us/data-center/h200 (H200 SXM). 132 SMs and L2 60 MiB: "
        "torch.cuda.get_device_properties on our H200. 228/227 KiB shared memory: CUDA programming guide, "
        "compute capability 9.0 (cutlass.cutlass_dsl SMEM_CAPACITY_MAP['sm_90']). 66 two-CTA clusters: "
        "cutlass.utils.HardwareInfo().get_max_active_clusters(2) on our H200 (4-CTA clusters: 30, "
        "because the SMs of a cluster must share a GPC and GPC sizes differ)."
    ),
    measured={
        "copy_tbps": 4.11,
        "max_active_clusters_4cta": 30,
    },
    measured_source=(
        "measured on our H200 (driver 580.159.04, torch 2.11.0+cu130) on 2026-11-30 with workbook.timing.bench "
        "(3 rotating random input sets, 10 warm-up calls, median of 30): a 1 GiB device-to-device copy, "
        "counting bytes read + written. An earlier run on the same kind of machine gave about 4.3 TB/s: expect "
        "a few percent between runs. 4-CTA clusters: cutlass.utils.HardwareInfo().get_max_active_clusters(4). "
        "Orientation only, not datasheet numbers."
    ),
)

_KNOWN = {"b200": B200, "h200": H200}

# An SM's register file, as ptxas sizes a kernel for sm_90 and sm_100: four sub-partitions (one per warp scheduler)
# of 16384 32-bit registers each, the warps of the resident CTAs dealt to them in turn, a warp's registers taken in
# steps of 256 (8 per thread), at most 255 per thread.
SUBPARTITIONS = 4
REGISTERS_PER_SUBPARTITION = 16384
MAX_WARPS_PER_SM = 64


def register_cap(threads_per_cta: int, ctas_per_sm: int) -> int:
    """The most registers per thread that let `ctas_per_sm` CTAs of `threads_per_cta` share an SM, which ptxas holds
    a kernel to under `min_blocks_per_mp`: the sub-partition dealt the most warps must hold them all. Two CTAs of 288
    threads (18 warps, 5 on some sub-partition) get 96, not the 112 that 65536 / (2 x 288) suggests; of 256, 128
    (ptxas 13.0 compiled a kernel that needs 106 in 106 registers at 256 threads, spilled it at 288 and refused it
    at 384 with "insufficient registers (80)")."""
    warps = ctas_per_sm * -(-threads_per_cta // 32)
    per_subpartition = -(-warps // SUBPARTITIONS)
    return min(255, REGISTERS_PER_SUBPARTITION // (32 * per_subpartition) // 8 * 8)


def ctas_by_registers(registers: int, threads_per_cta: int) -> int:
    """How many CTAs of `threads_per_cta` using `registers` per thread the register file lets share an SM (at most
    the SM's 64 resident warps)."""
    if registers < 1:
        raise ValueError(f"registers must be >= 1, got {registers}")
    warps, ctas = -(-threads_per_cta // 32), 0
    while (ctas + 1) * warps <= MAX_WARPS_PER_SM and register_cap(threads_per_cta, ctas + 1) >= registers:
        ctas += 1
    return ctas


def get(gpu: str | GpuSpec) -> GpuSpec:
    """A spec by short name ("b200", "h200"), full name ("NVIDIA H200"), or the spec itself."""
    if isinstance(gpu, GpuSpec):
        return gpu
    if isinstance(gpu, str):
        wanted = gpu.strip().lower()
        for key, spec in _KNOWN.items():
            if wanted in (key, spec.name.lower()):
                return spec
    raise ValueError(f"unknown GPU {gpu!r}; known: {sorted(_KNOWN)} (or pass a GpuSpec)")


def for_arch(arch: str) -> GpuSpec:
    """The spec of the GPU whose machine code `arch` is: H200 for "sm_90a", B200 for "sm_100a"."""
    for spec in _KNOWN.values():
        if spec.arch == arch:
            return spec
    raise ValueError(f"no GPU spec for arch {arch!r}; known: {sorted(s.arch for s in _KNOWN.values())}")


def arch_of_capability(major: int, minor: int) -> str:
    """The arch a compute capability runs: "sm_90a" for 9.0, "sm_100a" for 10.0 (the "a" suffix, arch-specific
    features such as wgmma and tcgen05, is what the kernels are built for), "sm_<major><minor>" otherwise."""
    return {(9, 0): "sm_90a", (10, 0): "sm_100a"}.get((major, minor), f"sm_{major}{minor}")


def spec_from_properties(props) -> GpuSpec:
    """The spec of a live device from its `torch.cuda.get_device_properties`: a known model with the live
    SM count, or a generic spec whose paper peaks are whatever the properties can tell."""
    arch = arch_of_capability(props.major, props.minor)
    sm_count = int(props.multi_processor_count)
    for key, spec in _KNOWN.items():
        if spec.arch == arch and key in props.name.lower():
            if sm_count == spec.sm_count:
                return dataclasses.replace(spec, name=props.name)
            # fewer SMs than the full part (MIG slice, a different SKU): the resident-cluster count
            # we measured no longer applies; half the SMs is the upper bound for 2-CTA clusters
            return dataclasses.replace(
                spec, name=props.name, sm_count=sm_count, cluster_pairs=sm_count // 2,
                source=spec.source + f" Live device has {sm_count} SMs, not {spec.sm_count}: "
                                     f"cluster_pairs = {sm_count // 2} is an upper bound.")
    smem_sm = int(getattr(props, "shared_memory_per_multiprocessor", 0)) // 1024
    clock_khz = int(getattr(props, "memory_clock_rate", 0) or 0)
    bus_bits = int(getattr(props, "memory_bus_width", 0) or 0)
    # double data rate: two transfers per memory clock
    hbm = 2 * clock_khz * 1e3 * bus_bits / 8 / 1e12 if clock_khz and bus_bits else math.nan
    return GpuSpec(
        name=props.name, arch=arch, sm_count=sm_count, cluster_pairs=sm_count // 2,
        smem_per_sm_kib=smem_sm, smem_per_block_kib=max(smem_sm - 1, 0), hbm_tbps=hbm,
        bf16_dense_tflops=math.nan, l2_mib=int(getattr(props, "L2_cache_size", 0)) / 2**20,
        source=("torch.cuda.get_device_properties of the live device; HBM bandwidth = 2 x memory clock x bus "
                "width (theoretical); bf16 peak unknown (nan); cluster_pairs = SMs / 2 is an upper bound."),
    )


def current(device: int | None = None) -> GpuSpec | None:
    """The spec of the CUDA GPU present (live SM count), or None on a machine without one."""
    if not torch.cuda.is_available():
        return None
    return spec_from_properties(torch.cuda.get_device_properties(device))


def describe(spec: GpuSpec | None | str = "current") -> str:
    """One sentence saying what this machine does with the notebooks."""
    if spec == "current":
        spec = current()
    if spec is None:
        return ("No GPU: kernels are compiled for sm_90a and sm_100a, numerics run through the torch reference, "
                "timings come from data/measured/")
    spec = get(spec)
    head = f"{spec.name}, {spec.sm_count} SMs, {spec.arch}"
    if spec.family:
        return f"{head}: {spec.family} kernels run live"
    return (f"{head}: no kernels are built for this arch (only sm_90a and sm_100a); numerics run through the "
            f"torch reference, timings come from data/measured/")


@dataclass(frozen=True)
class Roofline:
    """Lower bound on a kernel's time: it must at least do its math and at least move its bytes."""
    ms: float          # max(compute_ms, memory_ms)
    bound: str         # "compute" or "memory": the term that sets `ms`
    compute_ms: float  # flops at the bf16 dense peak
    memory_ms: float   # bytes at the HBM peak

    def __str__(self) -> str:
        return (f"{self.ms * 1e3:.1f} us, {self.bound}-bound (math {self.compute_ms * 1e3:.1f} us, "
                f"memory {self.memory_ms * 1e3:.1f} us)")


def roofline_ms(flops: float, nbytes: float, gpu: str | GpuSpec) -> Roofline:
    """The fastest a kernel doing `flops` bf16 tensor-core operations and moving `nbytes` bytes through
    HBM can run on `gpu`, at the datasheet peaks (a real kernel gets a fraction of each)."""
    spec = get(gpu)
    for name, value in (("flops", flops), ("nbytes", nbytes)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if not (spec.bf16_dense_tflops > 0 and spec.hbm_tbps > 0):
        raise ValueError(f"{spec.name} has no known bf16 peak or HBM bandwidth (see its source); "
                         f"use workbook.gpus.B200 or H200 for a roofline")
    compute_ms = flops / (spec.bf16_dense_tflops * 1e12) * 1e3
    memory_ms = nbytes / (spec.hbm_tbps * 1e12) * 1e3
    bound = "compute" if compute_ms >= memory_ms else "memory"
    return Roofline(ms=max(compute_ms, memory_ms), bound=bound, compute_ms=compute_ms, memory_ms=memory_ms)

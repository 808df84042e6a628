"""workbook.gpus: the two specs, lookup, live detection (with fake device properties), the roofline."""
from __future__ import annotations

import dataclasses
import math
import random
from types import SimpleNamespace

import pytest
import torch

from workbook import gpus

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture
def rng():
    return random.Random()


def props(name, major, minor, sms, *, smem_kib=228, l2_mib=50, mem_khz=2_619_000, bus_bits=5120):
    return SimpleNamespace(name=name, major=major, minor=minor, multi_processor_count=sms,
                           shared_memory_per_multiprocessor=smem_kib * 1024, L2_cache_size=int(l2_mib * 2**20),
                           memory_clock_rate=mem_khz, memory_bus_width=bus_bits)


def test_b200_numbers():
    b = gpus.B200
    assert (b.arch, b.sm_count, b.cluster_pairs) == ("sm_100a", 148, 74)
    assert (b.smem_per_sm_kib, b.smem_per_block_kib) == (228, 227)
    assert (b.hbm_tbps, b.bf16_dense_tflops, b.l2_mib) == (8.0, 2250.0, 126.5)
    assert b.family == "Blackwell" and b.key == "b200" and not b.measured


def test_h200_numbers():
    h = gpus.H200
    assert (h.arch, h.sm_count, h.cluster_pairs) == ("sm_90a", 132, 66)
    assert (h.smem_per_sm_kib, h.smem_per_block_kib) == (228, 227)
    assert (h.hbm_tbps, h.bf16_dense_tflops, h.l2_mib) == (4.8, 989.0, 60.0)
    assert h.family == "Hopper" and h.key == "h200"
    assert h.measured["copy_tbps"] < h.hbm_tbps
    assert "our H200" in h.measured_source


@pytest.mark.parametrize("spec", [gpus.B200, gpus.H200], ids=lambda s: s.key)
def test_every_number_is_sourced(spec):
    """The source text names each paper number it vouches for (guards against a number edited without its source)."""
    for value in (spec.sm_count, spec.smem_per_sm_kib, spec.smem_per_block_kib, spec.l2_mib, spec.cluster_pairs):
        assert f"{value:g}" in spec.source, value
    assert f"{spec.hbm_tbps:g} TB/s" in spec.source
    assert spec.cluster_pairs <= spec.sm_count // 2


def test_specs_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        gpus.B200.sm_count = 1
    with pytest.raises(TypeError):
        gpus.H200.measured["copy_tbps"] = 9.9


@pytest.mark.parametrize("name, spec", [("b200", gpus.B200), ("B200", gpus.B200), (" NVIDIA B200 ", gpus.B200),
                                        ("h200", gpus.H200), ("nvidia h200", gpus.H200)])
def test_get_by_name(name, spec):
    assert gpus.get(name) is spec


def test_get_passes_a_spec_through():
    custom = dataclasses.replace(gpus.H200, sm_count=114, name="cut-down")
    assert gpus.get(custom) is custom


@pytest.mark.parametrize("bad", ["a100", "", "sm_90a", None, 90])
def test_get_rejects_unknown(bad):
    with pytest.raises(ValueError, match="unknown GPU"):
        gpus.get(bad)


def test_known_model_from_properties_keeps_paper_numbers():
    spec = gpus.spec_from_properties(props("NVIDIA H200", 9, 0, 132))
    assert spec == dataclasses.replace(gpus.H200, name="NVIDIA H200")
    spec = gpus.spec_from_properties(props("NVIDIA B200", 10, 0, 148))
    assert spec.arch == "sm_100a" and spec.sm_count == 148 and spec.cluster_pairs == 74


def test_known_model_with_fewer_sms_uses_the_live_count(rng):
    sms = rng.randrange(16, 132)
    spec = gpus.spec_from_properties(props("NVIDIA H200 NVL", 9, 0, sms))
    assert spec.sm_count == sms and spec.cluster_pairs == sms // 2
    assert spec.hbm_tbps == gpus.H200.hbm_tbps and "upper bound" in spec.source


def test_unknown_gpu_gets_a_generic_spec(rng):
    sms = rng.randrange(20, 200)
    spec = gpus.spec_from_properties(props("NVIDIA A100-SXM4-80GB", 8, 0, sms, smem_kib=164, l2_mib=40,
                                           mem_khz=1_593_000, bus_bits=5120))
    assert (spec.arch, spec.sm_count, spec.cluster_pairs) == ("sm_80", sms, sms // 2)
    assert (spec.smem_per_sm_kib, spec.smem_per_block_kib, spec.l2_mib) == (164, 163, 40)
    assert spec.hbm_tbps == pytest.approx(2 * 1_593_000e3 * 5120 / 8 / 1e12)   # 2.04 TB/s, the A100 80GB figure
    assert math.isnan(spec.bf16_dense_tflops) and spec.family == ""
    assert gpus.describe(spec).startswith(f"NVIDIA A100-SXM4-80GB, {sms} SMs, sm_80: no kernels")
    with pytest.raises(ValueError, match="no known bf16 peak"):
        gpus.roofline_ms(1e9, 1e9, spec)


def test_h100_is_hopper_but_not_an_h200():
    spec = gpus.spec_from_properties(props("NVIDIA H100 80GB HBM3", 9, 0, 132))
    assert spec.arch == "sm_90a" and spec.family == "Hopper" and math.isnan(spec.bf16_dense_tflops)
    assert gpus.describe(spec) == "NVIDIA H100 80GB HBM3, 132 SMs, sm_90a: Hopper kernels run live"


def test_describe_known_specs():
    assert gpus.describe(gpus.H200) == "NVIDIA H200, 132 SMs, sm_90a: Hopper kernels run live"
    assert gpus.describe("b200") == "NVIDIA B200, 148 SMs, sm_100a: Blackwell kernels run live"
    assert gpus.describe(None).startswith("No GPU: kernels are compiled for sm_90a and sm_100a")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_no_gpu_here():
    assert gpus.current() is None
    assert gpus.describe() == ("No GPU: kernels are compiled for sm_90a and sm_100a, numerics run through the "
                               "torch reference, timings come from data/measured/")


@pytest.mark.gpu
@requires_cuda
def test_current_gpu_is_live():
    spec = gpus.current()
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    assert spec.sm_count == p.multi_processor_count and spec.name == p.name
    assert gpus.describe().startswith(f"{p.name}, {p.multi_processor_count} SMs, ")


def test_roofline_picks_the_larger_term(rng):
    for _ in range(50):
        spec = rng.choice([gpus.B200, gpus.H200])
        flops, nbytes = rng.uniform(0, 1e13), rng.uniform(0, 1e10)
        r = gpus.roofline_ms(flops, nbytes, spec.key)
        assert r.compute_ms == pytest.approx(flops / spec.bf16_dense_tflops / 1e9)
        assert r.memory_ms == pytest.approx(nbytes / spec.hbm_tbps / 1e9)
        assert r.ms == max(r.compute_ms, r.memory_ms)
        assert r.bound == ("compute" if r.compute_ms >= r.memory_ms else "memory")


def test_roofline_gemm_is_compute_bound_copy_is_memory_bound():
    n = 4096
    gemm = gpus.roofline_ms(2 * n**3, 3 * n * n * 2, gpus.B200)      # bf16 A, B, C once each
    assert gemm.bound == "compute" and gemm.ms == pytest.approx(2 * n**3 / 2250e12 * 1e3)
    copy = gpus.roofline_ms(0, 2 * 2**30, "h200")                   # read + write 1 GiB
    assert copy.bound == "memory" and copy.ms == pytest.approx(2 * 2**30 / 4.8e12 * 1e3)
    assert "memory-bound" in str(copy)


@pytest.mark.parametrize("flops, nbytes", [(-1, 0), (0, float("nan")), (float("inf"), 1), (True, 1), ("1", 1)])
def test_roofline_rejects_bad_counts(flops, nbytes):
    with pytest.raises(ValueError):
        gpus.roofline_ms(flops, nbytes, gpus.H200)


def test_for_arch_and_shared_memory_in_bytes():
    assert gpus.for_arch("sm_90a") is gpus.H200 and gpus.for_arch("sm_100a") is gpus.B200
    with pytest.raises(ValueError, match="sm_120a"):
        gpus.for_arch("sm_120a")
    for spec in (gpus.H200, gpus.B200):
        assert spec.smem_per_sm_bytes == 228 * 1024 and spec.smem_per_block_bytes == 227 * 1024
        assert spec.smem_reserved_per_block_bytes == 1024
    assert [gpus.arch_of_capability(*cc) for cc in ((9, 0), (10, 0), (12, 0), (8, 6))] == [
        "sm_90a", "sm_100a", "sm_120", "sm_86"]

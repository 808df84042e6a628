"""Shared-memory stage arithmetic: the seed's B200 tile, our Hopper tiles, and the budget identity."""
from __future__ import annotations

import os
import random

import pytest

from gemm_kernels.stages import KIB, RESERVED_BYTES, cta_group_for, stages
from workbook import gpus

CAPACITY = 227 * KIB  # both sm_90a and sm_100a let one CTA opt in to 227 KiB


def test_capacity_comes_from_the_gpu_specs():
    assert stages((128, 128, 64), "register", "sm_90a").capacity == gpus.H200.smem_per_block_kib * KIB == CAPACITY
    assert stages((256, 256, 64), "register", "sm_100a").capacity == gpus.B200.smem_per_block_kib * KIB


def test_seed_b200_pair_tile_is_32_kib_a_stage_per_cta():
    """Seed 004's M256 x N256 pair tile, tile_k 64: each CTA holds 128 x 64 of A and 64 x 128 of B."""
    b = stages((256, 256, 64), "register", "sm_100a")
    assert b.cta_group == 2
    assert (b.a_bytes, b.b_bytes, b.stage_bytes) == (16 * KIB, 16 * KIB, 32 * KIB)
    assert "A rows r*128" in b.per_cta and "B columns r*128" in b.per_cta


def test_seed_b200_register_epilogue_gives_7_stages():
    """Seed: "7 x 32 KiB contiguous A/B ring (224 KiB)" once SMEM_OUT is gone."""
    b = stages((256, 256, 64), "register", "sm_100a")
    assert (b.stages, b.epilogue_bytes, b.stages * b.stage_bytes) == (7, 0, 224 * KIB)


def test_seed_b200_staged_epilogue():
    """Seed, before: 4 x 32 KiB stages + a 64 KiB SMEM_OUT. The buffer is the CTA's 128 x 256 bf16 half of
    the accumulator; with it, 5 stages would fit, and the seed's 4 leave 34 KiB unused."""
    most = stages((256, 256, 64), "staged", "sm_100a")
    assert most.epilogue_bytes == 64 * KIB and most.stages == 5
    seed = stages((256, 256, 64), "staged", "sm_100a", depth=4)
    assert seed.stages * seed.stage_bytes + seed.epilogue_bytes == 192 * KIB and seed.leftover == 34 * KIB
    with pytest.raises(ValueError, match="6 stages do not fit"):
        stages((256, 256, 64), "staged", "sm_100a", depth=6)


@pytest.mark.parametrize("tile, stage_kib, staged, register", [
    ((128, 256, 64), 48, 3, 4),
    ((128, 128, 64), 32, 6, 7),
    ((256, 128, 64), 48, 3, 4),
])
def test_hopper_tiles(tile, stage_kib, staged, register):
    m, n, k = tile
    s = stages(tile, "staged", "sm_90a")
    r = stages(tile, "register", "sm_90a")
    assert s.cta_group == r.cta_group == 1 and s.stage_bytes == stage_kib * KIB == (m + n) * k * 2
    assert s.epilogue_bytes == m * n * 2  # one buffer of the whole bf16 tile
    assert (s.stages, r.stages) == (staged, register)
    assert s.stages == (CAPACITY - RESERVED_BYTES - m * n * 2) // (stage_kib * KIB)


def test_a_subtile_epilogue_buffer_costs_less():
    """Two 128 x 32 bf16 buffers (16 KiB) instead of the whole 128 x 256 tile (64 KiB): 4 stages, not 3."""
    b = stages((128, 256, 64), "staged", "sm_90a", epilogue_tile=(128, 32), epilogue_buffers=2)
    assert (b.epilogue_bytes, b.stages) == (16 * KIB, 4)


@pytest.mark.parametrize("trial", range(20))
def test_every_byte_is_accounted_for(trial):
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    arch = rng.choice(["sm_90a", "sm_100a"])
    group = rng.choice([1, 2]) if arch == "sm_100a" else 1
    tile = (rng.choice([64, 128]) * group, rng.choice(range(16, 257, 16)), rng.choice([32, 64, 128]))
    epilogue = rng.choice(["staged", "register"])
    in_bytes, out_bytes = rng.choice([1, 2]), rng.choice([2, 4])
    try:
        b = stages(tile, epilogue, arch, cta_group=group, in_bytes=in_bytes, out_bytes=out_bytes, min_stages=0)
    except ValueError as err:  # only when even the epilogue does not fit
        assert "alone exceed" in str(err), f"seed {seed}"
        return
    m, n, k = tile
    assert b.stage_bytes == (m + n) // group * k * in_bytes, f"seed {seed}"
    assert b.stages * b.stage_bytes + b.epilogue_bytes + b.reserved_bytes + b.leftover == b.capacity, f"seed {seed}"
    assert 0 <= b.leftover < b.stage_bytes, f"seed {seed}: one more stage would have fit"


def test_cta_group_rule():
    assert cta_group_for("sm_100a", 256) == 2 and cta_group_for("sm_100a", 128) == 1
    assert cta_group_for("sm_90a", 256) == 1


@pytest.mark.parametrize("args, kwargs, match", [
    (((128, 128, 64), "smem", "sm_90a"), {}, "epilogue must be"),
    (((128, 128, 64), "staged", "sm_80"), {}, "arch must be"),
    (((128, 128), "staged", "sm_90a"), {}, "tile must be"),
    (((128, 0, 64), "staged", "sm_90a"), {}, "tile_n"),
    (((256, 128, 64), "staged", "sm_90a"), dict(cta_group=2), "no 2-CTA MMA"),
    (((256, 256, 64), "staged", "sm_100a"), dict(cta_group=1), "at most 128 rows"),
    (((256, 200, 64), "staged", "sm_100a"), dict(cta_group=2, epilogue_tile=(64, 512)), "larger than"),
    (((128, 128, 64), "register", "sm_90a"), dict(epilogue_tile=(64, 64)), "no shared-memory buffer"),
    (((256, 256, 128), "register", "sm_90a"), {}, "fewer than min_stages"),
    (((256, 256, 64), "staged", "sm_90a"), dict(out_bytes=4), "alone exceed"),
    (((128, 128, 64), "staged", "sm_90a"), dict(depth=0), "depth"),
])
def test_bad_input_is_a_clear_error(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        stages(*args, **kwargs)

"""The wave-tail planner: the seed's three B200 plans, and properties of every plan on random problems."""
from __future__ import annotations

import math
import os
import random

import numpy as np
import pytest
import torch

from gemm_kernels import waves
from workbook import gpus

SEED_WIDTHS = (256, 224, 192)  # the tile widths seed 004 uses on B200


@pytest.fixture
def rng():
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"random seed {seed}")  # shown by pytest when the test fails
    return random.Random(seed)


@pytest.fixture(autouse=True)
def _paper_specs(monkeypatch, request):
    """Plans come from the spec sheets, not from whatever GPU the tests happen to run on."""
    if "gpu" not in request.keywords:
        monkeypatch.setattr(gpus, "current", lambda device=None: None)


# --- seed 004: B200, 74 CTA pairs, M256 x N256 pair tiles ------------------------------------------------

@pytest.mark.parametrize("size, tiles, waves_, idle, items, narrow, groups", [
    (4096, 256, 3.46, 40, 296, 192, 40),     # "replaces last 40 3x256 triplets with 4x192"
    (8192, 1024, 13.84, 12, 1036, 224, 12),  # "last 12 7x256 heptets with 8x224"
    (16384, 4096, 55.35, 48, 4144, 224, 48),  # "last 48 7x256 heptets with 8x224"
])
def test_seed_b200_plans(size, tiles, waves_, idle, items, narrow, groups):
    uniform = waves.plan(size, size, gpu="b200", tile_m=256, tile_ns=SEED_WIDTHS, balanced=False)
    assert uniform.slots == 74
    assert len(uniform.items) == tiles and round(uniform.waves, 2) == waves_
    assert round((1 - uniform.last_wave_fill) * 74) == idle  # "N of 74 CTA pairs sit idle"
    assert uniform.makespan == uniform.full_waves

    balanced = waves.plan(size, size, gpu="b200", tile_m=256, tile_ns=SEED_WIDTHS)
    assert len(balanced.items) == items and items % 74 == 0 and balanced.last_wave_fill == 1.0
    assert (balanced.narrow, balanced.groups) == (narrow, groups)
    g = narrow // (256 - narrow)
    assert balanced.width_counts == {256: tiles - g * groups, narrow: (g + 1) * groups}
    assert balanced.makespan < uniform.makespan


def test_seed_4096_tail_waves_run_three_quarter_tiles():
    """Seed: "cuts waves 3 & 4 from 1.0 + 1.0 to 0.75 + 0.75"."""
    p = waves.plan(4096, 4096, gpu="b200", tile_m=256, tile_ns=SEED_WIDTHS)
    durations = [[r.end - r.start for r in runs] for runs in p.timeline]
    assert all(len(d) == 4 and d[2:] == [0.75, 0.75] for d in durations)
    assert durations[0] == [1.0, 1.0, 0.75, 0.75] and p.makespan == 3.5


def test_seed_groups_are_whole_triplets():
    """Every 4 x N192 run covers exactly the 768 columns of three N256 tiles."""
    p = waves.plan(4096, 4096, gpu="b200", tile_m=256, tile_ns=SEED_WIDTHS)
    narrow = sorted((t.m0, t.n0) for t in p.items if t.width == 192)
    for i in range(0, len(narrow), 4):
        (m0, n0), last = narrow[i], narrow[i + 3]
        assert n0 % 768 == 0 and last == (m0, n0 + 3 * 192)


def test_width_without_enough_groups_is_not_used():
    # 4096 needs 40 replacements; 7-wide groups fit only twice in a 16-tile row, 32 in all: keep uniform
    p = waves.plan(4096, 4096, gpu="b200", tile_m=256, tile_ns=(256, 224))
    assert p.narrow is None and len(p.items) == 256 and p.makespan == 4.0


def test_the_narrow_width_is_chosen_by_simulation():
    """8192^3: 12 re-cuts. N192 makes 48 narrow tiles, fewer than 74 slots, so one slot still runs 14 wide
    tiles; N224 makes 96, every slot gets one 0.875 tile. At 4096^3 N224 has too few whole groups."""
    options = waves.alternatives(8192, 8192, gpu="b200", tile_m=256, tile_ns=SEED_WIDTHS)
    assert list(options) == [None, 224, 192]
    assert [options[w].makespan for w in options] == [14.0, 13.875, 14.0]
    assert options[192].width_counts == {256: 1024 - 36, 192: 48}
    assert waves.alternatives(4096, 4096, gpu="b200", tile_m=256, tile_ns=SEED_WIDTHS)[224] is None
    # the order of the narrow widths does not matter, only which is widest
    assert waves.plan(8192, 8192, gpu="b200", tile_m=256, tile_ns=(256, 192, 224)).narrow == 224


def test_uniform_wins_when_no_recut_helps():
    # H200, 128 x 256 tiles, 4096^2: 512 tiles, 3.88 waves; 16 re-cuts give too few narrow tiles
    options = waves.alternatives(4096, 4096, gpu="h200", tile_m=128, tile_ns=(256, 224, 192, 128))
    assert all(p.makespan == 4.0 for p in options.values())
    assert waves.plan(4096, 4096, gpu="h200", tile_m=128, tile_ns=(256, 224, 192, 128)).narrow is None


def test_narrow_widths():
    assert waves.narrow_widths(256, multiple_of=32) == (224, 192, 128)
    for wide in (96, 128, 256):
        got = waves.narrow_widths(wide)
        assert list(got) == sorted(got, reverse=True)
        assert all(w * (g + 1) == g * wide for w in got for g in [w // (wide - w)])
        assert set(got) >= set(_valid_narrow(wide))


def test_gantt_draws():
    import matplotlib.pyplot as plt

    from workbook import plots
    p = waves.plan(4096, 4096, gpu="b200", tile_m=256, tile_ns=SEED_WIDTHS)
    chart = p.gantt()
    assert len(chart) == 74 and chart[0] == [(0.0, 1.0, "M256 x N256"), (1.0, 1.0, "M256 x N256"),
                                              (2.0, 0.75, "M256 x N192"), (2.75, 0.75, "M256 x N192")]
    fig = plots.wave_occupancy(chart, slot_label="CTA pair")
    # waves count items per slot (296 / 74 = 4.00); the makespan is when the last pair finishes
    assert "296 work items on 74 CTA pairs = 4.00 waves, makespan 3.50" in fig.axes[0].get_title()
    plt.close(fig)


def test_full_last_wave_stays_uniform():
    p = waves.plan(256 * 74, 256, gpu="b200", tile_m=256, tile_ns=SEED_WIDTHS)  # exactly one wave
    assert p.narrow is None and p.waves == 1.0 and p.last_wave_fill == 1.0 and p.makespan == 1.0


# --- properties of any plan --------------------------------------------------------------------------------

def _valid_narrow(wide: int) -> list[int]:
    return [wide * g // (g + 1) for g in range(1, 16) if wide * g % (g + 1) == 0]


def _makespan(widths: list[int], wide: int, slots: int, schedule: str) -> float:
    """An independent simulation: static sums every slots-th item; dynamic hands each item to the
    earliest-free slot (lowest index on ties) by a linear scan."""
    if schedule == "static":
        return max(sum(widths[s::slots]) for s in range(slots)) / wide
    free = [0] * slots
    for w in widths:
        s = min(range(slots), key=lambda i: (free[i], i))
        free[s] += w
    return max(free) / wide


def _random_problem(rng):
    wide = rng.choice([128, 256])
    allowed = _valid_narrow(wide)
    tile_ns = (wide, *sorted(rng.sample(allowed, rng.randint(0, 3)), reverse=True))
    return dict(M=rng.randint(1, 3000), N=rng.randint(1, 3000), tile_m=rng.choice([64, 128, 256]),
                tile_ns=tile_ns, slots=rng.randint(1, 150), schedule=rng.choice(waves.SCHEDULES))


@pytest.mark.parametrize("trial", range(25))
def test_random_plans_tile_the_output_exactly_once(rng, trial):
    prob = _random_problem(rng)
    M, N, tile_m, tile_ns = prob["M"], prob["N"], prob["tile_m"], prob["tile_ns"]
    kw = dict(gpu="h200", tile_m=tile_m, tile_ns=tile_ns, slots=prob["slots"], schedule=prob["schedule"])
    uniform = waves.plan(M, N, balanced=False, **kw)
    balanced = waves.plan(M, N, balanced=True, **kw)
    wide = tile_ns[0]
    rows, cols = math.ceil(M / tile_m), math.ceil(N / wide)
    assert len(uniform.items) == rows * cols and uniform.narrow is None

    for p in (uniform, balanced):
        painted = np.zeros((M, N), dtype=np.int16)
        for t in p.items:
            assert t.width in tile_ns and t.m0 % tile_m == 0 and 0 <= t.m0 < M and 0 <= t.n0 < N
            painted[t.m0:t.m0 + tile_m, t.n0:t.n0 + t.width] += 1
        assert painted.min() == 1 and painted.max() == 1, f"{prob}: a cell is missed or covered twice"

        # the timeline runs every item once, back to back, each for width / wide
        seen = sorted(r.item for runs in p.timeline for r in runs)
        assert seen == list(range(len(p.items))) and len(p.timeline) == p.slots
        for runs in p.timeline:
            ends = [0.0] + [r.end for r in runs]
            for r, prev_end in zip(runs, ends):
                assert r.start == prev_end and r.end - r.start == pytest.approx(p.items[r.item].width / wide)
        assert p.makespan == pytest.approx(_makespan([t.width for t in p.items], wide, p.slots, p.schedule))
        assert p.makespan == max(runs[-1].end for runs in p.timeline if runs)
        assert p.ideal <= p.makespan + 1e-12

    if balanced.narrow is None:
        assert balanced.items == uniform.items
    else:
        g = balanced.narrow // (wide - balanced.narrow)
        assert len(balanced.items) == len(uniform.items) + balanced.groups
        assert len(balanced.items) % balanced.slots == 0
        assert balanced.width_counts[balanced.narrow] == (g + 1) * balanced.groups
        first_narrow = next(i for i, t in enumerate(balanced.items) if t.width != wide)
        assert all(t.width != wide for t in balanced.items[first_narrow:]), "narrow tiles run last"
        assert balanced.makespan < uniform.makespan
    assert balanced.makespan <= uniform.makespan


def test_balancing_never_loses_on_h200_sweep():
    table = waves.sweep("h200", tile_m=128, tile_ns=(256, 224, 192, 128))
    assert (table.gain >= 0).all()
    # nothing beats spreading the work perfectly
    assert (table.makespan_balanced >= table.ideal - 1e-3).all()
    assert (table.gain[table.last_wave_fill == 1.0] == 0).all()


def test_h200_3072_cubed_by_hand():
    """128 x 256 tiles on 132 SMs: 24 x 12 = 288 tiles, 2.18 waves. 108 tiles split in two halves make 396 =
    3 x 132 items; 180 wide tiles put at most 2 on a slot, so the longest slot runs 1 + 1 + 0.5 = 2.5."""
    p = waves.plan(3072, 3072, gpu="h200", tile_m=128, tile_ns=(256, 224, 192, 128))
    assert (p.slots, p.narrow, p.groups, len(p.items), p.makespan) == (132, 128, 108, 396, 2.5)
    row = waves.candidates("h200", tile_m=128, tile_ns=(256, 224, 192, 128), shapes=[(3072, 3072, 3072)])
    assert len(row) == 1 and row.gain[0] == pytest.approx(3.0 / 2.5 - 1)


def test_candidates_are_the_sweep_rows_that_pay():
    kw = dict(tile_m=128, tile_ns=(256, 224, 192, 128), shapes=waves.SQUARE_SHAPES)
    table, picked = waves.sweep("h200", **kw), waves.candidates("h200", min_gain=0.05, **kw)
    kw.pop("shapes")
    assert len(picked) == (table.gain >= 0.05).sum() > 0
    assert list(picked.gain) == sorted(picked.gain, reverse=True)
    for _, row in picked.iterrows():  # every row says what plan() says
        p = waves.plan(row.M, row.N, gpu="h200", **kw)
        assert (len(p.items), p.makespan) == (row["items"], row.makespan_balanced)


# --- slots ---------------------------------------------------------------------------------------------------

def test_default_slots_from_the_spec():
    assert waves.slots_for("b200", 2) == 74 and waves.slots_for("b200", 1) == 148
    assert waves.slots_for("h200", 1) == 132 and waves.slots_for("h200", 2) == 66
    # a B200 tile taller than 128 rows is a CTA pair; a Hopper one is one CTA unless told
    assert waves.plan(4096, 4096, gpu="b200", tile_m=128, tile_ns=(256,)).slots == 148
    assert waves.plan(4096, 4096, gpu="h200", tile_m=256, tile_ns=(256,)).slots == 132
    assert waves.plan(4096, 4096, gpu="h200", tile_m=256, tile_ns=(256,), ctas_per_item=2).slots == 66
    assert waves.plan(4096, 4096, gpu=gpus.H200, tile_m=256, tile_ns=(256,), slots=60).slots == 60
    assert waves.slots_for("h200", 4) == gpus.H200.cluster_quads          # asked of the H200's driver once
    with pytest.raises(ValueError, match="slots="):
        waves.slots_for("b200", 4)
    with pytest.raises(ValueError, match="slots="):
        waves.slots_for("h200", 3)


def test_a_driver_that_cannot_say_is_asked_once_and_the_spec_answers(monkeypatch):
    """On the GPU itself with no CUDA context yet (a rule fit right after a sweep), the driver's refusal falls back
    to the spec's counts, 4-CTA clusters included, with one warning per cluster size, not one per plan."""
    import warnings

    import cutlass.utils
    asked = []

    class Refusing:
        def __init__(self, device):
            asked.append(device)
            raise RuntimeError("CUDA_ERROR_INVALID_CONTEXT")

    monkeypatch.setattr(cutlass.utils, "HardwareInfo", Refusing)
    monkeypatch.setattr(gpus, "current", lambda: gpus.H200)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 99)     # a device no other test has asked about
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    waves._asked.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="4-CTA clusters fit .* using 30"):
            assert waves.slots_for("h200", 4) == gpus.H200.cluster_quads
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert [waves.slots_for("h200", 4) for _ in range(3)] == [30] * 3
        assert asked == [99]
    finally:
        waves._asked.cache_clear()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_live_slots_come_from_the_driver():
    here = gpus.current()
    from cutlass.utils import HardwareInfo
    assert waves.slots_for(here, 1) == HardwareInfo().get_max_active_clusters(1) <= here.sm_count
    assert waves.slots_for(here, 2) == HardwareInfo().get_max_active_clusters(2) <= here.sm_count // 2


# --- bad input -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, match", [
    (dict(M=0), "M must be"), (dict(N=-5), "N must be"), (dict(M=2.5), "M must be"), (dict(M=True), "M must be"),
    (dict(tile_m=0), "tile_m"), (dict(tile_ns=()), "at least one"), (dict(tile_ns=(192, 256)), "widest first"),
    (dict(tile_ns=(256, 256)), "distinct"), (dict(tile_ns=(256, 160)), "not g \\* 256"),
    (dict(slots=0), "slots"), (dict(schedule="greedy"), "schedule"), (dict(gpu="a100"), "unknown GPU"),
])
def test_bad_input_is_a_clear_error(kwargs, match):
    args = dict(M=4096, N=4096, gpu="b200", tile_m=256, tile_ns=SEED_WIDTHS) | kwargs
    M, N = args.pop("M"), args.pop("N")
    with pytest.raises(ValueError, match=match):
        waves.plan(M, N, **args)


# ------------------------------------------------------------------------------------------- stream-K

@pytest.mark.parametrize("items,slots,k_blocks", [(256, 66, 64), (256, 66, 4), (20, 66, 9), (280, 66, 4),
                                                  (1, 66, 1), (160, 132, 16), (67, 66, 64), (131, 66, 3),
                                                  (140, 132, 47), (133, 132, 2), (144, 132, 192)])
def test_stream_k_splits_the_last_two_waves_exactly_and_evenly(items, slots, k_blocks):
    full, units = waves.stream_k(items, slots, k_blocks)
    tail = items % slots
    joins = items >= tail + slots and tail * k_blocks < waves.SHORT_UNIT * slots   # short units: the wave too
    region = tail + slots if joins else tail
    assert full == items - region
    covered = {}                                           # item -> K-blocks, each exactly once
    for unit in units:
        assert 1 <= len(unit) <= 3
        assert all(s.k0 < s.k1 for s in unit)
        for a, b in zip(unit, unit[1:]):                   # the end of one item, then the start of the next
            assert a.k1 == k_blocks and b.k0 == 0 and b.item == a.item + 1
        for s in unit:
            covered.setdefault(s.item, []).extend(range(s.k0, s.k1))
            assert s.k0 != 0 or s.k1 == k_blocks or s is unit[-1], \
                "an item's first K-block ends its unit (it waits, so it runs last)"
    assert sorted(covered) == list(range(full, items))
    assert all(sorted(ks) == list(range(k_blocks)) for ks in covered.values())
    sizes = [sum(s.k1 - s.k0 for s in unit) for unit in units]
    assert len(units) == min(slots, region * k_blocks)
    assert max(sizes) - min(sizes) <= 1


def test_stream_k_cuts_a_small_tail_into_few_pieces_per_item():
    """8 items past a full wave of 132: cut over all slots alone, each would be 16-17 pieces, one CTA adding
    15-16 partial sums while the rest waited; with the wave before it, no item has more than two pieces."""
    full, units = waves.stream_k(140, 132, 47)
    pieces = {}
    for unit in units:
        for s in unit:
            pieces[s.item] = pieces.get(s.item, 0) + 1
    assert full == 0 and len(units) == 132 and max(pieces.values()) == 2
    full, units = waves.stream_k(8, 132, 47)          # no wave before: the tail alone, as finely as it goes
    assert full == 0 and len(units) == 132
    full, units = waves.stream_k(144, 132, 192)       # 17 K-blocks a unit from the tail alone: it stays alone
    assert full == 132 and len(units) == 132


def test_stream_k_leaves_a_full_last_wave_alone():
    assert waves.stream_k(264, 66, 64) == (264, ())
    with pytest.raises(ValueError, match="slots"):
        waves.stream_k(10, 0, 4)


@pytest.mark.parametrize("M, N", [(2**31, 2**31), (10**12, 4096), (2**30, 2**21)])
def test_an_absurd_size_fails_fast_and_clearly(M, N):
    """plan() builds every work item in Python: a shape past MAX_ITEMS used to run for minutes or raise a bare
    MemoryError; it must be refused at once, saying how many items it would take."""
    import time
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="work items; the planner takes at most"):
        waves.plan(M, N, gpu="h200", tile_m=128, tile_ns=(256, 128))
    assert time.perf_counter() - t0 < 1.0


def test_the_limit_counts_edge_tiles():
    rows = waves.MAX_ITEMS // 4               # 4 tiles per row: one more (partial) row is past the limit
    with pytest.raises(ValueError, match=f"{waves.MAX_ITEMS + 4:,} work items"):
        waves.plan(128 * rows + 1, 4 * 256, gpu="h200", tile_m=128, tile_ns=(256,), balanced=False)

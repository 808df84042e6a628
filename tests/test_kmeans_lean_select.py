"""The Hopper variant `lean_select` (`kmeans_kernels.reduce.scan_pairs`), what `auto` runs outside `wide`: its pair step checked against
two serial steps on every combination of special values, its machine code leaner than norm_broadcast's by the
predicted amount (no GPU needed), and its answers against the reference on an H100/H200 (`pytest -m gpu`).

The variant is also in `hopper.VARIANTS`, so every GPU test of tests/test_kmeans_hopper.py (tails, cross-tile
ties, NaN, +-inf, signed zero, fp16, given norms, rows with no winner) runs it too; the GPU tests here aim at
what is new: two scores of one pair in every relation the contract distinguishes.
"""
from __future__ import annotations

import functools
import itertools
import math
import random
import re

import pytest
import torch

from kmeans_kernels import hopper, reduce, reference, sass_checks, variants
from test_kmeans_hopper import assert_equal, gpu, needs_hopper, run, small_integers
from workbook import gpus, sass

VARIANT = "lean_select"
BASELINE = "norm_broadcast"        # the same kernel with the ilp2 scan
NAN, INF = float("nan"), float("inf")
SPECIAL = (NAN, -INF, -1.0, -0.0, 0.0, 1e-45, 1.0, INF)     # 1e-45: the smallest fp32 subnormal


@functools.lru_cache(maxsize=None)
def compiled(variant: str, D: int, dtype=torch.bfloat16):
    return hopper.compile(variant, 1000, D, 1000, dtype=dtype)


# ------------------------------------------------------------------ CPU: the pair step, as a model

def fmnmx(pick, zero: float):
    """FMNMX as `pick` (min or max): IEEE minimumNumber / maximumNumber, NaN only if both are; between -0 and +0
    it may return either (`zero`)."""
    def op(a, b):
        if math.isnan(a):
            return b
        if math.isnan(b):
            return a
        if a == b == 0.0:
            return zero
        return pick(a, b)
    return op


def minimum_number(zero: float):
    return fmnmx(min, zero)


def rows_of_special_values(seed: int, count: int, length: int):
    """`count` rows of `length` scores, each drawn from a random prefix of the special values (so some rows are
    all ties, all NaN or all infinities), with the reference's argmin of each: (row, winning column)."""
    rng = random.Random(seed)
    pool = (NAN, -INF, INF, -0.0, 0.0, -1.0, 1.0, 2.0)
    for _ in range(count):
        row = [rng.choice(pool[:rng.randint(1, len(pool))]) for _ in range(length)]
        _, want = reference._argmin_block(torch.tensor([row], dtype=torch.float32), 0)
        yield row, int(want)


def select(p, a, b):
    return a if p else b


def serial(score, index, steps):
    for s, i in steps:
        if s < score:
            score, index = s, i
    return score, index


def same_score(a, b):
    return a == b or (math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("zero", [-0.0, 0.0])
def test_pair_step_is_two_serial_steps_on_special_values(zero):
    """Every (running score, s_lo, s_hi) over NaN, +-inf, +-0, a subnormal and ordinary values, with the running
    winner either none yet (-1) or an earlier column: the pair step must land on the serial steps' index, with a
    score that compares equal (it may be the other zero)."""
    fmin = minimum_number(zero)
    running = [INF] + [v for v in SPECIAL if not math.isnan(v)]      # a running score is never NaN
    for score, index, s_lo, s_hi in itertools.product(running, (-1, 3), SPECIAL, SPECIAL):
        want = serial(score, index, [(s_lo, 5), (s_hi, 9)])
        got = reduce.pair_step(score, index, s_lo, s_hi, 5, 9, fmin, select)
        assert got[1] == want[1] and same_score(got[0], want[0]), (score, index, s_lo, s_hi, got, want)


def scan_pairs_model(scores, fmin):
    """One thread's row in the kernel's order: chain c takes columns c, c + 2, ... in pairs (j, j + 2), then the
    chains merge by (score, index) (`reduce.merge_chains`). Returns the winning column, or -1."""
    best = []
    for c in (0, 1):
        score, index = INF, -1
        for j in range(c, len(scores), 4):
            score, index = reduce.pair_step(score, index, scores[j], scores[j + 2], j, j + 2, fmin, select)
        best.append((score, index))
    (s0, i0), (s1, i1) = best
    take = s1 < s0 or (s1 == s0 and i1 < i0)
    return i1 if take else i0


@pytest.mark.parametrize("zero", [-0.0, 0.0])
def test_scan_model_matches_the_reference_on_rows_of_special_values(zero):
    """Rows of 32 scores drawn from the special values (so ties, NaN and infinities meet in every position of a
    pair and across the two chains) against the reference's argmin of the same scores."""
    for row, want in rows_of_special_values(19, 3000, 32):
        assert scan_pairs_model(row, minimum_number(zero)) == want, row


def test_the_model_check_catches_a_nan_propagating_min():
    """The exhaustive check can fail: with IEEE `minimum` (NaN wins the min) a pair (NaN, 1) would lose its 1."""
    def nan_min(a, b):
        return NAN if math.isnan(a) or math.isnan(b) else min(a, b)
    wrong = [(s, i) for s, i in itertools.product(SPECIAL, SPECIAL)
             if reduce.pair_step(INF, -1, s, i, 5, 9, nan_min, select)[1] != serial(INF, -1, [(s, 5), (i, 9)])[1]]
    assert wrong


def test_column_offsets_follow_the_accumulator_layout():
    """`_col_offsets[j]` is column(j) - column(0) of the _row_col_layout view, for both rows: a thread's
    registers hold, per 8-column group g, columns 8g + 2q + {0, 1} at register 2*row + col%2 + 4g."""
    offsets = hopper._col_offsets()
    for row in (0, 1):
        cols = [8 * (hopper._flat_index(row, j) // 4) + hopper._flat_index(row, j) % 2
                for j in range(hopper.BLOCK_N // 4)]
        assert tuple(c - cols[0] for c in cols) == offsets
    assert all(b - a > 0 for a, b in zip(offsets, offsets[1:]))         # columns increase with j


# ------------------------------------------------------------------ CPU: vocabulary and machine code

def test_auto_runs_the_pairs_scan_wherever_it_runs_neither_wide_nor_the_lazy_scan():
    assert VARIANT in hopper.VARIANTS and variants.recipe("sm_90a", VARIANT).scan == "pairs"
    assert variants.recipe("sm_90a", "lean_ping_pong") == variants.Recipe("pairs", "shuffle", ping_pong=True)
    assert variants.recipe("sm_90a", "folded_norms") == variants.Recipe("pairs", "accumulator", ping_pong=True)
    for N, D, K in itertools.product((1, 4096, 65536, 1 << 20), (16, 64, 128, 192, 256, 512), (1, 512, 4096, 16384)):
        wide = D >= 256 and K >= 4096 and hopper.ping_pong_fits(D)
        lazy = D <= 128 and K >= 4096
        want = "wide" if wide else "lazy_index" if lazy else "folded_norms" if D <= 128 else VARIANT
        assert hopper.auto_variant(N, D, K) == want, (N, D, K)


# Measured on the compiled SASS when the variant was written (scan instructions per score, norm_broadcast ->
# lean_select): D=64 5.67 -> 5.11, D=128 5.77 -> 5.20, D=256 5.92 -> 5.36. Predicted: the 32 per-tile adds
# of the column-index registers go (-0.5 per score); per pair the FMNMX replaces an FSEL, and the one
# predicated SEL plus the low-offset immediates cost what ptxas's merged SEL pairs of ilp2 cost.
PREDICTED_DROP = 0.45


@pytest.mark.parametrize("D", [64, 128, 256])
def test_fewer_instructions_per_score_than_norm_broadcast(D):
    lean, base = compiled(VARIANT, D).sass, compiled(BASELINE, D).sass
    lean_per, base_per = (sass_checks.scan_instructions_per_score(s) for s in (lean, base))
    assert lean_per <= base_per - PREDICTED_DROP, (D, base_per, lean_per)
    assert sass_checks.scan_instructions_per_score(lean, mma_issue=True) <= \
        sass_checks.scan_instructions_per_score(base, mma_issue=True) - PREDICTED_DROP
    # the shape of the new scan: one FMNMX and one FSEL per pair, both FSETPs kept
    ops = {name: sum(i.base == name for i in sass_checks.scan_block(lean, after=None))
           for name in ("FADD", "FMNMX", "FSEL", "FSETP")}
    assert ops["FMNMX"] == ops["FSEL"] == ops["FADD"] // 2 and ops["FSETP"] == ops["FADD"], ops


@pytest.mark.parametrize("D,dtype", [(64, torch.bfloat16), (128, torch.bfloat16), (256, torch.bfloat16),
                                     (128, torch.float16), (16, torch.bfloat16), (80, torch.bfloat16),
                                     (512, torch.bfloat16)])
def test_compiles_without_spills_or_serialized_wgmmas(D, dtype):
    """Like norm_broadcast: no local memory, as many WGMMAs and as many WARPGROUP.DEPBAR waits (ptxas serializing
    the WGMMAs would give one wait per WGMMA), and registers for its two CTAs per SM."""
    art, base = compiled(VARIANT, D, dtype), compiled(BASELINE, D, dtype)
    lean_ops, base_ops = sass.histogram(art.sass), sass.histogram(base.sass)
    assert lean_ops["LDL"] == lean_ops["STL"] == 0, "register spills"
    for op in ("HGMMA", "WARPGROUP.DEPBAR"):
        assert sum(n for k, n in lean_ops.items() if k.startswith(op)) == \
            sum(n for k, n in base_ops.items() if k.startswith(op)), op
    regs, = sass.registers(art.cubin).values()
    ctas = hopper.ctas_per_sm(D)
    assert gpus.ctas_by_registers(regs, hopper.THREADS) >= ctas, (D, regs, ctas)


def test_ptx_min_is_minimum_number_without_flushing():
    """The proof needs min.f32 as IEEE minimumNumber on unflushed values: no .NaN (NaN-propagating) and no .ftz
    (which would turn subnormal scores into zeros and tie them), and ordered compares as in the other scans."""
    ptx = compiled(VARIANT, 128).ptx
    mins = re.findall(r"\bmin((?:\.[A-Za-z0-9]+)+)", ptx)
    assert mins and set(mins) == {".f32"}, set(mins)
    assert not re.search(r"\b(min|setp|sub|add)\S*\.ftz", ptx)


# ------------------------------------------------------------------ GPU: answers, aimed at the pairs

def pair_cases(N: int, D: int, K: int, gen: torch.Generator):
    """Points whose scores against K centroids put NaN, -inf, +inf, ties and signed zeros in both places of a
    pair. A thread's pair is columns j and j + 8 of one tile (same lane), so a centroid copied 8 columns on, or
    the sign of its first coordinate, decides what the pair sees."""
    x, c = small_integers(N, D, gen), small_integers(K, D, gen)
    # rows with x[:, 0] = +inf: score NaN where c[k, 0] == 0 (inf * 0), -inf where c[k, 0] > 0, +inf where < 0
    x[: N // 3, 0] = float("inf")
    signs = torch.tensor([0, 1, -1, 0, 1, 1, 0, -1], dtype=torch.bfloat16)
    c[:, 0] = signs[torch.randint(0, len(signs), (K,), generator=gen)]
    c[K // 2:, 0] = torch.where(c[K // 2:, 0] > 0, torch.zeros((), dtype=torch.bfloat16), c[K // 2:, 0])
    for k in range(K - 8):
        if k % 16 < 8 and k % 3:
            c[k + 8] = c[k]                                  # exact ties inside most pairs: the low column wins
    return x, c


@gpu
@needs_hopper
@pytest.mark.parametrize("N,D,K", [(300, 64, 137), (257, 128, 1000), (129, 256, 257), (300, 64, 9), (1, 128, 3)])
def test_pairs_exact_against_the_reference(N, D, K):
    gen = torch.Generator().manual_seed(N * 31 + D + K)
    x, c = pair_cases(N, D, K, gen)
    x, c = x.cuda(), c.cuda()
    assert_equal(run(VARIANT, x, c), reference.assign(x, c), f"{VARIANT} pairs N={N} D={D} K={K}")
    assert_equal(run(VARIANT, x, c), run(BASELINE, x, c), f"{VARIANT} vs {BASELINE}")


@gpu
@needs_hopper
def test_nan_low_with_a_winner_high_and_signed_zero_pairs():
    """Per row, the only finite winner sits in the high place of a pair whose low place is NaN; then the pair
    scores are -0 and +0 (equal: the low column must win), fp16 as well as bf16."""
    N, D, K = 64, 64, 256
    for dtype in (torch.bfloat16, torch.float16):
        x = torch.zeros(N, D, dtype=dtype)
        x[:, 0] = float("inf")
        c = torch.full((K, D), 0, dtype=dtype)
        c[:, 0] = -1                                          # +inf everywhere: never a winner ...
        c[0::16, 0] = 0                                       # ... NaN in every pair's low place of lane 0 ...
        c[40, 0] = 1                                          # ... and -inf at column 40 = 32 + 8, a high place
        assert_equal(run(VARIANT, x.cuda(), c.cuda()), torch.full((N,), 40, dtype=torch.int32, device="cuda"),
                     f"NaN low, -inf high ({dtype})")
        z = torch.zeros(K, D, dtype=dtype)
        z[8::16] = -0.0                                       # scores -0 - 0 and 0 - 0 in every pair
        xz = torch.zeros(N, D, dtype=dtype)
        assert_equal(run(VARIANT, xz.cuda(), z.cuda()), torch.zeros(N, dtype=torch.int32, device="cuda"),
                     f"signed-zero pairs ({dtype})")


# ---------------------------------------------------------------- the lazy scan (variant lazy_index)

def maximum_number(zero: float):
    return fmnmx(max, zero)


def scan_lazy_model(scores, fmax, lowest=min):
    """`reduce.scan_lazy` on one row of 128-column tiles: four lanes, lane q holding columns 8g + 2q + {0, 1}
    (the accumulator's layout), the accumulator holding the negated scores; the shuffles and the vote emulated,
    each lane's search in the kernel's chains merged by `lowest`. Returns the winning column, or -1."""
    score, index = INF, -1
    for t in range(0, len(scores), 128):
        lanes = [[t + 8 * g + 2 * q + e for g in range(16) for e in (0, 1)] for q in range(4)]
        dots = [[-scores[col] for col in cols] for cols in lanes]
        m = functools.reduce(fmax, [reduce._tree(fmax, d) for d in dots])
        if -m < score:
            index = min(reduce._first_equal_split(d, m, cols, reduce.SEARCH_CHAINS, select, lowest)
                        for d, cols in zip(dots, lanes))
            score = -m
    return index


@pytest.mark.parametrize("zero", [-0.0, 0.0])
def test_lazy_scan_model_matches_the_reference_across_tiles(zero):
    """Rows of three 128-column tiles drawn from the special values (ties within a lane, across lanes and across
    tiles; NaN, both infinities and both zeros everywhere) against the reference's argmin."""
    for row, want in rows_of_special_values(23, 1500, 384):
        assert scan_lazy_model(row, maximum_number(zero)) == want, row


def test_the_lazy_model_check_catches_a_nan_propagating_max():
    """The check can fail: with IEEE `maximum` (NaN wins the max) a tile holding one NaN would lose its winner."""
    def nan_max(a, b):
        return NAN if math.isnan(a) or math.isnan(b) else max(a, b)
    row = [2.0] * 128 + [1.0] + [NAN] + [3.0] * 126
    _, want = reference._argmin_block(torch.tensor([row], dtype=torch.float32), 0)
    assert scan_lazy_model(row, maximum_number(0.0)) == int(want) == 128
    assert scan_lazy_model(row, nan_max) != int(want)


def test_the_lazy_model_check_catches_chains_merged_by_the_wrong_end():
    """The check can fail: merging the search chains' hits by max finds a higher column holding the maximum, or
    the NO_COLUMN of a chain with no hit."""
    row = [5.0] * 128
    row[3], row[122] = 1.0, 1.0                 # the tile's best twice, in lane 1's first and last chains
    assert scan_lazy_model(row, maximum_number(0.0)) == 3
    assert scan_lazy_model(row, maximum_number(0.0), lowest=max) != 3


def test_lazy_search_odds_follow_the_harmonic_number_on_data_in_no_order():
    """A row's winner moves at tile t with probability 1/t when the tiles come in random order: over T tiles the
    1-row odds are H(T) / T, and a group of rows searches at least as often as one row."""
    T = 8
    odds = reduce.lazy_search_odds(4096, 16, 128 * T)
    harmonic = sum(1 / t for t in range(1, T + 1)) / T
    assert abs(odds[1] - harmonic) < 0.02, (odds, harmonic)
    assert odds[1] <= odds[8] <= odds[16] <= 1
    assert reduce.lazy_search_odds(64, 16, 200)[1] > 0.5   # K not a multiple of the tile: the tail tile is padded

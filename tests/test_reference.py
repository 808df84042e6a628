"""kmeans_kernels.reference against its contract (DESIGN.md, "Numerical contract of k-means assignment").

Three kinds of evidence:
* small-integer-valued inputs, where every fp32 product, sum and score is exact: the reference must equal
  an independent float64 oracle written here, bit for bit, ties included;
* random inputs: the reference may disagree with the oracle only where the two scores are closer than a
  rigorous bound on the fp32 rounding error (derived at `score_error_bound`);
* special values (NaN, +-inf, -0.0, overflow), where each expected answer is derived by hand in a comment.

Every test that draws data prints its seed; rerun one with REFERENCE_TEST_SEED=<seed> to reproduce it.
Each semantic test runs on the CPU, and again on CUDA when a GPU is present (`pytest -m gpu`).
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from kmeans_kernels import reference

INF, NAN = float("inf"), float("nan")


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")])])
def device(request) -> torch.device:
    return torch.device(request.param)


@pytest.fixture
def gen() -> torch.Generator:
    """A generator seeded from os.urandom (or REFERENCE_TEST_SEED); pytest shows the printed seed on failure."""
    seed = int(os.environ.get("REFERENCE_TEST_SEED") or int.from_bytes(os.urandom(8), "little"))
    print(f"seed = {seed}   (reproduce with REFERENCE_TEST_SEED={seed})")
    return torch.Generator().manual_seed(seed)


def randint(gen, lo: int, hi: int) -> int:
    return int(torch.randint(lo, hi + 1, (), generator=gen))


def small_ints(gen, *shape, dtype=torch.bfloat16, bound: int = 4) -> torch.Tensor:
    """Integers in [-bound, bound]: exact in bf16/fp16, and so are their products and (short) sums in fp32."""
    return torch.randint(-bound, bound + 1, shape, generator=gen).to(dtype)


def randn(gen, *shape, dtype=torch.bfloat16) -> torch.Tensor:
    return torch.randn(shape, generator=gen).to(dtype)


def ref_assign(x, c, device, c_sq=None) -> np.ndarray:
    """reference.assign on `device`, its output contract checked, returned as numpy int64 on the host."""
    x, c = x.to(device), c.to(device)
    ids = reference.assign(x, c, None if c_sq is None else c_sq.to(device))
    assert ids.dtype == torch.int32 and ids.shape == (x.shape[0],) and ids.device == x.device
    return ids.cpu().numpy().astype(np.int64)


# ----------------------------------------------------------------------------------------------------------
# The independent oracle: float64 scores and the contract's scan, written out literally.

def oracle_scores(x, c, c_sq=None) -> np.ndarray:
    X, C = x.double().numpy(), c.double().numpy()
    half = 0.5 * ((C * C).sum(axis=1) if c_sq is None else c_sq.double().numpy())
    return half[None, :] - X @ C.T


def contract_argmin(s: np.ndarray) -> np.ndarray:
    """Scan k upward keeping the first strictly smaller score; NaN and +inf are never taken; -1 if none is."""
    N, K = s.shape
    best_k = np.full(N, -1)
    best_s = np.full(N, np.inf)
    for k in range(K):
        sk = s[:, k]
        take = ~np.isnan(sk) & (sk != np.inf) & ((best_k == -1) | (sk < best_s))
        best_k[take], best_s[take] = k, sk[take]
    return best_k


def score_error_bound(x, c, s: np.ndarray) -> np.ndarray:
    """|computed score - exact score| <= this, for fp32 accumulation in any order (the kernels) and for float64
    accumulation rounded once to fp32 (the reference: a tighter error); plus the float64 oracle's own error.

    With u = 2^-24 and gamma_n = n u / (1 - n u) (Higham, Accuracy and Stability, ch. 3):
      dot:   |fl(<x,c>) - <x,c>| <= gamma_D * sum_i |x_i c_i|     (D rounded products and D-1 additions,
                                                                   in any order; bf16/fp16 products are exact)
      norm:  |fl(||c||^2) - ||c||^2| <= gamma_D * ||c||^2          (halving is exact)
      score: fl(h' - d') = (h' - d')(1 + delta), |delta| <= u, so with e = |h' - h| + |d' - d|:
             |s' - s| <= e + u (|s| + e) = (1 + u) e + u |s|
    The same bound with u = 2^-53 covers the oracle's float64 arithmetic; the two are added.
    """
    X, C = x.double().abs().numpy(), c.double().numpy()
    D = X.shape[1]
    magnitude = 0.5 * (C * C).sum(axis=1)[None, :] + X @ np.abs(C).T
    bound = np.zeros_like(s)
    for u in (2.0 ** -24, 2.0 ** -53):
        gamma = D * u / (1 - D * u)
        bound += (1 + u) * gamma * magnitude + u * np.abs(s)
    return bound


def assert_within_rounding(ids: np.ndarray, x, c) -> int:
    """Each row's winner is the oracle's, or scores within the error bound of it. Returns the disagreements."""
    s = oracle_scores(x, c)
    want = contract_argmin(s)
    rows = np.nonzero(ids != want)[0]
    if rows.size:
        assert (ids[rows] >= 0).all() and (want[rows] >= 0).all(), f"a row lost its winner: rows {rows[:10]}"
        bound = score_error_bound(x, c, s)
        got_k, want_k = ids[rows], want[rows]
        gap = s[rows, got_k] - s[rows, want_k]
        slack = bound[rows, got_k] + bound[rows, want_k]
        bad = gap > slack
        assert not bad.any(), (f"{bad.sum()} rows pick a centroid farther than rounding allows, e.g. row "
                               f"{rows[bad][0]}: got {got_k[bad][0]}, want {want_k[bad][0]}, "
                               f"score gap {gap[bad][0]:.3g} > bound {slack[bad][0]:.3g}")
    return rows.size


# ----------------------------------------------------------------------------------------------------------
# Exact inputs: bit for bit.

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("trial", range(3))
def test_exact_inputs_match_the_oracle_bit_for_bit(device, gen, dtype, trial):
    # |x_i c_i| <= 16 and D <= 300: every sum stays far below 2^24, so fp32 computes the exact scores
    N, K, D = randint(gen, 1, 300), randint(gen, 1, 700), randint(gen, 1, 300)
    x, c = small_ints(gen, N, D, dtype=dtype), small_ints(gen, K, D, dtype=dtype)
    want = contract_argmin(oracle_scores(x, c))
    np.testing.assert_array_equal(ref_assign(x, c, device), want, err_msg=f"N={N} K={K} D={D}")


@pytest.mark.parametrize("K, duplicates", [
    (5, (1, 3)),                # within one 128-wide tile
    (130, (3, 100, 129)),       # 3 and 100 share a tile; 129 is in the next
    (1000, (10, 500, 999)),     # three different tiles
])
def test_duplicate_centroids_lowest_index_wins(device, gen, K, duplicates):
    D = randint(gen, 8, 96)
    c = small_ints(gen, K, D)
    c[list(duplicates)] = c[duplicates[0]].clone()
    # half the rows are the duplicated centroid itself (distance 0: the duplicates tie, and beat all others)
    x = torch.cat([c[duplicates[0]].expand(8, D), small_ints(gen, 8, D)])
    ids = ref_assign(x, c, device)
    assert (ids[:8] == duplicates[0]).all(), f"K={K} D={D}: {ids[:8]}"
    np.testing.assert_array_equal(ids, contract_argmin(oracle_scores(x, c)))


@pytest.mark.parametrize("K", [1, 5, 130, 1000])
def test_all_equal_centroids_pick_index_0(device, gen, K):
    D = randint(gen, 1, 200)
    c = small_ints(gen, 1, D).expand(K, D).contiguous()
    x = small_ints(gen, randint(gen, 1, 64), D)
    assert (ref_assign(x, c, device) == 0).all()


@pytest.mark.parametrize("K", [5, 130, 1000])
def test_identical_centroids_score_identically_on_random_data(device, gen, K):
    """A centroid's score depends only on the point and the centroid, not on its column: duplicates tie.

    (A CPU fp32 GEMM fails this for K=5 about half the time; the reference accumulates in float64.)
    """
    c = randn(gen, 1, 128).expand(K, 128).contiguous()
    x = randn(gen, 256, 128)
    assert (ref_assign(x, c, device) == 0).all()


# ----------------------------------------------------------------------------------------------------------
# Random inputs: within rounding of the oracle.

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("trial", range(3))
def test_random_inputs_agree_up_to_rounding(device, gen, dtype, trial):
    N, K, D = randint(gen, 1, 300), randint(gen, 1, 700), randint(gen, 1, 300)
    x, c = randn(gen, N, D, dtype=dtype), randn(gen, K, D, dtype=dtype)
    assert_within_rounding(ref_assign(x, c, device), x, c)


def test_near_ties_agree_up_to_rounding(device, gen):
    """Centroids a hair apart: many rows have runners-up within rounding, which exercises the bound."""
    K, D = 200, randint(gen, 64, 256)
    c = (randn(gen, 1, D, dtype=torch.float32) + 2 ** -7 * randn(gen, K, D, dtype=torch.float32)).bfloat16()
    x = randn(gen, 300, D)
    assert_within_rounding(ref_assign(x, c, device), x, c)


def test_passing_c_sq_changes_nothing_but_the_work(device, gen):
    x, c = randn(gen, 50, 40), randn(gen, 300, 40)
    plain = ref_assign(x, c, device)
    np.testing.assert_array_equal(ref_assign(x, c, device, c_sq=reference.centroid_norms(c)), plain)
    np.testing.assert_array_equal(ref_assign(x, c, device, c_sq=reference.centroid_norms(c).double()), plain)


def test_c_sq_is_used_as_given(device):
    # with c = 0 every dot product is 0, so the score is 0.5 * c_sq: the smallest c_sq wins
    c_sq = torch.tensor([2.0, 1.0, 3.0, 1.0])
    assert (ref_assign(torch.ones(3, 8), torch.zeros(4, 8), device, c_sq=c_sq) == 1).all()


# ----------------------------------------------------------------------------------------------------------
# Special values. Scores are shown as [centroid 0, centroid 1, ...] for one row.

def test_nan_in_a_point_leaves_its_row_without_winner(device, gen):
    # NaN * anything (even 0) is NaN, so every score of the row is NaN: no winner, -1
    N, K, D = 40, randint(gen, 1, 300), randint(gen, 1, 64)
    x, c = small_ints(gen, N, D), small_ints(gen, K, D)
    nan_rows = torch.randperm(N, generator=gen)[:7]
    x[nan_rows, torch.randint(0, D, (7,), generator=gen)] = NAN
    ids = ref_assign(x, c, device)
    want = contract_argmin(oracle_scores(x, c))
    assert (want[nan_rows.numpy()] == -1).all()
    np.testing.assert_array_equal(ids, want)


def test_nan_centroid_never_wins(device, gen):
    # c_j has one NaN coordinate: ||c_j||^2 is NaN, so every score of column j is NaN, even for x = c_j
    K, D = 260, randint(gen, 2, 64)
    c = small_ints(gen, K, D)
    j = randint(gen, 0, K - 1)
    x = torch.cat([c[j].expand(5, D), small_ints(gen, 20, D)])
    c[j, randint(gen, 0, D - 1)] = NAN
    ids = ref_assign(x, c, device)
    assert (ids != j).all() and (ids >= 0).all()
    np.testing.assert_array_equal(ids, contract_argmin(oracle_scores(x, c)))


def test_all_centroids_nan_gives_minus_one(device, gen):
    c = small_ints(gen, 9, 16)
    c[:, 3] = NAN
    assert (ref_assign(small_ints(gen, 5, 16), c, device) == -1).all()


def test_overflowing_norm_is_plus_inf_and_never_wins(device, gen):
    # c_j = [2^66, 0, ...] is finite in bf16, but ||c_j||^2 = 2^132 overflows fp32 (max ~2^128) to +inf,
    # while <x, c_j> = 2^66 x_0 stays finite: the score is inf - finite = +inf, which never wins.
    D = 16
    c = small_ints(gen, 6, D)
    c[4] = 0
    c[4, 0] = 2.0 ** 66
    x = small_ints(gen, 30, D)
    s = reference.scores(x.to(device), c.to(device)).cpu()
    assert (s[:, 4] == INF).all()
    s_exact = oracle_scores(x, c)
    s_exact[:, 4] = np.inf
    np.testing.assert_array_equal(ref_assign(x, c, device), contract_argmin(s_exact))
    # alone, it leaves every row without a winner
    assert (ref_assign(x, c[4:5], device) == -1).all()


def test_infinite_centroid_coordinate_never_wins(device):
    # c_0 = [inf, 0, ...]: ||c_0||^2 = inf, and <x, c_0> = x_0 * inf. Row by row (x_0 = 1, 0, -1):
    #   inf - inf = NaN;   inf - (0 * inf = NaN) = NaN;   inf - (-inf) = +inf.   None of them wins.
    c = torch.zeros(2, 16, dtype=torch.bfloat16)
    c[0, 0] = INF
    c[1, 1] = 1  # an ordinary centroid
    x = torch.zeros(3, 16, dtype=torch.bfloat16)
    x[:, 0] = torch.tensor([1.0, 0.0, -1.0])
    s = reference.scores(x.to(device), c.to(device)).cpu()
    assert s[0, 0].isnan() and s[1, 0].isnan() and s[2, 0] == INF
    assert (ref_assign(x, c, device) == 1).all()
    assert (ref_assign(x, c[:1], device) == -1).all()


def test_minus_inf_wins_and_ties_to_the_lowest_index(device):
    # x = [+inf, 1, 0, ...]. Every dot has the term inf * c_k0, so no score of this row is finite:
    #   c_0 = [-1, 0]: dot -inf, score +inf      (never wins)
    #   c_1 = [ 0, 9]: inf * 0 = NaN, score NaN   (never wins, though 9 * 1 alone would be finite)
    #   c_2 = [ 2, 0]: dot +inf, score -inf       <- wins
    #   c_3 = [ 1, 0]: dot +inf, score -inf       (ties with c_2; the lower index wins)
    # (-inf beating a finite score is test_overflowing_dot_is_minus_inf_from_finite_inputs)
    c = torch.zeros(4, 16, dtype=torch.bfloat16)
    c[0, 0], c[1, 1], c[2, 0], c[3, 0] = -1, 9, 2, 1
    x = torch.zeros(1, 16, dtype=torch.bfloat16)
    x[0, 0], x[0, 1] = INF, 1
    s = reference.scores(x.to(device), c.to(device)).cpu()[0]
    assert s[0] == INF and s[1].isnan() and s[2] == -INF and s[3] == -INF
    assert ref_assign(x, c, device).tolist() == [2]


def test_overflowing_dot_is_minus_inf_from_finite_inputs(device):
    # x = [2^127, 0, ...] and c_k = [a, 0, ...], all finite bf16:
    #   a = 1: dot 2^127 (finite), score 0.5 - 2^127 (a huge negative finite number)
    #   a = 4: dot 2^129 overflows fp32 to +inf, ||c||^2 = 16, score -inf <- beats the huge negative one
    c = torch.zeros(3, 16, dtype=torch.bfloat16)
    c[0, 0], c[1, 0], c[2, 0] = 1, 4, 4
    x = torch.zeros(1, 16, dtype=torch.bfloat16)
    x[0, 0] = 2.0 ** 127
    s = reference.scores(x.to(device), c.to(device)).cpu()[0]
    assert torch.isfinite(s[0]) and s[0] < -1e38 and s[1] == -INF and s[2] == -INF
    assert ref_assign(x, c, device).tolist() == [1]


@pytest.mark.parametrize("c_sq", [[0.0, -0.0, 0.0], [-0.0, 0.0, -0.0], [0.0, 0.0, -0.0]])
def test_minus_zero_equals_plus_zero(device, c_sq):
    # With c = 0 the dot is +0 for x > 0, so the score is 0.5 * c_sq - (+0): a c_sq of -0.0 gives a -0.0 score.
    # -0.0 == +0.0, so all three scores tie and centroid 0 wins, whatever the signs.
    c_sq = torch.tensor(c_sq)
    x, c = torch.ones(4, 8), torch.zeros(3, 8)
    s = reference.scores(x.to(device), c.to(device), c_sq.to(device)).cpu()
    assert torch.equal(torch.signbit(s[0]), torch.signbit(c_sq))  # the -0.0 scores really are there
    assert (ref_assign(x, c, device, c_sq=c_sq) == 0).all()


def test_one_point_and_one_centroid(device, gen):
    D = randint(gen, 1, 64)
    x, c = randn(gen, 1, D), randn(gen, 1, D)
    assert ref_assign(x, c, device).tolist() == [0]
    assert ref_assign(x.expand(3, D), c, device).tolist() == [0, 0, 0]
    x_nan = x.clone()
    x_nan[0, 0] = NAN
    assert ref_assign(x_nan, c, device).tolist() == [-1]
    K = randint(gen, 2, 500)
    c = small_ints(gen, K, D)
    x = small_ints(gen, 1, D)
    np.testing.assert_array_equal(ref_assign(x, c, device), contract_argmin(oracle_scores(x, c)))


# ----------------------------------------------------------------------------------------------------------
# Chunking: the blocked scan gives the unblocked answer.

def _adversarial_rows(gen, K: int, D: int, column_chunk: int):
    """Exact inputs with duplicates split across column chunks, plus a NaN row and a -inf row."""
    c = small_ints(gen, K, D)
    pairs = [(1, column_chunk + 1), (column_chunk - 1, K - 1), (0, K // 2)]
    for a, b in pairs:
        c[b] = c[a]
    x = torch.cat([c[[a for a, _ in pairs]], small_ints(gen, 30, D)])
    x[-1, 0] = NAN                        # no winner at all
    x[-2, :] = 0
    x[-2, 0] = INF                        # -inf wherever c_k0 > 0: the first such k wins
    # the winner of row c[a]: the lowest index holding that centroid (small ints can repeat a row by chance)
    return x, c, [int((c == c[a]).all(1).nonzero()[0, 0]) for a, _ in pairs]


@pytest.mark.parametrize("block", [1, 7, 64, "rows"])
def test_chunked_scan_equals_unchunked(device, gen, monkeypatch, block):
    K, D = randint(gen, 70, 200), randint(gen, 2, 48)
    x, c, winners = _adversarial_rows(gen, K, D, column_chunk=7)
    whole = ref_assign(x, c, device)
    assert whole[:3].tolist() == winners and whole[-1] == -1
    assert whole[-2] == int(np.nonzero(c[:, 0].float().numpy() > 0)[0][0])
    np.testing.assert_array_equal(whole[:-2], contract_argmin(oracle_scores(x[:-2], c)))

    blocks = 3 * K if block == "rows" else block  # "rows": 3 rows of all K columns per block
    monkeypatch.setattr(reference, "_BLOCK_ELEMENTS", blocks)
    calls = []
    real = reference._argmin_block
    monkeypatch.setattr(reference, "_argmin_block", lambda s, k0: calls.append(s.shape) or real(s, k0))
    np.testing.assert_array_equal(ref_assign(x, c, device), whole, err_msg=f"_BLOCK_ELEMENTS={blocks}")
    # the blocked path really ran: one call per (row block, column block)
    rb, cb = reference._row_block(x.shape[0], K), reference._col_block(K)
    assert len(calls) == -(-x.shape[0] // rb) * -(-K // cb) > 1


def test_chunked_scan_random_inputs_agree_up_to_rounding(device, gen, monkeypatch):
    monkeypatch.setattr(reference, "_BLOCK_ELEMENTS", 37)  # 37 columns per block, prime: ragged tails
    N, K, D = randint(gen, 1, 100), randint(gen, 38, 400), randint(gen, 1, 200)
    x, c = randn(gen, N, D), randn(gen, K, D)
    assert_within_rounding(ref_assign(x, c, device), x, c)


# ----------------------------------------------------------------------------------------------------------
# Bad inputs are refused by name.

@pytest.mark.parametrize("make, match", [
    (lambda: (torch.ones(8), torch.ones(4, 8)), r"x must be 2-D"),
    (lambda: (torch.ones(8, 4), torch.ones(2, 4, 4)), r"c must be 2-D"),
    (lambda: (torch.ones(8, 4), torch.ones(3, 5)), r"D mismatch"),
    (lambda: (torch.ones(8, 4, dtype=torch.int32), torch.ones(3, 4)), r"x must be a floating"),
    (lambda: (torch.ones(8, 4), torch.ones(3, 4, dtype=torch.int64)), r"c must be a floating"),
    (lambda: (torch.ones(8, 4, dtype=torch.bool), torch.ones(3, 4)), r"floating"),
    (lambda: (torch.ones(0, 4), torch.ones(3, 4)), r"at least one row"),
    (lambda: (torch.ones(8, 4), torch.ones(3, 0)), r"at least one row and one column"),
    (lambda: (np.ones((8, 4)), torch.ones(3, 4)), r"x must be a torch.Tensor"),
    (lambda: (torch.ones(8, 4, device="meta"), torch.ones(3, 4)), r"one device"),
])
def test_bad_inputs_are_named(make, match):
    x, c = make()
    for fn in (reference.assign, reference.scores, reference.check_inputs):
        with pytest.raises(ValueError, match=match):
            fn(x, c)


@pytest.mark.parametrize("c_sq, match", [
    (lambda: torch.ones(4), r"c_sq must be a \[K\]=3"),
    (lambda: torch.ones(3, 1), r"c_sq must be a \[K\]=3"),
    (lambda: [1.0, 1.0, 1.0], r"c_sq must be a \[K\]=3 tensor; got list"),
    (lambda: torch.ones(3, dtype=torch.int32), r"c_sq must be floating"),
    (lambda: torch.ones(3, device="meta"), r"c_sq must be on cpu"),
])
def test_bad_c_sq_is_named(c_sq, match):
    for fn in (reference.assign, reference.scores):
        with pytest.raises(ValueError, match=match):
            fn(torch.ones(8, 4), torch.ones(3, 4), c_sq())

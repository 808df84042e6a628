"""The argmin strategies of k-means assignment: CuTe DSL device functions shared by the backends.

A backend holds, in registers, a fragment of fp32 dot products ``<x_i, c_k>`` for a few rows and several
columns per thread (WGMMA accumulators on Hopper, a TMEM load on Blackwell). The functions here turn
fragments into one running winner per row and then merge the winners of the threads that share a row.

The order everywhere is the pair (score, index): a candidate beats the holder when its score is strictly
smaller, or equal with a smaller index. That is the reference's rule (lowest index wins ties) made
associative, so chains and lanes can be merged in any order. NaN compares false and never wins; +inf
never beats the initial +inf; so a row whose scores are all NaN or +inf keeps index -1. ``-0.0 == +0.0``
under the float compare, and the index decides.

The backend's side of the contract:

* ``dots`` is a register tensor viewed as ``(rows, cols)``; along a row, ``cols[j]`` (the centroid index
  of column j, already offset by the tile's first centroid) increases with j;
* ``half_norms[j]`` is ``0.5 * ||c_k||^2`` for that column, and ``+inf`` for a column past K (padding):
  ``+inf - dot`` is +inf or NaN, and neither can win;
* ``best_score``/``best_index`` are register tensors ``(chains, rows)`` made by :func:`new_winners`.

Three scans, one merge:

* :func:`scan_serial` keeps one chain per row: each score waits on the compare of the one before it.
* :func:`scan_ilp2` keeps two chains per row, over even and odd columns, so two compare-select chains
  are in flight; :func:`merge_chains` folds them by (score, index) once, after the last tile.
* :func:`scan_pairs` keeps ilp2's two chains but feeds each one a pair of scores at a time, through one
  FMNMX: about 3.5 instructions per score instead of 4 (its docstring has the count and the proof).
* :func:`scan_lazy` (folded scores only) keeps one winner per row, shared by the lanes of the row: a tile's
  maximum by FMNMX trees, its index searched only where the tile beats the winner.
* :func:`merge_lanes` folds the winners of the lanes that share a row with butterfly shuffles.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute

NO_WINNER = -1
SCANS = ("serial", "ilp2", "pairs", "lazy")
NO_COLUMN = 2**31 - 1   # `scan_lazy`: a lane none of whose columns holds the row's tile minimum
SEARCH_CHAINS = 4        # `scan_lazy`: independent chains of its column search


def chains_of(scan: str) -> int:
    """How many independent chains per row a scan keeps."""
    if scan not in SCANS:
        raise ValueError(f"unknown scan {scan!r}; choose from {SCANS}")
    return 1 if scan in ("serial", "lazy") else 2


@cute.jit
def beats(score: cutlass.Float32, index: cutlass.Int32,
          best_score: cutlass.Float32, best_index: cutlass.Int32) -> cutlass.Boolean:
    """True when (score, index) comes before (best_score, best_index): the tie rule as a total order."""
    return score < best_score or (score == best_score and index < best_index)


@cute.jit
def new_winners(chains: cutlass.Constexpr[int], rows: cutlass.Constexpr[int]):
    """Register tensors (chains, rows) of the running winners: score +inf, index -1 (nothing won yet)."""
    best_score = cute.make_rmem_tensor(cute.make_layout((chains, rows)), cutlass.Float32)
    best_index = cute.make_rmem_tensor(cute.make_layout((chains, rows)), cutlass.Int32)
    reset_winners(best_score, best_index)
    return best_score, best_index


@cute.jit
def reset_winners(best_score: cute.Tensor, best_index: cute.Tensor):
    """Every winner back to score +inf, index -1: a new set of rows."""
    best_score.fill(float("inf"))
    best_index.fill(NO_WINNER)


@cute.jit
def scan_serial(dots: cute.Tensor, half_norms: cute.Tensor, cols: cute.Tensor,
                best_score: cute.Tensor, best_index: cute.Tensor):
    """One chain per row, columns in increasing order: strict `<` keeps the lowest index among equals."""
    for r in cutlass.range_constexpr(cute.size(dots, mode=[0])):
        score = best_score[0, r]
        index = best_index[0, r]
        for j in cutlass.range_constexpr(cute.size(dots, mode=[1])):
            s = half_norms[j] - dots[r, j]
            take = s < score
            score = cutlass.Float32(cutlass.select_(take, s, score))
            index = cutlass.Int32(cutlass.select_(take, cols[j], index))
        best_score[0, r] = score
        best_index[0, r] = index


@cute.jit
def scan_ilp2(dots: cute.Tensor, half_norms: cute.Tensor, cols: cute.Tensor,
              best_score: cute.Tensor, best_index: cute.Tensor):
    """Two chains per row, over even and odd columns; each is a serial scan, so each keeps its lowest index."""
    for r in cutlass.range_constexpr(cute.size(dots, mode=[0])):
        score0 = best_score[0, r]
        index0 = best_index[0, r]
        score1 = best_score[1, r]
        index1 = best_index[1, r]
        for j in cutlass.range_constexpr(0, cute.size(dots, mode=[1]), 2):
            s0 = half_norms[j] - dots[r, j]
            s1 = half_norms[j + 1] - dots[r, j + 1]
            take0 = s0 < score0
            take1 = s1 < score1
            score0 = cutlass.Float32(cutlass.select_(take0, s0, score0))
            index0 = cutlass.Int32(cutlass.select_(take0, cols[j], index0))
            score1 = cutlass.Float32(cutlass.select_(take1, s1, score1))
            index1 = cutlass.Int32(cutlass.select_(take1, cols[j + 1], index1))
        best_score[0, r] = score0
        best_index[0, r] = index0
        best_score[1, r] = score1
        best_index[1, r] = index1


def pair_step(score, index, s_lo, s_hi, i_lo, i_hi, fmin, select):
    """One step of :func:`scan_pairs`, written once for the kernel and for the pure-Python model the tests
    check exhaustively on special values (`fmin` is FMNMX's IEEE minimumNumber, `select(p, a, b)` is p ? a : b).
    The caller guarantees index < i_lo < i_hi (the chain's columns increase)."""
    m = fmin(s_lo, s_hi)
    lo = s_lo == m
    take = m < score
    return select(take, m, score), select(take, select(lo, i_lo, i_hi), index)


@cute.jit
def scan_pairs(dots: cute.Tensor, half_norms: cute.Tensor, offsets: cutlass.Constexpr, base: cutlass.Int32,
               best_score: cute.Tensor, best_index: cute.Tensor, folded: cutlass.Constexpr[bool] = False):
    """ilp2's two chains per row (even and odd j), each folding its columns two at a time (j and j + 2).

    ``folded``: ``dots`` already holds ``dot - half norm`` (the MMA accumulated onto the negated half norms), so
    the score is its negation, a sign on the compare's operands; ``half_norms`` is then not read.

    The column of j is ``base + offsets[j]``, offsets a compile-time tuple increasing with j: the chains carry
    their index relative to `base` through the tile, so each candidate index is an immediate operand and the
    per-column index registers (and their per-tile adds) of :func:`scan_ilp2` disappear.

    **Instruction count** per pair (two scores), against ilp2's two FADD, two FSETP, two FSEL, two SEL:
    two FADD (the scores), one FMNMX (``m = min(s_lo, s_hi)``), one FSETP ``s_lo == m``, one FSETP
    ``m < score``, one FSEL (the score), one predicated SEL (the index: ``take ? (lo ? i_lo : i_hi) : index``,
    which ptxas writes as ``@!take SEL index, R_lo, i_hi, !lo`` with i_lo materialised once per tile for
    both rows): 7 instead of 8, i.e. 3.5 instead of 4 per score, plus the immediates (1/4 per score).

    **Why it is exact** - the step equals two serial steps, (s_lo, i_lo) then (s_hi, i_hi), when
    index < i_lo < i_hi. FMNMX is IEEE minimumNumber: NaN only if both are NaN, otherwise the smaller
    non-NaN value (either zero when they are -0 and +0). Cases:

    * both NaN: m is NaN, ``m < score`` is false: unchanged, as the serial steps (NaN never wins);
    * only s_lo NaN: m = s_hi and ``s_lo == m`` is false, so the step is serial step hi alone, which is what
      the serial steps do (step lo cannot take a NaN); symmetrically, only s_hi NaN: m = s_lo, lo is true,
      the step is serial step lo alone;
    * neither NaN, s_lo <= s_hi (ties, -0 against +0, and infinities included): m equals s_lo as a value, lo
      is true, and the pair takes (s_lo, i_lo) exactly when ``s_lo < score``. Serially, step lo takes the
      same condition, and step hi then cannot take: the score it meets is s_lo (step lo took) or the old
      score, which is <= s_lo (it did not), and s_hi is not below either;
    * neither NaN, s_lo > s_hi: m = s_hi, lo is false, the pair takes (s_hi, i_hi) when ``s_hi < score``.
      Serially, whatever step lo did, step hi takes exactly when s_hi < score (if step lo took, the current
      score is s_lo > s_hi; if not, it is score, and s_lo > s_hi needs no comparison with it).

    The stored score may be -0 where the serial steps store +0 (FMNMX's choice); every later comparison
    treats them as equal, and only indices leave the kernel. +inf never takes a strict ``<`` from the
    initial +inf, so a row of +inf and NaN keeps index -1 (relative indices are shifted back below).
    """
    for c in cutlass.range_constexpr(2):
        # each chain counts from its own first column, so both chains' pairs share their low offsets
        chain_base = base + offsets[c]
        for r in cutlass.range_constexpr(cute.size(dots, mode=[0])):
            score = best_score[c, r]
            index = best_index[c, r] - chain_base
            for j in cutlass.range_constexpr(c, cute.size(dots, mode=[1]), 4):
                if cutlass.const_expr(folded):
                    s_lo, s_hi = -dots[r, j], -dots[r, j + 2]
                else:
                    s_lo, s_hi = half_norms[j] - dots[r, j], half_norms[j + 2] - dots[r, j + 2]
                score, index = pair_step(
                    score, index, s_lo, s_hi,
                    cutlass.Int32(offsets[j] - offsets[c]), cutlass.Int32(offsets[j + 2] - offsets[c]),
                    cute.arch.fmin, lambda p, a, b: type(a)(cutlass.select_(p, a, b)))
            best_score[c, r] = score
            best_index[c, r] = index + chain_base


@cute.jit
def scan_lazy(dots: cute.Tensor, offsets: cutlass.Constexpr, base: cutlass.Int32,
              best_score: cute.Tensor, best_index: cute.Tensor):
    """The argmin of folded scores (``dots`` holds ``dot - half norm``, the score negated) that finds a tile's
    index only where the tile beats a row's winner.

    Per row and tile, each lane takes the largest value of its columns by a tree of FMNMX (one per score), the
    four lanes that share the row merge theirs by two butterfly shuffles, and the row's winner is compared
    with it once. Only where some row of the warp improved (one vote per row and warp) do the lanes look for
    their lowest column holding that value (a compare and a select per score) and merge those columns by two
    more shuffles. A row improves at tile t with probability about 1/t on data in no particular order, so past
    the first tiles the search is mostly skipped; at K = 512 (four tiles) it is nearly always taken
    (`lazy_search_odds`).

    Latency, not only the count: the maxima of all the thread's rows come first, their trees and shuffles
    independent and in flight together, and the search runs as four chains of a quarter of the columns whose
    lowest hit wins. Where the other warpgroup's MMA hides the fold's instructions, this dependent path is
    what delays the next turn at the tensor cores (notes/perf-log.md: 3-4 % of the time at D = 96 and 128).

    **Why it is exact**: the row's winner is shared by its lanes (one chain, one index for the whole row).
    Its score only falls, by strict `<`, so a tie with an earlier tile keeps the earlier index; a new winner's
    index is the lowest column of the tile holding the tile's minimum, the lowest index among equals. FMNMX
    skips NaN (a row whose columns are all NaN has a NaN maximum, and `NaN < score` is false); +inf never
    beats the initial +inf; -0 and +0 compare equal both in the comparison and in the search. Column
    ``base + offsets[j]`` as in :func:`scan_pairs` (offsets increasing with j, so each chain runs from its
    last column down, the lowest equal one stays, and the lowest of the chains' hits is the row's)."""
    n = cute.size(dots, mode=[1])
    rows = [[dots[r, j] for j in range(n)] for r in range(cute.size(dots, mode=[0]))]
    maxima = [_quad(cute.arch.fmax, _tree(cute.arch.fmax, row)) for row in rows]
    columns = [base + offsets[j] for j in range(n)]
    for r in cutlass.range_constexpr(cute.size(dots, mode=[0])):
        m = maxima[r]
        take = -m < best_score[0, r]
        if cute.arch.vote_any_sync(take):
            column = _quad(cutlass.min, _first_equal_split(
                rows[r], m, columns, SEARCH_CHAINS, lambda p, a, b: cutlass.Int32(cutlass.select_(p, a, b)),
                cutlass.min))
            if take:
                best_score[0, r] = -m
                best_index[0, r] = column


def lazy_search_odds(N: int, D: int, K: int, clustered: bool = False, groups=(1, 8, 16), seed: int = 0,
                     tile: int = 128) -> dict:
    """How often :func:`scan_lazy` searches: {rows per group: the fraction of (tile, group) pairs in which some row
    of the group gets a new winner}, on N rows of random data (`clustered`: each row near a random centroid)
    scored on the CPU. 8 rows are one of a thread's two rows across a warp, what one vote decides for."""
    import torch
    g = torch.Generator().manual_seed(seed)
    c = torch.randn(K, D, generator=g)
    x = (c[torch.randint(0, K, (N,), generator=g)] + 0.3 * torch.randn(N, D, generator=g) if clustered
         else torch.randn(N, D, generator=g))
    scores = 0.5 * (c * c).sum(1) - x @ c.T
    tile_min = torch.nn.functional.pad(scores, (0, -K % tile), value=float("inf")).view(N, -1, tile).amin(2)
    before = torch.cat([torch.full((N, 1), float("inf")), torch.cummin(tile_min, 1).values[:, :-1]], 1)
    better = tile_min < before
    return {rows: better.view(N // rows, rows, -1).any(1).float().mean().item() for rows in groups}


# scan_lazy's pieces: plain Python, unrolled at trace time (the DSL would turn their loops into device loops)

def _tree(op, values: list):
    """op over `values` as a balanced tree: log2(n) dependent steps instead of n - 1."""
    if len(values) == 1:
        return values[0]
    half = len(values) // 2
    return op(_tree(op, values[:half]), _tree(op, values[half:]))


def _quad(op, value):
    """op over the four lanes that share a row (lanes 4i to 4i + 3), by two butterfly shuffles."""
    for offset in (1, 2):
        value = op(value, cute.arch.shuffle_sync_bfly(value, offset=offset))
    return value


def _first_equal(values: list, m, columns: list, select):
    """columns[j] of the lowest j with values[j] == m, NO_COLUMN if none (searched from the top, so the lowest
    equal one is the last taken; `select(p, a, b)` is p ? a : b). Columns increase with j."""
    column = NO_COLUMN
    for j in reversed(range(len(values))):
        column = select(values[j] == m, columns[j], column)
    return column


def _first_equal_split(values: list, m, columns: list, ways: int, select, lowest):
    """:func:`_first_equal` as `ways` independent chains over consecutive parts, the chains' hits merged by
    `lowest` (a min: NO_COLUMN, the largest Int32, loses every one)."""
    step = len(values) // ways
    parts = [_first_equal(values[i * step:(i + 1) * step], m, columns[i * step:(i + 1) * step], select)
             for i in range(ways)]
    return _tree(lowest, parts)


@cute.jit
def merge_chains(best_score: cute.Tensor, best_index: cute.Tensor):
    """Fold chains 1.. into chain 0 by (score, index); a no-op for one chain."""
    for r in cutlass.range_constexpr(cute.size(best_score, mode=[1])):
        score = best_score[0, r]
        index = best_index[0, r]
        for k in cutlass.range_constexpr(1, cute.size(best_score, mode=[0])):
            take = beats(best_score[k, r], best_index[k, r], score, index)
            score = cutlass.Float32(cutlass.select_(take, best_score[k, r], score))
            index = cutlass.Int32(cutlass.select_(take, best_index[k, r], index))
        best_score[0, r] = score
        best_index[0, r] = index


@cute.jit
def merge_lanes(best_score: cute.Tensor, best_index: cute.Tensor, lanes: cutlass.Constexpr[int]):
    """Butterfly-merge chain 0 across `lanes` adjacent lanes (a power of two) that share the same rows.

    After it every lane of the group holds the group's winner: (score, index) is a total order, so both
    sides of each exchange pick the same pair.
    """
    for r in cutlass.range_constexpr(cute.size(best_score, mode=[1])):
        score = best_score[0, r]
        index = best_index[0, r]
        offset = 1
        while offset < lanes:
            other_score = cute.arch.shuffle_sync_bfly(score, offset=offset)
            other_index = cute.arch.shuffle_sync_bfly(index, offset=offset)
            take = beats(other_score, other_index, score, index)
            score = cutlass.Float32(cutlass.select_(take, other_score, score))
            index = cutlass.Int32(cutlass.select_(take, other_index, index))
            offset *= 2
        best_score[0, r] = score
        best_index[0, r] = index


@cute.jit
def stage_half_norms(c_sq: cute.Tensor, first: cutlass.Int32, K: cutlass.Int32, lane: cutlass.Int32,
                     slots: cutlass.Constexpr[int]):
    """Each lane loads `0.5 * c_sq` of columns ``first + lane + 32*t`` (t < slots) into registers, +inf past K.

    One coalesced load per slot for the whole warp, instead of one load per column per thread; the
    columns then reach the threads that need them through :func:`broadcast_half_norm`.
    """
    staged = cute.make_rmem_tensor(cute.make_layout(slots), cutlass.Float32)
    for t in cutlass.range_constexpr(slots):
        col = first + lane + 32 * t
        staged[t] = float("inf")
        if col < K:
            staged[t] = cutlass.Float32(0.5) * c_sq[col]
    return staged


@cute.jit
def broadcast_half_norm(staged: cute.Tensor, col_in_tile: cutlass.Int32, slot: cutlass.Constexpr[int]):
    """The half norm of tile column `col_in_tile`, held by lane col % 32 in register `slot` (= col // 32)."""
    return cute.arch.shuffle_sync(staged[slot], offset=col_in_tile % 32)

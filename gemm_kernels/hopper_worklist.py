"""The Hopper GEMM's work list: the planner's items as the int32 rows the kernel walks, in L2-friendly bands,
and the stream-K units that split a partial last wave along K.

    rows, partial_slots = work_rows(plan.items, band_rows_for(K), plan.slots, k_blocks, stream_k=False)
    rows, partial_slots = work_rows(plan.items, band_rows_for(K, 64), plan.slots, k_blocks, False, tile_m=64)

The planner (`gemm_kernels.waves.plan`, through `hopper_options.plan_for`) decides which items there are.
This module decides their order and encoding. A row is one or three segments (`hopper_options.segments`:
three with stream-K) of SEGMENT_COLS int32 each, (m0, n0, width, first K-block, K-blocks, role, flag, arg); a
segment with 0 K-blocks is absent. Slots take rows in list order (`HopperGemm.claim`), so the rows in flight
at any moment are neighbours in the banded raster, however the SMs drift.
Pure Python: no GPU, no CuTe DSL.
"""
from __future__ import annotations

from gemm_kernels import waves
from gemm_kernels.hopper_options import TILE_M, check_band_rows, segments

SEGMENT_COLS = 8
WHOLE, CONTRIBUTE, FINISH = 0, 1, 2   # roles: all of K -> C; a partial sum -> the workspace; add them -> C
BAND_A_BYTES = 32 * 2**20   # a band's rows of A (band_rows x tile_m x K bf16) must stay in L2 (`band_rows_for`)


def band_rows_for(K: int, tile_m: int = TILE_M) -> int:
    """Tile rows per band of the raster: the most of 16, 8, 4, 2, 1 whose rows of A (band_rows x tile_m x K
    bf16, tile_m the rows of one CTA's tile) fit in BAND_A_BYTES (32 MiB, about half the H200's L2), so the band's A stays resident while its windows
    of B stream past. 16 keeps a window of 132 tiles near square (8 x 8 CTA pairs); at K = 16384 it would
    need 64 MiB of A, and 8 rows read fewer DRAM bytes there. Measured with ncu on the H200, dynamic
    schedule (data/measured/h200/probes/ncu_dyn_*.txt): 16 rows beat 8 at 4096^3 (146 vs 187 MB) and
    8192^3 (1.49 vs 1.76 GB); 8 beat 16 at 16384^3 (16.4 vs 19.8 GB, torch.matmul reads 14.8)."""
    for rows in (16, 8, 4, 2):
        if rows * tile_m * K * 2 <= BAND_A_BYTES:
            return rows
    return 1


def banded(items, band_rows: int, tile_m: int = TILE_M):
    """The planner's items with the wide tiles in L2-friendly order; the narrow tail stays last. A band is
    `band_rows` rows of CTA tiles (`tile_m` rows each, whatever the cluster).

    Row-major order sends one wave of 132 tiles across ~4 tile rows and *every* column of B: at
    16384^3 that is 512 MiB of B per wave, far more than the 50 MiB L2. Walking the wide tiles in bands of
    `band_rows` tile rows, column by column within a band, makes a wave touch `band_rows` panels of A and
    ~132 / band_rows panels of B. Each slot still runs the same widths in the same order, so the planner's
    prediction is unchanged. band_rows=1 is the planner's own (row-major) order.

    The narrow tail stays last (its items are what make the last wave full) and is banded the same way: the
    planner lays it out row by row, the last few tile rows of C in narrow columns, and a wave of those in row
    order would read every column of B from DRAM once per row.
    """
    check_band_rows(band_rows)
    if band_rows == 1:
        return list(items)
    wide = max(t.width for t in items)
    key = lambda t: (t.m0 // (tile_m * band_rows), t.n0, t.m0)   # band_rows counts CTA rows of tiles
    return (sorted((t for t in items if t.width == wide), key=key)
            + sorted((t for t in items if t.width != wide), key=key))


def work_rows(items, band_rows: int, slots: int, k_blocks: int, stream_k: bool, tile_m: int = TILE_M):
    """The kernel's work list, one row per item (or stream-K unit), and how many partial-sum slots it uses.

    Each row holds `segments(stream_k)` segments of SEGMENT_COLS ints: (m0, n0, width, k0, k_count, role,
    flag, arg); `tile_m` is one CTA's rows (the bands' unit). Without stream-K every row is one WHOLE segment
    over all K-blocks. With it, the banded list's last partial wave and the full wave before it become
    `waves.stream_k` units, padded with empty rows to one per slot (`HopperGemm.claim` hands unit c to
    cluster c). A unit's whole middle item is a WHOLE segment. A segment that starts mid-item CONTRIBUTEs its
    partial sum to workspace slot `arg` and counts it on flag `flag`; the segment holding the item's first
    K-block is the FINISH, which waits for `arg` partials on `flag` (the item's first slot) and writes C."""
    ordered = banded(items, band_rows, tile_m)
    per_row = segments(stream_k)
    whole = lambda t: (t.m0, t.n0, t.width, 0, k_blocks, WHOLE, 0, 0)
    absent = (0, 0, 0, 0, 0, WHOLE, 0, 0)
    if not stream_k:
        return [whole(t) for t in ordered], 0
    full, units = waves.stream_k(len(ordered), slots, k_blocks)
    pieces = {}                                  # item -> its segments, in K order
    for unit in units:
        for seg in unit:
            pieces.setdefault(seg.item, []).append(seg)
    first_slot, slot_of, used = {}, {}, 0        # contributors of one item take consecutive slots
    for item in sorted(pieces):
        first_slot[item] = used
        for seg in pieces[item]:
            if seg.k0 > 0:
                slot_of[seg] = used
                used += 1

    def row(seg):
        t = ordered[seg.item]
        if seg.k0 == 0 and seg.k1 == k_blocks:
            return whole(t)
        if seg.k0 == 0:
            role, arg = FINISH, len(pieces[seg.item]) - 1
        else:
            role, arg = CONTRIBUTE, slot_of[seg]
        return (t.m0, t.n0, t.width, seg.k0, seg.k1 - seg.k0, role, first_slot[seg.item], arg)

    rows = [whole(t) + absent * (per_row - 1) for t in ordered[:full]]
    rows += [tuple(x for seg in unit for x in row(seg)) + absent * (per_row - len(unit)) for unit in units]
    if units:                                    # one unit row per slot: the kernel hands unit c to cluster c
        rows += [absent * per_row] * (slots - len(units))
    return rows, used

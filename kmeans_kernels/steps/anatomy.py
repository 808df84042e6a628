"""What one centroid tile costs a consumer thread, counted in the SASS: the one home of those numbers.

    anatomy.scan(art.sass)            # per tile and thread: scores, compare-selects by opcode, chain depth, ...
    anatomy.model(block_n=128, chains=1)   # the same quantities from the WGMMA layout, before compiling

The WGMMA accumulator of a warpgroup (64 x block_n fp32) gives each thread 2 rows and block_n / 4 columns of
every tile, so a thread computes 2 * block_n / 4 scores per tile (64 for 128-wide tiles), each one FADD
(half norm - dot) followed by a compare (FSETP) and two selects (FSEL for the score, SEL for the index; ptxas
sometimes folds two index selects into one predicated SEL). In a serial scan the compare of column j waits for
the score select of column j - 1: per row, a dependent chain of 2 instructions per column.

`scan` reads the compiled code: the scan block is the branch-free run with the most compare-selects
(`kmeans_kernels.sass_checks.scan_block`); every score is one FADD, which says how many tiles the block holds.
The guards that make a centroid past K lose (ISETP + FSEL per column in steps 1-2, per staged norm in 3-4) are
compare-selects too, and the first column's guard can start the chain: the measured depth is the model's plus
up to 2.
"""
from __future__ import annotations

from collections import Counter

import pandas as pd

from kmeans_kernels import sass_checks
from workbook import sass

ROWS_PER_THREAD = 2             # rows r0 and r0 + 8 of the warpgroup's 64 (PTX ISA, wgmma fragment of .m64nNk16)
OPCODES = ("FADD", "FSETP", "FSEL", "SEL", "ISETP", "LDG", "SHFL")


def scores_per_thread(block_n: int = 128) -> int:
    """Scores one consumer thread computes per centroid tile."""
    return ROWS_PER_THREAD * block_n // 4


def model(block_n: int = 128, chains: int = 1) -> dict[str, int]:
    """The per-thread, per-tile counts the layout predicts: scores, the scan's compare-selects (one compare and
    two selects per score), independent chains per thread (rows x chains per row) and the dependent depth of
    one chain (compare + score select per column it scans)."""
    scores = scores_per_thread(block_n)
    return {"scores": scores, "compare-selects": 3 * scores, "chains per thread": ROWS_PER_THREAD * chains,
            "chain depth": 2 * (block_n // 4) // chains}


def scan(sass_text: str, block_n: int = 128) -> dict[str, float]:
    """Per tile and thread, from the SASS: scores (FADD), each of OPCODES in the scan block, the compare-selects
    and the longest compare-select chain of the block (`kmeans_kernels.sass_checks`), and the loads and
    shuffles of the whole kernel (its tile loop is compiled once, so those are per tile too; SHFL then includes
    the 8 of the final lane merge: 2 rows x 2 steps x (score, index))."""
    block = sass_checks.scan_block(sass_text, after=None)
    ops = Counter(ins.base for ins in block)
    tiles = sass_checks.scan_tiles(block, block_n)
    if tiles <= 0:
        raise ValueError("no scores (FADD) in the scan block: is this a k-means step kernel's SASS?")
    whole = sass.histogram(sass_text, base=True)
    out = {"tiles in the scan block": tiles}
    out.update({op: ops[op] / tiles for op in OPCODES if op not in ("LDG", "SHFL")})
    out["compare-selects"] = sass_checks.compare_select_count(sass_text, after=None) / tiles
    out["chain depth"] = sass_checks.compare_select_depth(sass_text, after=None) / tiles
    out["LDG (kernel)"] = whole["LDG"]
    out["SHFL (kernel)"] = whole["SHFL"]
    return out


def table(artifacts: dict[str, object], block_ns: dict[str, int] | None = None) -> pd.DataFrame:
    """`scan` of several compiled steps, one column each, rounded to whole instructions."""
    cols = {name: scan(art.sass, (block_ns or {}).get(name, 128)) for name, art in artifacts.items()}
    return pd.DataFrame(cols).round(1).astype(object).map(lambda v: int(v) if float(v).is_integer() else v)

"""Evidence read from the machine code of the k-means kernels: what the PR changes should do to the SASS/PTX.

Generic SASS parsing lives in workbook.sass (`instructions`, `histogram`); this module knows what to look
for in *these* kernels:

* :func:`compare_select_depth` - the longest dependency chain through the compare-select ops of the
  argmin scan. A serial scan over a 128-column tile is one chain (FSETP -> FSEL -> FSETP ...), about
  2 x 128 deep; two independent chains (ILP2) halve it. This is the claim "two independent chains" as a
  number, computed from a def-use graph over registers and predicates, not from opcode names. Blackwell
  scans start after the TMEM load (`after="LDTM"`, the default); Hopper ones anywhere (`after=None`).
* :func:`scan_tiles` - how many centroid tiles a Hopper scan block scores: every score is one FADD.
* :func:`scan_instructions_per_score` - the CUDA-core work of a Hopper tile per score: the number the
  floor model's epilogue term counts (`kmeans_kernels.floor`), read from the machine code.
* :func:`unfenced_releases` - every release of a TMEM accumulator must come after a tcgen05.wait::ld
  that covers the tcgen05.ld before it (checked in PTX program order).
* :func:`named_barrier_syncs` / :func:`shared_stores` - the shared-memory norm buffer and its barriers,
  which the norm-broadcast variant removes.
"""
from __future__ import annotations

import re
from collections import Counter

from workbook.sass import Instruction, instructions

# The ops that compare two scores or select between (score, index) pairs: the links of an argmin chain.
COMPARE_SELECT = frozenset({"FSETP", "FSEL", "SEL", "FMNMX", "ISETP"})
# Ops that write two destinations: a predicate pair (the setp family) or a predicate and a register (SHFL).
_TWO_DESTS = frozenset({"FSETP", "ISETP", "DSETP", "HSETP2", "SHFL", "PLOP3"})
# Ops that write no register: stores, barriers, branches, the tensor-core/TMA issue ops.
_NO_DEST = ("ST", "STS", "STG", "STL", "BAR", "BRA", "SYNCS", "EXIT", "RET", "NOP", "WARPSYNC", "MEMBAR",
            "FENCE", "CALL", "BSYNC", "RED", "UTC", "UTMA", "ERRBAR", "DEPBAR", "CCTL", "BPT", "YIELD")
# R12, UR4, P0, UP1; RZ/URZ/PT/UPT are constants and carry no dependency
_REGISTER = re.compile(r"\b(U?R\d+|U?P\d+)\b")


def _writes(ins: Instruction) -> int:
    if ins.base in _TWO_DESTS:
        return 2
    if ins.base.startswith(_NO_DEST):
        return 0
    return 1


def _registers(operand: str) -> list[str]:
    return _REGISTER.findall(operand)


def scan_block(sass: str, after: str | None = "LDTM") -> list[Instruction]:
    """The instructions of the epilogue's scan: the branch-free run that holds the most compare-select ops,
    looked for after the first `after` instruction (Blackwell: the TMEM load, LDTM) or anywhere (None: Hopper,
    where the scores are already in registers when the WGMMA wait returns).

    The scan of one tile is straight-line code (its columns are unrolled); the code is cut at every branch
    (BRA) into runs, and the scan is the run where the compares are. In the x_resident kernel warp 0's MMA
    issue sits between the load and the scan, behind a branch of its own.
    """
    code = instructions(sass)
    start = 0
    if after is not None:
        start = next((i + 1 for i, ins in enumerate(code) if ins.base == after), None)
        if start is None:
            raise ValueError(f"no {after} in this SASS (a Blackwell scan starts after LDTM; for Hopper SASS "
                             f"pass after=None)")
    runs, run = [], []
    for ins in code[start:]:
        if ins.base == "BRA":
            runs.append(run)
            run = []
        else:
            run.append(ins)
    runs.append(run)
    return max(runs, key=lambda r: sum(ins.base in COMPARE_SELECT for ins in r))


def compare_select_depth(sass: str, ops: frozenset[str] = COMPARE_SELECT, after: str | None = "LDTM") -> int:
    """The longest chain of compare-select ops (`ops`) linked by def-use edges in the scan block.

    Walks the block in order, keeping for every register and predicate the depth of the chain that last
    wrote it. A guarded instruction (`@P0 ...`) may leave its destination unchanged, so it also reads it.
    """
    depth_of: dict[str, int] = {}
    longest = 0
    for ins in scan_block(sass, after):
        n_dest = _writes(ins)
        dests = [r for op in ins.operands[:n_dest] for r in _registers(op)]
        sources = [r for op in ins.operands[n_dest:] for r in _registers(op)]
        if ins.predicate:
            sources += _registers(ins.predicate) + dests
        depth = max((depth_of.get(r, 0) for r in sources), default=0) + (ins.base in ops)
        for r in dests:
            depth_of[r] = depth
        longest = max(longest, depth)
    return longest


def compare_select_count(sass: str, ops: frozenset[str] = COMPARE_SELECT, after: str | None = "LDTM") -> int:
    """How many compare-select ops the scan block holds (the work, as opposed to the depth)."""
    return sum(ins.base in ops for ins in scan_block(sass, after))


def scan_tiles(block: list[Instruction], block_n: int = 128) -> float:
    """How many `block_n`-wide centroid tiles a Hopper scan block (`scan_block(sass, after=None)`) scores.
    Every score is one FADD (half norm - dot), and a consumer thread scores 2 rows x block_n / 4 columns of
    each tile (the WGMMA accumulator layout, `kmeans_kernels.hopper._row_col_layout`)."""
    return sum(ins.base == "FADD" for ins in block) / (2 * block_n // 4)


# Ops of the next tile's WGMMA issue and the ring's barriers, which share the Hopper scan block with the scan
# but cost per tile, not per score; the uniform datapath's ops (U*) are that bookkeeping's too.
_MMA_ISSUE = frozenset({"HGMMA", "WARPGROUP", "R2UR", "SYNCS"})


def scan_instructions_per_score(sass: str, mma_issue: bool = False) -> float:
    """Instructions of the Hopper scan block (`scan_block(sass, after=None)`) per score it computes (one FADD
    each): the scan's compares and selects, the norm broadcast, the index bookkeeping. With `mma_issue`
    the next tile's WGMMA issue and the ring's barrier ops, which sit in the same block, are counted too."""
    block = scan_block(sass, after=None)
    if not mma_issue:
        block = [ins for ins in block if not (ins.base in _MMA_ISSUE or ins.base.startswith("U"))]
    return len(block) / sum(ins.base == "FADD" for ins in scan_block(sass, after=None))


# PTX lines that matter for the TMEM hand-back: the asynchronous load, its wait, and plain mbarrier arrives
# (an arrive without expect_tx is a consumer release; TMA producers use arrive.expect_tx, MMA commits use
# tcgen05.commit)
_PTX_TMEM_LOAD = re.compile(r"^\s*tcgen05\.ld\b")
_PTX_TMEM_WAIT = re.compile(r"^\s*tcgen05\.wait::ld\b")
_PTX_RELEASE = re.compile(r"^\s*(@%p\d+\s+)?mbarrier\.arrive(?!\.expect_tx)[.\w]*\s")


def unfenced_releases(ptx: str) -> tuple[int, list[int]]:
    """(releases after a TMEM load, line numbers of those not fenced) in PTX program order.

    A release is fenced when a tcgen05.wait::ld comes between the last tcgen05.ld and the arrive.
    Releases before any TMEM load (none in these kernels) are not counted.
    """
    pending = False  # a tcgen05.ld issued and not yet waited for
    seen_load = False
    releases, unfenced = 0, []
    for number, line in enumerate(ptx.splitlines(), start=1):
        if _PTX_TMEM_LOAD.match(line):
            pending = seen_load = True
        elif _PTX_TMEM_WAIT.match(line):
            pending = False
        elif _PTX_RELEASE.match(line) and seen_load:
            releases += 1
            if pending:
                unfenced.append(number)
    return releases, unfenced


_PTX_BAR_SYNC = re.compile(r"^\s*(?:bar|barrier)(?:\.cta)?\.sync(?:\.aligned)?\s+(\d+)")


def named_barrier_syncs(ptx: str) -> Counter:
    """How many `bar.sync id` the PTX issues, by barrier id (0 is __syncthreads)."""
    return Counter(int(m.group(1)) for line in ptx.splitlines() if (m := _PTX_BAR_SYNC.match(line)))


def shared_stores(ptx: str) -> int:
    """How many `st.shared` the PTX issues (TMA and mbarrier traffic do not use st.shared)."""
    return sum(1 for line in ptx.splitlines() if re.match(r"^\s*(@%p\d+\s+)?st\.shared\b", line))

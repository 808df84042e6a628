"""Checkers for the primer's exercises: `check(name, answer)` says whether `answer` is right, computing the
true answer from the lesson modules (so no answer is written down here), and gives a hint when it is not.

    check("offset", answer)           # an int: the offset of (3, 5) in (8,16):(16,1)
    check("owner", answer)            # (thread, value): who holds element (9, 10) of a 64 x 16 WGMMA accumulator
    check("tx_bytes", answer)         # an int: the transaction count of one (64, 64) bf16 TMA tile
    check("phase", answer)            # (index, phase) of a 4-stage consumer state after 6 advances
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Exercise:
    question: str
    truth: Callable[[], Any]
    hint: str


def _offset():
    from workbook.primer import layouts
    return int(layouts.offsets((8, 16), (16, 1))[3, 5])


def _owner():
    from workbook.primer import layouts
    thread, value = layouts.mma_accumulator_owners(16)
    return int(thread[9, 10]), int(value[9, 10])


def _tx_bytes():
    import cutlass
    from workbook.primer import tma_copy
    return tma_copy.tx_bytes(cutlass.BFloat16, (64, 64))


def _phase():
    from workbook.primer import pipeline
    return pipeline.phases(7, stages=4)[6]


EXERCISES = {
    "offset": Exercise("the offset of coordinate (3, 5) in the layout (8,16):(16,1)", _offset,
                       "offset = sum of coordinate x stride, mode by mode"),
    "owner": Exercise("(thread, value index) holding element (row 9, column 10) of a 64 x 16 WGMMA accumulator",
                      _owner, "a warp owns 16 rows; lane l holds row l // 4 (and + 8) and columns 2 (l % 4) + "
                              "{0, 1} of every 8-column group; values go (col, row + 8, next 8 columns)"),
    "tx_bytes": Exercise("the mbarrier transaction count for one (64, 64) bf16 TMA tile", _tx_bytes,
                         "every element of the box counts, 2 bytes each, even the part past the tensor's edge"),
    "phase": Exercise("(index, phase) a 4-stage consumer pipeline state waits for after 6 advances", _phase,
                      "the index wraps every 4 steps, and the phase flips each time it wraps"),
}


def check(name: str, answer) -> bool:
    """Print whether `answer` to exercise `name` is right (and a hint if not); return True if it is."""
    if name not in EXERCISES:
        raise KeyError(f"no exercise {name!r}; there are {sorted(EXERCISES)}")
    ex = EXERCISES[name]
    truth = ex.truth()
    ok = _same(answer, truth)
    print(f"{'Right' if ok else 'Not quite'}: {ex.question} is {truth if ok else '...'}"
          + ("" if ok else f" (you said {answer!r}). Hint: {ex.hint}"))
    return ok


def _same(answer, truth) -> bool:
    if isinstance(truth, tuple):
        return isinstance(answer, (tuple, list)) and len(answer) == len(truth) and \
            all(_same(a, t) for a, t in zip(answer, truth))
    try:
        return int(answer) == truth and float(answer) == float(truth)
    except (TypeError, ValueError):
        return False

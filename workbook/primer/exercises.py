"""Checkers for the primer's exercises: `check(name, answer)` says whether `answer` is right, computing the
true answer from the lesson modules (so no answer is written down here), and gives a hint when it is not.

    check("bound", answer)            # an int: the bounds check's immediate in vector_add compiled for length 1000
    check("offset", answer)           # an int: the offset of (3, 9) in (8,(4,4)):(4,(1,32))
    check("owner", answer)            # (thread, value): who holds element (41, 13) of a 64 x 16 WGMMA accumulator
    check("tx_bytes", answer)         # an int: the bytes wgmma_tile's barrier expects for K = 64, n_tile = 128
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


def _bound():
    from workbook import sass
    from workbook.primer import vector_add
    (check,) = [i for i in sass.instructions(vector_add.compile("sm_90a", n=1000).sass) if i.base == "ISETP"]
    return int(next(op for op in check.operands if op.startswith("0x")), 16)


def _offset():
    from workbook.primer import layouts
    return int(layouts.offsets((8, (4, 4)), (4, (1, 32)))[3, 9])


def _owner():
    from workbook.primer import layouts
    thread, value = layouts.mma_accumulator_owners(16)
    return int(thread[41, 13]), int(value[41, 13])


def _tx_bytes():
    from workbook.primer import wgmma_tile
    return wgmma_tile.tx_bytes(64, 128)


def _phase():
    from workbook.primer import pipeline
    return pipeline.phases(7, stages=4)[6]


EXERCISES = {
    "bound": Exercise("the immediate (in decimal) of vector_add's bounds check compiled for length 1000", _bound,
                      "with n known, `if i < n` becomes 'exit if i > something'; which something keeps i = n - 1?"),
    "offset": Exercise("the offset of coordinate (3, 9) in the layout (8,(4,4)):(4,(1,32))", _offset,
                       "offset = sum of coordinate x stride, mode by mode; a nested mode first splits its "
                       "coordinate column-major: 9 in (4,4) is (9 % 4, 9 // 4)"),
    "owner": Exercise("(thread, value index) holding element (row 41, column 13) of a 64 x 16 WGMMA accumulator",
                      _owner, "a warp owns 16 rows; lane l holds row l // 4 (and + 8) and columns 2 (l % 4) + "
                              "{0, 1} of every 8-column group; values go (col, row + 8, next 8 columns)"),
    "tx_bytes": Exercise("the transaction count wgmma_tile arms its mbarrier with for K = 64, n_tile = 128",
                         _tx_bytes, "one barrier waits for both boxes: A is (64, K), B is (n_tile, K), bf16; every "
                                    "element of a box counts, even past the tensor's edge"),
    "phase": Exercise("(index, phase) a 4-stage consumer pipeline state waits for after 6 advances", _phase,
                      "the index wraps every 4 steps, and the phase flips each time it wraps"),
}


def check(name: str, answer) -> bool:
    """Print whether `answer` to exercise `name` is right (and a hint if not); return True if it is."""
    if name not in EXERCISES:
        raise KeyError(f"no exercise {name!r}; there are {sorted(EXERCISES)}")
    ex = EXERCISES[name]
    return check_value(ex.question, answer, ex.truth(), ex.hint)


def check_value(question: str, answer, truth, hint: str) -> bool:
    """The checker for an exercise defined elsewhere (a notebook, another package): `truth` is computed by
    the caller; integers and tuples of integers must match exactly. Prints the verdict; returns it."""
    ok = _same(answer, truth)
    print(f"{'Right' if ok else 'Not quite'}: {question} is {truth if ok else '...'}"
          + ("" if ok else f" (you said {answer!r}). Hint: {hint}"))
    return ok


def _same(answer, truth) -> bool:
    if isinstance(truth, tuple):
        return isinstance(answer, (tuple, list)) and len(answer) == len(truth) and \
            all(_same(a, t) for a, t in zip(answer, truth))
    if isinstance(answer, bool) or answer is None:
        return False
    try:
        return int(answer) == truth and float(answer) == float(truth)
    except (TypeError, ValueError, OverflowError):
        return False

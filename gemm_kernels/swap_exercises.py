"""The exercise of notebook 17 (swapped operands), with a checker that computes its answer from the planner's
arithmetic (`swap_ab.widths`), so no answer is typed in here.

    from gemm_kernels import swap_exercises as ex
    print(ex.question())
    ex.check({96: (80, 3), 128: (60, 2), 288: (30, 1)})   # a workbook.exercises.Verdict (never the answer)
    ex.solution()                                          # the worked answer, for the folded-away cell
"""
from __future__ import annotations

from gemm_kernels import swap_ab, waves
from gemm_kernels.hopper_options import TILE_M
from workbook import gpus
from workbook.exercises import Verdict

SHAPE = (1500, 2504)     # M x N of the rule check's odd shape 1500 x 2504 x 3000
WIDTHS = (96, 128, 288)  # three of the swapped candidates' widths (configs.HOPPER_CANDIDATES, "... swapped")
CLUSTER = 4              # their CTAs per cluster, along N


def _table():
    return swap_ab.widths(*SHAPE, cluster=CLUSTER, gpu=gpus.H200, choices=WIDTHS)


def answer() -> dict[int, tuple[int, int]]:
    """{width: (items, makespan)}."""
    t = _table()
    return {int(w): (int(r["items"]), int(r["makespan"])) for w, r in t.iterrows()}


def question() -> str:
    M, N = SHAPE
    return (f"c is {M} x {N}, swapped: each item is {CLUSTER} CTAs along N ({CLUSTER} x {TILE_M} = {CLUSTER * TILE_M} "
            f"columns of N) by one tile of M rows, and an H200 runs {waves.slots_for(gpus.H200, CLUSTER)} such "
            f"clusters at once. For each width {WIDTHS}: how many items, and what makespan (items of the busiest "
            "cluster)? Answer with {width: (items, makespan), ...}.")


def check(given) -> Verdict:
    want = answer()
    try:
        got = {int(w): (int(v[0]), int(v[1])) for w, v in dict(given).items()}
    except (TypeError, ValueError, IndexError):
        return Verdict(False, "answer with a dict {width: (items, makespan)} for the widths " + str(WIDTHS))
    if set(got) != set(want):
        return Verdict(False, f"give all three widths, {WIDTHS}, and only those")
    items_wrong = [w for w in want if got[w][0] != want[w][0]]
    if items_wrong:
        return Verdict(False, f"the items at width {items_wrong[0]} are off: tiles along M (ceil(M / width)) times "
                              f"items along N (ceil(N / {CLUSTER * TILE_M}))")
    span_wrong = [w for w in want if got[w][1] != want[w][1]]
    if span_wrong:
        return Verdict(False, f"the items are right; the makespan at width {span_wrong[0]} is not: ceil(items / "
                              "clusters at once)")
    best = min(want, key=lambda w: (want[w][1] * w, w))
    return Verdict(True, f"by the wave model alone (makespan x width) {best} wins; set that beside the loads per MAC "
                         "and the measured times (section 5).")


def solution() -> str:
    M, N = SHAPE
    slots = waves.slots_for(gpus.H200, CLUSTER)
    along_n = -(-N // (CLUSTER * TILE_M))
    lines = [f"items along N: ceil({N} / {CLUSTER * TILE_M}) = {along_n}; clusters at once: {slots}"]
    for w, (items, span) in answer().items():
        lines.append(f"  width {w:>3}: ceil({M} / {w}) = {-(-M // w):>2} tiles along M -> {items:>3} items, "
                     f"makespan ceil({items} / {slots}) = {span}, makespan x width = {span * w}")
    return "\n".join(lines)

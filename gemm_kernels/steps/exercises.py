"""Exercises of the GEMM walkthrough, each with a checker that computes the answer from the library itself
(gemm_kernels.stages, gemm_kernels.waves), so no answer is typed in here.

    from gemm_kernels.steps import exercises
    print(exercises.question("stages"))
    exercises.check("stages", 5)          # -> a workbook.exercises.Verdict: right, or a hint (never the answer)
    exercises.solution("stages")          # the worked answer, for the folded-away cell

Names: "stages" (notebook 10), "stage_gain" (11), "waves" and "balance" (12), "cluster_bytes" (13).
"""
from __future__ import annotations

from workbook import gpus
from workbook.exercises import Verdict


def _stages(tile, epilogue):
    from gemm_kernels.stages import stages
    extra = dict(epilogue_tile=(128, 32), epilogue_buffers=2) if epilogue == "staged" else {}
    return stages(tile, epilogue, "sm_90a", **extra)


def _plan(M, N, schedule):
    from gemm_kernels.steps import step4_persistent_wave_tail as step4
    return step4.plan(M, N, schedule=schedule, gpu=gpus.H200)


STAGE_TILE = (128, 192, 64)
GAIN_WIDTHS = (64, 128, 192, 256)
WAVE_SHAPE = (2048, 6656)
CLUSTER_SHAPE, CLUSTER_TILE = (1024, 1024), (128, 64, 64)


def _cluster_2x2():
    """(the options, their work items at CLUSTER_SHAPE, the clusters the H200 holds at once), from the planner."""
    from gemm_kernels import hopper_options
    options = hopper_options.Options(tile=CLUSTER_TILE, schedule="uniform", cluster_m=2, cluster_n=2)
    plan = hopper_options.plan_for(*CLUSTER_SHAPE, options, gpus.H200)
    return options, len(plan.items), plan.slots


def _answer(name: str):
    if name == "stages":
        return _stages(STAGE_TILE, "staged").stages
    if name == "stage_gain":
        return {w for w in GAIN_WIDTHS
                if _stages((128, w, 64), "register").stages > _stages((128, w, 64), "staged").stages}
    if name == "waves":
        uniform = _plan(*WAVE_SHAPE, "uniform")
        return round(uniform.waves, 2), uniform.makespan
    if name == "balance":
        balanced = _plan(*WAVE_SHAPE, "balanced")
        return balanced.narrow, balanced.makespan
    if name == "cluster_bytes":
        options, items, slots = _cluster_2x2()
        return options.k_block_load_bytes() / 1024, items, -(-items // slots)
    raise ValueError(f"no exercise {name!r}; exercises: {sorted(QUESTIONS)}")


QUESTIONS = {
    "stages": f"Step 1's ring on a {STAGE_TILE[0]} x {STAGE_TILE[1]} x {STAGE_TILE[2]} tile on the H200 (227 KiB per "
              "CTA, 1 KiB for barriers, the staged epilogue's two 128 x 32 bf16 sub-tile buffers): how many stages "
              "fit? Answer with an int.",
    "stage_gain": f"For which of the tile widths {GAIN_WIDTHS} (128 rows, 64-deep bf16 stages, H200) does "
                  "replacing the staged epilogue (16 KiB of buffers) by the register one buy at least one more "
                  "stage? Answer with a set of ints.",
    "waves": f"{WAVE_SHAPE[0]} x {WAVE_SHAPE[1]} in uniform 128 x 256 tiles on the H200's 132 SMs, one tile per "
             "SM at a time, item i on SM i % 132: how many waves is that (items / slots, 2 decimals), and what is "
             "the makespan in tile times? Answer with (waves, makespan).",
    "balance": f"Balance {WAVE_SHAPE[0]} x {WAVE_SHAPE[1]} with step 4's rule (groups of g 256-wide tiles re-cut into "
               "g + 1 tiles of width 256 g / (g + 1), widths in steps of 16, the narrow tiles last): which narrow "
               "width gives the shortest predicted makespan, and what is it (in 256-wide tile times)? Answer "
               "with (width, makespan).",
    "cluster_bytes": f"{CLUSTER_TILE[0]} x {CLUSTER_TILE[1]} bf16 tiles, 64-deep K-blocks, in 2 x 2 clusters (A shared "
                     "by the two CTAs of a row, B by the two of a column, each loading half of what it shares): how "
                     "many KiB does one CTA load from L2 per K-block; how many four-CTA work items does "
                     f"{CLUSTER_SHAPE[0]} x {CLUSTER_SHAPE[1]} make; and in how many waves do they run on the H200, "
                     f"which holds {gpus.H200.cluster_quads} four-CTA clusters at a time? Answer with (KiB, items, "
                     "waves).",
}

HINTS = {
    "stages": "A stage holds 128 x 64 of A and 64 x 192 of B, 2 bytes each. Subtract the buffers and the "
              "reserve from 227 KiB and divide, rounding down.",
    "stage_gain": "For each width: stage = (128 + width) x 64 x 2 bytes; compare floor((227 - 1 - 16) KiB / stage) "
                  "with floor((227 - 1) KiB / stage).",
    "waves": "Count the tiles: ceil(M / 128) x ceil(N / 256). The makespan is the number of tiles the busiest SM "
             "runs.",
    "balance": "(-tiles) mod 132 re-cuts fill the last wave. For each width w, the busiest SM runs some wide and "
               "some narrow tiles: add their widths and divide by 256. gemm_kernels.waves.alternatives lists "
               "every candidate.",
    "cluster_bytes": "Per CTA: half of a tile_m x 64 A tile plus half of a 64 x tile_n B tile, 2 bytes each. An "
                     "item covers 2 tile_m rows and 2 tile_n columns; waves round up.",
}


def question(name: str) -> str:
    if name not in QUESTIONS:
        raise ValueError(f"no exercise {name!r}; exercises: {sorted(QUESTIONS)}")
    return QUESTIONS[name]


def _close(a, b) -> bool:
    try:
        return abs(float(a) - float(b)) <= 0.005 + 1e-9 * abs(float(b))
    except (TypeError, ValueError):
        return False


def check(name: str, answer) -> Verdict:
    """Compare `answer` with the library's; the message is a hint when it differs (never the answer)."""
    expected = _answer(name)
    if isinstance(expected, tuple):      # (waves, makespan) or (width, makespan): numbers to 2 decimals
        ok = (isinstance(answer, (tuple, list)) and len(answer) == len(expected)
              and all(_close(a, e) for a, e in zip(answer, expected)))
    elif isinstance(expected, set):
        ok = isinstance(answer, (set, frozenset, list, tuple)) and set(answer) == expected
    else:
        ok = not isinstance(answer, bool) and answer == expected
    return Verdict(ok, "it matches gemm_kernels' own arithmetic." if ok else HINTS[name])


def solution(name: str) -> str:
    """The worked answer, computed."""
    expected = _answer(name)
    if name == "stages":
        b = _stages(STAGE_TILE, "staged")
        return f"{expected}: {b.describe()}"
    if name == "stage_gain":
        lines = [f"width {w}: staged {_stages((128, w, 64), 'staged').stages}, register "
                 f"{_stages((128, w, 64), 'register').stages}" for w in GAIN_WIDTHS]
        return f"{expected}:\n" + "\n".join(lines)
    if name == "waves":
        return f"{expected}: {_plan(*WAVE_SHAPE, 'uniform').describe()}"
    if name == "cluster_bytes":
        options, items, slots = _cluster_2x2()
        m, n, k = CLUSTER_TILE
        return (f"{expected}: ({m} x {k} / 2 + {k} x {n} / 2) x 2 bytes = {options.k_block_load_bytes()} bytes; "
                f"{items} items of {2 * CLUSTER_TILE[0]} x {2 * CLUSTER_TILE[1]} on {slots} clusters")
    return f"{expected}: {_plan(*WAVE_SHAPE, 'balanced').describe()}"

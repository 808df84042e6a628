"""The walkthrough's exercises and the functions that check them (the answers are computed, never typed here).

    from kmeans_kernels.steps import exercises
    exercises.chain_depth(60)                 # notebook 04: predict, then the checker says and shows the SASS
    exercises.tie_rule("my_steps/step1_serial.py")   # break the tie rule in your copy: is it caught?

Each checker returns a `workbook.exercises.Verdict` that renders as text and in a notebook. Where the answer follows from the
kernel, the checker computes it from the step module (`kmeans_kernels.steps.anatomy`, `stages_for`, ...) and
confirms it in the compiled SASS, so a checker cannot drift from the code it is about.
"""
from __future__ import annotations

import re
from pathlib import Path

from kmeans_kernels import sass_checks
from kmeans_kernels.steps import anatomy
from workbook import gpus, sass, stepper
from workbook.exercises import Verdict


def _number(answer, what: str) -> float:
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise ValueError(f"answer with a number ({what}), got {answer!r}")
    return float(answer)


def _compiled(step_name: str, D: int = 128):
    from kmeans_kernels.steps import trial
    return trial.compiled(stepper.load(f"kmeans_kernels.steps.{step_name}"), D)


# ---------------------------------------------------------------------------------------------------- notebook 04

def scores_per_tile(answer) -> Verdict:
    """How many scores does one consumer thread compute per 128-wide centroid tile?"""
    want = anatomy.scores_per_thread(128)
    got = _number(answer, "scores per thread and tile")
    return Verdict(got == want, f"each thread holds {anatomy.ROWS_PER_THREAD} rows x 128 / 4 = {128 // 4} columns "
                                f"of the 64 x 128 accumulator: {want} scores per tile." if got == want else
                   "Count the rows and the columns of the tile one thread holds in the WGMMA layout (section 2).")


def compare_selects(answer) -> Verdict:
    """How many compare-select instructions does the scan of one tile cost a thread (one compare and two selects
    per score; leave out the guards for centroids past K)?"""
    want = anatomy.model(128, chains=1)["compare-selects"]
    got = _number(answer, "compare-selects per thread and tile")
    measured = anatomy.scan(_compiled("step1_serial").sass)
    note = (f"The SASS of step 1 holds {measured['compare-selects']:.0f}: {measured['FSETP']:.0f} FSETP + "
            f"{measured['FSEL']:.0f} FSEL + {measured['SEL']:.0f} SEL + {measured['ISETP']:.0f} ISETP, i.e. the "
            f"guards (an ISETP and an FSEL per column) on top, and some index selects folded into one predicated "
            f"SEL by ptxas.")
    return Verdict(got == want, (f"{anatomy.scores_per_thread(128)} scores x 3 = {want}. " + note) if got == want
                   else "One FSETP, one FSEL (the score) and one SEL (the index) per score; how many scores?")


def chain_depth(answer) -> Verdict:
    """In step 1, how many dependent compare-select instructions does one row's chain hold per tile?"""
    want = anatomy.model(128, chains=1)["chain depth"]
    got = _number(answer, "chain depth per row and tile")
    measured = anatomy.scan(_compiled("step1_serial").sass)["chain depth"]
    return Verdict(got == want, (f"32 columns per row, each an FSETP then the FSEL the next FSETP reads: {want}. "
                                 f"The SASS says {measured:.0f}: the first column's guard (ISETP, FSEL) starts the "
                                 "chain.") if got == want else
                   "Per row a thread scans 32 columns; which instructions of one column wait for the column before?")


# ---------------------------------------------------------------------------------------------------- notebook 05

def ilp2_depth(answer) -> Verdict:
    """In step 2, how deep is the longest compare-select chain per tile?"""
    want = anatomy.model(128, chains=2)["chain depth"]
    got = _number(answer, "chain depth per tile with two chains")
    measured = anatomy.scan(_compiled("step2_ilp2").sass)["chain depth"]
    return Verdict(got == want, (f"each chain scans 16 of the row's 32 columns: {want}; the SASS says "
                                 f"{measured:.0f} (the guard again). The instruction count did not change.")
                   if got == want else "Two chains share a row's 32 columns; how many does each scan?")


def independent_chains(answer) -> Verdict:
    """How many independent compare-select chains does one thread of step 1 already run?"""
    want = anatomy.model(128, chains=1)["chains per thread"]
    got = _number(answer, "independent chains per thread in step 1")
    return Verdict(got == want, f"one per row, and a thread holds {want} rows (r0 and r0 + 8): ILP2 makes it "
                                f"{anatomy.model(128, chains=2)['chains per thread']}." if got == want else
                   "How many rows of the accumulator does one thread hold?")


# ---------------------------------------------------------------------------------------------------- notebook 06

def norm_traffic(loads, shuffles, block_n: int = 128) -> Verdict:
    """With the norm broadcast (step 3; block_n=256: step 4's wide tiles), how many global loads and how many
    shuffles does a thread issue per tile for the half norms?"""
    want_loads, want_shuffles = block_n // 32, block_n // 4
    got = (_number(loads, "loads"), _number(shuffles, "shuffles"))
    right = got == (want_loads, want_shuffles)
    if not right:
        return Verdict(False, f"A warp needs {block_n} distinct norms and 32 lanes load them; every thread scores "
                              f"{block_n // 4} columns per row.")
    if block_n == 128:
        counts = anatomy.scan(_compiled("step3_norm_broadcast").sass)
    else:
        from kmeans_kernels.steps import trial
        counts = anatomy.scan(trial.compiled(stepper.load("kmeans_kernels.steps.step4_hopper"), 128, wide=True).sass,
                              block_n)
    return Verdict(True, f"{want_loads} loads (columns lane + 32t, t < {want_loads}) and {want_shuffles} shuffles "
                         f"(one per column the thread scores). The SASS: {counts['LDG (kernel)']:.0f} LDG and "
                         f"{counts['SHFL (kernel)']:.0f} SHFL, 8 of them the final lane merge.")


# ---------------------------------------------------------------------------------------------------- notebook 07

def two_ctas_up_to(answer) -> Verdict:
    """Up to which D (a multiple of 16) does step 4 (128-wide tiles) run two CTAs per SM?"""
    step4 = stepper.load("kmeans_kernels.steps.step4_hopper")
    want = max(D for D in range(16, 513, 16) if step4.ctas_per_sm(D) == 2)
    got = _number(answer, "the largest D with two CTAs per SM")
    return Verdict(got == want, (f"D = {want}: the point tile (128 x D x 2 bytes) and {step4.MIN_STAGES_TWO_CTAS} "
                                 f"ring slots of 16 KiB must fit half of the SM's 228 KiB (less 1 KiB per CTA).")
                   if got == want else "Half an SM: 116 KiB less the reserved 1 KiB; the point tile plus 3 slots of "
                                       "16 KiB and 1 KiB of barriers must fit.")


def register_cap(answer) -> Verdict:
    """With two CTAs of 288 threads per SM, how many registers may a thread use at most?"""
    want = gpus.register_cap(288, 2)
    got = _number(answer, "registers per thread")
    art = _compiled("step4_hopper")
    regs = max(sass.registers(art.cubin).values())
    if got == want:
        return Verdict(True, f"The 18 warps are dealt to the SM's four sub-partitions in turn, so one holds 5, and a "
                             f"sub-partition has 16384 registers: 16384 / (5 x 32) = 102, in steps of 8: {want}. "
                             f"ptxas gave step 4 {regs}.")
    hint = ("65536 / (2 x 288) = 113, in steps of 8 would be 112; but the register file is four sub-partitions of "
            "16384, one per warp scheduler, and each warp's registers come from one of them." if got == 112 else
            "65536 registers per SM, shared by 2 CTAs of 9 warps; a warp's registers come in steps of 256.")
    return Verdict(False, hint)


def ring_slots(answer, D: int = 128) -> Verdict:
    """How many ring slots does step 4 (128-wide tiles, two CTAs per SM) get at D?"""
    step4 = stepper.load("kmeans_kernels.steps.step4_hopper")
    want = step4.stages_for(D)
    got = _number(answer, "ring slots")
    x_kib = step4.BLOCK_M * D * 2 / 1024
    return Verdict(got == want, (f"half an SM is 114 KiB, less 1 KiB the hardware reserves per CTA; the point "
                                 f"tile takes {x_kib:g} KiB and the barriers 1 KiB: {want} slots of 16 KiB (step 3, "
                                 f"alone on the SM, had "
                                 f"{stepper.load('kmeans_kernels.steps.step3_norm_broadcast').stages_for(D)}).")
                   if got == want else f"(228 KiB / 2 - 1 KiB reserved - {x_kib:g} KiB point tile - 1 KiB barriers) "
                                       "/ 16 KiB per slot, rounded down.")


def folded_slots(answer, D: int = 64) -> Verdict:
    """How many ring slots does the production `folded_norms` get at D, where each slot also holds its tile's
    128 fp32 norms (`kmeans_kernels.hopper.stages_for(D, 128, staged_norms=True)`)?"""
    from kmeans_kernels import hopper
    want = hopper.stages_for(D, hopper.BLOCK_N, staged_norms=True)
    got = _number(answer, "ring slots")
    plain = hopper.stages_for(D, hopper.BLOCK_N)
    x_kib = hopper.BLOCK_M * D * 2 / 1024
    room = (hopper.SM_SMEM_BYTES // 2 - hopper.CTA_SMEM_RESERVED) / 1024 - x_kib - 1
    return Verdict(got == want, (f"{room:g} KiB after the point tile and the barriers, 16.5 KiB per slot (16 KiB of "
                                 f"centroids + 0.5 KiB of norms): {want} slots, against {plain} for lean_ping_pong.")
                   if got == want else f"({room:g} KiB left for the ring) / (16 KiB of centroids + 128 x 4 bytes of "
                                       "norms per slot), rounded down.")


# ---------------------------------------------------------------------------------------------------- edit and run

def tie_rule(path) -> Verdict:
    """Your copy of step 1 or 2 with the scan's strict `<` made `<=`: is the change in the machine code, and does
    the check catch it? On an H100/H200 this runs `try_step`'s check; elsewhere it reads the SASS."""
    from kmeans_kernels.steps import trial
    module = stepper.load(path)
    name = trial.step_name(module)
    original = trial.package_step(name)

    def compares(art):
        return {ins.opcode for ins in sass_checks.scan_block(art.sass, after=None) if ins.base == "FSETP"}

    mine, theirs = compares(trial.compiled(module)), compares(trial.compiled(original))
    if mine == theirs:
        return Verdict(False, f"the scan's compares are unchanged ({sorted(theirs)}): edit `take = s < score` in "
                              f"scan_tile of {Path(path).name}, then call this again.")
    said = f"The scan's compares changed from {sorted(theirs)} to {sorted(mine)}."
    if not trial.on_hopper():
        return Verdict(True, said + " No GPU here to run it: on an H100/H200, expect try_step(path) to report "
                                    "'ties across tiles' and 'all centroids equal' wrong, since a later equal column "
                                    "now replaces the holder within a lane.")
    failed = [c.case for c in trial.check_step(module) if not c.passed]
    caught = any("tie" in f or "equal" in f for f in failed)
    return Verdict(caught, said + (f" The check caught it: {', '.join(failed)} failed." if caught else
                                   " The check did not catch it: did the edit make equal scores win?"))


def tile_size(path, accumulator_registers) -> Verdict:
    """Your copy of step 1 with another BLOCK_N (64 or 256): predict the fp32 accumulator registers per thread;
    the checker compiles your copy and reads the WGMMA shape and the ring depth from it."""
    module = stepper.load(path)
    block_n = module.BLOCK_N
    want = 64 * block_n // 128
    got = _number(accumulator_registers, "accumulator registers per thread")
    from kmeans_kernels.steps import trial
    art = trial.compiled(module)
    shapes = sorted({m.group(0) for m in re.finditer(r"HGMMA\.64x\d+x16", art.sass)})
    facts = (f"BLOCK_N = {block_n}: a 64 x {block_n} fp32 accumulator over 128 threads is {want} registers; the "
             f"SASS issues {', '.join(shapes)}, and the ring holds {module.stages_for(128)} slots at D = 128.")
    return Verdict(got == want, facts if got == want else f"64 x {block_n} fp32 values shared by a warpgroup's 128 "
                                                          "threads: how many each?")

"""The exercise of notebook 16 (the per-shape rule), with a checker that computes its answer from the committed
rule (`gemm_kernels.rule.learned()`), so no answer is typed in here.

    from gemm_kernels import rule_exercises as ex
    print(ex.question())
    ex.check(("128 stream-k cluster1", {(16, 4096, 4096), ...}))   # a workbook.exercises.Verdict (never the answer)
    ex.solution()                                                   # the worked answer, for the folded-away cell
"""
from __future__ import annotations

import math

from gemm_kernels import rule as rules
from gemm_kernels import sweep_plot
from workbook.exercises import Verdict

# a decode step of 24 tokens through an 11008-wide projection: between measured skinny shapes, with no tie
# for the third-nearest one (see `neighbours`)
SHAPE = (24, 11008, 4096)


def neighbours(rule: rules.Rule, M: int, N: int, K: int) -> list[tuple[tuple[int, int, int], float]]:
    """The measured shapes the rule averages over for (M, N, K), nearest first, with their squared distance in
    (log2 M, log2 N, log2 K): the same ones `Rule.choose` takes."""
    return [(rule.shapes[i], d) for i, d in rule.neighbours(M, N, K)]


def _rule() -> rules.Rule:
    found = rules.learned()
    if found is None:
        raise RuntimeError(f"no learned rule ({rules.RULE_FILE.name}): python -m gemm_kernels.rule --fit")
    return found


def answer() -> tuple[str, set[tuple[int, int, int]]]:
    r = _rule()
    return r.choose(*SHAPE), {s for s, _ in neighbours(r, *SHAPE)}


def question() -> str:
    M, N, K = SHAPE
    return (f"gemm(a, b) on {M} x {N} x {K} (a shape the sweep did not measure): which measured shapes does the "
            f"rule average over (its {rules.NEIGHBOURS} nearest in log2 M, log2 N, log2 K), and which "
            "configuration does it pick? Answer with (configuration name, {(M, N, K), ...}).")


def check(given) -> Verdict:
    config, shapes = answer()
    try:
        name, near = given
        near = {tuple(int(v) for v in s) for s in near}
    except (TypeError, ValueError):
        return Verdict(False, "answer with a pair: (a name of configs.HOPPER_CANDIDATES, a set of (M, N, K) tuples)")
    if near != shapes:
        right = len(near & shapes)
        return Verdict(False, f"{right} of your {len(near)} shapes are among the {len(shapes)} nearest. Compare "
                              "(log2 M - log2 24)^2 + ... over the skinny shapes of sweep.SHAPES; M = 16 is nearer "
                              "to 24 than M = 64 is.")
    if name not in (config, sweep_plot.short_name(config)):
        return Verdict(False, "the shapes are right. Now average each candidate's log score over them "
                              "(rule.learned().scores) and take the lowest.")
    return Verdict(True, f"{config} ({sweep_plot.short_name(config)}), from " +
                   ", ".join("x".join(map(str, s)) for s in sorted(shapes)) + ".")


def solution() -> str:
    r = _rule()
    config, _ = answer()
    lines = [f"log2 features of {SHAPE}: " + ", ".join(f"{v:.3f}" for v in rules.features(*SHAPE))]
    near = neighbours(r, *SHAPE)
    for s, d in near:
        lines.append(f"  {'x'.join(map(str, s)):>16}  squared distance {d:.3f}")
    index = {s: i for i, s in enumerate(r.shapes)}
    means = {}
    for j, name in enumerate(r.candidates):
        values = [r.scores[index[s]][j] for s, _ in near]
        if not any(math.isnan(v) for v in values):
            means[name] = sum(values) / len(values)
    lines.append("mean log score (lower is faster than torch.matmul), best three:")
    for name in sorted(means, key=means.get)[:3]:
        lines.append(f"  {name:<28} {means[name]:+.3f}  (geometric mean {100 * math.exp(-means[name]):.0f} % of torch)")
    lines.append(f"the rule picks {config}")
    return "\n".join(lines)

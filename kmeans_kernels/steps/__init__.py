"""The k-means walkthrough's step kernels, one complete file per step, and the tools to try them.

    from kmeans_kernels.steps import step1_serial        # compile(D, dtype, arch) / assign(x, c, c_sq, out)
    kmeans_kernels.steps.try_step(step1_serial)           # compile, check, time, SASS change
    kmeans_kernels.steps.exercises                        # the notebooks' exercises and their checkers

Each step differs from the one before by one idea; the production kernels (kmeans_kernels.hopper) stay the
tuned path, and step 4 is the same kernel as their norm_broadcast and wide variants.
"""
from __future__ import annotations

STEPS = ("step1_serial", "step2_ilp2", "step3_norm_broadcast", "step4_hopper")

from kmeans_kernels.steps.trial import try_step  # noqa: E402  (trial reads STEPS)

__all__ = ["STEPS", "try_step"]

"""The k-means walkthrough's step kernels, one complete file per step."""
from __future__ import annotations

STEPS = ("step1_serial", "step2_ilp2", "step3_norm_broadcast", "step4_hopper")

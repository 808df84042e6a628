"""The shared floor of the workbook: GPU specs, timing, records, plots, SASS tools, the report.

Nothing in here knows a particular kernel: the kernel packages build on it.
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"

"""The shape explorer: for one problem shape, or a sweep over one of its dimensions, on one GPU, every named
configuration's latency, predicted by a wave model, recorded in data/measured/, and timed live when a GPU of
that kind is here; the waves each configuration runs in; and the winner, with the number it rests on.

    ex = Explorer(problem)                       # a Problem from a kernel package (below)
    r = ex.explore((65536, 128, 4096), gpu="h200")
    r.summary(); r.table(); figure(r)            # figure(r, view="roofline"): each bar as a fraction of the bound
    s = ex.sweep((65536, 128, 4096), "K", [512, 1024, 2048, 4096], gpu="h200")
    s.table(); sweep_figure(s)
    build_ui([Explorer(p) for p in problems])    # the same behind ipywidgets

The explorer knows no kernel. A kernel package describes its problem through `Problem`, the one interface
between them: the shape's dimensions and their ranges, FLOPs and bytes (which `gpus.roofline_ms` turns into a
bound), the named configurations, each configuration's `Waves` (its work items, how many run at once, when the
last one finishes), the table its benchmark records, others' published numbers, and optionally a live runner.

The prediction is deliberately simple, and says so: one slot of the GPU (an SM, a CTA pair, one of two CTAs
sharing an SM) gets `1/slots` of the tensor cores' datasheet peak; an item takes its FLOPs (tile padding
included) at that rate; the configuration takes until its last slot finishes, or the time to move its bytes,
whichever is longer. So configurations that tile differently (other widths, other CTAs per SM, balanced tails)
predict differently, and configurations that differ only inside an item (a scan, an epilogue, the pipeline
depth) predict the same; only a measurement separates those, and the winner is picked from measurements
whenever there are any.

Recorded numbers of a shape come from ONE benchmark run (`records.last_run`: the newest run of that shape
that timed the most of the chosen configurations), so a bar never mixes an older run into a newer one; the
run's commit and date are in every caption.

The parts, each importable from here: `problem` (the interface: `Problem`, `Dim`, `Waves`, `Reference`),
`explorer` (`Explorer` and its `Result`, `Row`, `Sweep`; the recorded run), `figures` (`figure`,
`sweep_figure`) and `ui` (`build_ui`).
"""
from workbook.explore.problem import MAX_ELEMENTS, Dim, Problem, Reference, Waves, uniform_waves
from workbook.explore.explorer import (ORIGINS, PROVENANCE_SHOWN, Explorer, Result, Row, Sweep, provenance_text,
                                       record_label, recorded_run)
from workbook.explore.figures import MERGE_ABOVE, STYLE, VIEWS, distinct_waves, figure, sweep_figure
from workbook.explore.ui import build_ui

__all__ = ["MAX_ELEMENTS", "Dim", "Problem", "Reference", "Waves", "uniform_waves", "ORIGINS", "PROVENANCE_SHOWN",
           "Explorer", "Result", "Row", "Sweep", "provenance_text", "record_label", "recorded_run", "MERGE_ABOVE",
           "STYLE", "VIEWS", "distinct_waves", "figure", "sweep_figure", "build_ui"]

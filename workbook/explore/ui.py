"""The explorer behind ipywidgets (`build_ui`)."""
from __future__ import annotations

from typing import Sequence

from workbook import gpus
from workbook.explore.explorer import Explorer
from workbook.explore.figures import figure, sweep_figure

def build_ui(explorers: Sequence[Explorer], *, gpus_offered: Sequence[str] | None = None):
    """ipywidgets: the problem, its shape, the GPU and the configurations; one shape or a sweep of one
    dimension; milliseconds on a log axis or the fraction of the roofline; live timing where a GPU of the
    chosen kind is here. Out come the summary, the table and the figure. Invalid input prints its ValueError
    as a message, never a traceback. Returns the top widget (`.children` in the order built)."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    by_name = {e.problem.name: e for e in explorers}
    here = gpus.current()
    problem = w.ToggleButtons(options=list(by_name))
    dims = [w.BoundedIntText(layout=w.Layout(width="13em")) for _ in range(3)]
    gpu = w.Dropdown(description="GPU")
    chosen = w.SelectMultiple(rows=6, description="configs", layout=w.Layout(width="38em"))
    mode = w.ToggleButtons(options=[("one shape", "one"), ("sweep", "sweep")])
    sweep_dim = w.Dropdown(description="sweep", layout=w.Layout(width="12em"))
    sweep_from = w.BoundedIntText(description="from", layout=w.Layout(width="13em"))
    sweep_to = w.BoundedIntText(description="to", layout=w.Layout(width="13em"))
    points = w.BoundedIntText(value=6, min=2, max=16, description="points", layout=w.Layout(width="10em"))
    view = w.ToggleButtons(options=[("ms, log axis", "ms"), ("fraction of roofline", "roofline")])
    live = w.Checkbox(value=here is not None, description="time live", disabled=here is None)
    go = w.Button(description="explore", button_style="primary")
    out = w.Output()

    def explorer() -> Explorer:
        return by_name[problem.value]

    def set_problem(*_):
        p = explorer().problem
        for box, d in zip(dims, p.dims):
            box.min, box.max = 1, d.high
            box.description, box.value, box.step = d.name, d.default, d.multiple
        offered = [((f"this GPU: {here.name}" if here is not None and here.key == g else gpus.get(g).name), g)
                   for g in (gpus_offered or p.gpus)]
        offered.sort(key=lambda option: not option[0].startswith("this GPU"))
        gpu.options = offered
        gpu.value = offered[0][1]
        sweep_dim.options = [d.name for d in p.dims]
        sweep_dim.value = p.dims[-1].name
        set_sweep()
        set_configurations()

    def set_sweep(*_):
        d = next((d for d in explorer().problem.dims if d.name == sweep_dim.value), None)
        if d is not None:            # None while the options are being replaced
            for box, v in ((sweep_from, d.low), (sweep_to, d.high)):
                box.min, box.max, box.value = 1, d.high, v

    def set_configurations(*_):
        if gpu.value is None:        # while the options are being replaced
            return
        options = list(explorer().problem.configurations(gpus.get(gpu.value)))
        chosen.options, chosen.value = options, tuple(options)

    def run(*_):
        out.clear_output()
        with out:
            try:
                ex, shape = explorer(), [b.value for b in dims]
                if mode.value == "one":
                    result = ex.explore(shape, gpu.value, list(chosen.value), live=live.value)
                    print(result.summary())
                    display(result.table())
                    fig = figure(result, view=view.value)
                else:
                    d = next(d for d in ex.problem.dims if d.name == sweep_dim.value)
                    values = d.values(sweep_from.value, sweep_to.value, points.value)
                    result = ex.sweep(shape, d.name, values, gpu.value, list(chosen.value), live=live.value)
                    print("\n".join(result.notes))
                    display(result.table()[[d.name, "configuration", "ms", "kind", "% of roofline"]])
                    fig = sweep_figure(result, view=view.value)
            except ValueError as err:
                print(f"Cannot explore this: {err}")
                return
            display(fig)
            plt.close(fig)

    problem.observe(set_problem, names="value")
    gpu.observe(set_configurations, names="value")
    sweep_dim.observe(set_sweep, names="value")
    go.on_click(run)
    set_problem()
    return w.VBox([problem, w.HBox(dims), w.HBox([gpu, chosen]), w.HBox([mode, sweep_dim, sweep_from, sweep_to, points]),
                   w.HBox([view, live, go]), out])

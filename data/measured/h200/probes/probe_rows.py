"""For the probes that time builds taking turns: their rows, and the CSV with the run's provenance.
    rows = timed_rows(fns, sets, "baseline name", rounds=8, M=M, N=N, K=K)   # both timings with intervals, GPU time
    rows = timed_rows(fns, sets, "base", 8, against={"b2": "b1"}, N=N)     # b2's ratios to b1's, the rest to base's
    save(rows, f"{out_dir}/name.csv")                                         # a DataFrame, provenance columns added
    rows = gemm_rows(M, N, K, {"name": options}, generator, rounds=8)       # GEMM options against the rule's pick
    rows = gemm_rows(M, N, K, {"name": options}, generator, 6, with_pick=False, varied="K")   # ... against torch
    spans = kernel_spans(fn, sets, calls=60)                  # each kernel's (start, end) in us, back to back (CUPTI)
    sets = gemm_sets(M, N, K, generator)                      # three random bf16 (a, b) pairs
    row.update(timing_columns(cmp, name))                     # a timing.compare's readings of one contender
    launch_as = as_one_graph(graphs, stream); launch_as(g)    # the first graph launched with g's parameters"""
import cuda.bindings.driver as cuda
import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile

from gemm_kernels import gemm, rule, sweep
from workbook import launch, records, timing


def timed_rows(fns, sets, baseline, rounds, against=None, **shape):
    """The builds `fns` taking turns against `baseline` (both timings, `rounds` interleaved rounds of 20 calls) and
    their CUPTI GPU time: one row per build and timing, ratios to the baseline's, or to `against[build]`'s where
    given (column `vs`)."""
    cmp = timing.compare(fns, sets, baseline=baseline, rounds=rounds, calls=20)
    gpu = sweep.gpu_ms(fns, sets)
    rows = []
    for f in fns:
        ref = (against or {}).get(f, baseline)
        for t in (timing.LATENCY, timing.KERNEL):
            r = cmp.ratio(f, t, against=ref)
            rows.append(dict(**shape, contender=f, vs=ref, timing=t, us_median=1e3 * cmp.timing(f, t).ms_median,
                             ratio=r.value, ratio_lo=r.lo, ratio_hi=r.hi, rounds=r.rounds))
        rows.append(dict(**shape, contender=f, vs=ref, timing="gpu", us_median=1e3 * gpu[f], ratio=gpu[f] / gpu[ref]))
    print(*shape.values(), {k: round(1e3 * v, 1) for k, v in gpu.items()}, flush=True)
    return rows


def gemm_rows(M, N, K, options, generator, rounds, input_sets=3, with_pick=True, **fields):
    """torch.matmul, the rule's pick and `options` ({name: hopper_options.Options}, the pick's name left out) at one
    shape: each of ours exact on small integers first (cuBLAS may reduce split-K partials in bf16: not checked),
    then `timed_rows` against the pick on `input_sets` random bf16 pairs; `with_pick=False`: no pick, timed against
    torch.matmul. `fields`: more columns for every row."""
    sets = [(torch.randn(M, K, device="cuda", generator=generator).bfloat16(),
             torch.randn(K, N, device="cuda", generator=generator).bfloat16()) for _ in range(input_sets)]
    fns, baseline = {"torch.matmul": torch.matmul}, "torch.matmul"
    if with_pick:
        pick = rule.choose(M, N, K)
        baseline = f"pick: {pick}"
        fns[baseline] = lambda a, b, o=rule.options_for(M, N, K): gemm(a, b, o)
        options = {name: o for name, o in options.items() if name != pick}
    fns.update({name: (lambda a, b, o=o: gemm(a, b, o)) for name, o in options.items()})
    ints = [t.round().clamp(-2, 2) for t in sets[0]]
    want = torch.matmul(ints[0].float(), ints[1].float()).bfloat16()
    for f, fn in fns.items():
        if f != "torch.matmul":
            out = fn(*ints)
            assert torch.equal(out, want), (M, N, K, f, (out != want).sum().item())
    return timed_rows(fns, sets, baseline, rounds, M=M, N=N, K=K, **fields)


def kernel_spans(fn, sets, calls=60, skip=5):
    """(start, end) in us of each kernel of `calls` calls of fn on `sets` in turn, launched back to back after a
    drained stream (one CUPTI trace), in start order; the first `skip` left out (the queue filling)."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            fn(*sets[i % len(sets)])
        torch.cuda.synchronize()
    return sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                  if e.device_type == torch.autograd.DeviceType.CUDA)[skip:]


def gemm_sets(M, N, K, generator, count=3):
    """`count` random bf16 operand pairs (a [M, K], b [K, N]) on the GPU, drawn a then b."""
    return [(torch.randn(M, K, device="cuda", generator=generator).bfloat16(),
             torch.randn(K, N, device="cuda", generator=generator).bfloat16()) for _ in range(count)]


def timing_columns(cmp, name):
    """Both timings of `name` in a `timing.compare`: its median (us) and its ratio to the baseline with the 95 %
    interval, as columns `<timing>_us`, `<timing>`, `<timing>_lo`, `<timing>_hi`."""
    columns = {}
    for t in (timing.LATENCY, timing.KERNEL):
        r = cmp.ratio(name, t)
        columns.update({f"{t}_us": 1e3 * cmp.timing(name, t).ms_median, t: r.value, f"{t}_lo": r.lo, f"{t}_hi": r.hi})
    return columns


def as_one_graph(graphs, stream):
    """launch_as(graph): the first of `graphs` (`launch.Reaimable`s of one kernel, one launch shape) launched on
    `stream`, its kernel node handed `graph`'s parameter block where it differs from the last launch's: one graph
    on the GPU whichever set of arguments a call has."""
    shared, current = graphs[0], [None]

    def launch_as(graph):
        if graph is not current[0]:
            shared.params.kernelParams = graph.params.kernelParams
            launch._check(cuda.cuGraphExecKernelNodeSetParams(shared.exec, shared.node, shared.params),
                          "cuGraphExecKernelNodeSetParams")
            current[0] = graph
        launch.graph_launch(shared.exec, stream)
    return launch_as


def save(rows, path):
    """`rows` as a DataFrame with the run's provenance columns, written to `path`."""
    df = pd.DataFrame(rows)
    for key, value in records.provenance().items():
        df[key] = value
    df.to_csv(path, index=False)
    return df

"""The per-shape configuration: the sweep's shape classes, the rule learned from sweep rows, and every
configuration the rule can choose computing the right product on the GPU (marked `gpu`)."""
from __future__ import annotations

import contextlib
import math

import pandas as pd
import pytest
import torch

from gemm_kernels import configs, hopper_options, rule, sweep

needs_hopper = pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)),
                                  reason="needs an H100/H200 (sm_90a)")


def test_every_class_shape_belongs_to_its_class_and_is_swept_once():
    for cls, shapes in sweep.SHAPES.items():
        for shape in shapes:
            assert cls in sweep.classes_of(*shape), (cls, shape)
    pairs = sweep.all_shapes()
    assert len({s for _, s in pairs}) == len(pairs)
    times = [sweep.expected_ms(*s) for _, s in pairs]
    assert times == sorted(times)
    assert {c for c, _ in pairs} == set(sweep.SHAPES)
    with pytest.raises(ValueError, match="unknown class"):
        sweep.all_shapes(["squares"])


def test_candidates_are_named_by_name_or_pattern(capsys):
    swapped = [n for n, o in configs.HOPPER_CANDIDATES.items() if o.swap_ab]
    assert sweep.candidate_names(["*swapped"]) == swapped and len(swapped) == 5
    assert sweep.candidate_names(["96 uniform cluster4 swapped", "256 balanced cluster2"]) == [
        "256 balanced cluster2", "96 uniform cluster4 swapped"]            # the candidates' order, each once
    sweep.main(["--classes", "odd", "--candidates", "*swapped", "--estimate"])
    assert capsys.readouterr().out.startswith(f"{len(sweep.SHAPES['odd'])} shapes x {1 + len(swapped)} contenders")
    with pytest.raises(SystemExit):
        sweep.main(["--candidates", "*no such*", "--estimate"])


def test_the_parts_of_a_sweep_take_every_shape_once(capsys):
    """`--part K/N`: the N parts, interleaved in order of expected time, are the whole sweep, each shape once."""
    parts = [sweep.all_shapes(["skinny"])[k::3] for k in range(3)]
    assert sorted(s for p in parts for s in p) == sorted(sweep.all_shapes(["skinny"]))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    sweep.main(["--classes", "skinny", "--part", "2/3", "--estimate"])
    assert capsys.readouterr().out.startswith(f"{len(parts[1])} shapes x ")
    for bad in ("0/2", "3/2", "half"):
        with pytest.raises(SystemExit):
            sweep.main(["--part", bad, "--estimate"])


def test_held_out_shapes_are_not_swept_and_belong_to_their_class():
    swept = {s for _, s in sweep.all_shapes()}
    for cls, shapes in sweep.HELD_OUT.items():
        for shape in shapes:
            assert shape not in swept and cls in sweep.classes_of(*shape), (cls, shape)
            assert shape[1] % 8 == 0 and shape[2] % 8 == 0


def test_the_classes_cover_what_the_issue_names():
    skinny = sweep.SHAPES["skinny"]
    assert {M for M, _, _ in skinny} == {16, 64, 128, 256, 512}
    assert all(K >= 4 * max(M, N) for M, N, K in sweep.SHAPES["k-heavy"])
    assert all(any(v % 64 for v in s) for s in sweep.SHAPES["odd"])
    assert any(s & (s - 1) for s, _, _ in sweep.SHAPES["square"])          # non-powers of two
    assert all(N % 8 == 0 and K % 8 == 0 for _, (M, N, K) in sweep.all_shapes())   # TMA's 16-byte rows


def test_every_candidate_plans_every_swept_shape():
    for name, options in configs.HOPPER_CANDIDATES.items():
        for _, (M, N, K) in sweep.all_shapes():
            cfg, plan = hopper_options.config_for(M, N, options)
            assert cfg.tile_n == options.tile_n and plan.items


def test_the_fallback_is_the_shipped_default():
    assert configs.HOPPER_CANDIDATES[configs.HOPPER_FALLBACK] == hopper_options.DEFAULT


def _frame(best: dict, shapes, noise: float = 0.0) -> pd.DataFrame:
    """Sweep-like rows: at each shape the candidate best[shape] takes 0.9 of torch's time, the others 1.1."""
    rows = []
    for i, shape in enumerate(shapes):
        M, N, K = shape
        for timing in rule.TIMINGS:
            rows.append(dict(kernel="torch", variant="torch.matmul", timing=timing, M=M, N=N, K=K, ratio=1.0,
                             match_rate=1.0, **{"class": "square"}))
            for name in configs.HOPPER_CANDIDATES:
                r = (0.9 if name == best[shape] else 1.1) + noise * ((i % 3) - 1)
                rows.append(dict(kernel="ours", variant=name, timing=timing, M=M, N=N, K=K, ratio=r,
                                 match_rate=1.0, **{"class": "square"}))
    return pd.DataFrame(rows)


SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (16, 4096, 4096), (64, 4096, 4096),
          (128, 4096, 4096)]
BEST = {s: ("64 stream-k cluster1" if s[0] < 1024 else "256 balanced cluster2") for s in SHAPES}


def test_the_rule_follows_the_nearest_measured_shapes(monkeypatch):
    monkeypatch.setattr(rule, "FEW_WAVES", 0.0)     # the neighbours alone (the planner's part: test below)
    fitted = rule.fit(_frame(BEST, SHAPES))
    for shape in SHAPES:
        assert fitted.choose(*shape) == BEST[shape]
    assert fitted.choose(32, 4096, 4096) == "64 stream-k cluster1"      # between two skinny shapes
    assert fitted.choose(3000, 3000, 3000) == "256 balanced cluster2"
    assert fitted.choose(16, 4096, 4096, without=(16, 4096, 4096)) == "64 stream-k cluster1"


def test_a_candidate_that_failed_the_check_is_never_chosen():
    frame = _frame(BEST, SHAPES)
    frame.loc[frame.variant == "64 stream-k cluster1", "match_rate"] = 0.0
    fitted = rule.fit(frame)
    assert "64 stream-k cluster1" not in fitted.candidates
    assert fitted.choose(16, 4096, 4096) != "64 stream-k cluster1"


def test_a_candidate_missing_at_a_neighbour_is_not_chosen_there():
    frame = _frame(BEST, SHAPES)
    frame = frame[~((frame.variant == "64 stream-k cluster1") & (frame.M == 64))]
    fitted = rule.fit(frame)
    assert fitted.choose(64, 4096, 4096) != "64 stream-k cluster1"


def test_a_measured_shape_takes_its_own_best(monkeypatch):
    """Where the sweep measured a shape, its own best candidate, even against a neighbour at distance 0 in log
    size (4097 x 4104 x 4104 beside 4096^3); left out, the neighbours decide; between them, the nearest."""
    monkeypatch.setattr(rule, "FEW_WAVES", 0.0)
    shapes = [(4096, 4096, 4096), (4097, 4104, 4104), (5000, 5000, 5000)]
    best = {shapes[0]: "256 balanced cluster2", shapes[1]: "256 stream-k cluster2", shapes[2]: "256 stream-k cluster2"}
    fitted = rule.fit(_frame(best, shapes))
    assert [fitted.choose(*s) for s in shapes] == [best[s] for s in shapes]
    assert fitted.choose(*shapes[0], without=shapes[0]) == "256 stream-k cluster2"
    assert fitted.choose(4200, 4200, 4200) == "256 stream-k cluster2"


def test_rows_off_128_byte_lines_take_neighbours_like_them(monkeypatch):
    """With the pitch distance at 1, a shape whose rows start off 128-byte lines takes a measured shape like it
    (4600^3) over one nearer in size whose rows start on lines (4096^3), and a shape on lines keeps the nearer one;
    at 0 (size alone, as shipped) both take the nearer one."""
    monkeypatch.setattr(rule, "FEW_WAVES", 0.0)
    monkeypatch.setattr(rule, "NEIGHBOURS", 1)
    monkeypatch.setattr(rule, "PITCH_DISTANCE", 1.0)
    assert rule.rows_on_lines(4096, 4096) and rule.rows_on_lines(4160, 4160)
    assert not rule.rows_on_lines(4600, 4600) and not rule.rows_on_lines(4104, 4104)   # 112 and 16 bytes past
    shapes = [(4096, 4096, 4096), (4600, 4600, 4600)]
    best = {shapes[0]: "256 balanced cluster1", shapes[1]: "256 balanced cluster2"}
    fitted = rule.fit(_frame(best, shapes))
    assert fitted.choose(4104, 4104, 4104) == "256 balanced cluster2"
    assert fitted.choose(4160, 4160, 4160) == "256 balanced cluster1"
    monkeypatch.setattr(rule, "PITCH_DISTANCE", 0.0)
    assert fitted.choose(4104, 4104, 4104) == "256 balanced cluster1"


# Few-wave shapes: two candidates equally fast at every measured neighbour, but at 384 rows the 128-row
# one-per-item grid is 3 x 40 = 120 tiles, under one wave of 132 SMs, while the balanced CTA pairs are 256 rows
# tall (half of the second pair is padding) and the planner fills two waves of 66 pairs with them.
NEAR_384 = [(512, 4096, 8192), (512, 4096, 14336), (256, 4096, 8192)]
TIED = ("128 balanced cluster2", "128 one-per-item cluster1")


def test_at_a_few_wave_shape_the_planner_carries_the_neighbours_over():
    frame = _frame({s: TIED[0] for s in NEAR_384}, NEAR_384)
    frame.loc[frame.variant == TIED[1], "ratio"] = 0.9                    # a tie at every neighbour
    frame = frame[(frame.kernel == "torch") | frame.variant.isin(TIED)]  # and no third (the planner favours others)
    fitted = rule.fit(frame)
    assert rule.few_waves(384, 5120) and not rule.few_waves(8192, 8192)
    assert rule.planned_log_time(TIED[0], 384, 5120, 10240) > rule.planned_log_time(TIED[1], 384, 5120, 10240)
    assert fitted.choose(384, 5120, 10240) == TIED[1]


def test_few_waves_skips_the_plan_only_where_the_plan_would_agree():
    sizes = (16, 256, 384, 1000, 1536, 2048, 2304, 3000, 4096, 5120)
    for M in sizes:
        for N in sizes:
            planned = rule._plan_waves(configs.HOPPER_FALLBACK, M, N) < rule.FEW_WAVES
            assert rule.few_waves(M, N) == planned, (M, N)


def test_one_wave_runs_single_items_without_the_counter_and_with_the_staged_epilogue():
    from workbook import gpus
    pair = configs.HOPPER_CANDIDATES["128 balanced cluster2"]
    alone = hopper_options.one_wave(pair, 1024, 2048, gpus.H200)         # 64 pair items on 66 clusters
    assert (alone.dynamic, alone.epilogue, alone.tile, alone.cluster_m) == (False, "staged", pair.tile, 2)
    before, after = (hopper_options.plan_for(1024, 2048, o, gpus.H200) for o in (pair, alone))
    assert after.items == before.items and len(after.items) <= after.slots
    # more items than clusters, a 256-wide tile, stream-K, swapped operands, 2 x 2 clusters: unchanged
    assert hopper_options.one_wave(pair, 1024 + 128, 2048 + 128, gpus.H200) is pair
    for name in ("256 balanced cluster1", "128 stream-k cluster2", "128 uniform cluster4 swapped",
                 "128 one-per-item cluster1", "64x128 uniform cluster1", "128 uniform cluster2x2"):
        options = configs.HOPPER_CANDIDATES[name]
        assert hopper_options.one_wave(options, 1024, 2048, gpus.H200) is options, name
    # 64-row tiles where M fills one at least; not where the register epilogue would keep A's last box inside M
    small = configs.HOPPER_CANDIDATES["64x128 uniform cluster2"]
    assert hopper_options.one_wave(small, 256, 4096, gpus.H200).epilogue == "staged"
    assert hopper_options.one_wave(small, 200, 4096, gpus.H200) is small          # clamps_a_box: 8 rows past 192
    tiny = configs.HOPPER_CANDIDATES["64x64 uniform cluster1"]
    assert hopper_options.one_wave(tiny, 32, 6144, gpus.H200) is tiny             # a 64-row tile taller than M
    assert hopper_options.one_wave(pair, 96, 4096, gpus.H200).epilogue == "staged"  # 128 rows: measured at 96
    # the rule's pick goes through it; a caller's own options do not
    assert rule.options_for(1024, 2048, 1024) == hopper_options.one_wave(
        configs.HOPPER_CANDIDATES[rule.choose(1024, 2048, 1024)], 1024, 2048)


def test_the_planned_time_of_stream_k_splits_the_last_wave_evenly():
    name = "128 stream-k cluster1"
    o = configs.HOPPER_CANDIDATES[name]
    plan = hopper_options.plan_for(384, 5120, o)                        # 3 x 40 tiles on 132 slots
    assert len(plan.items) == 120 and plan.slots == 132
    assert rule.planned_log_time(name, 384, 5120, 10240) == pytest.approx(math.log(120 / 132 * 128 * 128 * 10240))
    uniform = "128 one-per-item cluster1"                                # the same tiles, whole: one wave
    assert rule.planned_log_time(uniform, 384, 5120, 10240) == pytest.approx(math.log(1 * 128 * 128 * 10240))


def test_the_rule_survives_its_json_and_refuses_unknown_names():
    fitted = rule.fit(_frame(BEST, SHAPES))
    again = rule.Rule.from_json(fitted.to_json())
    assert again.shapes == fitted.shapes and again.candidates == fitted.candidates
    for got, want in ((again.scores, fitted.scores), (again.planned, fitted.planned)):
        assert all(math.isclose(a, b, abs_tol=1e-6) for ra, rb in zip(got, want) for a, b in zip(ra, rb))
    bad = fitted.to_json().replace('"64 stream-k cluster1"', '"no such config"')
    with pytest.raises(ValueError, match="lacks"):
        rule.Rule.from_json(bad)


def test_leave_one_out_reports_the_rules_pick_without_the_shape(monkeypatch):
    monkeypatch.setattr(rule, "FEW_WAVES", 0.0)
    frame = _frame(BEST, SHAPES)
    loo = rule.leave_one_out(rule.fit(frame), frame)
    assert len(loo) == len(SHAPES)
    assert (loo.oracle == [BEST[tuple(s)] for s in loo[["M", "N", "K"]].itertuples(index=False)]).all()
    assert loo.oracle_kernel_pct.round(3).eq(round(100 / 0.9, 3)).all()
    # (1024^3) has no other square within reach but the 2048^3 and 4096^3 it shares a best with
    assert loo.set_index(["M", "N", "K"]).loc[(1024, 1024, 1024), "rule"] == "256 balanced cluster2"


def test_class_summary_gives_median_and_minimum_in_both_timings():
    frame = _frame(BEST, SHAPES)
    summary = rule.class_summary(frame)
    assert summary.loc["square", "kernel_median_pct"] == pytest.approx(100 / 0.9)
    fixed = rule.class_summary(frame, variant="256 balanced cluster2")
    assert fixed.loc["square", "latency_min_pct"] == pytest.approx(100 / 1.1)


def test_the_committed_rule_names_known_candidates_and_has_provenance():
    learned = rule.learned()
    if learned is None:
        pytest.skip("no rule learned yet")
    assert set(learned.candidates) <= set(configs.HOPPER_CANDIDATES)
    assert learned.provenance.get("gpu") and learned.provenance.get("commit")
    for _, shape in sweep.all_shapes():
        assert rule.choose(*shape) in configs.HOPPER_CANDIDATES


def test_contenders_are_the_rule_then_the_neighbours_best_then_the_fallback():
    learned = rule.learned()
    if learned is None:
        pytest.skip("no rule learned yet")
    for shape in ((24, 11008, 4096), (1500, 2504, 3000), (4096, 4096, 4096), (3072, 1024, 24576)):
        names = rule.contenders(*shape)
        near = [learned.choose(*learned.shapes[i]) for i, _ in learned.neighbours(*shape)]
        assert names[0] == rule.choose(*shape) and configs.HOPPER_FALLBACK in names
        assert len(set(names)) == len(names) and set(near) <= set(names) <= set(configs.HOPPER_CANDIDATES)


def test_autotune_keeps_the_fastest_median_and_times_a_shape_once(monkeypatch):
    """hopper_host's autotune with the GPU stood in for: candidates that refuse the shape are skipped, every
    other one is timed in AUTOTUNE_ROUNDS cycles (`timing.cycles`), the lowest median wins, and a second call of
    the shape times nothing; no first call inside a CUDA graph capture."""
    from gemm_kernels import hopper_host
    names = ("256 balanced cluster2", "128 stream-k cluster2", "64x64 uniform cluster1")
    medians = {names[0]: [3.0, 0.5, 3.0], names[2]: [2.0, 2.0, 2.0]}            # names[1] refuses the shape
    fake = {configs.HOPPER_CANDIDATES[n]: type("Call", (), {"name": n, "out_like": torch.empty(1).expand(8, 8)})()
            for n in names}

    def prepare(M, N, K, device, options, dtype):
        if fake[options].name == names[1]:
            raise ValueError("refused")
        return fake[options]
    timed = []

    def cycles(fns, input_sets, count, *, calls):
        """Stands in for workbook.timing.cycles: one {name: ms per call} per cycle, each turn logged."""
        assert count == hopper_host.AUTOTUNE_ROUNDS and calls == hopper_host.AUTOTUNE_CALLS
        timed.extend(name for _ in range(count) for name in fns)
        return [{name: medians[name][i] for name in fns} for i in range(count)]
    monkeypatch.setattr(hopper_host, "_prepare", prepare)
    monkeypatch.setattr(hopper_host.rule, "contenders", lambda M, N, K: names)
    monkeypatch.setattr(hopper_host.timing, "cycles", cycles)
    monkeypatch.setattr(hopper_host.launch, "stream_handle", lambda device: 7)
    monkeypatch.setattr(hopper_host.launch, "on_device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    hopper_host._tuned.clear()
    a = torch.zeros(8, 8, dtype=torch.bfloat16)
    try:
        assert hopper_host._tuned_call(a, a, 8, 8, 8, 0).name == names[2]
        assert sorted(timed) == sorted([names[0], names[2]] * hopper_host.AUTOTUNE_ROUNDS)
        assert hopper_host._tuned_call(a, a, 8, 8, 8, 0).name == names[2] and len(timed) == 6
        monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
        with pytest.raises(ValueError, match="before capturing"):
            hopper_host._tuned_call(a, a, 16, 8, 8, 0)
    finally:
        hopper_host._tuned.clear()
    assert hopper_host.fastest({"x": [1.0, 5.0, 1.0], "y": [1.0, 1.0, 9.0]}) == "x"       # a tie: the first


def test_autotune_refuses_options_beside_it():
    from gemm_kernels import hopper_host
    a = torch.zeros(64, 64, dtype=torch.bfloat16)
    for kw in ({"tile": (128, 128, 64)}, {"options": hopper_options.Options()}):
        with pytest.raises(ValueError, match="autotune"):
            hopper_host.gemm(a, a, autotune=True, **kw)


# Every configuration the rule can choose, on shapes that stress it: a skinny one (M = 16: one row of tiles, all
# of it split along K), tails in every dimension, a K-heavy one (stream-K units with many contributors).
RULE_GPU_SHAPES = [(16, 4096, 1024), (77, 1032, 520), (1000, 1032, 520), (512, 2048, 8192), (4000, 4000, 264)]


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("name", list(configs.HOPPER_CANDIDATES))
@pytest.mark.parametrize("M,N,K", RULE_GPU_SHAPES)
def test_every_candidate_is_exact_on_small_integers(name, M, N, K):
    # |a|, |b| <= 2 and K <= 8192: every partial sum is an integer below 2^24 in magnitude, exact in fp32
    g = torch.Generator(device="cuda").manual_seed(M * 7 + N + K)
    a = torch.randint(-2, 3, (M, K), device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randint(-2, 3, (K, N), device="cuda", generator=g).to(torch.bfloat16)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    from gemm_kernels import hopper_host
    c = hopper_host.gemm(a, b, configs.HOPPER_CANDIDATES[name], out=out)
    torch.testing.assert_close(c, (a.float() @ b.float()).to(torch.bfloat16), rtol=0, atol=0)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("name", list(configs.HOPPER_CANDIDATES))
def test_every_candidate_is_exact_into_a_new_output_at_every_call(name):
    """A new output at every call, all held alive (no address repeats): past the capture sighting a register-
    epilogue configuration replays one graph re-aimed at each output (clusters and stream-K included), a staged
    one launches from its template; every output exact, none left unwritten."""
    from gemm_kernels import hopper_host
    from workbook import launch
    M, N, K = 1000, 1032, 520
    g = torch.Generator(device="cuda").manual_seed(11)
    a = torch.randint(-2, 3, (M, K), device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randint(-2, 3, (K, N), device="cuda", generator=g).to(torch.bfloat16)
    want = (a.float() @ b.float()).to(torch.bfloat16)
    options = configs.HOPPER_CANDIDATES[name]
    call = hopper_host._call_for(M, N, K, a.get_device(), options, dtype=a.dtype)
    before = dict(call.launches.counts)
    outs = [torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            for _ in range(2 * launch.CAPTURE_AFTER + 2)]
    for out in outs:
        hopper_host.gemm(a, b, options, out=out)
    torch.cuda.synchronize()
    for out in outs:
        torch.testing.assert_close(out, want, rtol=0, atol=0)
    done = {k: call.launches.counts[k] - before[k] for k in before}
    if call.cfg.epilogue == "register":
        assert done["captured"] <= 1 and done["replayed"] >= len(outs) - launch.CAPTURE_AFTER


def test_a_stream_k_choice_runs_split_k_only_where_its_pieces_fill_the_pairs():
    from workbook import gpus
    pick = configs.HOPPER_CANDIDATES["128 stream-k cluster2x2"]
    split = configs.HOPPER_CANDIDATES[rule.SPLIT_K]
    assert split.split_k and split.stream_k and split.cluster_m == 2 and split.tile_n == 128
    assert rule.split_k_instead(pick, 1024, 1024, 8192, gpus.H200) is split     # 32 items: 64 of 66 pair slots
    assert rule.split_k_instead(pick, 512, 1024, 16384, gpus.H200) is split     # 16 items in quarters: 64 of 66
    assert rule.split_k_instead(pick, 768, 1024, 8192, gpus.H200) is pick       # 24 items in halves: 48 of 66
    assert rule.split_k_instead(pick, 4096, 4096, 8192, gpus.H200) is pick      # more items than slots
    assert rule.split_k_instead(pick, 1024, 1024, 64, gpus.H200) is pick        # one K-block: nothing to cut
    whole = configs.HOPPER_CANDIDATES["128 balanced cluster2"]
    assert rule.split_k_instead(whole, 1024, 1024, 8192, gpus.H200) is whole   # not stream-K: as chosen
    assert rule.as_run(pick, 1024, 1024, 8192) == split                         # one_wave leaves stream-K alone


# the candidates `hopper_options.one_wave` changes where a plan gives each cluster one item at most
ONE_WAVE = [name for name, o in configs.HOPPER_CANDIDATES.items()
            if hopper_options.one_wave(o, 512, 1032) is not o]


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("name", ONE_WAVE)
@pytest.mark.parametrize("M,N,K", RULE_GPU_SHAPES)
def test_every_candidate_in_one_wave_is_exact_on_small_integers(name, M, N, K):
    options = hopper_options.one_wave(configs.HOPPER_CANDIDATES[name], M, N)
    g = torch.Generator(device="cuda").manual_seed(M * 5 + N + K)
    a = torch.randint(-2, 3, (M, K), device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randint(-2, 3, (K, N), device="cuda", generator=g).to(torch.bfloat16)
    want = (a.float() @ b.float()).to(torch.bfloat16)
    from gemm_kernels import hopper_host
    for _ in range(3):      # a new output each time, poisoned first: the first launch, then the template's
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        torch.testing.assert_close(hopper_host.gemm(a, b, options, out=out), want, rtol=0, atol=0)


def test_one_wave_changes_the_candidates_it_was_measured_on():
    assert {"128 balanced cluster2", "128 balanced cluster1", "128 uniform cluster2n",
            "64 uniform cluster1"} <= set(ONE_WAVE)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("M,N,K", RULE_GPU_SHAPES)
def test_gemm_without_options_runs_the_rules_choice(M, N, K):
    torch.backends.cuda.matmul.allow_tf32 = False
    import gemm_kernels
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    c = gemm_kernels.gemm(a, b)
    assert ((c.float() - ref).norm() / ref.norm()).item() < 1e-2


def test_the_latest_run_is_taken_class_by_class_and_candidate_by_candidate():
    """A sweep of some classes refreshes those and keeps the others' latest run; a sweep of some candidates in a
    class (a candidate added later) refreshes those and keeps the other candidates' latest ratios there."""
    old = _frame(BEST, SHAPES).assign(date="2026-01-01T00:00:00Z")
    old.loc[old.M < 1024, "class"] = "skinny"
    new_best = {s: "128 balanced cluster1" for s in SHAPES}
    new = _frame(new_best, SHAPES[3:]).assign(date="2026-01-02T00:00:00Z")
    new["class"] = "skinny"
    latest = rule.latest_run(pd.concat([old, new], ignore_index=True))
    assert set(latest[latest["class"] == "square"].date) == {"2026-01-01T00:00:00Z"}
    assert set(latest[latest["class"] == "skinny"].date) == {"2026-01-02T00:00:00Z"}
    fitted = rule.fit(latest)
    assert fitted.choose(16, 4096, 4096) == "128 balanced cluster1"
    assert fitted.choose(4096, 4096, 4096) == "256 balanced cluster2"
    assert rule.latest_run(latest.iloc[0:0]).empty
    # a third run times one candidate beside torch.matmul in the skinny class: it wins there, the rest stay
    added = "96 uniform cluster4 swapped"
    third = _frame({s: added for s in SHAPES[3:]}, SHAPES[3:]).assign(date="2026-01-03T00:00:00Z")
    third = third[third.variant.isin([added, "torch.matmul"])].assign(**{"class": "skinny"})
    third.loc[third.variant == added, "ratio"] = 0.8          # faster than the second run's best (0.9)
    latest = rule.latest_run(pd.concat([old, new, third], ignore_index=True))
    skinny = latest[latest["class"] == "skinny"]
    assert set(skinny[skinny.variant == added].date) == {"2026-01-03T00:00:00Z"}
    assert set(skinny[skinny.variant == "128 balanced cluster1"].date) == {"2026-01-02T00:00:00Z"}
    assert rule.fit(latest).choose(16, 4096, 4096) == added


def test_per_class_is_the_one_summary_of_both_tables():
    """rule.per_class: median, minimum and worst shape per group and timing; a timing with no rows reads NaN."""
    long = pd.DataFrame([dict(M=m, N=1, K=1, timing="kernel", pct=p, **{"class": c})
                         for c, m, p in [("a", 1, 90.0), ("a", 2, 80.0), ("a", 3, 100.0), ("b", 4, 50.0)]])
    a, b = (row for _, row in rule.per_class(long, timings=("kernel", "gpu")).iterrows())
    assert (a["class"], a["shapes"], a[("kernel", "median")], a[("kernel", "min")]) == ("a", 3, 90.0, 80.0)
    assert a[("kernel", "worst")] == "2x1x1"
    assert math.isnan(b[("gpu", "median")]) and b[("gpu", "worst")] == ""

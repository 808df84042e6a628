"""The k-means step kernels: compiled and inspected on any machine (SASS facts each step's docstring claims),
run and checked on an H100/H200 (`pytest -m gpu`): exact inputs bit for bit, adversarial cases, tails, fp16,
poisoned outputs; and the tools around them (try_step's CPU path, the exercise checkers)."""
from __future__ import annotations

import functools
import random

import pandas as pd
import pytest
import torch

from kmeans_kernels import floor, reference
from kmeans_kernels.steps import STEPS, anatomy, cases, exercises, host, trial, try_step
from workbook import gpus, sass, stepper

ON_HOPPER = trial.on_hopper()
gpu = pytest.mark.gpu
needs_hopper = pytest.mark.skipif(not ON_HOPPER, reason="needs an sm_90 GPU (H100/H200)")
# step 4 runs in two forms: 128-wide tiles with two CTAs per SM, and 256-wide ping-pong tiles
FORMS = [(s, {}) for s in STEPS] + [("step4_hopper", {"wide": True})]
FORM_IDS = [s + ("_wide" if o else "") for s, o in FORMS]


def step(name):
    return stepper.load(f"kmeans_kernels.steps.{name}")


@functools.lru_cache(maxsize=None)
def compiled(name: str, D: int = 128, wide: bool = False):
    return step(name).compile(D, **({"wide": True} if wide else {}))


def ops(name, D=128, wide=False):
    return sass.histogram(compiled(name, D, wide).sass, base=True)


# ------------------------------------------------------------------ CPU: what the machine code must show

@pytest.mark.parametrize("name,options", FORMS, ids=FORM_IDS)
def test_wgmma_tma_and_no_spills(name, options):
    h = ops(name, wide=bool(options))
    block_n = 256 if options else 128
    assert h["HGMMA"] == 2 * 4, h["HGMMA"]            # D = 128: 2 ring slots x 4 k-steps, the tile loop compiled once
    assert f"HGMMA.64x{block_n}x16.F32.BF16" in compiled(name, 128, bool(options)).sass
    assert h["UTMALDG"] > 0 and h["SYNCS"] > 0
    assert h["LDL"] == 0 and h["STL"] == 0, "register spills to local memory"


def test_step2_halves_the_chain_and_keeps_the_work():
    one, two = anatomy.scan(compiled("step1_serial").sass), anatomy.scan(compiled("step2_ilp2").sass)
    model1, model2 = anatomy.model(chains=1), anatomy.model(chains=2)
    assert model1["chain depth"] <= one["chain depth"] <= model1["chain depth"] + 2
    assert model2["chain depth"] <= two["chain depth"] <= model2["chain depth"] + 2
    assert two["chain depth"] < 0.6 * one["chain depth"]
    assert one["compare-selects"] == two["compare-selects"] and one["FADD"] == two["FADD"] == model1["scores"]
    # the chain merge after the last tile: 2 rows x one (score, index) compare more than step 1
    assert ops("step2_ilp2")["FSETP"] > ops("step1_serial")["FSETP"]


def test_step3_replaces_the_per_column_loads_with_shuffles():
    before, after = ops("step2_ilp2"), ops("step3_norm_broadcast")
    assert before["LDG"] == 128 // 4 and after["LDG"] == 128 // 32          # per thread and tile
    assert after["SHFL"] == before["SHFL"] + 128 // 4                        # one shuffle per column
    guards = anatomy.scan(compiled("step2_ilp2").sass)["ISETP"] - anatomy.scan(compiled("step3_norm_broadcast").sass)["ISETP"]
    assert guards >= 128 // 4 - 128 // 32                                    # 32 guards become 4


@pytest.mark.parametrize("D", [128, 256])
def test_step4_fits_two_ctas_per_sm(D):
    s4 = step("step4_hopper")
    kernel = s4.AssignKernel(D, host.DTYPES[torch.bfloat16])
    art = host.compile(kernel, torch.bfloat16)
    regs = max(sass.registers(art.cubin).values())
    assert kernel.ctas == 2 and gpus.ctas_by_registers(regs, s4.THREADS) >= 2, regs
    assert 2 * (kernel.shared.size_in_bytes() + 1024) <= s4.SM_SMEM_BYTES
    # step 3 runs alone on an SM: its ring fills a whole CTA's shared memory
    assert step("step3_norm_broadcast").stages_for(D) > kernel.stages


def test_step4_ctas_and_ring_rules():
    s4 = step("step4_hopper")
    assert [s4.ctas_per_sm(D) for D in (64, 128, 256, 272, 512)] == [2, 2, 2, 1, 1]
    assert all(s4.ctas_per_sm(D, s4.WIDE_BLOCK_N) == 1 for D in (64, 256))
    for D in range(16, 513, 16):
        for block_n in (s4.BLOCK_N, s4.WIDE_BLOCK_N):
            ctas, stages = s4.ctas_per_sm(D, block_n), s4.stages_for(D, block_n)
            used = s4.BLOCK_M * s4._d_padded(D) * 2 + stages * block_n * s4.BLOCK_D * 2 + 1024
            assert stages >= 2 and ctas * (used + 1024) <= s4.SM_SMEM_BYTES, (D, block_n)
    assert s4.wide_for(65536, 256, 4096) and not s4.wide_for(65536, 128, 4096) and not s4.wide_for(65536, 512, 4096)


def test_wide_needs_a_ring_that_holds_a_tile():
    with pytest.raises(ValueError, match="whole tile"):
        step("step4_hopper").compile(512, wide=True)


@pytest.mark.parametrize("name", ["step1_serial", "step4_hopper"])
@pytest.mark.parametrize("D", [16, 80, 512])
def test_compiles_for_other_d(name, D):
    h = ops(name, D)
    assert h["HGMMA"] == 4 * (-(-D // 64)) and h["LDL"] == 0


@pytest.mark.parametrize("D", [0, 8, 24, 528])
def test_unsupported_d_is_named(D):
    with pytest.raises(ValueError, match=f"D={D}"):
        step("step1_serial").compile(D)


def test_dtype_and_arch_are_checked():
    with pytest.raises(ValueError, match="float32"):
        step("step2_ilp2").compile(128, dtype=torch.float32)
    with pytest.raises(ValueError, match="sm_90a only"):
        step("step2_ilp2").compile(128, arch="sm_100a")
    fp16 = {ins.opcode for ins in sass.instructions(step("step1_serial").compile(64, dtype=torch.float16).sass)
            if ins.base == "HGMMA"}
    assert fp16 == {"HGMMA.64x128x16.F32"}, fp16              # no .BF16: the operands are fp16


def test_assign_refuses_cpu_tensors():
    x = torch.zeros(4, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="CUDA"):
        step("step1_serial").assign(x, x)


def test_each_step_differs_from_the_last_by_a_short_diff():
    for old, new in zip(STEPS, STEPS[1:]):
        d = stepper.diff(step(old), step(new), module_docstring=False)
        assert 0 < d.added + d.removed < 140, (old, new, d.added, d.removed)
    for name in STEPS:
        assert len(stepper.source_path(step(name)).read_text().splitlines()) <= 360


# ------------------------------------------------------------------ CPU: the tools

def test_cases_are_their_own_reference_and_exact():
    got = cases.adversarial("cpu", seed=3)
    names = [c.name for c in got]
    assert {"ties across tiles", "NaN and inf", "no winner", "signed zero", "fp16", "given c_sq"} <= set(names)
    for case in got:
        assert torch.equal(case.expect, reference.assign(case.x, case.c, case.c_sq)), case.name
    ties = got[names.index("ties across tiles")]
    assert (ties.expect[:50] == 2).all()          # the copies of centroid 2 (3, 10, 130, ...) must lose the tie
    assert (got[names.index("ties across chains")].expect[:50] == 3).all()
    assert (got[names.index("no winner")].expect == -1).all()
    assert cases.mismatches(ties.expect, ties.expect) == ""
    worse = ties.expect.clone()
    worse[3] = cases.POISON
    assert "1 never written" in cases.mismatches(worse, ties.expect)


def test_try_step_on_a_cpu_compiles_reads_sass_and_says_it_did_not_run(monkeypatch):
    monkeypatch.setattr(trial, "on_hopper", lambda: False)
    r = try_step(step("step2_ilp2"))
    assert r.previous == "step1_serial" and r.passed is None and "H100/H200" in r.check_note
    assert r.anatomy.loc["chain depth", "step2_ilp2"] < r.anatomy.loc["chain depth", "step1_serial"]
    # the same instructions, in other dependencies: ILP2 changes no compare-select count of the tile's scan
    assert not {"FSETP", "FSEL", "SEL", "FADD"} & set(r.sass_delta.index), r.sass_delta
    text, page = str(r), r._repr_html_()
    assert "chain depth" in text and "needs an H100/H200" in text and "<table" in page
    assert "kmeans_steps.csv" in r.timing_note


def test_try_step_on_an_edited_copy_compares_with_its_original(tmp_path, monkeypatch):
    monkeypatch.setattr(trial, "on_hopper", lambda: False)
    path = stepper.copy_for_editing(step("step1_serial"), tmp_path)
    path.write_text(path.read_text().replace("take = s < score ", "take = s <= score "))
    r = try_step(path, time=False)
    assert r.name == "step1_serial" and r.previous == "step1_serial (package)"
    assert trial.previous_of(step("step1_serial")) is None            # step 1 itself is timed against torch


def test_recorded_rows_read_the_steps_table(monkeypatch, tmp_path):
    from workbook import records, timing
    monkeypatch.setattr(records, "_static_provenance", lambda: (("gpu", "NVIDIA H200"), ("sm_count", 132),
                                                                 ("driver", ""), ("torch", ""), ("cutlass_dsl", "")))
    clock = iter(range(10**6)).__next__
    cmp = timing.compare({"ours/step1_serial": lambda *a: None, "ours/step2_ilp2": lambda *a: None}, [()],
                         baseline="ours/step1_serial", rounds=2, calls=1, warmup=0, clock=clock)
    records.append("h200", trial.TABLE, cmp.frame({"N": 1, "D": 16, "K": 1}), root=tmp_path)
    monkeypatch.setattr(records, "path", lambda g, t, root=None: tmp_path / g / f"{t}.csv")
    rows, note = trial.recorded_rows("step2_ilp2")
    assert len(rows) == 2 and set(rows.timing) == {"kernel", "latency"} and "recorded on the H200" in note
    assert set(rows.vs) == {"ours/step1_serial"}
    assert trial.recorded_rows("step4_hopper")[0].empty


def test_exercise_checkers_accept_the_computed_answer_and_refuse_others():
    right = {exercises.scores_per_tile: 64, exercises.chain_depth: 64, exercises.compare_selects: 192,
             exercises.ilp2_depth: 32, exercises.independent_chains: 2, exercises.two_ctas_up_to: 256,
             exercises.register_cap: 96}
    for checker, answer in right.items():
        assert checker(answer), checker.__name__
        assert not checker(answer + 1), checker.__name__
    assert exercises.norm_traffic(4, 32) and not exercises.norm_traffic(32, 0)
    assert not exercises.norm_traffic(4, 32, block_n=256)
    assert exercises.ring_slots(5) and not exercises.ring_slots(8) and exercises.ring_slots(3, D=256)
    # each folded_norms slot also holds 512 bytes of norms: one slot fewer at D = 64 and 128
    assert exercises.folded_slots(5) and not exercises.folded_slots(6) and exercises.folded_slots(4, D=128)
    with pytest.raises(ValueError, match="number"):
        exercises.chain_depth("64")
    assert "Right." in str(exercises.chain_depth(64)) and "Not yet" in exercises.chain_depth(1)._repr_html_()


def test_tile_size_and_tie_rule_exercises_on_edited_copies(tmp_path, monkeypatch):
    monkeypatch.setattr(trial, "on_hopper", lambda: False)
    path = stepper.copy_for_editing(step("step1_serial"), tmp_path)
    source = path.read_text()
    path.write_text(source.replace("BLOCK_N = 128 ", "BLOCK_N = 64 "))
    assert exercises.tile_size(path, 32) and not exercises.tile_size(path, 64)
    assert "HGMMA.64x64x16" in exercises.tile_size(path, 32).message
    path.write_text(source)
    assert not exercises.tie_rule(path)                          # not edited yet
    path.write_text(source.replace("take = s < score ", "take = s <= score "))
    verdict = exercises.tie_rule(path)
    assert verdict and "GTU" in verdict.message


# ------------------------------------------------------------------ CPU: the floor model


def test_floor_terms_by_hand():
    f = floor.floor(65536, 128, 4096)
    assert f.tensor_ms == pytest.approx(2 * 65536 * 128 * 4096 / 790e12 * 1e3)
    assert f.epilogue_ms == pytest.approx(4 * 65536 * 4096 / (132 * 128 * 1.98e9) * 1e3)
    assert f.dram_ms == pytest.approx((2 * (65536 + 4096) * 128 + 4 * 65536) / 4.3e12 * 1e3)
    assert f.bound == "tensor cores" and f.ms == f.tensor_ms and "us" in str(f)


def test_floor_bound_moves_with_the_shape():
    # tiny D: scores cost more on the CUDA cores than their dot products on the tensor cores
    assert floor.floor(65536, 16, 4096).bound == "CUDA-core epilogue"
    # one centroid: nothing to compute, everything to read
    assert floor.floor(1 << 20, 512, 1).bound == "DRAM"
    rng = random.Random()
    N, D, K = rng.randint(1, 1 << 20), rng.choice([16, 64, 128, 256, 512]), rng.randint(1, 1 << 14)
    f = floor.floor(N, D, K)
    assert f.ms == max(f.tensor_ms, f.epilogue_ms, f.dram_ms) > 0
    assert floor.floor(2 * N, D, K).ms >= f.ms           # more points never make it faster


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_floor_rejects_non_sizes(bad):
    with pytest.raises(ValueError, match="positive integer"):
        floor.floor(bad, 128, 128)


# ------------------------------------------------------------------ GPU: answers

@gpu
@needs_hopper
@pytest.mark.parametrize("name,options", FORMS, ids=FORM_IDS)
def test_adversarial_cases_bit_for_bit(name, options):
    for case in cases.adversarial("cuda"):
        got = cases.run(step(name).assign, case, **options)
        assert not cases.mismatches(got, case.expect), f"{name} {options} {case.name}: {cases.mismatches(got, case.expect)}"


SHAPES = [(n, 128, k) for n in (1, 127, 129, 300) for k in (1, 3, 129, 1000)] + [(100003, 256, 1000), (4096, 256, 4096)]


@gpu
@needs_hopper
@pytest.mark.parametrize("name,options", FORMS, ids=FORM_IDS)
def test_exact_on_small_integers_with_tails(name, options):
    for N, D, K in SHAPES:
        gen = torch.Generator().manual_seed(N * 7919 + D * 31 + K)
        x, c = cases.small_integers(N, D, gen).cuda(), cases.small_integers(K, D, gen).cuda()
        case = cases.Case(f"N={N} D={D} K={K}", x, c)
        got = cases.run(step(name).assign, case, **options)
        assert not cases.mismatches(got, case.expect), f"{name} {case.name}: {cases.mismatches(got, case.expect)}"


@gpu
@needs_hopper
@pytest.mark.parametrize("name", STEPS)
@pytest.mark.parametrize("D", [16, 192, 512])
def test_other_d(name, D):
    gen = torch.Generator().manual_seed(D)
    case = cases.Case(f"D={D}", cases.small_integers(700, D, gen).cuda(), cases.small_integers(900, D, gen).cuda())
    got = cases.run(step(name).assign, case)
    assert not cases.mismatches(got, case.expect), f"{name} D={D}: {cases.mismatches(got, case.expect)}"


@gpu
@needs_hopper
@pytest.mark.parametrize("name,options", FORMS, ids=FORM_IDS)
def test_random_bf16_agrees_except_within_fp32_error(name, options):
    gen = torch.Generator().manual_seed(4099)
    x = torch.randn(4099, 256, generator=gen).to(torch.bfloat16).cuda()
    c = torch.randn(4096, 256, generator=gen).to(torch.bfloat16).cuda()
    got = cases.run(step(name).assign, cases.Case("random", x, c, expect=torch.empty(0)), **options).long()
    want = reference.assign(x, c).long()
    bad = (got != want).nonzero().flatten()
    assert bad.numel() <= 41, f"{bad.numel()} of 4099 rows disagree"
    if bad.numel():
        # each disagreement must be a near tie: two exact scores within the fp32 accumulation error of both (D
        # terms summed in any order err by at most (D - 1) u sum|terms|, u = 2^-24; doubled for the second order
        # and the final roundings)
        xb, u = x[bad].double(), 2.0 ** -24
        exact = 0.5 * (c.double() ** 2).sum(1) - xb @ c.double().t()
        magnitude = xb.abs() @ c.double().abs().t() + 0.5 * (c.double() ** 2).sum(1)
        bound = (2 * x.shape[1] + 1) * u * magnitude
        rows = torch.arange(bad.numel(), device=x.device)
        gap = (exact[rows, got[bad]] - exact[rows, want[bad]]).abs()
        assert (gap <= bound[rows, got[bad]] + bound[rows, want[bad]]).all()


@gpu
@needs_hopper
def test_misaligned_and_oversized_inputs_are_refused():
    x = torch.zeros(65 * 128 + 8, dtype=torch.bfloat16, device="cuda")[4:4 + 65 * 128].view(65, 128)
    c = torch.zeros(10, 128, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="16-byte"):
        step("step3_norm_broadcast").assign(x, c)
    with pytest.raises(ValueError, match="D=24"):
        step("step1_serial").assign(torch.zeros(4, 24, dtype=torch.bfloat16, device="cuda"),
                                    torch.zeros(4, 24, dtype=torch.bfloat16, device="cuda"))


@gpu
@needs_hopper
def test_try_step_on_the_gpu_checks_and_times():
    r = try_step(step("step3_norm_broadcast"), shapes=((65536, 128, 4096),), rounds=5, calls=3)
    assert r.passed, [(c.case, c.detail) for c in r.failures()]
    ratio = r.comparisons[(65536, 128, 4096)].ratio("step3_norm_broadcast")
    assert 0.3 < ratio.value < 3 and ratio.verdict in ("faster", "slower", "noise")
    assert len(r.timing_table()) == 2


@gpu
@needs_hopper
def test_a_broken_tie_rule_is_caught(tmp_path):
    path = stepper.copy_for_editing(step("step1_serial"), tmp_path)
    path.write_text(path.read_text().replace("take = s < score ", "take = s <= score "))
    assert exercises.tie_rule(path)


# ------------------------------------------------------------------ CPU: the benchmark's rows and their summaries

FAKE_MS = {"ours/step1_serial": 1.0, "ours/step2_ilp2": 1.0, "ours/step3_norm_broadcast": 0.8,
           "ours/step4_hopper": 0.6, "ours/auto": 0.6, "flashlib/cute": 0.75}


def fake_run(shapes=((65536, 128, 4096), (262144, 256, 4096)), noise=0.02):
    """The benchmark's rows for contenders of known times on a fake clock, as kmeans_kernels.steps.bench makes them."""
    import pandas as pd
    from kmeans_kernels.steps import bench
    from workbook import timing
    frames = []
    for N, D, K in shapes:
        state = {"now": 0.0, "rng": random.Random(N + D + K)}

        def make(ms):
            def call(*args):
                state["now"] += ms * (1 + state["rng"].uniform(-noise, noise)) / 1e3
            return call
        names = list(FAKE_MS)
        cmp = timing.compare({n: make(ms) for n, ms in FAKE_MS.items()}, [()], baseline=names[0], rounds=12,
                             calls=2, warmup=0, clock=lambda: state["now"])
        frames.append(cmp.frame({"N": N, "D": D, "K": K}, against=bench.previous(names),
                                also={"flashlib": "flashlib/cute"}))
    df = pd.concat(frames, ignore_index=True)
    for col, value in (("gpu", "NVIDIA H200"), ("commit", "abc1234"), ("date", "2026-12-01T00:00:00Z")):
        df[col] = value
    return df


def test_bench_order_and_references():
    from kmeans_kernels.steps import bench
    names = [f"ours/{s}" for s in STEPS] + ["ours/auto", "flashlib/cute"]
    ref = bench.previous(names)
    assert ref["ours/step2_ilp2"] == "ours/step1_serial" and ref["ours/auto"] == "ours/step4_hopper"
    assert ref["flashlib/cute"] == "ours/auto" and ref["ours/step1_serial"] == "ours/step1_serial"


def test_bench_refuses_to_run_without_a_hopper_gpu(capsys):
    from kmeans_kernels.steps import bench
    if ON_HOPPER:
        pytest.skip("a Hopper GPU is here")
    assert bench.main(["--no-record", "--quick"]) == 2
    assert "H100/H200" in capsys.readouterr().out


def test_results_latest_run_ratios_and_progression():
    from kmeans_kernels.steps import results
    run, note = results.latest_run(fake_run())
    assert "commit abc1234" in note and "2 shapes" in note
    r = results.ratios(run, "ours/step3_norm_broadcast")
    assert list(r.verdict) == ["faster", "faster"] and r.ratio.tolist() == pytest.approx([0.8, 0.8], rel=0.02)
    assert r.attrs["vs"] == "step2_ilp2"
    assert set(results.ratios(run, "ours/step2_ilp2").verdict) == {"noise"}
    table = results.progression(run)
    assert list(table.index) == [*STEPS, "production auto"]
    assert table.loc["step4_hopper", "% of flashlib"] == pytest.approx(100 * 0.75 / 0.6, rel=0.02)
    assert table.loc["step4_hopper", "% of flashlib lo"] < table.loc["step4_hopper", "% of flashlib"]
    want_floor = 100 * timing_geomean([floor.floor(65536, 128, 4096).ms / 0.6, floor.floor(262144, 256, 4096).ms / 0.6])
    assert table.loc["step4_hopper", "% of floor"] == pytest.approx(want_floor, rel=0.02)
    vs = results.versus_floor(run, "ours/step4_hopper")
    assert vs["flashlib / this"].tolist() == pytest.approx([0.75 / 0.6] * 2, rel=0.02)
    assert vs.loc[(65536, 128, 4096), "% of floor"] == pytest.approx(100 * floor.floor(65536, 128, 4096).ms / 0.6,
                                                                      rel=0.02)
    empty, said = results.latest_run(fake_run().iloc[0:0])
    assert empty.empty and "no recorded data" in said


def timing_geomean(values):
    from workbook import timing
    return timing.geomean(values)


def test_geomean_ci_widens_with_the_intervals():
    from kmeans_kernels.steps import results
    g, lo, hi = results.geomean_ci([2.0, 0.5], [2.0, 0.5], [2.0, 0.5])
    assert (g, lo, hi) == pytest.approx((1.0, 1.0, 1.0))
    narrow = results.geomean_ci([1.0] * 4, [0.99] * 4, [1.01] * 4)
    wide = results.geomean_ci([1.0] * 4, [0.9] * 4, [1.1] * 4)
    assert wide[1] < narrow[1] < 1 < narrow[2] < wide[2]


def test_results_figures_draw():
    import matplotlib
    matplotlib.use("Agg")
    from kmeans_kernels.steps import results
    run, note = results.latest_run(fake_run())
    fig = results.plot_progression(results.progression(run), note)
    assert len(fig.axes) == 2 and "kmeans_steps" in note
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels[-1] == "step4_hopper" and "production auto" not in labels     # the latest step last
    fig = results.plot_ratios(run, ["ours/step2_ilp2", "ours/step3_norm_broadcast"], note)
    drawn = [line for line in fig.axes[0].get_lines() if line.get_linestyle() not in ("None", "")]
    assert len(drawn) == 1 and list(drawn[0].get_ydata()) == [1, 1]     # only the line at 1: no shape joins another


# ------------------------------------------------------------------ CPU: the ILP2 evidence

def test_each_thread_holds_two_rows_of_the_accumulator():
    from kmeans_kernels.steps import evidence
    assert evidence.rows_per_thread(128) == {"threads": 128, "rows per thread": 2, "columns per row": 32}
    assert evidence.rows_per_thread(256)["columns per row"] == 64
    # the steps' view of their registers says the same: register _register(r, j) holds row r0 + 8r
    s1 = step("step1_serial")
    regs = sorted(s1._register(r, j) for r in range(2) for j in range(128 // 4))
    assert regs == list(range(64))


def test_chains_and_issue_budget():
    from kmeans_kernels.steps import evidence
    table = evidence.chains({"step1_serial": step("step1_serial"), "step2_ilp2": step("step2_ilp2")})
    assert table.loc["independent chains per thread"].tolist() == [2, 4]
    assert table.loc["compare-selects per link of the chain", "step2_ilp2"] > \
        1.8 * table.loc["compare-selects per link of the chain", "step1_serial"]
    budget = evidence.issue_budget(compiled("step1_serial"), 128)
    assert budget["warps per scheduler"] == 2 and budget["WGMMA cycles per tile"] > 1000
    assert 0 < budget["scan / WGMMA"] < 2


NCU_REPORT = """# ncu of the k-means steps
profiled: step1_serial 262144x128x4096
profiled: step2_ilp2 262144x128x4096
==PROF== Disconnected from process 1
  kernel_cutlass_kernel_step1 (2048, 1, 1)x(288, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: Command line profiler metrics
    ----------------------------------------------------------------------- ----------- ------------
    Metric Name                                                             Metric Unit Metric Value
    gpu__time_duration.sum                                                           ms         1.20
    smsp__issue_active.avg.pct_of_peak_sustained_active                               %        61.50
    smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio                   0.30
    smsp__average_warps_issue_stalled_wait_per_issue_active.ratio                               0.45
  kernel_cutlass_kernel_step2 (2048, 1, 1)x(288, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    gpu__time_duration.sum                                                           ms         1.21
    smsp__issue_active.avg.pct_of_peak_sustained_active                               %        61.20
    smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio                   0.20
    smsp__average_warps_issue_stalled_wait_per_issue_active.ratio                               0.50
"""


def test_read_ncu_pairs_kernels_and_reads_unitless_ratios(tmp_path):
    from kmeans_kernels.steps import evidence
    path = tmp_path / "ncu.txt"
    path.write_text(NCU_REPORT)
    df = evidence.read_ncu(path)
    assert list(df.index) == ["step1_serial 262144x128x4096", "step2_ilp2 262144x128x4096"]
    assert df["smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"].tolist() == [0.45, 0.5]
    assert df["gpu__time_duration.sum"].tolist() == [1.2, 1.21]
    table = evidence.stall_table(df)
    assert list(table.index[:2]) == ["wait", "short scoreboard"] and "issue slots busy (%)" in table.index


def _source_export(kernels) -> str:
    """A small `ncu --page source --csv --print-source sass` export: one block per kernel of (SASS, stall, n)."""
    head = ('"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed",'
            '"stall_barrier","stall_long_sb","stall_selected","stall_barrier (Not Issued)"')
    blocks = []
    for k, rows in enumerate(kernels):
        lines = [f'"Kernel Name","kernel_{k}"', head]
        for i, (sass_line, reason, n) in enumerate(rows):
            cells = {"stall_barrier": 0, "stall_long_sb": 0, "stall_selected": 0, reason: n}
            lines.append(f'"0x{16 * i:x}","      {sass_line}","{n}","100",'
                         f'"{cells["stall_barrier"]}","{cells["stall_long_sb"]}","{cells["stall_selected"]}","7"')
        blocks.append("\n".join(lines))
    return "\n".join(blocks) + "\n"


PC_KERNEL = [("BAR.SYNC.DEFER_BLOCKING 0x0", "stall_barrier", 1),          # __syncthreads: a barrier stall
             ("SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R7+URZ+0x40], R3", "stall_long_sb", 10),   # producer
             ("@!P0  NANOSLEEP.SYNCS 0x989680", "stall_long_sb", 20),        # producer
             ("@P0   EXIT", "stall_selected", 2),                            # producer
             ("WARPGROUP.ARRIVE", "stall_selected", 3),                      # work
             ("SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R15+URZ+0x10], R11", "stall_barrier", 4),   # warpgroup converging
             ("@!P0  NANOSLEEP.SYNCS 0x989680", "stall_long_sb", 6),         # ring data
             ("@!P0  BRA 0x7ff82b7c5e50", "stall_long_sb", 5),               # ring data (the wait loop's branch)
             ("HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24, gsb0", "stall_selected", 7),    # work
             ("WARPGROUP.DEPBAR.LE gsb0, 0x0", "stall_barrier", 30),         # own WGMMAs
             ("FMNMX R33, R40, R33, PT", "stall_selected", 12)]              # work


def test_pc_sampling_reads_each_kernel_and_sorts_the_warps_by_region(tmp_path):
    import gzip
    from kmeans_kernels.steps import evidence
    path = tmp_path / "source.csv.gz"
    path.write_bytes(gzip.compress(_source_export([PC_KERNEL, PC_KERNEL[:4] + PC_KERNEL[-2:]]).encode()))
    pc = evidence.pc_sampling(path)
    assert pc.kernel.tolist() == [0] * len(PC_KERNEL) + [1] * 6
    assert "stall_barrier (Not Issued)" not in pc.columns and pc.executed.eq(100).all()
    where = evidence.where_warps_are(pc)
    total = sum(n for _, _, n in PC_KERNEL)
    want = dict(zip(evidence.PC_REGIONS, (3 + 7 + 12, 30, 1 + 4, 6 + 5, 10 + 20 + 2)))
    assert where.loc[0].round(6).to_dict() == {k: round(100 * v / total, 6) for k, v in want.items()}
    assert where.loc[1, "waiting for its own WGMMAs"] == pytest.approx(100 * 30 / (1 + 32 + 30 + 12))
    fig = evidence.plot_where_warps_are(where, "test")
    assert len(fig.axes[0].patches) == 2 * len(evidence.PC_REGIONS)


def test_pc_sampling_refuses_what_it_cannot_read(tmp_path):
    from kmeans_kernels.steps import evidence
    empty = tmp_path / "empty.csv"
    empty.write_text("nothing here\n")
    with pytest.raises(ValueError, match="no kernel in this export"):
        evidence.pc_sampling(empty)
    no_producer = tmp_path / "no_producer.csv"
    no_producer.write_text(_source_export([PC_KERNEL[4:]]))
    with pytest.raises(ValueError, match="no producer section"):
        evidence.where_warps_are(evidence.pc_sampling(no_producer))


def test_the_recorded_pc_sampling_reads_whole():
    from kmeans_kernels.steps import evidence
    from workbook import records
    pc = evidence.pc_sampling(records.DATA / "measured/h200/probes/kmeans_pc_sampling_8e2dd7a.csv.gz")
    where = evidence.where_warps_are(pc)
    assert len(where) == 2 and where.sum(axis=1).round(6).eq(100).all()
    assert (where["a tile's work (MMA issue, norms, fold)"] > 50).all()


def test_roles_table_adds_the_roles_and_plots(tmp_path):
    from kmeans_kernels.steps import evidence
    times = {"kernel as shipped": 300.0, "MMAs only": 90.0, "folds only": 130.0, "both, apart": 176.0}
    frame = pd.DataFrame([dict(N=65536, D=64, K=4096, mode=m, us_median=v) for m, v in times.items()])
    t = evidence.roles_table(frame)
    row = t.loc[(65536, 64, 4096)]
    assert row["MMAs + folds"] == 220.0 and row["both / sum"] == pytest.approx(0.8)
    assert row["max / sum"] == pytest.approx(130 / 220)
    fig = evidence.plot_roles(t, "test")
    assert len(fig.axes[0].patches) == 3
    with pytest.raises(ValueError, match="no \\['both, apart'\\] rows"):
        evidence.roles_table(frame[frame["mode"] != "both, apart"])


def test_the_recorded_roles_probe_reads_whole():
    from kmeans_kernels.steps import evidence
    from workbook import records
    t = evidence.roles_table(pd.read_csv(records.DATA / "measured/h200/probes/kmeans_roles_8e2dd7a.csv"))
    assert len(t) == 3 and (t["both / sum"] <= 1.05).all() and (t["max / sum"] < t["both / sum"]).all()


def test_folded_norms_take_the_subtraction_and_the_shuffles_out_of_the_fold():
    from kmeans_kernels.steps import evidence
    table = evidence.fold_block(Ds=(64,))
    plain, folded = table.loc[(64, "lean_ping_pong")], table.loc[(64, "folded_norms")]
    assert plain.FADD == 64 and folded.FADD == 0            # one subtraction per score, then none
    assert plain.SHFL >= 32 and folded.SHFL < 32             # the norms' broadcast is gone
    assert folded.FSETP == plain.FSETP and folded.FMNMX == plain.FMNMX   # the same pairs scan
    assert folded.instructions < plain.instructions - 64


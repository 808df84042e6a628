"""The GEMM walkthrough's step kernels (gemm_kernels/steps): what each compiles to (CPU, no GPU needed) and
what it computes (GPU, marked `gpu`, on an H100/H200).

CPU: every step is compiled for sm_90a at a shape drawn at random (tails in M, N, K), and its SASS must show
the step's idea: step 1 stores c through stmatrix + TMA store and no STG; steps 2-4 store with 128-bit STG only,
with the quad transpose's butterfly shuffles; the launch shared memory is exactly the stage arithmetic of
gemm_kernels.stages (so the ring depth is what the docstring says); WGMMAs stay pipelined (one wait in the
loop, one after it, per K-loop copy); nothing spills. Step 4's work list covers c exactly once and keeps the
planner's makespan.
GPU: exact on small integers (tails included), random inputs within the bf16 band of fp32 torch, every output
element written (poisoned with NaN first), fp16, every narrow width of step 4, clear errors.
"""
from __future__ import annotations

import functools
import itertools
import random

import pytest
import torch

from gemm_kernels import stages as stages_lib
from gemm_kernels import waves
import pandas as pd

from gemm_kernels import steps
from gemm_kernels.steps import bench, common, drawings, evidence, exercises, figures, findings
from gemm_kernels.steps import step1_four_stages as step1
from gemm_kernels.steps import step2_register_epilogue as step2
from gemm_kernels.steps import step3_more_stages as step3
from gemm_kernels.steps import step4_persistent_wave_tail as step4
from workbook import gpus, sass

KIB = 1024
STEPS = {"step1": step1, "step2": step2, "step3": step3, "step4": step4}
IS_HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
needs_hopper = pytest.mark.skipif(not IS_HOPPER, reason="needs an H100/H200 (sm_90a)")


def random_shape(rng: random.Random, step: str) -> tuple[int, int, int]:
    """M any, N and K multiples of 8 (the alignment rule), mostly not multiples of the tile. For step 4, near
    4096^2, where the balanced plan has narrow items (so its build has both widths)."""
    if step == "step4":
        return rng.randint(3969, 4096), 8 * rng.randint(481, 512), 8 * rng.randint(1, 100)
    return rng.randint(1, 1500), 8 * rng.randint(1, 200), 8 * rng.randint(1, 100)


@functools.lru_cache(maxsize=None)
def built(step: str, dtype=torch.bfloat16, **kw):
    """One compile per step and options per session, at a random shape (the kernels are shape-generic)."""
    return STEPS[step].compile(*random_shape(random.Random(), step), dtype=dtype, **kw)


def facts(step: str, **kw) -> dict:
    return evidence.facts(built(step, **kw))


# ------------------------------------------------------------------------------------------- CPU: SASS

@pytest.mark.parametrize("step,tile_n", [("step1", 256), ("step2", 256), ("step3", 128), ("step4", 256)])
def test_each_step_issues_wgmma_of_its_tile_fed_by_tma_without_spills(step, tile_n):
    f = facts(step)
    assert f"64x{tile_n}x16" in f["MMA"], f
    assert f["UTMALDG"] > 0 and f["spills (LDL+STL)"] == 0, f


@pytest.mark.parametrize("step", list(STEPS))
def test_wgmmas_stay_pipelined(step):
    """One wait_group(1) in each K loop and one wait_group(0) after it: ptxas serializing the WGMMAs would give
    every HGMMA its own WARPGROUP.DEPBAR. Step 4's balanced build has two K-loop copies (two widths)."""
    loops = 2 if step == "step4" else 1
    assert facts(step)["WARPGROUP.DEPBAR"] == 2 * loops


def test_step1_stores_c_through_shared_memory_and_tma():
    f = facts("step1")
    assert f["STSM"] > 0 and f["UTMASTG"] == 256 // 32, f     # one TMA store per 32-column sub-tile
    assert f["STG.E.128"] == 0 and f["other STG"] == 0 and f["SHFL.BFLY"] == 0, f


@pytest.mark.parametrize("step,tile_n", [("step2", 256), ("step3", 128), ("step4", 256)])
def test_register_steps_store_128_bits_from_registers(step, tile_n):
    f = facts(step)
    assert f["STSM"] == 0 and f["UTMASTG"] == 0 and f["other STG"] == 0, f
    # one 16-byte store per row half and 32 columns; 2 shuffle steps x 2 word pairs per store
    assert f["STG.E.128"] == 2 * tile_n // 32 and f["SHFL.BFLY"] == 4 * 2 * tile_n // 32, f
    assert f["BAR.SYNC"] <= 1, "only the pipeline's one-time barrier: no epilogue barriers"


@pytest.mark.parametrize("step,tile_n,epilogue,stages", [("step1", 256, "staged", 4), ("step2", 256, "register", 4),
                                                         ("step3", 128, "register", 7), ("step4", 256, "register", 4)])
def test_launch_shared_memory_is_the_stage_arithmetic(step, tile_n, epilogue, stages):
    extra = dict(epilogue_tile=(128, step1.EPI_N), epilogue_buffers=step1.EPI_BUFFERS) if epilogue == "staged" else {}
    budget = stages_lib.stages((128, tile_n, 64), epilogue, "sm_90a", **extra)
    assert budget.stages == stages                  # the most that fit...
    f = facts(step)
    assert f["mbarriers"] == 2 * stages             # ... is the ring each build has (full + empty per stage)
    assert f["smem KiB"] * KIB == stages * budget.stage_bytes + budget.epilogue_bytes + budget.reserved_bytes


def test_step3_buys_the_seventh_stage_only_on_the_narrow_tile():
    assert facts("step3")["mbarriers"] == 2 * 7 and facts("step3")["smem KiB"] == 225
    wide = facts("step3", tile_n=256)
    assert wide["mbarriers"] == 2 * 4 and wide["smem KiB"] == 4 * 48 + 1     # a 48 KiB stage: still 4
    assert facts("step2")["smem KiB"] == 193 and facts("step1")["smem KiB"] == 209   # 16 KiB freed, no stage


def test_fp16_builds_issue_fp16_wgmma():
    # nvdisasm names the bf16 WGMMA HGMMA.<shape>.F32.BF16 and the fp16 one (the default) HGMMA.<shape>.F32
    for step in ("step1", "step4"):
        for dtype, suffix in ((torch.float16, ".F32"), (torch.bfloat16, ".F32.BF16")):
            mma = {op for op in sass.histogram(built(step, dtype=dtype).sass) if op.startswith("HGMMA")}
            assert mma and all(op.endswith(suffix) for op in mma), mma


def test_step4_balanced_build_has_both_widths():
    for M, N in ((4096, 4096), (2560, 7168)):
        narrow = step4.plan(M, N, gpu=gpus.H200).narrow
        f = evidence.facts(step4.compile(M, N, 512))
        assert f["MMA"] == f"64x{narrow}x16, 64x256x16", f
    assert evidence.facts(step4.compile(4096, 4096, 512, schedule="uniform"))["MMA"] == "64x256x16"


@pytest.mark.parametrize("call,match", [
    (lambda s: s.compile(64, 60, 64), "multiples of 8"),
    (lambda s: s.compile(64, 64, 12), "multiples of 8"),
    (lambda s: s.compile(0, 64, 64), "M must be"),
    (lambda s: s.compile(2**31, 64, 64), "M must be"),
    (lambda s: s.compile(64, 64, 64, arch="sm_100a"), "Hopper"),
    (lambda s: s.compile(64, 64, 64, tile_n=192), "tile_n"),
    (lambda s: s.compile(64, 64, 64, stages=9), "do not fit"),
    (lambda s: s.compile(64, 64, 64, dtype=torch.float32), "take"),
])
@pytest.mark.parametrize("step", list(STEPS))
def test_compile_rejects_what_a_step_cannot_take(step, call, match):
    with pytest.raises(ValueError, match=match):
        call(STEPS[step])


def test_quad_transpose_moves_each_lanes_column_to_it(monkeypatch):
    # the shuffle network on 4 simulated lanes at once: a "register" is an array of the 4 lanes' values
    import numpy as np
    q = np.arange(4)
    monkeypatch.setattr(step2.cute.arch, "shuffle_sync_bfly", lambda x, offset: x[q ^ offset])
    monkeypatch.setattr(step2.cutlass, "select_", lambda c, a, b: np.where(c, a, b))
    W = np.random.default_rng().integers(0, 2**31, size=(4, 4))      # W[lane, t]: lane q starts with row q
    out = step2.quad_transpose([W[:, t] for t in range(4)], q)
    assert np.array_equal(np.stack(out, axis=1), W.T)


# ------------------------------------------------------------------------------------------- CPU: step 4's plan

@pytest.mark.parametrize("M,N", [(4096, 4096), (2560, 7168), (1000, 1032), (8192, 8192), (77, 8)])
@pytest.mark.parametrize("schedule", step4.SCHEDULES)
def test_work_list_covers_c_once_and_keeps_the_planners_makespan(M, N, schedule):
    plan = step4.plan(M, N, schedule=schedule, gpu=gpus.H200)
    work = step4.work_list(plan)
    assert sorted(work) == sorted(map(tuple, plan.items))
    covered = torch.zeros(M, N, dtype=torch.int32)
    for m0, n0, w in work:
        covered[m0:m0 + step4.TILE_M, n0:n0 + w] += 1
    assert bool((covered == 1).all())
    # the kernel's static walk: slot s runs items s, s + slots, ...
    ends = [sum(w for _, _, w in work[s::plan.slots]) for s in range(plan.slots)]
    assert max(ends) / plan.wide == pytest.approx(plan.makespan)
    assert all(w == plan.wide for _, _, w in work[:len(work) - sum(w != plan.wide for _, _, w in work)])


def test_planner_fills_the_last_wave_at_4096_squared():
    uniform = step4.plan(4096, 4096, schedule="uniform", gpu=gpus.H200)
    balanced = step4.plan(4096, 4096, gpu=gpus.H200)
    assert (len(uniform.items), uniform.slots, round(uniform.waves, 2), uniform.makespan) == (512, 132, 3.88, 4.0)
    assert balanced.narrow == 240 and len(balanced.items) == 4 * 132
    assert balanced.makespan == pytest.approx(3 + 240 / 256)


# ------------------------------------------------------------------------------------------- CPU: evidence

def test_16x256b_fragment_is_the_wgmma_accumulator_layout():
    """Why seed 004's Blackwell epilogue shuffles exactly as step 2 does: tcgen05.ld.16x256b hands each lane the
    columns and rows a Hopper WGMMA leaves it, register for register."""
    for lane, reg in itertools.product(range(32), range(64)):
        assert evidence.fragment_16x256b(lane, reg) == evidence.wgmma_fragment(lane, reg)
    assert evidence.fragment_16x256b(5, 0) == (1, 2) and evidence.fragment_16x256b(5, 7) == (9, 11)


def test_blackwell_evidence_reads_the_production_builds():
    from gemm_kernels import blackwell_host
    reg = evidence.blackwell_epilogue(blackwell_host.compile_gemm(4096, 4096, 4096, epilogue="register"))
    staged = evidence.blackwell_epilogue(blackwell_host.compile_gemm(4096, 4096, 4096, epilogue="staged"))
    for e in (reg, staged):
        assert e["tcgen05.ld (PTX)"] and e["LDTM (SASS)"].startswith("LDTM"), e
    assert reg["STG.E.128 (SASS)"] > 0 and reg["st.global.v4 (PTX)"] == reg["STG.E.128 (SASS)"], reg
    assert reg["UTMASTG (SASS)"] == 0 and reg["STSM / STS.128 (SASS)"] == 0, reg
    assert staged["STG.E.128 (SASS)"] == 0 and staged["UTMASTG (SASS)"] > 0, staged
    # ours loads one TMEM lane (one row of c) per thread: no transpose, so no butterfly shuffle
    assert reg["tcgen05.ld (PTX)"].startswith("32x32b") and reg["SHFL.BFLY (SASS)"] == 0


def test_launch_smem_refuses_a_build_it_cannot_read():
    class Fake:
        class compiled:
            ir_module = "%1 = llvm.mlir.constant(65536 : i64) : i64\n%2 = llvm.mlir.constant(98304 : i64) : i64\n" \
                        "llvm.store %1, %9\nllvm.store %2, %9\n"
    with pytest.raises(ValueError, match="one launch"):
        evidence.launch_smem_bytes(Fake)


# ------------------------------------------------------------------------------------------- CPU: exercises

@pytest.mark.parametrize("name", sorted(exercises.QUESTIONS))
def test_exercise_checkers_accept_the_librarys_answer_and_hint_otherwise(name):
    right = exercises._answer(name)
    assert exercises.check(name, right) and str(exercises.check(name, right)).startswith("Right.")
    wrong = {"stages": 4, "stage_gain": {64, 128, 192}, "waves": (3.88, 4.0), "balance": (240, 3.25),
             "cluster_bytes": (16, 32, 2)}[name]
    result = exercises.check(name, wrong)
    assert not result and result.message == exercises.HINTS[name]
    assert str(right) not in result.message                     # the hint never gives the answer away
    assert exercises.question(name) and str(right).split(":")[0] in exercises.solution(name)


def test_exercise_answers_follow_the_arithmetic():
    assert exercises._answer("stages") == 5                     # 5 x 40 + 16 + 1 <= 227 < 6 x 40 + 17
    assert exercises._answer("stage_gain") == {64, 128}
    assert exercises._answer("waves") == (3.15, 4.0)           # 416 tiles on 132 SMs
    assert exercises._answer("balance") == (192, 3.25)
    assert exercises._answer("cluster_bytes") == (12, 32, 2)      # 8 KiB of A + 4 of B; 4 x 8 items; 32 > 30
    assert not exercises.check("stages", True) and not exercises.check("waves", 3.15)
    with pytest.raises(ValueError, match="no exercise"):
        exercises.check("nope", 1)


# ------------------------------------------------------------------------------------------- CPU: harness

def cpu_rows(rounds=3, shape=(64, 48, 32)):
    """gemm_steps rows measured on the host (perf_counter: only to test the harness) for two fake steps."""
    M, N, K = shape
    sets = [(torch.randn(M, K), torch.randn(K, N)) for _ in range(3)]
    fns = {("ours", "step1_four_stages"): torch.matmul,
           ("ours", "step2_register_epilogue"): lambda a, b: torch.matmul(a, b) * 1.0,
           bench.TORCH: torch.matmul}
    return bench.measure(M, N, K, fns, rounds=rounds, calls=2, sets=sets)


def test_bench_rows_carry_both_timings_and_ratios_to_the_previous_step_and_torch():
    rows = cpu_rows()
    assert set(rows.timing) == {"latency", "kernel"} and len(rows) == 6
    assert (rows.match_rate == 1).all()
    step2_rows = rows[rows.variant == "step2_register_epilogue"]
    assert (step2_rows.previous == "step1_four_stages").all()
    assert ((step2_rows.ratio_previous_lo <= step2_rows.ratio_previous)
            & (step2_rows.ratio_previous <= step2_rows.ratio_previous_hi)).all()
    assert rows[rows.variant == "step1_four_stages"].ratio_previous.isna().all()
    torch_rows = rows[rows.variant == "torch.matmul"]
    assert (torch_rows.ratio_torch == 1).all()
    assert "% of torch" in bench.summary(rows)


def test_bench_rows_go_through_records_and_back(tmp_path, monkeypatch, ticking_clock):
    """One run appends shape by shape while the clock moves on: `recorded` finds the whole latest run."""
    from workbook import records
    monkeypatch.setattr(records, "provenance", lambda: {**dict.fromkeys(records.PROVENANCE, ""), "gpu": "NVIDIA H200",
                                                        "sm_count": 132, "date": records.run_date()})
    run_dates = {}
    for run, shapes in (("run-a", [(64, 48, 32)]), ("run-b", [(64, 48, 32), (32, 64, 16)])):
        run_dates[run] = records.start_run()
        for shape in shapes:
            ticking_clock.now()                                        # the clock moves on between shapes
            records.append("h200", bench.TABLE, cpu_rows(shape=shape), root=tmp_path)
    back = steps.recorded(["step1_four_stages", "step2_register_epilogue"], root=tmp_path)
    assert set(back.date) == {run_dates["run-b"]} and len(back) == 12
    back = steps.recorded(["step1_four_stages", "step2_register_epilogue"], shapes=[(32, 64, 16)], root=tmp_path)
    assert len(back) == 6
    assert steps.recorded(["step3_more_stages"], root=tmp_path).empty
    table = steps.timing_table(back)
    assert {"% of torch", "95% CI", "vs previous"} <= set(table.columns)
    fig = figures.progression(back, source="a test")
    assert fig.axes and len(figures.progression_table(back)) == 2
    table, note = steps.recorded_report(["step1_four_stages"], root=tmp_path)
    assert len(table) == 8 and "data/measured/h200/gemm_steps.csv" in note   # step 1 and torch, 2 shapes
    assert steps.recorded_report(["step4_persistent_wave_tail"], root=tmp_path)[0] is None


def test_progression_table_orders_the_story_and_inverts_the_ratio():
    rows = pd.DataFrame([dict(kernel="ours", variant=v, timing="kernel", M=s, N=s, K=s, ratio_torch=r,
                              ratio_torch_lo=r * 0.99, ratio_torch_hi=r * 1.01)
                         for s in (8192, 4096) for v, r in (("step2_register_epilogue", 0.5), ("step1_four_stages", 2.0))])
    t = figures.progression_table(rows)
    assert list(t["shape"]) == ["4096³", "4096³", "8192³", "8192³"]
    assert list(t.contender[:2]) == ["step1_four_stages", "step2_register_epilogue"]
    assert t.pct_of_torch.tolist()[:2] == [50.0, 200.0] and (t.lo < t.pct_of_torch).all()
    with pytest.raises(ValueError, match="missing"):
        figures.progression_table(rows.drop(columns=["ratio_torch_lo"]))
    with pytest.raises(ValueError, match="source"):
        figures.progression(rows, source="")


def test_try_step_on_a_cpu_compiles_diffs_and_says_it_did_not_run(monkeypatch):
    monkeypatch.setattr(gpus, "current", lambda: None)
    trial = steps.try_step(2)
    assert trial.previous == "step1_four_stages" and trial.checks is None and trial.passed is None
    assert list(trial.facts.index) == ["step1_four_stages (previous)", "step2_register_epilogue"]
    assert trial.sass_delta.loc["UTMASTG", "change"] == -8 and trial.sass_delta.loc["STG", "change"] == 16
    text = str(trial)
    assert "not run: no H100/H200 here" in text and "recorded" in trial.where
    assert "<h4>" in trial._repr_html_()


def test_try_step_takes_an_edited_copy_by_path(tmp_path, monkeypatch):
    from workbook import stepper
    monkeypatch.setattr(gpus, "current", lambda: None)
    path = stepper.copy_for_editing(steps.load(3), tmp_path)
    path.write_text(path.read_text().replace("DEFAULT_TILE_N = 128", "DEFAULT_TILE_N = 256"))
    trial = steps.try_step(path)
    assert trial.previous == "step2_register_epilogue"       # the package's step before the copied one
    assert trial.facts.loc["step3_more_stages", "mbarriers"] == 8     # the edit: 256-wide tile, 4 stages
    assert any(str(path) in n for n in trial.notes)


def test_steps_are_loaded_by_number_name_or_module():
    assert steps.load(1) is step1 and steps.load("step4_persistent_wave_tail") is step4 and steps.load(step2) is step2
    assert steps.previous_step(1) is None and steps.previous_step(4) is step3
    for bad in (0, 5, True, 2.0):
        with pytest.raises(ValueError):
            steps.load(bad)


# ------------------------------------------------------------------------------------------- CPU: pictures, data

def test_drawings_return_figures_and_the_transpose_model_transposes():
    import matplotlib.pyplot as plt
    words = drawings.wgmma_words()
    assert drawings.quad_transpose_model(words) == [[words[t][q] for t in range(4)] for q in range(4)]
    budgets = {"a": stages_lib.stages((128, 256, 64), "register", "sm_90a"),
               "b": stages_lib.stages((256, 256, 64), "staged", "sm_100a", depth=4)}
    uniform = step4.plan(2560, 7168, schedule="uniform", gpu=gpus.H200)
    balanced = step4.plan(2560, 7168, gpu=gpus.H200)
    for fig in (drawings.ring_timeline(4), drawings.smem_budgets(budgets), drawings.quad_transpose(),
                drawings.wave_tail(uniform, balanced, last=2)):
        assert fig.axes
        plt.close(fig)
    fig = drawings.wave_tail(uniform, balanced)
    title = fig.axes[0].get_title()
    assert f"{uniform.waves:.2f} waves" in title and "makespan 5 tile times" in title      # never "5.00 waves"
    plt.close(fig)


def test_findings_read_the_committed_data():
    assert bool((findings.seed_vs_planner()[list(findings.SEED_004_BALANCING.columns)]
                 == findings.SEED_004_BALANCING).all(axis=None))
    gains = findings.variant_gains("128x256x64 s4 staged uniform", "128x256x64 s4 register uniform")
    assert len(gains) >= 3 and (gains["lowest %"] <= gains["median %"]).all() and (gains.runs >= 1).all()
    sched = findings.schedule_gains()
    assert {"predicted % (widths 240, 224, 192, 128)", "predicted % (widths 192, 128)"} <= set(sched.columns)
    phases = findings.timeline_phases()
    assert set(phases.variant) >= {"plain", "staged", "default"}
    assert findings.ncu_table(findings.PROBES / "ncu_deferred_4096.txt")["tensor pipe busy (%)"].between(0, 100).all()
    costs = findings.stream_k_costs()
    assert costs["one hand-over round"] > costs["the build, no split"]
    kl = findings.narrow_kloops()
    assert set(kl.width) >= {240, 248, 256} and (kl[kl.width == 256].model == 1).all()
    for table in (findings.clock_runs(), findings.dram_vs_cublas(), findings.deferral_gains(), findings.turns()):
        assert not table.empty
    assert findings.relative(findings.TIMELINE).startswith("data/measured/h200/probes/")
    pairs = findings.pairings()
    assert list(pairs.columns) == list(findings.PAIRINGS) and len(pairs) == len(findings.FEW_TILE_KHEAVY)
    assert (pairs > 0).all(axis=None) and pairs.attrs["commit"]
    assert list(findings.pairings(labels=findings.CLUSTERS_2X2).columns) == list(findings.CLUSTERS_2X2)
    quads = findings.ncu_table(findings.CLUSTER_2X2_NCU)
    assert len(quads) == 3 and (quads["L2 sectors read"] > 0).all()


def test_ncu_tool_keeps_only_the_metrics_this_ncu_lists(tmp_path):
    import importlib.util
    import stat
    from workbook import ROOT
    spec = importlib.util.spec_from_file_location("ncu_gemm_steps", ROOT / "tools" / "ncu_gemm_steps.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    fake = tmp_path / "ncu"
    listed = "\n".join(tool.base_name(m) + "   a description" for m in tool.METRICS[:-2])
    fake.write_text(f"#!/bin/sh\necho 'Device 0 (GH100)'\necho '-----'\ncat <<'X'\n{listed}\nX\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    known, dropped = tool.known_metrics(str(fake))
    assert known == list(tool.METRICS[:-2]) and dropped == list(tool.METRICS[-2:])
    assert tool.base_name("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed") == \
        "sm__pipe_tensor_op_hmma_cycles_active"
    assert set(tool.METRICS) <= set(findings.NCU_LABELS)     # every metric gets a readable name in the notebook


# ------------------------------------------------------------------------------------------- GPU

def fp32_reference(a, b):
    return a.float() @ b.float()


def small_integers(M, N, K, dtype=torch.bfloat16):
    """|a|, |b| <= 3 and K <= 1024: every partial sum is an integer below 2^24, exact in fp32, so the result
    rounds once, to the output dtype, as the reference does."""
    g = torch.Generator(device="cuda").manual_seed(random.randrange(2**31))
    a = torch.randint(-3, 4, (M, K), device="cuda", generator=g).to(dtype)
    b = torch.randint(-3, 4, (K, N), device="cuda", generator=g).to(dtype)
    return a, b


GPU_SHAPES = [(1000, 1032, 776), (128, 256, 64), (1, 8, 8), (77, 8, 8), (129, 264, 72), (2048, 5120, 512),
              (2560, 7168, 256), (4000, 4000, 264)]


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("M,N,K", GPU_SHAPES)
@pytest.mark.parametrize("step", list(STEPS))
def test_small_integers_are_exact_and_every_element_is_written(step, M, N, K):
    a, b = small_integers(M, N, K)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    c = STEPS[step].gemm(a, b, out=out)
    assert c is out
    assert torch.equal(c, fp32_reference(a, b).to(torch.bfloat16))


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("step", list(STEPS))
@pytest.mark.parametrize("M,N,K", [(1000, 1032, 776), (2048, 2048, 4096)])
def test_random_inputs_match_fp32_torch(step, M, N, K):
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    c = STEPS[step].gemm(a, b)
    ref = fp32_reference(a, b)
    assert torch.isfinite(c).all()
    assert ((c.float() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("step", list(STEPS))
def test_fp16_in_fp16_out(step):
    a, b = small_integers(1000, 1032, 776, torch.float16)
    c = STEPS[step].gemm(a, b)
    assert c.dtype == torch.float16 and torch.equal(c, fp32_reference(a, b).half())


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("tile_n", [128, 256])
@pytest.mark.parametrize("step", ["step1", "step2", "step3", "step4"])
def test_both_tile_widths(step, tile_n):
    a, b = small_integers(1000, 1032, 520)
    assert torch.equal(STEPS[step].gemm(a, b, tile_n=tile_n), fp32_reference(a, b).to(torch.bfloat16))


def shape_for_narrow(width: int, tile_n: int = 256):
    """(M, N) whose balanced plan on this GPU re-cuts into `width`-wide tiles, with M and N tails."""
    for M, N in itertools.product(range(1000, 9000, 136), range(2056, 9000, 264)):
        if step4.plan(M, N, tile_n=tile_n).narrow == width:
            return M, N
    pytest.skip(f"no shape in the search grid re-cuts into {width}-wide tiles on this GPU")


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("tile_n,width", [(256, w) for w in waves.narrow_widths(256, multiple_of=16)]
                         + [(128, w) for w in waves.narrow_widths(128, multiple_of=16)])
def test_step4_every_narrow_width_is_exact(tile_n, width):
    """The narrow WGMMA reads the first `width` columns of the wide B stage and its stores stop at the item's
    edge: a narrow item must neither miss its own columns nor write over its right neighbour's."""
    M, N = shape_for_narrow(width, tile_n)
    a, b = small_integers(M, N, 136)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    step4.gemm(a, b, out=out, tile_n=tile_n)
    assert torch.equal(out, fp32_reference(a, b).to(torch.bfloat16))


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("step", list(STEPS))
def test_gpu_input_errors(step):
    gemm = STEPS[step].gemm
    a = torch.zeros(64, 64, device="cuda", dtype=torch.bfloat16)
    for bad, match in (((a.float(), a.float()), "take|bfloat16|float16"), ((a, a.half()), "must be"),
                       ((a, torch.zeros(32, 64, device="cuda", dtype=torch.bfloat16)), "inner dimensions"),
                       ((a, torch.zeros(64, 60, device="cuda", dtype=torch.bfloat16)), "multiples of 8"),
                       ((a[:, :56], a[:56]), "contiguous"), ((a.cpu(), a.cpu()), "CUDA"),
                       ((torch.zeros(64 * 64 + 4, device="cuda", dtype=torch.bfloat16)[4:].view(64, 64), a),
                        "16-byte")):
        with pytest.raises(ValueError, match=match):
            gemm(*bad)
    with pytest.raises(ValueError, match="out must be"):
        gemm(a, a, out=torch.empty(64, 32, device="cuda", dtype=torch.bfloat16))
    assert common.ALIGN == 8


@pytest.mark.gpu
@needs_hopper
def test_try_step_live_checks_and_times_against_the_previous_step_and_torch():
    trial = steps.try_step(2, shapes=((1024, 1024, 1024),), rounds=3)
    assert trial.passed is True, trial.checks
    assert "live" in trial.where
    assert set(trial.timing.contender) == {"step1_four_stages", "step2_register_epilogue", "torch.matmul"}
    assert set(trial.timing.timing) == {"latency", "kernel"}


@pytest.mark.gpu
@needs_hopper
def test_bench_cli_prints_every_contender_without_recording(capsys):
    before = records_rows()
    bench.main(["--shapes", "512x1024x256", "--rounds", "2", "--no-record"])
    out = capsys.readouterr().out
    for name in (*steps.STEPS, "production default", "torch.matmul"):
        assert name in out
    assert records_rows() == before


def records_rows() -> int:
    from workbook import records
    return len(records.read("h200", bench.TABLE))


def test_bench_refuses_without_a_hopper_gpu(monkeypatch):
    monkeypatch.setattr(gpus, "current", lambda: None)
    with pytest.raises(SystemExit, match="H100/H200"):
        bench.main(["--quick"])

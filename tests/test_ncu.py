"""workbook.ncu: metric tables of an `ncu --metrics` text report, paired with the probe's `profiled:` lines."""
import os
import sys

import pytest

from workbook import ROOT, ncu, records

REPORT = """==PROF== Connected to process 1
profiled: 4096^3 torch
profiled: 4096^3 ours default
  nvjet_sm90_tst_192x192 (2, 66, 1)x(384, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: Command line profiler metrics
    --------------------------------- ----------- ------------
    Metric Name                       Metric Unit Metric Value
    --------------------------------- ----------- ------------
    dram__bytes_read.sum                    Mbyte       148.41
    gpu__time_duration.sum                     us       179.01
    sm__cycles_elapsed.avg.per_second         Mhz     1,570.00
    --------------------------------- ----------- ------------

  kernel_cutlass_gemm_0 (132, 1, 1)x(384, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: Command line profiler metrics
    dram__bytes_read.sum                    Gbyte         1.25
    gpu__time_duration.sum                     ms         1.39
    sm__cycles_elapsed.avg.per_second         Ghz         1.59
"""


def test_units_are_normalised_and_rows_follow_the_probe_order(tmp_path):
    path = tmp_path / "r.txt"
    path.write_text(REPORT)
    df = ncu.read(path)
    assert df.contender.tolist() == ["4096^3 torch", "4096^3 ours default"]
    assert df.kernel.tolist() == ["nvjet_sm90_tst_192x192", "kernel_cutlass_gemm_0"]
    assert df["dram__bytes_read.sum"].tolist() == pytest.approx([0.14841, 1.25])        # GB
    assert df["gpu__time_duration.sum"].tolist() == pytest.approx([0.17901, 1.39])      # ms
    assert df["sm__cycles_elapsed.avg.per_second"].tolist() == pytest.approx([1.57, 1.59])   # GHz, "1,570" read


def test_a_report_whose_counts_differ_is_refused(tmp_path):
    path = tmp_path / "r.txt"
    path.write_text(REPORT.replace("profiled: 4096^3 torch\n", ""))
    with pytest.raises(ValueError, match="1 'profiled:' lines but 2 kernels"):
        ncu.read(path)


def test_the_recorded_profiles_read_whole():
    """The GEMM profiles (probes/ncu_*_*.txt: ours against cuBLAS); the k-means ones are kmeans_ncu_*.txt."""
    probes = records.DATA / "measured" / "h200" / "probes"
    files = sorted(probes.glob("ncu_*_*.txt"))
    assert files
    for f in files:
        df = ncu.read(f)
        # cuBLAS once per profile: "... torch" (probe_ncu.py) or "... torch.matmul" (tools/ncu_gemm_steps.py)
        assert df.contender.str.contains(r" torch(\.matmul)?$").sum() == 1, f
        assert (df["dram__bytes_read.sum"] > 0).all() and (df["gpu__time_duration.sum"] > 0).all()


def test_the_recorded_kmeans_variant_profiles_read_whole():
    """tools/ncu_kmeans_steps.py --variants reports: one row per profiled variant and shape, each with its time,
    tensor-pipe and issue-slot use."""
    from kmeans_kernels.steps import evidence
    files = sorted((records.DATA / "measured" / "h200" / "probes").glob("kmeans_ncu_*.txt"))
    assert files
    for f in files:
        df = evidence.read_ncu(f)
        assert len(df) >= 2 and (df["gpu__time_duration.sum"] > 0).all(), f
        assert df["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"].between(0, 100).all()
        assert df["smsp__issue_active.avg.pct_of_peak_sustained_active"].between(0, 100).all()


def test_the_recorded_source_pages_say_where_a_kmeans_warp_waits(load_probe):
    """`probes/kmeans_ncu_source_probe.py`'s reading of its two recorded runs (lazy_index on the H200), as the perf
    log states it: the named stall reasons hold nearly all samples (about 1 % falls in reasons this ncu does not
    list as columns), and the two largest single waits are a consumer warp's wait for its turn at the tensor cores
    (the instruction after the turn's BAR.SYNC) and for its own WGMMAs (WARPGROUP.DEPBAR)."""
    probes = records.DATA / "measured" / "h200" / "probes"
    probe = load_probe("kmeans_ncu_source_probe")
    for shape in ("65536x64x16384", "65536x128x4096"):
        df, stalls = probe.read_source(probes / f"kmeans_ncu_source_lazy_index_{shape}_fce695f.csv.gz")
        total = df[probe.SAMPLES].sum()
        assert total > 10_000 and abs(df[stalls].sum().sum() - total) <= 0.02 * total
        first, second = df.sort_values(probe.SAMPLES, ascending=False).index[:2]
        assert "BAR.SYNC" in df.Source[first - 4:first].str.cat() and df.opcode[first] == "WARPSYNC.ALL"
        assert df.opcode[second] == "WARPGROUP.DEPBAR.LE"
        assert 0.10 < df[probe.SAMPLES][[first, second]].mean() / total < 0.16


def test_run_child_runs_the_script_under_ncu_with_graphs_off_and_this_tree_first(tmp_path, monkeypatch):
    """`run_child`'s command and environment, through a stand-in for ncu that prints what it was given: the metrics,
    profiling from the child's window only at the clocks as they run, then the script and its arguments; launch
    graphs off (one kernel per call, as ncu reports them) and this tree first on the child's path; the header, then
    ncu's output, in the report."""
    fake = tmp_path / "ncu"
    fake.write_text('#!/bin/sh\necho "args: $*"\necho "graphs: $WORKBOOK_LAUNCH_GRAPHS"\necho "path: $PYTHONPATH"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    out = tmp_path / "report.txt"
    run = ncu.run_child("probe.py", ["--inside", "2"], ["a.sum", "b.sum"], out, ncu=str(fake))
    lines = out.read_text().splitlines()
    assert run.returncode == 0
    assert lines[0] == f"# {fake} --clock-control none --profile-from-start off --metrics a.sum,b.sum"
    args = lines[1].split()
    assert args[1:8] == ["--clock-control", "none", "--profile-from-start", "off", "--metrics", "a.sum,b.sum",
                         sys.executable]
    assert args[8].endswith("/probe.py") and args[9:] == ["--inside", "2"]
    assert lines[2] == "graphs: 0" and lines[3] == f"path: {ROOT}{os.pathsep}/elsewhere"
    ncu.run_child("probe.py", [], ["a.sum"], out, ncu=str(fake), header="# mine\n")
    assert out.read_text().startswith("# mine\nargs: ")

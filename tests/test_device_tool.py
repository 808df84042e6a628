"""tools/device.py: the steps of one device call per package, and a step killed at its time limit."""
import importlib.util
import sys

import pytest

from workbook import ROOT

_spec = importlib.util.spec_from_file_location("device_tool", ROOT / "tools" / "device.py")
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)


def test_each_package_runs_its_gpu_tests_then_its_bench(tmp_path):
    (test, log, limit), (bench, bench_log, _) = tool.steps("kmeans", True, ["--no-flashlib-autotune"], tmp_path)
    assert test[1:6] == ["-m", "pytest", "-m", "gpu", "tests/test_kmeans_hopper.py"] and "-k" in test
    assert (log, limit, bench_log) == ("pytest.txt", 150, "bench.txt")
    assert bench[1:] == ["-m", "kmeans_kernels.bench", "--no-flashlib-autotune"]
    (test, _, limit), (bench, _, _) = tool.steps("gemm", True, [], tmp_path)
    assert "tests/test_gemm_hopper.py" in test and "-k" not in test and limit == 240
    assert bench[1:5] == ["-m", "gemm_kernels.bench", "--csv", str(tmp_path / "gemm_rows.csv")]
    assert bench[-3:] == ["--shapes", "4096x4096x4096", "--no-record"]
    assert "--no-record" not in tool.steps("gemm", False, [], tmp_path)[1][0]
    with pytest.raises(ValueError, match="package"):
        tool.steps("fft", False, [], tmp_path)


def test_tee_saves_the_output_and_kills_a_step_past_its_limit(tmp_path, capsys):
    assert tool.tee([sys.executable, "-c", "print('hello')"], tmp_path / "a.txt", 30) == 0
    assert (tmp_path / "a.txt").read_text() == "hello\n" and "hello" in capsys.readouterr().out
    assert tool.tee([sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "b.txt", 1) in (-9, 137)   # killed


def test_out_dir_and_keep_bring_the_files_back(tmp_path, monkeypatch):
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    out = tool.out_dir("ignored")
    assert out == tmp_path / "out" and out.is_dir()
    table = tmp_path / "kmeans_steps.csv"
    table.write_text("a,b\n1,2\n")
    tool.keep(out, table, tmp_path / "absent.txt")              # a file the run did not write is skipped
    assert [p.name for p in out.iterdir()] == ["kmeans_steps.csv"] and (out / table.name).read_text() == "a,b\n1,2\n"


def test_the_kmeans_steps_script_builds_on_these_helpers(tmp_path, monkeypatch):
    """tools/device_kmeans_steps.py imports its helpers from tools/device.py (run as a script from tools/)."""
    monkeypatch.setenv("OUT", str(tmp_path))
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    spec = importlib.util.spec_from_file_location("device_kmeans_steps", ROOT / "tools" / "device_kmeans_steps.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.OUT == tmp_path and set(script.PARTS) == {"tests", "ncu", "bench"}

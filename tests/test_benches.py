"""Both benchmarks, on a CPU with the GPU parts stood in for: each shape's rows are recorded as soon as they are
measured (an interrupted or failing run keeps them), a bad --shapes entry is refused before anything runs, the
first-call rows have their own table, and --help cites only what the repository holds."""
from __future__ import annotations

import pytest
import torch

from workbook import gpus, launch, records, timing


class Boom(RuntimeError):
    pass


@pytest.fixture
def measured_root(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "MEASURED", tmp_path)
    monkeypatch.setattr(gpus, "current", lambda device=None: gpus.H200)
    monkeypatch.setattr(records, "_static_provenance", lambda: (("gpu", "NVIDIA H200"), ("sm_count", 132),
                                                               ("driver", ""), ("torch", "t"), ("cutlass_dsl", "")))
    return tmp_path


def _fake_timing(ms=1.0):
    return timing.Timing(ms_min=ms, ms_median=ms, ms_max=ms, samples=(ms,))


def test_kmeans_bench_records_each_shape_as_it_is_measured(measured_root, monkeypatch):
    """The second shape fails: the first shape's rows must be on disk already (they used to be appended at the
    end of the run, so a failure or a kill lost everything)."""
    import kmeans_kernels
    from kmeans_kernels import bench
    monkeypatch.setattr(kmeans_kernels, "arch_of", lambda device: "sm_90a")
    monkeypatch.setattr(bench, "contenders", lambda arch, kernels, autotune: [("ours", "serial", None),
                                                                            ("torch", "matmul_argmin", None)])
    shapes_seen = []

    def input_sets(N, D, K):
        shapes_seen.append((N, D, K))
        if len(shapes_seen) == 2:
            raise Boom("the GPU fell over at the second shape")
        return []

    monkeypatch.setattr(bench, "input_sets", input_sets)
    monkeypatch.setattr(bench, "match_rate", lambda fn, sets: 1.0)
    monkeypatch.setattr(timing, "bench_interleaved", lambda fns, sets: {k: _fake_timing() for k in fns})
    with pytest.raises(Boom):
        bench.main(["--shapes", "256,64,128;512,64,128", "--first-calls", "0"])
    df = records.read("h200", bench.TABLE)
    assert df[["N", "D", "K"]].drop_duplicates().values.tolist() == [[256, 64, 128]]
    assert sorted(df.kernel) == ["ours", "torch"]


def test_gemm_bench_records_each_shape_as_it_is_measured(measured_root, monkeypatch):
    from gemm_kernels import bench
    calls = []

    def measure(contenders, sets, M, N, K):
        calls.append((M, N, K))
        if len(calls) == 2:
            raise Boom("the GPU fell over at the second shape")
        return [dict(kernel=k, variant=v, M=M, N=N, K=K, ms_median=1.0, ms_min=1.0, ms_max=1.0, tflops=1.0,
                     match_rate=1.0, max_rel_err=0.0) for k, v in contenders]

    monkeypatch.setattr(bench, "measure", measure)
    monkeypatch.setattr(bench, "input_sets", lambda M, N, K, n=3, seed=1234: [])
    with pytest.raises(Boom):
        bench.run([(256, 256, 64), (512, 512, 64)], {"x": (None, {})}, "h200")
    df = records.read("h200", "gemm")
    assert df[["M", "N", "K"]].drop_duplicates().values.tolist() == [[256, 256, 64]]


@pytest.mark.parametrize("shapes, match", [
    ("65536,72,4096", "D must be a multiple of 16"),
    ("65536,128,0", "K must be >= 1"),
    ("65536,128", "N,D,K"),
    ("4096,128,4096;3000000000,128,64", "N=3000000000 is too large"),
])
def test_kmeans_bench_refuses_a_bad_shape_before_anything_runs(shapes, match, monkeypatch, capsys):
    from kmeans_kernels import bench
    monkeypatch.setattr(gpus, "current", lambda device=None: pytest.fail("looked for a GPU before checking --shapes"))
    with pytest.raises(SystemExit):
        bench.main(["--shapes", shapes, "--no-record"])
    assert match.split(".")[0] in capsys.readouterr().err


@pytest.mark.parametrize("shapes, match", [
    (["4096x4096"], "MxNxK"),
    (["4096x4096x4096", "4096x4100x4096"], "multiples of 8"),
    (["0x4096x4096"], "M must be a positive int"),
    (["4096x4096x3000000000"], "too large"),
])
def test_gemm_bench_refuses_a_bad_shape_before_anything_runs(shapes, match, monkeypatch, capsys):
    from gemm_kernels import bench
    monkeypatch.setattr(gpus, "current", lambda device=None: pytest.fail("looked for a GPU before checking --shapes"))
    with pytest.raises(SystemExit):
        bench.main(["--shapes", *shapes, "--no-record"])
    assert match in capsys.readouterr().err


def test_first_calls_time_fresh_inputs_once_each_and_repeated_ones_after_warm_up():
    """workbook.launch.first_calls on the CPU harness: every first call gets inputs nobody saw before."""
    made, seen = [], []

    def make_inputs(i):
        made.append(i)
        return (torch.full((2,), float(i)),)

    def fn(x):
        seen.append(int(x[0]))
        return x * 2

    found = launch.first_calls({"f": fn, "g": fn}, make_inputs, calls=5, warmup=2)
    first, steady, outputs = found["f"]
    assert len(first.samples) == len(steady.samples) == 5
    assert [int(o[0]) for o in outputs] == [0, 2, 4, 6, 8]
    # per contender: warm-up and steady calls on the extra set 5, then sets 0..4 once each
    assert seen == ([5] * 7 + [0, 1, 2, 3, 4]) * 2 and sorted(made) == [0, 1, 2, 3, 4, 5]


def test_kmeans_first_call_rows_say_fresh_and_repeated(monkeypatch):
    """The first-call table's rows (GPU parts stood in for): fresh and repeated inputs, ours and torch."""
    from kmeans_kernels import bench, reference
    monkeypatch.setattr(torch, "Generator", lambda device=None: torch.random.default_generator)
    real_randn = torch.randn
    monkeypatch.setattr(torch, "randn", lambda *a, generator=None, device=None, **k: real_randn(*a, **k))
    monkeypatch.setattr(bench.kmeans_kernels, "assign", lambda x, c, c_sq=None: reference.assign(x, c, c_sq))
    rows = bench.first_call_rows(64, 16, 8, calls=4)
    assert [(r["kernel"], r["inputs"]) for r in rows] == [("ours", "fresh"), ("ours", "repeated"),
                                                           ("torch", "fresh"), ("torch", "repeated")]
    assert rows[0]["match_rate"] == 1.0 and rows[0]["variant"] == "auto"
    records.append("cpu", bench.FIRST_CALL_TABLE, [{**r, "gpu": "cpu"} for r in rows],
                   root=__import__("tempfile").mkdtemp())


def test_help_texts_name_only_files_that_exist(capsys, monkeypatch):
    """gemm_kernels.bench --help cited a DESIGN.md that is not in the repository; the k-means bench named a
    data/measured/b200/ file that does not exist."""
    import re
    from gemm_kernels import bench as gemm_bench
    from kmeans_kernels import bench as kmeans_bench
    from workbook import ROOT
    with pytest.raises(SystemExit):
        gemm_bench.main(["--help"])
    text = capsys.readouterr().out
    assert "python -m gemm_kernels.bench" in text
    for name in re.findall(r"[\w/.-]+\.md\b|data/[\w/.-]+", text):
        assert (ROOT / name).exists(), f"--help cites {name}, which is not in the repository"
    assert "DESIGN.md" not in text
    monkeypatch.setattr(gpus, "current", lambda device=None: None)
    assert kmeans_bench.main(["--no-record"]) == 2
    said = capsys.readouterr().out
    for name in re.findall(r"data/measured/\S+?\.csv", said):
        assert (ROOT / name).exists(), f"the k-means bench names {name}, which does not exist"

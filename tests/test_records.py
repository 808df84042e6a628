"""workbook.records: provenance, appending rows (and refusing bad ones), reading them back."""
from __future__ import annotations

import datetime
import importlib.metadata
import random

import pandas as pd
import pytest

from workbook import records


@pytest.fixture
def rng():
    return random.Random()


def measurement(rng, **shape):
    lo = rng.uniform(0.01, 1.0)
    med = lo * rng.uniform(1.0, 1.2)
    return {"kernel": rng.choice(["ours", "torch"]), "variant": rng.choice(["serial", "ilp2", ""]), **shape,
            "ms_median": med, "ms_min": lo, "ms_max": med * rng.uniform(1.0, 1.5),
            "tflops": rng.uniform(0, 900), "match_rate": rng.uniform(0.99, 1.0), "gpu": "NVIDIA H200"}


def kmeans_rows(rng, n):
    return [measurement(rng, N=rng.choice([1, 65536, 1 << 20]), D=rng.choice([64, 128]), K=rng.randint(1, 16384))
            for _ in range(n)]


def test_provenance_has_every_column():
    p = records.provenance()
    assert tuple(p) == records.PROVENANCE
    assert p["commit"] and p["torch"].startswith(__import__("torch").__version__)
    try:
        dsl = importlib.metadata.version("nvidia-cutlass-dsl")
    except importlib.metadata.PackageNotFoundError:   # a GPU machine whose image lacks it
        dsl = ""
    assert p["cutlass_dsl"] == dsl
    datetime.datetime.strptime(p["date"], "%Y-%m-%dT%H:%M:%SZ")
    assert isinstance(p["sm_count"], int) and isinstance(p["driver"], str)


def test_append_then_read_round_trips(tmp_path, rng):
    first, second = kmeans_rows(rng, rng.randint(1, 5)), kmeans_rows(rng, rng.randint(1, 5))
    path = records.append("h200", "kmeans_assign", first, root=tmp_path)
    records.append("h200", "kmeans_assign", second, root=tmp_path)
    assert path == tmp_path / "h200" / "kmeans_assign.csv"
    assert path.read_text().count("kernel,variant") == 1        # one header

    df = records.read("h200", "kmeans_assign", root=tmp_path)
    assert list(df.columns) == ["kernel", "variant", "N", "D", "K", *records.RESULTS, *records.PROVENANCE]
    rows = first + second
    assert len(df) == len(rows)
    assert df["N"].tolist() == [r["N"] for r in rows] and df["K"].tolist() == [r["K"] for r in rows]
    assert df["ms_median"].tolist() == pytest.approx([r["ms_median"] for r in rows])
    assert (df["gpu"] == "NVIDIA H200").all()
    assert (df["commit"] == records.provenance()["commit"]).all()
    assert records.tables("h200", root=tmp_path) == ["kmeans_assign"]


def test_shape_columns_are_free(tmp_path, rng):
    rows = [measurement(rng, M=m, N=n, K=k) for m, n, k in [(4096, 4096, 4096), (8192, 8192, 8192)]]
    records.append("h200", "gemm", pd.DataFrame(rows), root=tmp_path)
    df = records.read("h200", "gemm", root=tmp_path)
    assert list(df.columns[:5]) == ["kernel", "variant", "M", "N", "K"]
    assert df["M"].tolist() == [4096, 8192]


def test_read_missing_table_is_empty_with_columns(tmp_path):
    df = records.read("b200", "nothing_yet", root=tmp_path)
    assert df.empty and list(df.columns) == [*records.IDENTITY, *records.RESULTS, *records.PROVENANCE]


@pytest.mark.parametrize("column", ["kernel", "variant", "ms_median", "ms_min", "ms_max", "tflops", "match_rate"])
def test_refuses_a_row_missing_a_required_column(tmp_path, rng, column):
    rows = kmeans_rows(rng, 3)
    del rows[rng.randrange(3)][column]
    with pytest.raises(ValueError, match=column):
        records.append("h200", "kmeans_assign", rows, root=tmp_path)
    assert not (tmp_path / "h200" / "kmeans_assign.csv").exists()     # nothing written


def test_refuses_rows_that_do_not_match_the_table(tmp_path, rng):
    records.append("h200", "kmeans_assign", kmeans_rows(rng, 2), root=tmp_path)
    before = (tmp_path / "h200" / "kmeans_assign.csv").read_text()
    missing_shape = kmeans_rows(rng, 1)
    del missing_shape[0]["D"]
    with pytest.raises(ValueError, match=r"\['D'\]"):
        records.append("h200", "kmeans_assign", missing_shape, root=tmp_path)
    with pytest.raises(ValueError, match="does not have"):
        records.append("h200", "kmeans_assign", [{**kmeans_rows(rng, 1)[0], "M": 1}], root=tmp_path)
    assert (tmp_path / "h200" / "kmeans_assign.csv").read_text() == before


@pytest.mark.parametrize("change, match", [
    ({"ms_min": 2.0, "ms_median": 1.0}, "ms_min <= ms_median"),
    ({"ms_max": 0.0}, "ms_min <= ms_median <= ms_max"),
    ({"match_rate": 1.5}, "match_rate"),
    ({"tflops": float("nan")}, "tflops"),
    ({"tflops": -1.0}, "tflops"),
    ({"ms_median": "fast"}, "ms_median"),
])
def test_refuses_impossible_results(tmp_path, rng, change, match):
    row = {**measurement(rng, N=1, D=16, K=1), **change}
    with pytest.raises(ValueError, match=match):
        records.append("h200", "kmeans_assign", [row], root=tmp_path)


def test_refuses_a_row_from_another_device(tmp_path, rng):
    row = measurement(rng, N=1, D=16, K=1)
    row["gpu"] = "NVIDIA B200"
    with pytest.raises(ValueError, match="not 'h200'"):
        records.append("h200", "kmeans_assign", [row], root=tmp_path)


def test_fills_provenance_from_this_machine(tmp_path, rng):
    row = measurement(rng, N=1, D=16, K=1)
    del row["gpu"]
    here = records.provenance()["gpu"]
    folder = "cpu" if here == "cpu" else here.lower().split()[-1]
    records.append(folder, "t", [row], root=tmp_path)
    assert records.read(folder, "t", root=tmp_path)["gpu"].tolist() == [here]


@pytest.mark.parametrize("gpu, table", [("../h200", "t"), ("H200", "t"), ("h200", "a/b"), ("h200", ""), (None, "t")])
def test_refuses_bad_names(tmp_path, rng, gpu, table):
    with pytest.raises(ValueError, match="lowercase name"):
        records.append(gpu, table, kmeans_rows(rng, 1), root=tmp_path)


def test_refuses_no_rows(tmp_path):
    with pytest.raises(ValueError, match="no rows"):
        records.append("h200", "t", [], root=tmp_path)


def _run_rows(date, entries):
    return [dict(kernel=k, variant=v, N=n, ms_median=ms, ms_min=ms * 0.9, ms_max=ms * 1.1, date=date)
            for k, v, n, ms in entries]


def test_last_run_is_the_newest_run_that_measured_everything_needed():
    import pandas as pd
    rng = random.Random()
    a, b = rng.uniform(0.1, 1), rng.uniform(0.1, 1)
    df = pd.DataFrame(_run_rows("2026-01-01", [("ours", "serial", 8, a), ("torch", "mm", 8, b)])
                      + _run_rows("2026-01-02", [("ours", "serial", 8, b)]))   # newer, but no torch row
    run = records.last_run(df, [("ours", "serial"), ("torch", "mm")])
    assert set(run.date) == {"2026-01-01"} and len(run) == 2
    assert records.last_run(df, [("ours", "ilp2")]).empty


def test_last_run_can_skip_a_newer_partial_run():
    import pandas as pd
    full = _run_rows("2026-01-01", [("ours", "serial", n, 1.0) for n in (8, 16, 32)])
    partial = _run_rows("2026-01-02", [("ours", "serial", 8, 2.0)])
    df = pd.DataFrame(full + partial)
    assert set(records.last_run(df, [("ours", "serial")]).date) == {"2026-01-02"}
    assert set(records.last_run(df, [("ours", "serial")], min_shapes=3).date) == {"2026-01-01"}
    assert records.last_run(df, [("ours", "serial")], min_shapes=4).empty


def test_versus_pairs_shapes_and_reports_the_speedup():
    import pandas as pd
    rng = random.Random()
    old, new = rng.uniform(0.5, 1), rng.uniform(0.1, 0.5)
    df = pd.DataFrame(_run_rows("d", [("ours", "serial", 8, old), ("ours", "ilp2", 8, new),
                                      ("ours", "ilp2", 16, new)]))        # N=16 has no serial: not paired
    table = records.versus(df, "ilp2", "serial", ["N"])
    assert list(table["N"]) == [8]
    assert table["speedup %"].iloc[0] == pytest.approx(100 * (old / new - 1))
    assert records.versus(df, "norm_broadcast", "serial", ["N"]).empty


def test_a_commit_that_looks_like_a_number_reads_back_as_text(tmp_path, rng, monkeypatch):
    monkeypatch.setattr(records, "_commit", lambda: "87493e1")
    records.append("h200", "kmeans_assign", kmeans_rows(rng, 2), root=tmp_path)
    assert records.read("h200", "kmeans_assign", root=tmp_path)["commit"].tolist() == ["87493e1", "87493e1"]


def test_workbook_commit_overrides_what_git_says(monkeypatch):
    """A tree copied to a GPU machine may hold a stale .git: the commit the caller names is the one recorded."""
    monkeypatch.setenv("WORKBOOK_COMMIT", "abc1234")
    assert records._commit() == "abc1234"
    monkeypatch.delenv("WORKBOOK_COMMIT")
    assert records._commit() != "abc1234"

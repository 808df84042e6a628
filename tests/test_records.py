"""workbook.records: provenance, appending rows (and refusing bad ones), reading them back."""
from __future__ import annotations

import datetime
import importlib.metadata
import random
import warnings

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


# ------------------------------------------------------------------ several writers, killed writers, exact folders

@pytest.mark.parametrize("folder, name, accepted", [
    ("h200", "NVIDIA H200", True),
    ("h20", "NVIDIA H200", False),            # a substring of the model is another GPU (the H20 exists)
    ("nvidia", "NVIDIA H200", False),
    ("200", "NVIDIA H200", False),
    ("h200", "NVIDIA H20", False),
    ("h100", "NVIDIA H100 80GB HBM3", True),
    ("nvidia_h100_80gb_hbm3", "NVIDIA H100 80GB HBM3", True),   # workbook.gpus' key for a GPU it does not know
    ("b200", "NVIDIA B200", True),
    ("cpu", "cpu", True),
])
def test_rows_are_filed_only_under_their_gpus_exact_folder(tmp_path, rng, folder, name, accepted):
    row = {**measurement(rng, N=1, D=16, K=1), "gpu": name}
    if accepted:
        records.append(folder, "t", [row], root=tmp_path)
        assert records.read(folder, "t", root=tmp_path)["gpu"].tolist() == [name]
    else:
        with pytest.raises(ValueError, match=f"not '{folder}'"):
            records.append(folder, "t", [row], root=tmp_path)


def test_two_writers_starting_a_new_table_write_one_header(tmp_path, rng, monkeypatch):
    """Both used to see no file and both wrote a header: `read` then returned a junk row and the numeric columns
    became text. The table's lock makes the check and the write one step; a slow file system (every look at the
    table takes 0.2 s after it has looked) widens the window between them."""
    import pathlib
    import threading
    import time
    exists = pathlib.Path.exists

    def slow_exists(path, *args, **kwargs):
        found = exists(path, *args, **kwargs)
        if path.suffix == ".csv":
            time.sleep(0.2)
        return found

    monkeypatch.setattr(pathlib.Path, "exists", slow_exists)
    batches = [kmeans_rows(rng, 3) for _ in range(4)]
    writers = [threading.Thread(target=records.append, args=("h200", "kmeans_assign", rows),
                                kwargs={"root": tmp_path}) for rows in batches]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    text = (tmp_path / "h200" / "kmeans_assign.csv").read_text()
    assert text.count("kernel,variant") == 1
    df = records.read("h200", "kmeans_assign", root=tmp_path)
    assert len(df) == 12 and df["N"].dtype.kind == "i" and df["ms_median"].dtype.kind == "f"


def test_a_cut_last_line_is_moved_aside_and_the_next_rows_stay_whole(tmp_path, rng):
    """A killed run leaves half a row; the next append used to glue its first row onto it."""
    first = kmeans_rows(rng, 3)
    target = records.append("h200", "kmeans_assign", first, root=tmp_path)
    whole = target.read_bytes()
    cut = whole[:len(whole) - rng.randint(5, 40)]                 # somewhere inside the last row
    target.write_bytes(cut)
    with pytest.warns(RuntimeWarning, match="cut"):
        df = records.read("h200", "kmeans_assign", root=tmp_path)
    assert len(df) == 2 and df["K"].tolist() == [r["K"] for r in first[:2]]
    second = kmeans_rows(rng, 2)
    with pytest.warns(RuntimeWarning, match="kmeans_assign.csv.cut"):
        records.append("h200", "kmeans_assign", second, root=tmp_path)
    df = records.read("h200", "kmeans_assign", root=tmp_path)
    assert df["K"].tolist() == [r["K"] for r in first[:2] + second]
    assert df["ms_median"].dtype.kind == "f" and df["N"].dtype.kind == "i"
    aside = (tmp_path / "h200" / "kmeans_assign.csv.cut").read_bytes()
    assert aside == cut[cut.rfind(b"\n") + 1:] + b"\n"                # nothing lost: the fragment is kept


def test_a_line_cut_before_its_newline_is_whole(tmp_path, rng):
    target = records.append("h200", "kmeans_assign", kmeans_rows(rng, 2), root=tmp_path)
    target.write_bytes(target.read_bytes()[:-1])                   # csv ends lines with \r\n; drop the \n
    records.append("h200", "kmeans_assign", kmeans_rows(rng, 1), root=tmp_path)
    assert len(records.read("h200", "kmeans_assign", root=tmp_path)) == 3


def test_a_table_whose_header_was_cut_is_refused(tmp_path, rng):
    target = tmp_path / "h200" / "kmeans_assign.csv"
    target.parent.mkdir(parents=True)
    target.write_text("kernel,vari")
    with pytest.raises(ValueError, match="no complete line"):
        records.append("h200", "kmeans_assign", kmeans_rows(rng, 1), root=tmp_path)


_WRITER = r"""
import random, sys
from workbook import records
rng = random.Random(int(sys.argv[2]))
# long rows, built once: most of the writer's time goes into writing them, where a kill cuts a line
rows = [dict(kernel="ours", variant="v" * 400 + str(j), N=0, D=128, K=rng.randint(1, 9999), ms_median=2.0,
             ms_min=1.0, ms_max=3.0, tflops=1.5, match_rate=1.0, gpu="NVIDIA H200") for j in range(ROWS)]
for shape in range(10**6):                      # a benchmark: one batch of rows per shape, as it is measured
    for r in rows:
        r["N"] = shape
    records.append("h200", "kmeans_assign", rows, root=sys.argv[1])
    print(shape, flush=True)                    # this shape is on disk
"""
ROWS = 2000


@pytest.mark.slow
def test_benchmark_writers_killed_mid_run_leave_a_table_that_reads_back_intact(tmp_path):
    """Two benchmark-like processes append to one new table; both are killed (SIGKILL) mid-run. The table must
    read back with one header, every row whole, and every shape a writer reported finished there in full; the
    next append must work."""
    import subprocess
    import sys
    import time
    # the caller names the commit: no git subprocess per append, so most of a writer's time is spent writing
    env = {**__import__("os").environ, "PYTHONPATH": str(records.ROOT), "WORKBOOK_COMMIT": "abc1234"}
    writer = _WRITER.replace("ROWS", str(ROWS))
    procs = [subprocess.Popen([sys.executable, "-c", writer, str(tmp_path), str(seed)], stdout=subprocess.PIPE,
                              text=True, env=env) for seed in (1, 2)]
    target = tmp_path / "h200" / "kmeans_assign.csv"
    deadline = time.time() + 120
    while time.time() < deadline and (not target.exists() or target.stat().st_size < 20_000_000):
        time.sleep(0.05)
    for p in procs:
        p.kill()
    finished = [[int(line) for line in p.communicate()[0].split()] for p in procs]
    assert all(finished), "a writer finished no shape before it was killed"
    text = target.read_bytes()
    assert text.count(b"kernel,variant") == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)         # a line cut by the kill is skipped, and says so
        df = records.read("h200", "kmeans_assign", root=tmp_path)
    whole = ["kernel", "variant", "N", "D", "K", *records.RESULTS, "gpu", "date"]
    assert df["N"].dtype.kind == "i" and df["ms_median"].dtype.kind == "f" and not df[whole].isna().any().any()
    per_shape = df.groupby("N").size()
    for shapes in finished:
        for shape in shapes:
            assert per_shape.get(shape, 0) >= ROWS, f"shape {shape} was reported written but is not all there"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)         # ... and moved aside by the next append
        records.append("h200", "kmeans_assign", [dict(kernel="ours", variant="after", N=-1, D=128, K=1,
                                                      ms_median=2.0, ms_min=1.0, ms_max=3.0, tflops=1.5,
                                                      match_rate=1.0, gpu="NVIDIA H200")], root=tmp_path)
    after = records.read("h200", "kmeans_assign", root=tmp_path)
    assert after["variant"].iloc[-1] == "after" and len(after) == len(df) + 1 and after["K"].dtype.kind == "i"


def test_rows_appended_shape_by_shape_read_back_as_one_run(tmp_path, rng, ticking_clock):
    """Benchmarks record each shape as soon as it is measured; a clock that moves on between the appends must not
    split one process's run into one run per shape (last_run would then see only the last shape)."""
    records.start_run()
    for N in (1, 65536, 1 << 20):
        records.append("h200", "kmeans_assign", [dict(measurement(rng, N=N, D=128, K=512), kernel="ours",
                                                      variant="serial")], root=tmp_path)
    df = records.read("h200", "kmeans_assign", root=tmp_path)
    assert len(records.last_run(df, [("ours", "serial")], min_shapes=3)) == 3
    first = records.run_date()
    assert records.start_run() != first and records.run_date() != first   # a new run gets a new date


def test_a_run_split_over_processes_takes_its_date_from_the_environment(monkeypatch):
    """A sweep split over device calls (`gemm_kernels.sweep --part`): each process is given the first one's date,
    so its rows read back as one run; a date of another form is refused by name."""
    monkeypatch.setattr(records, "_run_date", None)
    monkeypatch.setenv("WORKBOOK_RUN_DATE", "2026-12-06T08:00:00Z")
    assert records.run_date() == "2026-12-06T08:00:00Z" == records.provenance()["date"]
    monkeypatch.setattr(records, "_run_date", None)
    monkeypatch.setenv("WORKBOOK_RUN_DATE", "yesterday")
    with pytest.raises(ValueError, match="WORKBOOK_RUN_DATE"):
        records.run_date()


def test_write_probe_stamps_every_row_and_writes_the_whole_frame(tmp_path):
    import pandas as pd
    frame = pd.DataFrame({"shape": ["a", "b"], "us": [1.5, 2.5]})
    target = tmp_path / "probe.csv"
    stamped = records.write_probe(frame, target)
    assert list(stamped.columns) == ["shape", "us", *records.PROVENANCE] and "gpu" not in frame
    # the commit read as text: a short hash of digits only (3810430) would otherwise come back as a number
    back = pd.read_csv(target, keep_default_na=False, dtype={"commit": str})
    assert back["us"].tolist() == [1.5, 2.5] and back["commit"].tolist() == [records.provenance()["commit"]] * 2
    records.write_probe(frame.iloc[:1], target)     # rewritten whole, not appended
    assert len(pd.read_csv(target)) == 1

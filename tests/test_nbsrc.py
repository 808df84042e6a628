"""A notebook authored as a script in notebooks/src/ is that script: the committed cells match it."""
import nbformat
import pytest

pytest.importorskip("jupytext", reason="authoring notebooks needs jupytext (a dev dependency; the GPU machine lacks it)")
from workbook import ROOT, nbsrc  # noqa: E402

SCRIPTS = sorted((ROOT / "notebooks" / "src").glob("[0-9][0-9]_*.py"))
RUNTIME = {"execution"}     # what executing a notebook adds to a cell's metadata (nbclient's timings)


def authored(nb):
    return [(c.cell_type, c.source, {k: v for k, v in c.metadata.items() if k not in RUNTIME}) for c in nb.cells]


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_notebook_matches_its_script(script):
    committed = nbformat.read(nbsrc.target(script), as_version=4)
    expected = nbsrc.notebook(script)
    assert authored(committed) == authored(expected), (
        f"{nbsrc.target(script).name} differs from {script.name}: run `python -m workbook.nbsrc {script}` "
        f"and re-execute it")


def test_cells_split_on_markers():
    text = "import os\n# %% [markdown]\n# # Title\n#\n# prose\n\n# %%\nx = 1\n\n\ny = 2\n"
    cells = nbsrc.cells(text)
    assert [(c.cell_type, c.source) for c in cells] == [
        ("code", "import os"), ("markdown", "# Title\n\nprose"), ("code", "x = 1\n\n\ny = 2")]
    assert [c.id for c in cells] == ["cell-000", "cell-001", "cell-002"]
    assert all(c.metadata == {} for c in cells)          # no jupytext bookkeeping (blank lines, markers)


def test_metadata_after_the_marker_is_kept():
    cells = nbsrc.cells('# %% [markdown] jupyter={"source_hidden": true}\n# the answer\n# %% tags=["x"]\n1\n')
    assert cells[0].metadata == {"jupyter": {"source_hidden": True}}
    assert cells[1].metadata == {"tags": ["x"]} and cells[1].outputs == []


def test_regenerating_an_unchanged_script_gives_the_same_file(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    script = src / "99_demo.py"
    script.write_text("# %% [markdown]\n# # Demo\n# %%\nprint(1)\n", encoding="utf-8")
    assert nbsrc.main([str(script)]) == 0
    first = nbsrc.target(script).read_bytes()
    assert nbsrc.main([str(script)]) == 0
    assert nbsrc.target(script).read_bytes() == first
    nb = nbformat.reads(first.decode(), as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3" and "jupytext" not in nb.metadata

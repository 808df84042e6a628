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


def demo_script(tmp_path, text):
    """A script at <tmp>/src/99_demo.py (its notebook goes to <tmp>/99_demo.ipynb)."""
    (tmp_path / "src").mkdir()
    script = tmp_path / "src" / "99_demo.py"
    script.write_text(text, encoding="utf-8")
    return script


def test_regenerating_an_unchanged_script_gives_the_same_file(tmp_path):
    script = demo_script(tmp_path, "# %% [markdown]\n# # Demo\n# %%\nprint(1)\n")
    assert nbsrc.main([str(script)]) == 0
    first = nbsrc.target(script).read_bytes()
    assert nbsrc.main([str(script)]) == 0
    assert nbsrc.target(script).read_bytes() == first
    nb = nbformat.reads(first.decode(), as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3" and "jupytext" not in nb.metadata


def test_keep_outputs_keeps_them_up_to_the_first_changed_code_cell(tmp_path):
    script = demo_script(tmp_path, "# %% [markdown]\n# # Demo\n# %%\nx = 1\n# %%\nprint(x)\n# %%\nprint(2)\n")
    assert nbsrc.main([str(script)]) == 0
    nb = nbformat.read(nbsrc.target(script), as_version=4)
    for n, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"out {n}\n")]
        cell.execution_count = n + 1
        cell.metadata["execution"] = {"shell.execute_reply": f"t{n}"}
    nb.metadata["language_info"] = {"name": "python", "version": "3.12.3"}   # as the executing kernel says
    nbformat.write(nb, nbsrc.target(script))
    # prose changed, and a markdown cell added: every output stays
    script.write_text("# %% [markdown]\n# # Demo, retitled\n# %%\nx = 1\n# %% [markdown]\n# new prose\n# %%\nprint(x)\n"
                      "# %%\nprint(2)\n", encoding="utf-8")
    assert nbsrc.main([str(script), "--keep-outputs"]) == 0
    code = [c for c in nbformat.read(nbsrc.target(script), as_version=4).cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == [1, 2, 3] and code[2].outputs[0].text == "out 2\n"
    assert code[1].metadata["execution"] == {"shell.execute_reply": "t1"}
    assert nbformat.read(nbsrc.target(script), as_version=4).metadata["language_info"]["version"] == "3.12.3"
    # the second code cell changed: it and every later cell lose their outputs, the first keeps its own
    script.write_text(script.read_text(encoding="utf-8").replace("print(x)", "print(x + 1)"), encoding="utf-8")
    assert nbsrc.main([str(script), "--keep-outputs"]) == 0
    code = [c for c in nbformat.read(nbsrc.target(script), as_version=4).cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == [1, None, None]
    assert code[0].outputs and not code[1].outputs and not code[2].outputs and "execution" not in code[2].metadata
    # without the flag, no outputs at all (a fresh notebook to execute)
    assert nbsrc.main([str(script)]) == 0
    code = [c for c in nbformat.read(nbsrc.target(script), as_version=4).cells if c.cell_type == "code"]
    assert not any(c.outputs for c in code)

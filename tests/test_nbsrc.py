"""A notebook authored as a script in notebooks/src/ is that script: the committed cells match it."""
import nbformat
import pytest

from workbook import ROOT, nbsrc

SCRIPTS = sorted((ROOT / "notebooks" / "src").glob("[0-9][0-9]_*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_notebook_matches_its_script(script):
    committed = nbformat.read(nbsrc.target(script), as_version=4)
    expected = nbsrc.notebook(script)
    assert [(c.cell_type, c.source) for c in committed.cells] == [(c.cell_type, c.source) for c in expected.cells], (
        f"{nbsrc.target(script).name} differs from {script.name}: run `python -m workbook.nbsrc {script}` "
        f"and re-execute it")


def test_cells_split_on_markers():
    text = "import os\n# %% [markdown]\n# # Title\n#\n# prose\n# %%\nx = 1\n"
    cells = nbsrc.cells(text)
    assert [(c.cell_type, c.source) for c in cells] == [
        ("code", "import os"), ("markdown", "# Title\n\nprose"), ("code", "x = 1")]


def test_markdown_lines_must_be_comments():
    with pytest.raises(ValueError, match="must start with"):
        nbsrc.cells("# %% [markdown]\nnot a comment\n")

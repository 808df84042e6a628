"""Every notebook executes top to bottom on this machine (on CI: a CPU with recorded data)."""
import pytest

from workbook import report

NOTEBOOKS = report.notebooks()


@pytest.mark.notebooks
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path):
    nb = report.execute(path)
    errors = [out for cell in nb.cells if cell.cell_type == "code"
              for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    assert not errors


def test_notebooks_are_committed_with_outputs():
    """The product's face: each notebook is committed executed, so a reader on GitHub sees the results."""
    assert NOTEBOOKS, "no notebooks found"
    import nbformat
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code and all(c.get("execution_count") for c in code), f"{path.name} is not executed"

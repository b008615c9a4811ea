"""No committed notebook stores a warning: a warning in a rebuilt notebook's stderr is a bug to fix at its cause (issue
41: 29 copies of runpy's RuntimeWarning from the benchmark's worker processes were stored in chapter 11)."""
import importlib.util
from pathlib import Path
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("prose_check", ROOT / "scripts" / "prose_check.py")
prose_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(prose_check)


def stored_warnings(nb) -> list[tuple[int, str]]:
  """(cell index, line) for every line of a stored stderr stream that names a Warning."""
  found = []
  for k, cell in enumerate(nb.cells):
    for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
      if out.get("output_type") == "stream" and out.get("name") == "stderr":
        text = out["text"] if isinstance(out["text"], str) else "".join(out["text"])
        found += [(k, line) for line in text.splitlines() if "Warning" in line]
  return found


def test_a_stored_warning_is_found():
  nb = nbformat.v4.new_notebook()
  cell = nbformat.v4.new_code_cell("rows = bench.attention(Ns, [D], reps=3)")
  warning = ("<frozen runpy>:128: RuntimeWarning: 'uopc.bench.isolated' found in sys.modules after import of package "
             "'uopc.bench', but prior to execution of 'uopc.bench.isolated'; this may result in unpredictable "
             "behaviour")
  cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="N = 256: a Warning in stdout is a result\n"),
                  nbformat.v4.new_output("stream", name="stderr", text=warning + "\n")]
  nb.cells = [nbformat.v4.new_markdown_cell("A Warning in prose is prose."), cell]
  assert stored_warnings(nb) == [(1, warning)]


@pytest.mark.parametrize("path", prose_check.notebooks(), ids=lambda p: p.name)
def test_no_committed_notebook_stores_a_warning(path):
  assert stored_warnings(nbformat.read(path, as_version=4)) == []

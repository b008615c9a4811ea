"""scripts/prose_check.py: a number with a unit in a notebook's prose must be printed by one of its outputs, or be
marked as the book's. It passes on every committed notebook and fails on a planted contradiction."""
import importlib.util
from pathlib import Path
import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("prose_check", ROOT / "scripts" / "prose_check.py")
prose_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(prose_check)


def notebook(markdown: str, output: str):
  nb = nbformat.v4.new_notebook()
  code = nbformat.v4.new_code_cell("print(t)")
  code.outputs = [nbformat.v4.new_output("stream", name="stdout", text=output)]
  nb.cells = [code, nbformat.v4.new_markdown_cell(markdown)]
  return nb


@pytest.mark.parametrize("path", prose_check.notebooks(), ids=lambda p: p.name)
def test_every_committed_notebook_passes(path):
  assert prose_check.unbacked(nbformat.read(path, as_version=4)) == []


def test_a_planted_contradiction_fails():
  found = prose_check.unbacked(notebook("The fused kernel took 12.5 ms here, twice the unfused.", "fused 3.4 ms\n"))
  assert [(k, number) for k, number, _ in found] == [(1, "12.5 ms")]


@pytest.mark.parametrize("markdown", [
  "The fused kernel took 3.4 ms here.",                              # printed above
  "The book measured 12.5 ms for it; here it is faster.",            # the book's number, marked as such
  "Time it with `best_of(fn, 12.5 ms)`.",                            # code
  "```\nfused 12.5 ms\n```",                                         # a quoted printout
  "## 12.5 ms headings are titles",                                  # a heading
  "A 4x4 tile, N = 1024, the 2 x 4 MB arrays: sizes are not results.",
])
def test_what_counts_as_backed(markdown):
  assert prose_check.unbacked(notebook(markdown, "fused 3.4 ms\nN = 1024, 4 MB\n")) == []

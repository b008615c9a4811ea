"""A `%%needs` cell on a machine without its device shows the output some notebook stored for it (uopc.notebook): it
must never show a check's `ok` line, since the check did not run here, and it names the notebook it read from.

Issue 49: in the instructor's tree a student's copy of week 6, without device CL, printed the *solution's* stored
"ok: row_max_kernel(...) against NumPy" lines under "the output stored in week6_flash_attention.ipynb", which is the
student's own file name too.
"""
from pathlib import Path
import nbformat
import pytest
from uopc import notebook

ROOT = Path(__file__).resolve().parents[2]
WEEK6 = "week6_flash_attention"


def needs_cell(path: Path) -> str:
  (cell,) = [c.source for c in nbformat.read(path, as_version=4).cells
             if c.cell_type == "code" and c.source.startswith("%%needs CL")]
  return cell


def test_a_students_cell_without_its_device_shows_no_ok_of_the_solutions_run(tmp_path, monkeypatch, capsys):
  stored = nbformat.read(ROOT / "solutions" / f"{WEEK6}.ipynb", as_version=4)
  (cell,) = [c for c in stored.cells if c.cell_type == "code" and c.source.startswith("%%needs CL")]
  oks = [line for o in cell.outputs for line in o.get("text", "").splitlines() if line.startswith("ok: ")]
  assert len(oks) == 2, cell.outputs   # the solution's run stored its two checks' ok lines
  mine = tmp_path / "my week 6"
  mine.mkdir()
  (mine / f"{WEEK6}.ipynb").write_bytes((ROOT / "assignments" / f"{WEEK6}.ipynb").read_bytes())
  monkeypatch.chdir(mine)   # where Jupyter runs a student's copy: its own folder, the tree's notebooks beyond it
  monkeypatch.setitem(notebook.NEEDS, "CL", lambda: "no OpenCL platform (this test)")
  line, _, body = needs_cell(mine / f"{WEEK6}.ipynb").partition("\n")
  notebook.needs(line.removeprefix("%%needs "), body)
  out = capsys.readouterr().out.splitlines()
  assert out[0] == "[CL is not available here: no OpenCL platform (this test)]", out
  assert out[1] == f"[so this cell did not run; the output stored in solutions/{WEEK6}.ipynb follows]", out
  assert not [line for line in out if line.lstrip().startswith("ok")], out
  assert out[2:] == [f"[not checked here: {ok.removeprefix('ok: ')}]" for ok in oks], out


@pytest.mark.parametrize("text, shown", [
  ("ok: a\nok: b\n", "[not checked here: a]\n[not checked here: b]\n"),
  ("printed ok: kept, mid-line\nok:\n", "printed ok: kept, mid-line\nok:\n"),
  ("x = 3\nok: row max\ny\n", "x = 3\n[not checked here: row max]\ny\n"),
])
def test_only_a_checks_own_ok_line_is_replaced(text, shown):
  assert notebook.unchecked(text) == shown

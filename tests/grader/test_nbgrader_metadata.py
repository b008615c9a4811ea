"""The solution notebooks carry nbgrader cell metadata (schema 3), so nbgrader or Otter-Grader can use them as they
are: every solution region in a solution cell, every hidden test an autograded grade cell with its points, grade
ids unique, and the points the grader reads from `# POINTS:` lines equal to nbgrader's."""
import re
from pathlib import Path
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
POINTS = re.compile(r"^\s*#\s*POINTS:\s*(.+?)\s+(\d+(?:\.\d+)?)(?:\s+(structure|speed))?\s*$")
KEYS = {"grade": bool, "solution": bool, "locked": bool, "schema_version": int, "grade_id": str}


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_solution_cells_and_grade_cells(path):
  nb = nbformat.read(path, as_version=4)
  ids, points_nbgrader, points_grader = set(), 0.0, 0.0
  for k, cell in enumerate(nb.cells):
    meta = cell.metadata.get("nbgrader")
    tags = set(cell.metadata.get("tags", []))
    has_region = cell.cell_type == "code" and "### BEGIN SOLUTION" in [x.strip() for x in cell.source.split("\n")]
    if meta is None:
      assert not has_region and "hidden-test" not in tags, f"cell {k}: a solution or test cell without metadata"
      continue
    for key, typ in KEYS.items(): assert isinstance(meta.get(key), typ), f"cell {k}: nbgrader.{key} {meta.get(key)!r}"
    assert meta["schema_version"] == 3 and re.fullmatch(r"[a-z0-9-]+", meta["grade_id"]), meta
    assert meta["grade_id"] not in ids, f"cell {k}: grade_id {meta['grade_id']} used twice"
    ids.add(meta["grade_id"])
    assert meta["solution"] == has_region, f"cell {k}"
    if meta["grade"]:   # an autograded test: locked, with points, never a solution cell
      assert "hidden-test" in tags and meta["locked"] and not meta["solution"] and meta["points"] > 0, f"cell {k}"
      m = POINTS.match(cell.source.lstrip("\n").split("\n", 1)[0])
      assert m and float(m.group(2)) == meta["points"], f"cell {k}"
      assert "### BEGIN HIDDEN TESTS" in cell.source, f"cell {k}: nbgrader hides only what is between the markers"
      points_nbgrader += meta["points"]
    if "hidden-test" in tags: points_grader += float(POINTS.match(cell.source.lstrip("\n").split("\n", 1)[0])[2])
  assert points_nbgrader == points_grader > 0


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_definitions_a_fresh_child_needs_are_run_after_the_hidden_setup(path):
  """`raises` and `peak_memory` hand the notebook's definitions to a fresh process. In the grader's sandbox they are
  read back from the kernel's input history; under nbval (CI's strict run of the solutions) the kernel keeps none,
  and only the cells run after the hidden-setup cell are known (solution_setup._cells): a setup cell before it left
  week 6's `qkv` out, and its "find the bug" test failed there alone. So in a solution whose hidden tests use either,
  no code cell but the machine cell (tagged nbval-ignore-output) comes before the hidden-setup cell."""
  nb = nbformat.read(path, as_version=4)
  code = [c for c in nb.cells if c.cell_type == "code"]
  tags = [set(c.metadata.get("tags", [])) for c in code]
  hidden = "\n".join(c.source for c, t in zip(code, tags) if "hidden-test" in t)
  if not re.search(r"\b(raises|peak_memory)\(", hidden): pytest.skip("no hidden test hands definitions to a child")
  setup = next(k for k, t in enumerate(tags) if "hidden-setup" in t)
  before = [k for k in range(setup) if "nbval-ignore-output" not in tags[k]]
  assert not before, (f"code cells {before} run before the hidden-setup cell (cell {setup}): "
                      f"{code[before[0]].source[:80]!r}")

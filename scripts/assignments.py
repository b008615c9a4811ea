"""Generate the student notebooks in assignments/ from the solution notebooks in solutions/.

solutions/X.ipynb is the one source of truth; assignments/X.ipynb is made from it by
  - replacing each region of a code cell between a line `### BEGIN SOLUTION` and a line `### END SOLUTION`
    (markers included) by `raise NotImplementedError("<task>")` at the indentation of the BEGIN line, where
    <task> is the name on a `# TASK: <name>` line of that cell, or else the notebook's last heading before it;
  - dropping cells tagged `hidden-test` or `hidden-setup` (the grader runs them, students never see them), and
    cells tagged `answer` (prose that gives an exercise's answer away: the reading of a result, quiz answers);
  - clearing every output and execution count;
  - recording which solution it came from in the notebook's metadata (`uopc.assignment`), so that
    `make grade NB=<any name>.ipynb` finds the hidden tests of a student's renamed copy.
The solution notebooks carry nbgrader cell metadata (`nbgrader_metadata`, added when scripts/notebooks.py builds
them): solution cells, grade cells with their points, so nbgrader or Otter-Grader can use them as they are.
The output is deterministic: the same solution gives the same bytes.

  python scripts/assignments.py           # write assignments/ (and remove assignments whose solution is gone)
  python scripts/assignments.py --check   # exit 1 naming every stale assignment, 0 when all are up to date
"""
from __future__ import annotations
import argparse
import copy
import json
import re
import sys
from pathlib import Path
import nbformat

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
TASK = re.compile(r"^\s*#\s*TASK:\s*(.+?)\s*$")
HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")
HIDDEN, SETUP, ANSWER = "hidden-test", "hidden-setup", "answer"
POINTS = re.compile(r"^\s*#\s*POINTS:\s*(.+?)\s+(\d+(?:\.\d+)?)(?:\s+(structure|speed))?\s*$")


class AssignmentError(ValueError):
  """A solution notebook that cannot be turned into an assignment (unbalanced markers, markers in markdown)."""


def stub_cell(source: str, task: str, where: str) -> str:
  """The cell's source with every solution region replaced by a stub that raises NotImplementedError(task)."""
  out, inside = [], False
  for n, line in enumerate(source.split("\n"), 1):
    marker = line.strip()
    if marker == BEGIN:
      if inside: raise AssignmentError(f"{where}, line {n}: {BEGIN} inside another solution region")
      inside = True
      indent = line[:len(line) - len(line.lstrip())]
      out.append(f"{indent}raise NotImplementedError({json.dumps(task, ensure_ascii=False)})")
    elif marker == END:
      if not inside: raise AssignmentError(f"{where}, line {n}: {END} without a {BEGIN} before it")
      inside = False
    elif not inside:
      out.append(line)
  if inside: raise AssignmentError(f"{where}: {BEGIN} is never closed by {END}")
  return "\n".join(out)


def last_heading(lines: list[str]) -> str | None:
  """The text of the last markdown heading among lines (a `#` line inside a ``` fence is code, not a heading)."""
  found, fenced = None, False
  for line in lines:
    if line.lstrip().startswith("```"): fenced = not fenced
    elif not fenced and (m := HEADING.match(line)): found = m.group(1)
  return found


def make_assignment(solution: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
  """The student version of one solution notebook (see the module docstring)."""
  nb = copy.deepcopy(solution)
  cells, heading = [], name
  for k, cell in enumerate(nb.cells):
    where = f"{name}, cell {k}"
    if {HIDDEN, SETUP, ANSWER} & set(cell.get("metadata", {}).get("tags", [])): continue
    lines = cell.source.split("\n")
    if cell.cell_type == "markdown":
      if any(line.strip() in (BEGIN, END) for line in lines):
        raise AssignmentError(f"{where}: solution markers work only in code cells (here they would leak the answer)")
      heading = last_heading(lines) or heading
    if cell.cell_type == "code":
      task = next((m.group(1) for line in lines if (m := TASK.match(line))), heading)
      cell.source = stub_cell(cell.source, task, where)
      cell.outputs, cell.execution_count = [], None
      cell.metadata.pop("execution", None)
    cells.append(cell)
  nb.cells = cells
  nb.metadata["uopc"] = {"assignment": name}
  return nb


def slug(text: str) -> str: return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def nbgrader_metadata(nb: nbformat.NotebookNode) -> dict[int, dict]:
  """Cell index -> its nbgrader metadata: a code cell with a solution region is a solution cell (task from its
  `# TASK:` line), a hidden test an autograded grade cell with the points of its `# POINTS:` line, a hidden-setup
  cell a locked cell. Other cells get none."""
  out, seen, heading = {}, {}, "task"
  def unique(base: str) -> str:
    seen[base] = seen.get(base, 0) + 1
    return f"{base}-{seen[base]}"
  for k, cell in enumerate(nb.cells):
    lines, tags = cell.source.split("\n"), cell.get("metadata", {}).get("tags", [])
    if cell.cell_type == "markdown":
      heading = last_heading(lines) or heading
      continue
    if cell.cell_type != "code": continue
    base = {"grade": False, "solution": False, "locked": False, "schema_version": 3}
    if HIDDEN in tags:
      m = POINTS.match(cell.source.lstrip("\n").split("\n", 1)[0])
      if m is None: continue   # the grader reports it
      out[k] = {**base, "grade": True, "locked": True, "points": float(m.group(2)),
                "grade_id": unique(f"{slug(m.group(1))}-{m.group(3) or 'values'}")}
    elif SETUP in tags: out[k] = {**base, "locked": True, "grade_id": unique("hidden-setup")}
    elif any(line.strip() == BEGIN for line in lines):
      task = next((m.group(1) for line in lines if (m := TASK.match(line))), heading)
      out[k] = {**base, "solution": True, "grade_id": unique(f"{slug(task)}-solution")}
  return out


def annotate(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
  """nb with nbgrader metadata on exactly the cells nbgrader_metadata names (in place; returned for chaining)."""
  meta = nbgrader_metadata(nb)
  for k, cell in enumerate(nb.cells):
    if k in meta: cell.metadata["nbgrader"] = meta[k]
    else: cell.metadata.pop("nbgrader", None)
  return nb


def shown(p: Path) -> str:
  """A path as the user would type it: relative to the current folder when it is inside it."""
  try: return str(p.resolve().relative_to(Path.cwd()))
  except ValueError: return str(p)


def render(nb: nbformat.NotebookNode) -> str:
  text = nbformat.writes(nb)   # sorted keys, one-space indent: stable text for stable input
  return text if text.endswith("\n") else text + "\n"


def expected(solutions: Path) -> dict[str, str]:
  """File name -> the text its assignment should have, for every solution notebook."""
  if not solutions.is_dir(): return {}
  notebooks = sorted(solutions.glob("*.ipynb"))
  return {p.name: render(make_assignment(nbformat.read(p, as_version=4), p.stem)) for p in notebooks}


def stale(solutions: Path, assignments: Path) -> list[str]:
  """Why each assignment differs from what would be generated (missing, different, or without a solution)."""
  want, problems = expected(solutions), []
  have = sorted(p.name for p in assignments.glob("*.ipynb")) if assignments.is_dir() else []
  for name, text in want.items():
    path, source = assignments / name, shown(solutions / name)
    if not path.exists(): problems.append(f"{shown(path)}: missing (generated from {source})")
    elif path.read_text(encoding="utf-8") != text:
      problems.append(f"{shown(path)}: stale (differs from what {source} gives)")
  for name in have:
    if name not in want:
      problems.append(f"{shown(assignments / name)}: stale (no solution {shown(solutions / name)} any more)")
  return problems


def generate(solutions: Path, assignments: Path) -> list[str]:
  """Write every assignment that differs, remove those whose solution is gone; return what changed."""
  want, changed = expected(solutions), []
  if want: assignments.mkdir(parents=True, exist_ok=True)
  for name, text in want.items():
    path = assignments / name
    if not path.exists() or path.read_text(encoding="utf-8") != text:
      path.write_text(text, encoding="utf-8", newline="\n")
      changed.append(f"wrote {shown(path)}")
  for path in (sorted(assignments.glob("*.ipynb")) if assignments.is_dir() else []):
    if path.name not in want:
      path.unlink()
      changed.append(f"removed {shown(path)} (no solution any more)")
  return changed


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--check", action="store_true", help="only report stale assignments (exit 1 if any)")
  ap.add_argument("--solutions", type=Path, default=ROOT / "solutions")
  ap.add_argument("--assignments", type=Path, default=ROOT / "assignments")
  args = ap.parse_args(argv)
  try:
    if args.check:
      problems = stale(args.solutions, args.assignments)
      if problems:
        print("\n".join(problems) + "\nrun `make assignments` to regenerate them", file=sys.stderr)
        return 1
      print(f"assignments up to date ({len(expected(args.solutions))} generated from {shown(args.solutions)})")
      return 0
    changed = generate(args.solutions, args.assignments)
    print("\n".join(changed) if changed else "assignments already up to date")
    return 0
  except AssignmentError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2


if __name__ == "__main__":
  sys.exit(main())

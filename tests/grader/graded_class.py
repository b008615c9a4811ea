"""The class that tests/grader/conftest.py's `graded_class` grades once for the whole run with `make grade-all`:
every week's solution (as `make grade NB=` has it), its stubs and its wrong answers, two attacks."""
from __future__ import annotations
import importlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
import nbformat
from nbformat.v4 import new_code_cell
from assignment_grading import with_wrong

ROOT = Path(__file__).resolve().parents[2]
# the seed the weeks' wrong answers were written against: which input a planted fault trips over first, and so its
# message, is fixed by it
CLASS_SEED, CLASS_TIMEOUT = "1", "60"
WEEKS = sorted(p.stem for p in (ROOT / "solutions").glob("week*.ipynb"))
# every week's solution with a wrong answer to every task (the list of the week's test file, test_<week>_assignment.py,
# whose test reads the report here rather than grading it again)
CLASS_WRONG = WEEKS
# (tampering with the checks is graded alone in test_grader_attacks.py: it breaks its kernel and takes a minute)
CLASS_ATTACKS = ("FORGE", "HARM")


@dataclass
class GradedClass:
  """A class folder after `make grade-all`: its gradebook's rows by student, and each notebook's whole report."""
  folder: Path
  out: Path
  rows: dict[str, dict]

  @staticmethod
  def student(week: str, kind: str) -> str:
    """The student whose notebook is `week`'s solution (kind "solved", as `make grade NB=` has it), its stubs ("stub")
    or its wrong answers ("wrong")."""
    return f"wrong_{week[:5]}" if kind == "wrong" else f"{kind}{WEEKS.index(week) + 1}"

  def report(self, week: str, kind: str) -> dict:
    """What `make grade --json` gives for that notebook, with the table it prints as "table" (its feedback file)."""
    name = self.student(week, kind)
    out = json.loads((self.out / "reports" / f"{name}.json").read_text())
    return {**out, "table": (self.out / "feedback" / f"{name}.txt").read_text().rstrip("\n")}


def make_class(folder: Path) -> None:
  import test_grader_attacks as attacks   # the attack cells, as that module grades each alone
  folder.mkdir()
  for week in WEEKS:
    shutil.copy(ROOT / "solutions" / f"{week}.ipynb", folder / f"{GradedClass.student(week, 'solved')}.ipynb")
    shutil.copy(ROOT / "assignments" / f"{week}.ipynb", folder / f"{GradedClass.student(week, 'stub')}.ipynb")
  for week in CLASS_WRONG:
    wrong = importlib.import_module(f"test_{week[:5]}_assignment").WRONG
    nbformat.write(with_wrong(ROOT / "solutions" / f"{week}.ipynb", wrong),
                   folder / f"{GradedClass.student(week, 'wrong')}.ipynb")
  (folder / "attacks").mkdir()
  for name in CLASS_ATTACKS:
    nb = nbformat.read(ROOT / "assignments" / "week1_why_compile.ipynb", as_version=4)
    nb.cells.append(new_code_cell(getattr(attacks, name)))
    nbformat.write(nb, folder / "attacks" / f"{name.lower()}.ipynb")

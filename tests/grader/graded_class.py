"""The class that tests/grader/conftest.py's `graded_class` grades once for the whole run with `make grade-all`:
every week's solution (as `make grade NB=` has it) and stubs, a wrong answer in three weeks, two attacks."""
from __future__ import annotations
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
import nbformat
from nbformat.v4 import new_code_cell
from assignment_grading import Wrong, with_wrong

ROOT = Path(__file__).resolve().parents[2]
CLASS_SEED, CLASS_TIMEOUT = "27", "60"
WEEKS = sorted(p.stem for p in (ROOT / "solutions").glob("week*.ipynb"))
CLASS_WRONG = {   # one wrong answer in three weeks (from the weeks' own tests' lists)
  "week1_why_compile": Wrong("cost table", "io_bytes = 4 * itemsize * N * D", "io_bytes = 3 * itemsize * N * D", ""),
  "week3_gemm_by_hand": Wrong("B transposed", "BT.index(simplify(j * K + k))", "BT.index(simplify(k * N + j))", ""),
  "week5_tensor_and_fast_kernel": Wrong("the best tile", "if tile_cost(tm, tn)[1] <= registers]",
                                        "if tm * tn <= registers]", ""),
}
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
    """The student whose notebook is `week`'s solution (kind "solved", as `make grade NB=` has it) or its stubs."""
    return f"{kind}{WEEKS.index(week) + 1}"

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
  for week, wrong in CLASS_WRONG.items():
    nbformat.write(with_wrong(ROOT / "solutions" / f"{week}.ipynb", [wrong]), folder / f"wrong_{week[:5]}.ipynb")
  (folder / "attacks").mkdir()
  for name in CLASS_ATTACKS:
    nb = nbformat.read(ROOT / "assignments" / "week1_why_compile.ipynb", as_version=4)
    nb.cells.append(new_code_cell(getattr(attacks, name)))
    nbformat.write(nb, folder / "attacks" / f"{name.lower()}.ipynb")

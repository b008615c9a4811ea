"""The judge: runs in the grader's own process, after the sandbox has ended, on the values the probes recorded.

A hidden test is one cell of the solution: `# POINTS: <task> <points> [structure|speed]`, optionally
`# SHORTCUTS: uopc.module.name, ...` (guards.py), optionally a fixture (`# FIXTURE` ... `# PROBE`: plain data made
here, given to the probe and the judge), the probe (code run in the sandbox after the student's cells: it calls the
student's functions on inputs from `seeded(...)` and records what they return), then a line `# JUDGE` and the judge
(code run here: it makes the same inputs from the grader's seed, computes the references with the grader's own uopc
and NumPy, and compares them with `recorded[name]`, the recorded values, through gradelib's checks). A judge never
calls anything of the student's: `recorded` holds plain data only, and what must run of the student's (C, a function
whose memory is measured) runs outside, in outside.py's harness. A test without `# JUDGE` scores when its probe runs
without error (a check judged inside the sandbox, which a student's code could fake: the course's solutions have
none). Every check of a judge that fails is reported, not only the first (_Soft)."""
from __future__ import annotations
import ast
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
import numpy as np
import guards
import records

POINTS = re.compile(r"^\s*#\s*POINTS:\s*(.+?)\s+(\d+(?:\.\d+)?)(?:\s+(structure|speed))?\s*$")
JUDGE, FIXTURE, PROBE = "# JUDGE", "# FIXTURE", "# PROBE"


@dataclass
class HiddenTest:
  task: str
  points: float
  source: str
  cell: int                # index of the cell in the solution notebook
  kind: str = "values"     # values, structure or speed: the last two count only when the task's values are right
  shortcuts: list[guards.Guard] = field(default_factory=list)

  @property
  def probe(self) -> str: return split(self.source)[1]

  @property
  def judge(self) -> str | None: return split(self.source)[2]

  @property
  def fixture(self) -> str | None: return split(self.source)[0]


def split(source: str) -> tuple[str | None, str, str | None]:
  """(fixture, probe, judge) of a hidden test's source. The fixture (from a line `# FIXTURE` to a line `# PROBE`) runs
  in the grader's process before the sandbox and defines `fixture`, plain data that the probe and the judge both see
  (e.g. kernel sources made by the grader's uopc, which the probe must not make with the notebook's); the judge
  starts at a line `# JUDGE` (None without one)."""
  lines = source.split("\n")
  marks = {line.strip(): k for k, line in enumerate(lines) if line.strip() in (JUDGE, FIXTURE, PROBE)}
  fixture = None
  if FIXTURE in marks and PROBE in marks and marks[FIXTURE] < marks[PROBE]:
    fixture = "\n".join(lines[marks[FIXTURE] + 1:marks[PROBE]])
    lines = lines[:marks[FIXTURE]] + [""] * (marks[PROBE] + 1 - marks[FIXTURE]) + lines[marks[PROBE] + 1:]
  at = marks.get(JUDGE)
  if at is None: return fixture, "\n".join(lines), None
  return fixture, "\n".join(lines[:at]), "\n".join(lines[at + 1:])


def parse(source: str, cell: int, where: str) -> HiddenTest | None:
  first = source.lstrip("\n").split("\n", 1)[0]
  m = POINTS.match(first)
  if m is None: return None
  return HiddenTest(m.group(1), float(m.group(2)), source, cell, m.group(3) or "values", guards.parse(source))


def namespace(setup: list[str], seed: int, **extra: Any) -> dict:
  """The judges' globals: what the solution's hidden-setup cells define (gradelib, helpers), run here, with the
  grader's seed and a generator that makes the same inputs as the probe's seeded(...)."""
  ns: dict = {"__name__": "__judge__", "np": np, "math": math, "re": re}
  for source in setup: exec(compile(source, "<hidden-setup>", "exec"), ns)
  ns.update(SEED=seed, seeded=lambda *key: np.random.default_rng([seed, *key]), **extra)
  return ns


MAX_FAILURES = 6   # expectations reported per test; past them, how many more failed


class _Soft(ast.NodeTransformer):
  """Every check of a judge (an assert, a call such as gradelib.expect_close, a raise, a try with its own diagnosis)
  wrapped so that a failing one is noted and the judge goes on to the next: a student learns of every fault at once,
  not one per hand-in. Loops and ifs are entered; assignments are left as they are (a value that cannot be made
  stops the judge, as the checks after it depend on it)."""

  def _wrap(self, stmt: ast.stmt) -> ast.stmt:
    handler = ast.ExceptHandler(type=ast.Name("AssertionError", ast.Load()), name="_grader_e",
                                body=ast.parse("_grader_failed(_grader_e)").body)
    return ast.Try(body=[stmt], handlers=[handler], orelse=[], finalbody=[])

  def _body(self, body: list[ast.stmt]) -> list[ast.stmt]:
    out = []
    for stmt in body:
      if isinstance(stmt, (ast.For, ast.While, ast.If, ast.With)):
        stmt.body = self._body(stmt.body)
        if getattr(stmt, "orelse", None): stmt.orelse = self._body(stmt.orelse)
        out.append(stmt)
      elif isinstance(stmt, (ast.Assert, ast.Expr, ast.Raise, ast.Try)): out.append(self._wrap(stmt))
      else: out.append(stmt)
    return out

  def visit_Module(self, node: ast.Module) -> ast.Module:
    node.body = self._body(node.body)
    return node


def soft(source: str, name: str):
  """The judge's code, compiled with every check soft (_Soft)."""
  tree = ast.fix_missing_locations(_Soft().visit(ast.parse(source)))
  return compile(tree, name, "exec")


def make_fixture(test: HiddenTest, ns: dict) -> Any:
  """The test's fixture, made here (None without one); an error names the test: it is the course's bug, not the
  student's."""
  if test.fixture is None: return None
  local = dict(ns)
  exec(compile(test.fixture, f"<fixture of cell {test.cell}>", "exec"), local)
  return local.get("fixture")


def run(test: HiddenTest, values: dict[str, Any], ns: dict, fixture: Any = None) -> tuple[str, str]:
  """(status, error) of one judge on the values its probe recorded: every expectation that failed, each with its
  message, joined by " | " (at most MAX_FAILURES, then how many more)."""
  failed: list[str] = []
  note = lambda e: failed.append(str(e) or "a check failed (no message)") if str(e) not in failed else None
  local = dict(ns, recorded=records.Recorded(values), fixture=fixture, _grader_failed=note)
  try: exec(soft(test.judge, f"<judge of cell {test.cell}>"), local)
  except AssertionError as e: note(e)
  except Exception as e:   # e.g. arithmetic on a value not plain data; after a failed check, a consequence of it
    if not failed: return "error", f"{type(e).__name__}: {e}"
  if not failed: return "ok", ""
  more = len(failed) - MAX_FAILURES
  return "error", "AssertionError: " + " | ".join(failed[:MAX_FAILURES]) + (f" | and {more} more" if more > 0 else "")


def values_of(out: Path, k: int) -> dict[str, Any]:
  return records.read(out / "records" / str(k))

"""The judge: runs in the grader's own process, after the sandbox has ended, on the values the probes recorded.

A hidden test is one cell of the solution: `# POINTS: <task> <points> [structure|speed]`, optionally
`# SHORTCUTS: name, ...`, the probe (code run in the sandbox after the student's cells: it calls the student's
functions on inputs from `seeded(...)` and records what they return), then a line `# JUDGE` and the judge (code run
here: it makes the same inputs from the grader's seed, computes the references with the grader's own uopc and NumPy,
and compares them with `recorded[name]`, the recorded values, through gradelib's checks). A judge never calls anything
of the student's: `recorded` holds plain data only. A test without `# JUDGE` scores when its probe runs without error
(a check judged inside the sandbox, which a student's code could fake: the course's solutions have none)."""
from __future__ import annotations
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
import numpy as np
import records

POINTS = re.compile(r"^\s*#\s*POINTS:\s*(.+?)\s+(\d+(?:\.\d+)?)(?:\s+(structure|speed))?\s*$")
SHORTCUTS = re.compile(r"^\s*#\s*SHORTCUTS:\s*(.+?)\s*$", re.M)
JUDGE = "# JUDGE"


@dataclass
class HiddenTest:
  task: str
  points: float
  source: str
  cell: int                # index of the cell in the solution notebook
  kind: str = "values"     # values, structure or speed: the last two count only when the task's values are right
  shortcuts: list[str] = field(default_factory=list)

  @property
  def probe(self) -> str: return split(self.source)[0]

  @property
  def judge(self) -> str | None: return split(self.source)[1]


def split(source: str) -> tuple[str, str | None]:
  """(probe, judge) of a hidden test's source; judge is None when it has no `# JUDGE` line."""
  lines = source.split("\n")
  at = next((k for k, line in enumerate(lines) if line.strip() == JUDGE), None)
  if at is None: return source, None
  return "\n".join(lines[:at]), "\n".join(lines[at + 1:])


def parse(source: str, cell: int, where: str) -> HiddenTest | None:
  first = source.lstrip("\n").split("\n", 1)[0]
  m = POINTS.match(first)
  if m is None: return None
  found = SHORTCUTS.search(source)
  cut = [s.strip() for s in found.group(1).split(",") if s.strip()] if found else []
  return HiddenTest(m.group(1), float(m.group(2)), source, cell, m.group(3) or "values", cut)


def namespace(setup: list[str], seed: int, **extra: Any) -> dict:
  """The judges' globals: what the solution's hidden-setup cells define (gradelib, helpers), run here, with the
  grader's seed and a generator that makes the same inputs as the probe's seeded(...)."""
  ns: dict = {"__name__": "__judge__", "np": np, "math": math, "re": re}
  for source in setup: exec(compile(source, "<hidden-setup>", "exec"), ns)
  ns.update(SEED=seed, seeded=lambda *key: np.random.default_rng([seed, *key]), **extra)
  return ns


def run(test: HiddenTest, values: dict[str, Any], ns: dict) -> tuple[str, str]:
  """(status, error) of one judge on the values its probe recorded."""
  local = dict(ns, recorded=records.Recorded(values))
  try: exec(compile(test.judge, f"<judge of cell {test.cell}>", "exec"), local)
  except AssertionError as e: return "error", f"AssertionError: {e}"
  except Exception as e: return "error", f"{type(e).__name__}: {e}"   # e.g. arithmetic on a value not plain data
  return "ok", ""


def values_of(out: Path, k: int) -> dict[str, Any]:
  return records.read(out / "records" / str(k))

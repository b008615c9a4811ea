"""Where a grading's time goes: seconds per phase, kept in the report (`phases`) for the teacher, never for a grade.

The grader's side times itself (course tree, seed cache, the sandbox, the judges' setup, the judges, the speed
tests); the sandbox's runner reports its own phases (copying the seed cache, starting the kernel, the student's cells,
the probes) and how many kernels it compiled. Those come from where the student's code runs, so they are read as
untrusted numbers: a breakdown, nothing more.
"""
from __future__ import annotations
import time
from typing import Any, Callable

INSIDE = ("seed_copy", "kernel_start", "student_cells", "probes", "kernel_close", "export_cache")


def _seconds(x: Any) -> float | None:
  return float(x) if type(x) in (int, float) and 0 <= x < 1e6 else None


class Clock:
  """lap(name) adds the time since the last lap to phases[name]; timed(name, fn) counts fn's calls to name instead
  of to the lap they happen in; inside(result) adds the runner's phases as `sandbox.<name>`."""

  def __init__(self, phases: dict):
    self.phases, self.start = phases, time.perf_counter()
    self.last, self.nested = self.start, 0.0

  def _add(self, name: str, dt: float) -> None:
    self.phases[name] = round(self.phases.get(name, 0.0) + dt, 3)
    self.phases["total"] = round(time.perf_counter() - self.start, 3)

  def lap(self, name: str) -> None:
    now = time.perf_counter()
    self._add(name, now - self.last - self.nested)
    self.last, self.nested = now, 0.0

  def timed(self, name: str, fn: Callable) -> Callable:
    def run(*args, **kw):
      t0 = time.perf_counter()
      try: return fn(*args, **kw)
      finally:
        dt = time.perf_counter() - t0
        self.nested += dt
        self._add(name, dt)
        self.phases[f"{name}_runs"] = self.phases.get(f"{name}_runs", 0) + 1
    return run

  def inside(self, result: dict) -> None:
    got = result.get("phases") if isinstance(result.get("phases"), dict) else {}
    known = {k: s for k in INSIDE if (s := _seconds(got.get(k))) is not None}
    for k, s in known.items(): self.phases[f"sandbox.{k}"] = round(s, 3)
    if "sandbox" in self.phases:   # bwrap, the runner's Python and its imports: what the runner could not time
      self.phases["sandbox.start"] = round(max(0.0, self.phases["sandbox"] - sum(known.values())), 3)
    built = result.get("built")
    if type(built) is int and built >= 0: self.phases["sandbox.kernels_built"] = built

"""The probe side of a hidden test: what runs in the sandbox after the student's cells. It only records values
(`record`, `raised`) as plain data into a folder the grader reads once the sandbox has ended; it judges nothing.
Inputs come from `seeded(...)`, seeded by the grader at grading time (SEED), so a notebook cannot have known them.

The solution notebooks load this file in their hidden-setup cell, with a `recorded` that reads the values back at once,
so a hidden test (probe, then `# JUDGE`, then its judge) runs in one kernel there exactly as the grader splits it."""
from __future__ import annotations
from pathlib import Path
from typing import Any, Callable
import numpy as np
import records


class Probe:
  def __init__(self, folder: str | Path, seed: int):
    self.root, self.seed = Path(folder), int(seed)
    self.begin(0)

  def begin(self, test: int) -> None:
    """The values recorded from now on belong to hidden test number `test`."""
    self.test, self.folder, self.count = test, self.root / str(test), 0

  def record(self, name: str, value: Any) -> Any:
    """Send value to the judge under name (as plain data: an object that is not, arrives as 'not plain data')."""
    records.write(self.folder, self.count, str(name), value)
    self.count += 1
    return value

  def raised(self, fn: Callable[[], Any]) -> dict:
    """What calling fn does, as data: {"raised": None} or the exception's class names (its MRO) and message."""
    try: fn()
    except Exception as e:
      return {"raised": type(e).__name__, "classes": [c.__name__ for c in type(e).__mro__], "message": str(e)}
    return {"raised": None}

  def seeded(self, *key: int) -> np.random.Generator:
    """A generator for the inputs of one case; the judge makes the same one from the same key."""
    return np.random.default_rng([self.seed, *key])

  def got(self) -> records.Recorded:
    """The values recorded since begin(), read back as the judge reads them (in a notebook, right after the probe)."""
    return records.Recorded(records.read(self.folder))


class Live:
  """`recorded` in a solution notebook: reads the probe's current folder on every access, as the judge would."""

  def __init__(self, probe: Probe): self.probe = probe
  def __getitem__(self, name: str) -> Any: return self.probe.got()[name]
  def __contains__(self, name: str) -> bool: return name in self.probe.got()

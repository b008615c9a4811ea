"""Values sent from the sandbox to the judge as plain data: JSON for numbers, strings, lists and dicts, `.npy` for
arrays. The sandbox side (`write`) runs where the student's code can patch anything, so the reading side (`read`)
trusts nothing it did: it builds only plain Python values and NumPy arrays (np.load with allow_pickle=False), checks
sizes, and turns anything it cannot read into `NotPlain`, which compares unequal to everything."""
from __future__ import annotations
import json
import math
from pathlib import Path
from typing import Any
import numpy as np
import graphs

MAX_FILE = 64 << 20        # bytes one recorded value may take (an array, or the JSON of one test)
MAX_FILES = 256            # arrays one test may record
MAX_TEST = 256 << 20       # bytes of all that one test recorded: each file read once, and counted once
INDEX = "values.json"


class NotPlain:
  """A value that did not arrive as plain data (an object of the student's, a missing or corrupt file). It never
  equals anything, and says what it was."""

  def __init__(self, what: str): self.what = what
  def __eq__(self, other) -> bool: return False
  def __ne__(self, other) -> bool: return True
  __hash__ = None
  def __repr__(self) -> str: return f"<not plain data: {self.what}>"


# --- the sandbox side ----------------------------------------------------------------------------------------------
def encode(value: Any, arrays: list[np.ndarray]) -> Any:
  """value as a JSON tree; arrays are appended to `arrays` and referenced by index, tuples are tagged."""
  if value is None or type(value) in (bool, int, str): return value
  if type(value) is float: return value if math.isfinite(value) else {"__float__": repr(value)}
  if isinstance(value, np.generic) and value.dtype.kind in "biuf": return encode(value.item(), arrays)
  if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
    arrays.append(np.ascontiguousarray(value))
    return {"__npy__": len(arrays) - 1}
  if type(value) in (list, tuple):
    items = [encode(v, arrays) for v in value]
    return {"__tuple__": items} if type(value) is tuple else items
  if type(value) is dict and all(type(k) is str for k in value):
    return {"__dict__": {k: encode(v, arrays) for k, v in value.items()}}
  if graphs.is_uop(value):   # a loop program: the judge builds it again with its own uopc (graphs.decode)
    try: return {"__uops__": graphs.encode(value)[graphs.TAG]}
    except (graphs.Unencodable, AttributeError, TypeError) as e: return {"__not_plain__": f"UOp ({e})"}
  return {"__not_plain__": type(value).__name__}


def write(folder: Path, k: int, name: str, value: Any) -> None:
  """The k-th value a test records, into folder: r<k>.json and its arrays r<k>_0.npy, r<k>_1.npy, ..."""
  folder.mkdir(parents=True, exist_ok=True)
  arrays: list[np.ndarray] = []
  tree = encode(value, arrays)
  for j, a in enumerate(arrays): np.save(folder / f"r{k}_{j}.npy", a, allow_pickle=False)
  tmp = folder / f"r{k}.tmp"
  tmp.write_text(json.dumps({"name": name, "value": tree}))
  tmp.replace(folder / f"r{k}.json")   # a value is there whole or not at all


def from_json(text: str) -> Any:
  """A hidden test's fixture (plain data the grader made for its probe), as the probe sees it."""
  return json.loads(text)


# --- the grader's side ---------------------------------------------------------------------------------------------
class Budget:
  """What one test's values may cost to read: MAX_TEST bytes in all, each file read once (a value that names one
  array many times gets that array once, not many copies of it)."""

  def __init__(self, left: int | None = None): self.left, self.arrays = MAX_TEST if left is None else left, {}

  def take(self, n: int) -> bool:
    if n > self.left: return False
    self.left -= n
    return True


def _load_array(stem: Path, k: Any, budget: Budget) -> Any:
  """Array k of the value written as stem.json (stem_k.npy)."""
  if type(k) is not int or not 0 <= k < MAX_FILES: return NotPlain("a bad array reference")
  p = stem.with_name(f"{stem.name}_{k}.npy")
  if p in budget.arrays: return budget.arrays[p]
  try:
    if p.is_symlink() or not p.is_file() or p.stat().st_size > MAX_FILE: a = NotPlain(f"array {k}: missing or big")
    elif not budget.take(p.stat().st_size): a = NotPlain(f"array {k}: past the {MAX_TEST >> 20} MiB a test may record")
    else:
      a = np.load(p, allow_pickle=False)
      if not (isinstance(a, np.ndarray) and a.dtype.kind in "biuf"): a = NotPlain(f"array {k} of dtype {a.dtype}")
  except Exception as e: a = NotPlain(f"array {k}: {type(e).__name__}")
  budget.arrays[p] = a
  return a


def decode(tree: Any, stem: Path, budget: Budget | None = None) -> Any:
  budget = budget if budget is not None else Budget()
  if tree is None or type(tree) in (bool, int, float, str): return tree
  if type(tree) is list: return [decode(v, stem, budget) for v in tree]
  if type(tree) is dict and len(tree) == 1:
    (tag, v), = tree.items()
    if tag == "__npy__": return _load_array(stem, v, budget)
    if tag == "__tuple__" and type(v) is list: return tuple(decode(x, stem, budget) for x in v)
    if tag == "__dict__" and type(v) is dict: return {str(k): decode(x, stem, budget) for k, x in v.items()}
    if tag == "__float__" and v in ("nan", "inf", "-inf"): return float(v)
    if tag == "__not_plain__": return NotPlain(f"an object of type {str(v)[:60]}")
    if tag == "__uops__" and type(v) is list: return {graphs.TAG: v}   # plain data still: graphs.decode checks it
  return NotPlain("a malformed value")


def read(folder: Path) -> dict[str, Any]:
  """The values one test recorded (name -> value; a name recorded twice keeps its last value), {} when none."""
  out: dict[str, Any] = {}
  budget = Budget()
  try: files = sorted(folder.glob("r*.json"), key=lambda p: int(p.stem[1:]) if p.stem[1:].isdigit() else -1)
  except OSError: return out
  for p in files[:MAX_FILES]:
    try:
      if p.is_symlink() or not p.is_file() or p.stat().st_size > MAX_FILE or not budget.take(p.stat().st_size):
        continue
      entry = json.loads(p.read_text())
    except (OSError, ValueError, RecursionError): continue
    if type(entry) is dict and type(entry.get("name")) is str:
      out[entry["name"]] = decode(entry.get("value"), p.with_suffix(""), budget)
  return out


class Recorded(dict):
  """What the judge of a test reads as `recorded`: a missing name fails the test with a message, not a KeyError."""

  def __missing__(self, name: str):
    raise AssertionError(f"{name}: no value was recorded (the code that computes it did not run to the end)")

"""The visible checks of the weekly assignments (assignments/week*.ipynb): one call per fact a task must get right.

A check that holds prints one `ok: <what>` line; one that does not raises AssertionError naming what was checked
and showing expected against got, which `make check WEEK=n` (tests/course/test_student_checks.py) reports as the task's
failure. A task that still raises NotImplementedError never reaches its checks: it is reported as not attempted.

  check("cost(1024)", cost(1024), {"flops": 268435456, ...})     # numbers, strings, tuples, dicts: equal
  check("blocked_attention, N = 1000", out, ref, atol=1e-5)       # arrays (or a tolerance): close, no NaN
  check_below("peak memory (bytes)", peak, 1000 * 1000 * 4)
  check_raises("checked(x, y), one argument short", lambda: checked(x, y), TypeError, says=("4", "3"))
  check_runs("checked(x, x, y, 8): three float32 arrays of 8 and n = 8", lambda: checked(x, x, y, 8))
  check_threads_agree("prefix_sum(100)", lambda threads: run_prefix_sum(x, threads))   # a THREAD loop that races

A list of tuples (best tiles, shapes) is compared item by item, each as a tuple: `[2]: expected (5, 4), got (4, 5)`.
"""
from __future__ import annotations
from typing import Any, Callable
import numpy as np


def _fail(name: str, why: str) -> None: raise AssertionError(f"{name}: {why}")


def _short(x: Any, width: int = 200) -> str:
  text = np.array2string(x, threshold=20, edgeitems=3) if isinstance(x, np.ndarray) else repr(x)
  return text if len(text) <= width else text[:width - 3] + "..."


NUMBERS = (int, float, bool, np.integer, np.floating, np.bool_)


def _is_array(x: Any) -> bool:
  if not isinstance(x, (np.ndarray, list)): return False
  if isinstance(x, list) and any(isinstance(v, tuple) for v in x): return False   # tuples: compared as tuples
  try: return np.asarray(x).dtype.kind in "biuf"
  except ValueError: return False   # a ragged list


def _compare_arrays(name: str, got: Any, expected: Any, rtol: float, atol: float) -> None:
  g, e = np.asarray(got), np.asarray(expected)
  if g.shape != e.shape: _fail(name, f"expected shape {e.shape}, got shape {g.shape}")
  if g.dtype.kind in "biu" and e.dtype.kind in "biu" and rtol == atol == 0:
    bad = g != e
  else:
    g, e = g.astype(np.float64), e.astype(np.float64)
    nan = np.isnan(g) & ~np.isnan(e)
    if nan.any():
      where = np.argwhere(nan)[0].tolist()
      _fail(name, f"NaN in {int(nan.sum())} of {g.size} elements (the first at {where}), expected finite values")
    bad = ~np.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
  if not bad.any(): return
  exact = g.dtype.kind in "biu" and rtol == atol == 0
  tol = "" if exact else f" (tolerance atol={atol:g}, rtol={rtol:g})"
  if bad.ndim == 0: _fail(name, f"expected {e.item()!r}, got {g.item()!r}{tol}")
  at = tuple(np.argwhere(bad)[0].tolist())
  err = "" if exact else f"; max abs error {np.nanmax(np.abs(g - e)):.3g}"
  _fail(name, f"{int(bad.sum())} of {bad.size} elements differ{err}{tol}; at {list(at)}: expected {e[at].item()!r}, "
              f"got {g[at].item()!r}\n  expected {_short(e)}\n  got      {_short(g)}")


def _compare(name: str, got: Any, expected: Any, rtol: float | None, atol: float | None) -> None:
  if isinstance(expected, dict):
    if not isinstance(got, dict): _fail(name, f"expected a dict {_short(expected)}, got {_short(got)}")
    if missing := [k for k in expected if k not in got]: _fail(name, f"no entry {missing[0]!r} (got {_short(got)})")
    for k, e in expected.items(): _compare(f"{name}[{k!r}]", got[k], e, rtol, atol)
    return
  tolerant = rtol is not None or atol is not None
  if isinstance(expected, list) and any(isinstance(v, tuple) for v in expected):
    if not isinstance(got, (list, tuple)) or len(got) != len(expected):
      _fail(name, f"expected a list of {len(expected)} items {_short(expected)}, got {_short(got)}")
    for k, (g, e) in enumerate(zip(got, expected)): _compare(f"{name}[{k}]", g, e, rtol, atol)
    return
  if (_is_array(expected) and _is_array(got)) or isinstance(got, np.ndarray) or \
      (tolerant and not isinstance(expected, (tuple, str))):
    _compare_arrays(name, got, expected, rtol or 0.0, atol or 0.0)
  elif isinstance(expected, tuple) and tolerant:
    if not isinstance(got, tuple) or len(got) != len(expected):
      _fail(name, f"expected {_short(expected)}, got {_short(got)}")
    for k, (g, e) in enumerate(zip(got, expected)): _compare(f"{name}[{k}]", g, e, rtol, atol)
  elif not (type(got) is type(expected) or (isinstance(got, NUMBERS) and isinstance(expected, NUMBERS))) \
      or got != expected:
    _fail(name, f"expected {_short(expected)}, got {_short(got)}")


def check(name: str, got: Any, expected: Any, rtol: float | None = None, atol: float | None = None) -> None:
  """Assert that got is expected: equal, or (arrays, or any tolerance given) close to rtol/atol with no NaN where
  expected has none; dicts entry by entry. Prints `ok: name`."""
  _compare(name, got, expected, rtol, atol)
  print(f"ok: {name}")


def check_below(name: str, got: float, limit: float) -> None:
  """Assert that got < limit. Prints `ok: name`."""
  if not got < limit: _fail(name, f"expected below {limit:,}, got {got:,}")
  print(f"ok: {name}")


def check_raises(name: str, fn: Callable[[], Any], error: type[BaseException], says: tuple[str, ...] = ()) -> None:
  """Assert that fn() raises `error` with every string of `says` in its message. Prints `ok: name`."""
  want = error.__name__ + (f" whose message contains {', '.join(map(repr, says))}" if says else "")
  try: fn()
  except error as e:
    if missing := [s for s in says if s not in str(e)]:
      _fail(name, f"expected {want}, got {type(e).__name__}({str(e)!r}) without {missing[0]!r}")
  except NotImplementedError: raise   # a stub: the task is not attempted yet
  except Exception as e: _fail(name, f"expected {want}, got {type(e).__name__}({str(e)!r})")
  else: _fail(name, f"expected {want}, got no error")
  print(f"ok: {name}")


def check_runs(name: str, fn: Callable[[], Any]) -> Any:
  """Assert that fn() raises nothing, and return its value. Name the call and its arguments: an error it raises is
  then reported as that call's, not as a bare exception from somewhere in the cell. Prints `ok: name`."""
  try: value = fn()
  except NotImplementedError: raise   # a stub: the task is not attempted yet
  except Exception as e: error = e
  else:
    print(f"ok: {name}")
    return value
  _fail(name, f"expected no error, got {type(error).__name__}({str(error)!r})")


def check_threads_agree(name: str, run: Callable[[int], Any], threads: int = 8, runs: int = 3,
                        rtol: float = 1e-6, atol: float = 1e-6) -> None:
  """Assert that run(n), a kernel's output computed with n OpenMP threads (uopc's Program.threads), is the same on
  `threads` threads, `runs` times over, as on one thread. A THREAD loop whose threads share a variable (state placed
  outside the loop) or whose iterations depend on one another is a data race: its values change with the number of
  threads, or from run to run. More threads than cores are fine: the race needs only that they interleave. Prints
  `ok: name`."""
  one = np.asarray(run(1), dtype=np.float64)
  for k in range(runs):
    got = np.asarray(run(threads), dtype=np.float64)
    if got.shape != one.shape: _fail(name, f"expected shape {one.shape} on {threads} threads, got shape {got.shape}")
    bad = ~np.isclose(got, one, rtol=rtol, atol=atol, equal_nan=True)
    if bad.any():
      at = tuple(np.argwhere(bad)[0].tolist())
      _fail(name, f"a data race: on {threads} threads {int(bad.sum())} of {bad.size} values differ from one thread's "
                  f"(run {k + 1} of {runs}; at {list(at)}: expected {one[at].item()!r} as on one thread, got "
                  f"{got[at].item()!r}). "
                  f"A THREAD loop's iterations run at the same time: none may read what another writes (state "
                  f"placed outside the loop is shared by every thread; a loop whose step k needs step k - 1 must not "
                  f"be a THREAD loop)")
  print(f"ok: {name}")

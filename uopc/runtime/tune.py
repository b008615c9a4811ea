"""The tuner: pick a kernel's opts by timing candidates on this machine, and remember the winner (tinygrad's BEAM).

  with Context(BEAM=2): scaled_dot_product_attention(q, k, v)      # or BEAM=2 python train.py

Without BEAM a kernel gets the winner cached for its problem on this machine, or its heuristic opts. With BEAM=n
every candidate is compiled and timed once, the n fastest are timed again, more carefully, and the fastest of those
is cached on disk, keyed by the kernel, the problem, the CPU and the compiler (a winner on a Zen 5 says nothing about
a Zen 4). A search writes one line to stderr: the winner and its time from the second, careful timing (the time it
returns). On a terminal that line first counts the candidates, overwritten in place; elsewhere (a notebook, a log, a
pipe) only the result is written, so no carriage return is stored.
"""
from __future__ import annotations
import dataclasses
import hashlib
import json
import math
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Callable, Sequence, TypeVar
from uopc.helpers import ContextVar
from uopc.runtime.machine import target
from uopc.runtime.toolchain import cache_dir, compiler, compiler_version, machine_id

BEAM = ContextVar("BEAM", 0)   # > 0: search (keep the n fastest for a second round); 0: the cached or heuristic opts
Opts = TypeVar("Opts")


def tuned_path() -> Path: return cache_dir() / "tuned.json"


def machine_key() -> str:
  """The CPU, the compiler and the target it built for (UOPC_MARCH's flags, or -march=native) a timing belongs to."""
  t = target()
  level = f"\0{' '.join(t.flags)}" if t.march else ""   # this CPU's own keys stay what they were
  return hashlib.sha256(f"{machine_id()}\0{compiler_version(compiler())}{level}".encode()).hexdigest()[:16]


def entry_key(kernel: str, problem: tuple) -> str: return f"{kernel}|{problem!r}|{machine_key()}"


_warned: set[Path] = set()   # the damaged files already named in a warning (one warning per file and process)


def _read() -> dict:
  """The table in tuned.json: {} when there is none, or when it is damaged (not JSON, not a dict, nested too deeply
  for the parser): then tuning starts again, with one warning that names the file."""
  path = tuned_path()
  try: text = path.read_text()
  except FileNotFoundError: return {}
  except (OSError, ValueError) as e: return _damaged(path, e)   # unreadable, or not UTF-8
  try: table = json.loads(text)
  except (ValueError, RecursionError) as e: return _damaged(path, e)   # RecursionError: [[[[...]]]] 100000 deep
  return table if isinstance(table, dict) else _damaged(path, f"JSON {type(table).__name__}, not an object")


def _damaged(path: Path, why) -> dict:
  if path not in _warned:
    _warned.add(path)
    why = type(why).__name__ if isinstance(why, RecursionError) else str(why)[:200]
    warnings.warn(f"uopc: ignoring the damaged tuning cache {path} ({why}); the next BEAM search rewrites it",
                  RuntimeWarning, stacklevel=3)
  return {}


def _write(key: str, value: dict) -> None:
  """Read, add, write to a temporary file and rename: a reader never sees half a file."""
  table = _read() | {key: value}
  path = tuned_path()
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(f".tuned-{os.getpid()}.json")
  tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
  os.replace(tmp, path)


def as_dict(opts) -> dict:
  """opts as tuned.json holds them: through JSON and back, so a tuple field compares equal to the list it becomes."""
  return json.loads(json.dumps(dataclasses.asdict(opts)))


def choose(kernel: str, problem: tuple, candidates: Sequence[Opts], heuristic: Opts,
           timer: Callable[[Opts], Callable[[], object]], beam: int | None = None) -> Opts:
  """The opts `kernel` runs `problem` with. timer(opts) compiles the kernel with opts and returns a function that
  runs it once (on inputs of the problem's shape)."""
  beam = BEAM.value if beam is None else beam
  key = entry_key(kernel, problem)
  if beam <= 0:
    cached = _read().get(key)
    saved = cached.get("opts") if isinstance(cached, dict) else None
    for c in candidates:   # a cached winner that is no longer a candidate (the code changed) is ignored
      if saved is not None and as_dict(c) == saved: return c
    return heuristic
  best, seconds = search(kernel, problem, candidates, timer, beam, heuristic)
  _write(key, {"opts": as_dict(best), "seconds": seconds, "date": time.strftime("%Y-%m-%d")})
  return best


def search(kernel: str, problem: tuple, candidates: Sequence[Opts], timer: Callable[[Opts], Callable[[], object]],
           beam: int, heuristic: Opts | None = None) -> tuple[Opts, float]:
  """Time every candidate (best of 2, after a warm-up call), then the `beam` fastest and the heuristic again, in
  turns, best of 5 (drift on a shared machine then hits them alike); the fastest and its time."""
  if not candidates: raise ValueError(f"tune {kernel}: no candidate opts for {problem}")
  first: list[tuple[float, int]] = []
  for i, c in enumerate(candidates):
    fn = timer(c)
    fn()
    first.append((_time(fn, 2), i))
    _progress(f"tune {kernel} {problem}: {i + 1}/{len(candidates)} candidates timed, fastest so far "
              f"{min(first)[0] * 1e3:.3f} ms (first pass)")
  finalists = [candidates[i] for _, i in sorted(first)[:beam]]
  if heuristic is not None and heuristic not in finalists: finalists.append(heuristic)
  fns = [timer(c) for c in finalists]
  best = [math.inf] * len(fns)
  for _ in range(5):
    for k, fn in enumerate(fns): best[k] = min(best[k], _time(fn, 1))
  seconds, k = min((t, k) for k, t in enumerate(best))
  _progress(f"tune {kernel} {problem}: {len(candidates)} candidates, chose {finalists[k]} ({seconds * 1e3:.3f} ms)\n")
  return finalists[k], seconds


def _time(fn: Callable[[], object], reps: int) -> float:
  best = math.inf
  for _ in range(reps):
    t0 = time.perf_counter(); fn(); best = min(best, time.perf_counter() - t0)
  return best


def _progress(line: str) -> None:
  """Overwrite the line on stderr. A line ending in a newline is the result: written whole, newline and all. Where
  stderr is no terminal a carriage return overwrites nothing (a notebook stores every one), so only the result."""
  on_terminal = getattr(sys.stderr, "isatty", lambda: False)()
  if line.endswith("\n"): sys.stderr.write(("\r" if on_terminal else "") + line)
  elif on_terminal: sys.stderr.write("\r" + line[:160].ljust(100))
  sys.stderr.flush()

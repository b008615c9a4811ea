"""Each peer of a benchmark case timed in a Python process of its own, one process at a time.

Two OpenMP runtimes in one process (PyTorch's and the libgomp of uopc's kernels, beside OpenBLAS's threads) disturb
each other: a runtime's idle threads keep spinning after its call returns and steal the cores from the next peer.
So the parent here builds and times nothing. For each peer it runs a fresh Python (`worker()` below), a worker that
reads one request (JSON on stdin), builds the case's inputs from the same seed, builds only its own peer, times it
(best_of: at least reps calls and MIN_SECONDS of them, after a warm-up), checks its result against the float64
reference and prints one JSON line back; the parent waits for it to exit before it starts the next peer's worker, so
no two runtimes are ever alive at once.
"""
from __future__ import annotations
import importlib, json, math, os, subprocess, sys, time, traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable
import numpy as np
from uopc.bench.cases import Case, PeerError, check, inputs, peer_names, reference
from uopc.runtime.process import user_environ

DEFAULT_BUILD = "uopc.bench.cases:case_peers"   # "module:function" with case_peers' signature (case, arrays, only)
PACKAGE_ROOT = Path(__file__).resolve().parents[2]   # on the worker's path first: it runs this same uopc


@dataclass(frozen=True)
class Measurement:
  peer: str
  seconds: float   # best of reps or more (best_of), after the warm-up
  pid: int         # the worker's process id (never the parent's)


def warm_allocator() -> None:
  """Free one 31 MB block, as a long-running process has done many times. glibc's malloc then raises the size from
  which it maps each block afresh (its dynamic mmap threshold, at most 32 MB) to 31 MB, and serves the peers'
  temporaries from its heap. Without it a fresh process maps, faults in and unmaps every temporary of 128 KB or more
  on every call, and NumPy's attention, which makes several N x N temporaries a call, times slower in a worker than
  in a process that has run for a while."""
  block = np.empty(31 << 20, np.uint8)
  del block


MIN_SECONDS = 0.25   # a peer's timed calls fill at least this long: best of 5 calls of 1.4 ms is 7 ms of samples,
MAX_REPS = 1000      # which one burst of outside load spoils (NOTES 33); and a call of microseconds stops at this many


def best_of(f: Callable[[], object], reps: int, warmup: int, min_seconds: float = MIN_SECONDS) -> float:
  """Best seconds of back-to-back calls after `warmup` untimed ones: at least `reps` calls, and more while the timed
  calls have filled less than `min_seconds` (up to MAX_REPS). Alone in its process, a peer needs no settling between
  calls, and each call finds its own threads awake from the one before."""
  for _ in range(warmup): f()
  best, spent, n = math.inf, 0.0, 0
  while n < reps or (spent < min_seconds and n < MAX_REPS):
    t0 = time.perf_counter(); f(); dt = time.perf_counter() - t0
    best, spent, n = min(best, dt), spent + dt, n + 1
  return best


def split_builder(spec: str) -> tuple[str, str]:
  module, sep, name = spec.partition(":")
  if not sep or not module or not name: raise ValueError(f"a builder is 'module:function', got {spec!r}")
  return module, name


def load_builder(spec: str) -> Callable:
  module, name = split_builder(spec)
  return getattr(importlib.import_module(module), name)


def measure_here(case: Case, peer: str, reps: int, warmup: int = 1, build: str = DEFAULT_BUILD) -> Measurement:
  """The worker's job, in this process: build the inputs and the one peer, time it, check its first result."""
  warm_allocator()
  arrays = inputs(case)
  fns = load_builder(build)(case, arrays, {peer})
  if peer not in fns: raise PeerError(f"{case.kind} {case.name}: builder {build} made no peer {peer!r}")
  first = np.array(fns[peer]())   # a copy: some peers return a view of a buffer that each call overwrites
  seconds = best_of(fns[peer], reps, warmup)
  # the reference runs after the timing: its float64 matmuls wake OpenBLAS's threads, which would spin on into it
  check(case, peer, first, reference(case, arrays))
  return Measurement(peer, seconds, os.getpid())


def measure(case: Case, peer: str, reps: int, warmup: int = 1, build: str = DEFAULT_BUILD,
            timeout: float | None = None) -> Measurement:
  """Time one peer in a fresh Python process; returns after that process has exited. A wrong result, or a worker
  that fails or dies, raises PeerError naming the peer."""
  if reps < 1 or warmup < 0: raise ValueError(f"reps must be >= 1 and warmup >= 0, got reps={reps}, warmup={warmup}")
  split_builder(build)   # a malformed spec fails here, not in the worker
  request = json.dumps({"case": case.to_json(), "peer": peer, "reps": reps, "warmup": warmup, "build": build})
  path = os.pathsep.join([str(PACKAGE_ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
  # -c, not -m: uopc.bench imports this module, so `-m uopc.bench.isolated` would run it twice (runpy warns)
  r = subprocess.run([sys.executable, "-c", WORKER], input=request, capture_output=True, text=True,
                     env=user_environ(PYTHONPATH=path), timeout=timeout)
  sys.stderr.write(r.stderr)   # the worker's warnings, if any, are the caller's to see
  lines = r.stdout.strip().splitlines()
  try: reply = json.loads(lines[-1]) if lines else None
  except json.JSONDecodeError: reply = None
  if r.returncode != 0 or not isinstance(reply, dict):
    raise PeerError(f"{case.kind} {case.name}: the worker for peer {peer!r} exited with {r.returncode} and no reply"
                    f"\n{r.stderr.strip()[-2000:]}")
  if "error" in reply:
    if reply["peer_error"]: raise PeerError(reply["error"])
    raise PeerError(f"{case.kind} {case.name}: peer {peer!r} failed in its worker: {reply['error']}\n"
                    f"{reply['traceback']}")
  return Measurement(reply["peer"], reply["seconds"], reply["pid"])


def run_isolated(case: Case, reps: int, warmup: int = 1, build: str = DEFAULT_BUILD,
                 peers: list[str] | None = None) -> dict[str, Measurement]:
  """Every peer of the case (or those named), each timed in its own process, one after the other."""
  names = peer_names(case)
  if peers is not None:
    if build == DEFAULT_BUILD and (unknown := set(peers) - set(names)):
      raise ValueError(f"{case.kind} {case.name} has no peers {sorted(unknown)}: its peers are {names}")
    names = list(peers)
  return {name: measure(case, name, reps, warmup, build) for name in names}


WORKER = "from uopc.bench.isolated import worker; worker()"


def worker() -> None:
  """The worker process (WORKER): one request on stdin, one JSON line on stdout (a result or an error)."""
  request = json.loads(sys.stdin.read())
  try:
    m = measure_here(Case.from_json(request["case"]), request["peer"], request["reps"], request["warmup"],
                     request["build"])
    reply = {"peer": m.peer, "seconds": m.seconds, "pid": m.pid}
  except Exception as e:   # reported to the parent, which raises it with the case and the peer's name
    reply = {"error": str(e) if isinstance(e, PeerError) else f"{type(e).__name__}: {e}",
             "peer_error": isinstance(e, PeerError), "traceback": traceback.format_exc()}
  print(json.dumps(reply))


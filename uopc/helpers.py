"""Small helpers every module uses: environment switches (DEBUG, DEVICE), the OpenMP thread count, prod, a best-of-k
timer."""
from __future__ import annotations
import contextlib
import functools
import math
import operator
import os
import time
from typing import Any, Callable, Iterable


# what a switch's value may be spelled as, besides a number ("DEBUG=true"); empty or unset means the default
BOOL_WORDS = {"true": 1, "yes": 1, "on": 1, "false": 0, "no": 0, "off": 0}


def getenv(key: str, default: Any = 0) -> Any:
  """An environment variable, converted to the type of the default; a value that does not convert names itself."""
  value = os.environ.get(key, "").strip()
  if value == "": return default
  if isinstance(default, int) and value.lower() in BOOL_WORDS: return type(default)(BOOL_WORDS[value.lower()])
  try: return type(default)(value)
  except ValueError:
    raise ValueError(f"environment variable {key}={value!r} must be {type(default).__name__} like {default!r}"
                     f"{' or one of ' + '/'.join(BOOL_WORDS) if isinstance(default, int) else ''}") from None


def omp_threads() -> int:
  """The number of threads an OpenMP parallel loop starts with: the first entry of OMP_NUM_THREADS ("4,2" is a
  valid per-nesting-level list), or every core this process may run on."""
  first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
  if first.isdigit() and int(first) > 0: return int(first)
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class ContextVar:
  """A switch read once from the environment, that a `with Context(NAME=value):` block can override.

  The name is tinygrad's; unlike Python's contextvars.ContextVar it is one value for the whole process: a Context
  block in one thread changes it for every thread until the block ends. uopc's switches (DEBUG, DEVICE, TC, BEAM)
  are read once per realize into a frozen Options value, so a plan never sees a switch change half-way."""
  _registry: dict[str, ContextVar] = {}

  def __init__(self, key: str, default: int):
    self.key, self.value = key, getenv(key, default)
    ContextVar._registry[key] = self

  def __bool__(self): return bool(self.value)
  def __ge__(self, x): return self.value >= x
  def __gt__(self, x): return self.value > x
  def __lt__(self, x): return self.value < x
  def __le__(self, x): return self.value <= x
  def __eq__(self, x): return self.value == x
  def __hash__(self): return hash(self.key)
  def __repr__(self): return f"{self.key}={self.value}"


DEBUG = ContextVar("DEBUG", 0)
DEVICE = ContextVar("DEVICE", "CPU")   # where Tensors are realized unless they say otherwise (uopc.device)
TC = ContextVar("TC", 0)               # tensor cores for GPU matmuls (uopc.codegen.tc): 1 f16 inputs, 2 f32 as tf32
MARCH = ContextVar("UOPC_MARCH", "")   # the x86 level or CPU that CPU kernels are built for (uopc.runtime.machine)
JIT_GRAPH = ContextVar("JIT_GRAPH", 1)   # a captured step replayed as one program (uopc.jit); 0: kernel by kernel
JIT_INPLACE = ContextVar("JIT_INPLACE", 1)   # its assigned outputs written in place (uopc.render_step); 0: copied
# a step program links its kernels' own objects where the toolchain can (uopc.render_step.LINKED, NOTES 69); 0: it
# compiles their text itself, where a kernel's code was not always its own build's (NOTES 68)
STEP_OBJECTS = ContextVar("STEP_OBJECTS", 1)
# a plan that ran before runs as one program (uopc.plan_program): the same bits as kernel by kernel where the step
# links its kernels' objects (NOTES 69); 0: kernel by kernel
EAGER_GRAPH = ContextVar("EAGER_GRAPH", 1)


@contextlib.contextmanager
def Context(**kwargs):
  """with Context(DEBUG=2): ... -- set switches for a block, restore them after."""
  unknown = [k for k in kwargs if k not in ContextVar._registry]
  if unknown: raise KeyError(f"Context: unknown switch {unknown}, known are {sorted(ContextVar._registry)}")
  old = {k: ContextVar._registry[k].value for k in kwargs}
  try:
    for k, v in kwargs.items(): ContextVar._registry[k].value = v
    yield
  finally:
    for k, v in old.items(): ContextVar._registry[k].value = v


CACHES: dict[str, Any] = {}   # name -> a module's memo (anything with .clear()), see cache()


def cache(name: str, store: Any) -> Any:
  """Register `store` as the memo its module owns under `name` (compiled programs, chosen tiles, opened devices) and
  return it: anything with .clear(), or a function wrapped by functools.cache. A memo only saves work: clear_caches()
  may empty every one at any time and nothing changes but speed."""
  if name in CACHES: raise ValueError(f"cache {name!r} is registered twice")
  CACHES[name] = store
  return store


def clear_caches() -> None:
  """Empty every registered memo: what a test or a notebook calls to start cold (the compiled-kernel disk cache is
  uopc.runtime's and stays)."""
  for store in CACHES.values(): (store.clear if hasattr(store, "clear") else store.cache_clear)()


def prod(xs: Iterable[int]) -> int: return functools.reduce(operator.mul, xs, 1)


def best_of(fn: Callable[[], Any], k: int = 5, warmup: int = 1) -> float:
  """Seconds of the fastest of k calls, after `warmup` untimed calls (the first call pays compiles and page faults)."""
  for _ in range(warmup): fn()
  best = math.inf
  for _ in range(k):
    t0 = time.perf_counter(); fn(); best = min(best, time.perf_counter() - t0)
  return best

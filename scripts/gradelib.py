"""Checks for hidden tests: each raises AssertionError with a message that says what was wrong.

A hidden test that fails says which input, how far off (largest error and where, rows with NaN), what loop trips
it expected and found, or how much slower a kernel was: a student reads the message, not the test. The solution
notebooks load this file in a cell tagged `hidden-setup`, which the grader runs after the student's cells and before
the hidden tests (and which scripts/assignments.py drops with the hidden tests).
"""
from __future__ import annotations
import math
import re
import time
from typing import Any, Callable
import numpy as np


def _fmt(x: Any) -> str:
  return f"{x:.4g}" if isinstance(x, (float, np.floating)) else repr(x)


def _rows(idx: np.ndarray, limit: int = 8) -> str:
  rows = [int(r) for r in idx[:limit]]
  return f"{rows}{' ...' if len(idx) > limit else ''} ({len(idx)} in all)"


def expect_close(got: Any, want: Any, what: str, tol: float = 1e-4) -> None:
  """got matches want to tol (absolute and relative), with the same shape and no NaN where want has none."""
  want = np.asarray(want, np.float64)
  if got is None: raise AssertionError(f"{what}: returned None (expected an array of shape {want.shape})")
  try: got = np.asarray(got, np.float64)
  except (TypeError, ValueError) as e: raise AssertionError(f"{what}: not an array of numbers ({e})") from None
  if got.size == want.size and got.shape != want.shape and got.ndim <= 1: got = got.reshape(want.shape)
  if got.shape != want.shape: raise AssertionError(f"{what}: shape {got.shape}, expected {want.shape}")
  rows = lambda mask: np.unique(np.nonzero(mask)[0]) if mask.ndim else np.array([0] if mask else [])
  nan = np.isnan(got) & ~np.isnan(want)
  if nan.any():
    where = f" in rows {_rows(rows(nan))}" if got.ndim >= 2 else f" at {_rows(np.nonzero(nan.reshape(-1))[0])}"
    raise AssertionError(f"{what}: NaN{where} (expected finite values: an element never written, 0/0, or inf - inf?)")
  bad = ~np.isclose(got, want, rtol=tol, atol=tol, equal_nan=True)
  if bad.any():
    err = np.where(np.isnan(want), 0, np.abs(got - want))
    at = np.unravel_index(int(np.argmax(err)), err.shape) if err.ndim else ()
    where = f" at index {tuple(int(i) for i in at)}" if at else ""
    extra = f"; wrong rows {_rows(rows(bad))}" if got.ndim >= 2 else f"; {int(bad.sum())} of {bad.size} values wrong"
    e, w, g = float(err[at]), float(want[at]), float(got[at])
    digits = next((d for d in range(4, 18) if f"{w:.{d}g}" != f"{g:.{d}g}"), 17)   # enough to see the difference
    raise AssertionError(f"{what}: max abs error {e:.3g}{where} (expected {w:.{digits}g}, found {g:.{digits}g})"
                         f"{extra}; tolerance {tol:g}")


def expect_equal(got: Any, want: Any, what: str) -> None:
  """got == want (numbers, strings, tuples, lists; arrays compared element by element)."""
  if isinstance(want, np.ndarray) or isinstance(got, np.ndarray):
    g, w = np.asarray(got), np.asarray(want)
    if g.shape != w.shape: raise AssertionError(f"{what}: shape {g.shape}, expected {w.shape}")
    bad = np.nonzero((g != w).reshape(-1))[0]
    if len(bad):
      k = int(bad[0])
      raise AssertionError(f"{what}: {len(bad)} of {w.size} values differ; first at flat index {k}: expected "
                           f"{_fmt(w.reshape(-1)[k].item())}, found {_fmt(g.reshape(-1)[k].item())}")
    return
  if got != want: raise AssertionError(f"{what}: expected {want!r}, found {got!r}")


def expect_raises(exc: type, fn: Callable[[], Any], what: str, mentions: tuple[str, ...] = ()) -> None:
  """fn() raises exc, and the message mentions every string of `mentions`."""
  try: fn()
  except exc as e:
    missing = [m for m in mentions if m not in str(e)]
    if missing: raise AssertionError(f"{what}: raised {exc.__name__}({str(e)!r}), which does not mention "
                                     f"{', '.join(map(repr, missing))}") from None
    return
  except Exception as e:
    raise AssertionError(f"{what}: raised {type(e).__name__}({str(e)!r}), expected {exc.__name__}") from None
  raise AssertionError(f"{what}: raised nothing, expected {exc.__name__}")


LOOP = re.compile(r"for \(int (\w+) = 0; \1 < (\d+); \1\+\+\)")


def loop_nest(src: str) -> list[tuple[int, int]]:
  """(depth, trips) of every `for` loop of a C source, in order (depth 0: a loop in no other loop)."""
  out, depth = [], 0
  for line in src.splitlines():
    if m := LOOP.search(line): out.append((depth, int(m.group(2))))
    depth += line.count("{") - line.count("}")
  return [(d - 1, n) for d, n in out]   # the function's own braces are depth 1


def parallel_loops(src: str) -> int:
  return src.count("#pragma omp parallel for")


def expect_loops(src: str, want: list[tuple[int, int]], what: str) -> None:
  """The C's loops, as (depth, trips) in order, are exactly want."""
  got = loop_nest(src)
  if got != want:
    show = lambda ls: ", ".join(f"{n} trips at depth {d}" for d, n in ls) or "none"
    raise AssertionError(f"{what}: expected loops [{show(want)}], found [{show(got)}]")


def best_time(fn: Callable[[], Any], reps: int = 5) -> float:
  fn()
  best = math.inf
  for _ in range(reps):
    t0 = time.perf_counter(); fn(); best = min(best, time.perf_counter() - t0)
  return best


def expect_faster(fast: Callable[[], Any], slow: Callable[[], Any], ratio: float, what: str, reps: int = 7) -> float:
  """fast runs at least `ratio` times faster than slow (best of reps each, taking turns); returns the ratio."""
  fast(); slow()
  tf = ts = math.inf
  for _ in range(reps):
    t0 = time.perf_counter(); fast(); tf = min(tf, time.perf_counter() - t0)
    t0 = time.perf_counter(); slow(); ts = min(ts, time.perf_counter() - t0)
  if ts / tf < ratio:
    raise AssertionError(f"{what}: {ts / tf:.2f}x faster ({tf * 1e3:.2f} ms against {ts * 1e3:.2f} ms), expected at "
                         f"least {ratio:g}x")
  return ts / tf


# --- attention: the reference, and what a kernel computes with one of the usual mistakes -------------------------
def attention_ref(q, k, v, keep=None, scale: float | None = None) -> np.ndarray:
  """softmax(q k^T * scale) v in float64 (scale 1/sqrt(D) by default); keep (Nq, Nk) bool: the scores kept."""
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  s = q @ k.T * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
  if keep is not None: s = np.where(keep, s, -np.inf)
  p = np.exp(s - s.max(-1, keepdims=True))
  return (p / p.sum(-1, keepdims=True)) @ v


def _online(q, k, v, keep, rescale_o: bool = True, rescale_l: bool = True, normalize: bool = True) -> np.ndarray:
  """The online softmax key by key (every row at once), with the chosen rescales left out."""
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  s_all = q @ k.T / math.sqrt(q.shape[-1])
  if keep is not None: s_all = np.where(keep, s_all, -1e30)
  m, l, o = np.full(len(q), -np.inf), np.zeros(len(q)), np.zeros((len(q), v.shape[1]))
  with np.errstate(invalid="ignore", over="ignore"):
    for j in range(len(k)):
      s = s_all[:, j]
      m_new = np.maximum(m, s)
      corr, p = np.exp(m - m_new), np.exp(s - m_new)
      l = (l * corr if rescale_l else l) + p
      o = (o * corr[:, None] if rescale_o else o) + p[:, None] * v[j]
      m = m_new
    return o / l[:, None] if normalize else o


MISTAKES = {
  "o is never rescaled (o = o + p * v: the `* corr` of the output update is missing)":
    lambda q, k, v, keep: _online(q, k, v, keep, rescale_o=False),
  "l is never rescaled (l = l + p: the `* corr` of the sum is missing)":
    lambda q, k, v, keep: _online(q, k, v, keep, rescale_l=False),
  "o is not divided by l at the end": lambda q, k, v, keep: _online(q, k, v, keep, normalize=False),
  "the scores are not scaled by 1/sqrt(D)": lambda q, k, v, keep: attention_ref(q, k, v, keep, scale=1.0),
  "exp2 is applied to scores not multiplied by log2(e)":
    lambda q, k, v, keep: attention_ref(q, k, v, keep, scale=math.log(2) / math.sqrt(q.shape[-1])),
  "the mask is ignored": lambda q, k, v, keep: attention_ref(q, k, v) if keep is not None else None,
}


def expect_attention(got, q, k, v, what: str, keep=None, tol: float = 1e-4) -> None:
  """got is attention of q, k, v (with the mask keep); if not, say which usual mistake it matches, if any."""
  want = attention_ref(q, k, v, keep)
  try: expect_close(got, want, what, tol)
  except AssertionError as e:
    g = np.asarray(got, np.float64).reshape(want.shape) if np.size(got) == want.size else None
    for fault, fn in MISTAKES.items():
      alt = fn(q, k, v, keep) if g is not None else None
      if alt is not None and np.allclose(g, alt, rtol=10 * tol, atol=10 * tol):
        raise AssertionError(f"{e}. It is what a kernel computes when {fault}") from None
    raise


def weighted_count(src: str, pattern: str) -> int:
  """How many times `pattern` (a regex) is evaluated when a C source runs: each occurrence counted once per trip of
  the loops around it (loops with constant trips only)."""
  total, trips = 0, []   # the trips of the loops open at this line, and the brace depth each opened at
  depth, opened = 0, []
  for line in src.splitlines():
    m = LOOP.search(line)
    if m:
      trips.append(int(m.group(2))); opened.append(depth)
    else: total += len(re.findall(pattern, line)) * math.prod(trips)
    depth += line.count("{") - line.count("}")
    while opened and depth <= opened[-1]: opened.pop(); trips.pop()
  return total


# --- checks of what a probe recorded in the sandbox (scripts/grader/probe.py) --------------------------------------
def expect_raised(info: Any, exc: str, what: str, mentions: tuple[str, ...] = ()) -> None:
  """info (what a judge's `raises` saw, or what probe.raised recorded: the exception's class names and message) says
  exc was raised, with a message that mentions every string of `mentions`."""
  if isinstance(info, dict) and "error" in info and "raised" not in info:
    raise AssertionError(f"{what}: it could not be called ({info['error']})")
  if not isinstance(info, dict) or "raised" not in info: raise AssertionError(f"{what}: the call was not recorded")
  name, msg = info.get("raised"), str(info.get("message", ""))
  if name is None: raise AssertionError(f"{what}: raised nothing, expected {exc}")
  classes = info.get("classes") if isinstance(info.get("classes"), list) else [name]
  if exc not in classes: raise AssertionError(f"{what}: raised {name}({msg!r}), expected {exc}")
  missing = [m for m in mentions if m not in msg]
  if missing: raise AssertionError(f"{what}: raised {name}({msg!r}), which does not mention "
                                   f"{', '.join(map(repr, missing))}")


def expect_speedup(timing: dict, ratio: float, what: str) -> float:
  """timing (from time_kernels: the student's kernel and the grader's reference, best of reps each) shows the
  student's kernel at least `ratio` times faster than the reference; returns the ratio."""
  if "error" in timing: raise AssertionError(f"{what}: {timing['error']}")
  tm, tr = float(timing["student"]), float(timing["reference"])
  if not tr / tm >= ratio:
    raise AssertionError(f"{what}: {tr / tm:.2f}x faster ({tm * 1e3:.2f} ms against {tr * 1e3:.2f} ms), expected at "
                         f"least {ratio:g}x")
  return tr / tm


def expect_peak(measured: dict, bound: int, what: str, sizes: dict[str, int], inputs: str = "float32") -> None:
  """measured (from peak_memory: the peak of a fresh process's resident memory during one call, less what it held
  before) is at most `bound` bytes. The message gives the peak and the bound in bytes, the sizes named in `sizes`
  for scale, and the dtype of the output found when it differs from the inputs' (a float64 temporary is a dtype
  mistake, not a bigger array): nothing that was not measured."""
  peak = measured.get("peak") if isinstance(measured, dict) else None
  if type(peak) is not int: raise AssertionError(f"{what}: the peak memory was not measured ({measured!r:.80})")
  if peak <= bound: return
  scale = "; ".join(f"{name}: {n:,} bytes" for name, n in sizes.items())
  dtype = measured.get("dtype")
  note = ""
  if dtype and dtype != inputs:
    times = np.dtype(dtype).itemsize / np.dtype(inputs).itemsize
    note = (f"; its output is {dtype} for {inputs} inputs: {dtype} temporaries take {times:g}x the bytes (a NumPy "
            f"float64 scalar such as np.sqrt(D) makes them float64; math.sqrt(D) keeps {inputs})")
  raise AssertionError(f"{what}: peak memory {peak:,} bytes, above the bound of {bound:,} bytes ({scale}){note}")


def _loops(src: str) -> list[tuple[int, str]]:
  """(where it starts, its body) of every `for` loop of a C source: the braces' contents, or the one statement."""
  out = []
  for m in re.finditer(r"\bfor\s*\(", src):
    depth, k = 1, m.end()
    while k < len(src) and depth:   # the header's parentheses
      depth += {"(": 1, ")": -1}.get(src[k], 0)
      k += 1
    rest = src[k:].lstrip()
    if rest.startswith("{"):
      start, depth, j = len(src) - len(rest), 0, len(src) - len(rest)
      while j < len(src):
        depth += {"{": 1, "}": -1}.get(src[j], 0)
        j += 1
        if depth == 0: break
      out.append((m.start(), src[start + 1:j - 1]))
    else: out.append((m.start(), rest.split(";", 1)[0]))
  return out


def expect_barriers(src: str, what: str) -> None:
  """A work-group reduction in local memory has a barrier wherever one work-item reads a slot another stored: after
  the stores of stage 1 (before the tree's first read) and in the tree's loop after each step. Without one the kernel
  has a race: a read may see the slot before or after its owner wrote it, so a run that happens to give the right
  values (PoCL runs the work-items of a group in order) proves nothing."""
  names = re.findall(r"__local\s+\w+\s+(\w+)\s*\[", src)
  if not names: raise AssertionError(f"{what}: no __local array: the tree must combine the work-items' values in "
                                     f"local memory")
  other = re.compile(rf"\b({'|'.join(map(re.escape, names))})\s*\[[^\]]*[+-][^\]]*\]")   # another item's slot
  tree = [(at, body) for at, body in _loops(src) if other.search(body)]
  if not tree: return
  at, body = tree[0]
  if "barrier(" not in src[:at]:
    raise AssertionError(f"{what}: no barrier(CLK_LOCAL_MEM_FENCE) between the stores of stage 1 and the tree: a "
                         f"race (a work-item may read a slot before its owner stored it), whatever values a run gives")
  if "barrier(" not in body:
    raise AssertionError(f"{what}: the tree's loop reads another work-item's slot ({other.search(body).group(0)}) "
                         f"with no barrier(CLK_LOCAL_MEM_FENCE) inside the loop: a race (the read may come before or "
                         f"after the step that stores it), whatever values a run gives")


def text(value: Any, what: str) -> str:
  """value, which a probe recorded as generated C or other text; an AssertionError if it is not a string."""
  if type(value) is not str: raise AssertionError(f"{what}: expected the C source as a string, found {value!r:.80}")
  return value


def graph(value: Any, what: str) -> Any:
  """The loop program a probe recorded (a UOp graph, as data: graphs.py), built again by the grader's uopc; an
  AssertionError if it is not one. A judge reads structure from it and renders it itself, never with the notebook's
  render_c."""
  import graphs   # scripts/grader: on the path in the grader and in a solution's hidden-setup
  return graphs.decode(value, what)


def render(value: Any, name: str, what: str) -> str:
  """The C of the recorded loop program `value` (a graph, or a UOp already built), by the grader's render_c."""
  from uopc.render_c import render_c
  prg = value if type(value).__name__ == "UOp" else graph(value, what)
  try: return str(render_c(prg, name))
  except Exception as e: raise AssertionError(f"{what}: uopc cannot render it ({type(e).__name__}: {e})") from None


def certain_races(value: Any, what: str) -> list[str]:
  """The races uopc.races finds for certain in the recorded loop program (its THREAD loops' indices): the verdict
  of a race test, on any machine, whatever a run on threads gives."""
  from uopc.races import thread_races
  prg = value if type(value).__name__ == "UOp" else graph(value, what)
  return [str(r) for r in thread_races(prg) if r.certain]


def naive_gemm_c(M: int, N: int, K: int) -> str:
  """The grader's reference kernel for GEMM speed tests: C = A @ B, rows in parallel, then columns, then k (what the
  week-3 loop program gemm_naive renders to)."""
  return f"""void gemm(float* restrict data0, float* restrict data1, float* restrict data2) {{
  #pragma omp parallel for
  for (int ridx0 = 0; ridx0 < {M}; ridx0++) {{
    for (int ridx1 = 0; ridx1 < {N}; ridx1++) {{
      float acc0;
      acc0 = 0.0f;
      for (int ridx2 = 0; ridx2 < {K}; ridx2++) {{
        float val1 = acc0;
        float val2 = data0[((ridx0*{K})+ridx2)];
        float val3 = data1[((ridx2*{N})+ridx1)];
        acc0 = (val1+(val2*val3));
      }}
      float val4 = acc0;
      data2[((ridx0*{N})+ridx1)] = val4;
    }}
  }}
}}"""

# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Week 1 assignment: why compile, and C from Python
#
# The exercises of Chapter 1 (why compile?) and Chapter 2 (from C to Python). Each exercise has
# - a **task cell** (it starts with `# TASK: <name>`): in the student version the solution is replaced by
#   `raise NotImplementedError("<name>")`. Replace that line with your code; keep the function names and
#   signatures, the grader calls them;
# - a **worked example** before it, solved, on a neighbouring problem;
# - **visible checks** right after it (`check(...)` from `uopc.checks`): each prints `ok: <what>`, or stops
#   with an AssertionError naming what is wrong, expected against got; `make check WEEK=<n>` runs them task by task;
# - **hidden tests** the grader runs after your whole notebook (`make grade NB=<your notebook>`), which score the
#   points below. A *structure* or *speed* point counts only once the task's values are right.
#
# | exercise | task name | points |
# |---|---|---|
# | 1.1 | cost table | 2 |
# | 1.3 | blocked attention | 3 (values 2, structure 1) |
# | 2.3 | check the arguments | 2 |
# | 2.5 | a fused kernel | 3 (values 2, speed 1) |
#
# The whole notebook runs in well under a minute on two cores. Timings are best-of-k after a warm-up; the
# notebook prints ratios measured in one run and never asserts a time.

# %% tags=["nbval-ignore-output"]
import datetime
import os
import platform
import re
import subprocess

cpu = re.search(r"^model name\s*:\s*(.*)$", open("/proc/cpuinfo").read(), re.M)
print(f"CPU:      {cpu.group(1) if cpu else platform.machine()}, {os.cpu_count()} cores")
print(f"compiler: {subprocess.run(['cc', '--version'], capture_output=True, text=True).stdout.splitlines()[0]}")
print(f"date:     {datetime.date.today()}")

# %% tags=["hidden-setup"]
# the grader's side of the hidden tests (scripts/grader/solution_setup.py): record, raised and seeded for the probes;
# recorded, gradelib's checks and time_kernels for the judges. Grading splits each hidden test at `# JUDGE`: the probe
# runs in the sandbox after the student's cells, the judge in the grader's own process on the values it recorded.
# Placed before the setup cell: in a solution run under nbval, whose kernel keeps no input history, `raises` finds the
# notebook's classes (MiniProgram) among the cells run after this one.
import sys as _sys
from pathlib import Path as _Path
import uopc as _uopc
_sys.path.insert(0, str(_Path(_uopc.__file__).resolve().parents[1] / "scripts" / "grader"))
from solution_setup import gradelib, raised, record, recorded, seeded, time_kernels  # noqa: F401
from solution_setup import launch_cl, peak_memory, run_c  # noqa: F401
from solution_setup import raises  # noqa: F401


# %% [markdown]
# ## Setup
#
# Chapter 1's attention in NumPy (`attention`, float64 for the reference) and Chapter 2's `MiniProgram`: C source
# -> `cc` -> shared object -> cffi, called with NumPy arrays (by pointer) and numbers (by value).

# %%
import math
import tempfile
import time
import tracemalloc
import cffi
import numpy as np
from uopc.checks import check, check_below, check_raises, check_runs


def attention(q, k, v):
  """softmax(q k^T / sqrt(D)) v for (N, D) arrays."""
  s = q @ k.T * (1 / math.sqrt(q.shape[-1]))          # (N, N) scores S
  p = np.exp(s - s.max(axis=-1, keepdims=True))       # (N, N) unnormalized probabilities
  return (p / p.sum(axis=-1, keepdims=True)) @ v      # (N, D)


def qkv(N: int, D: int = 64, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  rng = np.random.default_rng(seed)
  return tuple(rng.standard_normal((N, D), dtype=np.float32) for _ in range(3))


def reference(q, k, v) -> np.ndarray: return attention(*(x.astype(np.float64) for x in (q, k, v)))


class MiniProgram:
  """C source -> cc -> shared object -> cffi, called with NumPy arrays (by pointer) and numbers (by value)."""

  def __init__(self, src: str, name: str):
    self.tmp = tempfile.TemporaryDirectory()          # removed when the MiniProgram is
    c_path, so_path = os.path.join(self.tmp.name, f"{name}.c"), os.path.join(self.tmp.name, f"{name}.so")
    with open(c_path, "w") as f: f.write(src)
    r = subprocess.run(["cc", "-O3", "-shared", "-fPIC", "-o", so_path, c_path], capture_output=True, text=True)
    if r.returncode != 0: raise RuntimeError(f"cc failed:\n{r.stderr}")
    self.ffi = cffi.FFI()
    self.ffi.cdef(src[:src.index("{")].strip() + ";")   # the function's header is its declaration
    self.lib = self.ffi.dlopen(so_path)                 # keep a reference: the code lives in this object
    self.fn = getattr(self.lib, name)

  def __call__(self, *args):
    params = self.ffi.typeof(self.fn).args              # the C parameter types, from the declaration
    self.fn(*[self.ffi.from_buffer(t, a) if t.kind == "pointer" else a for t, a in zip(params, args)])


def best_time(fn, reps: int = 5) -> float:
  fn()
  best = math.inf
  for _ in range(reps):
    t0 = time.perf_counter(); fn(); best = min(best, time.perf_counter() - t0)
  return best

# %% [markdown]
# ## Exercise 1.1: cost table
#
# **Worked example.** Chapter 1's cost of attention for float32 and D = 64: S and P are N x N each, QK^T and PV
# make 2D FLOPs per score each.

# %%
def cost_f32(N: int) -> dict:
  sp_bytes = 2 * 4 * N * N                  # S and P, float32
  io_bytes = 4 * 4 * N * 64                 # read Q, K, V; write out
  flops = 4 * N * N * 64                    # QK^T and PV, 2D FLOPs per dot product
  return dict(sp_bytes=sp_bytes, io_bytes=io_bytes, flops=flops,
              ai_unfused=flops / (2 * sp_bytes + io_bytes), ai_fused=flops / io_bytes)


print(cost_f32(1024))

# %% [markdown]
# **Your task.** Write `cost(N, D, itemsize)` for any head dimension D and element size (4 bytes for float32, 2
# for float16), with the same five entries: `sp_bytes` (S and P), `io_bytes` (Q, K, V read, the output written),
# `flops`, `ai_unfused` (S and P each written once and read once) and `ai_fused` (S and P never leave the chip).

# %%
# TASK: cost table
def cost(N: int, D: int = 64, itemsize: int = 4) -> dict:
  """Bytes, FLOPs and arithmetic intensities of attention at sequence length N, head dimension D."""
  ### BEGIN SOLUTION
  sp_bytes = 2 * itemsize * N * N
  io_bytes = 4 * itemsize * N * D
  flops = 4 * N * N * D
  return dict(sp_bytes=sp_bytes, io_bytes=io_bytes, flops=flops,
              ai_unfused=flops / (2 * sp_bytes + io_bytes), ai_fused=flops / io_bytes)
  ### END SOLUTION


# %%
print(f"{'N':>6} {'D':>4} {'S+P (MiB)':>10} {'GFLOP':>7} {'FLOP/byte, S,P in memory':>25} {'FLOP/byte, fused':>17}")
for n, d in ((4096, 64), (4096, 128)):
  c = cost(n, d)
  print(f"{n:>6} {d:>4} {c['sp_bytes'] / 2**20:>10.0f} {c['flops'] / 1e9:>7.1f} {c['ai_unfused']:>25.1f}"
        f" {c['ai_fused']:>17.0f}")
check("cost(1024) against the worked example's cost_f32(1024)", cost(1024), cost_f32(1024))
check("cost(4096, 128)['ai_unfused'] (FLOP/byte)", cost(4096, 128)["ai_unfused"], 31.0, atol=0.05)
check("cost(4096, 128)['ai_fused'] (FLOP/byte)", cost(4096, 128)["ai_fused"], 1024.0, rtol=1e-12)
check("cost(1024, 64, itemsize=2)['sp_bytes'] (float16: 4 MiB)", cost(1024, 64, 2)["sp_bytes"], 4 * 2**20)

# %% [markdown]
# Expected: doubling D doubles the FLOPs and the bytes of Q, K, V and the output, but not S and P. So the fused
# intensity stays N/4 = 1024 FLOP/byte, while the intensity with S and P in memory nearly doubles (15.8 to 31.0).

# %% tags=["hidden-test"]
# POINTS: cost table 2
### BEGIN HIDDEN TESTS
_cases = [(1024, 64, 4), (4096, 128, 4), (2048, 64, 2), (1000, 96, 2), (int(seeded(1).integers(8, 5000)), 32, 2)]
for _n, _d, _size in _cases: record(f"cost({_n}, {_d}, {_size})", cost(_n, _d, _size))
# JUDGE
for _n, _d, _size in [(1024, 64, 4), (4096, 128, 4), (2048, 64, 2), (1000, 96, 2),
                      (int(seeded(1).integers(8, 5000)), 32, 2)]:
  _got = recorded[f"cost({_n}, {_d}, {_size})"]
  _want = {"sp_bytes": 2 * _size * _n * _n, "io_bytes": 4 * _size * _n * _d, "flops": 4 * _n * _n * _d}
  _want["ai_unfused"] = _want["flops"] / (2 * _want["sp_bytes"] + _want["io_bytes"])
  _want["ai_fused"] = _want["flops"] / _want["io_bytes"]
  for _key, _w in _want.items():
    assert isinstance(_got, dict) and _key in _got, f"cost({_n}, {_d}, {_size}) has no entry {_key!r}"
    gradelib.expect_close(_got[_key], _w, f"cost({_n}, D={_d}, itemsize={_size})[{_key!r}]", tol=1e-9)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 1.3: blocked attention
#
# **Worked example.** A row-wise softmax computed a block of rows at a time: each block's rows are complete, so
# the block is normalized on its own, and only a (block, N) piece exists at once.

# %%
def softmax_rows_blocked(s: np.ndarray, block: int = 128) -> np.ndarray:
  out = np.empty_like(s)
  for i0 in range(0, len(s), block):
    rows = s[i0:i0 + block]                            # (block, N); the last block may be shorter
    p = np.exp(rows - rows.max(axis=-1, keepdims=True))
    out[i0:i0 + block] = p / p.sum(axis=-1, keepdims=True)
  return out


s = np.random.default_rng(1).standard_normal((300, 50))
e = np.exp(s - s.max(-1, keepdims=True))
print("blocked softmax matches:", np.allclose(softmax_rows_blocked(s, 128), e / e.sum(-1, keepdims=True)))

# %% [markdown]
# **Your task.** `blocked_attention(q, k, v, block)`: attention a block of `block` query rows at a time, so that
# no N x N array ever exists (the largest temporary is (block, N)). N need not be a multiple of `block`. Scores can
# be large (the checks below use some near 1000, where `exp` overflows float64): subtract each row's maximum, as the
# worked example does. The grader measures the peak memory of one call at N = 4096 in a fresh process that has only
# your notebook's imports, functions and classes (no other statement of a cell runs there), so keep
# `blocked_attention` self-contained; its bound is half of one N x N float32 array (32 MiB).

# %%
# TASK: blocked attention
def blocked_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, block: int = 128) -> np.ndarray:
  """softmax(q k^T / sqrt(D)) v, computed `block` query rows at a time."""
  ### BEGIN SOLUTION
  out = np.empty((len(q), v.shape[1]), np.result_type(q, v))
  scale = 1 / math.sqrt(q.shape[-1])
  for i0 in range(0, len(q), block):
    s = q[i0:i0 + block] @ k.T * scale                # (block, N): the only large temporary
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    out[i0:i0 + block] = (p / p.sum(axis=-1, keepdims=True)) @ v
  return out
  ### END SOLUTION


# %%
def peak_bytes(fn) -> int:
  """The largest amount of memory fn() had allocated at once (NumPy arrays included), in bytes."""
  tracemalloc.start()
  try:
    fn()
    return tracemalloc.get_traced_memory()[1]
  finally: tracemalloc.stop()


q, k, v = qkv(1000)
check("blocked_attention(q, k, v), N = 1000, against the float64 reference", blocked_attention(q, k, v),
      reference(q, k, v), atol=1e-5)
check("blocked_attention(q, k, v, block=64), N = 70", blocked_attention(*qkv(70)[:3], block=64), reference(*qkv(70)),
      atol=1e-5)
big = (30 * q[:200], k[:200], v[:200])   # scores up to about 1000: exp overflows unless the row max is subtracted
check("blocked_attention with scores up to about 1000 (N = 200, block = 64)", blocked_attention(*big, block=64),
      reference(*big), atol=1e-3)   # float32 scores of 1000 carry errors of 1e-4
q4096 = qkv(4096)   # the grader's size: its bound is half of one N x N float32 array
check_below("peak memory of blocked_attention, N = 4096 (bytes; half of one N x N float32 array is 33,554,432)",
            peak_bytes(lambda: blocked_attention(*q4096)), 4096 * 4096 * 4 // 2)

# %% tags=["nbval-ignore-output"]
print(f"peak memory, N = 1000: blocked {peak_bytes(lambda: blocked_attention(q, k, v)) / 2**20:.1f} MiB, "
      f"unblocked {peak_bytes(lambda: attention(q, k, v)) / 2**20:.1f} MiB")

# %% [markdown]
# Expected: four `ok` lines, and a peak of a few MiB blocked against about 12 MiB unblocked (three N x N float32 arrays
# live at once: S, its exponential, and P).

# %% tags=["hidden-test"]
# POINTS: blocked attention 2
### BEGIN HIDDEN TESTS
# the last case: q scaled so that the largest score is 1000, past float64's exp limit (about 709.8): exp overflows in
# float32 and float64 alike without the max subtraction (a float64 scale such as np.sqrt(D) saves nothing)
def _case(n, d, top):
  r = seeded(n)
  q, k, v = (r.standard_normal((n, d), dtype=np.float32) for _ in range(3))
  if top: q = q * np.float32(top * np.sqrt(d) / (q.astype(np.float64) @ k.T.astype(np.float64)).max())
  return q, k, v
for _n, _d, _block, _top in ((1000, 64, 128, 0), (256, 32, 64, 0), (70, 16, 32, 0), (5, 8, 128, 0),
                             (300, 32, 64, 1000)):
  record(f"N={_n}", blocked_attention(*_case(_n, _d, _top), _block))
# JUDGE
def _case(n, d, top):
  r = seeded(n)
  q, k, v = (r.standard_normal((n, d), dtype=np.float32) for _ in range(3))
  if top: q = q * np.float32(top * np.sqrt(d) / (q.astype(np.float64) @ k.T.astype(np.float64)).max())
  return q, k, v
for _n, _d, _block, _top in ((1000, 64, 128, 0), (256, 32, 64, 0), (70, 16, 32, 0), (5, 8, 128, 0),
                             (300, 32, 64, 1000)):
  _q, _k, _v = _case(_n, _d, _top)
  _what = f"blocked_attention(N={_n}, D={_d}, block={_block})"
  if _top:
    _s = _q.astype(np.float64) @ _k.T.astype(np.float64) / math.sqrt(_d)
    _what += (f" with scores up to {_s.max():.0f} (exp overflows there, in float64 too, unless each row's maximum is "
              f"subtracted)")
  # float32 scores of 1000 carry errors of 1e-4: a looser tolerance there, which NaN never meets
  gradelib.expect_close(recorded[f"N={_n}"], gradelib.attention_ref(_q, _k, _v), _what, tol=1e-3 if _top else 1e-5)
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: blocked attention 1 structure
### BEGIN HIDDEN TESTS
record("defined", callable(blocked_attention))
# JUDGE
# the peak memory of one call, measured outside the notebook: a fresh process runs the notebook's imports, functions
# and classes, then the call; its parent reads the peak of its resident memory from the kernel (outside.py)
_n, _block = 4096, 128
_r = seeded(3)
_q, _k, _v = (_r.standard_normal((_n, 64), dtype=np.float32) for _ in range(3))
_m = peak_memory("blocked_attention", [_q, _k, _v], {"block": _block})
_what = f"blocked_attention(N={_n}, D=64, block={_block}), run on its own"
assert "error" not in _m, (f"{_what} (a fresh process with the notebook's imports, functions and classes only): "
                           f"{_m.get('error')}")
gradelib.expect_close(_m.get("output"), gradelib.attention_ref(_q, _k, _v), _what, tol=1e-4)
gradelib.expect_peak(_m, _n * _n * 4 // 2, _what, {
  "one N x N float32 array": _n * _n * 4, f"one ({_block}, N) float32 array": _block * _n * 4,
  f"one ({_block}, N) float64 array": _block * _n * 8}, inputs="float32")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 2.3: check the arguments
#
# **Worked example.** The C types of a kernel's parameters, as cffi reads them from its declaration:

# %%
ADD = """void add(const float* a, const float* b, float* out, int n) {
  for (int i = 0; i < n; i++) out[i] = a[i] + b[i];
}"""
add = MiniProgram(ADD, "add")
for t in add.ffi.typeof(add.fn).args:
  print(f"{t.cname:14s} kind {t.kind:9s}" + (f" points to {t.item.cname}" if t.kind == "pointer" else ""))

# %% [markdown]
# `MiniProgram` passes whatever it is given: a float64 array is read as twice as many garbage floats, a
# transposed view as the wrong elements. **Your task.** `CheckedProgram`, a `MiniProgram` whose call raises
# `TypeError` before calling C when
# - the number of arguments differs from the number of parameters (the message gives both numbers);
# - a pointer parameter gets something that is not a NumPy array, or an array whose dtype does not match the C type
#   (`float` is float32, `double` float64, `int` int32), or that is not C-contiguous. The message says
#   `argument <k>` (counted from 0) and what was wrong: the dtype it got, or `not contiguous`.

# %%
# TASK: check the arguments
C_TYPES = {"float": np.float32, "double": np.float64, "int": np.int32}


class CheckedProgram(MiniProgram):
  def __call__(self, *args):
    ### BEGIN SOLUTION
    params = self.ffi.typeof(self.fn).args
    if len(args) != len(params):
      raise TypeError(f"{len(params)} arguments expected, {len(args)} given")
    for k, (t, a) in enumerate(zip(params, args)):
      if t.kind != "pointer": continue
      want = np.dtype(C_TYPES[t.item.cname])
      if not isinstance(a, np.ndarray): raise TypeError(f"argument {k}: a {type(a).__name__}, expected a {want} array")
      if a.dtype != want: raise TypeError(f"argument {k}: dtype {a.dtype}, expected {want} ({t.cname})")
      if not a.flags.c_contiguous: raise TypeError(f"argument {k}: not contiguous (use np.ascontiguousarray)")
    super().__call__(*args)
    ### END SOLUTION


# %%
checked = CheckedProgram(ADD, "add")
x, y = np.ones(8, np.float32), np.zeros(8, np.float32)
# a call that must succeed is named with its arguments: an error it raises says which call raised it
check_runs("checked(x, x, y, 8), the right arguments for add(const float* a, const float* b, float* out, int n): "
           "three C-contiguous float32 arrays of 8 and the int 8", lambda: checked(x, x, y, 8))
check("checked(x, x, y, 8) with right arguments: y", y, np.full(8, 2, np.float32))
for what, bad, says in (("3 arguments for 4 parameters", (x, x, y), ("4", "3")),
                        ("a float64 array as argument 1", (x, x.astype(np.float64), y, 8), ("argument 1", "float64")),
                        ("a strided view as argument 2", (x, x, np.zeros((8, 2), np.float32)[:, 0], 8),
                         ("argument 2", "contiguous"))):
  check_raises(f"checked(...) with {what}", lambda: checked(*bad), TypeError, says)

# %% [markdown]
# Expected: five `ok` lines: the right call raises nothing and adds, and each wrong call raises a TypeError that says
# what is wrong (the argument count, `argument 1` with float64, `argument 2` not contiguous).

# %% tags=["hidden-test"]
# POINTS: check the arguments 2
# SHORTCUTS: uopc.runtime.program.Program, uopc.runtime.program.signature_from_c, uopc.runtime.program.args_of
### BEGIN HIDDEN TESTS
_prg = CheckedProgram("""void axpy(float* y, const double* x, int n, const int* idx) {
  for (int i = 0; i < n; i++) y[idx[i]] += (float)x[i];
}""", "axpy")
_y, _x, _idx = np.zeros(4, np.float32), seeded(2).standard_normal(4), seeded(3).permutation(4).astype(np.int32)
record("right call", raised(lambda: _prg(_y, _x, 4, _idx)))
record("y", _y)
# JUDGE
_right = recorded["right call"]
if not isinstance(_right, dict) or _right.get("raised") is not None:   # named: a bare TypeError says no call
  _got = f"{_right.get('raised')}({_right.get('message')!r})" if isinstance(_right, dict) else repr(_right)[:80]
  raise AssertionError(f"CheckedProgram(axpy)(y, x, 4, idx), the right arguments for axpy(float* y, const double* x, "
                       f"int n, const int* idx): float32 y, float64 x, the int 4, int32 idx, each C-contiguous: "
                       f"expected no error, got {_got}")
_x, _idx, _want = seeded(2).standard_normal(4), seeded(3).permutation(4), np.zeros(4, np.float32)
_want[_idx] += _x.astype(np.float32)
gradelib.expect_close(recorded["y"], _want, "CheckedProgram(axpy) on right arguments: y", tol=1e-6)
# each wrong call in a fresh process on the notebook's definitions: what it raises is seen there, not recorded by the
# notebook's process (_judge_inputs: y, x, idx and a strided y, made here)
_axpy = ('CheckedProgram("void axpy(float* y, const double* x, int n, const int* idx) {\\n'
         '  for (int i = 0; i < n; i++) y[idx[i]] += (float)x[i];\\n}", "axpy")')
_y, _x, _idx = np.zeros(4, np.float32), seeded(2).standard_normal(4), seeded(3).permutation(4).astype(np.int32)
_ins = [_y, _x, _idx, _x.astype(np.float32), _idx.astype(np.int64), np.zeros((4, 2), np.float32)]
_y, _x, _idx, _x32, _idx64, _wide = (f"_judge_inputs[{_k}]" for _k in range(6))
for _args, _exc, _what, _says in (
    (f"{_y}, {_x}, 4", "TypeError", "axpy called with 3 of its 4 arguments", ("4", "3")),
    (f"{_y}, {_x32}, 4, {_idx}", "TypeError", "axpy with a float32 array for `const double* x`",
     ("argument 1", "float32")),
    (f"{_y}, {_x}, 4, {_idx64}", "TypeError", "axpy with an int64 array for `const int* idx`",
     ("argument 3", "int64")),
    (f"{_wide}[:, 1], {_x}, 4, {_idx}", "TypeError", "axpy with a strided view for `float* y`",
     ("argument 0", "contiguous")),
    (f"[0.0] * 4, {_x}, 4, {_idx}", "TypeError", "axpy with a list for `float* y`", ("argument 0",))):
  gradelib.expect_raised(raises(f"{_axpy}({_args})", _ins), _exc, _what, _says)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 2.5: a fused kernel
#
# **Worked example.** Chapter 2's `a * b + c` in one loop: one pass over memory, where NumPy makes two (and a
# temporary for `a * b`).

# %%
FMA = """void fma3(const float* a, const float* b, const float* c, float* out, int n) {
  for (int i = 0; i < n; i++) out[i] = a[i] * b[i] + c[i];
}"""
fma3 = MiniProgram(FMA, "fma3")
n = 1 << 22
rng = np.random.default_rng(0)
a, b, c, d = (rng.standard_normal(n, dtype=np.float32) for _ in range(4))
out = np.zeros(n, np.float32)
fma3(a, b, c, out, n)
print("fma3 matches NumPy:", np.allclose(out, a * b + c))

# %% [markdown]
# **Your task.** `fused_source()`: the C source of `void fused(const float* a, const float* b, const float* c,
# const float* d, float* out, int n)` computing `out = a * b + c * d - a` in one loop. Predict the NumPy/C ratio
# from the passes over memory each side makes, then measure it below. The grader compiles and runs your C itself (its
# compiler and flags, not `MiniProgram`): a kernel may include headers such as `math.h` and call the math functions
# of libm and `memcpy`/`memset`, nothing else. Its speed test times every call on fresh inputs and checks each one.

# %%
# TASK: a fused kernel
def fused_source() -> str:
  """The C source of `fused`: out = a * b + c * d - a in one loop."""
  ### BEGIN SOLUTION
  return """void fused(const float* a, const float* b, const float* c, const float* d, float* out, int n) {
  for (int i = 0; i < n; i++) out[i] = a[i] * b[i] + c[i] * d[i] - a[i];
}"""
  ### END SOLUTION


# %%
fused = MiniProgram(fused_source(), "fused")
fused(a, b, c, d, out, n)
check("fused(a, b, c, d) against NumPy's a * b + c * d - a", out, a * b + c * d - a, atol=1e-5)
# guard zones: each array the middle of a bigger one whose 16 elements on either side hold a value nothing computes;
# C does not stop a loop that runs past n (i <= n), it writes whatever lies there: here, a guard
G, m = 16, 1001
padded = [np.full(m + 2 * G, 12345.0, np.float32) for _ in range(5)]
for p, x in zip(padded, (a, b, c, d)): p[G:G + m] = x[:m]
fused(*[p[G:G + m] for p in padded], m)
check("fused(..., n = 1001): the 16 elements before and after each array untouched (a, b, c, d, out)",
      [bool((p[:G] == 12345.0).all() and (p[G + m:] == 12345.0).all()) for p in padded], [True] * 5)
check("fused(..., n = 1001) in the guarded arrays against NumPy", padded[4][G:G + m],
      a[:m] * b[:m] + c[:m] * d[:m] - a[:m], atol=1e-5)

# %% tags=["nbval-ignore-output"]
fused = MiniProgram(fused_source(), "fused")
t_c, t_np = best_time(lambda: fused(a, b, c, d, out, n)), best_time(lambda: a * b + c * d - a)
print(f"n = {n}: C {t_c * 1e3:.2f} ms, NumPy {t_np * 1e3:.2f} ms: NumPy/C = {t_np / t_c:.1f}")

# %% [markdown] tags=["answer"]
# NumPy makes four passes (`a * b`, `c * d`, their sum, minus `a`), each reading two arrays and writing one, and
# allocates three temporaries; the C loop reads four arrays and writes one, once. Counting arrays streamed, that
# is 12 against 5: the ratio printed above should be of that order when memory is the limit.

# %% tags=["hidden-test"]
# POINTS: a fused kernel 2
### BEGIN HIDDEN TESTS
record("fused", fused_source())
# JUDGE
# the student's C compiled and run by the grader, in a sandbox of its own: never through the notebook's MiniProgram
for _n in (1, 7, 1000):
  _r = seeded(_n)
  _a, _b, _c, _d = (_r.standard_normal(_n).astype(np.float32) for _ in range(4))
  # out has 16 elements more than n, all NaN: a loop that runs past n (i <= n) writes there
  (_out,) = run_c(recorded["fused"], "fused", [_a, _b, _c, _d, np.full(_n + 16, np.nan, np.float32), _n],
                  outputs=[4], what=f"fused, n = {_n}")
  gradelib.expect_close(_out[:_n], _a * _b + _c * _d - _a, f"fused, n = {_n}: out", tol=1e-5)
  if not np.isnan(_out[_n:]).all():
    raise AssertionError(f"fused, n = {_n}: wrote past out[{_n - 1}] (out[{_n + int(np.argmin(np.isnan(_out[_n:])))}]"
                         f" changed): the loop runs past n")
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: a fused kernel 1 speed
### BEGIN HIDDEN TESTS
record("fused", fused_source())
# JUDGE
# timed in a sandbox of its own against NumPy there: the student's C, never the notebook's Python; each repetition on
# fresh inputs and an output full of NaN, checked
_n = 1 << 22
_timing = time_kernels(recorded["fused"], "fused", [["f32", [_n]]] * 4 + [["zeros", [_n]], ["int", _n]], outputs=[4],
                       numpy="a * b + c * d - a", tol=1e-5)
_ratio = gradelib.expect_speedup(_timing, 1.3, "fused against NumPy's a * b + c * d - a at n = 4M")
### END HIDDEN TESTS

# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 2. From C to Python
#
# The compiler you are building ends by printing C (Chapter 5). This chapter builds the other end first:
# the **runtime**, which takes a string of C source, compiles it with the system C compiler into a shared
# object, loads that object into the running Python process with cffi, and calls the function on NumPy
# arrays. Three properties matter:
# - **no copies**: the C function gets a pointer to the NumPy array's own memory;
# - **cheap repeats**: compiling costs tens of milliseconds, so compiled objects are cached on disk;
# - **clear errors**: C has no idea what it was passed. A float64 array handed to a `float*` parameter is
#   silently reinterpreted, and a wrong length writes past the end of an array. Every check the runtime
#   can make, it makes in Python, before any C runs.
#
# You will write a 20-line version first, then use `uopc.runtime.Program`, which adds the cache and the
# checks. Numbers in this notebook were measured on:

# %% tags=["nbval-ignore-output"]
import datetime
import os
import platform
import re
import subprocess
cc = os.environ.get("CC", "cc")
cpu = re.search(r"^model name\s*:\s*(.*)$", open("/proc/cpuinfo").read(), re.M)
print(f"CPU:      {cpu.group(1) if cpu else platform.machine()}, {os.cpu_count()} cores")
print(f"compiler: {subprocess.run([cc, '--version'], capture_output=True, text=True).stdout.splitlines()[0]}")
print(f"date:     {datetime.date.today()}")

# %% [markdown]
# ## 2.1 A kernel is a C function
#
# Kernels in this book are C functions that return nothing and take pointers to arrays and a few scalars.
# Here is the smallest interesting one:

# %%
ADD = """void add(const float* a, const float* b, float* out, int n) {
  for (int i = 0; i < n; i++) out[i] = a[i] + b[i];
}"""

# %% [markdown]
# ## 2.2 A Program in 20 lines
#
# Four steps: write the source to a file; run `cc -O3 -shared -fPIC` to turn it into a shared object (a
# `.so`, the same kind of file as a system library); open it with cffi in *ABI mode*, where cffi is told
# the function's declaration and calls it through the platform's calling convention, without compiling any
# glue code of its own; and call it. `ffi.from_buffer` turns a NumPy array into a C pointer to the
# array's memory, without copying it.

# %%
import os
import subprocess
import tempfile
import cffi
import numpy as np


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


add = MiniProgram(ADD, "add")
rng = np.random.default_rng(0)
n = 1 << 22                                             # 4M floats, 16 MiB per array
a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
out = np.zeros(n, np.float32)
add(a, b, out, n)
print("C add matches NumPy exactly:", np.array_equal(out, a + b))

# %% [markdown]
# It matches exactly, not just closely: one float32 addition per element, rounded the same way in C and in
# NumPy. The output went straight into `out`'s memory; nothing was copied in or out.
#
# ## 2.3 Is C faster than NumPy?
#
# Time four things (best of k, as in Chapter 1): building the Program; calling it on one element, which is
# all overhead (Python, cffi, argument conversion); `add` on 4M elements against `np.add(a, b, out=out)`;
# and a fused expression `a * b + c` against NumPy's, which makes a temporary for `a * b` and a second pass
# over memory.

# %%
import time
from uopc.helpers import best_of

FMA = """void fma3(const float* a, const float* b, const float* c, float* out, int n) {
  for (int i = 0; i < n; i++) out[i] = a[i] * b[i] + c[i];
}"""
c = rng.standard_normal(n, dtype=np.float32)

# %% tags=["nbval-ignore-output"]
t0 = time.perf_counter(); fma3 = MiniProgram(FMA, "fma3"); t_build = time.perf_counter() - t0
one, one_out = np.ones(1, np.float32), np.zeros(1, np.float32)
t_call = best_of(lambda: [add(one, one, one_out, 1) for _ in range(1000)]) / 1000
t_np1 = best_of(lambda: [np.add(one, one, out=one_out) for _ in range(1000)]) / 1000
rows = [("build MiniProgram (cc + dlopen)", t_build, None),
        ("call on 1 element: C / NumPy", t_call, t_np1),
        ("add, 4M elements: C / NumPy", best_of(lambda: add(a, b, out, n)), best_of(lambda: np.add(a, b, out=out))),
        ("a*b+c, 4M elements: C / NumPy", best_of(lambda: fma3(a, b, c, out, n)), best_of(lambda: a * b + c))]
def fmt(t: float) -> str: return f"{t * 1e6:8.2f} µs" if t < 1e-3 else f"{t * 1e3:8.2f} ms"


for name, t_c, t_np in rows:
  print(f"{name:34} {fmt(t_c)}" + (f"  {fmt(t_np)}   NumPy/C = {t_np / t_c:.2f}" if t_np else ""))

# %% [markdown]
# What to read in these numbers (the ratios matter, not the absolute times):
# - Building costs tens of milliseconds, almost all of it the compiler. A program that runs many kernels
#   cannot afford that on every run, hence the cache in 2.4.
# - A call costs microseconds whatever the kernel does, more than NumPy's own overhead; for tiny arrays
#   neither side does real work.
# - On one large `add` C does not beat NumPy: both stream three arrays through memory, and memory
#   bandwidth is the limit, not the loop.
# - On `a * b + c` C does win: one loop reads three arrays and writes one, while NumPy writes a temporary
#   for `a * b` and reads it back. Fusion, again: the gain comes from passes over memory that no longer
#   happen, and it grows with the length of the expression. Producing fused loops like this one
#   automatically is what the rest of the book does.
#
# ## 2.4 The same through uopc: `Program`, with a disk cache
#
# `uopc.runtime.Program(src, name)` does what `MiniProgram` does, with three additions: the flags of
# `uopc.runtime.FLAGS`, chiefly `-O3 -march=native -fopenmp` (so kernels can use every vector instruction
# of this CPU, and threads); a disk cache, keyed by a hash of the source, the flags, the compiler's
# version and the CPU, so the same kernel is compiled once per machine; and the checks of 2.5. The cache
# lives in `UOPC_CACHE_DIR` (by default `~/.cache/uopc`). This notebook points it at a new, empty folder,
# so that the first build below really compiles:

# %%
from pathlib import Path
from uopc.runtime import CompileError, Program

os.environ["UOPC_CACHE_DIR"] = tempfile.mkdtemp(prefix="uopc-ch02-")
prg = Program(ADD, "add")
out[:] = 0
prg(a, b, out, n)
print(prg, "| matches NumPy:", np.array_equal(out, a + b))
again = Program(ADD, "add")
print(again, "| cached:", again.cached, "| same file:", again.path == prg.path)
print("cache entries:", sorted(p.suffix for p in Path(os.environ["UOPC_CACHE_DIR"]).iterdir() if p.is_file()))

# %% [markdown]
# One entry is the shared object, named by the hash; the other is the object's own checksum, which is
# checked before every load, so a truncated or damaged file (a full disk, a process killed while
# writing) is rebuilt instead of loaded. Each object is compiled into a temporary file and renamed into
# place, so two processes compiling the same kernel at once (parallel test workers) never see half a
# file. (The cell lists files only: a folder `compiler-checks` may sit beside them, where uopc keeps what
# it found when it checked the compiler for known wrong code, NOTES 49.) How much does the cache save?
# Time a new kernel's first build and its second load:

# %% tags=["nbval-ignore-output"]
SCALE = "void scale(float* x, float k, int n) { for (int i = 0; i < n; i++) x[i] *= k; }"
t0 = time.perf_counter(); first = Program(SCALE, "scale"); t_first = time.perf_counter() - t0
t0 = time.perf_counter(); second = Program(SCALE, "scale"); t_second = time.perf_counter() - t0
print(f"first build: {t_first * 1e3:7.2f} ms (cached={first.cached})")
print(f"second load: {t_second * 1e3:7.2f} ms (cached={second.cached})   {t_first / t_second:.0f}x faster")

# %% [markdown]
# ## 2.5 When things go wrong
#
# A compile error raises `CompileError` carrying the compiler's message and the source with line numbers,
# as the compiler saw it. `Program` puts a prelude in front of every kernel (C headers and an inline
# `exp2f`, see `uopc.runtime.PRELUDE`), so the kernel's own lines come last, numbered as the compiler's
# message numbers them:

# %%
BROKEN = """void twice(float* x, int n) {
  for (int i = 0; i < n; i++) x[i] = 2.0f * x[i] +;
}"""
try:
  Program(BROKEN, "twice")
except CompileError as e:
  message = str(e)
source = message[message.index("source:"):].splitlines()
print("\n".join([source[0], "   ...", *source[-3:]]))

# %% [markdown]
# The compiler's part of the message names a temporary file and its wording depends on the compiler's
# version, so it is printed in a cell the tests ignore:

# %% tags=["nbval-ignore-output"]
print(message[:message.index("source:")])

# %% [markdown]
# A bad call raises before any C runs, with a message that names the argument. Each case below is tried on
# `Program` and on `MiniProgram`:

# %%
def attempt(call) -> str:
  try:
    call()
    return "ran"
  except (TypeError, ValueError) as e:
    return f"{type(e).__name__}: {e}"


x, y, z = (np.ones(8, np.float32) for _ in range(3))
read_only = np.zeros(8, np.float32)
read_only.flags.writeable = False
cases = {"too few arguments": lambda p: p(x, y, z),
         "float64 array for a float*": lambda p: p(x.astype(np.float64), y, z, 8),
         "read-only array as the output": lambda p: p(x, y, read_only, 8),
         "every other element, x[::2]": lambda p: p(x[::2], y[::2], z, 4),
         "2.5 for the int n": lambda p: p(x, y, z, 2.5)}
for what, call in cases.items():
  print(f"{what}\n  Program:     {attempt(lambda: call(prg))}\n  MiniProgram: {attempt(lambda: call(add))}")
print("the read-only array now holds", read_only)

# %% [markdown]
# cffi itself counts arguments and refuses a float for an `int`, and NumPy refuses to hand out a plain
# pointer to a strided view, though none of their messages says which argument was wrong. Two mistakes
# go straight through `MiniProgram`: the float64 array runs and gives a wrong answer, and the read-only
# array is written to. `Program` refuses all five.

# %% [markdown]
# Here is what `MiniProgram` does with the float64 array: it passes the pointer, and with n = 4 C reads the
# first four 4-byte floats, which are the 16 bytes of the doubles 0.0 and 1.0 (the array's 2.0 and 3.0 are never
# read). The low half of each of these doubles is all zeros; the high half of 1.0 (0x3FF00000) read as a float is
# 1.875, so the last output is 1.875 + 1.875. No error, a wrong answer:

# %%
x64, small_out = np.arange(4, dtype=np.float64), np.zeros(4, np.float32)
add(x64, x64, small_out, 4)
print(small_out)

# %% [markdown]
# ## Pitfalls
# - **C trusts its arguments.** A length larger than the arrays reads or writes past their end: at best
#   a segfault, at worst a silently wrong answer elsewhere. `Program` checks types, contiguity and
#   writability, but it cannot know which scalar is the length; the code that calls a kernel (Chapter 8's
#   `realize`) must pass sizes that match the arrays.
# - **One FFI per kernel.** cffi refuses a second `cdef` of the same function name in one `FFI` object, so
#   each Program has its own.
# - **Keep the library referenced.** The function pointer is valid only while the object returned by
#   `dlopen` is alive; `Program` keeps it as an attribute.
# - **A rebuilt file at the same path is not reloaded.** `dlopen` of a path the process already loaded
#   returns the old library. That is why cache entries are named by the hash of what they contain.
# - **`-ffast-math` changes results.** It lets the compiler assume there are no infinities, and the online
#   softmax of Chapter 11 starts from -INFINITY. uopc does not use it.
# - **Threads and fork.** OpenMP's runtime (libgomp) does not survive `fork`; test runners that fork
#   workers should run kernels with `OMP_NUM_THREADS=1`.
#
# ## Exercises
# 1. Add `restrict` to the pointers of `ADD` and compile with `-fopt-info-vec` added to the flags. What
#    does the compiler report, with and without `restrict`?
# 2. Add `#pragma omp parallel for` above the loop of `FMA`, compile it with `Program` (which passes
#    `-fopenmp`) and time it against the single-threaded version at 4M and at 4K elements. Where does the
#    thread start-up cost show?
# 3. Make `MiniProgram.__call__` check each array's dtype against its parameter's type
#    (`self.ffi.typeof(self.fn).args[k].item.cname`) and raise a `TypeError` naming the argument.
# 4. Give `MiniProgram` a disk cache: name the `.so` by a hash of the source and flags and reuse it when it
#    exists. What else must go into the hash so that a cached object is never wrong? (Compare with
#    `uopc.runtime.cache_key`.)
# 5. Write a kernel for `out = a * b + c * d - a` and measure the NumPy/C ratio. Predict it first from the
#    number of passes over memory each side makes.

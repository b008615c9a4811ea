"""The runtime: C source -> system compiler -> shared object (cached on disk) -> cffi -> call with NumPy arrays.

  prg = Program(src, "add")       # compiles, or loads the cached object for this exact source and compiler
  prg(a, b, out)                  # arrays are passed by pointer, never copied; checked before any C runs
"""
from __future__ import annotations
import contextlib
import ctypes
import functools
import ctypes.util
import hashlib
import os
import platform
import queue
import re
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
import warnings
from pathlib import Path
import numpy as np
import cffi
from uopc.dtype import np_dtype
from uopc.runtime.objfile import complete_object
from uopc.runtime.flags import CompileOpts
from uopc.renderer import Signature, check_identifier

# Reassociating float sums lets the compiler vectorize reductions. Unlike -ffast-math this keeps infinities and NaNs
# meaningful, which the online softmax needs (its running max starts at -INFINITY). See NOTES 2. 256-bit vectors on
# x86: a register tile's 16 accumulators then reduce across fewer lanes (NOTES 2). A kernel may choose others
# (uopc.runtime.flags; NOTES 24).
FLAGS = CompileOpts().flags

# What every rendered kernel may use (INFINITY, bool, exp2f); the renderer prints only the function. glibc's exp2f
# is a call the compiler cannot vectorize, so exp2f is this inline polynomial: 2^x = 2^n * 2^f, n = round(x),
# |f| <= 1/2, 2^f by its Taylor series to degree 7 (relative error below 1e-7); exp2f(-inf) = 0, exp2f(inf) = inf,
# exp2f(nan) = nan; results below 2^-126 flush to zero.
PRELUDE = """#include <math.h>
#include <stdbool.h>
#include <string.h>
static inline float uopc_exp2f(float x) {
  float xc = x < -126.0f ? -126.0f : (x > 128.0f ? 128.0f : x);
  float n = __builtin_floorf(xc + 0.5f), f = xc - n;
  float p = 1.5252733804059841e-05f;
  p = p * f + 1.5403530393381609e-04f; p = p * f + 1.3333558146428443e-03f; p = p * f + 9.6181291076284772e-03f;
  p = p * f + 5.5504108664821580e-02f; p = p * f + 2.4022650695910071e-01f; p = p * f + 6.9314718055994531e-01f;
  p = p * f + 1.0f;
  /* times 2^n as an integer add to the exponent field: float reassociation cannot reorder it into an overflow */
  int bits; memcpy(&bits, &p, sizeof bits);
  bits = x < -126.0f ? 0 : bits + (int)((unsigned)(int)n << 23);   /* x >= 128 lands on inf; nan stays nan */
  float r; memcpy(&r, &bits, sizeof r);
  return r;
}
#define exp2f(x) uopc_exp2f(x)
"""

# C parameter types a kernel may take, and what a caller must pass for each
C_TO_NP = {"float": np.float32, "double": np.float64, "int": np.int32, "long": np.int64, "long long": np.int64,
           "int32_t": np.int32, "int64_t": np.int64, "_Float16": np.float16, "unsigned char": np.uint8,
           "bool": np.bool_, "char": np.int8, "signed char": np.int8, "unsigned int": np.uint32}


def _pin_openmp_runtime() -> None:
  """Load libgomp once and never unload it (ctypes never calls dlclose). Without this, the process can crash at exit:
  cffi unloads each kernel's object when it is collected, the last unload takes libgomp with it, and libgomp's idle
  worker threads are left running unmapped code (NOTES 1)."""
  for name in ("gomp", "omp"):
    path = ctypes.util.find_library(name)
    if path:
      try: _pinned.append(ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)); return
      except OSError: pass


# libgomp's idle threads spin for a while after each parallel loop (GOMP_SPINCOUNT, 300,000 by default) before they
# sleep. On a machine shared with other busy processes that spinning takes the cores the next loop needs, and small
# kernels ran many times slower (NOTES 20). libgomp reads its settings once, when it is loaded, so this comes first; a
# user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept.
WAIT_POLICY = {"OMP_WAIT_POLICY": "PASSIVE"}


def set_wait_policy(environ=os.environ) -> None:
  if not any(k in environ for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")): environ.update(WAIT_POLICY)


# glibc hands blocks of 128 KB and more out as fresh mappings and gives freed memory back to the system, so every
# realize that allocates an output or a copy of an input touches new pages: about 1,400 page faults per 1024 x 1024
# matmul here, a third of its time (NOTES 25). Keeping blocks up to 32 MB (glibc's largest mmap threshold) in the
# heap, and 256 MB of free heap before trimming it, lets the next call reuse them, as a long-running NumPy program's
# arrays are. A user's own MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ (glibc's tunables) win.
MALLOC_POLICY = {-3: 32 << 20, -1: 256 << 20}   # mallopt's M_MMAP_THRESHOLD and M_TRIM_THRESHOLD, in bytes


def set_malloc_policy(environ=os.environ) -> bool:
  """Apply MALLOC_POLICY where the C library is glibc and the user set neither tunable; whether it was applied."""
  if any(k in environ for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")): return False
  if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc": return False
  try: libc = ctypes.CDLL(None)
  except OSError: return False
  if not hasattr(libc, "mallopt"): return False
  return all(libc.mallopt(k, v) == 1 for k, v in MALLOC_POLICY.items())


_pinned: list = []
set_wait_policy()
set_malloc_policy()
_pin_openmp_runtime()


class CompileError(RuntimeError):
  """The C compiler rejected a kernel: carries the compiler's message and the numbered source."""


def numbered(src: str, limit: int = 2000) -> str:
  lines = src.splitlines()
  text = "\n".join(f"{i:4d} | {line[:300]}" for i, line in enumerate(lines[:limit], 1))
  return text + (f"\n     ... ({len(lines) - limit} more lines)" if len(lines) > limit else "")


def cache_dir() -> Path:
  """Absolute, whatever the variable says: dlopen looks a path with no slash up on the system search path."""
  if d := os.environ.get("UOPC_CACHE_DIR"): return Path(d).expanduser().absolute()
  return (Path(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")) / "uopc").absolute()


def compiler() -> str: return os.environ.get("CC", "cc")


_version_cache: dict[str, str] = {}
def compiler_version(cc: str) -> str:
  if cc not in _version_cache:
    try: out = subprocess.run([cc, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
      raise CompileError(f"C compiler {cc!r} cannot be run: {e}") from e
    _version_cache[cc] = out.splitlines()[0] if out else cc
  return _version_cache[cc]


# the /proc/cpuinfo lines that name a CPU and its features: x86 has model name/flags, ARM the implementer, part and
# Features; every distinct line counts (a big.LITTLE chip lists two kinds of core)
CPUINFO_KEYS = ("model name", "flags", "Features", "CPU implementer", "CPU architecture", "CPU variant", "CPU part",
                "CPU revision", "cpu model", "isa", "uarch")
SYSCTL_CPU = ("sysctl", "machdep.cpu", "hw.cpufamily", "hw.cpusubtype")   # macOS: no /proc/cpuinfo


def cpu_identity(cpuinfo: str) -> str:
  keys = "|".join(re.escape(k) for k in CPUINFO_KEYS)
  return "\n".join(sorted(set(re.findall(rf"^(?:{keys})\s*:.*$", cpuinfo, re.M))))


def _run_quietly(cmd: list[str]) -> subprocess.CompletedProcess | None:
  try: return subprocess.run(cmd, capture_output=True, text=True, timeout=30)
  except (OSError, subprocess.SubprocessError): return None


@functools.cache
def machine_id() -> str:
  """-march=native makes the object depend on the CPU, so the CPU is part of the cache key."""
  try: cpu = cpu_identity(Path("/proc/cpuinfo").read_text())
  except OSError: cpu = ""
  if not cpu and platform.system() == "Darwin" and (r := _run_quietly(list(SYSCTL_CPU))):
    cpu = "\n".join(line for line in r.stdout.splitlines() if "count" not in line)   # core counts are not the CPU
  return f"{platform.machine()}|{platform.system()}|{cpu}"


@functools.cache
def native_target(cc: str) -> str:
  """What -march=native means to this compiler on this CPU (the options its driver passes on: gcc's -m flags,
  clang's -target-cpu/-target-feature), so that a CPU /proc/cpuinfo does not describe still gets its own entry."""
  r = _run_quietly([cc, "-march=native", "-###", "-x", "c", "-S", os.devnull, "-o", os.devnull])
  words = r.stderr.replace('"', " ").split() if r else []
  named = ("-target-cpu", "-target-feature", "--param")
  return " ".join(w for i, w in enumerate(words) if w.startswith("-m") or w in named or (i and words[i - 1] in named))


@functools.cache
def vector_bits(cc: str) -> int:
  """The widest vector register -march=native gives this compiler: 512 (AVX-512), 256 (AVX2), else 128 (SSE, NEON).
  A register tile is sized by it (uopc.kernels.flash_vec, uopc.codegen.gemm_vec)."""
  r = _run_quietly([cc, "-march=native", "-dM", "-E", "-x", "c", os.devnull])
  macros = r.stdout if r else ""
  return 512 if "__AVX512F__" in macros else 256 if "__AVX2__" in macros else 128


def native_lanes() -> int:
  """Floats per vector register for this compiler here: 16 with AVX-512, 8 with AVX2, 4 otherwise."""
  return vector_bits(compiler()) // 32


def cache_key(src: str, cc: str, flags: tuple[str, ...]) -> str:
  parts = [src, " ".join(flags), compiler_version(cc), machine_id(), native_target(cc)]
  return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Arg:
  """What a caller must pass for one kernel parameter."""
  ctype: str            # the C type, for messages and for the cffi declaration
  dtype: np.dtype
  pointer: bool
  writes: bool          # a pointer the kernel may store through (a read-only array is refused)
  size: int | None      # elements the kernel indexes (known for rendered kernels, None for hand-written C)


def signature_from_c(src: str, name: str) -> list[Arg]:
  """The parameters of hand-written C `void name(...)`. Rendered kernels carry their signature and never get here."""
  m = re.search(r"\bvoid\s+" + re.escape(name) + r"\s*\(([^)]*)\)", src)
  if m is None: raise CompileError(f"no function `void {name}(...)` in the source:\n{numbered(src)}")
  params = [p.strip() for p in m.group(1).split(",") if p.strip() and p.strip() != "void"]
  out = []
  for p in params:
    p = re.sub(r"\b(restrict|__restrict|__restrict__)\b", "", p)
    is_ptr, is_const = "*" in p, bool(re.search(r"\bconst\b", p))
    words = re.sub(r"\bconst\b", "", p.replace("*", " ")).split()
    base = " ".join(words[:-1])   # drop the parameter name
    if base not in C_TO_NP: raise CompileError(f"{name}: parameter type {base!r} is not supported (in {p!r})")
    out.append(Arg(base, np.dtype(C_TO_NP[base]), is_ptr, is_ptr and not is_const, None))
  return out


def args_of(signature: Signature) -> list[Arg]:
  """A rendered kernel's parameters, from the signature its renderer returned."""
  from uopc.render_c import C
  return [Arg(C.type(p.dtype), np_dtype(p.dtype), True, p.writes, p.size) for p in signature.params]


_locks_lock = threading.Lock()
_build_locks: dict[Path, threading.Lock] = {}


def _build_lock(path: Path) -> threading.Lock:
  """One lock per cache entry: threads compiling different kernels run side by side (kernelize compiles a cold plan's
  kernels in parallel); two threads asking for the same entry build it once."""
  with _locks_lock: return _build_locks.setdefault(path, threading.Lock())


# A compiler can crash on valid C: gcc 12.2 stops with an internal compiler error, in the pass that forms FMAs, on
# some kernels of random graphs (NOTES 32). Such a kernel is built once more with FMA contraction off, which skips
# that pass; the result is the same arithmetic, each multiply and add rounded on its own.
CRASH_RETRY_FLAGS = ("-ffp-contract=off",)


def compiler_crashed(stderr: str) -> bool:
  """Whether a failed compile was the compiler's own crash (gcc's and clang's wording), not an error in the C, nor a
  compiler killed from outside (gcc says "internal compiler error: Killed" then too: a retry would only repeat it)."""
  if "internal compiler error: Killed" in stderr: return False
  return "internal compiler error" in stderr or "PLEASE submit a bug report" in stderr


def _build(src: str, so_path: Path, cc: str, flags: tuple[str, ...]) -> None:
  """Compile into a temporary file next to the cache entry, then rename it into place (atomic for readers)."""
  so_path.parent.mkdir(parents=True, exist_ok=True)
  with tempfile.TemporaryDirectory(dir=so_path.parent, prefix=".build-") as tmp:
    c_file, out = Path(tmp) / "kernel.c", Path(tmp) / "kernel.so"
    c_file.write_text(src)
    def compile_with(flags: tuple[str, ...]) -> subprocess.CompletedProcess:
      try: return _run_compiler([cc, *flags, "-o", str(out), str(c_file), "-lm"], COMPILE_TIMEOUT_S)
      except subprocess.TimeoutExpired:
        raise CompileError(f"{cc} did not finish within {COMPILE_TIMEOUT_S} s ({len(src.splitlines())} lines):\n"
                           f"{numbered(src)}") from None
    r = compile_with(flags)
    if r.returncode != 0 and compiler_crashed(r.stderr):
      crash, r = r.stderr.strip(), compile_with(flags + CRASH_RETRY_FLAGS)
      if r.returncode != 0:
        raise CompileError(f"{cc} crashed on this kernel, and failed again with {' '.join(CRASH_RETRY_FLAGS)}:\n"
                           f"{crash}\n\nthen:\n{r.stderr.strip()}\n\nsource:\n{numbered(src)}")
      why = re.search(r"internal compiler error[^\n]*", crash)
      warnings.warn(f"uopc: {cc} crashed compiling {so_path.stem.split('-')[0]} ({why.group(0) if why else 'a crash'});"
                    f" built it again with {' '.join(CRASH_RETRY_FLAGS)}, so its multiplies and adds are not fused",
                    RuntimeWarning)
    if r.returncode != 0:
      raise CompileError(f"{cc} failed with exit code {r.returncode}:\n{r.stderr.strip()}\n\nsource:\n{numbered(src)}")
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    os.replace(out, so_path)
    sum_tmp = Path(tmp) / "kernel.sum"
    sum_tmp.write_text(digest)
    os.replace(sum_tmp, so_path.with_suffix(".sum"))


COMPILE_TIMEOUT_S = 300
COMPILER_MEMORY = 4 << 30   # a runaway kernel fails to compile with an error, instead of taking the machine's memory


def _limit_compiler() -> None:
  try: resource.setrlimit(resource.RLIMIT_AS, (COMPILER_MEMORY, COMPILER_MEMORY))
  except (ValueError, OSError): pass


WAIT_SLICE_S = 0.1   # the longest the main thread waits on the compiler before it looks at its signals again


def _run_compiler(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
  """Run a compiler in a process group of its own: `cc` is a driver that starts cc1, as and ld, so on a timeout (or
  Ctrl-C) the whole group is killed, not only the driver (which left cc1 running)."""
  proc = None
  try:
    with _ctrl_c_held():   # a Ctrl-C while Popen starts the driver lands after `proc` is set, so the group is killed
      proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                              preexec_fn=_limit_compiler)
    # in slices: a Ctrl-C that the kernel hands to another thread does not wake this one from its wait, and Python
    # raises it here only when this thread runs Python again (NOTES 34)
    deadline = time.monotonic() + timeout
    while True:
      try:
        out, err = proc.communicate(timeout=max(0.0, min(WAIT_SLICE_S, deadline - time.monotonic())))
        break
      except subprocess.TimeoutExpired:
        if time.monotonic() >= deadline: raise
  except BaseException:   # TimeoutExpired, KeyboardInterrupt
    if proc is not None:
      try: os.killpg(proc.pid, signal.SIGKILL)
      except (ProcessLookupError, PermissionError): pass
      proc.communicate()
    raise
  return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@contextlib.contextmanager
def _ctrl_c_held():
  """A Ctrl-C during the block is held and handled when the block ends (NOTES 30). Python raises KeyboardInterrupt at
  the next bytecode of the main thread, wherever that is; inside Popen, after it started the driver, there was no
  process yet to kill. Blocking SIGINT on this thread is not enough: the signal then goes to another thread, and
  Python still raises it here. So the handler itself is swapped for one that only notes the signal."""
  if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is None:
    yield; return   # only the main thread handles signals; None: a handler not from Python, left alone
  noted = []
  old = signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
  try: yield
  finally:
    signal.signal(signal.SIGINT, old)
    if noted: signal.raise_signal(signal.SIGINT)   # to the handler that was there: KeyboardInterrupt, usually


# ---- OpenMP, where the compiler has it ----
OPENMP_FLAG = "-fopenmp"
OPENMP_PROBE = "int uopc_probe(int n) {\n  int s = 0;\n#pragma omp parallel for reduction(+:s)\n" \
               "  for (int i = 0; i < n; i++) s += i;\n  return s;\n}\n"


@functools.cache
def openmp_works(cc: str) -> bool:
  """Whether `cc -fopenmp` builds and links a shared object (clang without libomp fails with `cannot find -lomp`);
  a test compile, once per process and compiler, asked only when a kernel's OpenMP build is not in the cache."""
  with tempfile.TemporaryDirectory(prefix="uopc-openmp-") as tmp:
    c_file = Path(tmp) / "probe.c"
    c_file.write_text(OPENMP_PROBE)
    cmd = [cc, OPENMP_FLAG, "-shared", "-fPIC", "-o", str(c_file.with_suffix(".so")), str(c_file)]
    try: return _run_compiler(cmd, COMPILE_TIMEOUT_S).returncode == 0
    except (OSError, subprocess.TimeoutExpired): return False


def serial_flags(flags: tuple[str, ...], cc: str) -> tuple[str, ...]:
  """flags without -fopenmp: the pragmas are then ignored and the kernel runs on one thread. Said once per process."""
  if cc not in _warned_serial:
    _warned_serial.add(cc)
    warnings.warn(f"uopc: {cc} cannot build with {OPENMP_FLAG} (no OpenMP runtime: for clang install libomp, e.g. "
                  f"`apt install libomp-dev` or `brew install libomp`); kernels are compiled without it and run on one "
                  f"thread", RuntimeWarning, stacklevel=4)
  return tuple(f for f in flags if f != OPENMP_FLAG)


_warned_serial: set[str] = set()


def locate(src: str, name: str, cc: str, flags: tuple[str, ...]) -> tuple[tuple[str, ...], Path, bool]:
  """The flags a kernel is built with, its cache entry (the content hash is in the file name: a rebuilt object never
  reuses a path this process already loaded), and whether that entry is intact. A compiler without OpenMP gets the
  flags without -fopenmp; a kernel whose OpenMP build is cached never asks."""
  path = cache_dir() / f"{name}-{cache_key(src, cc, flags)}.so"
  if (ok := _intact(path)) or OPENMP_FLAG not in flags or openmp_works(cc): return flags, path, ok
  flags = serial_flags(flags, cc)
  path = cache_dir() / f"{name}-{cache_key(src, cc, flags)}.so"
  return flags, path, _intact(path)


def _intact(so_path: Path) -> bool:
  """A cache entry is used only if its checksum matches and it is a whole object: a truncated or corrupted object is
  rebuilt, never loaded."""
  try: want = so_path.with_suffix(".sum").read_text().strip()
  except OSError: return False
  try: data = so_path.read_bytes()
  except OSError: return False
  return hashlib.sha256(data).hexdigest() == want and complete_object(data)


def check_name(name: str) -> str:
  """A kernel's name goes into a file name and a cdef: only a C identifier may (`../../x` would write outside the
  cache before cffi rejected it)."""
  return check_identifier(name)


# ---- calling a kernel so that Ctrl-C still works ----
# A C call holds the thread that made it until it returns, and Python runs signal handlers only between bytecodes, so a
# kernel called on the main thread cannot be interrupted. Calls that may run long go to one kernel thread instead, and
# the main thread waits on a lock, which Ctrl-C interrupts. C code cannot be stopped safely from outside, so an
# interrupted kernel runs on to its end on that thread, and the next call waits for it (it may still be writing the
# arrays it was given, which its job keeps alive); a kernel that never ends needs a new process (restart the notebook
# kernel). The handoff costs tens of microseconds, which shows in a small realize, so a call runs directly when the
# same Program already finished with the same scalar arguments in under QUICK_S: the loop bounds of a kernel are
# constants or scalars. Only under a passive wait policy, though: each thread that starts OpenMP loops keeps a pool of
# workers of its own, and two pools that spin slow each other down (NOTES 20). 20 ms: a 512 x 512 matmul (about a
# millisecond) skips the handoff too (NOTES 28), and a wait that long still feels immediate to a Ctrl-C.
QUICK_S = 20e-3
QUICK_DIRECT = os.environ.get("OMP_WAIT_POLICY", "").strip().upper() == "PASSIVE"
_jobs: queue.SimpleQueue = queue.SimpleQueue()
_kernel_thread: threading.Thread | None = None
_last_job = threading.Lock()   # locked while the latest job handed to the kernel thread runs


def _forget_kernel_thread() -> None:
  """In a forked child: the kernel thread was not copied, so the next call starts a new one."""
  global _jobs, _kernel_thread, _last_job
  _jobs, _kernel_thread, _last_job = queue.SimpleQueue(), None, threading.Lock()


if hasattr(os, "register_at_fork"): os.register_at_fork(after_in_child=_forget_kernel_thread)


def _kernel_loop() -> None:
  while True:
    prg, args, done = _jobs.get()   # the job holds the Program: its object stays loaded until the call returns
    try: _invoke(prg, args)
    finally:
      del prg, args   # not kept while this thread waits for the next job: they hold the caller's arrays
      done.release()


def _wait_on_kernel_thread(prg: Program, args: list) -> None:
  global _kernel_thread, _last_job
  if _kernel_thread is None:
    _kernel_thread = threading.Thread(target=_kernel_loop, name="uopc-kernels", daemon=True)
    _kernel_thread.start()
  done = _last_job = threading.Lock()
  done.acquire()
  _jobs.put((prg, args, done))   # queued behind an interrupted kernel that is still running, if there is one
  try:
    while not done.acquire(timeout=0.25): pass
    done.release()
  except KeyboardInterrupt as e:
    if hasattr(e, "add_note"):
      e.add_note(f"uopc: kernel {prg.name} runs on in the background; the next kernel call waits for it")
    raise


def call_kernel(prg: Program, args: list) -> None:
  """prg.fn(*args) with converted arguments, interruptible on the main thread."""
  scalars = tuple(a for a in args if isinstance(a, (int, float)))
  quick = QUICK_DIRECT and prg._quick == scalars and not _last_job.locked()
  if quick or threading.current_thread() is not threading.main_thread(): return _invoke(prg, args)
  t0 = time.perf_counter()
  _wait_on_kernel_thread(prg, args)
  prg._quick = scalars if time.perf_counter() - t0 < QUICK_S else None   # the scalars of a call that finished fast


# ---- one thread for a small kernel ----
# With the passive wait policy, each parallel loop wakes OpenMP's sleeping workers and waits for them: tens of
# microseconds here, more than a small kernel's whole work (a GPT step's 128 kernels, most of them small: NOTES 27).
# A Program whose `threads` is set runs its parallel loops with that many threads: omp_set_num_threads is an ICV of the
# calling thread only, so it is set around the call, on the thread that makes it. The kernel's text is unchanged.
def _omp_thread_calls():
  for lib in _pinned:
    try: return lib.omp_get_max_threads, lib.omp_set_num_threads
    except AttributeError: pass
  return None


_omp = _omp_thread_calls()   # (omp_get_max_threads, omp_set_num_threads) of the pinned runtime, or None


def _invoke(prg: Program, args: list) -> None:
  if prg.threads is None or _omp is None: return prg.fn(*args)
  get, set_ = _omp
  was = get()
  set_(prg.threads)
  try: prg.fn(*args)
  finally: set_(was)


class Program:
  """A compiled C function, callable with NumPy arrays and Python scalars. src is C text: a rendered kernel
  (render_c's result carries its signature) or hand-written C, whose `void name(...)` line is read."""

  def __init__(self, src: str, name: str, flags: tuple[str, ...] | None = None):
    self.src, self.name = src, check_name(name)   # the name becomes a file name and a symbol: checked first
    self._quick: tuple | None = None
    self.threads: int | None = None   # OpenMP threads for its parallel loops: None = OpenMP's own choice
    full = src if src.lstrip().startswith("#") else PRELUDE + src
    signature = getattr(src, "signature", None)
    self.params = args_of(signature) if signature is not None else signature_from_c(src, name)
    cc = compiler()
    t0 = time.perf_counter()
    self.flags, self.path, self.cached = locate(full, name, cc, tuple(flags) if flags is not None else FLAGS)
    if not self.cached:
      with _build_lock(self.path):
        if not _intact(self.path): _build(full, self.path, cc, self.flags)
    self.compile_s = time.perf_counter() - t0
    # one FFI per kernel: a second cdef of the same function name in one FFI would fail
    self.ffi = cffi.FFI()
    # a rendered kernel takes only buffers: declared as void* here, so cffi need not parse every C type (_Float16)
    decl = ", ".join("void*" if signature is not None else f"{'' if a.writes or not a.pointer else 'const '}{a.ctype}"
                     f"{'*' if a.pointer else ''}" for a in self.params)
    self.ffi.cdef(f"void {name}({decl});")
    try: self.lib = self.ffi.dlopen(str(self.path))
    except OSError:
      # a damaged entry whose checksum file was damaged the same way: rebuild it in place, once (dlopen failed,
      # so this process has not mapped that path)
      with _build_lock(self.path): _build(full, self.path, cc, self.flags)
      self.cached = False
      self.lib = self.ffi.dlopen(str(self.path))
    self.fn = getattr(self.lib, name)
    self.rendered = signature is not None
    self._buffer_type = ["char[]" if self.rendered else f"{a.ctype}[]" for a in self.params]   # cffi's view of each

  def __repr__(self): return f"Program({self.name!r}, {len(self.params)} params, cached={self.cached})"

  def _convert(self, k: int, arg, a: Arg):
    if a.pointer and type(arg) is np.ndarray and arg.dtype == a.dtype:   # the common case, checked cheaply first
      flags = arg.flags
      if flags.c_contiguous and (flags.writeable or not a.writes) and (a.size is None or arg.size >= a.size):
        return self.ffi.from_buffer(self._buffer_type[k], arg, require_writable=a.writes)
    return self._convert_checked(k, arg, a)

  def _convert_checked(self, k: int, arg, a: Arg):
    want = a.dtype.name
    if a.pointer:
      if not isinstance(arg, np.ndarray):
        raise TypeError(f"{self.name}: argument {k} must be a NumPy array of {want} ({a.ctype}*), "
                        f"got {type(arg).__name__}")
      if arg.dtype != a.dtype:
        raise TypeError(f"{self.name}: argument {k} has dtype {arg.dtype}, the kernel expects {want} ({a.ctype}*)")
      if not arg.flags.c_contiguous:
        raise ValueError(f"{self.name}: argument {k} (shape {arg.shape}, strides {arg.strides}) is not C-contiguous; "
                         "pass np.ascontiguousarray(x)")
      if a.writes and not arg.flags.writeable:
        raise ValueError(f"{self.name}: argument {k} is read-only, but the kernel may write through {a.ctype}*; "
                         "pass a copy")
      if a.size is not None and arg.size < a.size:
        raise ValueError(f"{self.name}: argument {k} has {arg.size} elements, the kernel indexes {a.size}")
      return self.ffi.from_buffer(self._buffer_type[k], arg, require_writable=a.writes)
    if isinstance(arg, np.ndarray) and arg.ndim != 0:
      raise TypeError(f"{self.name}: argument {k} is a scalar {a.ctype}, got an array of shape {arg.shape}")
    if np.issubdtype(a.dtype, np.integer):
      if isinstance(arg, (float, np.floating)):
        raise TypeError(f"{self.name}: argument {k} is an integer ({a.ctype}), got {arg!r}")
      return int(arg)
    return float(arg)

  def __call__(self, *args):
    if len(args) != len(self.params):
      raise TypeError(f"{self.name} takes {len(self.params)} arguments, got {len(args)}")
    call_kernel(self, [self._convert(k, a, p) for k, (a, p) in enumerate(zip(args, self.params))])


def clear_cache() -> None:
  shutil.rmtree(cache_dir(), ignore_errors=True)

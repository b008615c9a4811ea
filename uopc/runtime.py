"""The runtime: C source -> system compiler -> shared object (cached on disk) -> cffi -> call with NumPy arrays.

  prg = Program(src, "add")       # compiles, or loads the cached object for this exact source and compiler
  prg(a, b, out)                  # arrays are passed by pointer, never copied; checked before any C runs
"""
from __future__ import annotations
import ctypes
import functools
import ctypes.util
import hashlib
import os
import platform
import re
import resource
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
import numpy as np
import cffi
from uopc.dtype import np_dtype
from uopc.renderer import Signature, check_identifier

# Reassociating float sums lets the compiler vectorize reductions. Unlike -ffast-math this keeps infinities and NaNs
# meaningful, which the online softmax needs (its running max starts at -INFINITY). See NOTES 2.
FLAGS = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fassociative-math", "-fno-signed-zeros",
         "-fno-trapping-math", "-shared", "-fPIC")
# 256-bit vectors: a register tile's 16 accumulators then reduce across fewer lanes (measured in NOTES 2)
if platform.machine() in ("x86_64", "AMD64"): FLAGS = FLAGS[:3] + ("-mprefer-vector-width=256",) + FLAGS[3:]

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


_pinned: list = []
_pin_openmp_runtime()


class CompileError(RuntimeError):
  """The C compiler rejected a kernel: carries the compiler's message and the numbered source."""


def numbered(src: str, limit: int = 2000) -> str:
  lines = src.splitlines()
  text = "\n".join(f"{i:4d} | {line[:300]}" for i, line in enumerate(lines[:limit], 1))
  return text + (f"\n     ... ({len(lines) - limit} more lines)" if len(lines) > limit else "")


def cache_dir() -> Path:
  if d := os.environ.get("UOPC_CACHE_DIR"): return Path(d)
  return Path(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))) / "uopc"


def compiler() -> str: return os.environ.get("CC", "cc")


_version_cache: dict[str, str] = {}
def compiler_version(cc: str) -> str:
  if cc not in _version_cache:
    try: out = subprocess.run([cc, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
      raise CompileError(f"C compiler {cc!r} cannot be run: {e}") from e
    _version_cache[cc] = out.splitlines()[0] if out else cc
  return _version_cache[cc]


@functools.cache
def machine_id() -> str:
  """-march=native makes the object depend on the CPU, so the CPU is part of the cache key."""
  try: cpu = "\n".join(re.findall(r"^(?:model name|flags)\s*:.*$", Path("/proc/cpuinfo").read_text(), re.M)[:2])
  except OSError: cpu = ""
  return f"{platform.machine()}|{platform.system()}|{cpu}"


def cache_key(src: str, cc: str, flags: tuple[str, ...]) -> str:
  h = hashlib.sha256("\0".join([src, " ".join(flags), compiler_version(cc), machine_id()]).encode())
  return h.hexdigest()[:32]


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


def _build(src: str, so_path: Path, cc: str, flags: tuple[str, ...]) -> None:
  """Compile into a temporary file next to the cache entry, then rename it into place (atomic for readers)."""
  so_path.parent.mkdir(parents=True, exist_ok=True)
  with tempfile.TemporaryDirectory(dir=so_path.parent, prefix=".build-") as tmp:
    c_file, out = Path(tmp) / "kernel.c", Path(tmp) / "kernel.so"
    c_file.write_text(src)
    try:
      r = subprocess.run([cc, *flags, "-o", str(out), str(c_file), "-lm"], capture_output=True, text=True,
                         preexec_fn=_limit_compiler, timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
      raise CompileError(f"{cc} did not finish within {COMPILE_TIMEOUT_S} s ({len(src.splitlines())} lines):\n"
                         f"{numbered(src)}") from None
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


def _intact(so_path: Path) -> bool:
  """A cache entry is used only if its checksum matches: a truncated or corrupted object is rebuilt, never loaded."""
  try: want = so_path.with_suffix(".sum").read_text().strip()
  except OSError: return False
  try: return hashlib.sha256(so_path.read_bytes()).hexdigest() == want
  except OSError: return False


class Program:
  """A compiled C function, callable with NumPy arrays and Python scalars. src is C text: a rendered kernel
  (render_c's result carries its signature) or hand-written C, whose `void name(...)` line is read."""

  def __init__(self, src: str, name: str, flags: tuple[str, ...] | None = None):
    check_identifier(name)   # the name becomes a file name and a symbol: nothing else may reach the disk or cc
    self.src, self.name = src, name
    full = src if src.lstrip().startswith("#") else PRELUDE + src
    self.flags = tuple(flags) if flags is not None else FLAGS
    signature = getattr(src, "signature", None)
    self.params = args_of(signature) if signature is not None else signature_from_c(src, name)
    cc = compiler()
    key = cache_key(full, cc, self.flags)
    # the content hash is in the file name: a rebuilt object never reuses a path this process already loaded
    self.path = cache_dir() / f"{name}-{key}.so"
    t0 = time.perf_counter()
    self.cached = _intact(self.path)
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

  def __repr__(self): return f"Program({self.name!r}, {len(self.params)} params, cached={self.cached})"

  def _convert(self, k: int, arg, a: Arg):
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
      return self.ffi.from_buffer("char[]" if self.rendered else f"{a.ctype}[]", arg, require_writable=a.writes)
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
    self.fn(*[self._convert(k, a, p) for k, (a, p) in enumerate(zip(args, self.params))])


def clear_cache() -> None:
  shutil.rmtree(cache_dir(), ignore_errors=True)

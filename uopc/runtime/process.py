"""The process settings the runtime needs, applied once by configure_process() (uopc.runtime calls it at import).

  configure_process()   the OpenMP wait policy, glibc's malloc policy, libgomp pinned: each only where the user set
                        nothing of their own; calling it again changes nothing

Each setting answers a measured problem (NOTES 1, 20, 25). libgomp reads its settings once, when it is loaded, so
this runs before any kernel is.
"""
from __future__ import annotations
import ctypes
import ctypes.util
import os
import platform
import shutil
import subprocess

# libgomp's idle threads spin for a while after each parallel loop (GOMP_SPINCOUNT, 300,000 by default) before they
# sleep. On a machine shared with other busy processes that spinning takes the cores the next loop needs, and small
# kernels ran many times slower (NOTES 20). A user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept.
WAIT_POLICY = {"OMP_WAIT_POLICY": "PASSIVE"}
WAIT_KEYS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")   # any of these: the user chose a policy


_set_here: set[str] = set()   # the variables set_wait_policy put into this process's environment


def set_wait_policy(environ=os.environ) -> None:
  if not any(k in environ for k in WAIT_KEYS):
    environ.update(WAIT_POLICY)
    if environ is os.environ: _set_here.update(WAIT_POLICY)


def user_environ(**extra: str) -> dict[str, str]:
  """This process's environment as the user gave it, plus extra: for a child that runs a peer (PyTorch, NumPy) or
  another uopc process, which must not take uopc's own settings for the user's (a PASSIVE wait policy slowed
  PyTorch's threads twofold in a bench started from a process that had imported uopc, NOTES 45)."""
  return {**{k: v for k, v in os.environ.items() if k not in _set_here}, **extra}


def passive_wait(environ=os.environ) -> bool:
  """Whether OpenMP's idle workers sleep (the policy above, or the user's own PASSIVE)."""
  return environ.get("OMP_WAIT_POLICY", "").strip().upper() == "PASSIVE"


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


_pinned: list = []   # the OpenMP runtime, loaded once and never unloaded
# Homebrew's libomp on a Mac (keg-only, so on no search path): `brew --prefix libomp` answers, or its usual places on
# Apple Silicon and on Intel. Apple's clang builds with it through -Xpreprocessor (uopc.runtime.build.libomp_flags).
LIBOMP_PREFIXES = ("/opt/homebrew/opt/libomp", "/usr/local/opt/libomp")


def libomp_prefixes() -> list[str]:
  """The Homebrew libomp installations here (their prefix holds include/omp.h), `brew --prefix libomp`'s first."""
  found = []
  if brew := shutil.which("brew"):
    try: found.append(subprocess.run([brew, "--prefix", "libomp"], capture_output=True, text=True, timeout=30)
                      .stdout.strip())
    except (OSError, subprocess.SubprocessError): pass
  return [p for p in dict.fromkeys(found + list(LIBOMP_PREFIXES)) if p and os.path.isfile(f"{p}/include/omp.h")]


def pin_openmp_runtime() -> None:
  """Load libgomp (or libomp) once and never unload it (ctypes never calls dlclose). Without this, the process can
  crash at exit: cffi unloads each kernel's object when it is collected, the last unload takes libgomp with it, and
  libgomp's idle worker threads are left running unmapped code (NOTES 1)."""
  if _pinned: return
  paths = [ctypes.util.find_library(name) for name in ("gomp", "omp")]
  if platform.system() == "Darwin": paths += [f"{p}/lib/libomp.dylib" for p in libomp_prefixes()]
  for path in paths:
    if path:
      try: _pinned.append(ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)); return
      except OSError: pass


def omp_thread_calls():
  """(omp_get_max_threads, omp_set_num_threads) of the pinned OpenMP runtime, or None where there is none."""
  for lib in _pinned:
    try: return lib.omp_get_max_threads, lib.omp_set_num_threads
    except AttributeError: pass
  return None


def configure_process(environ=os.environ) -> None:
  """The wait policy first (libgomp reads it when it is loaded), then the malloc policy, then libgomp pinned. Each
  step keeps what the user set and does nothing the second time, so calling this again is harmless."""
  set_wait_policy(environ)
  set_malloc_policy(environ)
  pin_openmp_runtime()

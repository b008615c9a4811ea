"""Running the C compiler: source -> a shared object in the cache, whole or not at all.

  locate(src, name, cc, flags)          the flags a kernel gets (-march=native as the target says, uopc.runtime.machine;
                                        without -fopenmp where cc has no OpenMP; the workarounds of the compiler's
                                        known wrong code, uopc.runtime.compiler_bugs), its cache
                                        entry, and whether that entry is intact
  build(src, so_path, cc, flags)        compile into the entry: atomic rename, a checksum beside it, one retry with FMA
                                        contraction off when the compiler itself crashes (NOTES 32)
  build_lock(path), intact(path)        one build per entry at a time; an entry is used only if its checksum matches
  UOPC_SHARED_CACHE, UOPC_SHARED_MISSES  a read-only cache someone else fills (a grader's), looked up by exact entry
                                        name before compiling; the source of each kernel compiled for want of it
  run_compiler(cmd, timeout)            the compiler in a process group of its own, memory-limited, killed whole on a
                                        timeout or a Ctrl-C (NOTES 30, 34)
"""
from __future__ import annotations
import contextlib
import functools
import hashlib
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import warnings
from pathlib import Path
from uopc.helpers import cache
from uopc.runtime.compiler_bugs import workarounds
from uopc.runtime.objfile import complete_object
from uopc.runtime.machine import resolve, target
from uopc.runtime.process import libomp_prefixes
from uopc.runtime.toolchain import CompileError, cache_dir, cache_key, compiler_version, numbered

_locks_lock = threading.Lock()
_build_locks: dict[Path, threading.Lock] = {}


def build_lock(path: Path) -> threading.Lock:
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


def build(src: str, so_path: Path, cc: str, flags: tuple[str, ...], objects: tuple[Path, ...] = (),
          keep_object: bool = False) -> None:
  """Compile into a temporary file next to the cache entry, then rename it into place (atomic for readers). objects:
  object files linked in (a linked step program). keep_object: the compile stops at an object file, kept beside the
  entry (object_path) for a linked step (uopc.runtime.graph.kernel_objects), and the entry is linked from it: the
  same compile, so the same machine code. An entry named .o is that object alone."""
  so_path.parent.mkdir(parents=True, exist_ok=True)
  with tempfile.TemporaryDirectory(dir=so_path.parent, prefix=".build-") as tmp:
    c_file, out, obj = Path(tmp) / "kernel.c", Path(tmp) / "kernel.so", Path(tmp) / "kernel.o"
    c_file.write_text(src)
    only_object = so_path.suffix == ".o"
    def compile_with(flags: tuple[str, ...]) -> subprocess.CompletedProcess:
      if only_object or keep_object: cmd = [cc, *object_flags(flags), "-o", str(obj), str(c_file)]
      else: cmd = [cc, *flags, "-o", str(out), str(c_file), *map(str, objects), "-lm"]
      try: return run_compiler(cmd, COMPILE_TIMEOUT_S)
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
    if r.returncode == 0 and keep_object: r = run_compiler([cc, *flags, "-o", str(out), str(obj), "-lm"],
                                                           COMPILE_TIMEOUT_S)
    if r.returncode != 0:
      raise CompileError(f"{cc} failed with exit code {r.returncode}:\n{r.stderr.strip()}\n\nsource:\n{numbered(src)}")
    if not only_object: _place(out, so_path, cc, flags)
    if only_object or keep_object: _place(obj, so_path if only_object else object_path(so_path), cc, flags)
    if (misses := os.environ.get("UOPC_SHARED_MISSES")) and not only_object:   # an object is no shared entry
      _leave_source(src, Path(misses) / f"{so_path.stem}.c")


def _place(out: Path, path: Path, cc: str, flags: tuple[str, ...]) -> None:
  """The compiler's output renamed into its cache entry, its checksum beside it."""
  # a "compiler" that exits 0 without writing (CC=true, a wrapper script that lost its arguments) is named here,
  # not left to a FileNotFoundError on the temporary path or a dlopen of garbage
  data = out.read_bytes() if out.is_file() else None
  if data is None or not complete_object(data):
    kind = "shared object" if out.suffix == ".so" else "object file"
    wrote = "no output file" if data is None else f"{len(data)} bytes that are not a complete {kind}"
    raise CompileError(f"{cc} exited 0 but wrote {wrote} (asked for {out.name} with: {cc} {' '.join(flags)}); "
                       f"is CC a C compiler?")
  sum_tmp = out.with_suffix(".sum")
  sum_tmp.write_text(hashlib.sha256(data).hexdigest())
  os.replace(out, path)
  os.replace(sum_tmp, path.with_suffix(".sum"))


def object_flags(flags: tuple[str, ...]) -> tuple[str, ...]:
  """The flags of a compile that stops at an object file: -c for -shared (a link flag: the compile is the same)."""
  return tuple("-c" if f == "-shared" else f for f in flags)


def object_path(so_path: Path) -> Path:
  """Where the object file a cache entry was linked from is kept (build(keep_object=True)), in this process's cache
  (the entry may be a shared cache's, which this process does not write)."""
  return cache_dir() / f"{so_path.stem}-own.o"


def _leave_source(src: str, path: Path) -> None:
  """The source of a kernel the shared cache lacked, for whoever fills that cache (it compiles the text itself and
  names the entry by its own hash of it: nothing compiled here is ever taken from here)."""
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(src)
  except OSError: pass   # only a hint: the kernel is built and cached here all the same


COMPILE_TIMEOUT_S = 300
COMPILER_MEMORY = 4 << 30   # a runaway kernel fails to compile with an error, instead of taking the machine's memory


def _limit_compiler() -> None:
  try: resource.setrlimit(resource.RLIMIT_AS, (COMPILER_MEMORY, COMPILER_MEMORY))
  except (ValueError, OSError): pass


WAIT_SLICE_S = 0.1   # the longest the main thread waits on the compiler before it looks at its signals again


def run_compiler(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
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


def libomp_flags(prefix: str) -> tuple[str, ...]:
  """OpenMP for Apple's clang, which has no -fopenmp of its own: its front end takes the pragmas through
  -Xpreprocessor, and Homebrew's libomp (keg-only: on no default search path) gives omp.h and the runtime."""
  return ("-Xpreprocessor", OPENMP_FLAG, f"-I{prefix}/include", f"-L{prefix}/lib", "-lomp")


def _links(cc: str, flags: tuple[str, ...]) -> bool:
  """Whether cc with flags builds and links a shared object with an OpenMP loop (a test compile)."""
  with tempfile.TemporaryDirectory(prefix="uopc-openmp-") as tmp:
    c_file = Path(tmp) / "probe.c"
    c_file.write_text(OPENMP_PROBE)
    cmd = [cc, *flags, "-shared", "-fPIC", "-o", str(c_file.with_suffix(".so")), str(c_file)]
    try: return run_compiler(cmd, COMPILE_TIMEOUT_S).returncode == 0
    except (OSError, subprocess.TimeoutExpired): return False


@functools.cache
def openmp_flags(cc: str) -> tuple[str, ...] | None:
  """The flags that give cc OpenMP: -fopenmp where it builds and links (gcc; clang with libomp), else on a Mac
  Homebrew's libomp through -Xpreprocessor (libomp_flags); None where neither does (clang without libomp fails with
  `cannot find -lomp`, Apple's with `unsupported option '-fopenmp'`). Test compiles, once per process and compiler,
  asked only when a kernel's OpenMP build is not in the cache."""
  candidates = [(OPENMP_FLAG,)]
  if platform.system() == "Darwin": candidates += [libomp_flags(p) for p in libomp_prefixes()]
  return next((f for f in candidates if _links(cc, f)), None)


def openmp_works(cc: str) -> bool: return openmp_flags(cc) is not None


def links_objects(cc: str) -> bool:
  """Whether a step program can link its kernels' own objects (uopc.render_step.LINKED): gcc's OpenMP (libgomp,
  whose GOMP_parallel the link wraps) and a linker that wraps a symbol (GNU ld on Linux). Elsewhere the step
  compiles its kernels' text itself."""
  return platform.system() == "Linux" and "clang" not in compiler_version(cc) and openmp_flags(cc) == (OPENMP_FLAG,) \
    and shutil.which("objcopy") is not None   # binutils', which renames a kernel's function for the step


cache("runtime.openmp_flags", openmp_flags)


_warned_serial: set[str] = set()


def serial_flags(flags: tuple[str, ...], cc: str) -> tuple[str, ...]:
  """flags without -fopenmp: the pragmas are then ignored and the kernel runs on one thread. Said once per process."""
  if cc not in _warned_serial:
    _warned_serial.add(cc)
    warnings.warn(f"uopc: {cc} cannot build with {OPENMP_FLAG} (no OpenMP runtime: for clang install libomp, e.g. "
                  f"`apt install libomp-dev`, or on a Mac `brew install libomp`); kernels are compiled without it and "
                  f"run on one thread", RuntimeWarning, stacklevel=4)
  return tuple(f for f in flags if f != OPENMP_FLAG)


def with_openmp(flags: tuple[str, ...], cc: str) -> tuple[str, ...]:
  """flags with -fopenmp replaced by what gives cc OpenMP (openmp_flags), or removed where nothing does."""
  omp = openmp_flags(cc)
  if omp is None: return serial_flags(flags, cc)
  return tuple(g for f in flags for g in (omp if f == OPENMP_FLAG else (f,)))


def locate(src: str, name: str, cc: str, flags: tuple[str, ...], suffix: str = ".so") -> tuple[tuple[str, ...], Path,
                                                                                             bool]:
  """The flags a kernel is built with, its cache entry (the content hash is in the file name: a rebuilt object never
  reuses a path this process already loaded), and whether that entry is intact. A compiler without -fopenmp gets
  what gives it OpenMP (Apple's clang: Homebrew's libomp), or the flags without it; a kernel whose -fopenmp build is
  cached never asks."""
  if "-march=native" in flags: flags = resolve(flags, target(cc=cc))   # -> UOPC_MARCH's level: in the key too
  flags = flags + workarounds(cc, flags, run_compiler)   # known wrong code of this compiler, checked by canaries
  path, ok = found(cache_dir() / f"{name}-{cache_key(src, cc, flags)}{suffix}")
  if ok or OPENMP_FLAG not in flags or openmp_flags(cc) == (OPENMP_FLAG,): return flags, path, ok
  flags = with_openmp(flags, cc)
  path, ok = found(cache_dir() / f"{name}-{cache_key(src, cc, flags)}{suffix}")
  return flags, path, ok


def found(path: Path) -> tuple[Path, bool]:
  """(path, True) when that entry is intact; else (the same entry in the shared cache, UOPC_SHARED_CACHE, True) when
  that one is; else (path, False). A shared entry is opened by its exact name, which only the source hashes to: a
  folder the reader may not list gives away nothing but the kernels whose source it already has."""
  if intact(path): return path, True
  other = Path(shared) / path.name if (shared := os.environ.get("UOPC_SHARED_CACHE")) else None
  return (other, True) if other is not None and intact(other) else (path, False)


def intact(so_path: Path) -> bool:
  """A cache entry is used only if its checksum matches and it is a whole object: a truncated or corrupted object is
  rebuilt, never loaded."""
  try: want = so_path.with_suffix(".sum").read_text().strip()
  except OSError: return False
  try: data = so_path.read_bytes()
  except OSError: return False
  return hashlib.sha256(data).hexdigest() == want and complete_object(data)

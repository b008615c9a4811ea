"""The C toolchain and the machine it builds for: which compiler, what it targets, where its objects are cached.

  compiler(), compiler_version(cc)        $CC (default cc) and the first line of its --version
  machine_id(), native_target(cc)         the CPU and what -march=native means to cc: both part of a cache key
  vector_bits(cc), native_lanes()         the widest vector register of the target (UOPC_MARCH, else this CPU: see
                                          uopc.runtime.machine), in bits and in floats
  cache_dir(), cache_key(src, cc, flags)  where compiled objects live, and the hash that names one

CompileError (and numbered, the source with line numbers it quotes) is here too: the compiler's answer to bad C.
"""
from __future__ import annotations
import functools
import hashlib
import os
import platform
import re
import subprocess
from pathlib import Path
from uopc.helpers import cache
from uopc.runtime.machine import ARCHES, HOST_ARCH, compiler, target  # noqa: F401  (compiler: uopc.runtime exports it)


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
# macOS has no /proc/cpuinfo: sysctl names the CPU (machdep.cpu.brand_string: "Apple M2") and its features
# (hw.optional.*: Intel's AVX levels, arm64's FEAT_* extensions)
SYSCTL_CPU = ("sysctl", "machdep.cpu", "hw.cpufamily", "hw.cpusubtype", "hw.optional")


def cpu_identity(cpuinfo: str) -> str:
  keys = "|".join(re.escape(k) for k in CPUINFO_KEYS)
  return "\n".join(sorted(set(re.findall(rf"^(?:{keys})\s*:.*$", cpuinfo, re.M))))


def _run_quietly(cmd: list[str]) -> subprocess.CompletedProcess | None:
  try: return subprocess.run(cmd, capture_output=True, text=True, timeout=30)
  except (OSError, subprocess.SubprocessError): return None


def sysctl_cpu() -> str:
  """The CPU as macOS's sysctl describes it, without counts of cores (those are not the CPU); '' without sysctl."""
  r = _run_quietly(list(SYSCTL_CPU))
  return "\n".join(line for line in r.stdout.splitlines() if "count" not in line) if r else ""


def cpu_brand() -> str:
  """The CPU's name: macOS's machdep.cpu.brand_string ("Apple M2"), elsewhere /proc/cpuinfo's model name; else ''."""
  if platform.system() == "Darwin": m = re.search(r"^machdep\.cpu\.brand_string:\s*(.*)$", sysctl_cpu(), re.M)
  else:
    try: m = re.search(r"^model name\s*:\s*(.*)$", Path("/proc/cpuinfo").read_text(), re.M)
    except OSError: m = None
  return m.group(1).strip() if m else ""


@functools.cache
def machine_id() -> str:
  """-march=native makes the object depend on the CPU, so the CPU is part of the cache key: /proc/cpuinfo's lines,
  or on a Mac sysctl's."""
  if platform.system() == "Darwin": cpu = sysctl_cpu()
  else:
    try: cpu = cpu_identity(Path("/proc/cpuinfo").read_text())
    except OSError: cpu = ""
  return f"{platform.machine()}|{platform.system()}|{cpu}"


@functools.cache
def native_target(cc: str) -> str:
  """What the native flag (-march=native; -mcpu=native on ARM) means to this compiler on this CPU (the options its
  driver passes on: gcc's -m flags, clang's -target-cpu/-target-feature), so that a CPU /proc/cpuinfo does not
  describe still gets its own entry."""
  native = ARCHES[HOST_ARCH].native if HOST_ARCH in ARCHES else ("-march=native",)
  r = _run_quietly([cc, *native, "-###", "-x", "c", "-S", os.devnull, "-o", os.devnull])
  words = r.stderr.replace('"', " ").split() if r else []
  named = ("-target-cpu", "-target-feature", "--param")
  return " ".join(w for i, w in enumerate(words) if w.startswith("-m") or w in named or (i and words[i - 1] in named))


def vector_bits(cc: str) -> int:
  """The widest vector register the target gives this compiler: 512 (AVX-512), 256 (AVX2), else 128 (SSE, NEON).
  The target is UOPC_MARCH's level where it is set, else -march=native (uopc.runtime.machine.target). A register
  tile is sized by it (uopc.kernels.flash_vec, uopc.codegen.gemm_vec)."""
  return target(cc=cc).isa.lanes * 32


def native_lanes() -> int:
  """Floats per vector register for the target: 16 with AVX-512, 8 with AVX2, 4 with SSE or NEON."""
  return target().isa.lanes


def cache_key(src: str, cc: str, flags: tuple[str, ...]) -> str:
  parts = [src, " ".join(flags), compiler_version(cc), machine_id(), native_target(cc)]
  return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


# what the toolchain was asked once per process (versions, CPU, target, vector width): asked again after clear_caches()
cache("runtime.compiler_versions", _version_cache)
for _fn in (machine_id, native_target): cache(f"runtime.{_fn.__name__}", _fn)


def keeps_in_place_bits() -> bool:
  """Whether this C compiler keeps a kernel written in place bit for bit: gcc does, through `#pragma GCC ivdep`
  (step_calls.write_in_place); clang ignores that pragma and vectorized an aliased AdamW kernel otherwise (24 of 512
  values 1 ulp off the kernel-by-kernel replay without OpenMP), so under clang the write-backs stay copies."""
  return "clang" not in compiler_version(compiler())

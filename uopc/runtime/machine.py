"""The machine a kernel is built for: its vector ISA (registers, lanes, FMA units) and the flags that target it.

  ISAS                          the table every tile heuristic reads: vector registers, float lanes, FMA units
  target(march=None, cc=None)   what kernels are built for now: UOPC_MARCH (or Context(UOPC_MARCH=...)), else this CPU
  resolve(flags, t)             a kernel's flags for a target: -march=native replaced, other architectures' flags gone
  isa_of(lanes)                 the ISA a lane count means here (the current target's where the lanes agree)
  with tiles_for(ISAS["neon"]):  tiles sized for another ISA while kernels still build for this one (what the aarch64
                                cross-compile test renders: NEON's tiles, run here, then compiled for ARM)

BLIS sizes a micro-kernel from the register file and the FMA units (haswell sgemm 6x16: 12 accumulators of 16 ymm
registers; skx 32x6): a tile needs an accumulator register per vector of C, plus the vectors of B and a broadcast of
A, and enough independent accumulators to cover the FMA latency times the units (RESEARCH "Other CPUs").
UOPC_MARCH=x86-64-v3 builds AVX2 code on an AVX-512 machine (or any -march value the CPU can run): it replaces
-march=native and the lane count, and is part of every cache key (the flags are in the compiled-object key, the value
in Options and in tuned.json's machine key).
"""
from __future__ import annotations
import contextlib
import dataclasses
import functools
import os
import platform
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from uopc.helpers import MARCH, cache


@dataclass(frozen=True)
class ISA:
  name: str
  lanes: int          # float32 lanes of one vector register
  registers: int      # vector registers the compiler can allocate
  fma_units: int      # vector multiply-adds issued per cycle
  fma_latency: int    # cycles from a multiply-add to its result
  fma_asm: str        # the mnemonic its multiply-add has in assembly (uopc.runtime.asm finds hot loops by it)

  @property
  def chains(self) -> int:
    """Independent FMA chains that keep every unit busy (latency x units), two more for slack, and never more than
    the registers leave room for (two hold the multiplier and the addend)."""
    return min(self.fma_units * self.fma_latency + 2, self.registers - 2)


# AVX-512: 32 zmm (Zen 4 issues one zmm FMA a cycle on two 256-bit pipes, Intel server parts two); AVX2: 16 ymm, two
# FMA pipes, latency 4-5 (Haswell, Zen 2: 5); SSE4.2 (x86-64-v2) has no FMA: a multiply and an add; NEON: 32 q.
ISAS = {
  "avx512": ISA("avx512", lanes=16, registers=32, fma_units=2, fma_latency=4, fma_asm="vfmadd"),
  "avx2": ISA("avx2", lanes=8, registers=16, fma_units=2, fma_latency=5, fma_asm="vfmadd"),
  "sse": ISA("sse", lanes=4, registers=16, fma_units=2, fma_latency=4, fma_asm="mulps"),
  "neon": ISA("neon", lanes=4, registers=32, fma_units=2, fma_latency=4, fma_asm="fmla"),
}
# which ISA a compiler targets, from the macros it predefines for the flags (first match)
ISA_MACROS = (("__AVX512F__", "avx512"), ("__AVX2__", "avx2"), ("__ARM_NEON", "neon"), ("__SSE2__", "sse"))


@dataclass(frozen=True)
class Arch:
  native: tuple[str, ...]       # what uopc builds with when no level is named
  only_here: tuple[str, ...]    # flag prefixes only this architecture's compiler takes

  def named(self, march: str) -> tuple[str, ...]:
    """The flag that names a level or CPU: -march on x86; -march=armv8.2-a or -mcpu=neoverse-n1 on ARM."""
    if self is ARCHES["aarch64"] and not march.startswith("armv"): return (f"-mcpu={march}",)
    return (f"-march={march}",)


ARCHES = {"x86_64": Arch(("-march=native",), ("-mprefer-vector-width",)),
          "aarch64": Arch(("-mcpu=native",), ())}
HOST_ARCH = {"AMD64": "x86_64", "arm64": "aarch64"}.get(platform.machine(), platform.machine())
# the names README's install table and scripts/platform_check.py give a student's machine
SYSTEM_NAMES = {"Darwin": "macOS", "Linux": "Linux", "Windows": "Windows"}
ARCH_NAMES = {("macOS", "aarch64"): "arm64", "x86_64": "x86-64", "aarch64": "ARM64"}


def platform_name(system: str | None = None, arch: str = HOST_ARCH) -> str:
  """This machine as the install table names it: "Linux x86-64", "Linux ARM64", "macOS arm64", "macOS x86-64"."""
  name = SYSTEM_NAMES.get(system or platform.system(), system or platform.system())
  return f"{name} {ARCH_NAMES.get((name, arch), ARCH_NAMES.get(arch, arch))}"


# the predefined macro of each feature a level may use -> its name in /proc/cpuinfo: a level whose macros name a
# feature this CPU lacks builds code that would stop on an illegal instruction
CPU_FEATURES = {
  "x86_64": {"__SSE3__": "pni", "__SSSE3__": "ssse3", "__SSE4_1__": "sse4_1", "__SSE4_2__": "sse4_2",
             "__POPCNT__": "popcnt", "__AVX__": "avx", "__AVX2__": "avx2", "__FMA__": "fma", "__F16C__": "f16c",
             "__BMI__": "bmi1", "__BMI2__": "bmi2", "__MOVBE__": "movbe", "__LZCNT__": "abm", "__AVX512F__": "avx512f",
             "__AVX512BW__": "avx512bw", "__AVX512CD__": "avx512cd", "__AVX512DQ__": "avx512dq",
             "__AVX512VL__": "avx512vl", "__AVX512VNNI__": "avx512_vnni", "__AVX512BF16__": "avx512_bf16",
             "__AVX512FP16__": "avx512_fp16", "__AVX512IFMA__": "avx512ifma", "__AVX512VBMI__": "avx512vbmi",
             "__AVXVNNI__": "avx_vnni", "__AMX_TILE__": "amx_tile",
             # Xeon Phi's AVX-512 (-march=knl, knm), which no other CPU has
             "__AVX512ER__": "avx512er", "__AVX512PF__": "avx512pf", "__AVX5124FMAPS__": "avx512_4fmaps"},
  "aarch64": {"__ARM_FEATURE_SVE": "sve", "__ARM_FEATURE_SVE2": "sve2", "__ARM_FEATURE_DOTPROD": "asimddp",
              "__ARM_FEATURE_FP16_VECTOR_ARITHMETIC": "asimdhp", "__ARM_FEATURE_ATOMICS": "atomics",
              "__ARM_FEATURE_BF16_VECTOR_ARITHMETIC": "bf16", "__ARM_FEATURE_MATMUL_INT8": "i8mm"},
}


@dataclass(frozen=True)
class Target:
  """What kernels are built for: the architecture, the UOPC_MARCH value ("" for this CPU), the flags that replace
  -march=native, and the ISA those flags give the compiler."""
  arch: str
  march: str
  flags: tuple[str, ...]
  isa: ISA


class MarchError(ValueError):
  """UOPC_MARCH names a level the compiler does not know, or one this CPU cannot run."""


def _macros(cc: str, flags: tuple[str, ...]) -> str | None:
  try: r = subprocess.run([cc, *flags, "-dM", "-E", "-x", "c", os.devnull], capture_output=True, text=True, timeout=60)
  except (OSError, subprocess.SubprocessError): return None
  return r.stdout if r.returncode == 0 else None


def _cpu_flags() -> set[str]:
  try: text = Path("/proc/cpuinfo").read_text()
  except OSError: return set()
  return {w for m in re.finditer(r"^(?:flags|Features)\s*:(.*)$", text, re.M) for w in m.group(1).split()}


@functools.cache
def target_for(cc: str, march: str, arch: str = HOST_ARCH, check: bool = True) -> Target:
  """The target `march` means to `cc` on `arch` (the host's unless cross-compiling). check: refuse a level this CPU
  cannot run (only where arch is the host's and /proc/cpuinfo says what the CPU has)."""
  spec = ARCHES.get(arch)
  flags = (spec.named(march) if march else spec.native) if spec else (() if not march else (f"-march={march}",))
  macros = _macros(cc, flags)
  if macros is None and not march and flags:   # a compiler that rejects its native flag (an older Apple clang and
    flags, macros = (), _macros(cc, ())         # -mcpu=native): its own default target (on a Mac's arm64, the M1)
  if macros is None:
    if march: raise MarchError(f"UOPC_MARCH={march!r}: {cc} rejects {' '.join(flags)} (not a level or CPU it knows)")
    macros = ""   # a compiler that cannot say: the narrowest vectors
  if check and march and arch == HOST_ARCH and (have := _cpu_flags()):
    missing = sorted(f for m, f in CPU_FEATURES.get(arch, {}).items() if re.search(rf"^#define {m} ", macros, re.M)
                     and f not in have)
    if missing:
      raise MarchError(f"UOPC_MARCH={march!r}: this CPU cannot run code built with {' '.join(flags)}: it lacks "
                       f"{', '.join(missing)} (/proc/cpuinfo). Name a lower level, e.g. x86-64-v3 (AVX2) or "
                       f"x86-64-v2 (SSE4.2), or unset UOPC_MARCH")
  name = next((isa for m, isa in ISA_MACROS if re.search(rf"^#define {m} ", macros, re.M)), "sse")
  return Target(arch, march, flags, ISAS[name])


_tiles_isa: list[ISA] = []   # tiles_for's ISA, innermost last


def compiler() -> str: return os.environ.get("CC", "cc")


def target(march: str | None = None, cc: str | None = None) -> Target:
  """What kernels are built for now: `march`, else UOPC_MARCH (a Context block may set it), else this CPU; its isa is
  tiles_for's inside such a block."""
  t = target_for(cc or compiler(), str(MARCH.value if march is None else march).strip())
  return dataclasses.replace(t, isa=_tiles_isa[-1]) if _tiles_isa else t


@contextlib.contextmanager
def tiles_for(isa: ISA):
  """Within the block, the heuristics and the lane count read `isa` (its registers and lanes) while the compile flags
  stay the target's: kernels tiled for another machine, built and run on this one (for the whole process, as a
  Context block is). Not in the caches' keys: start and end it with uopc.helpers.clear_caches()."""
  _tiles_isa.append(isa)
  try: yield isa
  finally: _tiles_isa.pop()


def resolve(flags: tuple[str, ...], t: Target) -> tuple[str, ...]:
  """flags for the target: -march=native becomes the target's flags, and a flag another architecture's compiler
  alone takes (x86's -mprefer-vector-width on ARM) is dropped."""
  foreign = tuple(p for a, spec in ARCHES.items() if a != t.arch for p in spec.only_here)
  out: list[str] = []
  for f in flags:
    if f == "-march=native": out.extend(t.flags)
    elif not (foreign and f.startswith(foreign)): out.append(f)
  return tuple(out)


def isa_of(lanes: int | ISA) -> ISA:
  """The ISA a lane count means: the current target's where its lanes are those, else the x86 one with that many
  (16 AVX-512, 8 AVX2, 4 SSE). An ISA is returned as it is."""
  if isinstance(lanes, ISA): return lanes
  here = target().isa
  if here.lanes == lanes: return here
  found = next((isa for isa in ISAS.values() if isa.lanes == lanes), None)
  if found is None: raise ValueError(f"no vector ISA has {lanes} float lanes (known: {sorted(ISAS)})")
  return found


# the x86-64 levels (psABI): what UOPC_MARCH names to build for another x86 machine's ISA
X86_LEVELS = {"x86-64-v4": "avx512", "x86-64-v3": "avx2", "x86-64-v2": "sse"}


def lower_levels() -> list[str]:
  """The x86 levels this CPU runs whose vectors are narrower than its own: what CI tests again (an AVX-512 machine:
  x86-64-v3 and x86-64-v2). None elsewhere."""
  if HOST_ARCH != "x86_64": return []
  own = target("").isa.lanes
  def runs(level: str) -> bool:
    try: target(level); return True
    except MarchError: return False
  return [lv for lv, isa in X86_LEVELS.items() if ISAS[isa].lanes < own and runs(lv)]


cache("runtime.target_for", target_for)

"""macOS without a Mac: the command lines uopc gives a Mac's compiler, and every kernel compiled for arm64 macOS.

1. uopc imported where platform.system() says Darwin and platform.machine() arm64 or x86_64, in a process of its own;
   CC is a stand-in for Apple's clang (it answers --version as Apple's, refuses a bare -fopenmp as Apple's does, and
   hands each command, mapped to this machine, to the real compiler), sysctl and brew stand-ins describe the Mac. The
   test reads the command lines the stand-in received: -mcpu=native on arm64 (nothing where that clang refuses it),
   -march=native and the x86 vector width on Intel, no -fopenmp without libomp (one thread, said once), Homebrew's
   libomp through -Xpreprocessor where it is installed, and the CPU named by sysctl in the cache key.
2. Debian's clang with --target=arm64-apple-macos compiles every kernel of the attention, GEMM and GPT plans (tiled for
   NEON, as tests/platforms/test_arm.py renders them) with those flags to a Mach-O arm64 object. There is no macOS SDK
   here: a
   small math.h and string.h declare the C library functions the kernels call (RESEARCH "Students' platforms"), so
   this checks uopc's C and flags for a Mac, not Apple's headers.
"""
from __future__ import annotations
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import pytest
from uopc.runtime.build import libomp_flags
from uopc.runtime.machine import ISAS, Target, resolve
from test_arm import neon_kernels  # noqa: F401  (the fixture, used by name: the kernels test_arm renders)

REAL_CC = shutil.which("cc") or shutil.which("gcc")
APPLE_CLANG = r'''#!/usr/bin/env bash
# Apple's clang as uopc meets it, on this Linux machine: each command logged, then mapped to the real compiler
here=$(dirname "$0")
printf '%s\n' "$*" >> "$here/calls"
if [ "$1" = --version ]; then
  echo "Apple clang version 15.0.0 (clang-1500.3.9.4)"; echo "Target: $FAKE_ARCH-apple-darwin23.4.0"; exit 0
fi
args=(); prev=; lomp=0; pre=0
for a in "$@"; do
  case "$a" in
    -fopenmp) if [ "$prev" != -Xpreprocessor ]; then echo "clang: error: unsupported option '-fopenmp'" >&2; exit 1; fi
              args+=(-fopenmp) ;;
    -Xpreprocessor) pre=1 ;;
    -lomp) lomp=1 ;;
    -I*|-L*) [ -e "${a:2}" ] || { echo "clang: warning: no such directory ${a:2}" >&2; } ;;
    -mcpu=native) if [ -n "$REFUSE_MCPU_NATIVE" ]; then
                    echo "clang: error: unsupported argument 'native' to option '-mcpu='" >&2; exit 1
                  fi
                  args+=(-march=native) ;;
    *) args+=("$a") ;;
  esac
  prev=$a
done
if [ $pre = 1 ] && [ $lomp = 0 ]; then echo "ld: Undefined symbols: ___kmpc_fork_call" >&2; exit 1; fi
if [ "$FAKE_ARCH" = arm64 ] && [[ " $* " == *" -dM "* ]]; then   # what the M1 predefines (a NEON machine)
  printf '#define __aarch64__ 1\n#define __arm64__ 1\n#define __ARM_NEON 1\n#define __ARM_FEATURE_FMA 1\n'; exit 0
fi
exec "$REAL_CC" "${args[@]}"
'''
SYSCTL = """#!/bin/sh
echo "machdep.cpu.brand_string: Apple M2"
echo "machdep.cpu.core_count: 8"
echo "hw.cpufamily: -634136515"
echo "hw.optional.arm.FEAT_DotProd: 1"
"""
# uopc on the Mac: a matmul and a bias through the default plans, checked against NumPy; what it saw of the machine
ON_A_MAC = """
import json, platform, sys, warnings
platform.system, platform.machine = (lambda: "Darwin"), (lambda: sys.argv[1])
import numpy as np
from uopc.tensor import Tensor
from uopc.runtime.machine import platform_name
from uopc.runtime.toolchain import cpu_brand, machine_id
a, b = (np.random.default_rng(s).standard_normal((48, 40)).astype(np.float32) for s in (0, 1))
got = (Tensor(a) @ Tensor(b.T) + 1).numpy()
np.testing.assert_allclose(got, a @ b.T + 1, rtol=1e-4, atol=1e-4)
print(json.dumps({"platform": platform_name(), "brand": cpu_brand(), "machine_id": machine_id()}))
"""


def fake_mac(tmp_path: Path, arch: str, libomp: bool = False, refuse_mcpu_native: bool = False) -> dict:
  """Run ON_A_MAC as on a Mac of this arch: {'out': its JSON, 'stderr', 'calls': the compiler's command lines,
  'prefix': the stand-in libomp}."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  for name, text in (("clang", APPLE_CLANG), ("sysctl", SYSCTL)):
    (bin_dir / name).write_text(text)
    (bin_dir / name).chmod(0o755)
  prefix = tmp_path / "libomp"
  if libomp:   # Homebrew's keg: omp.h and the library (empty here: the real compiler links its own -fopenmp)
    (prefix / "include").mkdir(parents=True)
    (prefix / "include" / "omp.h").write_text("/* stand-in */\n")
    (prefix / "lib").mkdir()
    (prefix / "lib" / "libomp.dylib").write_bytes(b"")
    (bin_dir / "brew").write_text(f'#!/bin/sh\n[ "$1 $2" = "--prefix libomp" ] && echo "{prefix}"\n')
    (bin_dir / "brew").chmod(0o755)
  env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CC": str(bin_dir / "clang"), "FAKE_ARCH": arch,
         "REAL_CC": REAL_CC, "UOPC_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
  env.pop("UOPC_MARCH", None)
  if refuse_mcpu_native: env["REFUSE_MCPU_NATIVE"] = "1"
  r = subprocess.run([sys.executable, "-c", ON_A_MAC, arch], env=env, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  calls = (bin_dir / "calls").read_text().splitlines()
  return {"out": json.loads(r.stdout.splitlines()[-1]), "stderr": r.stderr, "prefix": str(prefix),
          "kernels": [c for c in calls if "kernel.c" in c]}


@pytest.mark.skipif(REAL_CC is None, reason="no C compiler here")
def test_apple_silicon_without_libomp_builds_for_its_cpu_on_one_thread(tmp_path):
  mac = fake_mac(tmp_path, "arm64")
  assert mac["out"]["platform"] == "macOS arm64" and mac["out"]["brand"] == "Apple M2"
  assert "Apple M2" in mac["out"]["machine_id"] and "core_count" not in mac["out"]["machine_id"]   # sysctl's CPU
  assert mac["kernels"], "no kernel was compiled"
  for cmd in mac["kernels"]:
    words = cmd.split()
    assert "-mcpu=native" in words and "-fopenmp" not in words, cmd
    assert not any(w.startswith(("-march", "-mprefer-vector-width")) for w in words), cmd
    assert {"-O3", "-shared", "-fPIC"} <= set(words), cmd
  # Apple's clang has no OpenMP of its own: said once, on stderr, naming Homebrew's libomp
  assert mac["stderr"].count("one thread") == 1 and "brew install libomp" in mac["stderr"]


@pytest.mark.skipif(REAL_CC is None, reason="no C compiler here")
def test_apple_silicon_with_homebrews_libomp_builds_with_openmp(tmp_path):
  mac = fake_mac(tmp_path, "arm64", libomp=True)
  want = " ".join(libomp_flags(mac["prefix"]))
  assert mac["kernels"] and all(want in cmd and "-mcpu=native" in cmd for cmd in mac["kernels"]), mac["kernels"][:2]
  assert "one thread" not in mac["stderr"]


@pytest.mark.skipif(REAL_CC is None, reason="no C compiler here")
def test_an_apple_clang_that_refuses_mcpu_native_gets_its_own_default(tmp_path):
  mac = fake_mac(tmp_path, "arm64", refuse_mcpu_native=True)
  assert mac["kernels"] and not any("-mcpu" in cmd or "-march" in cmd for cmd in mac["kernels"]), mac["kernels"][:2]


@pytest.mark.skipif(REAL_CC is None, reason="no C compiler here")
def test_an_intel_mac_builds_for_its_cpu_with_the_x86_vector_width(tmp_path):
  mac = fake_mac(tmp_path, "x86_64")
  assert mac["out"]["platform"] == "macOS x86-64"
  for cmd in mac["kernels"]:
    words = cmd.split()
    assert "-march=native" in words and "-mprefer-vector-width=256" in words and "-fopenmp" not in words, cmd
    assert not any(w.startswith("-mcpu") for w in words), cmd
  assert mac["kernels"] and mac["stderr"].count("one thread") == 1


# ---- 2. every kernel, compiled for arm64 macOS by Debian's clang ----
CLANG = shutil.which("clang")
MAC_TARGET = "arm64-apple-macos11"
# what the kernels call from the C library, declared as macOS's headers declare it
MATH_H = "#pragma once\n#define INFINITY __builtin_inff()\n#define NAN __builtin_nanf(\"\")\n" \
         "#define HUGE_VALF __builtin_huge_valf()\n#define isnan(x) __builtin_isnan(x)\n" \
         "#define isinf(x) __builtin_isinf(x)\n#define isfinite(x) __builtin_isfinite(x)\n" + "".join(
           f"float {f}f(float);\ndouble {f}(double);\n" for f in
           ("exp", "exp2", "log", "log2", "sqrt", "sin", "cos", "tanh", "fabs", "floor", "ceil", "trunc", "round")) + \
         "".join(f"float {f}f(float, float);\ndouble {f}(double, double);\n" for f in ("pow", "fmax", "fmin", "fmod"))
STRING_H = "#pragma once\n#include <stddef.h>\nvoid *memcpy(void *, const void *, size_t);\n" \
           "void *memset(void *, int, size_t);\nvoid *memmove(void *, const void *, size_t);\n"
MACHO_ARM64 = (0xFEEDFACF, 0x0100000C)   # MH_MAGIC_64, CPU_TYPE_ARM64


def mac_target_compiles() -> str | None:
  """Why Debian's clang cannot stand in for Apple's here, or None."""
  if CLANG is None: return "no clang (apt-get install clang)"
  r = subprocess.run([CLANG, f"--target={MAC_TARGET}", "-c", "-x", "c", "-", "-o", os.devnull], input="int f;",
                     capture_output=True, text=True)
  return None if r.returncode == 0 else f"clang cannot target {MAC_TARGET}: {r.stderr.strip()[:200]}"


def mac_compile(src: str, flags: tuple[str, ...], out: Path, stubs: Path, resource: str) -> str:
  r = subprocess.run([CLANG, f"--target={MAC_TARGET}", *flags, "-nostdinc", "-isystem", str(stubs), "-isystem",
                      f"{resource}/include", "-c", "-o", str(out), "-x", "c", "-"], input=src, capture_output=True,
                     text=True, timeout=600)
  if r.returncode != 0: return r.stderr.strip()[:1500]
  magic, cpu = struct.unpack_from("<II", out.read_bytes())
  return "" if (magic, cpu) == MACHO_ARM64 else f"not a Mach-O arm64 object: magic {magic:#x}, cpu type {cpu:#x}"


@pytest.mark.skipif(bool(mac_target_compiles()), reason=str(mac_target_compiles()))
def test_every_kernel_compiles_for_arm64_macos(neon_kernels):  # noqa: F811  (the fixture from test_arm)
  # what uopc gives Apple's clang on an M-series Mac with Homebrew's libomp: -mcpu=native there, an M1 here
  mac = Target("aarch64", "", ("-mcpu=apple-m1",), ISAS["neon"])
  omp = libomp_flags("/opt/homebrew/opt/libomp")
  kernels = dict(neon_kernels)
  assert len(kernels) >= 20 and any("f32x4" in src for src in kernels)
  flag_sets = {src: tuple(g for f in resolve(flags, mac) for g in (omp if f == "-fopenmp" else (f,)))
               for src, flags in kernels.items()}
  for flags in set(flag_sets.values()):
    assert "-mcpu=apple-m1" in flags and "-Xpreprocessor" in flags and "-mprefer-vector-width=256" not in flags
  resource = subprocess.run([CLANG, "-print-resource-dir"], capture_output=True, text=True).stdout.strip()
  with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(2) as pool:
    stubs = Path(tmp) / "include"
    stubs.mkdir()
    (stubs / "math.h").write_text(MATH_H)
    (stubs / "string.h").write_text(STRING_H)
    jobs = {src: pool.submit(mac_compile, src, flag_sets[src], Path(tmp) / f"k{i}.o", stubs, resource)
            for i, src in enumerate(kernels)}
    failed = {src.splitlines()[-1][:80]: j.result() for src, j in jobs.items() if j.result()}
  assert failed == {}, f"{len(failed)} of {len(kernels)} failed for {MAC_TARGET}: {textwrap.shorten(str(failed), 3000)}"

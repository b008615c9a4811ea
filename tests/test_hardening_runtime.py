"""The runtime under hostile but realistic conditions: odd cache paths, damaged cache entries, CPUs the cache key must
tell apart, a compiler without OpenMP, kernels that never end, names that are not C identifiers."""
import hashlib
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
import pytest
from uopc import runtime
from uopc.runtime import Program

pytestmark = pytest.mark.ch02

ADD = """void add(const float* a, const float* b, float* out, int n) {
  for (int i = 0; i < n; i++) out[i] = a[i] + b[i];
}"""
RUN_ADD = f"""if 1:
  import numpy as np
  from uopc.runtime import Program
  prg = Program({ADD!r}, "add")
  a = np.arange(4, dtype=np.float32); out = np.zeros(4, np.float32)
  prg(a, a, out, 4)
  print(prg.cached, out.tolist())
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
  monkeypatch.setenv("UOPC_CACHE_DIR", str(tmp_path / "cache"))
  return tmp_path / "cache"


def python(code: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
  """Run code in a fresh process (a crash there, SIGBUS or SIGSEGV, is a return code here, not a dead test run)."""
  return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True,
                        env={**os.environ, "OMP_NUM_THREADS": "1", **env}, timeout=300)


# ---- the cache directory and damaged entries ----
def test_relative_cache_dir_builds_once_and_loads(tmp_path):
  runs = [python(RUN_ADD, cwd=tmp_path, UOPC_CACHE_DIR=".") for _ in range(2)]
  assert [(r.returncode, r.stdout.strip()) for r in runs] == [(0, "False [0.0, 2.0, 4.0, 6.0]"),
                                                             (0, "True [0.0, 2.0, 4.0, 6.0]")], runs[0].stderr
  assert len(list(tmp_path.glob("add-*.so"))) == 1


def test_cache_dir_is_absolute(monkeypatch):
  monkeypatch.setenv("UOPC_CACHE_DIR", "some/where")
  assert runtime.cache_dir().is_absolute() and runtime.cache_dir() == Path.cwd() / "some/where"


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.7, 0.95])
def test_truncated_entry_with_a_matching_checksum_is_rebuilt_not_mapped(cache, keep):
  # before the ELF check, dlopen mapped the short file and died with SIGBUS (return code -7) at 0.1 to 0.7
  assert python(RUN_ADD, UOPC_CACHE_DIR=str(cache)).stdout.strip() == "False [0.0, 2.0, 4.0, 6.0]"
  so = next(cache.glob("*.so"))
  size = so.stat().st_size
  so.write_bytes(so.read_bytes()[:int(size * keep)])
  so.with_suffix(".sum").write_text(hashlib.sha256(so.read_bytes()).hexdigest())
  r = python(RUN_ADD, UOPC_CACHE_DIR=str(cache))
  assert (r.returncode, r.stdout.strip()) == (0, "False [0.0, 2.0, 4.0, 6.0]"), r.stderr
  assert so.stat().st_size == size


def test_complete_object_checks_elf_and_macho_extents():
  built = Program(ADD, "add").path.read_bytes()
  assert runtime._complete_object(built) and not runtime._complete_object(built[:len(built) - 1])
  assert not runtime._complete_object(b"#!/bin/sh\n") and not runtime._complete_object(b"\x7fELF")
  # a minimal 64-bit Mach-O: header, one LC_SEGMENT_64 (72 bytes) whose file extent is bytes 0..200
  seg = struct.pack("<II16sQQQQ", runtime.LC_SEGMENT_64, 72, b"__TEXT", 0, 200, 0, 200).ljust(72, b"\0")
  macho = (runtime.MACHO_64 + struct.pack("<iiIIII", 0x0100000C, 0, 6, 1, len(seg), 0) + b"\0" * 4 + seg)
  assert runtime._complete_object(macho.ljust(200, b"\0")) and not runtime._complete_object(macho.ljust(199, b"\0"))


# ---- the CPU is part of the cache key ----
AARCH64_CPUINFO = """processor\t: 0
BogoMIPS\t: 48.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
CPU revision\t: 1

processor\t: 1
BogoMIPS\t: 48.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
CPU revision\t: 1
"""


def test_aarch64_cpuinfo_names_the_cpu():
  ident = runtime.cpu_identity(AARCH64_CPUINFO)
  assert "CPU part\t: 0xd0c" in ident and "asimddp" in ident and "0x41" in ident and "BogoMIPS" not in ident
  assert ident.count("CPU part") == 1                                  # one line per distinct kind of core
  older = AARCH64_CPUINFO.replace("0xd0c", "0xd08").replace(" asimddp", "")
  assert runtime.cpu_identity(older) != ident


def test_compiler_says_what_native_means():
  native = runtime.native_target(runtime.compiler())
  assert "-march=" in native or "-target-cpu" in native, native

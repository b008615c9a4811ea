"""The runtime's shared, read-only kernel cache (UOPC_SHARED_CACHE: a grader's, scripts/grader/trusted.py): an entry is
loaded from there by its exact name when the process's own cache lacks it, and is never written; a kernel compiled for
want of it leaves its source in UOPC_SHARED_MISSES."""
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
import pytest

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
  print(prg.cached, prg.path.parent, out.tolist())
"""


def python(code: str, **env: str) -> tuple[bool, Path, str]:
  """(cached, the folder the object was loaded from, the output) of code run in a fresh process."""
  r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
                     env={**{k: v for k, v in os.environ.items() if not k.startswith("UOPC_SHARED")},
                          "OMP_NUM_THREADS": "1", **env})
  assert r.returncode == 0, r.stderr
  cached, folder, out = r.stdout.strip().split(" ", 2)
  return cached == "True", Path(folder), out


def test_an_entry_of_the_shared_cache_is_loaded_and_a_miss_leaves_its_source(tmp_path):
  shared, own, misses = tmp_path / "shared", tmp_path / "own", tmp_path / "misses"
  # a miss: compiled into the process's own cache, and its source left where UOPC_SHARED_MISSES says
  got = python(RUN_ADD, UOPC_CACHE_DIR=str(own), UOPC_SHARED_CACHE=str(shared), UOPC_SHARED_MISSES=str(misses))
  assert got == (False, own, "[0.0, 2.0, 4.0, 6.0]")
  (so,) = own.glob("add-*.so")
  (src,) = misses.glob("*.c")
  assert src.stem == so.stem and ADD in src.read_text()   # the whole text compiled (prelude and kernel)
  # the entry in a read-only shared cache: loaded from there, nothing compiled or written
  shared.mkdir()
  for p in own.iterdir(): shutil.copy(p, shared / p.name)
  shared.chmod(stat.S_IRUSR | stat.S_IXUSR)
  empty = tmp_path / "empty"
  try:
    got = python(RUN_ADD, UOPC_CACHE_DIR=str(empty), UOPC_SHARED_CACHE=str(shared),
                 UOPC_SHARED_MISSES=str(tmp_path / "none"))
  finally: shared.chmod(stat.S_IRWXU)
  assert got == (True, shared, "[0.0, 2.0, 4.0, 6.0]")
  assert not empty.exists() and not (tmp_path / "none").exists()


def test_a_damaged_shared_entry_is_not_loaded(tmp_path):
  shared, own = tmp_path / "shared", tmp_path / "own"
  python(RUN_ADD, UOPC_CACHE_DIR=str(shared))
  (so,) = shared.glob("add-*.so")
  so.write_bytes(so.read_bytes()[:100])   # its checksum no longer matches
  assert python(RUN_ADD, UOPC_CACHE_DIR=str(own), UOPC_SHARED_CACHE=str(shared)) == (False, own,
                                                                                       "[0.0, 2.0, 4.0, 6.0]")
  assert so.stat().st_size == 100   # the shared cache is never rebuilt in place

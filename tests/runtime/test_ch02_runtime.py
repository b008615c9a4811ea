"""Chapter 2, the runtime: values against NumPy, every bad call caught before C runs, the disk cache."""
import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path
import numpy as np
import pytest
from uopc.runtime import PRELUDE, CompileError, Program, compiler
from uopc.runtime.compiler_bugs import CHECKS

pytestmark = pytest.mark.ch02

ADD = """void add(const float* a, const float* b, float* out, int n) {
  for (int i = 0; i < n; i++) out[i] = a[i] + b[i];
}"""
AXPY = """void axpy(double* y, const double* x, double alpha, long n) {
  #pragma omp parallel for
  for (long i = 0; i < n; i++) y[i] += alpha * x[i];
}"""
ISCALE = "void iscale(int* x, int k, int n) { for (int i = 0; i < n; i++) x[i] *= k; }"


@pytest.fixture
def add():
  return Program(ADD, "add")


@pytest.fixture
def arrays():
  rng = np.random.default_rng(0)
  return rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)


def test_add_matches_numpy(add, arrays):
  a, b = arrays
  out = np.zeros_like(a)
  add(a, b, out, a.size)
  np.testing.assert_array_equal(out, a + b)


def test_multidimensional_arrays_are_passed_flat(add):
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  out = np.zeros((3, 4), np.float32)
  add(a, a, out, a.size)
  np.testing.assert_array_equal(out, 2 * a)


def test_double_long_and_openmp():
  y, x = np.arange(10_000, dtype=np.float64), np.ones(10_000)
  ref = y + 0.5 * x
  Program(AXPY, "axpy")(y, x, 0.5, y.size)
  np.testing.assert_array_equal(y, ref)


def test_int_arrays_and_numpy_scalars():
  x = np.arange(10, dtype=np.int32)
  Program(ISCALE, "iscale")(x, np.int64(3), np.int32(10))
  np.testing.assert_array_equal(x, np.arange(10) * 3)


def test_no_copy_writes_land_in_the_callers_array(add):
  a = np.ones(8, np.float32)
  add(a, a, a, a.size)        # in place: out aliases a, so the C loop must see the caller's memory
  np.testing.assert_array_equal(a, np.full(8, 2, np.float32))


# bad calls: each raises a Python exception naming what is wrong, and the output array is untouched
def bad_call(prg, *args, error, match):
  out = args[2]
  before = out.copy()
  with pytest.raises(error, match=match): prg(*args)
  np.testing.assert_array_equal(out, before)


def test_too_few_and_too_many_arguments(add, arrays):
  a, b = arrays
  out = np.full_like(a, 7)
  bad_call(add, a, b, out, error=TypeError, match=r"add takes 4 arguments, got 3")
  bad_call(add, a, b, out, a.size, 1, error=TypeError, match=r"add takes 4 arguments, got 5")


def test_a_buffer_the_graph_never_uses_is_named_when_it_is_passed():
  """A rendered kernel has a parameter per buffer its graph loads or stores: one the graph lost (here buffer 1) is no
  parameter, and a call that passes it is told which buffer, not only how many arguments."""
  from uopc.dtype import dtypes
  from uopc.render_c import render_c
  from uopc.uop import Ops, ParamArg, UOp, range_, sink
  a, b, c = (UOp(Ops.BUFFER, (), ParamArg(s, dtypes.f32, (8,))) for s in range(3))
  i = range_(8, 0)
  prg = Program(render_c(sink(c.index(i).store(a.index(i).load() * 2.0).end(i)), "lost"), "lost")   # b never read
  x, out = np.ones(8, np.float32), np.zeros(8, np.float32)
  with pytest.raises(TypeError, match=r"lost takes 2 arguments \(data0, data2\), got 3: buffer 1 is not read by this "
                                      r"kernel, nor written"):
    prg(x, x, out)
  with pytest.raises(TypeError) as e: prg(x)   # too few: nothing to explain but the count
  assert str(e.value) == "lost takes 2 arguments (data0, data2), got 1"
  prg(x, out)
  np.testing.assert_array_equal(out, 2 * x)


def test_float64_where_float32_expected(add, arrays):
  a, b = arrays
  out = np.full_like(a, 7)
  bad_call(add, a.astype(np.float64), b, out, a.size, error=TypeError, match=r"argument 0 has dtype float64.*float32")
  with pytest.raises(TypeError, match=r"argument 2 has dtype float64"): add(a, b, np.zeros(a.size), a.size)


def test_read_only_output_array(add, arrays):
  a, b = arrays
  ro = np.zeros_like(a)
  ro.flags.writeable = False
  with pytest.raises(ValueError, match=r"argument 2 is read-only"): add(a, b, ro, a.size)
  assert not ro.any()
  # a read-only array is fine where the kernel only reads (const float*)
  a.flags.writeable = False
  out = np.zeros_like(a)
  add(a, b, out, a.size)
  np.testing.assert_array_equal(out, a + b)


def test_non_contiguous_array(add, arrays):
  a, b = arrays
  out = np.full_like(a, 7)
  bad_call(add, a[::2], b[::2], out, 500, error=ValueError, match=r"argument 0 .*not C-contiguous")
  with pytest.raises(ValueError, match=r"not C-contiguous"): add(a, b, out.reshape(10, 100).T, a.size)


def test_wrong_scalar_and_pointer_types(add, arrays):
  a, b = arrays
  out = np.full_like(a, 7)
  bad_call(add, a, b, out, 1000.0, error=TypeError, match=r"argument 3 is an integer \(int\)")
  bad_call(add, a, b, out, np.arange(3), error=TypeError, match=r"argument 3 is a scalar int")
  bad_call(add, a.tolist(), b, out, a.size, error=TypeError, match=r"argument 0 must be a NumPy array")


def test_compile_error_carries_compiler_message_and_numbered_source():
  src = "void broken(float* a) {\n  a[0] = 1.0f +;\n}"
  with pytest.raises(CompileError) as e: Program(src, "broken")
  msg = str(e.value)
  first = len(PRELUDE.splitlines()) + 1                     # the kernel's first line, after the prelude
  assert f"kernel.c:{first + 1}:" in msg and "error" in msg  # the compiler's own diagnostic, pointing at the line
  assert f"{first:4d} | void broken(float* a) {{" in msg      # the numbered source
  assert f"{first + 1:4d} |   a[0] = 1.0f +;" in msg


def test_missing_function_is_a_clear_error():
  with pytest.raises(CompileError, match=r"no function `void nothere"): Program(ADD, "nothere")


# the disk cache: every test below gets an empty cache of its own
@pytest.fixture
def cache(tmp_path, monkeypatch):
  monkeypatch.setenv("UOPC_CACHE_DIR", str(tmp_path / "cache"))
  return tmp_path / "cache"


def entries(cache: Path) -> list[str]:
  """The kernel entries of a cache (not the compiler's checked verdicts, uopc.runtime.compiler_bugs)."""
  return sorted(p.name for p in cache.iterdir() if p.name != CHECKS)


def build_elsewhere(src: str, name: str, cache: Path, cc: str | None = None) -> subprocess.Popen:
  """Build (and run) a Program in another process, as another test worker or notebook would."""
  code = textwrap.dedent(f"""
    import numpy as np
    from uopc.runtime import Program
    prg = Program({src!r}, {name!r})
    a = np.arange(4, dtype=np.float32); out = np.zeros(4, np.float32)
    prg(a, a, out, 4)
    print(prg.cached, out.tolist())
  """)
  env = {**os.environ, "UOPC_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1", **({"CC": cc} if cc else {})}
  pipe = subprocess.PIPE
  return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=pipe, stderr=pipe, text=True)


def finished(proc: subprocess.Popen) -> str:
  out, err = proc.communicate(timeout=120)
  assert proc.returncode == 0, err
  return out.strip()


def test_second_program_is_a_cache_hit(cache, arrays):
  p1 = Program(ADD, "add")
  p2 = Program(ADD, "add")
  assert not p1.cached and p2.cached and p1.path == p2.path and p1.path.parent == cache
  assert [n.rsplit(".", 1)[1] for n in entries(cache)] == ["so", "sum"]
  a, b = arrays
  out = np.zeros_like(a)
  p2(a, b, out, a.size)
  np.testing.assert_array_equal(out, a + b)
  # a different source is a different entry
  Program(ADD.replace("a[i] + b[i]", "a[i] - b[i]"), "add")
  assert len(entries(cache)) == 4


def test_truncated_entry_is_rebuilt_not_loaded(cache, arrays):
  # built by another process: this one has never mapped the file (truncating a file that a process has
  # mapped kills that process with SIGBUS; no runtime can guard against that)
  assert finished(build_elsewhere(ADD, "add", cache)) == "False [0.0, 2.0, 4.0, 6.0]"
  so = next(cache.glob("*.so"))
  size = so.stat().st_size
  with open(so, "r+b") as f: f.truncate(size // 3)
  prg = Program(ADD, "add")
  assert not prg.cached and prg.path == so and so.stat().st_size == size
  a, b = arrays
  out = np.zeros_like(a)
  prg(a, b, out, a.size)
  np.testing.assert_array_equal(out, a + b)
  assert Program(ADD, "add").cached


def test_corrupted_entry_is_rebuilt(cache):
  assert finished(build_elsewhere(ADD, "add", cache)) == "False [0.0, 2.0, 4.0, 6.0]"
  so = next(cache.glob("*.so"))
  data = bytearray(so.read_bytes())
  mid = len(data) // 2
  data[mid:mid + 64] = bytes(x ^ 0xFF for x in data[mid:mid + 64])   # same size, damaged middle
  so.write_bytes(bytes(data))
  assert finished(build_elsewhere(ADD, "add", cache)) == "False [0.0, 2.0, 4.0, 6.0]"
  assert finished(build_elsewhere(ADD, "add", cache)) == "True [0.0, 2.0, 4.0, 6.0]"


def test_entry_damaged_with_its_checksum_is_rebuilt(cache):
  assert finished(build_elsewhere(ADD, "add", cache)) == "False [0.0, 2.0, 4.0, 6.0]"
  so = next(cache.glob("*.so"))
  so.write_bytes(so.read_bytes()[:100])                 # not a loadable object any more ...
  so.with_suffix(".sum").write_text(hashlib.sha256(so.read_bytes()).hexdigest())   # ... but its checksum agrees
  assert finished(build_elsewhere(ADD, "add", cache)) == "False [0.0, 2.0, 4.0, 6.0]"   # rebuilt in place
  assert finished(build_elsewhere(ADD, "add", cache)) == "True [0.0, 2.0, 4.0, 6.0]"
  assert len(entries(cache)) == 2


def test_two_processes_compile_the_same_new_kernel_at_once(cache, tmp_path):
  # a compiler that takes a second makes sure both processes are compiling at the same time
  slow_cc = tmp_path / "slow-cc"
  # (around this process's compiler, CC=clang included, so that the entry it builds is the one this process looks up)
  slow_cc.write_text(f'#!/bin/sh\ncase "$*" in *--version*) ;; *) sleep 1 ;; esac\nexec {compiler()} "$@"\n')
  slow_cc.chmod(0o755)
  src = ADD.replace("a[i] + b[i]", "b[i] + a[i]")
  procs = [build_elsewhere(src, "add", cache, cc=str(slow_cc)) for _ in range(2)]
  assert [finished(p) for p in procs] == ["False [0.0, 2.0, 4.0, 6.0]"] * 2
  names = entries(cache)
  assert len(names) == 2 and names[0].endswith(".so") and names[1].endswith(".sum"), names   # one entry, no leftovers
  assert Program(src, "add").cached

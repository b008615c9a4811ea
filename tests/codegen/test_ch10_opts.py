"""Chapter 10, one fast kernel: the opts (upcast, unroll, thread) read off the generated C, their values against the
plain kernel and NumPy, the default optimizer's choices, the inline exp2f and the flags, and the benchmark CLI.

Timings are never asserted here (the benchmarks print them); what is asserted is the loop structure that makes a
kernel fast, which a value test cannot see.
"""
import math
import os
import re
import subprocess
import sys
from pathlib import Path
import numpy as np
import pytest
from uopc.dtype import dtypes
from uopc.kernelize import make_plan
from uopc.opt import default_opts
from uopc.rangeify import Ctx, Opts, lower
from uopc.book import load_example
from uopc.render_c import render_c
from uopc.runtime import FLAGS, Program
from uopc.tensor import Tensor
from uopc.uop import Ops, ParamArg, UOp

pytestmark = pytest.mark.ch10
ROOT = Path(__file__).resolve().parents[2]
book = load_example("flash_attention")


@pytest.fixture(autouse=True)
def own_plan_cache(fresh_plan_cache):
  """Every test of this file builds its plans afresh (several patch the optimizer's heuristics)."""
  yield


# ---- building and reading kernels ----
def buf(slot: int, n: int) -> UOp:
  return UOp(Ops.BUFFER, (), ParamArg(slot, dtypes.f32, (n,)))


def gemm_body(n: int, m: int, k: int) -> UOp:
  """C[i, j] = sum_r A[i, r] * BT[j, r]: A is data0 (n, k), B^T is data1 (m, k), both contiguous along r."""
  a = UOp(Ops.EXPAND, (UOp(Ops.RESHAPE, (buf(0, n * k),), (n, 1, k)),), (n, m, k))
  b = UOp(Ops.EXPAND, (UOp(Ops.RESHAPE, (buf(1, m * k),), (1, m, k)),), (n, m, k))
  return UOp(Ops.REDUCE, (a * b,), (Ops.ADD, 1))


def kernel(body: UOp, opts: Opts) -> str:
  out = UOp(Ops.BUFFER, (), ParamArg(2, body.dtype, (math.prod(body.shape),)))
  return render_c(lower(body, out, Ctx(opts=opts)), "k")


def run_gemm(a: np.ndarray, b: np.ndarray, opts: Opts) -> tuple[np.ndarray, str]:
  (n, k), m = a.shape, b.shape[1]
  src = kernel(gemm_body(n, m, k), opts)
  c = np.zeros(n * m, np.float32)
  Program(src, "k")(np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b.T).reshape(-1), c)
  return c.reshape(n, m), src


def lines_in_loops(src: str) -> list[tuple[str, list[tuple[str, int]]]]:
  """Every statement of the C with the loops around it, outermost first, as (variable, trips)."""
  loops, out = [], []
  for line in src.splitlines()[1:-1]:
    s = line.strip()
    if m := re.fullmatch(r"for \(int (ridx\d+) = 0; \1 < (\d+); \1\+\+\) \{", s):
      out.append((s, list(loops)))
      loops.append((m.group(1), int(m.group(2))))
    elif s == "}": loops.pop()
    else: out.append((s, list(loops)))
  return out


def for_loops(src: str) -> list[tuple[str, int]]:
  return [(m.group(1), int(m.group(2))) for m in re.finditer(r"for \(int (ridx\d+) = 0; \1 < (\d+);", src)]


ACC_INIT = r"acc\d+ = (0\.0f|-INFINITY);"
ACC_UPDATE = r"acc(\d+) = \(.*\bval\d+.*\);"


def rand(*shape: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---- upcast: the register tile ----
def test_upcast_shares_reduce_loop():
  """A 4x4 register tile: 16 accumulators initialised inside the output loops, then ONE reduce loop updating all 16."""
  a, b = rand(8, 6), rand(6, 8, seed=1)
  out, src = run_gemm(a, b, Opts(upcast={0: 4, 1: 4}, thread=None))
  np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
  assert for_loops(src) == [("ridx0", 2), ("ridx1", 2), ("ridx2", 6)]   # 8/4, 8/4, and a single loop over r
  stmts = lines_in_loops(src)
  outer = [("ridx0", 2), ("ridx1", 2)]
  reduce_at = next(k for k, (s, _) in enumerate(stmts) if s.startswith("for (int ridx2"))
  inits = [(k, loops) for k, (s, loops) in enumerate(stmts) if re.fullmatch(ACC_INIT, s)]
  assert len(inits) == 16 and all(k < reduce_at and loops == outer for k, loops in inits)
  updates = [s for s, loops in stmts if re.fullmatch(ACC_UPDATE, s) and loops == outer + [("ridx2", 6)]]
  assert len(updates) == 16 and len({re.fullmatch(ACC_UPDATE, s).group(1) for s in updates}) == 16


def test_upcast_shares_each_loaded_value():
  """In the tile, each value loaded from A feeds 4 accumulators and so does each value loaded from B^T: 8 loads for 16
  multiply-adds, against 2 loads per multiply-add in the plain kernel."""
  _, src = run_gemm(rand(8, 6), rand(6, 8), Opts(upcast={0: 4, 1: 4}, thread=None))
  body = [s for s, loops in lines_in_loops(src) if loops and loops[-1] == ("ridx2", 6)]
  loads = [m.group(1) for s in body if (m := re.match(r"float (val\d+) = data[01]\[", s))]
  assert len(loads) == 8
  updates = [s for s in body if re.fullmatch(ACC_UPDATE, s)]
  for v in loads: assert sum(bool(re.search(rf"\b{v}\b", s)) for s in updates) == 4


def test_upcast_of_one_axis_and_factor_that_does_not_divide():
  """upcast {1: 4} on 8 columns: 4 accumulators; a factor that does not divide its axis is ignored (no tile)."""
  _, src = run_gemm(rand(3, 5), rand(5, 8), Opts(upcast={1: 4}, thread=None))
  assert for_loops(src) == [("ridx0", 3), ("ridx1", 2), ("ridx2", 5)]
  assert len(re.findall(ACC_INIT, src)) == 4
  _, src = run_gemm(rand(7, 5), rand(5, 13), Opts(upcast={0: 4, 1: 4}, thread=None))
  assert for_loops(src) == [("ridx0", 7), ("ridx1", 13), ("ridx2", 5)]
  assert len(re.findall(ACC_INIT, src)) == 1


# ---- thread ----
@pytest.mark.parametrize("opts", [Opts(thread=0), Opts(upcast={0: 4, 1: 4}, thread=0),
                                  Opts(upcast={0: 4, 1: 4}, unroll=4, thread=0)], ids=["plain", "tile", "tile-unroll"])
def test_thread_pragma_sits_on_the_outer_loop_only(opts):
  src = kernel(gemm_body(16, 16, 16), opts)
  lines = [s.strip() for s in src.splitlines()]
  assert lines.count("#pragma omp parallel for") == 1 and src.count("#pragma") == 1
  k = lines.index("#pragma omp parallel for")
  assert lines[k + 1].startswith("for (int ridx0 = 0;")
  assert all(not s.startswith("for") for s in lines[1:k])                 # nothing loops outside the parallel loop
  assert src.splitlines()[k] == "  #pragma omp parallel for"              # at the top level of the function


def test_no_thread_no_pragma():
  assert "#pragma" not in kernel(gemm_body(16, 16, 16), Opts(upcast={0: 4, 1: 4}, thread=None))


def test_every_kernel_of_attention_threads_its_outer_loop():
  """The default optimizer on the book's attention: each kernel has one pragma, on its outermost loop."""
  q, k, v = (Tensor.randn(64, 16, seed=s) for s in range(3))
  plan = make_plan([book.attention(q, k, v).uop], False, Tensor.opt)
  assert len(plan.kernels) == 6
  for kern in plan.kernels:
    lines = kern.src.splitlines()
    assert sum("#pragma" in s for s in lines) == 1, kern.name
    k0 = next(i for i, s in enumerate(lines) if "#pragma" in s)
    assert lines[k0] == "  #pragma omp parallel for" and lines[k0 + 1].startswith("  for (int ridx"), kern.name


# ---- unroll ----
def test_unroll_gives_fewer_trips_and_a_balanced_tree():
  a, b = rand(3, 16), rand(16, 5, seed=1)
  out, src = run_gemm(a, b, Opts(unroll=4, thread=None))
  np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
  assert for_loops(src) == [("ridx0", 3), ("ridx1", 5), ("ridx2", 4)]    # 16 / 4 trips
  (update,) = [s for s in src.splitlines() if re.fullmatch(r"\s*acc0 = \(.*", s)]
  v = r"\(val\d+\*val\d+\)"
  assert re.fullmatch(rf"\s*acc0 = \(val\d+\+\(\({v}\+{v}\)\+\({v}\+{v}\)\)\);", update), update


def test_unroll_that_does_not_divide_is_ignored():
  out, src = run_gemm(rand(3, 7), rand(7, 2), Opts(unroll=4, thread=None))
  assert for_loops(src) == [("ridx0", 3), ("ridx1", 2), ("ridx2", 7)]


# ---- values: the opts never change the answer ----
@pytest.mark.parametrize("opts", [Opts(thread=0), Opts(upcast={0: 4, 1: 4}, thread=None), Opts(upcast={1: 8}),
                                  Opts(unroll=4, thread=None), Opts(unroll=8), Opts(upcast={0: 4, 1: 4}, unroll=4)],
                         ids=["thread", "tile", "upcast8", "unroll4", "unroll8-thread", "tile-unroll-thread"])
def test_opts_give_the_plain_kernels_values(opts):
  a, b = rand(32, 64), rand(64, 24, seed=1)
  plain, _ = run_gemm(a, b, Opts(thread=None))
  out, _ = run_gemm(a, b, opts)
  np.testing.assert_allclose(out, plain, rtol=1e-6, atol=1e-5)
  np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_upcast_of_a_reduction_of_rows():
  """The book's r_1024 (row max): upcast 4 gives 4 accumulators, one loop over the row, the same values."""
  x = rand(16, 33)
  body = UOp(Ops.REDUCE, (UOp(Ops.RESHAPE, (buf(0, 16 * 33),), (16, 33)),), (Ops.MAX, 1))
  out = UOp(Ops.BUFFER, (), ParamArg(1, dtypes.f32, (16,)))
  src = render_c(lower(body, out, Ctx(opts=Opts(upcast={0: 4}))), "k")
  assert for_loops(src) == [("ridx0", 4), ("ridx1", 33)] and len(re.findall(r"= -INFINITY;", src)) == 4
  res = np.zeros(16, np.float32)
  Program(src, "k")(x.reshape(-1), res)
  np.testing.assert_array_equal(res, x.max(1))


@pytest.mark.parametrize("shapes", [((7, 13), (13, 5)), ((1, 1), (1, 1)), ((33, 65), (65, 33)), ((1, 64), (64, 9)),
                                    ((12, 7), (7, 20)), ((64, 3), (3, 64)), ((5,), (5, 6)), ((6, 5), (5,))],
                         ids=lambda s: "@".join("x".join(map(str, x)) for x in s))
def test_matmul_against_numpy_at_odd_sizes(shapes):
  a, b = rand(*shapes[0]), rand(*shapes[1], seed=1)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n,m,k", [(7, 13, 5), (1, 1, 1), (33, 65, 17), (12, 20, 9)])
def test_register_tile_at_sizes_that_are_not_multiples_of_it(n, m, k):
  a, b = rand(n, k), rand(k, m, seed=1)
  out, _ = run_gemm(a, b, Opts(upcast={0: 4, 1: 4}, unroll=4, thread=0))
  np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_batched_matmul():
  a, b, c = rand(3, 8, 16), rand(3, 16, 12, seed=1), rand(16, 12, seed=2)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose((Tensor(a) @ Tensor(c)).numpy(), a.astype(np.float64) @ c, rtol=1e-4, atol=1e-4)
  d, e = rand(2, 1, 5, 7), rand(3, 7, 4, seed=3)   # broadcast batch axes, odd sizes
  np.testing.assert_allclose((Tensor(d) @ Tensor(e)).numpy(), d.astype(np.float64) @ e, rtol=1e-4, atol=1e-4)


# ---- the default optimizer ----
def test_default_opts_register_tile_for_reduce_kernels():
  assert default_opts(gemm_body(64, 64, 64)) == Opts(upcast={0: 4, 1: 4}, thread=0)
  assert default_opts(gemm_body(64, 12, 64)) == Opts(upcast={0: 4, 1: 4}, thread=0)
  assert default_opts(gemm_body(33, 64, 8)) == Opts(upcast={1: 4}, thread=0)       # 33 is not a multiple of 4
  assert default_opts(gemm_body(4, 4, 8)) == Opts(upcast={}, thread=0)             # too small to tile
  row_max = UOp(Ops.REDUCE, (UOp(Ops.RESHAPE, (buf(0, 1024 * 64),), (1024, 64)),), (Ops.MAX, 1))
  assert default_opts(row_max) == Opts(upcast={0: 4}, thread=0)                    # the book's r_1024: 4 rows at once


def test_default_opts_thread_axis_for_elementwise_kernels():
  x = UOp(Ops.RESHAPE, (buf(0, 64 * 32),), (64, 32))
  assert default_opts(x * 2.0) == Opts(upcast={}, thread=0)
  y = UOp(Ops.RESHAPE, (buf(0, 32),), (1, 32))
  assert default_opts(y + y) == Opts(upcast={}, thread=1)                          # the first axis with >1 trips


def test_default_opts_upcast_transposing_copies_by_8():
  """NOTES 5: the layout pass's copy of B^T reads across rows; the default opts upcast its second-to-last axis by 8."""
  plan = make_plan([(Tensor(rand(64, 32)) @ Tensor(rand(32, 48))).uop], False, Tensor.opt)
  assert [k.name for k in plan.kernels] == ["e_1_48_32", "r_64_48"]
  copy, mm = plan.kernels
  assert default_opts(copy.body) == Opts(upcast={1: 8}, thread=1)
  assert default_opts(mm.body) == Opts(upcast={0: 4, 1: 4}, thread=0)
  assert "STAGE by the layout pass" in plan.explain().splitlines()[0]
  # the copy: 8 loads from one source row (consecutive addresses), each stored to a different output row
  loads = re.findall(r"data0\[\((alu\d+)\+(\d)\)\]", copy.src)
  assert [int(d) for _, d in loads] == list(range(1, 8))


def test_no_copy_when_the_reduce_axis_is_contiguous():
  """A @ B^T reads both operands along the reduce axis already: the layout pass adds nothing."""
  plan = make_plan([(Tensor(rand(64, 32)) @ Tensor(rand(48, 32)).T).uop], False, Tensor.opt)
  assert [k.name for k in plan.kernels] == ["r_64_48"] and plan.temps == []


# ---- the exp2f prelude and the flags ----
EXP2 = """void ex(float* restrict x, float* restrict y, int n) {
  for (int i = 0; i < n; i++) y[i] = exp2f(x[i]);
}"""


def exp2f(x: np.ndarray) -> np.ndarray:
  x = np.ascontiguousarray(x, np.float32)
  y = np.zeros_like(x)
  Program(EXP2, "ex")(x, y, x.size)
  return y


def test_exp2f_is_accurate_on_the_normal_range():
  x = np.linspace(-126, 128, 2_000_001, dtype=np.float32)
  y, ref = exp2f(x), np.exp2(x.astype(np.float64))
  finite = ref <= np.finfo(np.float32).max                 # 2^128 itself is not a float: inf
  rel = np.abs(y[finite] - ref[finite]) / ref[finite]
  assert rel.max() < 1e-6, f"max relative error {rel.max():.2e} at x = {x[finite][rel.argmax()]}"
  assert np.all(np.isposinf(y[~finite]))


@pytest.mark.parametrize("n", [1, 3, 64, 1001], ids=lambda n: f"n{n}")   # the scalar tail and the vector body
def test_exp2f_special_values(n):
  special = np.array([-np.inf, np.inf, np.nan, 0.0, -1000.0, 1000.0, -149.0, 127.5], np.float32)
  x = np.resize(special, n)
  y = exp2f(x)
  want = np.resize(np.array([0.0, np.inf, np.nan, 1.0, 0.0, np.inf, 0.0, 2 ** 127.5], np.float32), n)
  np.testing.assert_allclose(y, want, rtol=1e-6)           # nan == nan, inf == inf here
  assert np.array_equal(np.isnan(y), np.isnan(want)) and np.all(y[x == -np.inf] == 0)


def test_flags_keep_infinities_and_nans_meaningful():
  assert not any(f in FLAGS for f in ("-ffast-math", "-ffinite-math-only", "-Ofast"))
  assert "-fassociative-math" in FLAGS                     # reductions may be reordered (vectorised): NOTES 2


def test_row_max_from_minus_infinity():
  x = rand(6, 40)
  x[1] = -np.inf                                           # a row that is all -inf: the answer is -inf
  x[2, 7] = np.inf
  x[3, :39] = -np.inf                                      # the max is the last element
  x[4] = -1e30
  t = Tensor(x).max(-1)
  (k,) = make_plan([t.uop], False, Tensor.opt).kernels
  assert "-INFINITY" in k.src
  np.testing.assert_array_equal(t.numpy(), x.max(-1))


def test_softmax_with_infinities():
  x = rand(4, 16)
  x[1, 3:] = -np.inf                                       # masked scores
  ref = np.exp(x - x.max(-1, keepdims=True))
  np.testing.assert_allclose(Tensor(x).softmax(-1).numpy(), ref / ref.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("n,d", [(64, 16), (100, 8), (3, 1)])
def test_online_attention_matches_numpy(n, d):
  q, k, v = rand(n, d), rand(n, d, seed=1), rand(n, d, seed=2)
  k[:, 0] += np.linspace(0, 4, n, dtype=np.float32)        # scores whose maximum comes late in the row
  s = q.astype(np.float64) @ k.T / math.sqrt(d)
  p = np.exp(s - s.max(-1, keepdims=True))
  ref = (p / p.sum(-1, keepdims=True)) @ v
  out = np.zeros(n * d, np.float32)
  Program(render_c(book.online_attention_ir(n, d), "flash"), "flash")(q, k, v, out)
  np.testing.assert_allclose(out.reshape(n, d), ref, rtol=1e-4, atol=1e-5)


# ---- the benchmark CLI (format only, never the numbers) ----
def bench(*args: str) -> str:
  env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
  r = subprocess.run([sys.executable, "-m", "uopc.bench", *args], capture_output=True, text=True, cwd=ROOT, env=env,
                     timeout=300)
  assert r.returncode == 0, r.stderr
  return r.stdout


def test_bench_gemm_cli():
  out = bench("gemm", "--sizes", "64", "--reps", "1")
  assert re.search(r"^# cpu\s+\S", out, re.M) and re.search(r"^# compiler\s+\S", out, re.M)
  num = r"\d+\.\d+"
  assert re.search(rf"^64x64x64\s+numpy\s+{num} ms\s+{num} GFLOP/s\s*$", out, re.M), out
  assert re.search(rf"^64x64x64\s+uopc\s+{num} ms\s+{num} GFLOP/s\s+{num}x$", out, re.M), out


def test_bench_peak_cli():
  out = bench("peak", "--reps", "1")
  assert re.search(r"^# cores\s+\d+$", out, re.M)
  assert re.search(r"^FP32 FMA peak\s+\d+\.\d GFLOP/s$", out, re.M), out
  assert re.search(r"^memory \(triad\)\s+\d+\.\d GB/s$", out, re.M), out

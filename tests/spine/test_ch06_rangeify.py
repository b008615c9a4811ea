"""Chapter 6, rangeify and the reduce lowering: values against NumPy, and where accumulators are placed.

The placement tests read the generated C: a value test cannot catch an accumulator in the wrong loop (section 11.5),
because the recomputed reduction gives the same answer, only more slowly.
"""
import math
import re
import numpy as np
import pytest
from uopc.dtype import dtypes
from uopc.kernelize import make_plan
from uopc.rangeify import Ctx, Opts, lower, rangeify, ravel, unravel
from uopc.render_c import render_c
from uopc.runtime import Program
from uopc.symbolic import ranges_in, simplify
from uopc.tensor import Tensor
from uopc.uop import Ops, ParamArg, UOp, range_

pytestmark = pytest.mark.ch06




def buf(slot: int, *shape: int, dtype=dtypes.f32) -> UOp:
  """A kernel parameter data{slot}, viewed in `shape`."""
  b = UOp(Ops.BUFFER, (), ParamArg(slot, dtype, (math.prod(shape),)))
  return UOp(Ops.RESHAPE, (b,), shape) if len(shape) > 1 else b


def run(body: UOp, inputs: list[np.ndarray], opts: Opts = Opts(thread=None)) -> tuple[np.ndarray, str]:
  """Lower body (whose BUFFERs are data0.. in the order of inputs), compile, run; the output and the C."""
  out = UOp(Ops.BUFFER, (), ParamArg(len(inputs), body.dtype, (math.prod(body.shape),)))
  src = render_c(lower(body, out, Ctx(opts=opts)), "k")
  res = np.zeros(math.prod(body.shape), np.float32)
  Program(src, "k")(*[a.reshape(-1) for a in inputs], res)
  return res.reshape(body.shape), src


def acc_inits(src: str) -> dict[str, tuple[str, list[tuple[str, int]]]]:
  """acc name -> (initial value, the loops around its initialisation, outermost first, as (variable, trips))."""
  loops, found = [], {}
  for line in src.splitlines():
    if m := re.search(r"for \(int (ridx\d+) = 0; \1 < (\d+);", line): loops.append((m.group(1), int(m.group(2))))
    elif line.strip() == "}" and loops: loops.pop()
    elif m := re.fullmatch(r"\s*(acc\d+) = (0\.0f|-INFINITY);", line): found[m.group(1)] = (m.group(2), list(loops))
  return found


def loops_around(src: str, pattern: str) -> list[tuple[str, int]]:
  """The loops around the first line matching pattern."""
  loops = []
  for line in src.splitlines():
    if m := re.search(r"for \(int (ridx\d+) = 0; \1 < (\d+);", line): loops.append((m.group(1), int(m.group(2))))
    elif line.strip() == "}" and loops: loops.pop()
    elif re.search(pattern, line): return list(loops)
  raise AssertionError(f"no line matches {pattern}")


# ---- indices ----
def test_raw_reshape_index_mentions_j_simplified_it_is_i():
  i, j = range_(512, 0), range_(512, 1)
  raw = unravel(ravel((i, j), (512, 512)), (512, 512))
  assert [ranges_in(x) for x in raw] == [[i, j], [i, j]]
  assert simplify(raw[0]) is i and simplify(raw[1]) is j


def test_rangeify_reshape_gives_simplified_indices():
  x = buf(0, 6)
  i, j = range_(2, 0), range_(3, 1)
  v = rangeify(UOp(Ops.RESHAPE, (x,), (2, 3)), (i, j), Ctx())
  assert v.op is Ops.LOAD and ranges_in(v) == [i, j]
  assert v.src[0].src[1] is simplify(i * 3 + j)


def test_elementwise_and_movement_values():
  a, b = np.arange(12, dtype=np.float32).reshape(3, 4), np.linspace(-1, 1, 4, dtype=np.float32)
  x, y = buf(0, 3, 4), buf(1, 4)
  ey = UOp(Ops.EXPAND, (UOp(Ops.RESHAPE, (y,), (1, 4)),), (3, 4))
  body = UOp(Ops.PERMUTE, (x * ey + x,), (1, 0))
  out, src = run(body, [a, b])
  np.testing.assert_allclose(out, (a * b + a).T)
  assert "acc" not in src   # elementwise: no accumulator at all


# ---- accumulator placement ----
def test_row_max_accumulator_lives_in_the_row_loop():
  a = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
  out, src = run(UOp(Ops.REDUCE, (buf(0, 5, 7),), (Ops.MAX, 1)), [a])
  np.testing.assert_array_equal(out, a.max(1))
  assert acc_inits(src) == {"acc0": ("-INFINITY", [("ridx0", 5)])}   # once per row, before the reduce loop


def test_matmul_accumulator_lives_in_both_output_loops():
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
  x = UOp(Ops.EXPAND, (UOp(Ops.RESHAPE, (buf(0, 3, 5),), (3, 1, 5)),), (3, 4, 5))
  y = UOp(Ops.EXPAND, (UOp(Ops.RESHAPE, (UOp(Ops.PERMUTE, (buf(1, 5, 4),), (1, 0)),), (1, 4, 5)),), (3, 4, 5))
  out, src = run(UOp(Ops.REDUCE, (x * y,), (Ops.ADD, 1)), [a, b])
  np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
  assert acc_inits(src) == {"acc0": ("0.0f", [("ridx0", 3), ("ridx1", 4)])}
  assert loops_around(src, r"acc0 = \(") == [("ridx0", 3), ("ridx1", 4), ("ridx2", 5)]


def test_upcast_shares_reduce_loop():
  """A 4-wide register tile: four accumulators, one reduce loop feeding all of them."""
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((2, 6)).astype(np.float32), rng.standard_normal((6, 8)).astype(np.float32)
  x = UOp(Ops.EXPAND, (UOp(Ops.RESHAPE, (buf(0, 2, 6),), (2, 1, 6)),), (2, 8, 6))
  y = UOp(Ops.EXPAND, (UOp(Ops.RESHAPE, (UOp(Ops.PERMUTE, (buf(1, 6, 8),), (1, 0)),), (1, 8, 6)),), (2, 8, 6))
  out, src = run(UOp(Ops.REDUCE, (x * y,), (Ops.ADD, 1)), [a, b], Opts(upcast={1: 4}, thread=None))
  np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
  inits = acc_inits(src)
  assert len(inits) == 4 and all(loops == [("ridx0", 2), ("ridx1", 2)] for _, loops in inits.values())
  assert len(re.findall(r"for \(int ridx\d+ = 0; ridx\d+ < 6;", src)) == 1


def test_unrolled_reduce_is_one_loop_with_a_tree():
  a = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
  out, src = run(UOp(Ops.REDUCE, (buf(0, 3, 8),), (Ops.ADD, 1)), [a], Opts(unroll=4, thread=None))
  np.testing.assert_allclose(out, a.sum(1), rtol=1e-5)
  assert re.findall(r"< (\d+);", src) == ["3", "2"]


def test_nested_reduce_inside_a_consumer(fresh_plan_cache):
  """softmax's denominator with the max fused in: the max's accumulator is per row, outside the sum's loop."""
  a = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
  x = Tensor(a)
  y = (x - x.max(-1, keepdim=True)).exp().sum(-1)
  plan = make_plan([y.uop], fuse_reduce=True)
  (k,) = plan.kernels
  Tensor.fuse_reduce = True
  np.testing.assert_allclose(y.numpy(), np.exp(a - a.max(1, keepdims=True)).sum(1), rtol=1e-5)
  inits = acc_inits(k.src)
  assert sorted(v for v, _ in inits.values()) == ["-INFINITY", "0.0f"]
  assert all(loops == [("ridx0", 4)] for _, loops in inits.values())


# ---- the O(N^3) bug of section 11.5 ----
from uopc.book import load_example, reshape_simplify   # noqa: E402
FlashOpt, attention = load_example("flash_attention").FlashOpt, load_example("flash_attention").attention


@pytest.fixture
def reshape_simplify_off():
  """The RESHAPE rule without its simplify (uopc.book.reshape_simplify); plans made meanwhile stay apart."""
  with reshape_simplify(False): yield


def fused_attention_kernel(N: int, D: int = 64):
  q, k, v = (Tensor.randn(N, D, seed=s) for s in range(3))
  out = attention(q, k, v)
  return out, make_plan([out.uop], True, FlashOpt).kernels[-1]


def row_stats(src: str) -> tuple[list, list, list]:
  """Loops around the row max's init, around the row sum's init, and the key loop of P V."""
  inits = acc_inits(src)
  vals = dict(re.findall(r"float (val\d+) = (acc\d+);", src))
  sum_acc = vals[re.search(r"\(1\.0f/(val\d+)\)", src).group(1)]    # the row sum is what P divides by
  max_loops = [loops for v, loops in inits.values() if v == "-INFINITY"]
  pv_loop = [lp for lp in loops_around(src, r"\(1\.0f/val") if lp[1] > 16][-1]   # innermost key loop around P
  return max_loops, inits[sum_acc][1], pv_loop


def test_fused_attention_row_stats_are_once_per_row(fresh_plan_cache):
  _, k = fused_attention_kernel(512)
  max_loops, sum_loops, pv_loop = row_stats(k.src)
  assert max_loops == [[("ridx0", 512)]] and sum_loops == [("ridx0", 512)]   # in the row loop only
  assert pv_loop[1] == 512
  evals = {(u.arg[0], u.shape): n for u, n in k.recompute.items()}
  assert evals[(Ops.MAX, (512,))] == 1 and evals[(Ops.ADD, (512,))] == 1


def test_unsimplified_reshape_moves_row_stats_into_the_key_loop(reshape_simplify_off):
  _, k = fused_attention_kernel(512)
  max_loops, sum_loops, pv_loop = row_stats(k.src)
  assert max_loops and all(pv_loop in loops for loops in max_loops)
  assert pv_loop in sum_loops
  evals = {(u.arg[0], u.shape): n for u, n in k.recompute.items()}
  assert evals[(Ops.MAX, (512,))] >= 512 and evals[(Ops.ADD, (512,))] >= 512


def test_unsimplified_reshape_gives_the_same_output(fresh_plan_cache):
  N, D = 64, 64
  q, k, v = (np.random.default_rng(s).standard_normal((N, D)).astype(np.float32) for s in range(3))
  Tensor.fuse_reduce, Tensor.opt = True, FlashOpt
  good = attention(Tensor(q), Tensor(k), Tensor(v)).numpy()
  with reshape_simplify(False):
    out = attention(Tensor(q), Tensor(k), Tensor(v))
    _, slow = fused_attention_kernel(N)
    assert pv_loop_holds_max(slow.src)
    np.testing.assert_allclose(out.numpy(), good, rtol=1e-6, atol=1e-7)
  s = q @ k.T / math.sqrt(D)
  p = np.exp(s - s.max(-1, keepdims=True))
  np.testing.assert_allclose(good, p / p.sum(-1, keepdims=True) @ v, rtol=1e-4, atol=1e-5)


def pv_loop_holds_max(src: str) -> bool:
  max_loops, _, pv_loop = row_stats(src)
  return all(pv_loop in loops for loops in max_loops)

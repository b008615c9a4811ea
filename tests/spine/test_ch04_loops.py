"""Chapter 4: loop programs built with the UOp builders, rendered to C and run, checked against NumPy.

The AFTER edge is what orders memory: a read of an accumulator placed .after(the loop that updates it)
comes after that loop, and state placed .after(a loop) is declared inside it.
"""
import math
import numpy as np
import pytest
from uopc.dtype import dtypes
from uopc.linearize import LinearizeError
from uopc.render_c import render_c
from uopc.runtime import Program
from uopc.uop import AxisType, Ops, ParamArg, UOp, range_, sink

pytestmark = pytest.mark.ch04
f32 = dtypes.f32


def buf(slot: int, n: int, dtype=f32) -> UOp: return UOp(Ops.BUFFER, (), ParamArg(slot, dtype, (n,)))
def alloc(slot: int, n: int = 1, dtype=f32) -> UOp: return UOp(Ops.ALLOC, (), ParamArg(slot, dtype, (n,)))


def run(prog: UOp, name: str, *arrays: np.ndarray) -> str:
  src = render_c(prog, name)
  Program(src, name)(*arrays)
  return src


# ---- the programs ----
def sum_program(n: int) -> UOp:
  """out[0] = sum(a): one accumulator, initialised before the loop, updated in it, read after it."""
  A, OUT = buf(0, n), buf(1, 1)
  acc = alloc(0).after()                       # no loops: function-level state
  init = acc.index(0).store(0.0)
  k = range_(n, 0)
  acck = acc.after(init, k)                    # inside loop k, after the initialisation
  upd = acck.index(0).store(acck.index(0).load() + A.index(k).load()).end(k)
  return sink(OUT.index(0).store(acc.after(upd).index(0).load()))   # after the loop that updates it


def rowmax_program(R: int, C: int, thread: bool = True) -> UOp:
  """out[i] = max_j a[i, j]: the running max, one accumulator per row, declared inside the row loop."""
  A, OUT = buf(0, R * C), buf(1, R)
  i = range_(R, 0, AxisType.THREAD if thread else AxisType.LOOP)
  acc = alloc(0).after(i)
  init = acc.index(0).store(-math.inf)
  j = range_(C, 1)
  accj = acc.after(init, j)
  upd = accj.index(0).store(accj.index(0).load().maximum(A.index(i * C + j).load())).end(j)
  return sink(OUT.index(i).store(acc.after(upd).index(0).load()).end(i))


def copy2d_program(R: int, C: int, transpose: bool = False) -> UOp:
  A, OUT = buf(0, R * C), buf(1, R * C)
  i, j = range_(R, 0, AxisType.THREAD), range_(C, 1)
  dst = j * R + i if transpose else i * C + j
  return sink(OUT.index(dst).store(A.index(i * C + j).load()).end(j, i))


def prefix_sum_program(n: int) -> UOp:
  """out[k] = a[0] + ... + a[k]: the running value is read, updated and stored on every iteration."""
  A, OUT = buf(0, n), buf(1, n)
  acc = alloc(0).after()
  init = acc.index(0).store(0.0)
  k = range_(n, 0)
  acck = acc.after(init, k)
  new = acck.index(0).load() + A.index(k).load()
  return sink(UOp(Ops.SINK, (acck.index(0).store(new), OUT.index(k).store(new))).end(k))


# ---- values against NumPy ----
@pytest.mark.parametrize("n", [1, 7, 1000, 4096])
def test_sum(n):
  a = np.random.default_rng(n).standard_normal(n).astype(np.float32)
  out = np.zeros(1, np.float32)
  run(sum_program(n), "sum", a, out)
  np.testing.assert_allclose(out[0], a.sum(dtype=np.float64), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("R,C", [(1, 1), (3, 5), (64, 33), (257, 100)])
@pytest.mark.parametrize("thread", [True, False])
def test_running_max(R, C, thread):
  a = np.random.default_rng(R * C).standard_normal((R, C)).astype(np.float32)
  a[R // 2, C - 1] = 100.0                     # a maximum in the last column: every update has to be kept
  out = np.zeros(R, np.float32)
  run(rowmax_program(R, C, thread), "rowmax", a, out)
  np.testing.assert_array_equal(out, a.max(1))


def test_running_max_of_negative_infinities():
  a = np.full((2, 3), -np.inf, np.float32)
  out = np.zeros(2, np.float32)
  run(rowmax_program(2, 3), "rowmax", a, out)
  assert np.all(out == -np.inf)


@pytest.mark.parametrize("R,C", [(1, 1), (3, 5), (64, 33)])
@pytest.mark.parametrize("transpose", [False, True])
def test_copy2d(R, C, transpose):
  a = np.arange(R * C, dtype=np.float32).reshape(R, C)
  out = np.zeros(R * C, np.float32)
  run(copy2d_program(R, C, transpose), "copy2d", a, out)
  np.testing.assert_array_equal(out, (a.T if transpose else a).reshape(-1))


def test_prefix_sum():
  a = np.random.default_rng(0).standard_normal(500).astype(np.float32)
  out = np.zeros(500, np.float32)
  run(prefix_sum_program(500), "cumsum", a, out)
  np.testing.assert_allclose(out, np.cumsum(a), rtol=1e-4, atol=1e-4)


def test_int_program():
  """Loop programs are not only float: an int32 buffer, scaled and shifted by its own index."""
  n = 100
  A, OUT = buf(0, n, dtypes.i32), buf(1, n, dtypes.i32)
  k = range_(n, 0)
  prog = sink(OUT.index(k).store(A.index(k).load() * 3 + k).end(k))
  a = np.arange(n, dtype=np.int32) - 50
  out = np.zeros(n, np.int32)
  run(prog, "iscale", a, out)
  np.testing.assert_array_equal(out, a * 3 + np.arange(n))


# ---- the AFTER-edge idiom, in the C ----
def lines_of(src: str) -> list[str]: return [ln.strip() for ln in src.splitlines()]


def test_running_max_c():
  assert render_c(rowmax_program(3, 5), "rowmax") == """void rowmax(float* restrict data0, float* restrict data1) {
  #pragma omp parallel for
  for (int ridx0 = 0; ridx0 < 3; ridx0++) {
    float acc0;
    acc0 = -INFINITY;
    for (int ridx1 = 0; ridx1 < 5; ridx1++) {
      float val1 = acc0;
      float val2 = data0[((ridx0*5)+ridx1)];
      acc0 = ((val1>val2||val1!=val1)?val1:val2);
    }
    float val3 = acc0;
    data1[ridx0] = val3;
  }
}"""


def test_state_after_a_loop_is_declared_inside_it():
  src = lines_of(render_c(rowmax_program(3, 5), "rowmax"))
  assert src.index("float acc0;") > src.index("for (int ridx0 = 0; ridx0 < 3; ridx0++) {")   # one per row (thread)
  assert src.index("float acc0;") < src.index("for (int ridx1 = 0; ridx1 < 5; ridx1++) {")


def test_function_level_state_is_declared_at_the_top():
  src = lines_of(render_c(sum_program(10), "sum"))
  assert src[1:3] == ["float acc0;", "acc0 = 0.0f;"]


def test_read_after_the_loop_needs_the_after_edge():
  """Without .after(upd), nothing orders the final read after the loop: it is placed before it (a wrong program)."""
  R, C = 3, 5
  A, OUT = buf(0, R * C), buf(1, R)
  i, j = range_(R, 0, AxisType.THREAD), range_(C, 1)
  acc = alloc(0).after(i)
  init = acc.index(0).store(-math.inf)
  accj = acc.after(init, j)
  upd = accj.index(0).store(accj.index(0).load().maximum(A.index(i * C + j).load())).end(j)
  no_edge = sink(OUT.index(i).store(acc.index(0).load()).end(i), upd.end(i))
  src = lines_of(render_c(no_edge, "noedge"))
  assert src.index("data1[ridx0] = val1;") < src.index("for (int ridx1 = 0; ridx1 < 5; ridx1++) {")
  with_edge = lines_of(render_c(rowmax_program(R, C), "rowmax"))
  assert with_edge.index("data1[ridx0] = val3;") > with_edge.index("acc0 = ((val1>val2||val1!=val1)?val1:val2);")


def test_same_graph_same_text():
  assert render_c(rowmax_program(64, 33), "rowmax") == render_c(rowmax_program(64, 33), "rowmax")


def test_bare_alloc_before_its_first_after():
  """A bare ALLOC used at function level is declared at the top, not at its first AFTER inside a loop."""
  n = 10
  A, OUT, acc = buf(0, n), buf(1, 1), alloc(0)
  init = acc.index(0).store(0.0)               # the bare ALLOC, at function level...
  k = range_(n, 0)
  acck = acc.after(init, k)                    # ...and its first AFTER, inside loop k
  upd = acck.index(0).store(acck.index(0).load() + A.index(k).load()).end(k)
  prog = sink(OUT.index(0).store(acc.after(upd).index(0).load()))
  a, out = np.arange(n, dtype=np.float32), np.zeros(1, np.float32)
  run(prog, "sumbare", a, out)
  assert out[0] == a.sum()


# ---- errors ----
def test_unclosed_range():
  A, B = buf(0, 10), buf(1, 10)
  i = range_(10, 0)
  with pytest.raises(LinearizeError, match=r"ridx0"): render_c(sink(B.index(i).store(A.index(i).load())), "f")


def test_unclosed_inner_range():
  A, B = buf(0, 100), buf(1, 100)
  i, j = range_(10, 0), range_(10, 7)
  with pytest.raises(LinearizeError, match=r"ridx7"):
    render_c(sink(B.index(i * 10 + j).store(A.index(i * 10 + j).load()).end(i)), "f")


@pytest.mark.parametrize("other", [range_(5, 0), range_(10, 0, AxisType.THREAD)])
def test_two_loops_with_one_id(other):
  A, B = buf(0, 10), buf(1, 10)
  i = range_(10, 0)
  prog = sink(B.index(i).store(A.index(i).load()).end(i), A.index(other).store(1.0).end(other))
  with pytest.raises(LinearizeError, match=r"two different loops are named ridx0"): render_c(prog, "f")


def test_loops_that_do_not_nest():
  """k sits inside i in one place and inside j in another, but i and j are siblings: no loop nest has that shape."""
  B = buf(0, 100)
  i, j, k = range_(10, 0), range_(10, 1), range_(10, 2)
  in_i = B.index(i * 10 + k).store(1.0).end(k)
  in_j = B.index(j * 10 + k).store(2.0).end(k)
  with pytest.raises(LinearizeError, match=r"both enclose ridx2"): render_c(sink(in_i.end(i), in_j.end(j)), "f")


def test_loops_that_cross():
  """One store puts j inside i, another puts i inside j."""
  B = buf(0, 100)
  i, j = range_(10, 0), range_(10, 1)
  a = B.index(i * 10 + j).store(1.0).end(j)
  b = B.index(j * 10 + i).store(2.0).end(i)
  with pytest.raises(LinearizeError, match=r"encloses itself"): render_c(sink(a.end(i), b.end(j)), "f")


def test_end_takes_ranges():
  with pytest.raises(TypeError, match="RANGE"): UOp.const(1.0).end(UOp.const(3))


def test_load_and_store_need_an_index():
  A = buf(0, 10)
  with pytest.raises(TypeError, match="INDEX"): A.load()
  with pytest.raises(TypeError, match="INDEX"): A.store(1.0)

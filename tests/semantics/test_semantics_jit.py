"""TinyJit misuse (issue 30, item 3): each call is either replayed right or refused with a JitError naming what
differed from the capture."""
import numpy as np
import pytest
from uopc.jit import JitError, TinyJit
from uopc.tensor import Tensor

rng = np.random.default_rng(30)


def arr(*shape): return rng.standard_normal(shape).astype(np.float32)


def test_same_tensor_twice_at_capture_then_two_tensors():
  f = TinyJit(lambda a, b: a * 2 + b)
  x = Tensor(arr(5))
  f(x, x); f(x, x)
  np.testing.assert_allclose(f(x, x).numpy(), x.numpy() * 3, rtol=1e-6)   # same aliasing: replayed
  with pytest.raises(JitError, match="argument 1 is a tensor of its own, captured as the same tensor as argument 0"):
    f(Tensor(arr(5)), Tensor(arr(5)))


def test_two_tensors_at_capture_then_one_twice():
  f = TinyJit(lambda a, b: a * 2 + b)
  f(Tensor(arr(5)), Tensor(arr(5))); f(Tensor(arr(5)), Tensor(arr(5)))
  x = Tensor(arr(5))
  with pytest.raises(JitError, match="argument 1 is the same tensor as argument 0"): f(x, x)


def test_python_scalar_argument_is_checked():
  f = TinyJit(lambda a, lr: a * lr)
  x = Tensor(arr(4))
  f(x, 0.5); f(x, 0.5)
  np.testing.assert_allclose(f(x, 0.5).numpy(), x.numpy() * 0.5, rtol=1e-6)
  with pytest.raises(JitError, match=r"argument 1 is 0\.25, captured as 0\.5.*pass values that change as Tensors"):
    f(x, 0.25)


def test_scalar_passed_as_a_tensor_replays_each_value():
  f = TinyJit(lambda a, lr: a * lr)
  x = Tensor(arr(4))
  for lr in (0.5, 0.25, 0.125, 2.0):
    np.testing.assert_allclose(f(x, Tensor(np.float32(lr))).numpy(), x.numpy() * lr, rtol=1e-6)


def test_jit_calling_a_jit():
  inner = TinyJit(lambda a: a + 1)
  outer = TinyJit(lambda a: inner(a) * 2)
  for _ in range(4):
    x = arr(6)
    np.testing.assert_allclose(outer(Tensor(x)).numpy(), (x + 1) * 2, rtol=1e-6)
  for _ in range(3):   # the inner one, used alone afterwards, is still right
    x = arr(6)
    np.testing.assert_allclose(inner(Tensor(x)).numpy(), x + 1, rtol=1e-6)


def test_jit_calling_a_captured_jit():
  inner = TinyJit(lambda a: a + 1)
  for _ in range(3): inner(Tensor(arr(6)))
  outer = TinyJit(lambda a: inner(a) * 2)
  for _ in range(4):
    x = arr(6)
    np.testing.assert_allclose(outer(Tensor(x)).numpy(), (x + 1) * 2, rtol=1e-6)


def test_returned_argument_is_the_new_argument():
  f = TinyJit(lambda a, b: (a, a + b))
  for _ in range(4):
    x, y = arr(3), arr(3)
    ra, rs = f(Tensor(x), Tensor(y))
    np.testing.assert_array_equal(ra.numpy(), x)
    np.testing.assert_allclose(rs.numpy(), x + y, rtol=1e-6)


def test_branch_on_a_realized_value_is_refused_at_capture():
  def f(a):
    return a * 2 if a.sum().item() > 0 else a * -2
  j = TinyJit(f)
  j(Tensor(np.ones(3, np.float32)))
  with pytest.raises(JitError, match=r"read a Tensor's value into Python"):
    j(Tensor(np.ones(3, np.float32)))


def test_capture_on_cpu_called_with_cl_tensors():
  f = TinyJit(lambda a: a + 1)
  f(Tensor(arr(3))); f(Tensor(arr(3)))
  with pytest.raises(JitError, match="Tensor argument 0 has device CL, captured with CPU"):
    f(Tensor(arr(3), device="CL"))


def test_changed_dtype_is_named():
  f = TinyJit(lambda a: a + 1)
  f(Tensor(arr(3))); f(Tensor(arr(3)))
  with pytest.raises(JitError, match="Tensor argument 0 has dtype dtypes.i32"):
    f(Tensor(np.arange(3, dtype=np.int32)))


@pytest.mark.parametrize("graph", [1, 0], ids=["step program", "kernel by kernel"])
@pytest.mark.parametrize("how", ["index", "gather"])
def test_a_replay_raises_on_a_computed_index_out_of_range(how, graph):
  """The eager realize raises IndexError when an index computed in a kernel is out of range (uopc.bounds); a replayed
  step checks the same flags, so a bad index in a later batch is not a silent 0."""
  from uopc.helpers import Context
  x = arr(5, 3)
  def pick(t, i):
    if how == "index": return t[i + 1] * 2                        # i + 1: an index only the kernel knows
    return t.gather(0, (i + 1).reshape(-1, 1).expand(i.shape[0], 3)) * 2
  with Context(JIT_GRAPH=graph):
    step = TinyJit(pick)
    for i in ([0, 2], [1, 3], [3, 0]):   # capture, then replays
      got = step(Tensor(x), Tensor(np.array(i, np.int32))).numpy()
      np.testing.assert_array_equal(got, x[np.array(i) + 1] * 2)
    assert step.steps is not None and (step.graph is not None) == bool(graph)
    with pytest.raises(IndexError, match="out of bounds"):
      step(Tensor(x), Tensor(np.array([1, 4], np.int32)))         # 4 + 1 = 5: past the 5 rows
    with pytest.raises(IndexError, match="out of bounds"):        # eager says the same
      pick(Tensor(x), Tensor(np.array([1, 4], np.int32))).numpy()

"""The Python of graph building made cheap (issue 29 item 4): each shortcut builds the very nodes the checked path
builds, and bad input still gets the checked path's error."""
import pickle
import numpy as np
import pytest
from uopc.dtype import DType, dtypes
from uopc.errors import UsageError
from uopc.helpers import clear_caches
from uopc.tensor import Tensor
from uopc.uop import UOp, Ops

pytestmark = pytest.mark.ch09


def test_a_dtype_is_one_object_per_value():
  assert DType("f32", 4, "f") is dtypes.f32
  assert pickle.loads(pickle.dumps(dtypes.f32.vec(8))) is dtypes.f32.vec(8)
  assert DType("f32", 4, "f", 8) is dtypes.f32.vec(8) and dtypes.f32.vec(8) != dtypes.f32
  assert len({dtypes.f32, DType("f32", 4, "f"), dtypes.i32}) == 2


def _built(shape, value, dtype=None) -> UOp:
  """Tensor.full's nodes, built by hand as it builds them."""
  c = Tensor(UOp.const(value, dtype))
  return c.reshape((1,) * len(shape)).expand(shape).uop if shape else c.uop


@pytest.mark.parametrize("value,dtype", [(0.0, None), (-0.0, None), (0, None), (False, None), (2, dtypes.f32),
                                         (2.0, None), (True, dtypes.f32), (float("nan"), None), (7, dtypes.i64)])
def test_full_from_its_memo_is_the_nodes_it_builds(value, dtype):
  clear_caches()
  for _ in range(2):   # built, then from the memo
    for shape in ((3, 4), (), (1, 5)): assert Tensor.full(shape, value, dtype).uop is _built(shape, value, dtype)
  assert Tensor.full((2,), -0.0).uop is not Tensor.full((2,), 0.0).uop   # 0.0 == -0.0, yet two constants


def test_full_still_refuses_bad_sizes_and_values():
  Tensor.full((2, 2), 1.0)
  with pytest.raises(UsageError, match="non-negative"): Tensor.full((-1, 2), 1.0)
  with pytest.raises(TypeError, match="sizes must be integers"): Tensor.full((2.0, 2), 1.0)
  with pytest.raises(TypeError, match="sizes must be integers"): Tensor.full(([2], 2), 1.0)
  with pytest.raises(TypeError, match="not a whole number"): Tensor.full((2,), 0.5, dtypes.i32)


def test_reshape_and_permute_shortcuts_build_the_checked_nodes():
  x = Tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
  assert x.reshape(6, 4).uop is x.reshape(-1, 4).uop is x.reshape(np.int64(6), 4).uop
  assert x.reshape(6, 4).uop is UOp(Ops.RESHAPE, (x.uop,), (6, 4))
  assert x.reshape((2, 3, 4)) is x
  assert x.permute(2, 0, 1).uop is x.permute(-1, 0, 1).uop is x.permute([2, 0, 1]).uop
  assert x.permute(2, 0, 1).uop is UOp(Ops.PERMUTE, (x.uop,), (2, 0, 1))
  assert x.permute(0, 1, 2) is x
  with pytest.raises(UsageError, match="cannot reshape"): x.reshape(5, 5)
  with pytest.raises(TypeError, match="sizes must be integers"): x.reshape(6.0, 4)
  with pytest.raises(UsageError, match="not a permutation"): x.permute(0, 0, 1)
  with pytest.raises(TypeError, match="must be integers"): x.permute(True, 0, 2)


def test_a_scalar_operand_builds_the_nodes_of_a_tensor_operand():
  x = Tensor(np.ones((2, 3), np.float32))
  assert (x * 2).uop is (x * Tensor.full((2, 3), 2.0)).uop
  assert (2 - x).uop is ((-x) + Tensor.full((2, 3), 2.0)).uop   # 2 - x is (-x) + 2
  i = Tensor(np.ones((2, 3), np.int32))
  assert (i * 0.5).dtype is dtypes.f32 and (i * 0.5).uop is (i.float() * Tensor.full((2, 3), 0.5)).uop


def _counting(monkeypatch, modules, name: str, original) -> list:
  """Each module's `name` replaced by original, counted (raising=False: a module that no longer imports it gets it,
  unused); returns the list of the calls' arguments."""
  calls: list = []
  def counted(*args):
    calls.append(args)
    return original(*args)
  for module in modules: monkeypatch.setattr(module, name, counted, raising=False)
  return calls


def test_a_pair_of_shapes_is_broadcast_once_per_program(monkeypatch):
  # issue 50: the elementwise ops of an eager training step asked broadcast_shape a few hundred times for a dozen pairs
  import uopc.mixin.elementwise as elementwise
  import uopc.mixin.shapes as shapes
  clear_caches()
  calls = _counting(monkeypatch, (shapes, elementwise), "broadcast_shape", shapes.broadcast_shape)
  a, b = Tensor(np.ones((4, 1), np.float32)), Tensor(np.ones((1, 5), np.float32))
  first = (a * b).uop
  (Tensor(np.ones((4, 1), np.float32)) * Tensor(np.ones((1, 5), np.float32)) < 2).where(1.0, b)
  assert len(calls) == 2   # (4, 1) with (1, 5) once; the where's three shapes once
  assert first is UOp(Ops.MUL, (a.expand(4, 5).uop, b.expand(4, 5).uop))   # the nodes expand() builds
  for _ in range(2):   # shapes that do not broadcast raise every time (nothing is remembered for them)
    with pytest.raises(UsageError, match="cannot be broadcast"): a.reshape(2, 2) * Tensor(np.ones(3, np.float32))


def test_reduced_axes_are_worked_out_once_per_question(monkeypatch):
  # issue 50: every sum asked axis_index twice per axis (ReduceMixin._add, then _reduce), and autograd's EXPAND rule
  # sums at every broadcast
  import uopc.mixin.reduce as reduce
  from uopc.mixin.shapes import axis_index
  clear_caches()
  calls = _counting(monkeypatch, (reduce,), "_axis", axis_index)
  x = Tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
  first = x.sum((0, 2), keepdim=True).uop
  assert len(calls) == 2   # each axis once: _reduce found _add's answer
  assert x.sum((0, 2), keepdim=True).uop is first and x.sum((2, 0), keepdim=True).uop is first
  assert x.sum(-1).uop is x.sum(2).uop and x.sum().uop is x.sum((0, 1, 2)).uop
  with pytest.raises(TypeError, match="must be an integer"): x.sum(True)       # hashes as 1, still refused
  with pytest.raises(TypeError, match="must be an integer"): x.sum((True, 0))
  with pytest.raises(IndexError, match="out of range"): x.sum(3)
  assert np.array_equal(x.sum((0, 2)).numpy(), np.arange(24, dtype=np.float32).reshape(2, 3, 4).sum((0, 2)))

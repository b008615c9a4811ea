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

"""Shared test setup."""
import pytest
from uopc.tensor import Tensor


@pytest.fixture(autouse=True)
def tensor_switches():
  """Tests may flip Tensor.fuse_reduce, Tensor.opt and Tensor.online_softmax; every test gets them back as they were."""
  old = Tensor.fuse_reduce, Tensor.opt, Tensor.online_softmax
  yield
  Tensor.fuse_reduce, Tensor.opt, Tensor.online_softmax = old

"""Shared test setup. Tests take the book's code from examples/ with uopc.book.load_example, never a copy."""
import pytest
from uopc.kernelize import isolated_plan_cache
from uopc.tensor import Tensor


@pytest.fixture
def fresh_plan_cache():
  """A plan cache of the test's own (for tests that patch a pass); the ordinary plans come back afterwards."""
  with isolated_plan_cache(): yield


@pytest.fixture(autouse=True)
def tensor_switches():
  """Tests may flip Tensor.fuse_reduce, Tensor.opt and Tensor.online_softmax; every test gets them back as they were."""
  old = Tensor.fuse_reduce, Tensor.opt, Tensor.online_softmax
  yield
  Tensor.fuse_reduce, Tensor.opt, Tensor.online_softmax = old

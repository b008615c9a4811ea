"""Shared test setup."""
import sys
from pathlib import Path
import pytest
from uopc.tensor import Tensor

# the book's example (examples/ is not a package): tests import its attention and FlashOpt rather than copy them
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))


@pytest.fixture(autouse=True)
def tensor_switches():
  """Tests may flip Tensor.fuse_reduce, Tensor.opt and Tensor.online_softmax; every test gets them back as they were."""
  old = Tensor.fuse_reduce, Tensor.opt, Tensor.online_softmax
  yield
  Tensor.fuse_reduce, Tensor.opt, Tensor.online_softmax = old

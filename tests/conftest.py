"""Shared test setup. Tests take the book's code from examples/ with uopc.book.load_example, never a copy."""
import os
import pytest
from hypothesis import settings
from uopc.kernelize import isolated_plan_cache
from uopc.errors import DeviceUnavailable
from uopc.tensor import Tensor

# The property tests (hypothesis) draw the same examples on every run, so `make test` and CI pass or fail alike on
# every machine; HYPOTHESIS_PROFILE=explore draws new examples each run, to hunt for bugs (a fresh clone's CI found
# a padding view the layout pass could not measure that way: tests/semantics/test_ch09_tensor.py)
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
  """A test that needs a device this machine lacks (uopc.errors.DeviceUnavailable: no OpenCL platform, or a PoCL whose
  LLVM does not know this CPU; no NVRTC; no GPU) is reported skipped, with the reason, not failed: the machine lacks
  the device, the code is right."""
  outcome = yield
  report = outcome.get_result()
  if call.excinfo is not None and call.excinfo.errisinstance(DeviceUnavailable) and report.when == "call":
    report.outcome = "skipped"
    report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {call.excinfo.value}")

"""Shared test setup. Tests take the book's code from examples/ with uopc.book.load_example, never a copy."""
import os
import re
from pathlib import Path
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


# ---- which tests CI runs again in its other environments (.ci/run), decided here once, from each module's text ----
# The x86 level reaches the C a kernel is rendered as only through the vector machinery (VectorOpt's lowerings, the
# vector flash kernels, the machine's ISA table, the tuner, and the nn modules and captured steps built on them): a
# test module of the wings that render and run kernels that names none of it renders the same C at every level (its
# scalar kernels differ only in the -march gcc is given). The grader's sandbox is never given UOPC_MARCH; the
# course, platform, viewer and bench wings run notebooks, the lock, cross compilers with their own targets, drawings
# and harnesses.
ISA_WINGS = {"spine", "runtime", "codegen", "semantics", "nn"}
ISA_WORDS = re.compile(r"VectorOpt|gemm_vec|vector_loops|codegen\.vector|flash_vec|kernels\.flash|"
                       r"scaled_dot_product_attention|uopc\.nn\b|runtime\.machine|runtime\.tune|native_lanes|UOPC_MARCH|"
                       r"\bgpt\b|render_step|TinyJit")
# The environment without the device packages (a Mac's) changes three things: the devices (CL, CUDA), OpenMP (the
# serial fallback) and the compiler (clang). A test module that names none of them behaves there as here; the grader
# runs on a Linux grading machine with gcc's OpenMP (README), so its wing stays here.
ENVIRONMENT_WORDS = re.compile(r'"CL"|"CUDA"|\bCL\b|\bCUDA\b|[Oo]pen[Mm][Pp]|\bOMP_NUM_THREADS\b|-fopenmp|'
                               r'DeviceUnavailable|_unavailable|nvrtc|[Oo]clgrind|%%needs|UOPC_WITHOUT|\bCC\b|clang')
TESTS = Path(__file__).resolve().parent


def pytest_configure(config):
  config.addinivalue_line("markers", "isa: its kernels' C depends on the x86 level (CI runs it at each lower level)")
  config.addinivalue_line("markers", "environment: it uses a device, OpenMP or the compiler (CI runs it again without "
                          "the device packages, OpenMP and gcc)")


def pytest_collection_modifyitems(config, items):
  marks: dict[Path, list] = {}
  for item in items:
    path = Path(item.path).resolve()
    if not path.is_relative_to(TESTS) or len(path.relative_to(TESTS).parts) < 2: continue
    if path not in marks:
      wing, text = path.relative_to(TESTS).parts[0], path.read_text()
      marks[path] = [m for m, rule in ((pytest.mark.isa, wing in ISA_WINGS and ISA_WORDS.search(text)),
                                      (pytest.mark.environment, wing != "grader" and ENVIRONMENT_WORDS.search(text)))
                     if rule]
    for m in marks[path]: item.add_marker(m)

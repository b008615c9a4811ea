"""Shared test setup. Tests take the book's code from examples/ with uopc.book.load_example, never a copy."""
import ast
import copy
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


# ---- which tests CI runs again in its other environments (.ci/run), decided here once, from each test's code ----
# The x86 level reaches the C a kernel is rendered as only through the vector machinery (VectorOpt's lowerings, the
# vector flash kernels, the machine's ISA table, the tuner, and the nn modules and captured steps built on them): a
# test of the wings that render and run kernels whose code names none of it renders the same C at every level (its
# scalar kernels differ only in the -march gcc is given). The grader's sandbox is never given UOPC_MARCH; the
# course, platform, viewer and bench wings run notebooks, the lock, cross compilers with their own targets, drawings
# and harnesses.
ISA_WINGS = {"spine", "runtime", "codegen", "semantics", "nn"}
ISA_WORDS = re.compile(r"VectorOpt|gemm_vec|vector_loops|codegen\.vector|flash_vec|kernels\.flash|"
                       r"scaled_dot_product_attention|uopc\.nn\b|runtime\.machine|runtime\.tune|native_lanes|UOPC_MARCH|"
                       r"\bgpt\b|render_step|TinyJit")
# The environment without the device packages (a Mac's) changes three things: the devices (CL, CUDA), OpenMP (the
# serial fallback) and the compiler (clang). A test whose code names none of them behaves there as here; the grader
# runs on a Linux grading machine with gcc's OpenMP (README), so its wing stays here.
ENVIRONMENT_WORDS = re.compile(r'"CL"|"CUDA"|\bCL\b|\bCUDA\b|[Oo]pen[Mm][Pp]|\bOMP_NUM_THREADS\b|-fopenmp|'
                               r'DeviceUnavailable|_unavailable|nvrtc|[Oo]clgrind|%%needs|UOPC_WITHOUT|\bCC\b|clang')
TESTS = Path(__file__).resolve().parent
# the wings whose files take minutes each (sandboxed gradings, cross compilers, notebooks, GPT steps), slowest first
SLOW_WINGS = ("grader", "platforms", "course", "nn")


def pytest_configure(config):
  config.addinivalue_line("markers", "isa: its kernels' C depends on the x86 level (CI runs it at each lower level)")
  config.addinivalue_line("markers", "environment: it uses a device, OpenMP or the compiler (CI runs it again without "
                          "the device packages, OpenMP and gcc)")


def _defines(node) -> set[str]:
  """The names a top-level statement binds (empty: it binds none, e.g. a bare call, and so reaches every test)."""
  if isinstance(node, (ast.Import, ast.ImportFrom)):
    return {(a.asname or a.name).split(".")[0] for a in node.names}
  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)): return {node.name}
  targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
  return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _uses(node) -> set[str]:
  """The names a definition reads, fixtures by their argument names among them."""
  names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
  return names | {a.arg for n in ast.walk(node) if isinstance(n, ast.arguments) for a in n.args + n.kwonlyargs}


def _code(node) -> str:
  """Code, not prose: ast.unparse drops comments; a docstring is left out. An import from one of tests/' own helper
  modules (capabilities, needs, ...) reads as that module's text: what the helper asks of the machine."""
  if isinstance(node, ast.ImportFrom) and node.module and (TESTS / f"{node.module}.py").is_file():
    return ast.unparse(node) + "\n" + (TESTS / f"{node.module}.py").read_text()
  body = getattr(node, "body", None)
  if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and \
     isinstance(body[0].value.value, str):
    node = copy.copy(node)
    node.body = body[1:] or [ast.Pass()]
  return ast.unparse(node)


def code_of_tests(path: Path) -> dict[str, str]:
  """Each test function or class of a module (by name) with the module's code that reaches it: its own definition
  with its decorators, every top-level definition it names (a helper, a fixture by its argument name, an import, a
  constant), transitively, and every top-level statement that binds no name or reaches every test (pytestmark, an
  autouse fixture)."""
  tree = ast.parse(path.read_text())
  is_test = lambda n: isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and \
    n.name.startswith(("test", "Test"))
  autouse = lambda n: "autouse" in ast.unparse(n.decorator_list) if hasattr(n, "decorator_list") else False
  defs: dict[str, list] = {}
  everywhere = []
  for n in tree.body:
    if is_test(n) or (isinstance(n, ast.Expr) and n is tree.body[0]): continue   # tests; the module's docstring
    names = _defines(n)
    if not names or "pytestmark" in names or autouse(n): everywhere.append(n)
    for name in names: defs.setdefault(name, []).append(n)
  def reach(roots: list) -> list:
    seen, todo, out = set(), list(roots), []
    while todo:
      n = todo.pop()
      if id(n) in seen: continue
      seen.add(id(n)); out.append(n)
      todo += [d for name in _uses(n) for d in defs.get(name, ())]
    return out
  return {n.name: "\n".join(_code(m) for m in reach([n, *everywhere])) for n in tree.body if is_test(n)}


def pytest_collection_modifyitems(config, items):
  # A test is marked when the words are in its code (code_of_tests: its own and what of its module it reaches), so a
  # module of 237 API tests, one of which runs attention, runs that one again, not all of them
  modules: dict[Path, dict[str, str]] = {}
  for item in items:
    path = Path(item.path).resolve()
    if not path.is_relative_to(TESTS) or len(path.relative_to(TESTS).parts) < 2 or path.suffix != ".py": continue
    if path not in modules: modules[path] = code_of_tests(path)
    wing = path.relative_to(TESTS).parts[0]
    name = item.cls.__name__ if getattr(item, "cls", None) is not None else getattr(item, "originalname", item.name)
    code = modules[path]
    text = code[name] if name in code else path.read_text()   # a test made some other way: its whole module
    for mark, rule in ((pytest.mark.isa, wing in ISA_WINGS and ISA_WORDS.search(text)),
                       (pytest.mark.environment, wing != "grader" and ENVIRONMENT_WORDS.search(text))):
      if rule: item.add_marker(mark)
  # xdist hands out whole files (--dist loadfile), in this order where make test says --no-loadscope-reorder (xdist's
  # own order, most tests first, starts the grader's files, a few tests of a minute each, late, and the last of them
  # can keep one worker busy alone at the end): the wings whose tests run for minutes go first
  items.sort(key=lambda item: SLOW_WINGS.index(wing_of(item)) if wing_of(item) in SLOW_WINGS else len(SLOW_WINGS))


def wing_of(item) -> str:
  path = Path(item.path).resolve()
  return path.relative_to(TESTS).parts[0] if path.is_relative_to(TESTS) else ""

"""How the compiler is built: no import cycles, passes read no global switch, a backend is a table.

These tests read uopc's own source (imports, names) and drive the renderer and device interfaces the way a new
backend would: by subclassing and registering, never by editing the kernelizer.
"""
import ast
import dataclasses
import re
from pathlib import Path
import numpy as np
import pytest
import uopc
import uopc.runtime.program
from uopc.device import DEVICES, get_device
from uopc.dtype import dtypes
from uopc.helpers import CACHES, Context, clear_caches
from uopc.kernelize import isolated_plan_cache, make_plan, plan_cache_size
from uopc.options import Options
from uopc.render_c import CRenderer, render_c
from uopc.runtime import Program
from uopc.tensor import Tensor
from uopc.uop import AxisType, Ops, ParamArg, UOp, range_, sink

PACKAGE = Path(uopc.__file__).resolve().parent
ROOT = PACKAGE.parent
MAX_LINES = 400   # a module a reader can hold in their head (STYLE.md)


def module_name(path: Path) -> str:
  """uopc/runtime/__init__.py -> runtime, uopc/nn/layers.py -> nn.layers."""
  parts = path.relative_to(PACKAGE).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if p.name != "__init__.py" or p.parent != PACKAGE}


def uopc_imports(path: Path) -> set[str]:
  """The uopc modules a file imports: at the top, inside functions and under `if TYPE_CHECKING:` alike (a circle
  that only the type checker walks is still a circle a reader walks). `from uopc.nn import layers` names the module
  uopc.nn.layers; `from uopc.nn import Linear` names uopc.nn. Importing a module of another package runs that
  package's __init__ first, so `import uopc.runtime.flags` from outside uopc.runtime names uopc.runtime too."""
  out = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      out |= {a.name.removeprefix("uopc.") for a in node.names if a.name.startswith("uopc.")}
    elif isinstance(node, ast.ImportFrom) and node.module and (node.module + ".").startswith("uopc."):
      base = node.module.removeprefix("uopc").removeprefix(".")
      for a in node.names:
        sub = f"{base}.{a.name}" if base else a.name
        out.add(sub if sub in MODULES else base)
  me = module_name(path) if path.is_relative_to(PACKAGE) else ""
  mine = me if path.name == "__init__.py" else me.rpartition(".")[0]   # the package this file is inside
  for m in list(out):   # the package __init__s an import runs on its way in
    parts = m.split(".")
    for k in range(1, len(parts)):
      pkg = ".".join(parts[:k])
      if pkg in MODULES and not (mine + ".").startswith(pkg + "."): out.add(pkg)
  return out - {me, ""}


# The floors of the package, bottom up, written down once: a module imports only modules of its own floor or below
# (at the top of the file or inside a function), and no import closes a cycle. A name stands for the module and, if
# it is a package, everything inside it. Observers sit below what they observe: the compiler calls uopc.trace, the
# viewer (a tool) listens to it.
FLOORS = [
  ("ground", "errors helpers ops dtype options trace capture checks plancache"),   # imports nothing of the compiler
  ("ir", "uop symbolic signature linearize races"),      # the UOp graph, index algebra, ordered lines, races
  ("lowering", "rangeify codegen"),                       # tensor-level bodies -> loop programs
  ("rendering", "renderer render_c render_gpu step_calls render_step"),   # loop programs -> source text
  ("runtime", "runtime device"),                          # compile, load, call; a device is a row of tables
  ("kernels", "kernels"),                                 # hand-written loop programs that need the machine's ISA
  ("planning", "explain plan_program kernelize"),                      # cut a graph into kernels; realize a plan
  ("optimizer", "opt"),                                   # handed to make_plan: layouts, opts, the tuner
  ("tensor", "mixin grad_mode bounds autograd tensor rng jit"),   # the user's Tensor, its gradients, capture and replay
  ("training", "optim"),                                  # optimizers over Tensors
  ("library", "nn"),                                      # modules, attention, the GPT, its training
  ("tools", "bench viz notebook book"),                   # benchmarks, the viewer, notebook magics, the book's loader
]


def floor_of(module: str) -> int:
  found = [n for n, (_, names) in enumerate(FLOORS) for name in names.split()
           if module == name or module.startswith(name + ".")]
  assert len(found) == 1, f"uopc.{module} is on {len(found)} floors: give it one in FLOORS"
  return found[0]


def test_every_module_has_one_floor():
  for m in MODULES: floor_of(m)


def test_no_import_runs_up_a_floor():
  up = [f"uopc.{m} ({FLOORS[floor_of(m)][0]}) imports uopc.{n} ({FLOORS[floor_of(n)][0]})"
        for m, p in MODULES.items() for n in sorted(uopc_imports(p)) if floor_of(n) > floor_of(m)]
  assert not up, "imports that run up a floor:\n" + "\n".join(up)


def test_an_import_inside_a_function_and_a_package_init_count(tmp_path):
  f = tmp_path / "m.py"
  f.write_text("def draw():\n  from uopc.viz.dag import uop_svg\n  import uopc.runtime.flags\n")
  assert uopc_imports(f) == {"viz", "viz.dag", "runtime", "runtime.flags"}
  assert {"runtime.machine"} <= uopc_imports(PACKAGE / "runtime" / "build.py") and \
    "runtime" not in uopc_imports(PACKAGE / "runtime" / "build.py")   # its own package is already being imported


def test_the_spine_never_imports_the_viewer():
  spine = [m for m in MODULES if floor_of(m) < floor_of("viz")]
  assert not [m for m in spine if any(n == "viz" or n.startswith("viz.") for n in uopc_imports(MODULES[m]))]


def test_no_import_cycles_among_uopc_modules():
  graph = {m: uopc_imports(p) for m, p in MODULES.items()}
  state: dict[str, int] = {}   # 1 on the current path, 2 done
  def visit(m: str, path: list[str]) -> None:
    state[m] = 1
    for n in sorted(graph.get(m, ())):
      if state.get(n) == 1: pytest.fail(f"import cycle: {' -> '.join(path[path.index(n):] + [n])}")
      if n not in state: visit(n, path + [n])
    state[m] = 2
  for m in sorted(graph):
    if m not in state: visit(m, [m])
  assert "rangeify" in graph["kernelize"] and "runtime.tune" in graph   # the walk saw the real graph


def test_a_cycle_hidden_under_type_checking_is_found(tmp_path):
  f = tmp_path / "m.py"
  f.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING: from uopc.tensor import Tensor\n")
  assert uopc_imports(f) == {"tensor"}


def test_every_module_is_short_enough_to_read():
  long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
  assert not long, f"modules over {MAX_LINES} lines: {long}"


# render_c is the book's (it imports uopc.render_c); render_gpu is its sibling dialect table, so `render_` stays a
# prefix of two top-level modules instead of a folder that would move the book's import
PREFIXES_ALLOWED = {"render"}


def test_no_name_prefix_stands_for_a_missing_folder():
  top = [p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"]
  groups: dict[str, list[str]] = {}
  for stem in top:
    if "_" in stem: groups.setdefault(stem.split("_")[0], []).append(stem)
  for stem in top: groups.get(stem, []).append(stem)
  crowded = {k: sorted(v) for k, v in groups.items() if len(v) > 1 and k not in PREFIXES_ALLOWED}
  assert not crowded, f"a prefix shared by several modules is a folder waiting to be made: {crowded}"


def test_the_kernelizer_imports_no_renderer_or_runtime():
  assert not uopc_imports(PACKAGE / "kernelize.py") & {"render_c", "renderer", "runtime"}


def test_no_lowering_pass_compiles_or_times_code():
  """uopc.codegen builds loop programs; rendering, compiling and timing them belong to the optimizer that hands a
  lowering its tuner (uopc.opt) and to the runtime."""
  for m, path in MODULES.items():
    if m.startswith("codegen."):
      found = {i for i in uopc_imports(path) if i == "render_c" or i.split(".")[0] == "runtime"}
      assert not found, f"uopc.{m} imports {sorted(found)}"


# names of the global switches and read-backs issue 12 removed (spelled in pieces so this file does not match itself)
GONE = ["ONLINE_" + "SOFTMAX", r"Ctx\." + "latest", "_get" + "frame", r"\b_" + r"plans\b"]


@pytest.mark.parametrize("folder", ["uopc", "tests", "chapters", "notes", "solutions", "scripts"])
def test_no_hidden_switches_outside_their_owner(folder):
  for path in sorted((ROOT / folder).rglob("*.py")):
    if path.name == "kernelize.py": continue   # it owns the plan cache
    text = path.read_text()
    found = [g for g in GONE if re.search(g, text)]
    assert not found, f"{path.relative_to(ROOT)} uses {found}"


# ---- module state: a memo has one owner, registered with uopc.helpers.cache, and clear_caches() empties it ----
def _entries(store) -> int:
  return len(store) if hasattr(store, "__len__") else store.cache_info().currsize   # a dict, a PlanCache, an lru_cache


def test_clear_caches_empties_every_memo_and_realize_still_computes(fresh_plan_cache):
  x = np.random.default_rng(1).standard_normal((5, 7)).astype(np.float32)
  e = np.exp(x - x.max(-1, keepdims=True))
  np.testing.assert_allclose((Tensor(x).softmax(-1) * 2).numpy(), 2 * e / e.sum(-1, keepdims=True), rtol=1e-5)
  assert {"kernelize.plans", "device.opened", "rangeify.accumulators"} <= set(CACHES)
  assert _entries(CACHES["kernelize.plans"]) and _entries(CACHES["device.opened"])   # the realize filled them
  clear_caches()
  assert {name: _entries(store) for name, store in CACHES.items() if _entries(store)} == {}
  np.testing.assert_allclose((Tensor(x).softmax(-1) * 2).numpy(), 2 * e / e.sum(-1, keepdims=True), rtol=1e-5)
  assert plan_cache_size() == 1   # planned again, into the same cache


def test_an_isolated_plan_cache_is_the_registered_cache_with_other_contents():
  outer = CACHES["kernelize.plans"]
  with isolated_plan_cache() as inner:
    assert inner is CACHES["kernelize.plans"] is outer and plan_cache_size() == 0   # swapped contents, same owner
    Tensor(np.ones(3, np.float32)).exp().numpy()
    assert plan_cache_size() == 1
  assert CACHES["kernelize.plans"] is outer


@pytest.mark.parametrize("module", ["kernelize", "plancache", "rangeify", "device", "capture"])
def test_module_state_is_never_rebound(module):
  tree = ast.parse(MODULES[module].read_text())
  assert not [n.names for n in ast.walk(tree) if isinstance(n, ast.Global)], f"{module} rebinds a module global"


class NamedRenderer(CRenderer):
  """C whose kernels are all called uopc_<name>: a renderer made only by subclassing."""
  def render(self, sink, name): return super().render(sink, "uopc_" + name)


@pytest.fixture
def named_device(monkeypatch):
  cpu = get_device("CPU")
  monkeypatch.setitem(DEVICES, "NAMED", lambda: dataclasses.replace(cpu, name="NAMED", renderer=NamedRenderer()))
  return "NAMED"


def test_a_subclassed_renderer_realizes_a_tensor_program(named_device, fresh_plan_cache):
  x = np.random.default_rng(0).standard_normal((6, 10)).astype(np.float32)
  with Context(DEVICE=named_device):
    out = Tensor(x).softmax(-1).numpy()
    t = Tensor(x).softmax(-1)
  e = np.exp(x - x.max(-1, keepdims=True))
  np.testing.assert_allclose(out, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
  plan = make_plan([t.uop], options=Options(opt=Tensor.opt, device=named_device))
  assert [k.name for k in plan.kernels] == ["uopc_r_6", "uopc_r_6", "uopc_e_6_10"]
  assert all(k.src.startswith(f"void {k.name}(") for k in plan.kernels)
  cpu_plan = make_plan([t.uop], options=Options(opt=Tensor.opt))
  assert [k.name for k in cpu_plan.kernels] == ["r_6", "r_6", "e_6_10"]   # one plan per device, same kernelizer


def test_an_unknown_device_is_named_in_the_error():
  with pytest.raises(ValueError, match="unknown device 'TPU'.*CPU"):
    make_plan([Tensor(np.ones(3, np.float32)).exp().uop], options=Options(device="TPU"))


def copy_program(n: int) -> UOp:
  src, dst = (UOp(Ops.BUFFER, (), ParamArg(k, dtypes.f32, (n,))) for k in range(2))
  i = range_(n, 0, AxisType.THREAD)
  return sink(dst.index(i).store(src.index(i).load() * 2.0).end(i))


def test_rendered_kernels_carry_their_signature_and_are_never_parsed(monkeypatch):
  src = render_c(copy_program(8), "twice")
  assert [(p.name, p.size, p.writes) for p in src.signature.params] == [("data0", 8, False), ("data1", 8, True)]
  monkeypatch.setattr(uopc.runtime.program, "signature_from_c", lambda *a: pytest.fail("a rendered kernel was parsed"))
  a, out = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
  Program(src, "twice")(a, out)
  np.testing.assert_array_equal(out, 2 * a)


def test_a_read_only_input_is_accepted_and_a_short_buffer_refused():
  prg = Program(render_c(copy_program(8), "twice"), "twice")
  a = np.arange(8, dtype=np.float32)
  a.flags.writeable = False   # the kernel only reads data0
  out = np.zeros(8, np.float32)
  prg(a, out)
  with pytest.raises(ValueError, match="argument 1 has 4 elements, the kernel indexes 8"):
    prg(a, np.zeros(4, np.float32))


@pytest.mark.parametrize("name", ["../../x", "a b", "1abc", "f;system", ""])
def test_a_kernel_name_must_be_a_c_identifier(name):
  with pytest.raises(ValueError, match="not a C identifier"):
    Program("void f(float* a) {}", name)
  with pytest.raises(ValueError, match="not a C identifier"):
    render_c(copy_program(4), name)


BOOK_LINES = {   # the lines of uopc/kernelize.py that chapter 11 cites by number, as it prints them
  121: "  roots = [graph_rewrite(r, strip_detach) for r in roots]",
  122: "  # fuse_reduce asks for \"never write the big intermediate\", so don't stage broadcasts either",
  123: "  if not fuse_reduce: roots = stage_broadcast_compute(roots)",
  124: "  if opt is not None: roots = opt.layout(roots)",
  125: "  points = _materialize_points(roots, fuse_reduce)",
  203: "  if plan.temp_arrays is None: plan.temp_arrays = [np.empty(n, np_dtype(d)) for d, n in plan.temps]",
  204: "  temps = plan.temp_arrays",
}


def test_the_lines_the_book_cites_are_where_it_cites_them():
  lines = (PACKAGE / "kernelize.py").read_text().splitlines()
  assert {n: lines[n - 1] for n in BOOK_LINES} == BOOK_LINES

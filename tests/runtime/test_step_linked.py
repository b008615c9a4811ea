"""A step program linked from its kernels' own objects (uopc.render_step.LINKED, uopc.runtime.graph.kernel_objects;
NOTES 69): each kernel is its own build's C text compiled alone, so the step runs its own build's machine code. Proved
from the program (the objects' text, their machine code, the teams they can start) and by the bits it computes."""
import re
import shutil
import subprocess
import numpy as np
import pytest
from uopc.device import _cpu_graph_links
from uopc.helpers import Context
from uopc.render_step import BARRIER, COPY, LINKED, KernelObject, StepSource
from uopc.runtime.graph import StepProgram
from uopc.step_calls import Call
from uopc.tensor import Tensor

pytestmark = [pytest.mark.ch14,
              pytest.mark.skipif(not _cpu_graph_links(), reason="this toolchain cannot link a step (not gcc on Linux)")]


def test_a_kernels_parallel_loop_is_shared_by_the_steps_team_and_a_serial_one_runs_on_one_thread():
  """The wrapper of GOMP_parallel, on a kernel that records which thread ran each iteration: called shared, the two
  threads of the step's team take their halves (OpenMP's static schedule); called alone, one thread runs all."""
  who = KernelObject("#include <omp.h>\nvoid who(int* restrict out) {\n  #pragma omp parallel for\n"
                     "  for (int i = 0; i < 8; i++) out[i] = omp_get_thread_num() + 10 * omp_get_num_threads();\n}\n",
                     "who", "who_linked", 1)
  body = ["UOPC_SHARED(who_linked(b[0]));", "uopc_barrier(&bar, nth, &sense);", "#pragma omp single nowait",
          "who_linked(b[1]);"]
  head = [LINKED, "void who_linked(void*);", BARRIER, COPY, "void uopc_step(void** b) {", "  uopc_bar bar = {0, 0, 0};",
          "#pragma omp parallel", "  {", "    int nth = uopc_threads(), sense = 0;"]
  src = "\n".join(head + ["    " + ln for ln in body] + ["  }", "}"])
  prg = StepProgram(StepSource(src, "uopc_step", 1, 1, 1, 1, body, 0, (who,)), 2)
  shared, alone = np.full(8, -1, np.int32), np.full(8, -1, np.int32)
  prg.bind(0, shared); prg.bind(1, alone)
  prg.threads = 2
  prg()
  assert shared.tolist() == [20, 20, 20, 20, 21, 21, 21, 21]   # a team of 2, each thread its half
  assert alone.tolist() == [10] * 8                            # a team of one


def captured_mlp_step():
  from test_step_program import batches, mlp_step
  (graph, params, _), (kernels, kparams, _) = mlp_step(seed=3), mlp_step(seed=3)
  return graph, params, kernels, kparams, batches(4)


def test_a_linked_steps_objects_are_its_kernels_own_text_and_the_step_only_calls_them():
  graph, _, _, _, data = captured_mlp_step()
  for x, y in data[:3]: graph(Tensor(x), Tensor(y))
  step, calls = graph.graph.program.step, graph.graph.calls
  own = {c.prg.src for c in calls if isinstance(c, Call) and c.prg is not None}
  aliased = [o for o in step.objects if o.src not in own]
  assert step.objects and all(re.search(r"float\* data\d", o.src.split("{")[0]) for o in aliased)   # no restrict
  in_place = sum(isinstance(c, Call) and len(set(c.bufs)) < len(c.bufs) for c in calls)
  assert len(aliased) <= in_place   # every other object is the very text a kernel's own build compiled
  assert "for (" not in step.src.split("void uopc_step")[1]   # the step's own code: calls and barriers, no loops
  assert len({o.name for o in step.objects}) == len(step.objects) == step.functions


def test_a_linked_step_is_bit_for_bit_its_kernels_at_two_threads():
  graph, params, kernels, kparams, data = captured_mlp_step()
  for k, (x, y) in enumerate(data):
    if graph.graph is not None: graph.graph.program.threads = 2
    a = graph(Tensor(x), Tensor(y)).item()
    with Context(JIT_GRAPH=0): b = kernels(Tensor(x), Tensor(y)).item()
    assert a == b, f"step {k}"
  for p, q in zip(params, kparams): np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_a_kernel_object_starts_no_team_but_through_gomp_parallel():
  """The wrapper sees every team a kernel starts only if GOMP_parallel is the one libgomp entry its code calls (render_c
  writes `parallel for` with the static schedule, which gcc expands inline around that call)."""
  if shutil.which("nm") is None: pytest.skip("no nm here")
  graph, _, _, _, data = captured_mlp_step()
  for x, y in data[:3]: graph(Tensor(x), Tensor(y))
  objects = graph.graph.program.objects
  undefined = set()
  for o in objects:
    undefined |= set(subprocess.run(["nm", "-u", str(o)], capture_output=True, text=True, check=True).stdout.split())
  assert objects and {s for s in undefined if s.startswith(("GOMP_", "omp_"))} <= \
    {"GOMP_parallel", "omp_get_num_threads", "omp_get_thread_num"}
  assert "GOMP_parallel" in undefined


def test_the_padded_convolution_in_a_step_is_its_own_builds_machine_code():
  """NOTES 68's kernel: the part one thread runs of its `parallel for`, disassembled from its own build and from the
  step, is the same instructions."""
  if shutil.which("objdump") is None: pytest.skip("no objdump here")
  from test_step_program import replayed_and_eager_padded_convolution
  from uopc.jit import TinyJit
  from uopc import nn, no_grad
  conv = nn.Conv2d(1, 6, 5, padding=2)
  x = np.random.default_rng(0).standard_normal((8, 1, 28, 28)).astype(np.float32)
  with no_grad():
    step = TinyJit(lambda t: conv(t).realize())
    for _ in range(3): step(Tensor(x))
  call = next(c for c in step.graph.calls if isinstance(c, Call) and c.name.startswith("r_"))
  # the step renamed the kernel's function (objcopy), not the part its loop outlined (a local symbol of the object)
  def part(path, fn: str) -> list[str]:
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True).stdout
    body = dis.split(f"<{fn}._omp_fn.0>:\n")[1].split("\n\n")[0]
    return [re.sub(r"[0-9a-f]+ <[^>]*>", "", ln.split(":", 1)[1]).strip() for ln in body.splitlines()]
  assert part(call.prg.path, call.prg.name) == part(step.graph.program.path, call.prg.name)
  np.testing.assert_array_equal(*replayed_and_eager_padded_convolution(linked=True))   # and so the same bits


def test_same_machine_code_is_the_kernels_own_build_and_nothing_else():
  """Rule 6 of write_in_place (NOTES 71) asks this of a kernel written in place: its own text is its own build's code;
  a text whose constants or loops differ is not, whatever its name."""
  if shutil.which("objdump") is None: pytest.skip("no objdump here")
  from uopc.runtime import Program
  from uopc.runtime.graph import same_machine_code
  src = ("void scale_k(float* restrict a, const float* restrict b) {\n"
         "  for (int i = 0; i < 1024; i++) a[i] = b[i] * 0.5f + 1.0f;\n}\n")
  prg = Program(src, "scale_k", linkable=True)
  assert same_machine_code(src, "scale_k", prg)
  assert same_machine_code(src.replace("scale_k", "other_k"), "other_k", prg)   # the name aside
  assert not same_machine_code(src.replace("0.5f", "0.25f"), "scale_k", prg)    # another constant
  assert not same_machine_code(src.replace("1024", "1000"), "scale_k", prg)     # another loop
  aliased = src.replace("float* restrict a", "float* a").replace("const float* restrict b", "const float* b")
  assert not same_machine_code(aliased, "scale_k", prg)   # without restrict gcc checks the overlap at run time

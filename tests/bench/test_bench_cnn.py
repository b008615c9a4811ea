"""`python -m uopc.bench cnn` (issue 50): the LeNet-5 training step's table in `bench gpt`'s format, its losses against
PyTorch eager's (skipped without torch), and the convolutions' loops read from the generated C: no division or
modulo per element in the innermost loops of the forward convolution and both backward ones."""
import importlib.util
import re
import numpy as np
import pytest
from uopc.bench.cnn import LOSS_TOL, cnn, compare_losses, lenet, loss_line, model_flops
from uopc.kernelize import make_plan
from uopc.opt import VectorOpt
from uopc.options import Options
from uopc.symbolic import ranges_in
from uopc.uop import Ops
from uopc.tensor import Tensor

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="PyTorch is an optional peer")


def test_the_table_has_both_uopc_peers_the_machine_and_a_summary(fresh_plan_cache):
  rows = cnn(reps=1, warmup=1, torch_peers=(), check_losses=False)
  impl = [r.split()[0] for r in rows if re.match(r"^uopc( jit)? +\d+\.\d ms", r)]
  assert impl == ["uopc", "uopc"] and any(r.startswith("uopc jit ") for r in rows)
  assert any(re.search(r"lscpu (family \d+ model \d+|\(unknown\))", r) for r in rows)
  assert any(r.startswith("# summary          threads=") and "uopc_jit_ms=" in r for r in rows)
  flops = next(int(m.group(1)) for r in rows if (m := re.search(r"step's (\d+) MFLOP \(the model's", r)))
  assert flops == round(model_flops(lenet()) / 1e6)   # every peer rated by the model's work, not uopc's kernels'


def test_the_model_flops_are_each_layers_products():
  """LeNet-5 at batch 64, 2 FLOPs a multiply-add: conv1 6x1x5x5 over 28x28 outputs, conv2 16x6x5x5 over 10x10,
  linear 400-120, 120-84, 84-10; the forward product, the weight gradient, and the input gradient for all but the
  first layer. uopc's kernels execute more (a vector convolution's overlapping lanes, the input gradient's zero
  border): the table's rate must not credit that to every peer."""
  conv1, conv2 = 2 * 64 * 6 * 1 * 25 * 28 * 28, 2 * 64 * 16 * 6 * 25 * 10 * 10
  linear = 2 * 64 * (400 * 120 + 120 * 84 + 84 * 10)
  assert model_flops(lenet()) == 2 * conv1 + 3 * (conv2 + linear)


def test_the_loss_line_says_whether_the_losses_agree():
  assert "(within 1e-05)" in loss_line([2.3, 2.2], [2.3 + 1e-6, 2.2])
  assert "(NOT within 1e-05)" in loss_line([2.3, 2.2], [2.3, 2.2 + 1e-4])
  assert "not compared" in loss_line([2.3], "torch is not importable")


@needs_torch
def test_twenty_losses_agree_with_pytorch_eager(fresh_plan_cache):
  mine, theirs = compare_losses(threads=1)
  assert len(mine) == len(theirs) == 20
  np.testing.assert_allclose(mine, theirs, rtol=0, atol=LOSS_TOL)
  assert abs(mine[0] - np.log(10)) < 0.1   # an untrained classifier of 10 classes


# ---- the convolutions' C: index arithmetic per element (a division, a modulo) in the innermost loop ----
def innermost_loop_bodies(src: str) -> list[str]:
  """The text of every for loop that contains no other loop (by brace matching over the kernel's C)."""
  bodies = []
  for m in re.finditer(r"for \(int \w+ = 0; \w+ < \d+; \w+(\+\+|\+= ?\d+)\) \{", src):
    depth, k = 1, m.end()
    while depth:
      depth += {"{": 1, "}": -1}.get(src[k], 0); k += 1
    body = src[m.end():k - 1]
    if "for (" not in body: bodies.append(body)
  return bodies


def per_element_div_mod(src: str) -> list[str]:
  """The innermost loops' statements that divide or take a modulo of an integer (not a float division: a / b of
  floats is arithmetic, an index / 15 is addressing)."""
  found = []
  for body in innermost_loop_bodies(src):
    for line in body.splitlines():
      integer_div = re.search(r"[\w)]+ ?/ ?\d+\b(?!\.)", line) and not re.search(r"/ ?\d+\.\d*f", line)
      if "%" in line or integer_div: found.append(line.strip())
  return found


def conv_layer_kernels(cin: int, hw: int, lanes: int | None = None, opt=VectorOpt):
  """One LeNet convolution's forward and its two backward convolutions (the weight's and the input's gradients),
  built and planned under `opt` (VectorOpt with `lanes` lanes, or the machine's): the plan's kernels, and the kernel
  that computes each of y, dw and dx (by the shape of its output; a reduction)."""
  Tensor.opt = opt   # the optimizer the graph is built under chooses the gradients' form (uopc.mixin.windows)
  rng = np.random.default_rng(0)
  x = Tensor(rng.standard_normal((64, cin, hw, hw)).astype(np.float32), requires_grad=True)
  conv = lenet()[0 if cin == 1 else 3]
  y = conv(x)
  (y * Tensor(rng.standard_normal(y.shape).astype(np.float32))).sum().backward()
  kernels = make_plan([y.uop, conv.weight.grad.uop, x.grad.uop], options=Options(opt=opt, lanes=lanes)).kernels
  by_shape = lambda shape: next((k for k in kernels if k.body.shape == shape and k.name.startswith("r_")), None)
  named = {"y": by_shape(y.shape), "dw": by_shape(conv.weight.shape), "dx": by_shape(x.shape)}
  return kernels, {name: k for name, k in named.items() if k is not None}


def test_the_checker_finds_an_index_division():
  src = "void k(float* d) {\n  for (int i = 0; i < 8; i++) {\n    int a = (i%15);\n    d[a] = 1.0f / 3.0f;\n  }\n}"
  assert per_element_div_mod(src) == ["int a = (i%15);"]
  assert per_element_div_mod(src.replace("(i%15)", "(i*15)")) == []   # a float division is not addressing


@pytest.mark.parametrize("cin, hw", [(1, 28), (6, 14)], ids=["conv1", "conv2"])
def test_no_division_or_modulo_per_element_in_the_convolutions(fresh_plan_cache, cin, hw):
  """Every kernel of the forward convolution and of both backward ones (the input's gradient is a convolution of g,
  uopc.mixin.windows._conv_grads; without it, the windows' gradients folded back as shifted copies, _fold, not
  through the transpose of the view's repeat, which had both)."""
  kernels, named = conv_layer_kernels(cin, hw)
  assert {k.name: per_element_div_mod(str(k.src)) for k in kernels} == {k.name: [] for k in kernels}
  assert set(named) == {"y", "dw", "dx"}   # the forward and both gradients are reduces of their own


def test_without_the_fold_the_input_gradient_has_them(fresh_plan_cache, monkeypatch):
  import uopc.mixin.windows
  monkeypatch.setattr(uopc.mixin.windows, "CONV_GRADS_AS_CONVS", False)   # autograd's gradient, through the view
  monkeypatch.setattr(uopc.mixin.windows, "MAX_FOLD_TERMS", 0)
  kernels, _ = conv_layer_kernels(6, 14)
  assert any(per_element_div_mod(str(k.src)) for k in kernels)   # the checker sees what _fold replaced


# ---- the convolutions as vector code (issue 50): plain reads by lanes, and the weight gradient in partial sums ----
def index_comparisons(prog) -> list:
  """The comparisons of loop indices in a loop program: a padding check (is this read inside the input?). A vector's
  constant lane mask compares no loop variable."""
  return [u for u in prog.toposort() if u.op in (Ops.CMPLT, Ops.CMPNE) and u.src[0].dtype.kind in "iu"
          and ranges_in(u)]


def vector_accumulators(prog) -> list:
  """The accumulators (ALLOCs) of a loop program that hold vectors."""
  return [u for u in prog.toposort() if u.op is Ops.ALLOC and u.arg.dtype.count > 1]


@pytest.mark.parametrize("lanes", [4, 8, 16])
@pytest.mark.parametrize("cin, hw", [(1, 28), (6, 14)], ids=["conv1", "conv2"])
def test_the_convolutions_are_vector_code_reading_plain_buffers(fresh_plan_cache, cin, hw, lanes):
  """The forward convolution and both backward ones, read from the program: vector accumulators, no padding check
  anywhere in the kernel (the padded input is a buffer of its own: uopc.codegen.vector_loops.stage_window_pads), and
  the weight gradient's long sum (over batch x output pixels) held as partial sums in more than one vector."""
  kernels, named = conv_layer_kernels(cin, hw, lanes)
  assert {k: index_comparisons(named[k].ast) for k in named} == {k: [] for k in named}
  assert {k: len(vector_accumulators(named[k].ast)) > 0 for k in named} == {k: True for k in named}
  assert len(vector_accumulators(named["dw"].ast)) > 1
  assert {k.name: per_element_div_mod(str(k.src)) for k in kernels} == {k.name: [] for k in kernels}


def test_the_default_optimizer_keeps_autograds_input_gradient(fresh_plan_cache):
  """The book's optimizer (scalar code, padding checks inline) runs the full convolution of g at half the speed of
  autograd's windows' gradient and its fold: a graph built under it keeps those (no reduction computes dx)."""
  from uopc.opt import DefaultOpt
  _, named = conv_layer_kernels(6, 14, opt=DefaultOpt)
  assert set(named) == {"y", "dw"}


def test_the_kernel_times_are_the_steps_own_plan():
  """The kernel table times the plan the step runs, found in the plan cache: step_roots gathers what opt.step's realize
  computes beside the loss and the updates (the pending .grads), not another graph planned and compiled again (whose
  plan build the "schedule" row then printed as the step's)."""
  from uopc.bench.cnn import batches, step_roots, trainer
  from uopc.bench.steps import kernel_times
  from uopc.kernelize import isolated_plan_cache
  with isolated_plan_cache() as cache:
    model, opt, step = trainer()
    data = batches(2)
    step(*data[0])
    plans = len(cache)
    kernel_times(step_roots(model, opt, *data[1]), reps=1)
    assert len(cache) == plans == 1

"""Chapter 8, realize: the plan cache, temporaries reused across runs, DEBUG output, FLOP counts."""
import math
import re
import numpy as np
import pytest
from uopc.helpers import Context
from uopc.kernelize import make_plan, realize
from uopc.opt import DefaultOpt
from uopc.render_c import count_flops
from uopc.tensor import Tensor

pytestmark = pytest.mark.ch08




def attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
  return (q @ k.T * (1 / math.sqrt(q.shape[-1]))).softmax(-1) @ v


def inputs(N: int, D: int, seed: int = 0) -> list[np.ndarray]:
  rng = np.random.default_rng(seed)
  return [rng.standard_normal((N, D)).astype(np.float32) for _ in range(3)]


def reference(q, k, v):
  s = q @ k.T / math.sqrt(q.shape[-1])
  p = np.exp(s - s.max(-1, keepdims=True))
  return p / p.sum(-1, keepdims=True) @ v


def test_same_graph_shape_same_plan_object():
  a = attention(*(Tensor(x) for x in inputs(64, 16, 0)))
  b = attention(*(Tensor(x) for x in inputs(64, 16, 1)))      # other data, same shape
  assert make_plan([a.uop], False, DefaultOpt) is make_plan([b.uop], False, DefaultOpt)
  c = attention(*(Tensor(x) for x in inputs(32, 16, 0)))
  assert make_plan([c.uop], False, DefaultOpt) is not make_plan([a.uop], False, DefaultOpt)
  assert make_plan([a.uop], True, DefaultOpt) is not make_plan([a.uop], False, DefaultOpt)


def test_second_realize_reuses_plan_and_temporaries():
  first_in, second_in = inputs(128, 16, 0), inputs(128, 16, 1)
  first = attention(*(Tensor(x) for x in first_in))
  plan = make_plan([first.uop], False, DefaultOpt)
  out1 = first.numpy().copy()
  temps = plan.temp_arrays
  assert temps is not None and [t.size for t in temps] == [n for _, n in plan.temps]
  second = attention(*(Tensor(x) for x in second_in))
  assert make_plan([second.uop], False, DefaultOpt) is plan
  out2 = second.numpy()
  assert plan.temp_arrays is temps and all(a is b for a, b in zip(plan.temp_arrays, temps))
  np.testing.assert_allclose(out1, reference(*first_in), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(out2, reference(*second_in), rtol=1e-4, atol=1e-5)
  assert not np.shares_memory(out1, out2)      # outputs are fresh arrays; only temporaries are reused


def test_realize_is_lazy_and_idempotent():
  x = Tensor(np.arange(6, dtype=np.float32))
  y = x * 2
  assert y.realize() is y
  first = y.numpy()
  assert y.numpy() is not None and np.shares_memory(y.numpy(), first)   # a realized tensor is data: nothing reruns
  np.testing.assert_array_equal(first, np.arange(6) * 2)


KERNEL_LINE = re.compile(r"^  (\w+) +(\d+\.\d{3}) ms +(\d+\.\d{2}) GFLOP/s$")
SUMMARY = re.compile(r"^realize: (\d+) kernels, schedule (\d+\.\d) ms, run (\d+\.\d) ms$")


def test_debug2_prints_one_line_per_kernel_and_a_summary(capsys):
  out = attention(*(Tensor(x) for x in inputs(128, 16)))
  names = [k.name for k in make_plan([out.uop], False, DefaultOpt).kernels]
  capsys.readouterr()
  with Context(DEBUG=2): out.numpy()
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == 7
  assert [KERNEL_LINE.match(ln).group(1) for ln in lines[:6]] == names == \
    ["r_128_128", "r_128", "r_128", "e_128_128", "e_1_16_128", "r_128_16"]
  m = SUMMARY.match(lines[6])
  assert m and m.group(1) == "6"


def test_debug3_adds_the_again_column_and_debug4_the_source(capsys):
  x = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8))
  with Context(DEBUG=3): (x.sum(1) * 2).numpy()
  lines = capsys.readouterr().out.splitlines()
  assert re.match(r"^  r_8 +\d+\.\d{3} ms +\d+\.\d{2} GFLOP/s   again +\d+\.\d{3} ms$", lines[0])
  assert SUMMARY.match(lines[-1])
  with Context(DEBUG=4): (x.max(0) + 1).numpy()
  out = capsys.readouterr().out
  assert out.startswith("void r_8(float* restrict data0, float* restrict data1) {")
  assert "#pragma omp parallel for" in out


def test_no_output_without_debug(capsys):
  (Tensor(np.ones(4, np.float32)) + 1).numpy()
  assert capsys.readouterr().out == ""


def test_flops_of_the_attention_kernels():
  N, D = 256, 32
  out = attention(*(Tensor.randn(N, D, seed=s) for s in range(3)))
  plan = make_plan([out.uop], False, DefaultOpt)
  qk, rowmax, _, _, copy, pv = plan.kernels
  assert qk.flops == count_flops(qk.ast) == 2 * N * N * D      # one multiply and one add per term
  assert pv.flops == 2 * N * N * D
  assert rowmax.flops == 2 * N * N                             # the scale and the max
  assert copy.flops == 0                                       # a copy does no arithmetic


def test_outputs_are_not_reused_between_realizes():
  x = Tensor(np.arange(4, dtype=np.float32))
  a, b = (x + 1).numpy(), (x + 1).numpy()
  assert not np.shares_memory(a, b)
  (r,) = realize([(x * 3).uop])
  np.testing.assert_array_equal(r, np.arange(4) * 3)


def test_alike_kernels_of_one_plan_are_lowered_once(monkeypatch, fresh_plan_cache):
  """A GPT's layers make the same kernels over other buffers: each distinct kernel of a plan is lowered and rendered
  once, and every kernel still reads its own buffers."""
  import uopc.kernelize as kernelize
  lowered = []
  original = kernelize._lower_and_render
  monkeypatch.setattr(kernelize, "_lower_and_render", lambda *a, **k: lowered.append(1) or original(*a, **k))
  rng = np.random.default_rng(3)
  xs = [rng.standard_normal((6, 9)).astype(np.float32) for _ in range(3)]
  sums = [(Tensor(x) * 2).exp().sum(1) for x in xs]   # three reductions of one shape: three kernels, one lowering
  plan = make_plan([s.uop for s in sums])
  assert len(plan.kernels) == 3 and len({k.src for k in plan.kernels}) == 1 and len(lowered) == 1
  assert len({tuple(k.args) for k in plan.kernels}) == 3   # each its own input and output
  sums[0].realize(*sums[1:])
  for s, x in zip(sums, xs): np.testing.assert_allclose(s.numpy(), np.exp(2 * x).sum(1), rtol=1e-5)

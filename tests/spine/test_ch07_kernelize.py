"""Chapter 7, the kernelizer: materialization points, STAGE, stage_broadcast_compute, and the book's attention plans."""
import math
import numpy as np
import pytest
import uopc.kernelize
from uopc.kernelize import _fused_work, _materialize_points, make_plan, normalize, stage_broadcast_compute
from uopc.opt import DefaultOpt
from uopc.book import load_example
from uopc.tensor import Tensor
from uopc.uop import Ops

pytestmark = pytest.mark.ch07
book = load_example("flash_attention")
FlashOpt, attention = book.FlashOpt, book.attention


def attention_graph(N: int, D: int):
  return attention(*(Tensor.randn(N, D, seed=s) for s in range(3))).uop


def layernorm(x: Tensor, eps: float = 1e-5) -> Tensor:
  xc = x - x.mean(-1, keepdim=True)
  return xc * (xc.square().mean(-1, keepdim=True) + eps).sqrt().recip()


# ---- the book's acceptance ----
def test_unfused_attention_plan_is_the_books():
  plan = make_plan([attention_graph(1024, 64)], False, DefaultOpt)
  names = ["r_1024_1024", "r_1024", "r_1024", "e_1024_1024", "e_1_64_1024", "r_1024_64"]
  assert [k.name for k in plan.kernels] == names
  assert [n for _, n in plan.temps] == [1048576, 1024, 1024, 1048576, 65536]


def test_fused_attention_plan_is_the_books():
  plan = make_plan([attention_graph(1024, 64)], True, FlashOpt)
  assert [k.name for k in plan.kernels] == ["e_1_64_1024", "r_1024_64"]
  assert [n for _, n in plan.temps] == [65536]
  assert all(n < 1024 * 1024 for _, n in plan.temps)   # no N x N temporary


def test_attention_plans_compute_attention():
  N, D = 32, 8
  q, k, v = (np.random.default_rng(s).standard_normal((N, D)).astype(np.float32) for s in range(3))
  s = q @ k.T / math.sqrt(D)
  p = np.exp(s - s.max(-1, keepdims=True))
  ref = p / p.sum(-1, keepdims=True) @ v
  for fuse, opt in ((False, DefaultOpt), (True, FlashOpt), (True, DefaultOpt), (False, None)):
    Tensor.fuse_reduce, Tensor.opt = fuse, opt
    np.testing.assert_allclose(attention(Tensor(q), Tensor(k), Tensor(v)).numpy(), ref, rtol=1e-4, atol=1e-5)


def test_explain_names_the_rule_behind_every_cut():
  text = make_plan([attention_graph(1024, 64)], False, DefaultOpt).explain()
  lines = text.splitlines()
  assert lines[0].startswith("r_1024_1024") and "REDUCE: add" in lines[0]
  assert "REDUCE: max" in lines[1]
  assert "STAGE by the broadcast rule: expanded x64" in lines[3]
  assert "STAGE by the layout pass" in lines[4]
  assert "root" in lines[5]
  assert lines[-1] == "6 kernels, temporaries [1048576, 1024, 1024, 1048576, 65536]"
  fused = make_plan([attention_graph(1024, 64)], True, FlashOpt).explain()
  assert "evaluations per element: add[1024, 1024] x6, max[1024] x1, add[1024] x1" in fused
  assert "fuse_reduce: REDUCEs are not cut" in fused


# ---- materialization points ----
def test_materialize_points_roots_reduces_and_stages():
  x = Tensor(np.ones((4, 8), np.float32))
  e = (x - x.max(-1, keepdim=True)).exp()
  y = e / e.sum(-1, keepdim=True)
  roots, _ = normalize([y.uop])
  assert [u.op for u in _materialize_points(roots, False)] == [Ops.REDUCE, Ops.REDUCE, Ops.MUL]
  assert _materialize_points(roots, True) == roots    # fuse_reduce: only the root is cut
  staged, _ = normalize([((x * 2).contiguous() + 1).uop])
  assert [u.op for u in _materialize_points(staged, False)] == [Ops.STAGE, Ops.ADD]


def test_a_buffer_root_needs_no_kernel():
  x = Tensor(np.arange(8, dtype=np.float32))
  plan = make_plan([x.reshape(2, 4).uop])
  assert plan.kernels == [] and plan.outs == [("in", 0)]


def test_contiguous_is_a_kernel_boundary():
  x = Tensor(np.arange(8, dtype=np.float32))
  plan = make_plan([((x * 2).contiguous() + 1).uop])
  assert [k.name for k in plan.kernels] == ["e_8", "e_8"] and [n for _, n in plan.temps] == [8]
  assert "asked for (contiguous())" in plan.explain()


def test_detach_is_not_a_kernel():
  x = Tensor(np.arange(8, dtype=np.float32))
  assert len(make_plan([((x * 2).detach() + 1).uop]).kernels) == 1


def test_the_same_root_twice_is_one_kernel_and_one_array():
  x = Tensor(np.arange(8, dtype=np.float32))
  y = (x + 1).uop
  plan = make_plan([y, y])
  assert len(plan.kernels) == 1
  a, b = uopc.kernelize.realize([y, y])
  assert a is b
  np.testing.assert_array_equal(b, np.arange(8) + 1)


@pytest.mark.parametrize("fuse", [False, True])
def test_kernel_names(fuse):
  x = Tensor(np.ones((3, 5), np.float32))
  assert [k.name for k in make_plan([(x + 1).uop], fuse).kernels] == ["e_3_5"]
  assert [k.name for k in make_plan([x.sum(1).uop], fuse).kernels] == ["r_3"]
  assert [k.name for k in make_plan([x.sum().uop], fuse).kernels] == ["r_1"]


# ---- stage_broadcast_compute (section 7.10) ----
def test_layernorm_into_matmul_is_staged():
  T, C = 16, 32
  x, w = Tensor.randn(T, C, seed=0), Tensor.randn(C, 4 * C, seed=1)
  ln = layernorm(x)
  roots, _ = normalize([(ln @ w).uop])
  staged = stage_broadcast_compute(roots)
  stages = [u for u in staged[0].toposort() if u.op is Ops.STAGE]
  assert len(stages) == 1 and stages[0].shape == (T, C)
  assert _fused_work(stages[0].src[0]) >= 4096
  plan = make_plan([(ln @ w).uop], False, DefaultOpt)
  assert "STAGE by the broadcast rule: expanded x128" in plan.explain()
  assert [n for _, n in plan.temps] == [T, T, T * C, 4 * C * C]   # mean, var, the LayerNorm output, W transposed


def test_fuse_reduce_skips_broadcast_staging():
  T, C = 16, 32
  x, w = Tensor.randn(T, C, seed=0), Tensor.randn(C, 4 * C, seed=1)
  plan = make_plan([(layernorm(x) @ w).uop], True, DefaultOpt)
  assert "broadcast rule" not in plan.explain()
  assert all(n != T * C for _, n in plan.temps)


def test_small_or_cheap_broadcasts_are_not_staged():
  x = Tensor.randn(4, 4, seed=0)
  roots, _ = normalize([((x * 2) @ Tensor.randn(4, 16, seed=1)).uop])
  assert stage_broadcast_compute(roots) == roots               # 4*4 elements * 1 op: work 16 < 4096
  y = Tensor.randn(64, 64, seed=0)
  roots, _ = normalize([((y * 2).reshape(64, 64, 1).expand(64, 64, 3) + 1).uop])
  assert stage_broadcast_compute(roots) == roots               # expanded x3 < factor 4
  assert stage_broadcast_compute(roots, factor=2) != roots


def test_fused_work_counts_alu_ops_times_elements():
  x = Tensor.randn(8, 8, seed=0)
  roots, _ = normalize([((x * 2 + 1).exp2()).uop])
  assert _fused_work(roots[0]) == 3 * 64
  m, _ = normalize([(x - x.max(-1, keepdim=True)).uop])
  assert _fused_work(m[0]) == 2 * 64                           # stops at the REDUCE: x + max*-1


@pytest.mark.parametrize("staging", [True, False])
def test_layernorm_matmul_values_with_and_without_staging(staging, monkeypatch, fresh_plan_cache):
  T, C = 16, 32
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((T, C)).astype(np.float32), rng.standard_normal((C, 4 * C)).astype(np.float32)
  if not staging:
    monkeypatch.setattr(uopc.kernelize, "stage_broadcast_compute", lambda roots, factor=4: roots)
  out = layernorm(Tensor(x)) @ Tensor(w)
  plan = make_plan([out.uop], False, DefaultOpt)
  assert ("broadcast rule" in plan.explain()) == staging
  xc = x - x.mean(-1, keepdims=True)
  ref = xc / np.sqrt((xc ** 2).mean(-1, keepdims=True) + 1e-5) @ w
  np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)

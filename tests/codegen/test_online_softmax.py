"""Online softmax as a rewrite (uopc.codegen.online): values, plan and loop structure, and where it must not fire."""
import math, re
import numpy as np
import pytest
from uopc.tensor import Tensor
from uopc.kernelize import make_plan

pytestmark = pytest.mark.online




def np_softmax(x, axis=-1):
  e = np.exp(x - x.max(axis, keepdims=True))
  return e / e.sum(axis, keepdims=True)


def attention(q, k, v):
  return (q @ k.transpose(-1, -2) * (1 / math.sqrt(q.shape[-1]))).softmax(-1) @ v


def online(t: Tensor) -> np.ndarray:
  Tensor.online_softmax = True
  return t.numpy()


def key_loops(src: str, n: int) -> int:
  """Loops of n trips, not counting the parallel loop over rows."""
  lines = src.splitlines()
  return sum(1 for k, ln in enumerate(lines) if re.search(rf"for \(int ridx\d+ = 0; ridx\d+ < {n}; ", ln)
             and "#pragma omp" not in lines[k - 1])


@pytest.mark.parametrize("n,d", [(1, 1), (7, 3), (64, 16), (100, 48), (256, 64)])
def test_attention_values(n, d):
  rng = np.random.default_rng(n * 100 + d)
  q, k, v = (rng.standard_normal((n, d)).astype(np.float32) for _ in range(3))
  ref = np_softmax(q @ k.T / math.sqrt(d)) @ v
  assert np.abs(online(attention(Tensor(q), Tensor(k), Tensor(v))) - ref).max() < 1e-5


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-5), (np.float64, 1e-12)])
def test_batched_causal_mask_and_dtypes(dtype, tol):
  rng = np.random.default_rng(1)
  q, k, v = (rng.standard_normal((2, 3, 17, 8)).astype(dtype) for _ in range(3))
  mask = np.triu(np.full((17, 17), -np.inf), 1).astype(dtype)
  t = ((Tensor(q) @ Tensor(k).transpose(-1, -2)) * (1 / math.sqrt(8)) + Tensor(mask)).softmax(-1) @ Tensor(v)
  ref = np_softmax(q @ k.swapaxes(-1, -2) / math.sqrt(8) + mask) @ v
  assert np.abs(online(t) - ref).max() < tol


@pytest.mark.parametrize("n", [1024, 2048])
def test_acceptance_one_kernel_one_pass(n):
  """The one-liner at N = 1024 and 2048, D = 64: no N x N temporary, one loop over the keys per row, error < 1e-5."""
  d = 64
  rng = np.random.default_rng(0)
  q, k, v = (rng.standard_normal((n, d)).astype(np.float32) for _ in range(3))
  t = attention(Tensor(q), Tensor(k), Tensor(v))
  plan = make_plan([t.uop], False, Tensor.opt, online_softmax=True)
  assert all(size < n * n for _, size in plan.temps)
  (kernel,) = [k for k in plan.kernels if "r_" in k.name]
  # besides the parallel loop over blocks of 4 queries: exactly one pass over the keys, in tiles of 8; the other
  # loops are short ones inside it (the dot product, the output columns), none over all the keys
  lines = kernel.src.splitlines()
  bounds = [re.search(r"for \(int ridx\d+ = 0; ridx\d+ < (\d+);", ln) for ln in lines]
  loops = [int(m.group(1)) for k, m in enumerate(bounds) if m and "#pragma omp" not in lines[k - 1]]
  assert loops.count(n // 8) == 1 and n not in loops and max(x for x in loops if x != n // 8) <= d
  assert "3 reductions merged into 1 pass" in plan.explain()
  assert all(times == 1 for times in kernel.recompute.values())   # nothing computed twice
  ref = np_softmax(q @ k.T / math.sqrt(d)) @ v
  assert np.abs(online(t) - ref).max() < 1e-5


def test_off_by_default_keeps_the_books_kernels():
  q = Tensor(np.zeros((64, 16), np.float32))
  plan = make_plan([attention(q, q, q).uop], False, Tensor.opt)
  assert [k.name for k in plan.kernels] == ["r_64_64", "r_64", "r_64", "e_64_64", "e_1_16_64", "r_64_16"]


def test_softmax_and_log_softmax_alone_take_one_pass():
  x = np.random.default_rng(2).standard_normal((33, 50)).astype(np.float32)
  for t, ref in ((Tensor(x).softmax(-1), np_softmax(x)),
                 (Tensor(x).log_softmax(-1), np.log(np_softmax(x.astype(np.float64))))):
    plan = make_plan([t.uop], False, Tensor.opt, online_softmax=True)
    assert len(plan.kernels) == 1 and key_loops(plan.kernels[0].src, 50) == 2   # one online pass, then the output
    assert np.abs(online(t) - ref).max() < 1e-5


def test_logsumexp_one_pass():
  x = np.random.default_rng(3).standard_normal((9, 40)).astype(np.float32)
  t = Tensor(x)
  lse = t.max(-1) + (t - t.max(-1, keepdim=True)).exp().sum(-1).log()
  plan = make_plan([lse.uop], False, Tensor.opt, online_softmax=True)
  assert len(plan.kernels) == 1 and key_loops(plan.kernels[0].src, 40) == 1
  ref = x.max(-1) + np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1))
  assert np.abs(online(lse) - ref).max() < 1e-5


def test_does_not_fire_for_max_and_sum_over_different_axes():
  x = np.random.default_rng(4).standard_normal((12, 12)).astype(np.float32)
  t = (Tensor(x) - Tensor(x).max(-1, keepdim=True)).exp().sum(0)
  plan = make_plan([t.uop], False, Tensor.opt, online_softmax=True)
  assert "-INFINITY" in plan.kernels[-1].src and "acc" in plan.kernels[-1].src
  assert np.abs(online(t) - np.exp(x - x.max(-1, keepdims=True)).sum(0)).max() < 1e-5


def test_does_not_fire_for_a_max_of_another_value():
  x = np.random.default_rng(5).standard_normal((12, 30)).astype(np.float32)
  t = Tensor(x)
  out = (t - (t * 2).max(-1, keepdim=True)).exp().sum(-1)
  plan = make_plan([out.uop], False, Tensor.opt, online_softmax=True)
  assert key_loops(plan.kernels[-1].src, 30) == 2          # the ordinary two passes: the max, then the sum
  assert np.abs(online(out) - np.exp(x - (2 * x).max(-1, keepdims=True)).sum(-1)).max() < 1e-4

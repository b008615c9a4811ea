"""Long float sums add in blocks (ReduceMixin._add_in_blocks): softmax and log_softmax over one row of 1,000,003
float32 elements, forward and backward, within PyTorch's float32 tolerance of float64 at every x86 level this CPU
runs; sum, mean, var and logsumexp of long axes; and a short sum's graph and kernel exactly what they were."""
from __future__ import annotations
import numpy as np
import pytest
from uopc.helpers import Context
from uopc.kernelize import make_plan
from uopc.mixin.reduce import LONG_SUM
from uopc.runtime.machine import HOST_ARCH, MarchError, target
from uopc.tensor import Tensor
from uopc.uop import Ops

N = 1_000_003                       # a prime: the last block is padded
RTOL, ATOL = 1.3e-6, 1e-5           # torch.testing.assert_close's float32 defaults


def _runs_here(level: str) -> bool:
  try: target(level); return True
  except MarchError: return False


LEVELS = [pytest.param("", id="native")] + [
  pytest.param(level, id=level, marks=pytest.mark.skipif(not (HOST_ARCH == "x86_64" and _runs_here(level)),
                                                         reason=f"this CPU cannot run {level}"))
  for level in ("x86-64-v3", "x86-64-v2")]


def _row():
  rng = np.random.default_rng(47)
  x = (rng.standard_normal(N) * 3).astype(np.float32)   # exp(x - max) spans e^-30..1: most terms are small
  return x, rng.standard_normal(N).astype(np.float32)


def _references(x: np.ndarray, g: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """(forward, d sum(out * g) / d x) in float64 for softmax and log_softmax."""
  x64, g64 = x.astype(np.float64), g.astype(np.float64)
  e = np.exp(x64 - x64.max())
  sm = e / e.sum()
  return {"softmax": (sm, sm * (g64 - (g64 * sm).sum())),
          "log_softmax": (x64 - x64.max() - np.log(e.sum()), g64 - sm * g64.sum())}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_of_a_million_elements_is_within_float32_tolerance_of_float64(name, level):
  x, g = _row()
  want, want_grad = _references(x, g)[name]
  with Context(UOPC_MARCH=level):
    t = Tensor(x, requires_grad=True)
    out = getattr(t, name)(-1)
    (out * Tensor(g)).sum().backward()
    got, grad = out.numpy().astype(np.float64), t.grad.numpy().astype(np.float64)
  np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(grad, want_grad, rtol=RTOL, atol=ATOL)
  # tighter than PyTorch's atol, which hides the small values: one running sum of the million terms was 1.6e-4
  # off (relative) in every softmax value and 1.6e-4 (absolute) in every log_softmax value
  if name == "softmax": assert np.max(np.abs(got - want) / want) < 1e-5
  else: assert np.max(np.abs(got - want)) < 2e-5


def test_long_sum_mean_var_and_logsumexp_match_float64():
  rng = np.random.default_rng(3)
  x = rng.random((3, 400_001)).astype(np.float32)
  x64 = x.astype(np.float64)
  t = Tensor(x)
  np.testing.assert_allclose(t.sum(1).numpy(), x64.sum(1), rtol=2e-7)
  np.testing.assert_allclose(t.sum().numpy(), x64.sum(), rtol=2e-7)
  np.testing.assert_allclose(t.mean(1, keepdim=True).numpy(), x64.mean(1, keepdims=True), rtol=2e-7)
  np.testing.assert_allclose(t.var(1).numpy(), x64.var(1, ddof=1), rtol=1e-6)
  np.testing.assert_allclose(t.logsumexp(1).numpy(), np.log(np.exp(x64).sum(1)), rtol=2e-7)
  np.testing.assert_allclose(t.permute(1, 0).sum(0).numpy(), x64.sum(1), rtol=2e-7)   # a strided long axis
  h = (rng.random(300_007) / 8).astype(np.float16)                                       # float16 adds in float32
  assert Tensor(h).sum().numpy() == np.float16(h.astype(np.float64).sum())


def test_the_blocks_are_sums_of_about_sqrt_n_terms():
  def add_reduces(t: Tensor) -> list[tuple[int, ...]]:   # the shape each ADD REDUCE reads
    return [u.src[0].shape for u in t.uop.toposort() if u.op is Ops.REDUCE and u.arg[0] is Ops.ADD]
  assert sorted(add_reduces(Tensor(np.ones(N, np.float32)).sum())) == [(977,), (977, 1024)]
  assert add_reduces(Tensor(np.ones(LONG_SUM, np.float32)).sum()) == [(LONG_SUM,)]
  assert add_reduces(Tensor(np.ones(LONG_SUM + 1, np.int32)).sum()) == [(LONG_SUM + 1,)]   # integers are exact


@pytest.mark.parametrize("shape", [(LONG_SUM,), (4, 1024), (64, 64, 16)])
def test_a_short_sum_keeps_its_one_reduce_and_its_kernel(shape):
  """Up to LONG_SUM terms, sum() is the one REDUCE it always was (the chapters print these kernels)."""
  t = Tensor(np.ones(shape, np.float32))
  one_reduce = t._rop(Ops.ADD, len(shape))
  assert t.sum().uop is one_reduce.uop
  x = Tensor(np.ones((4, 1024), np.float32))
  m = x - x.max(-1, keepdim=True)
  old_softmax = m.exp() / m.exp()._rop(Ops.ADD, 1).reshape(4, 1)
  assert x.softmax(-1).uop is old_softmax.uop
  def sources(t: Tensor) -> list[str]: return [k.src for k in make_plan([t.uop]).kernels]
  assert sources(x.softmax(-1)) == sources(old_softmax) and sources(t.sum()) == sources(one_reduce)


def test_long_sums_under_torch():
  torch = pytest.importorskip("torch")
  x, g = _row()
  for name in ("softmax", "log_softmax"):
    t = Tensor(x, requires_grad=True)
    out = getattr(t, name)(-1)
    (out * Tensor(g)).sum().backward()
    ref = torch.tensor(x.astype(np.float64), requires_grad=True)
    ref_out = getattr(ref, name)(-1)
    (ref_out * torch.tensor(g.astype(np.float64))).sum().backward()
    torch.testing.assert_close(torch.tensor(out.numpy()), ref_out.detach().float(), rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(torch.tensor(t.grad.numpy()), ref.grad.float(), rtol=RTOL, atol=ATOL)


def test_a_long_softmax_on_cl_is_blocked_too():
  """The blocks are in the graph, so every device gets them (CL skips where there is no OpenCL)."""
  x, g = _row()
  want = _references(x, g)["softmax"][0]
  got = Tensor(x, device="CL").softmax(-1).numpy().astype(np.float64)
  np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
  assert np.max(np.abs(got - want) / want) < 1e-5


@pytest.mark.parametrize("fuse", [False, True])
def test_a_long_softmax_stays_linear_work_when_reductions_are_fused(fuse):
  """Under Tensor.fuse_reduce the row max was fused into the partial sums' kernel and computed again for each block
  (n^1.5 work: a (2, 1,000,003) softmax ran for minutes); the blocked sum stages its terms first."""
  x = Tensor(np.ones((2, 100_003), np.float32))
  flops = sum(k.flops for k in make_plan([x.softmax(-1).uop, x.log_softmax(-1).uop], fuse).kernels)
  assert flops < 40 * x.numel()
  rng = np.random.default_rng(5)
  a = (rng.standard_normal((2, 100_003)) * 3).astype(np.float32)
  e = np.exp(a.astype(np.float64) - a.max(1, keepdims=True))
  saved = Tensor.fuse_reduce
  try:
    Tensor.fuse_reduce = fuse
    got = Tensor(a).softmax(-1).numpy()
  finally: Tensor.fuse_reduce = saved
  assert np.max(np.abs(got - e / e.sum(1, keepdims=True)) * e.sum(1, keepdims=True) / e) < 1e-5

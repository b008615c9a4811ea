"""Small kernels (NOTES 27): one OpenMP thread below Options.one_thread_below, and a padded read (a split's
gradient) whose index simplifies as if there were no pad."""
import re
import numpy as np
import pytest
from uopc.runtime import calls
from uopc.kernelize import make_plan
from uopc.options import Options
from uopc.tensor import Tensor

rng = np.random.default_rng(0)
f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)


def only_kernel(t: Tensor, options: Options | None = None):
  plan = make_plan([t.uop], options=options or Options())
  assert len(plan.kernels) == 1
  return plan.kernels[0]


def test_a_small_kernel_runs_on_one_thread_and_a_large_one_on_all():
  small = only_kernel(Tensor(f32(64)) * 2 + 1)
  assert small.threads == 1 and small.prg.threads == 1
  large = only_kernel(Tensor(f32(1024, 1024)) * 2 + 1)   # 2M loads and stores, 2M float ops
  assert large.threads is None and large.prg.threads is None
  assert "#pragma omp parallel for" in small.src and \
    small.src == only_kernel(Tensor(f32(64)) * 2 + 1, Options(one_thread_below=0)).src   # the text is the same


def test_the_threshold_is_an_option():
  assert only_kernel(Tensor(f32(64)) * 2 + 1, Options(one_thread_below=0)).threads is None
  assert only_kernel(Tensor(f32(1024, 1024)) * 2 + 1, Options(one_thread_below=1 << 30)).threads == 1


@pytest.mark.skipif(calls._omp is None, reason="no OpenMP runtime loaded in this process")
def test_a_one_thread_call_leaves_the_callers_thread_count_alone():
  get, _ = calls._omp
  before = get()
  x = f32(1000)
  out = (Tensor(x) * 3 - 1).numpy()
  np.testing.assert_allclose(out, x.astype(np.float64) * 3 - 1, rtol=1e-5, atol=1e-6)
  assert get() == before


def test_a_one_thread_reduction_is_right():
  x = f32(32, 64)
  k = only_kernel(Tensor(x).sum(-1))
  assert k.threads == 1
  np.testing.assert_allclose((Tensor(x).sum(-1)).numpy(), x.astype(np.float64).sum(-1), rtol=1e-5, atol=1e-5)


def split_gradient(x: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> Tensor:
  """The gradient of x (4, 8, 96) through split into q, k, v (32 columns each), q viewed as 2 heads of 16."""
  t = Tensor(x, requires_grad=True)
  q, k, v = t.split(32, dim=-1)
  heads = q.reshape(4, 8, 2, 16).permute(0, 2, 1, 3)
  ((heads * Tensor(a)).sum() + (k * Tensor(b)).sum() + (v * Tensor(c)).sum()).backward()
  return t.grad


def test_a_split_gradient_is_right():
  x, a, b, c = f32(4, 8, 96), f32(4, 2, 8, 16), f32(4, 8, 32), f32(4, 8, 32)
  ref = np.concatenate([a.transpose(0, 2, 1, 3).reshape(4, 8, 32), b, c], axis=-1)
  np.testing.assert_allclose(split_gradient(x, a, b, c).numpy(), ref, rtol=1e-6)


def test_a_split_gradient_reads_each_piece_at_a_simple_index():
  """Each piece is read at the index it would have unpadded (q's heads: one // and one %), clamped where the pad
  is; before NOTES 27 the clamp sat inside every step of the index algebra and nothing simplified."""
  x, a, b, c = f32(4, 8, 96), f32(4, 2, 8, 16), f32(4, 8, 32), f32(4, 8, 32)
  grad = split_gradient(x, a, b, c)
  plan = make_plan([grad.uop])
  src = next(k.src for k in plan.kernels if k.name.startswith("e_4_8_96"))
  loads = re.findall(r"= data\d+\[(.*)\];", src)
  assert len(loads) == 3
  assert sum(len(re.findall(r"[/%]", i)) for i in loads) <= 2


# ---- Tensor.from_numpy: no copy (the benchmarks' uopc peers, like torch.from_numpy) ----
def test_from_numpy_shares_the_array():
  a = f32(3, 4)
  t = Tensor.from_numpy(a)
  a[0, 0] = 100.0
  assert t.numpy()[0, 0] == 100.0 and Tensor(a).numpy()[0, 0] == 100.0
  b = Tensor(a)
  a[0, 0] = -1.0
  assert b.numpy()[0, 0] == 100.0   # Tensor(a) copied
  np.testing.assert_allclose((Tensor.from_numpy(a) @ Tensor.from_numpy(a.T.copy())).numpy(),
                             a.astype(np.float64) @ a.T, rtol=1e-5, atol=1e-5)


def test_from_numpy_refuses_what_it_cannot_share():
  with pytest.raises(ValueError, match="not C-contiguous"): Tensor.from_numpy(f32(3, 4).T)
  with pytest.raises(TypeError, match="complex64"): Tensor.from_numpy(np.zeros(3, np.complex64))
  with pytest.raises(TypeError, match="NumPy array"): Tensor.from_numpy([1.0, 2.0])

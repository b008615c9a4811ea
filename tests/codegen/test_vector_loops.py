"""VectorOpt's vector code for the kernels that are not matmuls (uopc.codegen.vector_loops): elementwise kernels, row
reductions and column reductions with an axis as lanes, against NumPy in float64, at 4, 8 and 16 lanes; and the
kernels it leaves to the default lowering (a gathered load, an axis that does not divide by the lanes)."""
import numpy as np
import pytest
from uopc.kernelize import make_plan, realize
from uopc.opt import VectorOpt
from uopc.options import Options
from uopc.tensor import Tensor

pytestmark = pytest.mark.ch10
rng = np.random.default_rng(0)
f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)
LANES = [4, 8, 16]


def run(t: Tensor, lanes: int) -> tuple[np.ndarray, list[int]]:
  """t's value under VectorOpt with `lanes` lanes, and each kernel's vector width (1: scalar code)."""
  options = Options(opt=VectorOpt, lanes=lanes)
  plan = make_plan([t.uop], options=options)
  widths = [max([u.dtype.count for u in k.ast.toposort() if u.dtype is not None] + [1]) for k in plan.kernels]
  return realize([t.uop], options=options)[0].reshape(t.shape), widths


@pytest.mark.parametrize("lanes", LANES)
def test_an_elementwise_kernel_takes_its_last_axis_as_lanes(lanes):
  x, b = f32(6, 48), f32(48)
  out, widths = run((Tensor(x) + Tensor(b)).gelu() * 2, lanes)
  x64 = x.astype(np.float64) + b
  ref = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64 ** 3))) * 2
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
  assert widths == [lanes]


@pytest.mark.parametrize("lanes", LANES)
def test_a_masked_softmax_reads_its_bool_mask_as_lanes(lanes):
  """The causal mask is a bool buffer (one byte a lane): loaded as bytes and widened to the 32-bit mask."""
  T = 32
  s = f32(2, 3, T, T)
  mask = np.triu(np.ones((T, T), bool), 1)
  out, widths = run(Tensor(s).masked_fill(Tensor(mask), -np.inf).softmax(-1), lanes)
  z = np.where(mask, -np.inf, s.astype(np.float64))
  e = np.exp(z - z.max(-1, keepdims=True))
  np.testing.assert_allclose(out, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
  assert all(w == lanes for w in widths), widths


@pytest.mark.parametrize("lanes", LANES)
def test_a_row_max_keeps_nan_as_numpy_does(lanes):
  x = f32(8, 64)
  x[3, 17] = np.nan
  x[5, :] = -np.inf
  out, widths = run(Tensor(x).max(-1), lanes)
  np.testing.assert_array_equal(out, x.max(-1))
  assert widths == [lanes]


@pytest.mark.parametrize("lanes", LANES)
def test_a_column_sum_keeps_a_vector_of_outputs(lanes):
  """A bias gradient: dy summed over batch and time, each output column a lane."""
  dy = f32(4, 24, 64)
  out, widths = run(Tensor(dy).sum((0, 1)), lanes)
  np.testing.assert_allclose(out, dy.astype(np.float64).sum((0, 1)), rtol=1e-4, atol=1e-4)
  assert widths == [lanes]


@pytest.mark.parametrize("lanes", LANES)
def test_a_layernorm_row_statistics(lanes):
  x = f32(12, 64)
  out, widths = run(Tensor(x).layernorm(-1), lanes)
  x64 = x.astype(np.float64)
  ref = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
  assert max(widths) == lanes


def test_what_would_be_gathered_or_does_not_divide_stays_scalar():
  """A transposed read (its lanes are a row apart in memory) and an axis of 7: the default lowering, right values."""
  x = f32(64, 64)
  out, widths = run(Tensor(x).transpose(0, 1) * 3, 16)
  np.testing.assert_allclose(out, x.T * 3, rtol=1e-6)
  assert widths == [1]
  y = f32(5, 7)
  out, widths = run(Tensor(y).sum(-1), 4)
  np.testing.assert_allclose(out, y.astype(np.float64).sum(-1), rtol=1e-5)
  assert widths == [1]

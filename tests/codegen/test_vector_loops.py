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


# ---- axes the lanes do not divide: a convolution's rows (issue 50) ----
def test_an_axis_as_vectors_the_last_one_overlapping():
  from uopc.codegen.vector_loops import _chunks
  assert _chunks(28, 8) == (8, [(0, 0), (8, 0), (16, 0), (20, 4)])   # 20..23 were the vector before's last lanes
  assert _chunks(10, 16) == (8, [(0, 0), (2, 6)])                    # lanes halved to fit the axis
  assert _chunks(32, 8) == (8, [(0, 0), (8, 0), (16, 0), (24, 0)])
  assert _chunks(3, 8) is None and _chunks(40, 8) is None            # shorter than 4 lanes; more than MAX_CHUNKS


@pytest.mark.parametrize("lanes", LANES)
def test_a_row_tile_counts_the_overlapped_lanes_once(lanes):
  """A sum over (64, 10) whose rows of 10 no lane count divides: the last vector's lanes that the one before covered
  are masked to 0. Ones make the count exact: 640, not 640 + 64 x (the overlap)."""
  ones = np.ones((64, 6, 10), np.float32)
  out, widths = run(Tensor(ones).sum((0, 2)), lanes)
  np.testing.assert_array_equal(out, np.full(6, 640.0, np.float32))
  assert widths == [min(lanes, 8)]
  x = f32(64, 6, 10)
  out, _ = run(Tensor(x).max((0, 2)), lanes)
  np.testing.assert_array_equal(out, x.max((0, 2)))


def conv_bound(x: np.ndarray, w: np.ndarray, padding: int) -> np.ndarray:
  """How far a float32 convolution may be from the float64 answer, whatever order it sums in: n u sum |terms|, n the
  terms of each output (C_in x kernel) and u = 2^-24 (Higham's bound for a recursive sum, first order; a sum split
  into partial sums has a smaller n per part)."""
  n = w.shape[1] * w.shape[2] * w.shape[3]
  return n * 2.0 ** -24 * np_conv2d(np.abs(x).astype(np.float64), np.abs(w).astype(np.float64), padding)


def np_conv2d(x: np.ndarray, w: np.ndarray, padding: int) -> np.ndarray:
  xp = np.pad(x, [(0, 0), (0, 0), (padding, padding), (padding, padding)])
  win = np.lib.stride_tricks.sliding_window_view(xp, w.shape[2:], axis=(2, 3))   # (N, C, oy, ox, ky, kx)
  return np.einsum("ncyxij,ocij->noyx", win, w)


@pytest.mark.parametrize("lanes", LANES)
@pytest.mark.parametrize("hw, k, padding", [(28, 5, 2), (14, 5, 0), (12, 3, 1)])
def test_a_convolution_whose_rows_the_lanes_do_not_divide(fresh_plan_cache, lanes, hw, k, padding):
  """Forward: a column tile (output channels x the row's vectors), the padded input staged once; within the bound
  of a float32 sum of the float64 answer, every kernel but the pad's copy vector code."""
  x, w = f32(4, 3, hw, hw), f32(6, 3, k, k)
  out, widths = run(Tensor(x).conv2d(Tensor(w), padding=padding), lanes)
  ref = np_conv2d(x.astype(np.float64), w.astype(np.float64), padding)
  assert np.all(np.abs(out - ref) <= conv_bound(x, w, padding))
  assert widths[-1] == min(lanes, 8 if hw - k + 1 + 2 * padding < 16 else lanes) and len(widths) == 1 + (padding > 0)

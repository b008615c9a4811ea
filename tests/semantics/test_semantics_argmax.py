"""argmax/argmin give NumPy's answer, always an index in range (issue 30, item 2): the first occurrence of the max
(min), a NaN counting as the max and the min as in NumPy, on every axis, with keepdim, for ties, and for a fused
expression whose max a second kernel used to recompute with other rounding (nothing matched, the index was n)."""
import numpy as np
import pytest
from uopc.tensor import Tensor

DEVICES = ["CPU", "CL"]


def _check(t: Tensor, x: np.ndarray, axis=None, keepdim=False):
  for name in ("argmax", "argmin"):
    got = getattr(t, name)(axis, keepdim).numpy()
    want = getattr(np, name)(x, axis=axis, keepdims=keepdim)
    assert got.shape == want.shape, (name, axis, keepdim, got.shape, want.shape)
    np.testing.assert_array_equal(got, want, err_msg=f"{name} axis={axis} keepdim={keepdim}")


@pytest.mark.parametrize("fuse_reduce", [False, True])
def test_recomputed_maximum_stays_in_range(monkeypatch, fuse_reduce):
  """The issue's example: a (9, 3) log_softmax(1) / (|b| + 0.5), index 3 in 12 of 20 seeds before the fix."""
  monkeypatch.setattr(Tensor, "fuse_reduce", fuse_reduce)
  for seed in range(40):
    rng = np.random.default_rng(seed)
    a, b = (rng.standard_normal((9, 3)).astype(np.float32) for _ in range(2))
    t = Tensor(a).log_softmax(1) / (Tensor(b).abs() + 0.5)
    values = t.numpy()                                         # the same kernel as the one argmax stages
    for name in ("argmax", "argmin"):
      idx = getattr(t, name)(1).numpy()
      assert ((idx >= 0) & (idx < 3)).all(), (seed, name, idx)
      np.testing.assert_array_equal(idx, getattr(np, name)(values, 1), err_msg=f"seed {seed} {name}")
    lo = np.log(np.exp(a.astype(np.float64)).sum(1, keepdims=True))
    ref = (a - lo) / (np.abs(b.astype(np.float64)) + 0.5)   # float64: the index of a value within rounding of the max
    idx = t.argmax(1).numpy()
    picked = np.take_along_axis(ref, idx[:, None].astype(np.int64), 1)[:, 0]
    np.testing.assert_allclose(picked, ref.max(1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_fused_expression_indexes_safely(device):
  """An index used to gather: the old out-of-range n read past the row."""
  rng = np.random.default_rng(30)
  a, b = (rng.standard_normal((64, 5)).astype(np.float32) for _ in range(2))
  t = Tensor(a, device=device).log_softmax(1) / (Tensor(b, device=device).abs() + 0.5)
  idx = t.argmax(1)
  vals = t.numpy()
  assert ((idx.numpy() >= 0) & (idx.numpy() < 5)).all()
  np.testing.assert_array_equal(t.gather(1, idx.reshape(64, 1)).numpy()[:, 0], vals.max(1))


@pytest.mark.parametrize("device", DEVICES)
def test_ties_take_the_first(device):
  x = np.array([[1, 3, 3, 0], [2, 2, 2, 2], [-1, -5, -5, -1], [0, -0.0, 0, 7]], np.float32)
  _check(Tensor(x, device=device), x, 1)
  _check(Tensor(x, device=device), x, 0)
  _check(Tensor(x, device=device), x)
  i = np.array([[5, 9, 9], [-3, -3, 4]], np.int32)
  _check(Tensor(i, device=device), i, 1)
  _check(Tensor(i, device=device) * 2 + 1, i * 2 + 1, 0)
  bo = np.array([[False, True, True], [False, False, False]])
  _check(Tensor(bo, device=device), bo, 1)


@pytest.mark.parametrize("device", DEVICES)
def test_nan_is_the_max_and_the_min(device):
  """NumPy: the first NaN wins argmax and argmin; ±inf are ordinary values."""
  x = np.array([[1, np.nan, 5, np.nan], [np.nan, 2, 3, 4], [1, 2, 3, np.nan], [np.inf, 1, np.inf, -np.inf],
                [-np.inf, -np.inf, 0, 0]], np.float32)
  for axis in (None, 0, 1):
    _check(Tensor(x, device=device), x, axis)
    _check(Tensor(x, device=device) * 2 - 1, x * 2 - 1, axis)     # fused
  for pos in range(6):
    v = np.arange(6, dtype=np.float32)
    v[pos] = np.nan
    _check(Tensor(v, device=device), v)


@pytest.mark.parametrize("keepdim", [False, True])
def test_every_axis(keepdim):
  rng = np.random.default_rng(7)
  x = rng.integers(-3, 4, (3, 4, 5)).astype(np.float32)         # small integers: many ties
  for axis in (None, 0, 1, 2, -1, -3):
    _check(Tensor(x), x, axis, keepdim)
    _check(Tensor(x).exp() / 3, np.exp(x) / 3, axis, keepdim)   # a fused operand, staged before the reduce
  _check(Tensor(np.float32(2.5)), np.float32(2.5))

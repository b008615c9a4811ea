"""Values a PyTorch user checks on a first CNN (issue 47), against NumPy (float64) or PyTorch's documented results:
einsum's ellipsis and integer dtype, logcumsumexp where the overall max would underflow a row, shifts without C's
undefined behaviour, meshgrid of one tensor, cummax/cummin's (values, indices), nearest interpolation of uint8 images,
and max(dim)'s rule (the values; unpacking it as PyTorch's (values, indices) raises)."""
import numpy as np
import pytest
from uopc.dtype import dtypes
from uopc.tensor import Tensor
from capabilities import compiler_has_float16   # tests/capabilities.py

rng = np.random.default_rng(47)


@pytest.mark.parametrize("formula,shapes", [
  ("...id,...jd->...ij", [(3, 8, 4), (3, 8, 4)]), ("...id,...jd", [(3, 8, 4), (3, 8, 4)]),
  ("...ij,jk", [(2, 3, 4, 5), (5, 2)]), ("i...,i...", [(4, 2, 3), (4, 1, 3)]), ("...ii->...i", [(2, 3, 3)])])
def test_einsum_with_an_ellipsis(formula, shapes):
  ops = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  want = np.einsum(formula, *[o.astype(np.float64) for o in ops])
  got = Tensor.einsum(formula, *[Tensor(o) for o in ops]).numpy()
  assert got.shape == want.shape
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
def test_integer_einsum_keeps_its_dtype(dtype):
  a, b = rng.integers(0, 5, (3, 4)).astype(dtype), rng.integers(0, 5, (4, 2)).astype(dtype)
  out = Tensor.einsum("ij,jk->ik", Tensor(a), Tensor(b))
  assert out.dtype is {np.int32: dtypes.int32, np.int64: dtypes.int64, np.uint8: dtypes.uint8}[dtype]
  np.testing.assert_array_equal(out.numpy(), (a.astype(np.int64) @ b).astype(dtype))


def test_logcumsumexp_keeps_rows_the_overall_max_would_underflow():
  x = np.array([[0, 200, 1], [-200, 0, -1e4], [-np.inf, 0, 1], [-np.inf, -np.inf, 3], [-1e4, -1e4, -2e4],
                [50, -np.inf, 80]], np.float32)
  with np.errstate(divide="ignore"): want = np.logaddexp.accumulate(x.astype(np.float64), 1)
  got = Tensor(x).logcumsumexp(1).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-30)   # e^-200 is 0 in float32
  np.testing.assert_allclose(Tensor(x.T.copy()).logcumsumexp(0).numpy(), want.T, rtol=1e-6, atol=1e-30)
  t = Tensor(x[:2], requires_grad=True)
  t.logcumsumexp(1).sum().backward()
  x64 = x[:2].astype(np.float64)   # d/dx_j sum_i lcse_i = sum_{i >= j} exp(x_j - lcse_i)
  lcse = np.logaddexp.accumulate(x64, 1)
  g = np.array([[sum(np.exp(x64[r, j] - lcse[r, i]) for i in range(j, 3)) for j in range(3)] for r in range(2)])
  np.testing.assert_allclose(t.grad.numpy(), g, rtol=1e-5, atol=1e-30)


SHIFT_DTYPES = [np.int32, np.int64, np.uint8, np.uint32]


@pytest.mark.parametrize("device", ["CPU", "CL"])   # CL skips where there is none (tests/conftest.py)
@pytest.mark.parametrize("dtype", SHIFT_DTYPES)
def test_shifts_by_every_count_match_numpy_and_pytorch(dtype, device):
  """Left: two's complement wrap (1 << 31 is -2^31 in int32); right: arithmetic; the bit width or more: every bit
  out (0, or -1 for a negative signed x). NumPy and PyTorch agree on all of these."""
  info = np.iinfo(dtype)
  x = np.array([0, 1, 5, info.max, info.min, info.max // 3] + ([-1, -8, -5] if info.min < 0 else []), dtype)
  bits, t = 8 * x.itemsize, Tensor(x, device=device)
  for n in (0, 1, 3, bits - 2, bits - 1, bits, bits + 2):   # every count, below: as a tensor of counts
    np.testing.assert_array_equal((t << n).numpy(), np.left_shift(x, dtype(n)), err_msg=f"<< {n}")
    np.testing.assert_array_equal((t >> n).numpy(), np.right_shift(x, dtype(n)), err_msg=f">> {n}")
  counts = np.array(list(range(bits + 3)) + ([-1, -7] if info.min < 0 else []), dtype)   # a count per element
  xs = np.resize(x, counts.shape)
  ts, tc = Tensor(xs, device=device), Tensor(counts, device=device)
  np.testing.assert_array_equal((ts << tc).numpy(), np.left_shift(xs, counts))
  np.testing.assert_array_equal((ts >> tc).numpy(), np.right_shift(xs, counts))
  with pytest.raises(ValueError, match="shift count"): t << -1


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_of_one_tensor_is_one_tensor(indexing):
  out = Tensor.meshgrid(Tensor([1, 2, 3]), indexing=indexing)
  assert len(out) == 1
  np.testing.assert_array_equal(out[0].numpy(), [1, 2, 3])
  a, b = Tensor.meshgrid(Tensor([1, 2, 3]), Tensor([4, 5]), indexing=indexing)
  want = np.meshgrid([1, 2, 3], [4, 5], indexing=indexing)
  np.testing.assert_array_equal(a.numpy(), want[0])
  np.testing.assert_array_equal(b.numpy(), want[1])


def _cum_ref(x, largest):
  """PyTorch's cummax/cummin loop: x >= out (x <= out) or x is nan takes the running value and its index."""
  v, idx = np.empty_like(x), np.empty(x.shape, np.int64)
  for r in range(x.shape[0]):
    best, at = x[r, 0], 0
    for i in range(x.shape[1]):
      if np.isnan(x[r, i]) or (not np.isnan(best) and (x[r, i] >= best if largest else x[r, i] <= best)):
        best, at = x[r, i], i
      v[r, i], idx[r, i] = best, at
  return v, idx


@pytest.mark.parametrize("largest", [True, False])
def test_cummax_and_cummin_return_values_and_indices(largest):
  x = np.array([[1, 3, 3, 2, 5, 5], [2, 2, 2, 2, 2, 2], [0, np.nan, 1, np.nan, 7, -1], [4, 3, 2, 1, 0, -1]],
               np.float32)
  name = "cummax" if largest else "cummin"
  values, indices = getattr(Tensor(x), name)(1)
  want_v, want_i = _cum_ref(x, largest)
  np.testing.assert_array_equal(values.numpy(), want_v)
  assert indices.dtype is dtypes.int64
  np.testing.assert_array_equal(indices.numpy(), want_i)
  vT, iT = getattr(Tensor(x.T.copy()), name)(0)
  np.testing.assert_array_equal(iT.numpy(), want_i.T)
  ints = np.array([[3, 1, 3, 0]], np.int32)
  np.testing.assert_array_equal(getattr(Tensor(ints), name)(1)[1].numpy(), _cum_ref(ints, largest)[1])
  # the gradient goes to the reported index (PyTorch's cummax_backward: a scatter-add at indices)
  t = Tensor(x[[0, 1, 3]], requires_grad=True)
  getattr(t, name)(1)[0].sum().backward()
  g = np.zeros((3, 6))
  for r in range(3):
    for i in range(6): g[r, want_i[[0, 1, 3]][r, i]] += 1
  np.testing.assert_array_equal(t.grad.numpy(), g)


def test_nearest_interpolation_keeps_a_uint8_image_uint8():
  img = rng.integers(0, 256, (1, 3, 4, 5)).astype(np.uint8)
  out = Tensor(img).interpolate(scale_factor=2)
  assert out.dtype is dtypes.uint8
  np.testing.assert_array_equal(out.numpy(), img.repeat(2, 2).repeat(2, 3))
  assert Tensor(img).interpolate(size=(8, 10), mode="bilinear").dtype is dtypes.float32   # blending is float


def test_max_with_dim_is_the_values_and_cannot_be_unpacked_as_pytorchs_pair():
  """uopc's rule (chapter 9's API table): max(dim)/min(dim) return the values, tinygrad's; indices come from
  argmax/argmin. PyTorch's `_, pred = out.max(1)` on a batch of two would unpack the two values: it raises."""
  out = Tensor(np.array([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2]], np.float32))
  np.testing.assert_array_equal(out.max(1).numpy(), np.float32([0.7, 0.5]))
  np.testing.assert_array_equal(out.min(1, keepdim=True).numpy(), np.float32([[0.1], [0.2]]))
  np.testing.assert_array_equal(out.argmax(1).numpy(), [1, 0])
  for bad in (lambda: tuple(out.max(1)), lambda: out.max(1)[1], lambda: out.min(0)[0]):
    with pytest.raises(TypeError, match=r"values only .*argm"): bad()
  assert (out.max(1) * 2)[1].item() == 1.0   # a value computed from it indexes as usual
  assert out.max().item() == np.float32(0.7)
  assert [r.shape for r in out] == [(3,), (3,)]                     # ordinary tensors still iterate by rows


@pytest.mark.skipif(not compiler_has_float16(), reason="the C compiler has no _Float16")
def test_float16_division_is_rounded_once():
  """a / c in half: NumPy and PyTorch divide in float32 and round once; 1/c rounded to half and then the product
  rounded again was one unit in the last place off in about a quarter of the elements (the semantics probe's
  (a*a)/c)."""
  a = rng.standard_normal(4096).astype(np.float16)
  c = (rng.standard_normal(4096) + 3).astype(np.float16)
  out = Tensor(a) * Tensor(a) / Tensor(c)
  assert out.dtype is dtypes.float16
  np.testing.assert_array_equal(out.numpy(), (a * a) / c)
  np.testing.assert_array_equal((2.5 / Tensor(c)).numpy(), np.float16(2.5) / c)
  np.testing.assert_array_equal((Tensor(a) / 3.0).numpy(), a / np.float16(3.0))


FLOAT16_CHAINS = {   # each op's result a half, as NumPy's float16 (and PyTorch's per-op opmath) gives
  "(a*a)/c": lambda a, c: (a * a) / c, "a*c+a": lambda a, c: a * c + a, "(a-c)*(a+c)": lambda a, c: (a - c) * (a + c),
  "sqrt(a*c)": lambda a, c: (a * c).sqrt() if isinstance(a, Tensor) else np.sqrt(a * c),
  "float(a*c)": lambda a, c: (a * c).float() if isinstance(a, Tensor) else (a * c).astype(np.float32)}


@pytest.mark.parametrize("device", ["CPU", "CL"])
@pytest.mark.parametrize("name", FLOAT16_CHAINS)
def test_float16_rounds_after_every_op(name, device):
  """Every pair of half significands (a in [1, 2), c in [1, 2)) and a random sample of signs and exponents: OpenCL,
  which computes halves in float, kept a*a unrounded before the division (260,414 of the 1,048,576 pairs one unit
  off)."""
  if device == "CPU" and not compiler_has_float16(): pytest.skip("the C compiler has no _Float16")
  sig = (1 + np.arange(1024) / 1024).astype(np.float16)
  a, c = (g.ravel() for g in np.meshgrid(sig, sig, indexing="ij"))
  scale = np.float16(2.0) ** rng.integers(-6, 6, a.size).astype(np.float16) * rng.choice([-1, 1], a.size)
  a = (a * scale.astype(np.float16)).astype(np.float16)
  f = FLOAT16_CHAINS[name]
  with np.errstate(all="ignore"): want = f(a, c)
  got = f(Tensor(a, device=device), Tensor(c, device=device)).numpy()
  assert got.dtype == want.dtype
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("device", ["CPU", "CL"])
def test_float16_chain_matches_torch(device):
  torch = pytest.importorskip("torch")
  if device == "CPU" and not compiler_has_float16(): pytest.skip("the C compiler has no _Float16")
  a = rng.standard_normal(1 << 16).astype(np.float16)
  c = (rng.standard_normal(1 << 16) * 4).astype(np.float16)
  ta, tc = torch.tensor(a), torch.tensor(c)
  got = ((Tensor(a, device=device) * Tensor(a, device=device)) / Tensor(c, device=device)).numpy()
  np.testing.assert_array_equal(got, ((ta * ta) / tc).numpy())

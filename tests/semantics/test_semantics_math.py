"""Elementwise and reduction semantics against NumPy float64 and PyTorch's rules (issue 39, item 2): pow's dtypes,
values and gradients at 0, inf and negative bases; erf and gelu at float64 precision and their gradients at the
extremes; the trigonometric and hyperbolic functions; any/all of nothing; log_softmax of large values; dtype names as
strings; arange past int32; masks of the wrong length; NumPy's advanced-indexing placement; half matmuls accumulated in
float; uint32/uint64, shifts, isclose, sum(dtype=)."""
import math
import numpy as np
import pytest
from uopc.dtype import dtypes
from uopc.kernelize import normalize
from uopc.tensor import Tensor
from uopc.uop import Ops

try: import torch
except ImportError: torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
rng = np.random.default_rng(39)
inf, nan = math.inf, math.nan

# base, exponent, value, d/dbase, d/dexponent: C's pow and PyTorch's pow_backward (checked against torch 2.13 below)
POW = [(0.7, 0.0, 1.0, 0.0, math.log(0.7)), (0.0, 0.0, 1.0, 0.0, 0.0), (0.0, 2.0, 0.0, 0.0, 0.0),
       (0.0, -1.0, inf, -inf, -inf), (-2.0, 2.0, 4.0, -4.0, nan), (-2.0, 0.5, nan, nan, nan),
       (inf, 0.0, 1.0, 0.0, inf), (inf, 1.5, inf, inf, inf), (-inf, 0.3, inf, 0.0, nan), (2.0, inf, inf, inf, inf),
       (1.0, nan, 1.0, nan, 0.0), (-1.0, inf, 1.0, inf, nan), (0.0, 0.5, 0.0, inf, 0.0), (3.0, -inf, 0.0, nan, 0.0)]


def _pow(b, e):
  tb, te = Tensor(np.array(b, np.float32), requires_grad=True), Tensor(np.array(e, np.float32), requires_grad=True)
  out = tb ** te
  out.sum().backward()
  return out.numpy(), tb.grad.numpy(), te.grad.numpy()


def test_pow_values_and_gradients_at_the_edges():
  b, e, value, db, de = map(list, zip(*POW))
  out, gb, ge = _pow(b, e)
  np.testing.assert_array_equal(out, np.array(value, np.float32))
  np.testing.assert_allclose(gb, db, rtol=1e-6)
  np.testing.assert_allclose(ge, de, rtol=1e-6)


@needs_torch
def test_pow_table_is_pytorch_s():
  b, e = (list(x) for x in list(zip(*POW))[:2])
  B, E = torch.tensor(b, requires_grad=True), torch.tensor(e, requires_grad=True)
  (B ** E).sum().backward()
  out, gb, ge = _pow(b, e)
  np.testing.assert_array_equal(out, (B ** E).detach().numpy())
  np.testing.assert_allclose(gb, B.grad.numpy(), rtol=1e-6)
  np.testing.assert_allclose(ge, E.grad.numpy(), rtol=1e-6)


def test_scalar_base_power_gradient_at_zero():
  """d/dx 0.7^x at x = 0 is ln 0.7 (a where() for x == 0 gave 0)."""
  x = Tensor(np.zeros(2, np.float32), requires_grad=True)
  (0.7 ** x).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [math.log(0.7)] * 2, rtol=1e-6)


def test_integer_pow_dtypes():
  t = Tensor(np.array([2, 3, -3], np.int32))
  out = t ** 29
  assert out.dtype is dtypes.i32
  np.testing.assert_array_equal(out.numpy(), np.array([2, 3, -3], np.int32) ** 29)   # wrapping, as NumPy
  assert (t ** 2.5).dtype is dtypes.f32
  np.testing.assert_allclose((Tensor(np.array([2, 3], np.int32)) ** 2.5).numpy(), [2 ** 2.5, 3 ** 2.5], rtol=1e-6)
  with pytest.raises(ValueError, match="negative integer powers"): t ** -2
  e = Tensor(np.array([3, 2, -2, -3], np.int32))
  np.testing.assert_array_equal((Tensor(np.array([2, -3, 1, -1], np.int32)) ** e).numpy(), [8, 9, 1, -1])


def test_erf_at_float64_precision():
  x = np.concatenate([np.linspace(-7, 7, 141), [1e-8, -0.3, 1.4999, 1.5001, 27.0]])
  ref = np.array([math.erf(v) for v in x])
  np.testing.assert_allclose(Tensor(x).erf().numpy(), ref, rtol=3e-15, atol=1e-300)
  erfc = np.array([math.erfc(v) for v in np.abs(x)])
  np.testing.assert_allclose(Tensor(x).erfc_abs().numpy(), erfc, rtol=3e-14, atol=1e-300)


def test_gelu_at_float64_precision():
  x = np.linspace(-9, 9, 73)
  ref = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x])
  np.testing.assert_allclose(Tensor(x).gelu("none").numpy(), ref, rtol=3e-14, atol=1e-300)


def test_erf_and_gelu_gradients_at_the_extremes():
  x = np.array([-inf, -1e30, -30.0, 0.5, 30.0, 1e30, inf], np.float32)
  t = Tensor(x, requires_grad=True)
  t.erf().sum().backward()
  ref = 2 / math.sqrt(math.pi) * np.exp(-x.astype(np.float64) ** 2)
  np.testing.assert_allclose(t.grad.numpy(), ref, rtol=1e-6, atol=0)
  t = Tensor(x[1:-1], requires_grad=True)
  t.gelu("none").sum().backward()
  v = x[1:-1].astype(np.float64)
  phi = np.where(np.abs(v) > 1e4, 0, v * np.exp(-v * v / 2) / math.sqrt(2 * math.pi))
  np.testing.assert_allclose(t.grad.numpy(), 0.5 * np.array([math.erfc(-a / math.sqrt(2)) for a in v]) + phi,
                             rtol=1e-6, atol=1e-30)


UNARY = {"tan": (np.tan, (-1.2, 1.2)), "atan": (np.arctan, (-50, 50)), "asin": (np.arcsin, (-0.999, 0.999)),
         "acos": (np.arccos, (-0.999, 0.999)), "sinh": (np.sinh, (-5, 5)), "cosh": (np.cosh, (-5, 5)),
         "asinh": (np.arcsinh, (-50, 50)), "acosh": (np.arccosh, (1.001, 50)), "atanh": (np.arctanh, (-0.99, 0.99)),
         "log10": (np.log10, (1e-3, 1e3))}
DERIV = {"tan": lambda x: 1 / np.cos(x) ** 2, "atan": lambda x: 1 / (1 + x * x),
         "asin": lambda x: 1 / np.sqrt(1 - x * x), "acos": lambda x: -1 / np.sqrt(1 - x * x),
         "sinh": np.cosh, "cosh": np.sinh,
         "asinh": lambda x: 1 / np.sqrt(x * x + 1), "acosh": lambda x: 1 / np.sqrt(x * x - 1),
         "atanh": lambda x: 1 / (1 - x * x), "log10": lambda x: 1 / (x * math.log(10))}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_functions_against_numpy_float64(name):
  f, (lo, hi) = UNARY[name]
  x = np.concatenate([np.linspace(lo, hi, 41), [lo * 1e-4, hi * 1e-4] if lo < 0 else []])
  np.testing.assert_allclose(getattr(Tensor(x), name)().numpy(), f(x), rtol=1e-13, atol=1e-300)
  x32 = x.astype(np.float32)
  t = Tensor(x32, requires_grad=True)
  out = getattr(t, name)()
  np.testing.assert_allclose(out.numpy(), f(x32.astype(np.float64)), rtol=2e-6, atol=1e-7)
  out.sum().backward()
  np.testing.assert_allclose(t.grad.numpy(), DERIV[name](x32.astype(np.float64)), rtol=2e-5, atol=1e-6)


def test_asinh_and_acosh_of_huge_values_and_out_of_range():
  big = np.array([1e20, 3e37], np.float32)
  np.testing.assert_allclose(Tensor(big).asinh().numpy(), np.arcsinh(big.astype(np.float64)), rtol=1e-6)
  np.testing.assert_allclose(Tensor(big).acosh().numpy(), np.arccosh(big.astype(np.float64)), rtol=1e-6)
  assert np.isnan(Tensor([2.0]).asin().numpy()).all() and np.isnan(Tensor([0.5]).acosh().numpy()).all()


def test_any_and_all_of_nothing():
  e = Tensor(np.zeros((2, 0), bool))
  np.testing.assert_array_equal(e.any(1).numpy(), [False, False])
  np.testing.assert_array_equal(e.all(1).numpy(), [True, True])
  assert not e.any().item() and e.all().item()


def test_log_softmax_of_large_finite_values():
  x = np.array([1e30, 1e30, -1e30, 0], np.float32)
  out = Tensor(x).log_softmax().numpy()
  np.testing.assert_allclose(out[:2], [-math.log(2)] * 2, rtol=1e-6)
  np.testing.assert_allclose(Tensor(x).softmax().numpy(), [0.5, 0.5, 0, 0])


@pytest.mark.parametrize("name,want", [("uint8", dtypes.u8), ("int", dtypes.i32), ("long", dtypes.i64),
                                       ("float", dtypes.f32), ("double", dtypes.f64), ("half", dtypes.f16),
                                       ("float16", dtypes.f16), ("int64", dtypes.i64), ("bool", dtypes.bool),
                                       ("uint32", dtypes.u32), ("torch.float64", dtypes.f64), (np.int8, dtypes.i8)])
def test_dtype_names(name, want):
  assert Tensor([1, 2]).cast(name).dtype is want
  assert Tensor([1, 0], dtype=name).dtype is want
  assert Tensor.zeros(2, dtype=name).dtype is want


def test_a_bad_dtype_name_is_named():
  with pytest.raises(TypeError, match="not a dtype uopc has: 'quaternion'"): Tensor([1]).cast("quaternion")
  with pytest.raises(TypeError, match="not a dtype uopc has"): Tensor([1], dtype="int12")


def test_arange_past_int32_is_int64():
  out = Tensor.arange(2 ** 31, 2 ** 31 + 3)
  assert out.dtype is dtypes.i64
  np.testing.assert_array_equal(out.numpy(), np.arange(2 ** 31, 2 ** 31 + 3))
  assert Tensor.arange(5).dtype is dtypes.i32 and Tensor.arange(-2 ** 31 - 1, -2 ** 31 + 1).dtype is dtypes.i64


def test_a_mask_of_the_wrong_length_raises():
  with pytest.raises(IndexError, match=r"boolean index of shape \(2,\) does not match"):
    Tensor([1.0, 2.0, 3.0])[np.array([True, False])]
  x = np.arange(24.0).reshape(2, 3, 4).astype(np.float32)
  with pytest.raises(IndexError, match="at axis 2"): Tensor(x)[..., np.array([True, False, True])]
  np.testing.assert_array_equal(Tensor(x)[:, x[0] > 3].numpy(), x[:, x[0] > 3])


@pytest.mark.parametrize("key", ["int_between", "two_tensors", "tuple_index"])
def test_advanced_index_placement_is_numpy_s(key):
  x = np.arange(2 * 4 * 12 * 5 * 6, dtype=np.float32).reshape(2, 4, 12, 5, 6)
  d = np.array([0, 2, 1])
  k = {"int_between": (1, slice(None), slice(3, 11, 2), d, slice(0, 2)),
       "two_tensors": (slice(None), d, slice(None), d),
       "tuple_index": (slice(None), (0, 2), 1)}[key]
  t = Tensor(x)[tuple(Tensor(a.astype(np.int32)) if isinstance(a, np.ndarray) else a for a in k)].numpy()
  assert t.shape == x[k].shape
  np.testing.assert_array_equal(t, x[k])


def test_half_matmul_accumulates_in_float():
  a = np.full((1, 4096), 1.0, np.float16)
  b = np.full((4096, 1), 1.0 + 2 ** -10, np.float16)
  out = Tensor(a) @ Tensor(b)
  assert out.dtype is dtypes.f16
  reduce = next(u for u in normalize([out.uop])[0][0].toposort() if u.op is Ops.REDUCE)
  assert reduce.dtype is dtypes.f32                         # the sum is a float32 REDUCE (chapter 13's TC form)
  from uopc.codegen.tc import tc_fit
  tile = Tensor(np.ones((32, 64), np.float16)) @ Tensor(np.ones((64, 16), np.float16))
  reduce = next(u for u in normalize([tile.uop])[0][0].toposort() if u.op is Ops.REDUCE)
  assert tc_fit(reduce, 1)[2].dtype == "f16"                # TC=1 on a GPU device lowers it to f16 WMMA
  np.testing.assert_allclose(out.numpy().astype(np.float64), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-3)


def test_unsigned_types_shifts_isclose_and_sum_dtype():
  u = Tensor(np.array([3_000_000_000, 7], np.uint32))
  assert u.dtype is dtypes.u32
  np.testing.assert_array_equal((u + 1).numpy(), np.array([3_000_000_001, 8], np.uint32))
  big = Tensor(np.array([2 ** 63 + 5], np.uint64))
  np.testing.assert_array_equal((big + 1).numpy(), np.array([2 ** 63 + 6], np.uint64))
  i = Tensor(np.array([5, -7, 1], np.int32))
  np.testing.assert_array_equal((i << 3).numpy(), [40, -56, 8])
  np.testing.assert_array_equal((i >> 1).numpy(), np.array([5, -7, 1]) >> 1)
  np.testing.assert_array_equal((i >> Tensor(np.array([0, 2, 1], np.int32))).numpy(), [5, -2, 0])
  a, b = np.array([1.0, 2.0, inf, nan, 1e-9]), np.array([1.0 + 1e-6, 2.1, inf, nan, 0.0])
  np.testing.assert_array_equal(Tensor(a).isclose(Tensor(b)).numpy(), np.isclose(a, b))
  np.testing.assert_array_equal(Tensor(a).isclose(Tensor(b), equal_nan=True).numpy(), np.isclose(a, b, equal_nan=True))
  s = Tensor(np.array([1, 2], np.int32)).sum(dtype="float64")
  assert s.dtype is dtypes.f64 and s.item() == 3.0


def test_less_equal_with_nan_is_false():
  """a <= b was not(a > b): True for a NaN on either side (NumPy: False)."""
  a, b = np.array([1.0, nan, 2.0, 3.0]), np.array([1.0, 1.0, nan, 2.0])
  np.testing.assert_array_equal((Tensor(a) <= Tensor(b)).numpy(), a <= b)
  np.testing.assert_array_equal((Tensor(a) >= Tensor(b)).numpy(), a >= b)

"""Integer ops as NumPy computes them, on every integer dtype at its extremes (issue 30, item 1): alone in a kernel
(realized) and inside a bigger expression (fused: the value is used by another op before it is stored), where C's
own operators would trap (INT_MIN // -1), fold (signed overflow), promote (uint8 to int) or keep a value no
integer type holds (a float -> int -> float round trip)."""
import itertools
import numpy as np
import pytest
from capabilities import compiler_has_float16
from uopc.dtype import dtypes, np_dtype
from uopc.tensor import Tensor

INT_DTYPES = [dtypes.u8, dtypes.i8, dtypes.i32, dtypes.i64]


def extremes(d) -> np.ndarray:
  """Every pair of the dtype's extreme values and a few small ones, as two flat arrays."""
  vals = sorted(v for v in {d.min, d.min + 1, -2, -1, 0, 1, 2, 7, d.max - 1, d.max} if d.min <= v <= d.max)
  a, b = zip(*itertools.product(vals, vals))
  return np.array(a, np_dtype(d)), np.array(b, np_dtype(d))


BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "xor": lambda a, b: a ^ b}


def numpy_ref(op, a, b):
  with np.errstate(all="ignore"):
    out = BINARY[op](a, b)
  if op in ("floordiv", "mod"): out = np.where(b == 0, 0, out).astype(a.dtype)   # NumPy's x // 0 and x % 0
  return out


@pytest.mark.parametrize("d", INT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("op", list(BINARY))
def test_binary_op_alone(d, op):
  a, b = extremes(d)
  out = BINARY[op](Tensor(a), Tensor(b)).realize()
  assert out.dtype is d
  np.testing.assert_array_equal(out.numpy(), numpy_ref(op, a, b))


@pytest.mark.parametrize("d", INT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("op", list(BINARY))
def test_binary_op_fused(d, op):
  """The result is used in the same kernel: compared, widened, and reduced with max."""
  a, b = extremes(d)
  ref = numpy_ref(op, a, b)
  c = np.full_like(a, 5)
  r = BINARY[op](Tensor(a), Tensor(b))
  np.testing.assert_array_equal((r < Tensor(c)).numpy(), ref < c)
  np.testing.assert_array_equal(r.cast(dtypes.i64).numpy(), ref.astype(np.int64))
  np.testing.assert_array_equal(BINARY[op](Tensor(a), Tensor(b)).max().numpy(), ref.max())
  np.testing.assert_array_equal((BINARY[op](Tensor(a), Tensor(b)) * 1 + 0).numpy(), ref)


def wrap(v: int, d) -> int:
  """v as dtype d holds it (two's complement)."""
  span = 2 ** (8 * d.itemsize)
  return (v - d.min) % span + d.min


@pytest.mark.parametrize("d", INT_DTYPES, ids=lambda d: d.name)
def test_negation_and_trunc_division(d):
  a, b = extremes(d)
  with np.errstate(all="ignore"):
    np.testing.assert_array_equal((-Tensor(a)).numpy(), -a)
  trunc = lambda x, y: 0 if y == 0 else wrap((abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1), d)
  want = np.array([trunc(int(x), int(y)) for x, y in zip(a, b)], a.dtype)
  np.testing.assert_array_equal(Tensor(a).div(Tensor(b), rounding_mode="trunc").numpy(), want)


@pytest.mark.parametrize("d", [dtypes.i32, dtypes.i64], ids=lambda d: d.name)
def test_int_min_floordiv_minus_one_does_not_trap(d):
  a = np.array([d.min, d.min, 5], np_dtype(d))
  b = np.array([-1, -1, -1], np_dtype(d))
  with np.errstate(all="ignore"):
    np.testing.assert_array_equal((Tensor(a) // Tensor(b)).numpy(), a // b)
    np.testing.assert_array_equal((Tensor(a) % Tensor(b)).numpy(), a % b)
  np.testing.assert_array_equal((Tensor(a) // -1).numpy(), np.array([d.min, d.min, -5]))


def test_mod_by_zero_is_zero():
  a = np.array([7, -7, 0, 2**31 - 1], np.int32)
  np.testing.assert_array_equal((Tensor(a) % Tensor(np.zeros(4, np.int32))).numpy(), np.zeros(4))
  np.testing.assert_array_equal((Tensor(a) % 0).numpy(), np.zeros(4))


def test_signed_overflow_is_not_folded():
  """gcc -O3 folds (x + 1) > x to true; NumPy wraps 2**31 - 1 + 1 to INT_MIN."""
  x = np.array([2**31 - 1, 5, -2**31], np.int32)
  with np.errstate(all="ignore"):
    np.testing.assert_array_equal(((Tensor(x) + 1) > Tensor(x)).numpy(), (x + 1) > x)
  y = np.array([2**63 - 1, 5], np.int64)
  with np.errstate(all="ignore"):
    np.testing.assert_array_equal(((Tensor(y) + 1) > Tensor(y)).numpy(), (y + 1) > y)


def test_uint8_wraps_before_the_next_op():
  a, b, c = np.array([250, 10], np.uint8), np.array([10, 3], np.uint8), np.array([5, 5], np.uint8)
  np.testing.assert_array_equal(((Tensor(a) + Tensor(b)) < Tensor(c)).numpy(), (a + b) < c)
  np.testing.assert_array_equal((Tensor(a) + Tensor(b)).max().numpy(), (a + b).max())
  np.testing.assert_array_equal((Tensor(a) * Tensor(b)).sum().numpy(), (a * b).astype(np.int64).sum())


FLOATS = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 1e10, 2.0**31, -2.0**31, 300.0, -1.0, -200.5, 255.9, 1.5,
                   -0.5, 0.0, 127.0, -128.0], np.float32)


@pytest.mark.parametrize("d", INT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("src", [np.float32, np.float64])
def test_float_to_int_cast_outside_the_range(d, src):
  """NumPy (x86) gives the minimum of int32/int64 for NaN, inf and values out of range; 8-bit types wrap that."""
  x = FLOATS.astype(src)
  with np.errstate(all="ignore"):
    want = x.astype(np_dtype(d))
  np.testing.assert_array_equal(Tensor(x).cast(d).numpy(), want)                         # alone
  np.testing.assert_array_equal(Tensor(x).cast(d).cast(dtypes.f32).numpy(), want.astype(np.float32))  # fused
  np.testing.assert_array_equal(Tensor(x).cast(d).realize().cast(dtypes.f32).numpy(), want.astype(np.float32))


def test_roundtrip_keeps_no_value_an_int32_lacks():
  x = np.array([np.nan, np.inf, 3e9, 1.5], np.float32)
  got = Tensor(x).int().float().numpy()
  np.testing.assert_array_equal(got, np.array([-2**31, -2**31, -2**31, 1.0], np.float32))


@pytest.mark.skipif(not compiler_has_float16(), reason="the C compiler has no _Float16")
def test_float16_rounds_between_fused_ops():
  h = np.array([300, 2, 60000], np.float16)
  with np.errstate(all="ignore"):
    want = h * h / np.float16(1000)
  np.testing.assert_array_equal((Tensor(h) * Tensor(h) / 1000).numpy(), want)


@pytest.mark.parametrize("d", [dtypes.u8, dtypes.i32, dtypes.i64], ids=lambda d: d.name)
def test_on_cl(d):
  """OpenCL C is C here too: the same text on the CL device (PoCL)."""
  a, b = extremes(d)
  ta, tb = Tensor(a, device="CL"), Tensor(b, device="CL")
  for op in ("add", "mul", "floordiv"):
    np.testing.assert_array_equal(BINARY[op](ta, tb).cast(dtypes.i64).numpy(), numpy_ref(op, a, b).astype(np.int64))
  with np.errstate(all="ignore"):
    np.testing.assert_array_equal(Tensor(FLOATS, device="CL").cast(d).numpy(), FLOATS.astype(np_dtype(d)))

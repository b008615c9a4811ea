"""Elementwise Tensor methods: the book's core (promotion and broadcasting, + * - / < ==, where, exp2/log2/sqrt
/recip/sin and what chapter 9 builds from them) and the rest PyTorch has: operators (//, %, **, &, |, ^, ~),
function forms (add, sub, mul, div...), rounding, pow and clip. All are ALU nodes and the promotion rules."""
from __future__ import annotations
import math
import sys
import numpy as np
from typing import Sequence, TypeVar
from uopc.dtype import DType, dtypes, least_upper_dtype, scalar_dtype
from uopc.mixin.shapes import broadcast_shapes_of
from uopc.uop import Ops
from uopc.errors import UsageError

if sys.version_info >= (3, 11): from typing import Self   # the composing class (Tensor), which no mixin names
else: Self = TypeVar("Self", bound="ElementwiseMixin")       # Python 3.10 has no typing.Self: the root mixin stands in

LOG2E, LN2 = 1 / math.log(2), math.log(2)


def _pow_grad(out, s, g):
  """PyTorch's pow_backward: d/db = e b^(e-1) (0 where e == 0); d/de = out ln b (0 at b == 0 with e >= 0, nan for a
  negative base)."""
  b, e = s
  db = e.eq(0).where(0.0, g * e * b.pow(e - 1))
  de = (b.eq(0) & (e >= 0)).where(0.0, g * out * b.log())
  return db, de


class ElementwiseMixin:
  """The root of the Tensor's mixins. The composing class is made from an array, cls(array, dtype=None), and
  provides the primitives below; every other method here and in the mixins built on this one is written with them."""
  # ---- the composing class provides ----
  @property
  def shape(self) -> tuple[int, ...]: raise NotImplementedError
  @property
  def dtype(self) -> DType: raise NotImplementedError
  def _alu(self, op: Ops, *srcs: Self) -> Self:
    """The node op over self and srcs, all of one shape: an ALU op on one dtype (a WHERE's condition is bool), or a
    STACK."""
    raise NotImplementedError
  def cast(self, dtype: DType) -> Self: raise NotImplementedError
  @classmethod
  def full(cls, shape: Sequence[int], value, dtype: DType | None = None) -> Self: raise NotImplementedError
  def _broadcast(self, shape: tuple[int, ...]) -> Self:
    """self expanded to shape, a shape known to broadcast self's (MovementMixin gives it)."""
    raise NotImplementedError

  # ---- the core: promotion, broadcasting and the ALU ops ----
  def const_like(self, value) -> Self:
    return type(self).full(self.shape, value, self.dtype if not isinstance(value, bool) else dtypes.bool)
  def _operand(self, x) -> Self:
    """x as a Tensor: a Python scalar becomes a constant of self's shape, in the dtype `self op x` computes in."""
    return x if isinstance(x, ElementwiseMixin) else type(self).full(self.shape, x, scalar_dtype(self.dtype, x))

  def _pair(self, other) -> tuple[Self, Self]:
    """self and other promoted to one dtype (NumPy/PyTorch: float beats int, wide beats narrow) and one shape."""
    other = self._operand(other)
    dt = self.dtype if other.dtype is self.dtype else least_upper_dtype(self.dtype, other.dtype)
    shape = self.shape if other.shape == self.shape else broadcast_shapes_of(self.shape, other.shape)
    # broadcast_shape checked that both expand to shape: the nodes expand() builds, without its checks
    return self.cast(dt)._broadcast(shape), other.cast(dt)._broadcast(shape)

  def _binary(self, op: Ops, other, reverse: bool = False) -> Self:
    if not isinstance(other, ElementwiseMixin): other = self._operand(other)   # a scalar: self's shape, the op's dtype
    same = other.dtype is self.dtype and other.shape == self.shape
    a, b = (self, other) if same else self._pair(other)   # nothing to promote or broadcast: the common case, fast
    if reverse: a, b = b, a
    return a._alu(op, b)
  def __add__(self, x): return self._binary(Ops.ADD, x)
  def __radd__(self, x): return self._binary(Ops.ADD, x, True)
  def __mul__(self, x): return self._binary(Ops.MUL, x)
  def __rmul__(self, x): return self._binary(Ops.MUL, x, True)
  def __neg__(self):
    if self.dtype is dtypes.bool: raise TypeError("negating a bool tensor: use logical_not() or ~")
    return self * -1
  def __sub__(self, x): return self + (-self._operand(x))
  def __rsub__(self, x): return (-self) + x
  def __truediv__(self, x):
    x = self._operand(x)
    if not self.dtype.is_float and not x.dtype.is_float:   # true division of integers gives floats, as in NumPy
      return self.cast(dtypes.default_float) / x.cast(dtypes.default_float)
    a, b = self._pair(x)
    if a.dtype is dtypes.f16:   # 1/b rounded to half, then the product rounded again: 1 ulp off in a quarter of cases
      return (a.float() * b.float().recip()).cast(dtypes.f16)   # in float32, rounded once (NumPy's, PyTorch's opmath)
    return self * x.recip()
  def __rtruediv__(self, x):
    if self.dtype is dtypes.f16: return self._operand(x) / self   # x / half, rounded once as above
    return (self if self.dtype.is_float else self.float()).recip() * x
  def __lt__(self, x): return self._binary(Ops.CMPLT, x)
  def __gt__(self, x): return self._binary(Ops.CMPLT, x, True)
  def __ge__(self, x): return self._or_equal(x, self < x)
  def __le__(self, x): return self._or_equal(x, self > x)
  def _or_equal(self, x, strict) -> Self:
    """a <= b as not(a > b), except for floats: a NaN on either side compares False, as in NumPy and C."""
    a, b = self._pair(x)
    return strict.logical_not() if not a.dtype.is_float else strict.logical_not() & a.eq(a) & b.eq(b)
  def __eq__(self, x): return self.eq(x)   # elementwise, as in NumPy, PyTorch and tinygrad
  def __ne__(self, x): return self.ne(x)
  __hash__ = object.__hash__   # == is elementwise, so a Tensor hashes by identity
  def isnan(self) -> Self: return self.ne(self) if self.dtype.is_float else type(self).full(self.shape, False)
  def eq(self, x) -> Self: return self.ne(x).logical_not()
  def ne(self, x) -> Self: return self._binary(Ops.CMPNE, x)
  def logical_not(self) -> Self: return self.ne(True) if self.dtype is dtypes.bool else self.eq(0)
  def maximum(self, x) -> Self:
    out = self._binary(Ops.MAX, x)
    if not out.dtype.is_float: return out
    # C's (a>b)?a:b drops a NaN in a; NumPy's maximum propagates it from either side
    a = self.cast(out.dtype)._broadcast(out.shape)
    return a.isnan().where(a, out)
  def minimum(self, x) -> Self:
    a, b = self._pair(x)   # promoted first: a bool or integer tensor against a float is a float minimum
    if a.dtype.is_float: return -((-a).maximum(-b))
    return ~((~a).maximum(~b))   # bools and integers: -x overflows at an integer's minimum; ~x never does
  def where(self, a, b) -> Self:
    """self ? a : b, broadcast together; a and b are Tensors or scalars, promoted to one dtype."""
    if self.dtype is not dtypes.bool: raise TypeError(f"where: the condition must be bool, got {self.dtype}")
    ts = [x for x in (a, b) if isinstance(x, ElementwiseMixin)]
    dt = least_upper_dtype(*(t.dtype for t in ts)) if ts else dtypes.from_py(a)
    for x in (a, b):
      if isinstance(x, ElementwiseMixin): continue
      dt = scalar_dtype(dt, x) if ts else least_upper_dtype(dt, dtypes.from_py(x))
    a = a.cast(dt) if isinstance(a, ElementwiseMixin) else type(self).full((), a, dt)
    b = b.cast(dt) if isinstance(b, ElementwiseMixin) else type(self).full((), b, dt)
    shape = broadcast_shapes_of(self.shape, a.shape, b.shape)
    return self._broadcast(shape)._alu(Ops.WHERE, a._broadcast(shape), b._broadcast(shape))
  def _unary(self, op: Ops) -> Self:
    x = self if self.dtype.is_float else self.cast(dtypes.default_float)   # exp of an int is a float, as in PyTorch
    return x._alu(op)
  def exp2(self) -> Self: return self._unary(Ops.EXP2)
  def log2(self) -> Self: return self._unary(Ops.LOG2)
  def sqrt(self) -> Self: return self._unary(Ops.SQRT)
  def recip(self) -> Self: return self._unary(Ops.RECIP)
  reciprocal = recip
  def sin(self) -> Self: return self._unary(Ops.SIN)
  def exp(self) -> Self: return (self * LOG2E).exp2()     # one hardware-friendly exponential: exp(x) = 2^(x log2 e)
  def log(self) -> Self: return self.log2() * LN2
  def relu(self) -> Self:
    """max(x, 0), written so that its gradient at exactly 0 is 0 (as in PyTorch) and relu(nan) is nan."""
    if not self.dtype.is_float: return (self > 0).where(self, 0)
    return self.isnan().where(self, (self > 0).where(self, 0.0))
  def sigmoid(self) -> Self:
    """1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below: e = e^-|x| <= 1 never overflows, so no branch holds an inf
    (an inf in the branch not taken would still make its gradient 0 * inf = nan)."""
    neg = self < 0
    e = neg.where(self, -self).exp()
    return neg.where(e, 1.0) / (1 + e)
  def tanh(self) -> Self:
    """sign(x) (1 - e) / (1 + e) with e = e^(-2|x|) <= 1: finite for every x, and so is its gradient."""
    neg = self < 0
    e = (neg.where(self, -self) * 2).exp()
    t = (1 - e) / (1 + e)
    return neg.where(-t, t)
  def erf(self) -> Self:
    """The error function: a Taylor series below |x| = 0.5 (relative error < 1e-8 there), 1 - erfc(|x|) above, with
    the sign of x; in float64, a series to 1.5 and a continued fraction above (relative error < 2e-15). Its gradient is
    2/sqrt(pi) exp(-x^2), 0 at the infinities."""
    x = self if self.dtype.is_float else self.float()
    if x.dtype is dtypes.f64: out = x._erf64()
    else: out = x._erf32()
    return out._custom_grad((x,), lambda out, s, g: (g * (2 / math.sqrt(math.pi)) * (-(s[0] * s[0])).exp(),))
  def _erf64(self) -> Self:
    z = self.abs()
    big = 1 - z._erfc_cf()
    return (z < 1.5).where(self._erf_series(), (self < 0).where(-big, big))
  def _erf_series(self) -> Self:
    """erf(x) = 2/sqrt(pi) e^-x^2 x sum_n (2x^2)^n / (1 3 ... (2n+1)): every term positive, no cancellation."""
    x2, s = 2 * self * self, 1.0
    for n in range(44, 0, -1): s = 1 + x2 * (1 / (2 * n + 1)) * s
    return self._exp_neg_square() * self * s * (2 / math.sqrt(math.pi))
  def _erfc_cf(self) -> Self:
    """erfc(z) for z >= 1.5: e^-z^2 / sqrt(pi) / (z + (1/2)/(z + 1/(z + (3/2)/(z + ...)))), 80 levels deep. z past 40
    is 40 (erfc is 0 in float64 from 27.3 on): at z = inf the formula's e^-z^2 would be inf - inf = nan."""
    self = (self > 40).where(40.0, self)
    k = self
    for n in range(80, 0, -1): k = self + (n / 2) / k
    return self._exp_neg_square() / k * (1 / math.sqrt(math.pi))
  def _exp_neg_square(self) -> Self:
    """e^(-x^2) with x^2's rounding kept out of the exponent: x = h + l, h a multiple of 1/16 (h^2 exact)."""
    h = (self * 16).floor() * (1 / 16)
    return (-(h * h)).exp() * (-((self - h) * (self + h))).exp()
  def _erf32(self) -> Self:
    x = self
    x2 = x * x
    series = x * (2 / math.sqrt(math.pi)) * (1 + x2 * (-1 / 3 + x2 * (1 / 10 + x2 * (-1 / 42 + x2 * (
      1 / 216 + x2 * (-1 / 1320 + x2 * (1 / 9360)))))))
    tail = 1 - x.erfc_abs()
    return (x2 < 0.25).where(series, (x < 0).where(-tail, tail))
  def erfc_abs(self) -> Self:
    """erfc(|x|) = 1 - erf(|x|), by Numerical Recipes' Chebyshev fit t exp(-z^2 + poly(t)), t = 1 / (1 + z/2), z = |x|
    (relative error below 1.2e-7 for every z): no 1 - erf cancellation, so a GELU's negative tail keeps its digits.
    float64: 1 - the series below 1.5, the continued fraction above (relative error < 2e-14)."""
    z = self.abs()
    if z.dtype is dtypes.f64: return (z < 1.5).where(1 - z._erf_series(), z._erfc_cf())
    t = 1 / (1 + 0.5 * z)
    poly = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (
      0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))))
    return t * (poly - z * z).exp()
  def abs(self) -> Self: return self.maximum(-self) if self.dtype.is_float else (self < 0).where(-self, self)
  def _custom_grad(self, srcs: tuple, rule) -> Self:
    """self, whose gradient is rule(out, srcs, g) -> one gradient per source, not the derivative of the formula
    that computes it (the composing class records it for autograd)."""
    return self

  def isclose(self, other, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> Self:
    """|self - other| <= atol + rtol |other| (NumPy's and PyTorch's isclose); infinities close only to themselves."""
    a, b = self._pair(other)
    if not a.dtype.is_float: return a.eq(b)
    close = a.eq(b) | (~a.isinf() & ~b.isinf() & ((a - b).abs() <= atol + rtol * b.abs()))
    return close | (a.isnan() & b.isnan()) if equal_nan else close
  def __lshift__(self, n): return self._shift(n, True)
  def __rshift__(self, n): return self._shift(n, False)
  def lshift(self, n) -> Self: return self._shift(n, True)
  def rshift(self, n) -> Self: return self._shift(n, False)
  def _shift(self, n, left: bool) -> Self:
    """PyTorch's (and NumPy's) shifts, with none of C's undefined behaviour on signed integers: x << n is x * 2^n
    wrapping in two's complement (1 << 31 is -2^31 in int32), x >> n is floor(x / 2^n) (an arithmetic shift for
    signed integers). A count of the bit width or more (or, in a count tensor, a negative one) shifts every bit out:
    << gives 0, >> gives 0, or -1 for a negative signed x. A negative Python count is refused."""
    if not self.dtype.is_int: raise TypeError(f"<< and >> need an integer tensor, got {self.dtype}")
    bits = 8 * self.dtype.itemsize
    top = self.dtype.min if not self.dtype.is_unsigned else 1 << (bits - 1)   # 2^(bits-1), wrapped when signed
    gone = self.const_like(0) if left or self.dtype.is_unsigned else (self < 0).where(-1, 0).cast(self.dtype)
    if isinstance(n, ElementwiseMixin):   # 2^n as a select over the bit positions (no product that overflows)
      # the sign bit of a signed x is top for <<, and for >> a shift out of range (sign fill): k = 0 there
      k, last = self.const_like(0), bits if left or self.dtype.is_unsigned else bits - 1
      for b in range(last): k = n.eq(b).where(top if b == bits - 1 else 1 << b, k)
      if left: return self * k                                                    # k = 0 out of range: 0
      return k.eq(0).where(gone, self // k.eq(0).where(1, k))                     # never a division by 0
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
      raise ValueError(f"shift count must be a non-negative integer, got {n!r}")
    if n >= bits: return gone
    if n == bits - 1 and not self.dtype.is_unsigned: return self * top if left else gone   # the sign bit
    k = type(self).full(self.shape, 1 << int(n), self.dtype)
    return self * k if left else self // k
  def square(self) -> Self: return self * self
  def float(self) -> Self: return self.cast(dtypes.f32)

  # ---- beyond the core ----
  def __floordiv__(self, x): return self._floordiv(self._operand(x))
  def __rfloordiv__(self, x): return self._operand(x)._floordiv(self)
  def __mod__(self, x):
    x = self._operand(x)
    r = self - (self // x) * x                           # the sign of the divisor, as Python's and NumPy's %
    return x.eq(0).where(0, r) if r.dtype.is_int else r  # x % 0 is 0 in NumPy (x // 0 is 0 here too)
  def __rmod__(self, x): return self._operand(x) % self
  def __pow__(self, x): return self.pow(x)
  def __rpow__(self, x): return self._operand(x).pow(self)
  def __and__(self, x): return self._bitwise(Ops.AND, x)
  def __rand__(self, x): return self._bitwise(Ops.AND, x)
  def __or__(self, x): return self._bitwise(Ops.OR, x)
  def __ror__(self, x): return self._bitwise(Ops.OR, x)
  def __xor__(self, x): return self._bitwise(Ops.XOR, x)
  def __rxor__(self, x): return self._bitwise(Ops.XOR, x)
  def __invert__(self):
    if self.dtype is dtypes.bool: return self.logical_not()
    if not self.dtype.is_int: raise TypeError(f"~ needs a bool or integer tensor, got {self.dtype}")
    return self ^ (self.dtype.max if self.dtype.is_unsigned else -1)
  def _bitwise(self, op: Ops, x) -> Self:
    x = self._operand(x)
    for t in (self, x):
      if t.dtype.is_float: raise TypeError(f"{op.name.lower()}: bitwise ops need bool or integer tensors: {t.dtype}")
    return self._binary(op, x)
  def _floordiv(self, x: Self) -> Self:
    """Python's and NumPy's floor division; IDIV (C's /) truncates toward zero."""
    if self.dtype.is_float or x.dtype.is_float: return (self / x).floor()
    a, b = self._int_pair(x)
    q = a._truncdiv(b)
    inexact = (q * b).ne(a) & ((a < 0) ^ (b < 0)) & b.ne(0)
    return inexact.where(q - 1, q)
  def _int_pair(self, x: Self) -> tuple[Self, Self]:
    a, b = self._pair(x)
    return (a.int(), b.int()) if a.dtype is dtypes.bool else (a, b)
  def _truncdiv(self, b: Self) -> Self:
    """C's integer division (toward zero); x / 0 traps in C, so it gives 0 here, as NumPy does."""
    zero = b.eq(0)
    return zero.where(0, self._binary(Ops.IDIV, zero.where(1, b)))

  # function forms, as in PyTorch and tinygrad
  def add(self, x) -> Self: return self + x
  def sub(self, x) -> Self: return self - x
  def mul(self, x) -> Self: return self * x
  def div(self, x, rounding_mode: str | None = None) -> Self:
    if rounding_mode is None: return self / x
    if rounding_mode == "floor": return self // x
    if rounding_mode != "trunc":
      raise UsageError(f"div: rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}")
    x = self._operand(x)
    if self.dtype.is_float or x.dtype.is_float: return (self / x).trunc()
    a, b = self._int_pair(x)
    return a._truncdiv(b)
  def neg(self) -> Self: return -self
  def logical_and(self, x) -> Self: return self.bool() & self._operand(x).bool()
  def logical_or(self, x) -> Self: return self.bool() | self._operand(x).bool()
  def isinf(self) -> Self:
    return self.abs().eq(math.inf) if self.dtype.is_float else type(self).full(self.shape, False)
  def rsqrt(self) -> Self: return self.sqrt().recip()
  def cos(self) -> Self:
    """1 - 2 sin^2(x/2): halving x is exact, where the textbook sin(x + pi/2) rounds x + pi/2 (by up to 0.004 at
    |x| = 1e5 in float32: cos off by 1%). Its gradient is -sin(x), sin's own range reduction (PyTorch's rule)."""
    if not self.dtype.is_float: return self.float().cos()
    half = (self * 0.5).sin()
    return (1 - 2 * (half * half))._custom_grad((self,), lambda out, s, g: (-g * s[0].sin(),))
  def sign(self) -> Self:
    s = (self > 0).where(1, (self < 0).where(-1, 0)).cast(self.dtype)
    return self.isnan().where(self, s) if self.dtype.is_float else s
  def floor(self) -> Self:
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (t > self).where(t - 1, t)
  def ceil(self) -> Self: return -((-self).floor())
  def trunc(self) -> Self:
    if not self.dtype.is_float: return self
    t = self.cast(dtypes.i64).cast(self.dtype)             # C's cast truncates; |x| >= 2^52 is already whole
    return (self.abs() < 2.0 ** 52).where(t, self)
  def round(self) -> Self:
    """Half to even, as NumPy and PyTorch round."""
    f = (self + 0.5).floor()
    tie = (f - self).eq(0.5) & (f % 2).ne(0)
    return tie.where(f - 1, f)
  def pow(self, x) -> Self:
    """self ** x with PyTorch's types and C's pow at the edges. An integer tensor to an integer power stays an integer
    (square and multiply; a negative scalar power raises, as in PyTorch); a float power makes a float. A float base
    to a whole scalar power up to 16 is repeated multiplication (exact); otherwise exp2(x log2|self|), signed for a
    negative base and whole x (nan for a fractional one), and C's values at 0, 1, -1 and the infinities. Its gradient is
    PyTorch's rule (its own, not the formula's): 0 for x at a zero base with x >= 0, nan for x at a negative base."""
    scalar = not isinstance(x, ElementwiseMixin)
    if scalar and isinstance(x, bool): x = int(x)
    if scalar and not isinstance(x, (int, float, np.integer, np.floating)):
      raise TypeError(f"pow: the exponent must be a number or a Tensor, got {type(x).__name__}")
    int_exponent = isinstance(x, (int, np.integer)) if scalar else not x.dtype.is_float
    if not self.dtype.is_float and int_exponent: return self._int_pow(x)
    if scalar and float(x).is_integer() and abs(x) <= 16 and self.dtype.is_float:
      n, base, out = abs(int(x)), self, None
      while n:                                             # square and multiply
        if n & 1: out = base if out is None else out * base
        n >>= 1
        if n: base = base * base
      if out is None: return type(self).full(self.shape, 1, self.dtype)
      return out if x > 0 else 1 / out
    if scalar and x == 0.5: return self.sqrt() if self.dtype.is_float else self.float().sqrt()
    b, e = self._pair(x)
    if not b.dtype.is_float: b, e = b.float(), e.float()
    out = b._float_pow(e)
    return out._custom_grad((b, e), _pow_grad)

  def _float_pow(self, e: Self) -> Self:
    b = self
    mag = (e * b.abs().log2()).exp2()
    whole, odd = e.eq(e.floor()), (e % 2).abs().eq(1)
    neg_inf = b.eq(-math.inf)
    sign = (b < 0).where(whole.where(odd.where(-1.0, 1.0), neg_inf.where(1.0, math.nan)), 1.0)
    one = e.eq(0) | b.eq(1) | (b.eq(-1) & e.isinf())                     # C's pow: 1 even for a nan on the other side
    return one.where(1.0, mag * sign)

  def _int_pow(self, x) -> Self:
    """Integer power by square and multiply over the exponent's bits: exact, and wrapping as C's and NumPy's."""
    T = type(self)
    if not isinstance(x, ElementwiseMixin):
      if x < 0: raise ValueError(f"pow: integers to negative integer powers are not allowed ({x}), as in PyTorch; "
                                 "make the base a float first")
      n, base, out = int(x), (self if self.dtype is not dtypes.bool else self.int()), None
      while n:
        if n & 1: out = base if out is None else out * base
        n >>= 1
        if n: base = base * base
      return out if out is not None else T.full(self.shape, 1, self.dtype if self.dtype is not dtypes.bool else
                                                dtypes.int)
    b, e = self._int_pair(x)
    out, base, rest = b.const_like(1), b, (e < 0).where(0, e)
    for _ in range(8 * b.dtype.itemsize):
      out = (rest % 2).ne(0).where(out * base, out)
      base, rest = base * base, rest // 2
    # a negative exponent: 1 for a base of 1, +-1 for -1, else 0 (C's integer result of 1 / b^n)
    return (e < 0).where(b.eq(1).where(1, b.eq(-1).where((e % 2).ne(0).where(-1, 1), 0)), out)

  def clip(self, min_=None, max_=None) -> Self:
    """min_ <= x <= max_ (either may be None); the gradient passes at the bounds, as PyTorch's clamp; nan stays nan."""
    if min_ is None and max_ is None: raise UsageError("clip: give min_, max_ or both")
    out = self
    if min_ is not None: out = (out < min_).where(min_, out)
    if max_ is not None: out = (out > max_).where(max_, out)
    return out
  clamp = clip
  def double(self) -> Self: return self.cast(dtypes.f64)
  def half(self) -> Self: return self.cast(dtypes.f16)
  def int(self) -> Self: return self.cast(dtypes.i32)
  def long(self) -> Self: return self.cast(dtypes.i64)
  def bool(self) -> Self: return self.cast(dtypes.bool) if self.dtype is dtypes.bool else self.ne(0)

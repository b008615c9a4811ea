"""Elementwise Tensor methods beyond the book's core: operators (//, %, **, &, |, ^, ~), PyTorch's function forms
(add, sub, mul, div...), rounding, pow and clip, written with the core's ALU ops and promotion rules."""
from __future__ import annotations
import math
from typing import TYPE_CHECKING
from uopc.dtype import dtypes
from uopc.uop import Ops
from uopc.errors import UsageError

if TYPE_CHECKING: from uopc.tensor import Tensor


class ElementwiseMixin:
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
  def _bitwise(self, op: Ops, x) -> Tensor:
    x = self._operand(x)
    for t in (self, x):
      if t.dtype.is_float: raise TypeError(f"{op.name.lower()}: bitwise ops need bool or integer tensors: {t.dtype}")
    return self._binary(op, x)
  def _floordiv(self, x: Tensor) -> Tensor:
    """Python's and NumPy's floor division; IDIV (C's /) truncates toward zero."""
    if self.dtype.is_float or x.dtype.is_float: return (self / x).floor()
    a, b = self._int_pair(x)
    q = a._truncdiv(b)
    inexact = (q * b).ne(a) & ((a < 0) ^ (b < 0)) & b.ne(0)
    return inexact.where(q - 1, q)
  def _int_pair(self, x: Tensor) -> tuple[Tensor, Tensor]:
    a, b = self._pair(x)
    return (a.int(), b.int()) if a.dtype is dtypes.bool else (a, b)
  def _truncdiv(self, b: Tensor) -> Tensor:
    """C's integer division (toward zero); x / 0 traps in C, so it gives 0 here, as NumPy does."""
    zero = b.eq(0)
    return zero.where(0, self._binary(Ops.IDIV, zero.where(1, b)))

  # function forms, as in PyTorch and tinygrad
  def add(self, x) -> Tensor: return self + x
  def sub(self, x) -> Tensor: return self - x
  def mul(self, x) -> Tensor: return self * x
  def div(self, x, rounding_mode: str | None = None) -> Tensor:
    if rounding_mode is None: return self / x
    if rounding_mode == "floor": return self // x
    if rounding_mode != "trunc":
      raise UsageError(f"div: rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}")
    x = self._operand(x)
    if self.dtype.is_float or x.dtype.is_float: return (self / x).trunc()
    a, b = self._int_pair(x)
    return a._truncdiv(b)
  def neg(self) -> Tensor: return -self
  def logical_and(self, x) -> Tensor: return self.bool() & self._operand(x).bool()
  def logical_or(self, x) -> Tensor: return self.bool() | self._operand(x).bool()
  def isinf(self) -> Tensor:
    return self.abs().eq(math.inf) if self.dtype.is_float else type(self).full(self.shape, False)
  def rsqrt(self) -> Tensor: return self.sqrt().recip()
  def cos(self) -> Tensor: return (self + math.pi / 2).sin() if self.dtype.is_float else self.float().cos()
  def sign(self) -> Tensor:
    s = (self > 0).where(1, (self < 0).where(-1, 0)).cast(self.dtype)
    return self.isnan().where(self, s) if self.dtype.is_float else s
  def floor(self) -> Tensor:
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (t > self).where(t - 1, t)
  def ceil(self) -> Tensor: return -((-self).floor())
  def trunc(self) -> Tensor:
    if not self.dtype.is_float: return self
    t = self.cast(dtypes.i64).cast(self.dtype)             # C's cast truncates; |x| >= 2^52 is already whole
    return (self.abs() < 2.0 ** 52).where(t, self)
  def round(self) -> Tensor:
    """Half to even, as NumPy and PyTorch round."""
    f = (self + 0.5).floor()
    tie = (f - self).eq(0.5) & (f % 2).ne(0)
    return tie.where(f - 1, f)
  def pow(self, x) -> Tensor:
    """self ** x. A whole-number scalar exponent is repeated multiplication (exact, and its gradient is right at 0);
    otherwise exp2(x log2|self|) with the sign of a negative base for whole exponents (nan for fractional ones)."""
    if not isinstance(x, type(self)) and float(x).is_integer() and abs(x) <= 16:
      n, base, out = abs(int(x)), self, None
      while n:                                             # square and multiply
        if n & 1: out = base if out is None else out * base
        n >>= 1
        if n: base = base * base
      if out is None: return type(self).full(self.shape, 1, self.dtype)
      return out if x > 0 else 1 / out
    if not isinstance(x, type(self)) and x == 0.5: return self.sqrt()
    b = self if self.dtype.is_float else self.float()
    e = b._operand(x)
    if not e.dtype.is_float: e = e.cast(b.dtype)
    mag = (e * b.abs().log2()).exp2()
    whole, odd = e.eq(e.floor()), (e % 2).abs().eq(1)
    sign = (b < 0).where(whole.where(odd.where(-1.0, 1.0), math.nan), 1.0)
    return e.eq(0).where(1.0, mag * sign)
  def clip(self, min_=None, max_=None) -> Tensor:
    """min_ <= x <= max_ (either may be None); the gradient passes at the bounds, as PyTorch's clamp; nan stays nan."""
    if min_ is None and max_ is None: raise UsageError("clip: give min_, max_ or both")
    out = self
    if min_ is not None: out = (out < min_).where(min_, out)
    if max_ is not None: out = (out > max_).where(max_, out)
    return out
  clamp = clip
  def double(self) -> Tensor: return self.cast(dtypes.f64)
  def int(self) -> Tensor: return self.cast(dtypes.i32)
  def long(self) -> Tensor: return self.cast(dtypes.i64)
  def bool(self) -> Tensor: return self.cast(dtypes.bool) if self.dtype is dtypes.bool else self.ne(0)

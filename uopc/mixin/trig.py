"""Trigonometric and hyperbolic functions and log10, from sin, exp2, log2 and sqrt: float64's precision where the
textbook formula cancels (a series for small arguments, log(2|x|) where x^2 overflows), and each with its derivative
as a rule of its own (autograd.custom_rule), so no gradient goes through the formula's inf or nan."""
from __future__ import annotations
import math
from uopc.mixin.elementwise import ElementwiseMixin, Self


class TrigMixin(ElementwiseMixin):
  def _fl(self) -> Self: return self if self.dtype.is_float else self.float()
  def tan(self) -> Self:
    x = self._fl()
    return (x.sin() / x.cos())._custom_grad((x,), lambda out, s, g: (g * (1 + out * out),))   # PyTorch's: 1 + tan^2
  def atan(self) -> Self:
    """Reduced to |x| <= tan(pi/8) (atan x = pi/2 - atan(1/x), pi/4 + atan((x-1)/(x+1))), halved twice with
    atan x = 2 atan(x / (1 + sqrt(1 + x^2))), then 10 terms of the series: float64's precision."""
    x = self._fl()
    a = x.abs()
    big, mid = a > 2.414213562373095, a > 0.4142135623730950
    base = big.where(x.const_like(math.pi / 2), mid.where(x.const_like(math.pi / 4), 0.0))   # in x's dtype
    r = big.where(-1 / big.where(a, 1.0), mid.where((a - 1) / (a + 1), a))
    for _ in range(2): r = r / (1 + (1 + r * r).sqrt())
    r2, s = r * r, (-1) ** 10 / 21
    for k in range(9, -1, -1): s = (-1) ** k / (2 * k + 1) + r2 * s   # sum_k (-1)^k r^2k / (2k+1)
    y = base + 4 * (r * s)
    out = (x < 0).where(-y, y)
    out = x.isnan().where(x, out)
    return out._custom_grad((x,), lambda out, s, g: (g / (1 + s[0] * s[0]),))
  def asin(self) -> Self:
    x = self._fl()
    out = (x / (1 - x * x).sqrt()).atan()
    out = (x.abs() > 1).where(math.nan, out)
    return out._custom_grad((x,), lambda out, s, g: (g / (1 - s[0] * s[0]).sqrt(),))
  def acos(self) -> Self:
    x = self._fl()
    out = x.const_like(math.pi / 2) - x.asin()
    return out._custom_grad((x,), lambda out, s, g: (-g / (1 - s[0] * s[0]).sqrt(),))
  def _odd_series(self, coef: list[float]) -> Self:
    """x (c0 + c1 x^2 + c2 x^4 + ...): a Taylor series for small |x|, where exp and log formulas cancel."""
    x2, s = self * self, coef[-1]
    for c in reversed(coef[:-1]): s = c + x2 * s
    return self * s
  def sinh(self) -> Self:
    x = self._fl()
    e = x.exp()
    small = x._odd_series([1 / math.factorial(2 * k + 1) for k in range(9)])
    out = (x.abs() < 0.5).where(small, (e - 1 / e) * 0.5)
    return out._custom_grad((x,), lambda out, s, g: (g * s[0].cosh(),))
  def cosh(self) -> Self:
    x = self._fl()
    e = x.abs().exp()
    out = (e + 1 / e) * 0.5
    return out._custom_grad((x,), lambda out, s, g: (g * s[0].sinh(),))
  def asinh(self) -> Self:
    x = self._fl()
    a = x.abs()
    small = a._odd_series([1, -1 / 6, 3 / 40, -5 / 112, 35 / 1152, -63 / 2816, 231 / 13312, -143 / 10240])
    huge = a.log() + math.log(2)                           # x^2 + 1 overflows: log(2|x|)
    y = (a < 0.25).where(small, (a > 1e8).where(huge, (a + (a * a + 1).sqrt()).log()))
    out = (x < 0).where(-y, y)
    return out._custom_grad((x,), lambda out, s, g: (g / (s[0] * s[0] + 1).sqrt(),))
  def acosh(self) -> Self:
    x = self._fl()
    out = (x > 1e8).where(x.log() + math.log(2), (x + ((x - 1) * (x + 1)).sqrt()).log())
    out = (x < 1).where(math.nan, out)
    return out._custom_grad((x,), lambda out, s, g: (g / ((s[0] - 1) * (s[0] + 1)).sqrt(),))
  def atanh(self) -> Self:
    x = self._fl()
    small = x._odd_series([1 / (2 * k + 1) for k in range(12)])
    out = (x.abs() < 0.25).where(small, ((1 + x) / (1 - x)).log() * 0.5)
    out = (x.abs() > 1).where(math.nan, out)
    return out._custom_grad((x,), lambda out, s, g: (g / (1 - s[0] * s[0]),))
  def log10(self) -> Self: return self.log2() * math.log10(2)

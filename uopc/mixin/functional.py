"""Tensor methods for training: activations, losses, layernorm and seeded random numbers.

Each is a few Tensor operations, so each gradient comes from autograd's table with no rule of its own. Where a
textbook formula would put an inf or a nan in a branch that a where() discards, it is rewritten so that no branch
can (the discarded branch's gradient is 0 * inf = nan otherwise): softplus and the logits form of binary cross
entropy use e^-|x| <= 1, elu clamps its input before the exponential.
"""
from __future__ import annotations
import math
import numpy as np
from uopc.dtype import dtypes
from uopc.mixin.elementwise import Self
from uopc.mixin.indexing import IndexingMixin
from uopc.mixin.shapes import shape_arg as _shape_arg
from uopc.errors import UsageError


def _np_rng(cls, seed):
  """A NumPy generator: a fresh one for an explicit seed, else the class's own (Tensor.manual_seed resets it)."""
  if seed is not None: return np.random.default_rng(seed)
  if cls._rng is None: cls._rng = np.random.default_rng(0)
  return cls._rng


def _gelu_grad(out, s, g):
  """d/dx x Phi(x) = Phi(x) + x phi(x): x phi(x) is 0 beyond |x| = 1e4 (where x^2 overflows, the formula's own
  derivative is inf * 0 = nan; PyTorch gives 0 and 1 at -1e30 and 1e30)."""
  x = s[0]
  q = (x * (1 / math.sqrt(2))).erfc_abs()
  phi = (x.abs() > 1e4).where(0.0, x * (x * x * -0.5).exp() * (1 / math.sqrt(2 * math.pi)))
  return (g * ((x < 0).where(0.5 * q, 1 - 0.5 * q) + phi),)


class NNMixin(IndexingMixin):
  _rng: np.random.Generator | None = None

  # ---- creation ----
  @classmethod
  def manual_seed(cls, seed: int = 0) -> None:
    """Reset the generator that rand, randint, randn(seed=None), multinomial and dropout draw from."""
    cls._rng = np.random.default_rng(seed)
  @classmethod
  def rand(cls, *shape, seed: int | None = None, dtype=dtypes.f32) -> Self:
    return cls(_np_rng(cls, seed).random(_shape_arg(shape, "rand")), dtype)
  @classmethod
  def randint(cls, *shape, low: int = 0, high: int = 10, seed: int | None = None, dtype=dtypes.i32) -> Self:
    """Integers low <= x < high (tinygrad's signature)."""
    if high <= low: raise UsageError(f"randint: need low < high, got {low} and {high}")
    return cls(_np_rng(cls, seed).integers(low, high, _shape_arg(shape, "randint")), dtype)
  # tinygrad's initialisers, drawn from the same generator (uopc.nn.init: PyTorch's in-place ones)
  @classmethod
  def uniform(cls, *shape, low: float = 0.0, high: float = 1.0, seed: int | None = None, dtype=dtypes.f32,
              requires_grad: bool = False) -> Self:
    return cls(_np_rng(cls, seed).uniform(low, high, _shape_arg(shape, "uniform")), dtype, requires_grad=requires_grad)
  @classmethod
  def normal(cls, *shape, mean: float = 0.0, std: float = 1.0, seed: int | None = None, dtype=dtypes.f32,
             requires_grad: bool = False) -> Self:
    return cls(_np_rng(cls, seed).normal(mean, std, _shape_arg(shape, "normal")), dtype, requires_grad=requires_grad)
  @classmethod
  def kaiming_uniform(cls, *shape, a: float = 0.01, **kwargs) -> Self:
    """Uniform in +-sqrt(3) gain / sqrt(fan_in), gain = sqrt(2 / (1 + a^2)), fan_in = prod(shape[1:])."""
    sh = _shape_arg(shape, "kaiming_uniform")
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(math.prod(sh[1:]))
    return cls.uniform(*sh, low=-bound, high=bound, **kwargs)
  @classmethod
  def glorot_uniform(cls, *shape, **kwargs) -> Self:
    """Uniform in +-sqrt(6 / (shape[0] + prod(shape[1:]))) (tinygrad's; Xavier's for a matrix)."""
    sh = _shape_arg(shape, "glorot_uniform")
    bound = math.sqrt(6 / (sh[0] + math.prod(sh[1:])))
    return cls.uniform(*sh, low=-bound, high=bound, **kwargs)
  def full_like(self, value, dtype=None) -> Self: return type(self).full(self.shape, value, dtype or self.dtype)
  def zeros_like(self, dtype=None) -> Self: return self.full_like(0, dtype)
  def ones_like(self, dtype=None) -> Self: return self.full_like(1, dtype)

  def multinomial(self, num_samples: int = 1, replacement: bool = False, seed: int | None = None) -> Self:
    """Class indices drawn with probability proportional to self's last axis ((C,) or (B, C)), by inverting the
    cumulative sum at uniform draws from the seeded generator. int32, shape (num_samples,) or (B, num_samples)."""
    if self.ndim not in (1, 2): raise UsageError(f"multinomial: needs (C,) or (B, C) weights, got shape {self.shape}")
    if num_samples < 1: raise UsageError(f"multinomial: num_samples must be positive, got {num_samples}")
    if not replacement and num_samples > 1:
      raise NotImplementedError("multinomial: without replacement only num_samples=1 is supported")
    w = self.reshape(1, -1) if self.ndim == 1 else self
    cdf = w.cast(dtypes.f32).cumsum(-1)
    cdf = cdf / cdf[:, -1:]
    u = type(self).rand(w.shape[0], num_samples, 1, seed=seed)
    idx = (cdf.unsqueeze(1) <= u).sum(-1).cast(dtypes.int)                          # (B, num_samples)
    idx = idx.minimum(w.shape[1] - 1)                                               # u rounding up to cdf[-1]
    return idx.reshape(num_samples) if self.ndim == 1 else idx

  # ---- activations ----
  def leaky_relu(self, neg_slope: float = 0.01) -> Self: return (self > 0).where(self, self * neg_slope)
  def elu(self, alpha: float = 1.0) -> Self:
    neg = (self > 0).where(0.0, self)                                               # never overflows exp
    return (self > 0).where(self, (neg.exp() - 1) * alpha)
  def celu(self, alpha: float = 1.0) -> Self: return (self / alpha).elu() * alpha
  def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> Self:
    """Clamped to [min_val, max_val] with gradient 0 at and outside the bounds, as PyTorch's; nan stays nan."""
    low, high = (self < min_val) | self.eq(min_val), (self > max_val) | self.eq(max_val)
    return low.where(min_val, high.where(max_val, self))
  def relu6(self) -> Self: return self.hardtanh(0.0, 6.0)
  def hardsigmoid(self) -> Self: return (self + 3).relu6() / 6
  def hardswish(self) -> Self: return self * (self + 3).relu6() * (1 / 6)
  def silu(self) -> Self: return self * self.sigmoid()
  swish = silu
  def quick_gelu(self) -> Self: return self * (self * 1.702).sigmoid()
  def gelu(self, approximate: str = "tanh") -> Self:
    """approximate="tanh" (the default, GPT-2's and tinygrad's): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)));
    "none" (PyTorch's default): x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), written with erfc(|x| / sqrt 2) so the
    negative tail is not 1 - 1."""
    if approximate == "tanh":
      return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self * self * self)).tanh())
    if approximate == "none":
      q = (self * (1 / math.sqrt(2))).erfc_abs()           # erfc(|x| / sqrt 2)
      return ((self < 0).where(0.5 * q, 1 - 0.5 * q) * self)._custom_grad((self,), _gelu_grad)
    raise UsageError(f"gelu: approximate must be 'none' or 'tanh' (PyTorch's), got {approximate!r}")
  def softplus(self, beta: float = 1.0) -> Self:
    """log(1 + e^(beta x)) / beta as relu(bx) + log(1 + e^-|bx|): nothing overflows."""
    bx = self * beta
    return (bx.relu() + (1 + (bx > 0).where(-bx, bx).exp()).log()) * (1 / beta)
  def mish(self) -> Self: return self * self.softplus().tanh()
  def logsigmoid(self) -> Self: return -((-self).softplus())
  def layernorm(self, axis=-1, eps: float = 1e-5) -> Self:
    """(x - mean) / sqrt(var + eps) over axis, an int or a tuple (biased variance, eps inside the root: PyTorch's
    F.layer_norm over its normalized_shape's axes), without weight and bias."""
    x = self - self.mean(axis, keepdim=True)
    return x * (x.square().mean(axis, keepdim=True) + eps).rsqrt()
  def dropout(self, p: float = 0.5, seed: int | None = None) -> Self:
    if not 0 <= p < 1: raise UsageError(f"dropout: p must be in [0, 1), got {p}")
    if p == 0: return self
    keep = type(self).rand(*self.shape, seed=seed) >= p
    return keep.where(self * (1 / (1 - p)), 0.0)

  # ---- losses ----
  def _reduction(self, reduction: str) -> Self:
    if reduction == "mean": return self.mean()
    if reduction == "sum": return self.sum()
    if reduction == "none": return self
    raise UsageError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
  def _classes_last(self) -> Self:
    """PyTorch's (N, C, d1, ...) logits with the class axis moved last, (N, d1, ..., C); (C,) and (N, C) as they are."""
    return self.permute(0, *range(2, self.ndim), 1) if self.ndim > 2 else self
  def _class_targets(self, Y, what: str, ignore_index: int | None = None, logits: tuple | None = None) -> Self:
    """Y (integer class indices of self's shape without the class axis, which is last here) checked and as a Tensor.
    An index outside 0..C-1 (other than ignore_index) is an IndexError, as in PyTorch: one_hot would give it a row of
    zeros and a plausible loss. (Under a TinyJit replay the check does not run again.) logits: the shape the caller
    was given, for the message."""
    T = type(self)
    Y = Y if isinstance(Y, T) else T(np.asarray(Y))
    if not Y.dtype.is_int: raise TypeError(f"{what}: class targets must be integers, got {Y.dtype}")
    if Y.shape != self.shape[:-1]:
      shown = self.shape if logits is None else logits
      raise UsageError(f"{what}: targets {Y.shape} for logits {shown} (need {self.shape[:-1]}: the logits' shape "
                       f"without the class axis, which is axis {min(len(shown) - 1, 1)} as in PyTorch)")
    ids = Y._data()
    bad = (ids < 0) | (ids >= self.shape[-1])
    if ignore_index is not None: bad &= ids != ignore_index
    if bad.any(): raise IndexError(f"{what}: target {int(ids[bad][0])} is out of bounds for {self.shape[-1]} classes")
    return Y
  def cross_entropy(self, Y, reduction: str = "mean", label_smoothing: float = 0.0, weight=None,
                    ignore_index: int | None = None) -> Self:
    """PyTorch's F.cross_entropy. self: logits (N, C, d1, ...), (N, C) or (C,): the class axis is 1 (0 for one
    sample). Y: integer class indices (N, d1, ...), or class probabilities of self's shape. label_smoothing e mixes
    the uniform distribution into the target, either kind: (1 - e) target + e / C. weight (C,): each class's
    weight; ignore_index: targets equal to it do not count (_weighted_cross_entropy). PyTorch's default ignore_index
    is -100; here a target -100 without ignore_index=-100 is an IndexError, and the unweighted graph has no mask."""
    T = type(self)
    if not 0 <= label_smoothing <= 1: raise UsageError(f"cross_entropy: label_smoothing {label_smoothing} not in 0..1")
    x = self._classes_last()
    Yt = Y if isinstance(Y, T) else T(np.asarray(Y))
    C = x.shape[-1]
    if weight is not None:
      weight = weight if isinstance(weight, T) else T(np.asarray(weight, np.float64)).cast(self.dtype)
      if weight.shape != (C,): raise UsageError(f"cross_entropy: weight must have shape ({C},), got {weight.shape}")
    if Yt.dtype.is_float:
      if Yt.shape != self.shape: raise UsageError(f"cross_entropy: probabilities {Yt.shape} for logits {self.shape}")
      if ignore_index is not None:
        raise UsageError("cross_entropy: ignore_index applies to class indices, not to probabilities")
      probs = Yt._classes_last()
    elif weight is not None or ignore_index is not None:
      return x._weighted_cross_entropy(x._class_targets(Yt, "cross_entropy", ignore_index, self.shape), weight,
                                       ignore_index, reduction, label_smoothing)
    else: probs = x._class_targets(Yt, "cross_entropy", logits=self.shape).one_hot(C).cast(self.dtype)
    probs = probs * (1 - label_smoothing) + label_smoothing / C
    if weight is not None: probs = probs * weight
    return (-(x.log_softmax(-1) * probs).sum(-1))._reduction(reduction)
  def _weighted_cross_entropy(self, Y, weight, ignore_index, reduction: str, label_smoothing: float) -> Self:
    """PyTorch's rule with class weights w and ignored targets, self classes last: loss_i = (1 - e) w[y_i] (-logp[y_i])
    + e / C sum_c w_c (-logp_c), 0 where y_i is ignored; "mean" divides the sum by sum_i w[y_i] over the counted
    targets (the count, unweighted), as PyTorch's nll_loss does."""
    C = self.shape[-1]
    logp = self.log_softmax(-1)
    hot = Y.one_hot(C).cast(self.dtype)   # an ignored target (outside 0..C-1) is a row of zeros
    if ignore_index is not None and 0 <= ignore_index < C: hot = hot * Y.ne(ignore_index).unsqueeze(-1)
    w_hot = hot if weight is None else hot * weight
    loss = -(logp * w_hot).sum(-1) * (1 - label_smoothing)
    if label_smoothing:
      counted = hot.sum(-1)   # 1 for a counted target, 0 for an ignored one
      loss = loss - (logp if weight is None else logp * weight).sum(-1) * counted * (label_smoothing / C)
    if reduction == "mean": return loss.sum() / w_hot.sum()
    return loss._reduction(reduction)
  def nll_loss(self, Y, weight=None, ignore_index: int | None = None, reduction: str = "mean") -> Self:
    """PyTorch's F.nll_loss. self: log-probabilities (N, C, d1, ...), (N, C) or (C,); Y: class indices (N, d1, ...).
    Mean over the counted (weighted) targets, as PyTorch."""
    x = self._classes_last()
    Y = x._class_targets(Y, "nll_loss", ignore_index, logits=self.shape)
    hot = Y.one_hot(x.shape[-1]).cast(self.dtype)
    w = hot if weight is None else hot * weight
    if ignore_index is not None: w = w * (Y.ne(ignore_index)).unsqueeze(-1)
    loss = -(x * w).sum(-1)
    if reduction == "mean": return loss.sum() / w.sum()
    return loss._reduction(reduction)
  def sparse_categorical_crossentropy(self, Y, ignore_index: int = -1, label_smoothing: float = 0.0,
                                      reduction: str = "mean") -> Self:
    """tinygrad's: cross entropy of logits with class indices; targets equal to ignore_index do not count."""
    Y = self._class_targets(Y, "sparse_categorical_crossentropy", ignore_index)
    counted = Y.ne(ignore_index)
    hot = (Y * counted).one_hot(self.shape[-1]).cast(self.dtype) * counted.unsqueeze(-1)
    logp = self.log_softmax(-1)
    loss = -(logp * hot).sum(-1) * (1 - label_smoothing) - logp.mean(-1) * label_smoothing * counted
    if reduction == "mean": return loss.sum() / counted.sum()
    return loss._reduction(reduction)
  def binary_crossentropy(self, Y, reduction: str = "mean") -> Self:
    """self: probabilities; log clamped at -100, as PyTorch's BCELoss."""
    Y = Y if isinstance(Y, type(self)) else type(self)(np.asarray(Y, np.float32))
    lp, lq = self.log().maximum(-100.0), (1 - self).log().maximum(-100.0)
    return (-(Y * lp + (1 - Y) * lq))._reduction(reduction)
  def binary_crossentropy_logits(self, Y, reduction: str = "mean") -> Self:
    """relu(x) - x y + log(1 + e^-|x|): stable for any logit."""
    Y = Y if isinstance(Y, type(self)) else type(self)(np.asarray(Y, np.float32))
    return (self.relu() - self * Y + (1 + (self > 0).where(-self, self).exp()).log())._reduction(reduction)

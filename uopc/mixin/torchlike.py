"""Tensor methods under PyTorch's names that a first project reaches for: size(), dim(), tolist(), len(), diagonal
with offset and axes, empty, masked_select and nonzero, unfold, isfinite, lerp, fmod and remainder, bitwise_not,
selu, softsign, logaddexp, copysign, std_mean, max_unpool2d, and scaled_dot_product_attention's enable_gqa.

Each is a few existing Tensor ops. masked_select and nonzero have shapes that depend on the data: they realize
their input (mask) first, as PyTorch's do on a GPU (a sync), and build the result from the indices found.
"""
from __future__ import annotations
import math
import numpy as np
from uopc.dtype import dtypes
from uopc.mixin.compose import ComposeMixin
from uopc.mixin.elementwise import Self
from uopc.mixin.movement import _norm_axis
from uopc.mixin.shapes import accept_dim, broadcast_shape, shape_arg
from uopc.errors import UsageError

SELU_ALPHA, SELU_SCALE = 1.6732632423543772, 1.0507009873554805   # PyTorch's constants (Klambauer et al.)


def repeat_heads(key, value, heads: int):
  """Grouped-query attention (sdpa's enable_gqa): key and value (..., h, N, D) with heads a multiple of h, each
  head repeated heads / h times, so query head j reads key head j // (heads / h), as PyTorch's."""
  hk = key.shape[-3]
  if heads % hk or value.shape[-3] != hk:
    raise UsageError(f"scaled_dot_product_attention: with enable_gqa the query's {heads} heads must be a multiple "
                     f"of the key's and value's ({hk}, {value.shape[-3]})")
  if heads == hk: return key, value
  def repeat(t): return t.unsqueeze(-3).expand(*t.shape[:-2], heads // hk, *t.shape[-2:]).reshape(
    *t.shape[:-3], heads, *t.shape[-2:])
  return repeat(key), repeat(value)


class TorchMixin(ComposeMixin):
  # ---- shape, as PyTorch asks it ----
  def size(self, dim: int | None = None):
    return self.shape if dim is None else self.shape[_norm_axis(dim, self.ndim)]
  def dim(self) -> int: return self.ndim
  def view_as(self, other) -> Self: return self.reshape(other.shape)   # pred.eq(target.view_as(pred))
  def tolist(self): return self.numpy().tolist()
  def __len__(self) -> int:
    if self.ndim == 0: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]
  @classmethod
  def empty(cls, *shape, dtype=dtypes.f32) -> Self:
    """PyTorch's empty: the values are unspecified there; here they are zeros."""
    return cls.full(shape_arg(shape, "empty"), 0, dtype)

  def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Self:
    """PyTorch's diagonal: the entries [.., i, .., i + offset, ..] of axes dim1 and dim2, as a new last axis."""
    if self.ndim < 2: raise UsageError(f"diagonal: needs 2 or more dimensions, got shape {self.shape}")
    a, b = _norm_axis(dim1, self.ndim), _norm_axis(dim2, self.ndim)
    if a == b: raise UsageError(f"diagonal: dim1 and dim2 must differ, got {dim1} and {dim2}")
    x = self.permute([k for k in range(self.ndim) if k not in (a, b)] + [a, b])            # (..., r, c)
    r, c = x.shape[-2:]
    n = max(0, min(r, c - offset) if offset >= 0 else min(r + offset, c))
    T = type(self)
    hot = (T.arange(r).unsqueeze(-1) + offset).eq(T.arange(c))                              # (r, c)
    d = hot.where(x, False if x.dtype is dtypes.bool else 0).sum(-1, dtype=x.dtype)         # (..., r)
    return d.shrink([None] * (d.ndim - 1) + [(max(-offset, 0), max(-offset, 0) + n)])

  # ---- shapes that depend on the data ----
  def nonzero(self, as_tuple: bool = False):
    """The indices of the nonzero elements, (count, ndim) int64 (as_tuple: one 1-D tensor per axis)."""
    found = np.nonzero(self.numpy())
    T = type(self)
    if as_tuple: return tuple(T(i.astype(np.int64)) for i in found)
    return T(np.stack(found, -1).astype(np.int64).reshape(-1, self.ndim))
  def masked_select(self, mask) -> Self:
    """The elements where mask (broadcast with self) is True, as a 1-D tensor; differentiable in self."""
    T = type(self)
    m = mask if isinstance(mask, T) else T(np.asarray(mask))
    if m.dtype is not dtypes.bool: raise TypeError(f"masked_select: mask must be bool, got {m.dtype}")
    shape = broadcast_shape(self.shape, m.shape)
    where = np.flatnonzero(np.broadcast_to(m.numpy(), shape))
    return self.expand(shape).reshape(-1)._take(0, T(where.astype(np.int32)))

  def unfold(self, dimension: int, size: int, step: int) -> Self:
    """PyTorch's Tensor.unfold: the windows of `size` elements, `step` apart, along dimension (which becomes the
    window count), the window a new last axis."""
    d = _norm_axis(dimension, self.ndim)
    if size > self.shape[d] or size < 1 or step < 1:
      raise UsageError(f"unfold: size {size} (at most {self.shape[d]}) and step {step} must be positive")
    rest = [k for k in range(self.ndim) if k != d]
    w = self.permute(rest + [d])._pool((size,), step)                                       # (*rest, o, size)
    order = list(range(self.ndim - 1))
    order.insert(d, self.ndim - 1)
    return w.permute(order + [self.ndim])

  # ---- elementwise ----
  def isfinite(self) -> Self:
    return (self - self).eq(0) if self.dtype.is_float else type(self).full(self.shape, True)   # inf - inf is nan
  def lerp(self, end, weight) -> Self:
    """self + weight (end - self), as PyTorch computes it: from the nearer end, so weight 1 gives end exactly."""
    end, w = self._operand(end), self._operand(weight)
    diff = end - self
    return (w.abs() < 0.5).where(self + w * diff, end - diff * (1 - w))
  def remainder(self, other) -> Self: return self % other       # the sign of the divisor (Python's %)
  def fmod(self, other) -> Self:
    """C's fmod: the sign of the dividend. From Python's remainder r: r - other where r and self differ in sign."""
    other = self._operand(other)
    r = self % other
    return (r.ne(0) & ((r < 0).ne(self < 0))).where(r - other, r)
  def bitwise_not(self) -> Self: return ~self
  def selu(self) -> Self: return self.elu(SELU_ALPHA) * SELU_SCALE
  def softsign(self) -> Self: return self / (1 + self.abs())
  def logaddexp(self, other) -> Self:
    """log(e^a + e^b) = m + log(e^(a - m) + e^(b - m)), m the larger (0 where it is infinite)."""
    other = self._operand(other)
    m = self.maximum(other).detach()
    m = m.isinf().where(0.0, m)
    return m + ((self - m).exp() + (other - m).exp()).log()
  def copysign(self, other) -> Self:
    """|self| with the sign bit of other (-0.0 counts as negative, as C's copysign); integers give floats."""
    x = self if self.dtype.is_float else self.float()
    o = self._operand(other) if not isinstance(other, type(self)) else other
    o = o if o.dtype.is_float else o.cast(x.dtype)
    negative = (o < 0) | (o.eq(0) & ((1 / o) < 0))
    return negative.where(-x.abs(), x.abs())

  # ---- reductions ----
  def std_mean(self, axis=None, keepdim: bool = False, correction: int = 1) -> tuple[Self, Self]:
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

  # ---- pooling's inverse ----
  def max_unpool2d(self, indices, kernel_size, stride=None, padding=0, output_size=None) -> Self:
    """PyTorch's max_unpool2d: each value written at its index (from max_pool2d(return_indices=True)) in a plane of
    zeros of output_size (default (i - 1) stride - 2 padding + kernel per axis)."""
    from uopc.mixin.windows import _kernel, _tuple
    k_ = _kernel(kernel_size, 2)
    s_ = k_ if stride is None else _tuple(stride, 2, "stride", 1)
    p_ = _tuple(padding, 2, "padding", 0)
    if output_size is None: out = tuple((i - 1) * s - 2 * p + k for i, s, p, k in zip(self.shape[-2:], s_, p_, k_))
    else: out = tuple(output_size)[-2:]
    T = type(self)
    idx = indices if isinstance(indices, T) else T(np.asarray(indices))
    if idx.shape != self.shape: raise UsageError(f"max_unpool2d: indices {idx.shape} must match the input {self.shape}")
    lead = self.shape[:-2]
    flat = T.full((*lead, math.prod(out)), 0, self.dtype)
    return flat.scatter(-1, idx.reshape(*lead, -1), self.reshape(*lead, -1)).reshape(*lead, *out)

  def scaled_dot_product_attention(self, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
                                   scale: float | None = None, enable_gqa: bool = False) -> Self:
    """enable_gqa: key and value have fewer heads (axis -3) than the query, each shared by a group of query heads
    (grouped-query attention, PyTorch's flag): they are repeated to the query's count first."""
    if enable_gqa: key, value = repeat_heads(key, value, self.shape[-3])
    return super().scaled_dot_product_attention(key, value, attn_mask, dropout_p, is_causal, scale)


accept_dim(TorchMixin, ("std_mean",))

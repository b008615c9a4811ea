"""Tensor reductions (sum, max, min, mean, prod, var, argmax, cumsum...), softmax and matmul: each a REDUCE of the
last axes after a PERMUTE that puts the reduced axes there, or a few of them with elementwise and movement ops."""
from __future__ import annotations
import math
import numpy as np
from uopc.dtype import dtypes, sum_dtype
from uopc.helpers import cache, prod
from uopc.mixin.elementwise import Self
from uopc.mixin.movement import MovementMixin
from uopc.mixin.shapes import ONLY_INT, accept_dim, axis_index as _axis, broadcast_shape
from uopc.uop import Ops
from uopc.errors import UsageError


# A float sum over more terms than this adds in blocks (ReduceMixin._add_in_blocks). Shorter sums keep the one REDUCE
# they always had, so every kernel the chapters print (rows of at most 16,384 terms) stays as it is.
LONG_SUM = 1 << 16
_axes_memo: dict[tuple, tuple[int, ...]] = cache("reduce.axes", {})   # (axis, ndim) -> ReduceMixin._axes's answer


class ReduceMixin(MovementMixin):
  # ---- the composing class provides ----
  def _rop(self, op: Ops, n: int) -> Self:
    """The REDUCE node: op over the last n axes of self."""
    raise NotImplementedError
  def detach(self) -> Self: raise NotImplementedError
  def contiguous(self) -> Self: raise NotImplementedError
  def _holds_data(self) -> bool: raise NotImplementedError

  # ---- reductions ----
  def _axes(self, axis) -> tuple[int, ...]:
    """The reduced axes, sorted and non-negative (None: all of them)."""
    # memoized by (axis, ndim): a sum asks twice (_add, _reduce), autograd's broadcast rule at every EXPAND. Only for
    # None, an int or a tuple of ints: a bool axis raises, but hashes as its integer would
    key = (axis, self.ndim) if axis is None or type(axis) is int or (
      type(axis) is tuple and ONLY_INT >= {*map(type, axis)}) else None
    if key is not None and (axes := _axes_memo.get(key)) is not None: return axes
    given = tuple(range(self.ndim)) if axis is None else axis if isinstance(axis, (tuple, list)) else (axis,)
    axes = tuple(sorted({_axis(a, self.ndim) for a in given}))
    if key is not None:
      if len(_axes_memo) >= 4096: _axes_memo.clear()   # a bound, as Tensor.full's memo
      _axes_memo[key] = axes
    return axes
  def _reduce(self, op: Ops, axis, keepdim: bool) -> Self:
    axes = self._axes(axis)
    if not axes or self.ndim == 0: return self
    out_shape = tuple(1 if k in axes else s for k, s in enumerate(self.shape))
    if any(self.shape[k] == 0 for k in axes):   # a reduction over nothing is its identity
      empty_ok = op is not Ops.MAX or self.dtype is dtypes.bool     # any() of nothing is False, as NumPy's
      if not empty_ok and prod(s for k, s in enumerate(self.shape) if k not in axes):   # an empty result needs none
        raise UsageError(f"max/min of an empty axis (shape {self.shape}, axes {axes}) has no value")
      # each empty axis padded to one identity element: the result reads self, so a gradient (zeros) reaches what
      # self was computed from (PyTorch: conv on a batch of 0 gives w.grad zeros, not None)
      x = self.pad([(0, 1) if k in axes and self.shape[k] == 0 else None for k in range(self.ndim)],
                   value={Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: False}[op])
      return x._reduce(op, axes, keepdim)
    keep = [k for k in range(self.ndim) if k not in axes]
    x = self.permute(keep + list(axes))                      # reduced axes last: REDUCE reduces the last n
    out = x._rop(op, len(axes))
    return out.reshape(out_shape) if keepdim else out
  def sum(self, axis=None, keepdim: bool = False, dtype=None) -> Self:
    """Integers and bools sum in int64 (NumPy's and PyTorch's result dtype), so a count never wraps; float16 adds in
    float32 and rounds once at the end (tinygrad's and PyTorch's accumulation). dtype: the result's (and the sum's).
    A float sum of more than LONG_SUM terms adds in blocks (_add_in_blocks)."""
    if dtype is not None: return self.cast(dtype)._add(axis, keepdim)
    if self.dtype is dtypes.f16: return self.cast(dtypes.f32)._add(axis, keepdim).cast(dtypes.f16)
    return self.cast(sum_dtype(self.dtype))._add(axis, keepdim)
  def _add(self, axis, keepdim: bool) -> Self:
    axes = self._axes(axis) if self.ndim else ()
    terms = prod(self.shape[k] for k in axes)
    if not self.dtype.is_float or terms <= LONG_SUM: return self._reduce(Ops.ADD, axis, keepdim)
    return self._add_in_blocks(axes, terms, keepdim)
  def _add_in_blocks(self, axes: tuple[int, ...], terms: int, keepdim: bool) -> Self:
    """The sum of `terms` float terms as sums of blocks of about sqrt(terms), then the sum of those (itself in blocks
    if it is still long): each its own REDUCE, so each its own accumulator. One running sum of a million float32
    terms loses the small ones (each is rounded against a sum a million times larger; softmax of 1,000,003
    elements was 1e-3 off in places); two levels of a thousand keep every partial sum near its terms. PyTorch's and
    NumPy's sums are blocked and pairwise for the same reason."""
    keep = [k for k in range(self.ndim) if k not in axes]
    kept = tuple(self.shape[k] for k in keep)
    block = 1 << ((terms - 1).bit_length() + 1) // 2          # the power of two >= sqrt(terms)
    # the terms are a buffer of their own: with Tensor.fuse_reduce, a reduction they read (softmax's max) would be
    # fused into the partial sums' kernel and computed again for every block (n^1.5 work)
    x = self.permute(keep + list(axes)).reshape(*kept, terms)
    if not x._holds_data(): x = x.contiguous()
    if terms % block: x = x.pad([None] * len(kept) + [(0, block - terms % block)])   # zeros add nothing
    out = x.reshape(*kept, -1, block)._reduce(Ops.ADD, -1, False)._add(-1, False)
    return out.reshape(tuple(1 if k in axes else s for k, s in enumerate(self.shape))) if keepdim else out
  def max(self, axis=None, keepdim: bool = False) -> Self:
    """The maximum over axis: the values only, as tinygrad's max and PyTorch's amax (PyTorch's max(dim) returns
    (values, indices)). So that PyTorch's `_, pred = out.max(1)` cannot silently unpack the rows of the values, the
    tensor max(dim) returns refuses to be unpacked or indexed by an int (TypeError); write `pred = out.argmax(1)`.
    Its gradient is amax's: tied maxima share it equally."""
    out = self._reduce(Ops.MAX, axis, keepdim)
    return out if axis is None else out._values_only("max")
  def min(self, axis=None, keepdim: bool = False) -> Self:
    """The minimum over axis: the values only, as max (argmin gives the indices)."""
    if self.dtype.is_float: out = -((-self).max(axis, keepdim))
    else: out = ~((~self).max(axis, keepdim))    # bools and integers: ~ reverses the order and never overflows
    return out if axis is None else out._values_only("min")
  def _values_only(self, name: str) -> Self:
    self._values_of = name   # read by IndexingMixin.__iter__ and __getitem__
    return self
  def any(self, axis=None, keepdim: bool = False) -> Self: return self.bool().max(axis, keepdim)
  def all(self, axis=None, keepdim: bool = False) -> Self: return self.bool().min(axis, keepdim)
  def mean(self, axis=None, keepdim: bool = False) -> Self:
    x = self if self.dtype.is_float else self.cast(dtypes.default_float)
    out = x.sum(axis, keepdim)
    return out * (out.numel() / x.numel()) if x.numel() else out * math.nan

  def softmax(self, axis: int = -1) -> Self:
    if not self.numel(): return self   # nothing to normalize (and an empty axis has no max)
    m = self - self.max(axis, keepdim=True)
    e = m.exp()
    return e / e.sum(axis, keepdim=True)

  def log_softmax(self, axis: int = -1) -> Self:
    """x - max - log(sum(exp(x - max))). The MAX with -inf changes no value; it keeps x - max apart from the log in
    the output's C (kernels are built with -fassociative-math): x - (max + log) is 1e30 - 1e30 = 0 where the answer is
    -0.69. The sum's exp(x - max) is the plain form, the one online softmax (chapter 11b) recognizes.
    Its gradient is PyTorch's g - softmax * sum(g), not the formula's: the MAX with -inf ties at a -inf entry and
    would split the derivative there, and the max's own derivative would land on tied maxima."""
    if not self.numel(): return self
    m = self - self.max(axis, keepdim=True)
    out = m._binary(Ops.MAX, -math.inf) - m.exp().sum(axis, keepdim=True).log()
    return out._custom_grad((self,), lambda out, s, g: (g - out.exp() * g.sum(axis, keepdim=True),))

  # ---- more reductions ----
  def prod(self, axis=None, keepdim: bool = False) -> Self:
    x = self if self.dtype.is_float else self.cast(dtypes.i64)
    return x._reduce(Ops.MUL, axis, keepdim)
  def var(self, axis=None, keepdim: bool = False, correction: int = 1) -> Self:
    """sum((x - mean)^2) / (n - correction): PyTorch's default (correction=1) is the unbiased estimate."""
    x = self if self.dtype.is_float else self.float()
    sq = (x - x.mean(axis, keepdim=True)).square().sum(axis, keepdim)
    n = x.numel() // max(sq.numel(), 1) if x.numel() else 0
    return sq / max(n - correction, 0)
  def std(self, axis=None, keepdim: bool = False, correction: int = 1) -> Self:
    return self.var(axis, keepdim, correction).sqrt()
  def logsumexp(self, axis=None, keepdim: bool = False) -> Self:
    """log(sum(exp(x))), computed as m + log(sum(exp(x - m))) with m the max (0 where the max is infinite)."""
    m = self.max(axis, keepdim=True).detach()
    m = m.isinf().where(0.0, m)
    out = (self - m).exp().sum(axis, keepdim=True).log() + m
    return out if keepdim else out.squeeze(axis if axis is not None else tuple(range(self.ndim)))
  def _arg(self, axis, keepdim: bool, smallest: bool) -> Self:
    """The first index of the max (min): max over (x == max) ? n - i : 0 is n - (first i).

    x is materialized first (contiguous()) unless it already holds data: the max and the comparison then read the same
    bits. Recomputed in each kernel, a fused x can round differently in the two (-fassociative-math, a reduce fused
    into a consumer), nothing equals the max, and the index was n, out of range (issue 30, item 2)."""
    T = type(self)
    if axis is None: return self.reshape(-1)._arg(0, False, smallest).reshape((1,) * self.ndim if keepdim else ())
    axis = _axis(axis, self.ndim)
    if self.ndim == 0: return T.full((), 0, dtypes.int)
    n = self.shape[axis]
    if n == 0: raise UsageError(f"argmax/argmin of an empty axis (shape {self.shape}) has no value")
    x = self if self._holds_data() else self.contiguous()
    best = (x.min if smallest else x.max)(axis, keepdim=True)
    hit = x.eq(best) | (x.isnan() & best.isnan())                                  # a nan is the max, as in NumPy
    count_down = T.arange(n, 0, -1).reshape((n,) + (1,) * (self.ndim - axis - 1))
    first = hit.where(count_down, 0).max(axis, keepdim).maximum(1)   # >= 1: an index < n even if nothing matched
    return (n - first).cast(dtypes.int)
  def argmax(self, axis=None, keepdim: bool = False) -> Self: return self._arg(axis, keepdim, False)
  def argmin(self, axis=None, keepdim: bool = False) -> Self: return self._arg(axis, keepdim, True)
  def cumsum(self, axis: int = 0) -> Self:
    """out[i] = sum_{j <= i} x[j]: a lower-triangular mask times x, summed (n^2 work along the axis)."""
    axis = _axis(axis, self.ndim)   # an IndexError for an axis the tensor lacks (a 0-d one has 0 and -1), as PyTorch
    if self.ndim == 0: return self.sum()
    n = self.shape[axis]
    x = self.transpose(axis, -1)
    mask = type(self).full((n, n), True, dtypes.bool).tril()                      # (i, j): j <= i
    return mask.where(x.unsqueeze(-2), 0).sum(-1).transpose(axis, -1)   # integers widen to int64, as in NumPy

  # ---- matmul ----
  def matmul(self, w: Self) -> Self:
    """(..., n, k) @ (..., k, m): broadcast to (..., n, m, k) and sum the last axis."""
    if self.ndim == 0 or w.ndim == 0:
      raise UsageError(f"matmul: scalars are not matrices (shapes {self.shape} and {w.shape})")
    x = self.reshape(1, self.shape[0]) if self.ndim == 1 else self
    y = w.reshape(w.shape[0], 1) if w.ndim == 1 else w
    if x.shape[-1] != y.shape[-2]:
      raise UsageError(f"matmul: shapes {self.shape} and {w.shape} do not match ({x.shape[-1]} != {y.shape[-2]})")
    batch = broadcast_shape(x.shape[:-2], y.shape[:-2])
    n, k, m = x.shape[-2], x.shape[-1], y.shape[-1]
    # the nodes x.reshape(..., n, 1, k).expand(*batch, n, m, k) and y.transpose(-1, -2).reshape(..., 1, m, k).expand(
    # ...) build, built directly: the shapes are checked above, and every matmul would pay for the checks again
    ysh = y.shape[:-2]
    half = x.dtype is dtypes.f16 and y.dtype is dtypes.f16   # products and sums in float (tensor cores under TC=1)
    if half: x, y = x.cast(dtypes.f32), y.cast(dtypes.f32)
    xs = x._mv(Ops.RESHAPE, (*x.shape[:-1], 1, k))._broadcast((*batch, n, m, k))
    yt = y._mv(Ops.PERMUTE, (*range(len(ysh)), len(ysh) + 1, len(ysh)))
    ys = yt._mv(Ops.RESHAPE, (*ysh, 1, m, k))._broadcast((*batch, n, m, k))
    out = (xs * ys).sum(-1)
    if half: out = out.cast(dtypes.f16)
    if self.ndim == 1: out = out.reshape(*out.shape[:-2], out.shape[-1])
    if w.ndim == 1: out = out.reshape(out.shape[:-1])
    return out
  __matmul__ = dot = matmul
  def __rmatmul__(self, x): return type(self)(np.asarray(x)).matmul(self)


accept_dim(ReduceMixin, ("sum", "max", "min", "any", "all", "mean", "softmax", "log_softmax", "prod", "var", "std",
                         "logsumexp", "argmax", "argmin", "cumsum"))

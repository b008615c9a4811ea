"""Tensor methods composed of the others, as tinygrad builds them: einsum (reshape, permute, expand, multiply, sum),
sort / argsort / topk (each element's rank by comparing it with every other along the axis, then a one-hot select by
rank), the cumulative ops (a triangular mask and a reduce, as cumsum), scatter and scatter_reduce (one-hot selects),
linspace, meshgrid, roll, diag, and scaled_dot_product_attention as a method.

Each is a graph of existing nodes, so each has its gradient from autograd's table. sort and the cumulative ops cost
n^2 along their axis (tinygrad's sort is a bitonic network instead; n^2 keeps this a few lines).
"""
from __future__ import annotations
import math
import numpy as np
from uopc.dtype import dtypes, to_dtype
from uopc.mixin.elementwise import Self
from uopc.mixin.movement import _norm_axis
from uopc.mixin.windows import WindowMixin
from uopc.errors import UsageError, UsageTypeError
from uopc.mixin.shapes import accept_dim


class ComposeMixin(WindowMixin):
  # ---- einsum ----
  @classmethod
  def einsum(cls, formula: str, *operands) -> Self:
    """NumPy's einsum ("ij,jk->ik", "bhqd,bhkd->bhqk", "ii->i", "...ij->...ji"; implicit output: the letters used once,
    sorted): every operand viewed over all the letters (a letter repeated inside one operand is its diagonal), the
    product, summed over the letters the output lacks."""
    ops = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)
    spec = formula.replace(" ", "")
    lhs, arrow, out = spec.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(ops): raise UsageError(f"einsum: {formula!r} names {len(ins)} operands, got {len(ops)}")
    fill = ""
    if "..." in spec:   # the ellipsis: letters not used elsewhere, as many as the widest operand needs
      free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in spec]
      width = max((o.ndim - len(s.replace("...", "")) for s, o in zip(ins, ops) if "..." in s), default=0)
      fill = "".join(free[:width])
      ins = [s.replace("...", fill[len(fill) - (o.ndim - len(s.replace("...", ""))):]) for s, o in zip(ins, ops)]
      out = out.replace("...", fill) if arrow else out
    if not arrow:   # NumPy's implicit output: the ellipsis's axes first (broadcast ones too), then the lone letters
      counts = {c: "".join(ins).count(c) for c in "".join(ins)}
      out = fill + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in fill))
    sizes: dict[str, int] = {}
    for s, o in zip(ins, ops):
      if len(s) != o.ndim: raise UsageError(f"einsum: {s!r} has {len(s)} letters for an operand of shape {o.shape}")
      for c, n in zip(s, o.shape):
        if sizes.setdefault(c, n) != n and n != 1 and sizes[c] != 1:
          raise UsageError(f"einsum: letter {c!r} is {sizes[c]} in one operand and {n} in another")
        sizes[c] = max(sizes[c], n)
    for c in out:
      if c not in sizes: raise UsageError(f"einsum: the output's letter {c!r} is in no operand")
      if out.count(c) > 1: raise UsageError(f"einsum: {formula!r}: the output's letter {c!r} appears more than once")
    letters = sorted(sizes)
    prod = None
    for s, o in zip(ins, ops):
      while len(set(s)) < len(s):   # a repeated letter: its diagonal (times the identity, summed over one copy)
        c = next(c for c in s if s.count(c) > 1)
        i = s.index(c)
        j, n = s.index(c, i + 1), o.shape[i]
        eye = type(o).eye(n, dtype=o.dtype).reshape(*[n if k in (i, j) else 1 for k in range(o.ndim)])
        o, s = (o * eye).sum(j), s[:j] + s[j + 1:]
      view = o.permute([s.index(c) for c in letters if c in s])
      view = view.reshape(*[o.shape[s.index(c)] if c in s else 1 for c in letters])
      prod = view if prod is None else prod * view
    summed = tuple(k for k, c in enumerate(letters) if c not in out)
    # integers keep their dtype (PyTorch's einsum: int32 in, int32 out), where sum() alone would widen to int64
    res = (prod.sum(summed, dtype=prod.dtype) if prod.dtype.is_int else prod.sum(summed)) if summed else prod
    kept = [c for c in letters if c in out]
    return res.permute([kept.index(c) for c in out]) if kept else res

  # ---- sorting ----
  def _ranks(self, axis: int, descending: bool) -> tuple[Self, int]:
    """Each element's position in the sorted order along axis (moved last), ties in order of index (stable); NaN is
    the largest, as PyTorch sorts it."""
    x = self.transpose(axis, -1)
    n = x.shape[-1]
    a, b = x.unsqueeze(-1), x.unsqueeze(-2)                    # a: element i, b: element j (..., n, n)
    if x.dtype.is_float:
      an, bn = a.isnan(), b.isnan()
      before = (bn.logical_not() & an) | ((b < a) if not descending else (b > a))   # j sorts before i
      if descending: before = (bn & an.logical_not()) | ((b > a) & an.logical_not())
      same = b.eq(a) | (an & bn)
    else:
      before, same = (b > a) if descending else (b < a), b.eq(a)
    j_lt_i = type(self).arange(n).unsqueeze(-1) > type(self).arange(n)   # (i, j): j < i
    return (before | (same & j_lt_i)).sum(-1), n

  def sort(self, dim: int = -1, descending: bool = False) -> tuple[Self, Self]:
    """(values, indices), as PyTorch's sort (stable: equal values keep their order)."""
    if self.ndim == 0: return self, type(self).full((), 0, dtypes.i64)
    axis = _norm_axis(dim, self.ndim)
    rank, n = self._ranks(axis, descending)                    # (..., n): where element i goes
    hit = rank.unsqueeze(-2).eq(type(self).arange(n).unsqueeze(-1))    # (..., r, i): element i lands at r
    x = self.transpose(axis, -1)
    values = hit.where(x.unsqueeze(-2), False if x.dtype is dtypes.bool else 0).sum(-1, dtype=x.dtype)
    idx = hit.where(type(self).arange(n).cast(dtypes.i64), 0).sum(-1)
    return values.transpose(axis, -1), idx.transpose(axis, -1)
  def argsort(self, dim: int = -1, descending: bool = False) -> Self: return self.sort(dim, descending)[1]
  def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Self, Self]:
    """(values, indices) of the k largest (smallest) along dim, in order."""
    axis = _norm_axis(dim, self.ndim)
    if not 0 <= k <= self.shape[axis]: raise UsageError(f"topk: k={k} for an axis of size {self.shape[axis]}")
    v, i = self.sort(axis, descending=largest)
    cut = [(0, k) if a == axis else None for a in range(self.ndim)]
    return v.shrink(cut), i.shrink(cut)

  # ---- cumulative ops: out[i] = op over x[j], j <= i ----
  def _cumulative(self, axis: int, fill, reduce: str) -> Self:
    axis = _norm_axis(axis, self.ndim)
    if self.ndim == 0: return self
    n = self.shape[axis]
    x = self.transpose(axis, -1)
    mask = type(self).full((n, n), True, dtypes.bool).tril()
    return getattr(mask.where(x.unsqueeze(-2), fill), reduce)(-1).transpose(axis, -1)
  def cumprod(self, axis: int = 0) -> Self: return self._cumulative(axis, 1, "prod")
  def cummax(self, axis: int = 0) -> tuple[Self, Self]:
    """(values, indices), as PyTorch's and tinygrad's cummax: the running maximum and, at each i, the last j <= i
    holding it (PyTorch's >= rule; a nan is the maximum from where it appears). The gradient goes to that index."""
    return self._cumulative_arg(axis, largest=True)
  def cummin(self, axis: int = 0) -> tuple[Self, Self]:
    """(values, indices): the running minimum and the last index holding it, as cummax."""
    return self._cumulative_arg(axis, largest=False)
  def _cumulative_arg(self, axis: int, largest: bool) -> tuple[Self, Self]:
    T = type(self)
    if self.ndim == 0: return self, T.full((), 0, dtypes.i64)
    axis = _norm_axis(axis, self.ndim)
    fill = (-math.inf if largest else math.inf) if self.dtype.is_float else (self.dtype.min if largest else
                                                                              self.dtype.max)
    values = self._cumulative(axis, fill, "max" if largest else "min")
    n = self.shape[axis]
    x, v = self.transpose(axis, -1).unsqueeze(-2), values.transpose(axis, -1).unsqueeze(-1)   # (..., 1, n), (..., n, 1)
    same = x.eq(v) | (x.isnan() & v.isnan()) if self.dtype.is_float else x.eq(v)            # (..., i, j)
    hit = T.full((n, n), True, dtypes.bool).tril() & same
    idx = hit.where(T.arange(n).cast(dtypes.i64), -1).max(-1)                                # the last j <= i
    one_hot = T.arange(n).cast(dtypes.i64).eq(idx.unsqueeze(-1))                             # (..., i, j)
    def grad(out, s, g):   # each running value's gradient to the index it reports
      return (one_hot.where(g.transpose(axis, -1).unsqueeze(-1), 0.0).sum(-2).transpose(axis, -1),)
    values = values._custom_grad((self,), grad) if self.dtype.is_float else values
    return values, idx.transpose(axis, -1)
  def logcumsumexp(self, axis: int = 0) -> Self:
    """log(sum_{j <= i} exp(x_j)), each i shifted by its own running maximum m_i (cummax): exp(x_j - m_i) <= 1 with
    at least one term 1, so no row underflows to log(0) = -inf where the answer is finite (a row [0, 200] shifted by
    its overall max 200 would), and none overflows. An infinite m_i shifts by 0."""
    axis = _norm_axis(axis, self.ndim)
    if self.ndim == 0: return self
    T, n = type(self), self.shape[axis]
    x = self.transpose(axis, -1)                                                  # (..., n)
    m = x._cumulative(-1, -math.inf, "max").detach()
    m = m.isinf().where(0.0, m).unsqueeze(-1)                                     # (..., i, 1)
    below = T.full((n, n), True, dtypes.bool).tril()                              # (i, j): j <= i
    terms = below.where(x.unsqueeze(-2) - m, -math.inf).exp()   # (..., i, j); j > i masked before exp: no 0 * inf
    return (terms.sum(-1).log() + m.squeeze(-1)).transpose(axis, -1)

  # ---- scatter ----
  def _scatter_hits(self, dim: int, index, src):
    """(dim moved last) hit (..., m, n): index[..., j] == q; src as (..., m); both over index's extent."""
    T = type(self)
    dim = _norm_axis(dim, self.ndim)
    index = index if isinstance(index, T) else T(np.asarray(index))
    if not index.dtype.is_int: raise TypeError(f"scatter: index must be integers, got {index.dtype}")
    if index.ndim != self.ndim: raise UsageError(f"scatter: index {index.shape} needs as many axes as {self.shape}")
    if not isinstance(src, T): src = T.full(index.shape, src, self.dtype)
    elif src.dtype is not self.dtype:   # PyTorch casts a scalar src, never a Tensor's
      raise UsageTypeError(f"scatter: src's dtype {src.dtype} must be self's {self.dtype}, as in PyTorch")
    if index._holds_data() and index.numel():   # a concrete index is checked now (a computed one: uopc.grad_mode)
      got = index.numpy()
      if got.min() < 0 or got.max() >= self.shape[dim]:
        raise IndexError(f"scatter: index {got.min() if got.min() < 0 else got.max()} is out of bounds for axis "
                         f"{dim} with size {self.shape[dim]} (0 <= index < size, as PyTorch's)")
    for k, (a, b, c) in enumerate(zip(index.shape, self.shape, src.shape)):
      if a > c or (k != dim and a > b):
        raise UsageError(f"scatter: index {index.shape} larger than src {src.shape} or self {self.shape} at axis {k}")
    src = src.shrink([(0, a) for a in index.shape]).cast(self.dtype)
    n = self.shape[dim]
    hit = index.transpose(dim, -1).unsqueeze(-1).eq(T.arange(n))            # (..., m, n)
    return dim, hit, src.transpose(dim, -1).unsqueeze(-1)                     # src (..., m, 1)

  def _scatter_pad(self, dim: int, t: Self) -> Self:
    """t (dim last, over index's extent on the other axes) back in self's layout, padded to self's shape."""
    t = t.transpose(dim, -1)
    return t.pad([(0, s - a) for s, a in zip(self.shape, t.shape)])

  def scatter(self, dim: int, index, src, reduce: str | None = None) -> Self:
    """PyTorch's scatter: out[..., index[i], ...] = src[i] along dim (where an index repeats, the last write wins);
    reduce "add" or "multiply" combine instead."""
    if reduce is not None:
      return self.scatter_reduce(dim, index, src, {"add": "sum", "multiply": "prod"}[reduce], include_self=True)
    d, hit, src = self._scatter_hits(dim, index, src)
    T = type(self)
    m = hit.shape[-2]
    order = T.arange(1, m + 1).reshape(m, 1)
    last = hit.where(order, 0).max(-2, keepdim=True)                          # (..., 1, n): the last j that hits
    pick = hit & order.eq(last)
    val = pick.where(src, False if self.dtype is dtypes.bool else 0).sum(-2, dtype=self.dtype)
    any_ = self._scatter_pad(d, hit.any(-2))
    return any_.where(self._scatter_pad(d, val), self)

  def scatter_reduce(self, dim: int, index, src, reduce: str, include_self: bool = True) -> Self:
    """PyTorch's scatter_reduce: reduce is "sum", "prod", "mean", "amax" or "amin"."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
      raise UsageError(f"scatter_reduce: reduce must be sum, prod, mean, amax or amin, got {reduce!r}")
    d, hit, src = self._scatter_hits(dim, index, src)
    fill = {"sum": 0, "mean": 0, "prod": 1, "amax": -math.inf if self.dtype.is_float else self.dtype.min,
            "amin": math.inf if self.dtype.is_float else self.dtype.max}[reduce]
    op = {"sum": "sum", "mean": "sum", "prod": "prod", "amax": "max", "amin": "min"}[reduce]
    got = hit.where(src, fill)
    val = self._scatter_pad(d, got.sum(-2, dtype=self.dtype) if op == "sum" else getattr(got, op)(-2))
    count = self._scatter_pad(d, hit.sum(-2))
    hit_any = count > 0
    if reduce == "mean":
      total = val + (self if include_self else 0)
      n = count + (1 if include_self else 0)
      mean = total / n.maximum(1)
      out = mean if self.dtype.is_float else mean.floor().cast(self.dtype)
      return hit_any.where(out, self)
    if include_self:
      both = {"sum": lambda: val + self, "prod": lambda: val * self, "amax": lambda: val.maximum(self),
              "amin": lambda: val.minimum(self)}[reduce]()
      return hit_any.where(both, self)
    return hit_any.where(val, self)

  # ---- creation and rearrangement ----
  @classmethod
  def linspace(cls, start, stop, steps: int, dtype=dtypes.f32) -> Self:
    """steps values from start to stop, both included (PyTorch's linspace)."""
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)):
      raise UsageTypeError(f"linspace: steps must be an int, got {steps!r} ({type(steps).__name__})")
    if steps < 0: raise UsageError(f"linspace: steps must be non-negative, got {steps}")
    if to_dtype(dtype) is dtypes.bool: raise UsageError("linspace: dtype bool is not supported, as in PyTorch")
    return cls(np.linspace(start, stop, steps), dtype)
  @classmethod
  def meshgrid(cls, *tensors, indexing: str = "ij") -> list[Self]:
    """PyTorch's meshgrid: each 1-D tensor expanded over the grid of all of them ("ij": matrix indexing; "xy": the
    first two axes swapped, as NumPy's default)."""
    ts = list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else list(tensors)
    if indexing not in ("ij", "xy"): raise UsageError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    shape = tuple(t.numel() for t in ts)
    out = [t.reshape(*[-1 if k == j else 1 for k in range(len(ts))]).expand(*shape) for j, t in enumerate(ts)]
    return [o.transpose(0, 1) for o in out] if indexing == "xy" and len(ts) >= 2 else out
  def roll(self, shifts, dims=None) -> Self:
    """Elements shifted along dims, wrapping around (PyTorch's roll; no dims: the flattened tensor)."""
    if dims is None: return self.reshape(-1).roll(shifts, 0).reshape(self.shape)
    shifts = (shifts,) if isinstance(shifts, (int, np.integer)) else tuple(shifts)
    dims = (dims,) if isinstance(dims, (int, np.integer)) else tuple(dims)
    if len(shifts) != len(dims): raise UsageError(f"roll: {len(shifts)} shifts for {len(dims)} dims")
    out = self
    for s, d in zip(shifts, dims):
      d = _norm_axis(d, self.ndim)
      n = self.shape[d]
      if not n or not s % n: continue
      s = s % n
      a, b = out.split([n - s, s], d)
      out = b.cat(a, dim=d)
    return out
  def diag(self, diagonal: int = 0) -> Self:
    """A 1-D tensor: the square matrix with it on the diagonal-th diagonal; a 2-D one: that diagonal (PyTorch's)."""
    T = type(self)
    if self.ndim == 1:
      n = self.shape[0] + abs(diagonal)
      hot = (T.arange(n).unsqueeze(-1) + diagonal).eq(T.arange(n))        # (i, j): j == i + diagonal
      i = (T.arange(n) - max(-diagonal, 0)).maximum(0).minimum(self.shape[0] - 1)
      return hot.where(self._take(0, i).unsqueeze(-1), 0).cast(self.dtype)
    if self.ndim != 2: raise UsageError(f"diag: needs a 1-D or 2-D tensor, got shape {self.shape}")
    r, c = self.shape
    n = max(0, min(r, c - diagonal) if diagonal >= 0 else min(r + diagonal, c))
    hot = (T.arange(r).unsqueeze(-1) + diagonal).eq(T.arange(c))
    return hot.where(self, 0).sum(-1, dtype=self.dtype).shrink([(max(-diagonal, 0), max(-diagonal, 0) + n)])
  def diagonal(self) -> Self: return self.diag()

  def scaled_dot_product_attention(self, key, value, attn_mask=None, dropout_p: float = 0.0,
                                   is_causal: bool = False, scale: float | None = None) -> Self:
    """tinygrad's method (self is the query): softmax(q k^T * scale + mask) v as a lazy graph of Tensor ops, which
    the kernelizer fuses like any other (uopc.nn.scaled_dot_product_attention runs the flash kernels instead, and
    differentiates this graph). A query whose keys are all masked gets zeros, as from the kernels, not the nan of a
    softmax of -infs; dropout_p drops probabilities."""
    T = type(self)
    nq, nk = self.shape[-2], key.shape[-2]
    s = (self @ key.transpose(-1, -2)) * (1 / math.sqrt(self.shape[-1]) if scale is None else float(scale))
    if is_causal: s = T(np.tril(np.ones((nq, nk), np.bool_))).where(s, -math.inf)
    if attn_mask is not None:
      m = attn_mask if isinstance(attn_mask, T) else T(np.asarray(attn_mask))
      if m.dtype.is_int: m = m.ne(0)
      s = m.where(s, -math.inf) if m.dtype is dtypes.bool else s + m.cast(s.dtype)
    top = s.max(-1, keepdim=True).detach()
    top = top.isinf().where(0.0, top)                                    # a row of -infs: exp gives zeros
    e = (s - top).exp()
    total = e.sum(-1, keepdim=True)
    p = e / total.eq(0).where(1.0, total)
    if dropout_p: p = p.dropout(dropout_p)
    return p @ value


accept_dim(ComposeMixin, ("cumprod", "cummax", "cummin", "logcumsumexp"))

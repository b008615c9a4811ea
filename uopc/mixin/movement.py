"""Tensor methods built from the five movement ops (RESHAPE, EXPAND, PERMUTE, SHRINK, PAD): the ops themselves,
squeeze/flatten/repeat and the rest of the shape changes, cat/stack/split, and the masks arange builds (eye, tril,
triu). None needs a derivative rule of its own: each is a composition of movement and elementwise ops."""
from __future__ import annotations
import math
from typing import Sequence
import numpy as np
from uopc.dtype import dtypes, least_upper_dtype
from uopc.helpers import prod
from uopc.mixin.elementwise import ElementwiseMixin, Self
from uopc.mixin.shapes import ONLY_INT as _INT, axis_index as _axis, shape_arg as _shape_arg
from uopc.uop import Ops
from uopc.errors import UsageError, UsageTypeError


def _norm_axis(axis: int, ndim: int) -> int:
  return _axis(axis, ndim)


class MovementMixin(ElementwiseMixin):
  # ---- the composing class provides ----
  def _mv(self, op: Ops, arg) -> Self:
    """The movement node op (RESHAPE, EXPAND, PERMUTE, SHRINK, PAD) with arg over self; arg is checked already."""
    raise NotImplementedError

  @property
  def ndim(self) -> int: return len(self.shape)
  def numel(self) -> int: return prod(self.shape)

  # ---- the five movement ops ----
  def reshape(self, *shape) -> Self:
    """Sizes are integers; one may be -1 (inferred), None keeps that axis' size."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    if _INT >= {*map(type, shape)} and min(shape, default=0) >= 0 and prod(shape) == self.numel():   # sizes in full
      return self if shape == self.shape else self._mv(Ops.RESHAPE, shape)   # (the checks below, passed, in C)
    shape = [self.shape[k] if s is None and k < self.ndim else s for k, s in enumerate(shape)]
    shape = list(_shape_arg(shape, "reshape"))
    if shape.count(-1) > 1: raise UsageError(f"reshape: only one -1 allowed, got {tuple(shape)}")
    if -1 in shape:
      rest = prod(s for s in shape if s != -1)
      if rest == 0 or self.numel() % rest: raise UsageError(f"reshape: cannot reshape {self.shape} into {tuple(shape)}")
      shape[shape.index(-1)] = self.numel() // rest
    if any(s < 0 for s in shape) or prod(shape) != self.numel():
      raise UsageError(f"reshape: cannot reshape {self.shape} ({self.numel()} elements) into {tuple(shape)}")
    return self if tuple(shape) == self.shape else self._mv(Ops.RESHAPE, tuple(shape))

  def expand(self, *shape) -> Self:
    shape = _shape_arg(shape, "expand")
    if any(n < -1 for n in shape): raise UsageError(f"expand: sizes must be non-negative (or -1 to keep), got {shape}")
    shape = tuple(s if s != -1 else o for s, o in zip(shape, (1,) * (len(shape) - self.ndim) + self.shape))
    if len(shape) < self.ndim: raise UsageError(f"expand: {self.shape} has more dimensions than {shape}")
    x = self.reshape((1,) * (len(shape) - self.ndim) + self.shape) if len(shape) > self.ndim else self
    for a, b in zip(x.shape, shape):
      if a != b and a != 1: raise UsageError(f"expand: cannot expand {self.shape} to {shape} (only size-1 axes expand)")
    return x if shape == x.shape else x._mv(Ops.EXPAND, shape)

  def _broadcast(self, shape: tuple[int, ...]) -> Self:
    """expand(shape) for a shape known to broadcast self's: the same nodes, without expand's checks."""
    have = self.shape
    if have == shape: return self
    x = self if len(shape) == len(have) else self._mv(Ops.RESHAPE, (1,) * (len(shape) - len(have)) + have)
    return x if x.shape == shape else x._mv(Ops.EXPAND, shape)

  def permute(self, *order) -> Self:
    given = tuple(order[0]) if len(order) == 1 and isinstance(order[0], (tuple, list)) else order
    if _INT >= {*map(type, given)} and sorted(given) == list(range(self.ndim)): order = given   # checked, in C
    else:   # axes to check or to count from the end (-1)
      order = tuple(_axis(a, self.ndim) for a in _shape_arg(order, "permute"))
      if sorted(order) != list(range(self.ndim)):
        raise UsageError(f"permute: {order} is not a permutation of the {self.ndim} axes of {self.shape}")
    return self if order == tuple(range(self.ndim)) else self._mv(Ops.PERMUTE, order)

  def transpose(self, a: int = -2, b: int = -1) -> Self:
    order = list(range(self.ndim))
    a, b = _axis(a, self.ndim), _axis(b, self.ndim)
    order[a], order[b] = order[b], order[a]
    return self.permute(order)

  @property
  def T(self) -> Self: return self.permute(tuple(range(self.ndim))[::-1])

  def shrink(self, arg: Sequence[tuple[int, int] | None]) -> Self:
    arg = tuple((0, s) if a is None else _shape_arg(tuple(a), "shrink") for a, s in zip(arg, self.shape))
    if len(arg) != self.ndim: raise UsageError(f"shrink: need one (begin, end) pair per axis of {self.shape}: {arg}")
    for (b, e), s in zip(arg, self.shape):
      if not 0 <= b <= e <= s:
        raise IndexError(f"shrink: range {b}:{e} is out of bounds for an axis of size {s} (shape {self.shape})")
    return self if all(a == (0, s) for a, s in zip(arg, self.shape)) else self._mv(Ops.SHRINK, arg)

  def pad(self, padding: Sequence, mode: str = "constant", value=0.0) -> Self:
    """One (before, after) pair (or None) per axis, or PyTorch's flat form (last axis first: left, right, top, ...).
    A negative size cuts (a SHRINK). mode, as PyTorch's F.pad: "constant" fills with value (PAD fills zeros; another
    value is a where), "reflect" mirrors without repeating the edge (each size below the axis's), "replicate" repeats
    the edge, "circular" wraps around (at most once)."""
    arg = padding
    if all(isinstance(a, (int, np.integer)) for a in arg):   # the flat form
      if len(arg) % 2 or len(arg) > 2 * self.ndim: raise UsageError(f"pad: flat padding {tuple(arg)} for {self.shape}")
      pairs = [tuple(arg[k:k + 2]) for k in range(0, len(arg), 2)][::-1]
      arg = [(0, 0)] * (self.ndim - len(pairs)) + pairs
    arg = tuple((0, 0) if a is None else _shape_arg(tuple(a), "pad") for a in arg)
    if len(arg) != self.ndim or any(len(a) != 2 for a in arg):
      raise UsageError(f"pad: need one (before, after) pair per axis of {self.shape}, got {arg}")
    if mode != "constant":
      if mode not in _EDGE_MODES:
        raise UsageError(f"pad: mode must be one of 'constant', {', '.join(map(repr, _EDGE_MODES))}, got {mode!r}")
      if value != 0: raise UsageError(f"pad: mode {mode!r} takes no value (only 'constant' fills with one)")
      return self._pad_edges(arg, mode)
    if any(lo < 0 or hi < 0 for lo, hi in arg):     # cut first, then pad what is left
      cut = [(max(-lo, 0), s - max(-hi, 0)) for (lo, hi), s in zip(arg, self.shape)]
      if any(b > e for b, e in cut): raise UsageError(f"pad: {arg} cuts more than the axes of {self.shape} hold")
      return self.shrink(cut).pad([(max(lo, 0), max(hi, 0)) for lo, hi in arg], value=value)
    if all(a == (0, 0) for a in arg): return self
    out = self._mv(Ops.PAD, arg)
    if value == 0: return out
    inside = type(self).full(self.shape, True).pad(arg)
    return inside.where(out, value)

  def _pad_edges(self, arg: tuple[tuple[int, int], ...], mode: str) -> Self:
    """reflect / replicate / circular padding: per axis, the pieces before and after, cut from x, then a cat. As
    PyTorch: circular cuts the negative sizes first and wraps what is left; reflect and replicate grow with the whole
    axis in view and cut after."""
    x = self
    if mode == "circular": x = x.pad([(min(lo, 0), min(hi, 0)) for lo, hi in arg])
    for d, (lo, hi) in enumerate(arg):
      lo, hi, n = max(lo, 0), max(hi, 0), x.shape[d]
      if not lo and not hi: continue
      piece = lambda b, e: x.shrink([(b, e) if k == d else None for k in range(x.ndim)])
      if mode == "reflect":
        if lo >= n or hi >= n:
          raise UsageError(f"pad: reflect padding ({lo}, {hi}) of axis {d} must be less than its size {n}")
        before, after = piece(1, lo + 1).flip(d), piece(n - 1 - hi, n - 1).flip(d)
      elif mode == "replicate":
        if n == 0: raise UsageError(f"pad: replicate padding of axis {d}, which is empty, has no edge to repeat")
        grow = lambda p, k: p.expand([k if j == d else s for j, s in enumerate(p.shape)])
        before, after = grow(piece(0, 1), lo), grow(piece(n - 1, n), hi)
      else:
        if lo > n or hi > n:
          raise UsageError(f"pad: circular padding ({lo}, {hi}) of axis {d} wraps around its size {n} more than once")
        before, after = piece(n - lo, n), piece(0, hi)
      x = before.cat(x, after, dim=d)
    return x if mode == "circular" else x.pad([(min(lo, 0), min(hi, 0)) for lo, hi in arg])

  # ---- creation ----
  @classmethod
  def arange(cls, start, stop=None, step=1, dtype=None) -> Self:
    """start, start + step, ... below stop (NumPy's arange): int32 for integer arguments, float32 otherwise."""
    if stop is None: start, stop = 0, start
    for v in (start, stop, step):
      if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"arange: start, stop and step must be numbers, got {v!r}")
    if step == 0: raise UsageError("arange: step must not be 0")
    whole = all(isinstance(v, (int, np.integer)) for v in (start, stop, step))
    if dtype is None and whole:   # int32, or int64 where a value needs it (as PyTorch's int64 would hold it)
      wide = not all(dtypes.int.min <= int(v) <= dtypes.int.max for v in (start, stop - step if stop != start else
                                                                               start))
      dtype = dtypes.i64 if wide else dtypes.int
    return cls(np.arange(start, stop, step), dtype or dtypes.default_float)

  @classmethod
  def eye(cls, n: int, m: int | None = None, dtype=dtypes.f32) -> Self:
    m = n if m is None else m
    return (cls.arange(n).reshape(n, 1) == cls.arange(m).reshape(1, m)).cast(dtype)

  def _tri(self, k: int, lower: bool) -> Self:
    if self.ndim < 2: raise UsageError(f"tril/triu need a tensor with at least 2 dimensions, got shape {self.shape}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)): raise TypeError(f"tril/triu: k must be an int: {k}")
    r, c = self.shape[-2:]
    rows, cols = type(self).arange(r).reshape(r, 1) + int(k), type(self).arange(c).reshape(1, c)
    keep = (cols <= rows) if lower else (cols >= rows)
    return keep.where(self, False if self.dtype is dtypes.bool else 0)
  def tril(self, k: int = 0) -> Self:
    """Entries on and below the k-th diagonal (of the last two axes); the rest 0."""
    return self._tri(k, True)
  def triu(self, k: int = 0) -> Self:
    """Entries on and above the k-th diagonal (of the last two axes); the rest 0."""
    return self._tri(k, False)

  def masked_fill(self, mask, value) -> Self:
    """value where mask (a bool tensor broadcastable to self) is True, self elsewhere."""
    mask = mask if isinstance(mask, type(self)) else type(self)(np.asarray(mask))
    if mask.dtype is not dtypes.bool: raise TypeError(f"masked_fill: the mask must be bool, got {mask.dtype}")
    return mask.where(value, self)

  # ---- shapes ----
  def unsqueeze(self, dim: int) -> Self:
    dim = _norm_axis(dim, self.ndim + 1)
    return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])
  def squeeze(self, dim=None) -> Self:
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    dims = {_norm_axis(d, self.ndim) for d in (dim if isinstance(dim, (tuple, list)) else (dim,))}
    return self.reshape(tuple(s for k, s in enumerate(self.shape) if not (k in dims and s == 1)))
  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
    if self.ndim == 0: return self.reshape(1)
    a, b = _norm_axis(start_dim, self.ndim), _norm_axis(end_dim, self.ndim)
    if a > b: raise UsageError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for shape {self.shape}")
    return self.reshape(self.shape[:a] + (prod(self.shape[a:b + 1]),) + self.shape[b + 1:])
  def unflatten(self, dim: int, sizes: Sequence[int]) -> Self:
    dim = _norm_axis(dim, self.ndim)
    return self.reshape(self.shape[:dim] + tuple(sizes) + self.shape[dim + 1:])
  def view(self, *shape) -> Self: return self.reshape(*shape)
  def expand_as(self, other) -> Self: return self.expand(other.shape)
  def repeat(self, *repeats) -> Self:
    """Tile: repeat(2, 3) of a (4, 5) tensor is (8, 15). A RESHAPE, an EXPAND and a RESHAPE, no copies."""
    reps = _shape_arg(repeats, "repeat")
    if len(reps) < self.ndim: raise UsageError(f"repeat: {reps} has fewer sizes than {self.shape} has axes")
    if any(r < 0 for r in reps): raise UsageError(f"repeat: counts must be non-negative, got {reps}")
    base = (1,) * (len(reps) - self.ndim) + self.shape
    x = self.reshape(tuple(d for s in base for d in (1, s)))
    x = x.expand(tuple(d for r, s in zip(reps, base) for d in (r, s)))
    return x.reshape(tuple(r * s for r, s in zip(reps, base)))
  def stack(self, *args, dim: int | None = None, axis: int | None = None) -> Self:
    """Tensor.stack([a, b], axis) or tinygrad's a.stack(b, dim=) and Tensor.stack(a, b, dim=)."""
    tensors, axis = _tensor_list("stack", self, args, dim, axis)
    shapes = {t.shape for t in tensors}
    if len(shapes) != 1: raise UsageError(f"stack: all tensors need the same shape, got {sorted(shapes)}")
    dt = least_upper_dtype(*(t.dtype for t in tensors))   # mixed dtypes promote, as in cat and PyTorch
    out = tensors[0].cast(dt)._alu(Ops.STACK, *(t.cast(dt) for t in tensors[1:]))
    axis = _norm_axis(axis, out.ndim)
    return out.permute(list(range(1, axis + 1)) + [0] + list(range(axis + 1, out.ndim)))
  def cat(self, *args, dim: int | None = None, axis: int | None = None) -> Self:
    """Each piece padded with zeros to the full length along axis, then added.
    Tensor.cat([a, b], axis) or tinygrad's a.cat(b, c, dim=)."""
    tensors, axis = _tensor_list("cat", self, args, dim, axis)
    dt = least_upper_dtype(*(t.dtype for t in tensors))
    tensors = [t.cast(dt) for t in tensors]
    first = tensors[0]
    axis = _norm_axis(axis, first.ndim)
    for t in tensors:
      if t.ndim != first.ndim or any(a != b for k, (a, b) in enumerate(zip(t.shape, first.shape)) if k != axis):
        raise UsageError(f"cat: shapes {[x.shape for x in tensors]} differ outside axis {axis}")
    total, at, out = sum(t.shape[axis] for t in tensors), 0, None
    for t in tensors:
      p = t.pad([(at, total - at - t.shape[axis]) if k == axis else (0, 0) for k in range(t.ndim)])
      out = p if out is None else out + p
      at += t.shape[axis]
    return out

  def split(self, sizes, dim: int = 0) -> list[Self]:
    """PyTorch's split: pieces of `sizes` elements along dim (the last one shorter), or of the listed sizes."""
    dim = _norm_axis(dim, self.ndim)
    n = self.shape[dim]
    if isinstance(sizes, (int, np.integer)) and not isinstance(sizes, bool):
      if sizes <= 0: raise UsageError(f"split: the piece size must be positive, got {sizes}")
      sizes = [min(int(sizes), n - at) for at in range(0, n, int(sizes))] or [0]
    if not isinstance(sizes, (tuple, list)) or any(isinstance(s, bool) or not isinstance(s, (int, np.integer))
                                                   for s in sizes):
      raise UsageTypeError(f"split: split_size_or_sections must be an int or a list of ints, got {sizes!r}")
    sizes = list(sizes)
    if sum(sizes) != n or any(s < 0 for s in sizes):
      raise UsageError(f"split: sizes {sizes} do not add up to {n}, the size of axis {dim} of {self.shape}")
    out, at = [], 0
    for s in sizes:
      out.append(self.shrink([(at, at + s) if k == dim else None for k in range(self.ndim)]))
      at += s
    return out
  def chunk(self, chunks: int, dim: int = 0) -> list[Self]:
    """chunks pieces (fewer if the axis is short), each of ceil(n / chunks) elements but the last."""
    if chunks <= 0: raise UsageError(f"chunk: the number of chunks must be positive, got {chunks}")
    n = self.shape[_norm_axis(dim, self.ndim)]
    return self.split(max(1, math.ceil(n / chunks)), dim)


_EDGE_MODES = ("reflect", "replicate", "circular")   # pad's modes besides "constant"


def _tensor_list(what: str, first, args: tuple, dim, axis) -> tuple[list[MovementMixin], int]:
  """cat/stack arguments in either form: ([a, b], axis) or (a, b, c, dim=)."""
  if dim is not None and axis is not None: raise TypeError(f"{what}: give dim= or axis=, not both")
  ax = dim if dim is not None else axis
  if isinstance(first, (list, tuple)):
    tensors = list(first)
    if args:
      if len(args) > 1 or ax is not None: raise TypeError(f"{what}: Tensor.{what}(tensors, axis) takes one axis")
      ax = args[0]
  else: tensors = [first, *args]
  if not tensors: raise UsageError(f"{what}: needs at least one tensor")
  if ax is not None and (isinstance(ax, bool) or not isinstance(ax, (int, np.integer))):
    hint = f" (to {what} it too, put it in the list: Tensor.{what}([a, b, c]))" if isinstance(ax, MovementMixin) else ""
    raise UsageTypeError(f"{what}: the axis must be an int, got {type(ax).__name__}{hint}")
  for t in tensors:
    if not isinstance(t, MovementMixin): raise TypeError(f"{what}: expected Tensors, got {type(t).__name__}")
  return tensors, 0 if ax is None else ax

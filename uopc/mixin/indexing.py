"""Tensor methods that select with integers: NumPy's indexing, gather, one_hot and flip.

Two ideas carry most of it:
- a step slice x[::k] is a PAD to a multiple of k, a RESHAPE to (n/k, k) and a SHRINK of the k axis to its first
  element (tinygrad's trick): element i of the result is element i*k of x;
- an integer-tensor index is a one-hot select, out[b] = sum_j (idx[b] == j) * x[j]: (idx[..., None] == arange(n))
  .where(x, 0).sum(). It costs n times the output's size, and its gradient is a scatter-add for free (the sum's
  gradient broadcasts, the where routes it to the chosen rows, the broadcast's gradient sums them).
"""
from __future__ import annotations
import numpy as np
from uopc.dtype import dtypes
from uopc.mixin.elementwise import Self
from uopc.mixin.movement import _norm_axis
from uopc.mixin.reduce import ReduceMixin
from uopc.mixin.shapes import broadcast_shape
from uopc.uop import Ops
from uopc.bounds import register
from uopc.errors import UsageError


class IndexingMixin(ReduceMixin):
  # ---- the composing class provides ----
  def _holds_data(self) -> bool:
    """Whether this value is data already (a contiguous buffer): reading it with numpy() runs no kernel."""
    raise NotImplementedError
  def numpy(self) -> np.ndarray: raise NotImplementedError
  def item(self): raise NotImplementedError

  def flip(self, axis) -> Self:
    """Reverse the given axes. No movement op reverses, so each axis is a one-hot select of arange(n-1, -1, -1)."""
    out = self
    axes = [_norm_axis(a, self.ndim) for a in (axis if isinstance(axis, (tuple, list)) else (axis,))]
    if len(set(axes)) != len(axes):   # PyTorch's RuntimeError: flipping an axis twice is no flip, and surely a slip
      raise UsageError(f"flip: axis {axis} names an axis more than once (axes {axes} of shape {self.shape})")
    for a in sorted(axes):
      if out.shape[a] > 1: out = out._take(a, type(self)(np.arange(out.shape[a] - 1, -1, -1, dtype=np.int32)))
    return out

  # ---- selecting with integer tensors ----
  def _select(self, axes: list[int], idxs: list[Self]) -> Self:
    """out[b..., rest...] = x[idxs[0][b], idxs[1][b], ..., rest...] with the idxs broadcast to b: a one-hot select of
    the chosen entries, (idx[b] == arange(n)).where(x, 0), summed over the n axes. Shape (*b, *rest)."""
    T = type(self)
    b = broadcast_shape(*(i.shape for i in idxs))
    rest = [k for k in range(self.ndim) if k not in axes]
    if not all(self.shape[a] for a in axes): return T.full(b + tuple(self.shape[k] for k in rest), 0, self.dtype)
    x = self.permute(axes + rest)                                                       # (*n_sel, *rest)
    hit = None
    for j, (i, a) in enumerate(zip(idxs, axes)):
      n = self.shape[a]
      h = i.reshape(i.shape + (1,)).expand(b + (1,)) == T.arange(n)                    # (*b, n)
      h = h.reshape(b + tuple(n if q == j else 1 for q in range(len(axes))))
      hit = h if hit is None else hit & h                                               # (*b, *n_sel)
    hit = hit.reshape(hit.shape + (1,) * len(rest))
    picked = hit.where(x.reshape((1,) * len(b) + x.shape), False if x.dtype is dtypes.bool else 0)
    return picked._reduce(Ops.ADD, tuple(range(len(b), len(b) + len(axes))), False)

  def _take(self, axis: int, idx: Self) -> Self:
    """x with axis replaced by idx's axes: out[..., b, ...] = x[..., idx[b], ...]."""
    return self._select([axis], [idx])._move_front(idx.ndim, axis)

  def _move_front(self, n: int, at: int) -> Self:
    """The first n axes moved to sit at position `at` among the others."""
    order = list(range(n, n + at)) + list(range(n)) + list(range(n + at, self.ndim))
    return self.permute(order)

  def gather(self, dim: int, index) -> Self:
    """PyTorch's gather: out[i][j] = self[i][index[i][j]] for dim=1 (index has self's rank; other axes up to
    self's sizes)."""
    T = type(self)
    index = _index_tensor(T, index, self.shape[_norm_axis(dim, self.ndim)], "gather")
    dim = _norm_axis(dim, self.ndim)
    if index.ndim != self.ndim: raise UsageError(f"gather: index {index.shape} needs as many axes as {self.shape}")
    for k, (a, b) in enumerate(zip(index.shape, self.shape)):
      if k != dim and a > b: raise UsageError(f"gather: index {index.shape} is larger than {self.shape} on axis {k}")
    x = self.shrink([(0, s) if k != dim else None for k, s in enumerate(index.shape)])
    n = x.shape[dim]
    xl, il = x.transpose(dim, -1), index.transpose(dim, -1)                              # dim last
    hit = il.unsqueeze(-1) == T.arange(n)                                               # (..., m, n)
    out = hit.where(xl.unsqueeze(-2), False if x.dtype is dtypes.bool else 0)
    return out._reduce(Ops.ADD, -1, False).transpose(dim, -1)

  def one_hot(self, num_classes: int) -> Self:
    """int32 (..., num_classes) with a 1 at each entry's class (entries outside 0..num_classes-1 get a row of zeros).
    num_classes must be given: PyTorch's -1 ("max + 1") would read the values back in the middle of building a graph
    (a sync, and a TinyJit capture that replays one size), so it is an error here, as in tinygrad."""
    if not self.dtype.is_int: raise TypeError(f"one_hot needs an integer tensor, got {self.dtype}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)):
      raise TypeError(f"one_hot: num_classes must be an int, got {type(num_classes).__name__}")
    if num_classes < 0:
      hint = " (to infer it as PyTorch's -1 does, pass int(t.max().item()) + 1)" if num_classes == -1 else ""
      raise UsageError(f"one_hot: num_classes must be given and non-negative, got {num_classes}{hint}")
    return (self.unsqueeze(-1) == type(self).arange(num_classes)).cast(dtypes.int)

  def _refuse_values_only(self, what: str) -> None:
    """x.max(1) is the values (tinygrad's rule); PyTorch's `_, i = x.max(1)` or `x.max(1)[1]` would read its rows."""
    if (name := getattr(self, "_values_of", None)) is not None:
      raise TypeError(f"{what} the result of {name}(dim): uopc's {name}(dim) returns the values only (tinygrad's "
                      f"rule), not PyTorch's (values, indices); write values = x.{name}(dim) and indices = "
                      f"x.arg{name}(dim)")

  def __iter__(self):
    """The rows along axis 0 (as PyTorch iterates); a 0-d tensor has none."""
    self._refuse_values_only("cannot unpack")
    if self.ndim == 0: raise TypeError("iteration over a 0-d tensor")
    return (self[k] for k in range(self.shape[0]))

  def __getitem__(self, key) -> Self:
    """NumPy's indexing: ints, slices with any step, None, ..., and integer or (static) boolean arrays/Tensors."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
      self._refuse_values_only(f"cannot index [{key}]")
    T = type(self)
    key = list(key) if isinstance(key, tuple) else [key]
    # boolean masks: their positions are fixed by the data, so the mask must be known (it is realized here)
    expanded, masks = [], [_bool_mask(T, k) for k in key]
    uses = [0 if k is None or k is Ellipsis else 1 if m is None else m.ndim for k, m in zip(key, masks)]
    axis = 0
    for j, (k, arr) in enumerate(zip(key, masks)):
      if k is Ellipsis: axis = self.ndim - sum(uses[j + 1:])
      if arr is None: expanded.append(k); axis += uses[j]; continue
      have = self.shape[axis:axis + arr.ndim]
      if have != arr.shape:   # NumPy's and PyTorch's IndexError: a mask of another length selects nonsense
        raise IndexError(f"boolean index of shape {arr.shape} does not match the indexed tensor's shape {have} at "
                         f"axis {axis} (tensor shape {self.shape})")
      expanded.extend(T(np.asarray(ix, np.int64).astype(np.int32)) for ix in np.nonzero(arr))
      axis += arr.ndim
    seqs = (list, tuple, np.ndarray)   # a list or tuple inside the key is an index array, as in NumPy
    key = [int(k) if _is_scalar(k) else T(_int_array(k)) if isinstance(k, seqs) else k for k in expanded]
    for k in key:
      if isinstance(k, T) and (k.dtype.is_float or k.dtype is dtypes.bool and k.ndim == 0):
        raise TypeError(f"cannot index a Tensor with a {k.dtype} Tensor (indices are integers or boolean masks)")
    if sum(k is Ellipsis for k in key) > 1: raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for k in key if k is not None and k is not Ellipsis)
    if used > self.ndim: raise IndexError(f"too many indices ({used}) for a tensor of shape {self.shape}")
    e = next((i for i, k in enumerate(key) if k is Ellipsis), len(key))   # ... (or the end) stands for the rest
    key = key[:e] + [slice(None)] * (self.ndim - used) + key[e + 1:]
    advanced = any(isinstance(k, T) for k in key)
    # pass 1: ints and step-1 slices are one SHRINK; steps, dropped and new axes follow
    arg, drop, steps, out_axes = [], [], {}, []    # out_axes: source axis or None (a new axis), in output order
    adv: list[tuple[int, Self]] = []             # (output axis, index tensor)
    axis = 0
    for ix in key:
      if ix is None: out_axes.append(None); continue
      s = self.shape[axis]
      if isinstance(ix, (int, np.integer)) and not isinstance(ix, bool) and not advanced:
        i = int(ix) + s if ix < 0 else int(ix)
        if not 0 <= i < s: raise IndexError(f"index {ix} is out of bounds for axis {axis} with size {s}")
        arg.append((i, i + 1)); drop.append(axis)
      elif isinstance(ix, (int, np.integer)) and not isinstance(ix, bool):      # with arrays: a 0-d array index
        adv.append((len(out_axes), T(np.array(int(ix), np.int32)))); arg.append((0, s)); out_axes.append(axis)
      elif isinstance(ix, slice):
        b, e, step = ix.indices(s)
        m = len(range(b, e, step))
        # the window the step walks, up to a whole number of steps where the axis has them (no pad needed then)
        if step > 0: arg.append((b, min(s, b + m * step)) if m else (b, b))
        else: arg.append((max(0, b + 1 + m * step), b + 1) if m else (0, 0))
        if abs(step) != 1 or step < 0: steps[axis] = step
        out_axes.append(axis)
      elif isinstance(ix, T): adv.append((len(out_axes), ix)); arg.append((0, s)); out_axes.append(axis)
      else: raise TypeError(f"cannot index a Tensor with {type(ix).__name__}")
      axis += 1
    out = self.shrink(arg)
    for a, step in steps.items():
      if step < 0: out = out.flip(a)
      out = out._stride(a, abs(step))
    new_shape = [out.shape[a] if a is not None else 1 for a in out_axes]
    if drop or None in out_axes: out = out.reshape(tuple(new_shape))
    if not advanced: return out
    # pass 2: the integer tensors, broadcast together, select along their axes. NumPy's placement: the broadcast
    # axes replace the indexed ones where those are adjacent, else they go first
    pos = [p for p, _ in adv]
    res = out._select(pos, [_index_tensor(T, i, out.shape[p], "index") for p, i in adv])
    adjacent = pos == list(range(pos[0], pos[0] + len(pos)))
    return res._move_front(res.ndim - out.ndim + len(pos), pos[0]) if adjacent else res

  def _stride(self, axis: int, step: int) -> Self:
    """Every step-th element along axis: PAD to a multiple of step, RESHAPE to (n/step, step), keep column 0."""
    n = self.shape[axis]
    if step == 1 or n == 0: return self
    m = -(-n // step)
    x = self.pad([(0, m * step - n) if k == axis else (0, 0) for k in range(self.ndim)])
    x = x.reshape(x.shape[:axis] + (m, step) + x.shape[axis + 1:])
    x = x.shrink([(0, 1) if k == axis + 1 else None for k in range(x.ndim)])
    return x.reshape(x.shape[:axis] + (m,) + x.shape[axis + 2:])


def _int_array(k) -> np.ndarray:
  a = np.asarray(k)
  return a.astype(np.int32) if a.size == 0 else a   # [] is an empty list of indices, not of floats


def _is_scalar(k) -> bool: return isinstance(k, np.ndarray) and k.ndim == 0 and k.dtype.kind in "iu"


def _bool_mask(T, k):
  """k as a NumPy bool array if it is a boolean mask (a bool array, list or Tensor), else None."""
  if isinstance(k, T):
    return k.numpy() if k.dtype is dtypes.bool and k.ndim else None
  if isinstance(k, (list, tuple, np.ndarray)):
    a = np.asarray(k)
    return a if a.dtype == np.bool_ and a.ndim else None
  return None


def _index_tensor(T, idx, n: int, what: str):
  """An integer index tensor for an axis of size n, negatives counted from the end. Indices known here (lists,
  arrays, realized Tensors) are checked against n now; a computed one carries a flag that the realize checks
  (uopc.bounds)."""
  if not isinstance(idx, T): idx = T(np.asarray(idx))
  if not idx.dtype.is_int: raise TypeError(f"{what}: indices must be integers, got {idx.dtype}")
  if idx._holds_data():
    a = idx.numpy()
    if a.size and (a.min() < -n or a.max() >= n):
      bad = a[(a < -n) | (a >= n)].reshape(-1)[0]
      raise IndexError(f"{what}: index {bad} is out of bounds for an axis of size {n}")
    if a.size and a.min() < 0: return T(np.where(a < 0, a + n, a).astype(a.dtype))
    return idx
  fixed = (idx < 0).where(idx + n, idx)
  register(fixed.uop, ((idx >= -n) & (idx < n)).all().uop,
           f"{what}: a computed index is out of bounds for an axis of size {n} (it must be in [-{n}, {n}))")
  return fixed

"""The Tensor: a lazy n-dimensional array. Operations build a graph of UOps; realize() compiles and runs it.

  q, k, v = Tensor(a), Tensor(b), Tensor(c)                        # (N, D) each, copied from NumPy
  out = (q @ k.T * (1 / math.sqrt(64))).softmax(-1) @ v           # nothing has run yet
  out.numpy()                                                      # make_plan, compile, run
"""
from __future__ import annotations
import math
from typing import Sequence
import numpy as np
from uopc import autograd
from uopc.uop import UOp, Ops
from uopc.dtype import DType, dtypes, from_np, np_dtype
from uopc.helpers import DEBUG, DEVICE, prod
from uopc.kernelize import TensorData, realize, is_contiguous_buffer
from uopc.opt import DefaultOpt
from uopc.options import Options

LOG2E, LN2 = 1 / math.log(2), math.log(2)
_requires_grad = autograd.requires_grad_leaves   # the leaves backward() fills .grad on


def _axis(axis: int, ndim: int) -> int:
  if not -ndim <= axis < max(ndim, 1):
    raise IndexError(f"axis {axis} is out of range for a tensor with {ndim} dimensions")
  return axis % ndim if ndim else 0


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
  """NumPy's rule: align from the right; each axis must match or be 1."""
  n = max(len(s) for s in shapes)
  padded = [(1,) * (n - len(s)) + tuple(s) for s in shapes]
  out = []
  for k in range(n):
    sizes = {p[k] for p in padded} - {1}
    if len(sizes) > 1:
      raise ValueError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast together (axis {k})")
    out.append(sizes.pop() if sizes else 1)
  return tuple(out)


class Tensor:
  fuse_reduce: bool = False     # True: do not cut kernels at REDUCEs; fused consumers recompute them (chapter 11)
  opt = DefaultOpt              # the optimizer realize uses: layout(roots) and lower(body, out)
  online_softmax: bool = False  # True: softmax groups become one online pass (uopc.online; chapter 11 appendix)

  def __init__(self, data, dtype: DType | None = None, requires_grad: bool = False):
    if isinstance(data, UOp): self.uop = data
    else:
      arr = np.asarray(data)
      if dtype is not None: arr = arr.astype(np_dtype(dtype))
      elif arr.dtype == np.float64 and not isinstance(data, np.ndarray): arr = arr.astype(np.float32)   # Python floats
      elif arr.dtype == np.int64 and not isinstance(data, np.ndarray): arr = arr.astype(np.int32)
      dt = from_np(arr.dtype)
      flat = np.array(arr, order="C", copy=True).reshape(-1)   # a copy: later changes to the caller's array stay out
      buf = UOp(Ops.BUFFER, (), TensorData(flat, dt, (flat.size,)))
      self.uop = buf if arr.shape == (flat.size,) else UOp(Ops.RESHAPE, (buf,), tuple(arr.shape))
    self.grad, self.lazy = None, None
    self.requires_grad = requires_grad

  @property
  def requires_grad(self) -> bool: return self in _requires_grad
  @requires_grad.setter
  def requires_grad(self, v: bool) -> None:
    if v: _requires_grad.add(self)
    else: _requires_grad.discard(self)

  # ---- properties ----
  @property
  def shape(self) -> tuple[int, ...]: return self.uop.shape
  @property
  def dtype(self) -> DType: return self.uop.dtype
  @property
  def ndim(self) -> int: return len(self.shape)
  def numel(self) -> int: return prod(self.shape)
  def __repr__(self): return f"<Tensor shape={self.shape} dtype={self.dtype}>"

  # ---- running ----
  @staticmethod
  def options() -> Options:
    """The options a realize runs with now: the book's switches on Tensor, DEVICE= and DEBUG=, read once."""
    return Options(Tensor.fuse_reduce, Tensor.opt, Tensor.online_softmax, DEVICE.value, DEBUG.value)

  def realize(self) -> Tensor:
    if is_contiguous_buffer(self.uop): return self   # already data: nothing to run
    (out,) = realize([self.uop], options=Tensor.options())
    self.lazy = self.uop   # the graph that computed it, for gradients taken after realizing
    buf = UOp(Ops.BUFFER, (), TensorData(out, self.dtype, (out.size,)))
    self.uop = buf if self.shape == (out.size,) else UOp(Ops.RESHAPE, (buf,), self.shape)
    return self

  def numpy(self) -> np.ndarray:
    self.realize()
    b = self.uop
    while b.op is Ops.RESHAPE: b = b.src[0]   # a reshape of a reshape of data is still data
    return b.arg.array.reshape(self.shape)

  def item(self):
    if self.numel() != 1: raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
    return self.numpy().reshape(-1)[0].item()

  # ---- creation ----
  @staticmethod
  def full(shape: Sequence[int], value, dtype: DType | None = None) -> Tensor:
    c = UOp.const(value, dtype)
    return Tensor(c).reshape((1,) * len(shape)).expand(tuple(shape)) if shape else Tensor(c)
  @staticmethod
  def zeros(*shape, dtype: DType = dtypes.f32) -> Tensor: return Tensor.full(_shape_arg(shape), 0, dtype)
  @staticmethod
  def ones(*shape, dtype: DType = dtypes.f32) -> Tensor: return Tensor.full(_shape_arg(shape), 1, dtype)
  @staticmethod
  def randn(*shape, seed: int = 0) -> Tensor:
    return Tensor(np.random.default_rng(seed).standard_normal(_shape_arg(shape)).astype(np.float32))

  def const_like(self, value) -> Tensor:
    return Tensor.full(self.shape, value, self.dtype if not isinstance(value, bool) else dtypes.bool)

  # ---- movement ----
  def reshape(self, *shape) -> Tensor:
    shape = list(_shape_arg(shape))
    if shape.count(-1) > 1: raise ValueError(f"reshape: only one -1 allowed, got {tuple(shape)}")
    if -1 in shape:
      rest = prod(s for s in shape if s != -1)
      if rest == 0 or self.numel() % rest: raise ValueError(f"reshape: cannot reshape {self.shape} into {tuple(shape)}")
      shape[shape.index(-1)] = self.numel() // rest
    if any(s < 0 for s in shape) or prod(shape) != self.numel():
      raise ValueError(f"reshape: cannot reshape {self.shape} ({self.numel()} elements) into {tuple(shape)}")
    return self if tuple(shape) == self.shape else self._mv(Ops.RESHAPE, tuple(shape))

  def expand(self, *shape) -> Tensor:
    shape = _shape_arg(shape)
    shape = tuple(s if s != -1 else o for s, o in zip(shape, (1,) * (len(shape) - self.ndim) + self.shape))
    if len(shape) < self.ndim: raise ValueError(f"expand: {self.shape} has more dimensions than {shape}")
    x = self.reshape((1,) * (len(shape) - self.ndim) + self.shape) if len(shape) > self.ndim else self
    for a, b in zip(x.shape, shape):
      if a != b and a != 1: raise ValueError(f"expand: cannot expand {self.shape} to {shape} (only size-1 axes expand)")
    return x if shape == x.shape else x._mv(Ops.EXPAND, shape)

  def permute(self, *order) -> Tensor:
    order = tuple(_axis(a, self.ndim) for a in _shape_arg(order))
    if sorted(order) != list(range(self.ndim)):
      raise ValueError(f"permute: {order} is not a permutation of the {self.ndim} axes of {self.shape}")
    return self if order == tuple(range(self.ndim)) else self._mv(Ops.PERMUTE, order)

  def transpose(self, a: int = -2, b: int = -1) -> Tensor:
    order = list(range(self.ndim))
    a, b = _axis(a, self.ndim), _axis(b, self.ndim)
    order[a], order[b] = order[b], order[a]
    return self.permute(order)

  @property
  def T(self) -> Tensor: return self.permute(tuple(range(self.ndim))[::-1])

  def shrink(self, arg: Sequence[tuple[int, int] | None]) -> Tensor:
    arg = tuple((0, s) if a is None else tuple(a) for a, s in zip(arg, self.shape))
    for (b, e), s in zip(arg, self.shape):
      if not 0 <= b <= e <= s:
        raise IndexError(f"shrink: range {b}:{e} is out of bounds for an axis of size {s} (shape {self.shape})")
    return self if all(a == (0, s) for a, s in zip(arg, self.shape)) else self._mv(Ops.SHRINK, arg)

  def pad(self, arg: Sequence[tuple[int, int] | None]) -> Tensor:
    arg = tuple((0, 0) if a is None else tuple(a) for a in arg)
    if len(arg) != self.ndim or any(lo < 0 or hi < 0 for lo, hi in arg):
      raise ValueError(f"pad: need one (before, after) pair of non-negative sizes per axis of {self.shape}, got {arg}")
    return self if all(a == (0, 0) for a in arg) else self._mv(Ops.PAD, arg)

  def __getitem__(self, key) -> Tensor:
    key = key if isinstance(key, tuple) else (key,)
    if any(k is Ellipsis for k in key):
      e = key.index(Ellipsis)
      key = key[:e] + (slice(None),) * (self.ndim - len(key) + 1) + key[e + 1:]
    if len(key) > self.ndim: raise IndexError(f"too many indices ({len(key)}) for a tensor of shape {self.shape}")
    arg, drop = [], []
    for k, (ix, s) in enumerate(zip(key + (slice(None),) * (self.ndim - len(key)), self.shape)):
      if isinstance(ix, (int, np.integer)):
        i = int(ix) + s if ix < 0 else int(ix)
        if not 0 <= i < s: raise IndexError(f"index {ix} is out of bounds for axis {k} with size {s}")
        arg.append((i, i + 1)); drop.append(k)
      elif isinstance(ix, slice):
        b, e, step = ix.indices(s)
        if step != 1: raise NotImplementedError(f"slicing with step {step} (axis {k}) is not supported")
        arg.append((b, max(b, e)))
      else: raise TypeError(f"cannot index a Tensor with {type(ix).__name__}")
    out = self.shrink(arg)
    return out.reshape(tuple(s for k, s in enumerate(out.shape) if k not in drop)) if drop else out

  @staticmethod
  def stack(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    shapes = {t.shape for t in tensors}
    if len(shapes) != 1: raise ValueError(f"stack: all tensors need the same shape, got {sorted(shapes)}")
    dts = {t.dtype for t in tensors}
    if len(dts) != 1: raise TypeError(f"stack: all tensors need the same dtype, got {sorted(map(str, dts))}")
    out = Tensor(UOp(Ops.STACK, tuple(t.uop for t in tensors)))
    axis = _axis(axis, out.ndim)
    return out.permute(list(range(1, axis + 1)) + [0] + list(range(axis + 1, out.ndim)))

  @staticmethod
  def cat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Each piece padded with zeros to the full length along axis, then added."""
    first = tensors[0]
    axis = _axis(axis, first.ndim)
    for t in tensors:
      if t.ndim != first.ndim or any(a != b for k, (a, b) in enumerate(zip(t.shape, first.shape)) if k != axis):
        raise ValueError(f"cat: shapes {[x.shape for x in tensors]} differ outside axis {axis}")
    total, at, out = sum(t.shape[axis] for t in tensors), 0, None
    for t in tensors:
      p = t.pad([(at, total - at - t.shape[axis]) if k == axis else (0, 0) for k in range(t.ndim)])
      out = p if out is None else out + p
      at += t.shape[axis]
    return out

  def _mv(self, op: Ops, arg) -> Tensor: return Tensor(UOp(op, (self.uop,), arg))

  # ---- elementwise ----
  def _binary(self, op: Ops, other, reverse: bool = False) -> Tensor:
    if not isinstance(other, Tensor):
      other = self.const_like(other) if self.dtype is not dtypes.bool else Tensor.full((), other)
    a, b = (other, self) if reverse else (self, other)
    if a.dtype is not b.dtype and op not in (Ops.AND, Ops.OR):
      raise TypeError(f"{op.name}: dtypes {a.dtype} and {b.dtype} differ; cast one of them first")
    shape = broadcast_shape(a.shape, b.shape)
    return Tensor(UOp(op, (a.expand(shape).uop, b.expand(shape).uop)))
  def __add__(self, x): return self._binary(Ops.ADD, x)
  def __radd__(self, x): return self._binary(Ops.ADD, x, True)
  def __mul__(self, x): return self._binary(Ops.MUL, x)
  def __rmul__(self, x): return self._binary(Ops.MUL, x, True)
  def __neg__(self): return self * -1
  def __sub__(self, x): return self + (-(x if isinstance(x, Tensor) else self.const_like(x)))
  def __rsub__(self, x): return (-self) + x
  def __truediv__(self, x): return self * (x if isinstance(x, Tensor) else self.const_like(x)).recip()
  def __rtruediv__(self, x): return self.recip() * x
  def __lt__(self, x): return self._binary(Ops.CMPLT, x)
  def __gt__(self, x): return self._binary(Ops.CMPLT, x, True)
  def __ge__(self, x): return (self < x).logical_not()
  def __le__(self, x): return (self > x).logical_not()
  def eq(self, x) -> Tensor: return self.ne(x).logical_not()
  def ne(self, x) -> Tensor: return self._binary(Ops.CMPNE, x)
  def logical_not(self) -> Tensor: return self.ne(True)
  def maximum(self, x) -> Tensor: return self._binary(Ops.MAX, x)
  def minimum(self, x) -> Tensor: return -((-self).maximum(-x if isinstance(x, Tensor) else -x))
  def where(self, a, b) -> Tensor:
    """self ? a : b, broadcast together (self is a bool tensor)."""
    if self.dtype is not dtypes.bool: raise TypeError(f"where: the condition must be bool, got {self.dtype}")
    a = a if isinstance(a, Tensor) else Tensor.full((), a, b.dtype if isinstance(b, Tensor) else None)
    b = b if isinstance(b, Tensor) else Tensor.full((), b, a.dtype)
    if a.dtype is not b.dtype: raise TypeError(f"where: branches have dtypes {a.dtype} and {b.dtype}")
    shape = broadcast_shape(self.shape, a.shape, b.shape)
    return Tensor(UOp(Ops.WHERE, (self.expand(shape).uop, a.expand(shape).uop, b.expand(shape).uop)))
  def _unary(self, op: Ops) -> Tensor:
    if not self.dtype.is_float: raise TypeError(f"{op.name.lower()} needs a float tensor, got {self.dtype}")
    return Tensor(UOp(op, (self.uop,)))
  def exp2(self) -> Tensor: return self._unary(Ops.EXP2)
  def log2(self) -> Tensor: return self._unary(Ops.LOG2)
  def sqrt(self) -> Tensor: return self._unary(Ops.SQRT)
  def recip(self) -> Tensor: return self._unary(Ops.RECIP)
  def sin(self) -> Tensor: return self._unary(Ops.SIN)
  def exp(self) -> Tensor: return (self * LOG2E).exp2()     # one hardware-friendly exponential: exp(x) = 2^(x log2 e)
  def log(self) -> Tensor: return self.log2() * LN2
  def relu(self) -> Tensor: return self.maximum(0.0 if self.dtype.is_float else 0)
  def sigmoid(self) -> Tensor: return (1 + (-self).exp()).recip()
  def tanh(self) -> Tensor: return 2 * (2 * self).sigmoid() - 1
  def abs(self) -> Tensor: return self.maximum(-self)
  def square(self) -> Tensor: return self * self
  def cast(self, dtype: DType) -> Tensor:
    return self if dtype is self.dtype else Tensor(UOp(Ops.CAST, (self.uop,), None, dtype))
  def float(self) -> Tensor: return self.cast(dtypes.f32)

  # ---- reductions ----
  def _reduce(self, op: Ops, axis, keepdim: bool) -> Tensor:
    given = tuple(range(self.ndim)) if axis is None else axis if isinstance(axis, (tuple, list)) else (axis,)
    axes = tuple(sorted({_axis(a, self.ndim) for a in given}))
    if not axes: return self
    keep = [k for k in range(self.ndim) if k not in axes]
    x = self.permute(keep + list(axes))                      # reduced axes last: REDUCE reduces the last n
    out = Tensor(UOp(Ops.REDUCE, (x.uop,), (op, len(axes))))
    return out.reshape(tuple(1 if k in axes else s for k, s in enumerate(self.shape))) if keepdim else out
  def sum(self, axis=None, keepdim: bool = False) -> Tensor: return self._reduce(Ops.ADD, axis, keepdim)
  def max(self, axis=None, keepdim: bool = False) -> Tensor: return self._reduce(Ops.MAX, axis, keepdim)
  def min(self, axis=None, keepdim: bool = False) -> Tensor: return -((-self).max(axis, keepdim))
  def mean(self, axis=None, keepdim: bool = False) -> Tensor:
    out = self.sum(axis, keepdim)
    return out * (out.numel() / self.numel()) if self.numel() else out

  def softmax(self, axis: int = -1) -> Tensor:
    m = self - self.max(axis, keepdim=True)
    e = m.exp()
    return e / e.sum(axis, keepdim=True)

  def log_softmax(self, axis: int = -1) -> Tensor:
    m = self - self.max(axis, keepdim=True)
    return m - m.exp().sum(axis, keepdim=True).log()

  # ---- matmul ----
  def matmul(self, w: Tensor) -> Tensor:
    """(..., n, k) @ (..., k, m): broadcast to (..., n, m, k) and sum the last axis."""
    if self.ndim == 0 or w.ndim == 0:
      raise ValueError(f"matmul: scalars are not matrices (shapes {self.shape} and {w.shape})")
    x = self.reshape(1, self.shape[0]) if self.ndim == 1 else self
    y = w.reshape(w.shape[0], 1) if w.ndim == 1 else w
    if x.shape[-1] != y.shape[-2]:
      raise ValueError(f"matmul: shapes {self.shape} and {w.shape} do not match ({x.shape[-1]} != {y.shape[-2]})")
    batch = broadcast_shape(x.shape[:-2], y.shape[:-2])
    n, k, m = x.shape[-2], x.shape[-1], y.shape[-1]
    xs = x.reshape(*x.shape[:-1], 1, k).expand(*batch, n, m, k)
    ys = y.transpose(-1, -2).reshape(*y.shape[:-2], 1, m, k).expand(*batch, n, m, k)
    out = (xs * ys).sum(-1)
    if self.ndim == 1: out = out.reshape(*out.shape[:-2], out.shape[-1])
    if w.ndim == 1: out = out.reshape(out.shape[:-1])
    return out
  __matmul__ = matmul

  # ---- graph ----
  def detach(self) -> Tensor: return Tensor(UOp(Ops.DETACH, (self.uop,)))
  def contiguous(self) -> Tensor: return Tensor(UOp(Ops.STAGE, (self.uop,)))

  def backward(self) -> None:
    """Gradients of this scalar with respect to every tensor that requires them, stored in .grad."""
    autograd.backward(self)


def gradient(f: Tensor, wrt: list[Tensor]) -> list[Tensor]:
  """d f / d w for every w in wrt, as lazy Tensors (see uopc.autograd)."""
  return autograd.gradient(f, wrt)


def _shape_arg(shape) -> tuple[int, ...]:
  if len(shape) == 1 and isinstance(shape[0], (tuple, list)): return tuple(shape[0])
  return tuple(shape)

"""The Tensor: a lazy n-dimensional array. Operations build a graph of UOps; realize() compiles and runs it.

  q, k, v = Tensor(a), Tensor(b), Tensor(c)                        # (N, D) each, copied from NumPy
  out = (q @ k.T * (1 / math.sqrt(64))).softmax(-1) @ v           # nothing has run yet
  out.numpy()                                                      # make_plan, compile, run
"""
from __future__ import annotations
import math
from dataclasses import dataclass
from typing import ClassVar, Sequence
import numpy as np
from uopc import autograd
from uopc.capture import note_read, recording
from uopc.uop import UOp, Ops
from uopc.dtype import DType, dtypes, from_np, least_upper_dtype, scalar_dtype, sum_dtype, to_array
from uopc.helpers import DEBUG, DEVICE, TC, prod
from uopc.kernelize import TensorData, realize, is_contiguous_buffer
from uopc.opt import DefaultOpt
from uopc.options import Options
from uopc.mixin.elementwise import ElementwiseMixin
from uopc.mixin.movement import MovementMixin
from uopc.mixin.functional import NNMixin
from uopc.mixin.shapes import axis_index as _axis, broadcast_shape, shape_arg as _shape_arg  # noqa: F401
from uopc.device import canonical
from uopc.errors import UsageError

LOG2E, LN2 = 1 / math.log(2), math.log(2)
_requires_grad = autograd.requires_grad_leaves   # the leaves backward() fills .grad on


# ---- devices (chapter 12): a Tensor's data says where it lives; its graph is realized there ----
@dataclass(frozen=True, eq=False, repr=False)
class DeviceData(TensorData):
  """Tensor data placed on a device by the program (Tensor(x, device="CL"), t.to("CL")). Plain TensorData follows
  DEVICE=. The array is a host array on every device (uopc.device)."""
  device: str = "CPU"
  made: ClassVar[bool] = False   # whether one was ever made: until then no graph holds one, and device_of need not look

  def __post_init__(self): DeviceData.made = True


def device_of(u: UOp) -> str | None:
  """The device a graph's data was placed on (None: none was named, DEVICE= decides)."""
  if not DeviceData.made: return None   # a walk over the whole graph at every realize, saved
  found = {x.arg.device for x in u.toposort() if x.op is Ops.BUFFER and isinstance(x.arg, DeviceData)}
  if len(found) > 1:
    raise UsageError(f"a Tensor computed from data on devices {sorted(found)}: move them to one with .to(device)")
  return found.pop() if found else None


def _broadcast_to(u: UOp, shape: tuple[int, ...]) -> Tensor:
  """Tensor(u).expand(shape) for a shape known to broadcast u's: the same nodes, without expand's checks."""
  if len(shape) > len(u.shape): u = UOp(Ops.RESHAPE, (u,), (1,) * (len(shape) - len(u.shape)) + u.shape)
  return Tensor(u if u.shape == shape else UOp(Ops.EXPAND, (u,), shape))


class Tensor(ElementwiseMixin, MovementMixin, NNMixin):
  fuse_reduce: bool = False     # True: do not cut kernels at REDUCEs; fused consumers recompute them (chapter 11)
  opt = DefaultOpt              # the optimizer realize uses: layout(roots) and lower(body, out)
  online_softmax: bool = False  # True: softmax groups become one online pass (uopc.codegen.online; chapter 11 appendix)

  def __init__(self, data, dtype: DType | None = None, requires_grad: bool = False, device: str | None = None):
    if isinstance(data, UOp): self.uop = data
    else:
      arr = to_array(data, dtype)
      dt = from_np(arr.dtype)
      flat = np.array(arr, order="C", copy=True).reshape(-1)   # a copy: later changes to the caller's array stay out
      buf = UOp(Ops.BUFFER, (), _tensor_data(flat, dt, device))
      self.uop = buf if arr.shape == (flat.size,) else UOp(Ops.RESHAPE, (buf,), tuple(arr.shape))
    if isinstance(data, UOp) and device is not None: raise TypeError("Tensor(uop, device=...): use .to(device)")
    self.grad, self.lazy = None, None
    self._home: UOp | None = None   # set by assign: the buffer the next realize writes this tensor's value into
    if requires_grad: _requires_grad.add(self)   # a new object is in no set yet: nothing to discard

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
  @property
  def device(self) -> str:
    """Where this Tensor is realized: the device its data was placed on, else DEVICE= (CPU by default)."""
    return device_of(self.uop) or canonical(DEVICE.value)
  def __repr__(self): return f"<Tensor shape={self.shape} dtype={self.dtype}>"
  __hash__ = object.__hash__   # == is elementwise (below), so a Tensor hashes by identity
  def __bool__(self) -> bool:
    if self.numel() != 1:
      raise TypeError(f"the truth value of a Tensor of shape {self.shape} is ambiguous; use .any() or .all()")
    return bool(self.item())

  # ---- running ----
  @staticmethod
  def options() -> Options:
    """The options a realize runs with now: the book's switches on Tensor, DEVICE= and DEBUG=, read once."""
    return Options(Tensor.fuse_reduce, Tensor.opt, Tensor.online_softmax, DEVICE.value, DEBUG.value, TC.value)

  def realize(self, *others: Tensor) -> Tensor:
    """Compute this tensor, and any others given, in one plan (Tensor.realize(loss, *grads, *updates)): each then
    holds its data. A tensor given a new value by assign() gets it written into its own buffer."""
    todo = [t for t in dict.fromkeys((self, *others)) if t._home is not None or not is_contiguous_buffer(t.uop)]
    if not todo: return self
    placed = device_of(UOp(Ops.SINK, tuple(t.uop for t in todo)))   # Tensor(x, device=...) or .to(...)
    options, seen = Tensor.options() if placed is None else Tensor.options().replace(device=placed), {}
    observe = (lambda plan, arrays, outs: seen.update(plan=plan, arrays=arrays)) if recording() is not None else None
    outs = realize([t.uop for t in todo], options=options, observe=observe)
    writes = []
    for k, (t, out) in enumerate(zip(todo, outs)):
      t.lazy = t.uop   # the graph that computed it, for gradients taken after realizing
      if t._home is not None:   # assign: the new value goes into the buffer the tensor already had
        home, t._home = t._home, None
        np.copyto(_flat(home), out)
        writes.append((k, _flat(home)))
        t.uop = home
      else: t.uop = Tensor._from_array(out, t.shape, placed).uop
    if (rec := recording()) is not None: rec.append((seen["plan"], options, seen["arrays"], outs, writes))
    return self

  def assign(self, x) -> Tensor:
    """Make x (same shape and dtype) this tensor's value, written into this tensor's own buffer when it is realized:
    an update such as p.assign(p - lr * g) leaves p holding data, so the next step's graph is the same graph."""
    x = x if isinstance(x, Tensor) else Tensor.full(self.shape, x, self.dtype)
    if x.shape != self.shape: raise UsageError(f"assign: shape {x.shape} does not match the tensor's {self.shape}")
    if x.dtype is not self.dtype: raise TypeError(f"assign: dtype {x.dtype} does not match the tensor's {self.dtype}")
    if self._home is None:
      self.realize()
      self._home = self.uop
    self.uop = x.uop
    return self

  def _data(self) -> np.ndarray:
    """The flat array that holds this (realized) tensor's data."""
    return _flat(self.realize().uop)

  @staticmethod
  def from_numpy(arr: np.ndarray) -> Tensor:
    """A tensor that shares the array's memory, as torch.from_numpy does: no copy, so later changes to the array show
    in the tensor (and an assign() to it writes into the array). Tensor(arr) copies instead. The array must be
    C-contiguous, of a dtype uopc has (np.ascontiguousarray(arr) makes a copy that is)."""
    if not isinstance(arr, np.ndarray):
      raise TypeError(f"Tensor.from_numpy takes a NumPy array, got {type(arr).__name__}")
    if not arr.flags.c_contiguous:
      raise UsageError(f"Tensor.from_numpy: the array (shape {arr.shape}, strides {arr.strides}) is not C-contiguous; "
                       "pass np.ascontiguousarray(arr), or use Tensor(arr), which copies")
    from_np(arr.dtype)   # a dtype uopc has, or a TypeError that names it
    return Tensor._from_array(arr.reshape(-1), arr.shape)

  @staticmethod
  def _from_array(flat: np.ndarray, shape: tuple[int, ...], device: str | None = None) -> Tensor:
    """A tensor whose data is the flat array (no copy), viewed in shape (on device, if one is named)."""
    buf = UOp(Ops.BUFFER, (), _tensor_data(flat, from_np(flat.dtype), device))
    return Tensor(buf if tuple(shape) == (flat.size,) else UOp(Ops.RESHAPE, (buf,), tuple(shape)))

  def numpy(self) -> np.ndarray:
    return self._data().reshape(self.shape)

  def to(self, device: str) -> Tensor:
    """This Tensor's values on another device: realized where it is now, then placed on `device`. Buffers are host
    arrays on every device, so nothing is copied here; the device's program maps them when a kernel runs."""
    return Tensor._from_array(self._data(), self.shape, canonical(device))

  def item(self):
    if self.numel() != 1: raise UsageError(f"item() needs a tensor with one element, this one has shape {self.shape}")
    note_read()   # a capture (TinyJit) under way cannot replay Python that branches on this value
    return self.numpy().reshape(-1)[0].item()

  # ---- creation ----
  @staticmethod
  def full(shape: Sequence[int], value, dtype: DType | None = None) -> Tensor:
    shape = _shape_arg((shape,) if isinstance(shape, (tuple, list)) else (shape,), "full")
    if any(n < 0 for n in shape): raise UsageError(f"full: sizes must be non-negative, got {shape}")
    return _broadcast_to(UOp.const(value, dtype), tuple(shape))   # reshape((1,) * len(shape)).expand(shape)
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
    """Sizes are integers; one may be -1 (inferred), None keeps that axis' size."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
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

  def expand(self, *shape) -> Tensor:
    shape = _shape_arg(shape, "expand")
    if any(n < -1 for n in shape): raise UsageError(f"expand: sizes must be non-negative (or -1 to keep), got {shape}")
    shape = tuple(s if s != -1 else o for s, o in zip(shape, (1,) * (len(shape) - self.ndim) + self.shape))
    if len(shape) < self.ndim: raise UsageError(f"expand: {self.shape} has more dimensions than {shape}")
    x = self.reshape((1,) * (len(shape) - self.ndim) + self.shape) if len(shape) > self.ndim else self
    for a, b in zip(x.shape, shape):
      if a != b and a != 1: raise UsageError(f"expand: cannot expand {self.shape} to {shape} (only size-1 axes expand)")
    return x if shape == x.shape else x._mv(Ops.EXPAND, shape)

  def permute(self, *order) -> Tensor:
    order = tuple(_axis(a, self.ndim) for a in _shape_arg(order, "permute"))
    if sorted(order) != list(range(self.ndim)):
      raise UsageError(f"permute: {order} is not a permutation of the {self.ndim} axes of {self.shape}")
    return self if order == tuple(range(self.ndim)) else self._mv(Ops.PERMUTE, order)

  def transpose(self, a: int = -2, b: int = -1) -> Tensor:
    order = list(range(self.ndim))
    a, b = _axis(a, self.ndim), _axis(b, self.ndim)
    order[a], order[b] = order[b], order[a]
    return self.permute(order)

  @property
  def T(self) -> Tensor: return self.permute(tuple(range(self.ndim))[::-1])

  def shrink(self, arg: Sequence[tuple[int, int] | None]) -> Tensor:
    arg = tuple((0, s) if a is None else _shape_arg(tuple(a), "shrink") for a, s in zip(arg, self.shape))
    if len(arg) != self.ndim: raise UsageError(f"shrink: need one (begin, end) pair per axis of {self.shape}: {arg}")
    for (b, e), s in zip(arg, self.shape):
      if not 0 <= b <= e <= s:
        raise IndexError(f"shrink: range {b}:{e} is out of bounds for an axis of size {s} (shape {self.shape})")
    return self if all(a == (0, s) for a, s in zip(arg, self.shape)) else self._mv(Ops.SHRINK, arg)

  def pad(self, arg: Sequence, value=0.0) -> Tensor:
    """One (before, after) pair (or None) per axis, or PyTorch's flat form (last axis first: left, right, top, ...).
    A negative size cuts (a SHRINK); value fills the padding (PAD fills zeros; another value is a where)."""
    if all(isinstance(a, (int, np.integer)) for a in arg):   # the flat form
      if len(arg) % 2 or len(arg) > 2 * self.ndim: raise UsageError(f"pad: flat padding {tuple(arg)} for {self.shape}")
      pairs = [tuple(arg[k:k + 2]) for k in range(0, len(arg), 2)][::-1]
      arg = [(0, 0)] * (self.ndim - len(pairs)) + pairs
    arg = tuple((0, 0) if a is None else _shape_arg(tuple(a), "pad") for a in arg)
    if len(arg) != self.ndim or any(len(a) != 2 for a in arg):
      raise UsageError(f"pad: need one (before, after) pair per axis of {self.shape}, got {arg}")
    if any(lo < 0 or hi < 0 for lo, hi in arg):     # cut first, then pad what is left
      cut = [(max(-lo, 0), s - max(-hi, 0)) for (lo, hi), s in zip(arg, self.shape)]
      if any(b > e for b, e in cut): raise UsageError(f"pad: {arg} cuts more than the axes of {self.shape} hold")
      return self.shrink(cut).pad([(max(lo, 0), max(hi, 0)) for lo, hi in arg], value)
    if all(a == (0, 0) for a in arg): return self
    out = self._mv(Ops.PAD, arg)
    if value == 0: return out
    inside = Tensor.full(self.shape, True).pad(arg)
    return inside.where(out, value)

  def _mv(self, op: Ops, arg) -> Tensor: return Tensor(UOp(op, (self.uop,), arg))

  # ---- elementwise ----
  def _operand(self, x) -> Tensor:
    """x as a Tensor: a Python scalar becomes a constant of self's shape, in the dtype `self op x` computes in."""
    return x if isinstance(x, Tensor) else Tensor.full(self.shape, x, scalar_dtype(self.dtype, x))

  def _pair(self, other) -> tuple[Tensor, Tensor]:
    """self and other promoted to one dtype (NumPy/PyTorch: float beats int, wide beats narrow) and one shape."""
    other = self._operand(other)
    dt = self.dtype if other.dtype is self.dtype else least_upper_dtype(self.dtype, other.dtype)
    shape = self.shape if other.shape == self.shape else broadcast_shape(self.shape, other.shape)
    # broadcast_shape checked that both expand to shape: the nodes expand() builds, without its checks
    return _broadcast_to(self.cast(dt).uop, shape), _broadcast_to(other.cast(dt).uop, shape)

  def _binary(self, op: Ops, other, reverse: bool = False) -> Tensor:
    same = isinstance(other, Tensor) and other.dtype is self.dtype and other.shape == self.shape
    a, b = (self, other) if same else self._pair(other)   # nothing to promote or broadcast: the common case, fast
    if reverse: a, b = b, a
    return Tensor(UOp(op, (a.uop, b.uop)))
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
    return self * x.recip()
  def __rtruediv__(self, x): return (self if self.dtype.is_float else self.float()).recip() * x
  def __lt__(self, x): return self._binary(Ops.CMPLT, x)
  def __gt__(self, x): return self._binary(Ops.CMPLT, x, True)
  def __ge__(self, x): return (self < x).logical_not()
  def __le__(self, x): return (self > x).logical_not()
  def __eq__(self, x): return self.eq(x)   # elementwise, as in NumPy, PyTorch and tinygrad
  def __ne__(self, x): return self.ne(x)
  def isnan(self) -> Tensor: return self.ne(self) if self.dtype.is_float else Tensor.full(self.shape, False)
  def eq(self, x) -> Tensor: return self.ne(x).logical_not()
  def ne(self, x) -> Tensor: return self._binary(Ops.CMPNE, x)
  def logical_not(self) -> Tensor: return self.ne(True) if self.dtype is dtypes.bool else self.eq(0)
  def maximum(self, x) -> Tensor:
    out = self._binary(Ops.MAX, x)
    if not out.dtype.is_float: return out
    # C's (a>b)?a:b drops a NaN in a; NumPy's maximum propagates it from either side
    a = self.cast(out.dtype).expand(out.shape)
    return a.isnan().where(a, out)
  def minimum(self, x) -> Tensor:
    if not self.dtype.is_float and not (isinstance(x, Tensor) and x.dtype.is_float) and not isinstance(x, float):
      return ~((~self).maximum(~self._operand(x)))   # -x overflows at an integer's minimum; ~x never does
    return -((-self).maximum(-x if isinstance(x, Tensor) else -x))
  def where(self, a, b) -> Tensor:
    """self ? a : b, broadcast together; a and b are Tensors or scalars, promoted to one dtype."""
    if self.dtype is not dtypes.bool: raise TypeError(f"where: the condition must be bool, got {self.dtype}")
    ts = [x for x in (a, b) if isinstance(x, Tensor)]
    dt = least_upper_dtype(*(t.dtype for t in ts)) if ts else dtypes.from_py(a)
    for x in (a, b):
      if not isinstance(x, Tensor): dt = scalar_dtype(dt, x) if ts else least_upper_dtype(dt, dtypes.from_py(x))
    a = a.cast(dt) if isinstance(a, Tensor) else Tensor.full((), a, dt)
    b = b.cast(dt) if isinstance(b, Tensor) else Tensor.full((), b, dt)
    shape = broadcast_shape(self.shape, a.shape, b.shape)
    return Tensor(UOp(Ops.WHERE, (self.expand(shape).uop, a.expand(shape).uop, b.expand(shape).uop)))
  def _unary(self, op: Ops) -> Tensor:
    x = self if self.dtype.is_float else self.cast(dtypes.default_float)   # exp of an int is a float, as in PyTorch
    return Tensor(UOp(op, (x.uop,)))
  def exp2(self) -> Tensor: return self._unary(Ops.EXP2)
  def log2(self) -> Tensor: return self._unary(Ops.LOG2)
  def sqrt(self) -> Tensor: return self._unary(Ops.SQRT)
  def recip(self) -> Tensor: return self._unary(Ops.RECIP)
  reciprocal = recip
  def sin(self) -> Tensor: return self._unary(Ops.SIN)
  def exp(self) -> Tensor: return (self * LOG2E).exp2()     # one hardware-friendly exponential: exp(x) = 2^(x log2 e)
  def log(self) -> Tensor: return self.log2() * LN2
  def relu(self) -> Tensor:
    """max(x, 0), written so that its gradient at exactly 0 is 0 (as in PyTorch) and relu(nan) is nan."""
    if not self.dtype.is_float: return (self > 0).where(self, 0)
    return self.isnan().where(self, (self > 0).where(self, 0.0))
  def sigmoid(self) -> Tensor:
    """1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below: e = e^-|x| <= 1 never overflows, so no branch holds an inf
    (an inf in the branch not taken would still make its gradient 0 * inf = nan)."""
    neg = self < 0
    e = neg.where(self, -self).exp()
    return neg.where(e, 1.0) / (1 + e)
  def tanh(self) -> Tensor:
    """sign(x) (1 - e) / (1 + e) with e = e^(-2|x|) <= 1: finite for every x, and so is its gradient."""
    neg = self < 0
    e = (neg.where(self, -self) * 2).exp()
    t = (1 - e) / (1 + e)
    return neg.where(-t, t)
  def abs(self) -> Tensor: return self.maximum(-self) if self.dtype.is_float else (self < 0).where(-self, self)
  def square(self) -> Tensor: return self * self
  def cast(self, dtype: DType) -> Tensor:
    return self if dtype is self.dtype else Tensor(UOp(Ops.CAST, (self.uop,), None, dtype))
  def float(self) -> Tensor: return self.cast(dtypes.f32)

  # ---- reductions ----
  def _reduce(self, op: Ops, axis, keepdim: bool) -> Tensor:
    given = tuple(range(self.ndim)) if axis is None else axis if isinstance(axis, (tuple, list)) else (axis,)
    axes = tuple(sorted({_axis(a, self.ndim) for a in given}))
    if not axes or self.ndim == 0: return self
    out_shape = tuple(1 if k in axes else s for k, s in enumerate(self.shape))
    if any(self.shape[k] == 0 for k in axes):   # a reduction over nothing is its identity
      if op is Ops.MAX and prod(s for k, s in enumerate(self.shape) if k not in axes):   # an empty result needs none
        raise UsageError(f"max/min of an empty axis (shape {self.shape}, axes {axes}) has no value")
      out = Tensor.full(out_shape, 0 if op is Ops.ADD else 1, self.dtype)
      return out if keepdim else out.reshape(tuple(s for k, s in enumerate(self.shape) if k not in axes))
    keep = [k for k in range(self.ndim) if k not in axes]
    x = self.permute(keep + list(axes))                      # reduced axes last: REDUCE reduces the last n
    out = Tensor(UOp(Ops.REDUCE, (x.uop,), (op, len(axes))))
    return out.reshape(out_shape) if keepdim else out
  def sum(self, axis=None, keepdim: bool = False) -> Tensor:
    """Integers and bools sum in int64 (NumPy's and PyTorch's result dtype), so a count never wraps."""
    return self.cast(sum_dtype(self.dtype))._reduce(Ops.ADD, axis, keepdim)
  def max(self, axis=None, keepdim: bool = False) -> Tensor: return self._reduce(Ops.MAX, axis, keepdim)
  def min(self, axis=None, keepdim: bool = False) -> Tensor:
    if self.dtype.is_float: return -((-self).max(axis, keepdim))
    return ~((~self).max(axis, keepdim))          # bools and integers: ~ reverses the order and never overflows
  def any(self, axis=None, keepdim: bool = False) -> Tensor: return self.bool().max(axis, keepdim)
  def all(self, axis=None, keepdim: bool = False) -> Tensor: return self.bool().min(axis, keepdim)
  def mean(self, axis=None, keepdim: bool = False) -> Tensor:
    x = self if self.dtype.is_float else self.cast(dtypes.default_float)
    out = x.sum(axis, keepdim)
    return out * (out.numel() / x.numel()) if x.numel() else out * math.nan

  def softmax(self, axis: int = -1) -> Tensor:
    if not self.numel(): return self   # nothing to normalize (and an empty axis has no max)
    m = self - self.max(axis, keepdim=True)
    e = m.exp()
    return e / e.sum(axis, keepdim=True)

  def log_softmax(self, axis: int = -1) -> Tensor:
    if not self.numel(): return self
    m = self - self.max(axis, keepdim=True)
    return m - m.exp().sum(axis, keepdim=True).log()

  # ---- matmul ----
  def matmul(self, w: Tensor) -> Tensor:
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
    xs = _broadcast_to(UOp(Ops.RESHAPE, (x.uop,), (*x.shape[:-1], 1, k)), (*batch, n, m, k))
    yt = UOp(Ops.PERMUTE, (y.uop,), (*range(len(ysh)), len(ysh) + 1, len(ysh)))
    ys = _broadcast_to(UOp(Ops.RESHAPE, (yt,), (*ysh, 1, m, k)), (*batch, n, m, k))
    out = (xs * ys).sum(-1)
    if self.ndim == 1: out = out.reshape(*out.shape[:-2], out.shape[-1])
    if w.ndim == 1: out = out.reshape(out.shape[:-1])
    return out
  __matmul__ = dot = matmul
  def __rmatmul__(self, x): return Tensor(np.asarray(x)).matmul(self)

  def __setitem__(self, key, value):
    raise TypeError("a Tensor is immutable: build a new one with where(), masked_fill() or cat() instead of x[...] = v")

  # ---- graph ----
  def detach(self) -> Tensor: return Tensor(UOp(Ops.DETACH, (self.uop,)))
  def contiguous(self) -> Tensor: return Tensor(UOp(Ops.STAGE, (self.uop,)))

  def backward(self) -> None:
    """Gradients of this scalar with respect to every tensor that requires them, stored in .grad."""
    autograd.backward(self)


def _flat(u: UOp) -> np.ndarray:
  """The array under a realized tensor's uop (a BUFFER, or RESHAPEs of one)."""
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u.arg.array


def gradient(f: Tensor, wrt: list[Tensor]) -> list[Tensor]:
  """d f / d w for every w in wrt, as lazy Tensors (see uopc.autograd)."""
  return autograd.gradient(f, wrt)


def _tensor_data(flat: np.ndarray, dtype: DType, device: str | None) -> TensorData:
  """The arg of a data BUFFER: plain TensorData (DEVICE= decides where it runs) or placed on a device."""
  return TensorData(flat, dtype, (flat.size,)) if device is None else DeviceData(flat, dtype, (flat.size,),
                                                                                   canonical(device))

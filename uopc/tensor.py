"""The Tensor: a lazy n-dimensional array. Operations build a graph of UOps; realize() compiles and runs it.

  q, k, v = Tensor(a), Tensor(b), Tensor(c)                        # (N, D) each, copied from NumPy
  out = (q @ k.T * (1 / math.sqrt(64))).softmax(-1) @ v           # nothing has run yet
  out.numpy()                                                      # make_plan, compile, run
"""
from __future__ import annotations
from dataclasses import dataclass
from operator import attrgetter
from typing import ClassVar, Sequence
import numpy as np
from uopc import autograd
from uopc.capture import note_read, recording
from uopc.uop import UOp, Ops, substitute
from uopc.dtype import DType, dtypes, from_np, to_array, to_dtype
from uopc.helpers import DEBUG, DEVICE, MARCH, TC, cache
from uopc.kernelize import TensorData, realize, is_contiguous_buffer
from uopc.opt import DefaultOpt
from uopc.options import Options
from uopc.mixin.elementwise import ElementwiseMixin
from uopc.mixin.movement import MovementMixin
from uopc.mixin.reduce import ReduceMixin
from uopc.mixin.indexing import IndexingMixin
from uopc.mixin.functional import NNMixin
from uopc.mixin.torchlike import TorchMixin
from uopc.mixin.trig import TrigMixin
from uopc.mixin.shapes import ONLY_INT, broadcast_shape, shape_arg as _shape_arg  # noqa: F401  (broadcast_shape: ch. 9)
from uopc.device import canonical
from uopc.errors import UsageError
from uopc.grad_mode import GradMode, check_reads, enable_grad, replaced
from uopc.bounds import flags, flags_of, raise_if_out_of_range

_requires_grad = autograd.requires_grad_leaves   # the leaves backward() fills .grad on
_fulls: dict[tuple, UOp] = cache("tensor.fulls", {})   # Tensor.full's (shape, dtype, value) -> the node it built
_SCALAR_TYPES = {bool, int, float}
_NO_DETACH = {Ops.BUFFER, Ops.CONST, Ops.DETACH}   # under no_grad: nodes that carry no gradient as they are


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


# each mixin builds on the ones after it (uopc.mixin); Tensor gives them their primitives: the graph nodes and data
class Tensor(TorchMixin, NNMixin, IndexingMixin, ReduceMixin, MovementMixin, TrigMixin, ElementwiseMixin):
  fuse_reduce: bool = False     # True: do not cut kernels at REDUCEs; fused consumers recompute them (chapter 11)
  opt = DefaultOpt              # the optimizer realize uses: layout(roots) and lower(body, out)
  online_softmax: bool = False  # True: softmax groups become one online pass (uopc.codegen.online; chapter 11 appendix)
  # per tensor, set only when they change (a new Tensor is made at every op: its __init__ sets only .uop)
  _grad: Tensor | None = None   # .grad: backward() fills it
  lazy: UOp | None = None       # once realized: the graph that computed it (autograd.made_from keeps it for backward)
  _home: UOp | None = None      # set by assign: the buffer the next realize writes this tensor's value into
  _tail: UOp | None = None      # set by preserve: the graph over kept buffers that every read of it computes

  def __init__(self, data, dtype: DType | None = None, requires_grad: bool = False, device: str | None = None):
    if isinstance(data, UOp):   # the common case: a node a Tensor method just built
      if device is not None: raise TypeError("Tensor(uop, device=...): use .to(device)")
      self.uop = data
      if not GradMode.enabled and data.op not in _NO_DETACH and not is_contiguous_buffer(data):
        self.uop = UOp(Ops.DETACH, (data,))   # no_grad: backward stops here (uopc.grad_mode)
    else:
      arr = to_array(data, dtype)
      dt = from_np(arr.dtype)
      flat = np.array(arr, order="C", copy=True).reshape(-1)   # a copy: later changes to the caller's array stay out
      buf = UOp(Ops.BUFFER, (), _tensor_data(flat, dt, device))
      self.uop = buf if arr.shape == (flat.size,) else UOp(Ops.RESHAPE, (buf,), tuple(arr.shape))
    if requires_grad: autograd.set_requires_grad(self, True)   # a new object is in no set yet: nothing to discard

  @property
  def grad(self) -> Tensor | None:
    """The gradient backward() computed: lazy until a realize, and realized with any realize that overwrites a buffer
    it reads (an optimizer's step), so that it is the value computed, not one recomputed at the new parameters."""
    return self._grad
  @grad.setter
  def grad(self, g: Tensor | None) -> None:
    self._grad = g
    if g is not None and not g._holds_data(): autograd.pending.add(g)

  def requires_grad_(self, requires_grad: bool = True) -> Tensor:
    """PyTorch's: set requires_grad in place (p.requires_grad_(False) freezes a parameter); returns self."""
    self.requires_grad = requires_grad
    return self
  @property
  def requires_grad(self) -> bool: return self in _requires_grad
  @requires_grad.setter
  def requires_grad(self, v: bool) -> None:
    autograd.set_requires_grad(self, v)

  # ---- properties ----
  # the uop's, read by attrgetter in C: every Tensor method reads shapes and dtypes, and a Python getter is a frame each
  shape = property(attrgetter("uop.shape"), doc="The tensor's shape, a tuple of ints.")
  dtype = property(attrgetter("uop.dtype"), doc="The tensor's DType.")
  @property
  def device(self) -> str:
    """Where this Tensor is realized: the device its data was placed on, else DEVICE= (CPU by default)."""
    return device_of(self.uop) or canonical(DEVICE.value)
  def __repr__(self): return f"<Tensor shape={self.shape} dtype={self.dtype}>"
  def __bool__(self) -> bool:
    if self.numel() != 1:
      raise TypeError(f"the truth value of a Tensor of shape {self.shape} is ambiguous; use .any() or .all()")
    return bool(self.item())

  # ---- running ----
  @staticmethod
  def options() -> Options:
    """The options a realize runs with now: the book's switches on Tensor, DEVICE= and DEBUG=, read once."""
    return Options(Tensor.fuse_reduce, Tensor.opt, Tensor.online_softmax, DEVICE.value, DEBUG.value, TC.value,
                   march=MARCH.value)

  def realize(self, *others: Tensor) -> Tensor:
    """Compute this tensor, and any others given, in one plan (Tensor.realize(loss, *grads, *updates)): each then
    holds its data. A tensor given a new value by assign() gets it written into its own buffer."""
    todo = [t for t in dict.fromkeys((self, *others))
            if t._home is not None or not is_contiguous_buffer(t.uop) or t._tail is not None]
    if not todo: return self
    for t in todo:   # a value kept by preserve: computed again from the buffers it reads (a replay refreshes them)
      if t._tail is not None: t.uop = t._tail
    roots = [t.uop for t in todo]
    homes = {t._home for t in todo if t._home is not None}
    # buffers about to be overwritten: pending .grads are realized in this plan too (what they read, computed now)
    kept, extra = autograd.beside(roots, homes)
    sink = UOp(Ops.SINK, (*roots, *extra))   # held: its toposort (tracks) is cached for realize's normalize
    if replaced: check_reads(sink.toposort())   # a buffer written in place since this graph was built
    bounds = flags_of(sink.toposort()) if flags else []   # computed indices: their range flags, computed alongside
    placed = device_of(sink)   # Tensor(x, device=...) or .to(...)
    tracked = GradMode.enabled and autograd.tracks([*roots, *extra])
    options, seen = Tensor.options() if placed is None else Tensor.options().replace(device=placed), {}
    observe = (lambda plan, arrays, outs: seen.update(plan=plan, arrays=arrays)) if recording() is not None else None
    # assign: the new value goes into the buffer the tensor already had (realize writes it back, or in place)
    writes = [(k, _flat(t._home)) for k, t in enumerate(todo) if t._home is not None]
    outs = realize([*roots, *extra, *[f for f, _ in bounds]], options=options, observe=observe, writes=writes)
    if bounds: raise_if_out_of_range(bounds, outs[len(roots) + len(extra):])
    for t, out in zip(todo, outs):
      t.lazy = t.uop   # the graph that computed it
      if t._home is not None:
        t.uop, t._home = t._home, None
      else:
        t.uop = Tensor._from_array(out, t.shape, placed).uop
        if tracked: autograd.record(t.uop, t.lazy)   # backward walks through it, as PyTorch's
    if kept:
      wanted = {u for _, us in kept for u in us}
      homes_now = {id(a) for _, a in writes}   # an output written in place is its home, which a later assign rewrites
      done = {u: Tensor._from_array(out.copy() if id(out) in homes_now else out, u.shape, placed).uop
              for u, out in zip([*roots, *extra], outs) if u in wanted}
      for t, us in kept:
        t.uop = substitute(t.uop, {u: done[u] for u in us})
        if not is_contiguous_buffer(t.uop): t._tail = t.uop
      # a replay (uopc.jit) writes its outputs into the arrays these values now read
      writes = writes + [(len(roots) + k, outs[len(roots) + k]) for k in range(len(extra))]
    if (rec := recording()) is not None:   # a replay checks the flags' outputs as this realize did
      checks = [(len(roots) + len(extra) + j, message) for j, (_, message) in enumerate(bounds)]
      rec.append((seen["plan"], options, seen["arrays"], outs, writes, checks))
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

  # ---- in place: PyTorch's add_, mul_, ... (uopc.grad_mode: no_grad and the version-counter rule) ----
  def _inplace(self, value, what: str) -> Tensor:
    """This Tensor object takes `value` (broadcast to its shape, cast to its dtype). A Tensor holding data has it
    written into its own buffer (an optimizer, a checkpoint and a captured step see it) and a new node over that
    memory: graphs built before name the old node, whose memory changed, and raise (uopc.grad_mode). A lazy Tensor
    takes value's graph; graphs built before keep the old value, which nothing overwrote."""
    if GradMode.enabled and self.requires_grad:
      raise RuntimeError(f"{what}: a leaf Tensor that requires grad is being used in an in-place operation (PyTorch's "
                         "rule); do it under no_grad()")
    value = value if isinstance(value, Tensor) else Tensor.full(self.shape, value, self.dtype)
    if value.shape != self.shape:
      if broadcast_shape(value.shape, self.shape) != self.shape:
        raise UsageError(f"{what}: a value of shape {value.shape} does not broadcast to the tensor's {self.shape}")
      value = value._broadcast(self.shape)
    value, old = value.cast(self.dtype), self.uop
    # data, unless a gradient could flow through the new value (x.copy_(w * 2) with w a parameter: kept as a graph)
    if self._holds_data() and self._home is None and not (GradMode.enabled and autograd.tracks([value.uop])):
      self.assign(value).realize()
      self.uop = Tensor._from_array(_flat(self.uop), self.shape, device_of(old)).uop
      while True:   # the old nodes (a BUFFER, RESHAPEs of it) are this memory's alone: no other graph builds them
        replaced[old] = what
        if old.op is not Ops.RESHAPE: break
        old = old.src[0]
    else: self.uop = value.uop
    return self

  def add_(self, other, alpha=1) -> Tensor: return self._inplace(self + _scaled(other, alpha), "add_")
  def sub_(self, other, alpha=1) -> Tensor: return self.add_(-other if alpha == 1 else other, -alpha)
  def mul_(self, other) -> Tensor: return self._inplace(self * other, "mul_")
  def div_(self, other) -> Tensor: return self._inplace(self / other, "div_")
  def zero_(self) -> Tensor: return self._inplace(0, "zero_")
  def fill_(self, value) -> Tensor: return self._inplace(value, "fill_")
  def copy_(self, src) -> Tensor: return self._inplace(src if isinstance(src, Tensor) else Tensor(src), "copy_")
  def clamp_(self, min=None, max=None) -> Tensor: return self._inplace(self.clip(min, max), "clamp_")  # noqa: A002
  clip_ = clamp_
  def masked_fill_(self, mask, value) -> Tensor: return self._inplace(self.masked_fill(mask, value), "masked_fill_")
  def uniform_(self, a: float = 0.0, b: float = 1.0) -> Tensor:
    return self._inplace(Tensor.uniform(*self.shape, low=a, high=b, dtype=self.dtype), "uniform_")
  def normal_(self, mean: float = 0.0, std: float = 1.0) -> Tensor:
    return self._inplace(Tensor.normal(*self.shape, mean=mean, std=std, dtype=self.dtype), "normal_")

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
    tracked, graph, was = autograd.tracks([self.uop]), self.uop, self.device
    out = Tensor._from_array(self._data(), self.shape, canonical(device))
    if tracked:   # the same device: the graph; another: backward() raises (a graph spans one device)
      autograd.record(out.uop, graph if canonical(device) == was else autograd.Opaque("Tensor.to(device)", (graph,)))
    return out

  def item(self):
    if self.numel() != 1: raise UsageError(f"item() needs a tensor with one element, this one has shape {self.shape}")
    note_read()   # a capture (TinyJit) under way cannot replay Python that branches on this value
    return self.numpy().reshape(-1)[0].item()

  # ---- creation ----
  @staticmethod
  def full(shape: Sequence[int], value, dtype: DType | None = None) -> Tensor:
    # every Python scalar in an expression (x * 2) is a full(): its nodes are looked up in a memo by the arguments, not
    # checked and built again (the same nodes, one dict lookup). A zero is keyed by its repr, as 0.0 == -0.0 == False;
    # sizes only when all are ints, as a float size would find its integer's entry
    if dtype is not None and type(dtype) is not DType: dtype = to_dtype(dtype)
    key = (shape, dtype, type(value), value if value else repr(value)) if type(value) in _SCALAR_TYPES else None
    if key is not None and type(shape) is tuple and ONLY_INT >= {*map(type, shape)} and (u := _fulls.get(key)):
      return Tensor(u)
    if not GradMode.enabled:   # a constant has no gradient to stop: built (and kept in the memo) without DETACHes
      with enable_grad(): return Tensor.full(shape, value, dtype)
    shape = _shape_arg((shape,) if isinstance(shape, (tuple, list)) else (shape,), "full")
    if any(n < 0 for n in shape): raise UsageError(f"full: sizes must be non-negative, got {shape}")
    t = Tensor(UOp.const(value, dtype))._broadcast(tuple(shape))   # reshape((1,) * len(shape)).expand(shape)
    if key is not None and type(key[0]) is tuple:
      if len(_fulls) >= 4096: _fulls.clear()   # a bound: a program may use ever new constants
      _fulls[key] = t.uop
    return t
  @staticmethod
  def zeros(*shape, dtype: DType = dtypes.f32) -> Tensor: return Tensor.full(_shape_arg(shape), 0, dtype)
  @staticmethod
  def ones(*shape, dtype: DType = dtypes.f32) -> Tensor: return Tensor.full(_shape_arg(shape), 1, dtype)
  @staticmethod
  def randn(*shape, seed: int = 0) -> Tensor:
    return Tensor(np.random.default_rng(seed).standard_normal(_shape_arg(shape)).astype(np.float32))

  # ---- the graph nodes the mixins are written with ----
  def _alu(self, op: Ops, *srcs: Tensor) -> Tensor: return Tensor(UOp(op, (self.uop, *[s.uop for s in srcs])))
  def _mv(self, op: Ops, arg) -> Tensor: return Tensor(UOp(op, (self.uop,), arg))
  def _rop(self, op: Ops, n: int) -> Tensor: return Tensor(UOp(Ops.REDUCE, (self.uop,), (op, n)))
  def _holds_data(self) -> bool: return is_contiguous_buffer(self.uop)
  def _custom_grad(self, srcs: tuple, rule) -> Tensor:
    autograd.custom_rule(self.uop, tuple(s.uop for s in srcs), rule)
    return self
  def cast(self, dtype: DType) -> Tensor:
    if type(dtype) is not DType: dtype = to_dtype(dtype)   # "float16", "long", np.int32, torch.float32
    return self if dtype is self.dtype else Tensor(UOp(Ops.CAST, (self.uop,), None, dtype))

  def __setitem__(self, key, value):
    raise TypeError("a Tensor is immutable: build a new one with where(), masked_fill() or cat() instead of x[...] = v")

  # ---- graph ----
  def detach(self) -> Tensor: return Tensor(UOp(Ops.DETACH, (self.uop,)))
  def contiguous(self) -> Tensor: return Tensor(UOp(Ops.STAGE, (self.uop,)))
  def clone(self) -> Tensor: return Tensor(self.uop)   # a new Tensor on the same (immutable) graph

  def backward(self) -> None:
    """Gradients of this scalar with respect to every tensor that requires them, stored in .grad."""
    root = self.lazy if self.lazy is not None and self._holds_data() else self.uop
    if root.op is Ops.DETACH:   # PyTorch raises here too, rather than filling .grads with zeros
      raise RuntimeError("backward: this tensor does not require grad and has no grad_fn: it was built under "
                         "no_grad() or detached")
    autograd.backward(self)


def _scaled(x, alpha): return x if alpha == 1 else x * alpha


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

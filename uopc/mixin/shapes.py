"""Shapes and axes as the Tensor front end checks them: one place for the rules every Tensor method shares."""
from __future__ import annotations
import functools
import numpy as np
from uopc.errors import UsageError
from uopc.helpers import cache

ONLY_INT = {int}   # {*map(type, xs)} <= ONLY_INT: every x a Python int (no bool, float or NumPy integer), tested in C


def axis_index(axis: int, ndim: int) -> int:
  if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
    raise TypeError(f"an axis must be an integer, got {axis!r} ({type(axis).__name__})")
  if not -max(ndim, 1) <= axis < max(ndim, 1):   # a 0-d tensor has axes 0 and -1, as in PyTorch
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
      raise UsageError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast together (axis {k})")
    out.append(sizes.pop() if sizes else 1)
  return tuple(out)


_broadcasts: dict[tuple, tuple[int, ...]] = cache("shapes.broadcasts", {})


def broadcast_shapes_of(*shapes: tuple[int, ...]) -> tuple[int, ...]:
  """broadcast_shape of tensors' own shapes (tuples of ints, as UOp.shape gives them), memoized: the elementwise ops
  ask it at nearly every node they build, for a few distinct shapes (a training step: a few hundred calls, a dozen
  pairs). Only tensors' shapes: a float or bool size would find its integer's entry."""
  if (out := _broadcasts.get(shapes)) is None:
    if len(_broadcasts) >= 4096: _broadcasts.clear()   # a bound: a program may use ever new shapes
    out = _broadcasts[shapes] = broadcast_shape(*shapes)   # raises, and caches nothing, if they do not broadcast
  return out


def shape_arg(shape, what: str = "shape") -> tuple[int, ...]:
  """Sizes as Python ints: one tuple/list or several integers (NumPy integers too). Anything else raises before a
  node is built: a float size would hash like its integer and poison the node cache."""
  if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
  if all(type(s) is int for s in shape): return tuple(shape)   # the common case, checked at C speed (bool is no int)
  for s in shape:
    if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)):
      raise TypeError(f"{what}: sizes must be integers, got {s!r} ({type(s).__name__}) in {tuple(shape)}")
  return tuple(int(s) for s in shape)


def accept_dim(cls: type, names: tuple[str, ...]) -> None:
  """Each method of cls named takes PyTorch's `dim=` for its `axis` (x.sum(dim=1), x.argmax(dim=1, keepdim=True),
  x.log_softmax(dim=1): what PyTorch's own MNIST example writes); both at once is a TypeError."""
  for name in names:
    fn = cls.__dict__[name]
    @functools.wraps(fn)
    def with_dim(self, *args, _fn=fn, **kwargs):
      if "dim" in kwargs:
        if args or "axis" in kwargs:
          raise TypeError(f"{_fn.__name__}: got dim= and an axis; dim is PyTorch's name for axis: give one")
        kwargs["axis"] = kwargs.pop("dim")
      return _fn(self, *args, **kwargs)
    setattr(cls, name, with_dim)

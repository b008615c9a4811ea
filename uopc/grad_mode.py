"""Whether gradients are recorded (PyTorch's no_grad, enable_grad), and which values an in-place op replaced.

  with no_grad(): acc = (model(x).argmax(1) == y).mean()     # evaluation: nothing here reaches a .grad
  @no_grad()                                                 # or as a decorator, with or without the parentheses
  def evaluate(model, x): ...

A Tensor built while gradients are off is the DETACH of its graph (kernelize strips DETACH: the kernels are the
same), so a backward() through it stops there, as PyTorch's does. A Tensor given requires_grad=True is still a leaf.

In-place ops (Tensor.add_, mul_, ...) give a Tensor a new value. On a Tensor that holds data, the new value is
written into its buffer, and `replaced` remembers the buffer's old node (graphs built before name it; the Tensor gets
a new node over the same memory). PyTorch's version-counter rule: backward() raises where a rule needs a value that
an in-place op has since overwritten, and realizing a graph that reads such a buffer raises too (it would read the
new value where the old was meant). A lazy Tensor's old value is a graph nothing overwrites, and graphs are shared
(identical nodes are one object), so there is nothing to mark: where PyTorch raises for a non-leaf changed in place
after it was saved, uopc differentiates the value that was used.
"""
from __future__ import annotations
import functools
import weakref
from uopc.ops import Ops


class GradMode:
  enabled: bool = True


def is_grad_enabled() -> bool: return GradMode.enabled


class _GradSwitch:
  """A context manager and decorator that sets the gradient mode to `mode`, then restores the one before."""
  mode = True

  def __init__(self, fn=None):
    self._fn, self._before = fn, []
    if fn is not None: functools.update_wrapper(self, fn)

  def __enter__(self):
    self._before.append(GradMode.enabled)
    GradMode.enabled = self.mode
    return self

  def __exit__(self, *exc) -> None: GradMode.enabled = self._before.pop()

  def __call__(self, *args, **kwargs):
    if self._fn is not None:   # @no_grad without parentheses: this object is the wrapped function
      with type(self)(): return self._fn(*args, **kwargs)
    if len(args) != 1 or kwargs or not callable(args[0]):
      raise TypeError(f"{type(self).__name__}() decorates one function, got {args!r} {kwargs!r}")
    return type(self)(args[0])


class no_grad(_GradSwitch):
  """PyTorch's torch.no_grad: Tensors built inside record no gradient."""
  mode = False


class enable_grad(_GradSwitch):
  """PyTorch's torch.enable_grad: gradients recorded again inside a no_grad."""
  mode = True


# ---- in-place versions ----
replaced: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # a BUFFER's old node -> the op ("add_")
# rules that never read their sources' values: a value replaced under them is not "saved for backward"
LINEAR = {Ops.ADD, Ops.CAST, Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK, Ops.PAD, Ops.STAGE,
          Ops.DETACH, Ops.STACK}


def check_saved(topo) -> None:
  """PyTorch's version-counter rule over the nodes a backward walks: raise if a rule reads a replaced value."""
  if not replaced: return
  for u in topo:
    if u.op in LINEAR or (u.op is Ops.REDUCE and u.arg[0] is Ops.ADD): continue
    for s in u.src:
      if s in replaced:
        raise RuntimeError(f"one of the variables needed for gradient computation has been modified by an inplace "
                           f"operation ({replaced[s]}): its old value was saved for backward by {u.op.name}")


def check_reads(topo) -> None:
  """A graph that reads a buffer an in-place op has written since would compute with the new value: refuse it."""
  if not replaced: return
  for u in topo:
    if u.op is Ops.BUFFER and u in replaced:
      raise RuntimeError(f"this value reads a tensor that {replaced[u]} changed in place after the value was built; "
                         "build it again from the tensor")

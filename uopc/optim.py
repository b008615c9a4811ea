"""Optimizers: SGD and AdamW, with PyTorch's zero_grad() and step().

  opt = AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
  logits, loss = model(x, y)
  opt.zero_grad(); loss.backward()        # .grad: lazy Tensors, nothing has run
  opt.step(loss)                          # ONE plan: the loss, every gradient and every update, realized together

step() builds each parameter's new value (and the optimizer's state: momentum, Adam's m and v) as lazy Tensors and
realizes them in one plan together with any tensors passed to it (the loss). Everything that changes from step to
step (the learning rate, Adam's bias corrections) enters as a one-element buffer, never as a constant, so the
graph of step 2 has the same shape as step 1's and the cached plan is reused. The new values then replace each
parameter's buffer: the Tensor objects the model holds are the same ones.
"""
from __future__ import annotations
import numpy as np
from uopc.dtype import np_dtype
from uopc.kernelize import is_contiguous_buffer
from uopc.nn_layers import requires_grad_ids
from uopc.tensor import Tensor


def realize(*tensors: Tensor) -> list[Tensor]:
  """Realize all of tensors in one plan (each Tensor's graph replaced by its data, as Tensor.realize does)."""
  from uopc.kernelize import realize as run, TensorData
  from uopc.uop import UOp, Ops
  todo = [t for t in tensors if not is_contiguous_buffer(t.uop)]
  if todo:
    outs = run([t.uop for t in todo], options=Tensor.options())
    for t, a in zip(todo, outs):
      t.lazy = t.uop   # the graph that computed it, so backward() after realize still works
      buf = UOp(Ops.BUFFER, (), TensorData(a, t.dtype, (a.size,)))
      t.uop = buf if t.shape == (a.size,) else UOp(Ops.RESHAPE, (buf,), t.shape)
  return list(tensors)


def _scalar(value: float, like: Tensor) -> Tensor:
  """A 0-d buffer of like's dtype: a number that may change every step without changing the graph."""
  return Tensor(np.array(value, np_dtype(like.dtype)))


class Optimizer:
  def __init__(self, params: list[Tensor], lr: float):
    uniq: list[Tensor] = []
    for p in params:
      if not isinstance(p, Tensor): raise TypeError(f"{type(self).__name__}: parameters must be Tensors, got {p!r}")
      if all(p is not q for q in uniq): uniq.append(p)   # a tied weight is updated once
    if not uniq: raise ValueError(f"{type(self).__name__}: no parameters to optimize")
    marked = requires_grad_ids()
    for p in uniq:
      if id(p) not in marked: p.requires_grad = True
    self.params, self.lr, self.steps = uniq, lr, 0

  def zero_grad(self) -> None:
    for p in self.params: p.grad = None

  def _updates(self) -> list[tuple[Tensor, Tensor]]:
    """(target, new value) pairs: each parameter and each state tensor with its lazily computed next value."""
    raise NotImplementedError

  def schedule_step(self) -> list[Tensor]:
    """The step as lazy Tensors, not yet run: realize them (with the loss) in one plan, then call commit()."""
    self.steps += 1
    self._pending = self._updates()
    return [new for _, new in self._pending]

  def commit(self) -> None:
    """Each target takes its realized new value: a parameter keeps its identity, its data is the new buffer."""
    for target, new in self._pending:
      target.uop, target.lazy = new.uop, None
    self._pending = []

  def step(self, *also: Tensor) -> None:
    """One update; tensors in `also` (the loss) are realized in the same plan."""
    missing = [k for k, p in enumerate(self.params) if p.grad is None]
    if len(missing) == len(self.params): raise RuntimeError("step: no parameter has a .grad; call loss.backward()")
    realize(*also, *self.schedule_step())
    self.commit()


class SGD(Optimizer):
  """p <- p - lr (g + wd p); with momentum b <- mu b + g first and b in place of g (PyTorch's SGD)."""
  def __init__(self, params, lr: float = 1e-2, momentum: float = 0.0, weight_decay: float = 0.0):
    super().__init__(params, lr)
    self.momentum, self.weight_decay = momentum, weight_decay
    self.b = [Tensor(np.zeros(p.shape, np_dtype(p.dtype))) for p in self.params] if momentum else []

  def _updates(self):
    out = []
    for k, p in enumerate(self.params):
      if p.grad is None: continue
      g = p.grad.detach() + p.detach() * self.weight_decay if self.weight_decay else p.grad.detach()
      if self.momentum:
        b = self.b[k] * self.momentum + g
        out.append((self.b[k], b))
        g = b
      out.append((p, p.detach() - g * _scalar(self.lr, p)))
    return out


class AdamW(Optimizer):
  """Adam with decoupled weight decay (Loshchilov and Hutter; PyTorch's AdamW), at step t:
    m <- b1 m + (1 - b1) g          v <- b2 v + (1 - b2) g^2
    p <- p (1 - lr wd) - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)"""
  def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
               weight_decay: float = 0.01):
    super().__init__(params, lr)
    self.b1, self.b2 = betas
    self.eps, self.weight_decay = eps, weight_decay
    self.m = [Tensor(np.zeros(p.shape, np_dtype(p.dtype))) for p in self.params]
    self.v = [Tensor(np.zeros(p.shape, np_dtype(p.dtype))) for p in self.params]

  def _updates(self):
    t, out = self.steps, []
    for k, p in enumerate(self.params):
      if p.grad is None: continue
      g = p.grad.detach()
      m = self.m[k] * self.b1 + g * (1 - self.b1)
      v = self.v[k] * self.b2 + g * g * (1 - self.b2)
      # step-dependent numbers as buffers: same graph every step
      lr, c1, c2 = _scalar(self.lr, p), _scalar(1 / (1 - self.b1 ** t), p), _scalar(1 / (1 - self.b2 ** t), p)
      decay = _scalar(1 - self.lr * self.weight_decay, p)
      new = p.detach() * decay - lr * (m * c1) / ((v * c2).sqrt() + self.eps)
      out += [(self.m[k], m), (self.v[k], v), (p, new)]
    return out


# ---- references: one step in NumPy (float64), for the tests and the chapter ----
def sgd_step_numpy(p, g, b, lr, momentum=0.0, weight_decay=0.0):
  g = g + weight_decay * p
  if momentum: b = momentum * b + g; g = b
  return p - lr * g, b


def adamw_step_numpy(p, g, m, v, t, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01):
  p = p * (1 - lr * weight_decay)
  m = b1 * m + (1 - b1) * g
  v = b2 * v + (1 - b2) * g * g
  mhat, vhat = m / (1 - b1 ** t), v / (1 - b2 ** t)
  return p - lr * mhat / (np.sqrt(vhat) + eps), m, v

"""Optimizers: SGD and AdamW, with PyTorch's zero_grad() and step().

  opt = AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
  logits, loss = model(x, y)
  opt.zero_grad(); loss.backward()        # .grad: lazy Tensors, nothing has run
  opt.step(loss)                          # ONE plan: the loss, every gradient and every update, realized together

step() builds each parameter's new value (and the optimizer's state: momentum, Adam's m and v) as lazy Tensors,
assign()s each to its tensor, and realizes them in one plan together with any tensors passed to it (the loss):
the new values are written into the tensors' own buffers. Everything that changes from step to step (the learning
rate, Adam's b1^t and b2^t) is a tensor too, never a Python constant in the graph, so the graph of step 2 has the
same shape as step 1's, the cached plan is reused, and uopc.jit.TinyJit can capture and replay the step.
"""
from __future__ import annotations
import numpy as np
from uopc.dtype import np_dtype
from uopc.nn.layers import requires_grad_ids
from uopc.tensor import Tensor


def realize(*tensors: Tensor) -> list[Tensor]:
  """Realize all of tensors in one plan (Tensor.realize(a, *others)); returns them."""
  if tensors: tensors[0].realize(*tensors[1:])
  return list(tensors)


def _data_tensor(value, like: Tensor) -> Tensor:
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
    self.params, self.steps = uniq, 0
    self._lr = _data_tensor(lr, uniq[0])

  @property
  def lr(self) -> float: return float(self._lr.numpy())
  @lr.setter
  def lr(self, value: float) -> None:
    """Written into the learning rate's own buffer: the graph and a captured step (uopc.jit) both see it."""
    np.copyto(self._lr._data(), value)

  def _scalar(self, t: Tensor, p: Tensor) -> Tensor: return t if t.dtype is p.dtype else t.cast(p.dtype)

  def zero_grad(self) -> None:
    for p in self.params: p.grad = None

  def _updates(self) -> list[tuple[Tensor, Tensor]]:
    """(target, new value) pairs: each parameter and each state tensor with its lazily computed next value."""
    raise NotImplementedError

  def schedule_step(self) -> list[Tensor]:
    """The next values of the parameters and the optimizer's state, as lazy Tensors; nothing runs or changes."""
    return [new for _, new in self._updates()]

  def step(self, *also: Tensor) -> None:
    """One update: every parameter and state tensor assigned its new value (into its own buffer) and realized in
    one plan together with the tensors in `also` (the loss)."""
    if all(p.grad is None for p in self.params): raise RuntimeError("step: no parameter has a .grad; call backward()")
    targets = [target.assign(new) for target, new in self._updates()]
    realize(*also, *targets)
    self.steps += 1


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
      out.append((p, p.detach() - g * self._scalar(self._lr, p)))
    return out


class AdamW(Optimizer):
  """Adam with decoupled weight decay (Loshchilov and Hutter; PyTorch's AdamW), at step t:
    m <- b1 m + (1 - b1) g          v <- b2 v + (1 - b2) g^2
    p <- p (1 - lr wd) - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
  b1^t and b2^t are tensors multiplied by b1 and b2 at every step (tinygrad's way): the bias corrections are part of
  the graph, so a captured step replays them too."""
  def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
               weight_decay: float = 0.01):
    super().__init__(params, lr)
    self.b1, self.b2 = betas
    self.eps, self.weight_decay = eps, weight_decay
    self.m = [Tensor(np.zeros(p.shape, np_dtype(p.dtype))) for p in self.params]
    self.v = [Tensor(np.zeros(p.shape, np_dtype(p.dtype))) for p in self.params]
    self.b1_t, self.b2_t = _data_tensor(1.0, self.params[0]), _data_tensor(1.0, self.params[0])   # b1^t, b2^t

  def _updates(self):
    b1_t, b2_t = self.b1_t * self.b1, self.b2_t * self.b2                  # this step's b1^t and b2^t
    out = [(self.b1_t, b1_t), (self.b2_t, b2_t)]
    for k, p in enumerate(self.params):
      if p.grad is None: continue
      g = p.grad.detach()
      m = self.m[k] * self.b1 + g * (1 - self.b1)
      v = self.v[k] * self.b2 + g * g * (1 - self.b2)
      lr, c1, c2 = self._scalar(self._lr, p), self._scalar(1 - b1_t, p), self._scalar(1 - b2_t, p)
      new = p.detach() * (1 - lr * self.weight_decay) - lr * (m / c1) / ((v / c2).sqrt() + self.eps)
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

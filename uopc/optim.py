"""Optimizers: SGD, AdamW and Adam, with PyTorch's zero_grad() and step().

  opt = AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
  opt = AdamW([{"params": matrices, "weight_decay": 0.1}, {"params": others, "weight_decay": 0.0}], lr=1e-3)
  logits, loss = model(x, y)
  opt.zero_grad(); loss.backward()        # .grad: lazy Tensors, nothing has run
  norm = clip_grad_norm_(opt.params, 1.0) # the gradients scaled to a global norm of at most 1 (lazy too)
  opt.step(loss)                          # ONE plan: the loss, every gradient and every update, realized together

step() builds each parameter's new value (and the optimizer's state: momentum, Adam's m and v) as lazy Tensors,
assign()s each to its tensor, and realizes them in one plan together with any tensors passed to it (the loss):
the new values are written into the tensors' own buffers. Everything that changes from step to step (the learning
rate, Adam's b1^t and b2^t) is a tensor too, never a Python constant in the graph, so the graph of step 2 has the
same shape as step 1's, the cached plan is reused, and uopc.jit.TinyJit can capture and replay the step.
"""
from __future__ import annotations
import time
import numpy as np
from uopc.dtype import np_dtype
from uopc.helpers import DEBUG
from uopc.autograd import pending, requires_grad_ids
from uopc.tensor import Tensor


def realize(*tensors: Tensor) -> list[Tensor]:
  """Realize all of tensors in one plan (Tensor.realize(a, *others)); returns them."""
  if tensors: tensors[0].realize(*tensors[1:])
  return list(tensors)


def _data_tensor(value, like: Tensor) -> Tensor:
  """A 0-d buffer of like's dtype: a number that may change every step without changing the graph."""
  return Tensor(np.array(value, np_dtype(like.dtype)))


GROUP_KEYS = {"params", "weight_decay"}   # what a parameter group may set (PyTorch's groups may set more)


def _groups(params, name: str) -> list[tuple[Tensor, dict]]:
  """(parameter, its group's settings) for a list of Tensors or a list of groups {"params": [...], ...}."""
  params = list(params)
  if not params or not all(isinstance(g, dict) for g in params): return [(p, {}) for p in params]
  out = []
  for g in params:
    if "params" not in g or set(g) - GROUP_KEYS:
      raise ValueError(f"{name}: a parameter group is a dict with 'params' and optionally 'weight_decay', got keys "
                       f"{sorted(g)}")
    out += [(p, {k: v for k, v in g.items() if k != "params"}) for p in g["params"]]
  return out


class Optimizer:
  def __init__(self, params, lr: float):
    """params: Tensors, or parameter groups as PyTorch takes them: [{"params": [...], "weight_decay": 0.1}, ...]."""
    uniq: list[Tensor] = []
    self.group_of: list[dict] = []           # per parameter: its group's settings (empty: the optimizer's own)
    for p, group in _groups(params, type(self).__name__):
      if not isinstance(p, Tensor): raise TypeError(f"{type(self).__name__}: parameters must be Tensors, got {p!r}")
      if all(p is not q for q in uniq): uniq.append(p); self.group_of.append(group)   # a tied weight once
    if not uniq: raise ValueError(f"{type(self).__name__}: no parameters to optimize")
    marked = requires_grad_ids()
    for p in uniq:
      if id(p) not in marked: p.requires_grad = True
    self.params, self.steps = uniq, 0
    self._step_ended: float | None = None   # perf_counter at the end of the last step(): DEBUG=2's Python time
    self._lr = _data_tensor(lr, uniq[0])

  @property
  def lr(self) -> float: return float(self._lr.numpy())
  @lr.setter
  def lr(self, value: float) -> None:
    """Written into the learning rate's own buffer: the graph and a captured step (uopc.jit) both see it."""
    np.copyto(self._lr._data(), value)

  def _scalar(self, t: Tensor, p: Tensor) -> Tensor: return t if t.dtype is p.dtype else t.cast(p.dtype)
  def _setting(self, k: int, name: str): return self.group_of[k].get(name, getattr(self, name))

  def state_tensors(self) -> dict[str, Tensor]:
    """Every tensor of the optimizer's state by name (the learning rate, moments, ...): what a checkpoint saves."""
    return {"lr": self._lr}

  def state_dict(self) -> dict[str, np.ndarray]:
    """name -> a copy of each state tensor's data. (Not `steps`: a Python count, which a replayed step does not
    advance; the step a run is at is its trainer's, and Adam's b^t are state tensors.)"""
    return {k: t.numpy().copy() for k, t in self.state_tensors().items()}

  def load_state_dict(self, state: dict) -> None:
    """Write each saved array into the state tensor's own buffer (a captured step sees it); shapes must match."""
    mine = self.state_tensors()
    if set(mine) != set(state):
      raise KeyError(f"{type(self).__name__}.load_state_dict: missing {sorted(set(mine) - set(state))}, unexpected "
                     f"{sorted(set(state) - set(mine))}")
    for k, t in mine.items():
      a = np.asarray(state[k])
      if a.shape != t.shape:
        raise ValueError(f"{type(self).__name__}.load_state_dict: {k} has shape {a.shape}, the state's is {t.shape}")
      np.copyto(t._data(), a.reshape(-1))

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
    t0 = time.perf_counter()
    targets = [target.assign(new) for target, new in self._updates()]
    t1 = time.perf_counter()
    realize(*also, *targets)
    t2 = time.perf_counter()
    if DEBUG.value >= 2: print(self._debug_line(t0, t1, t2))
    self.steps, self._step_ended = self.steps + 1, t2

  def _debug_line(self, t0: float, t1: float, t2: float) -> str:
    """DEBUG=2, after the realize's own summary line (its schedule and kernels): where the step's Python time went.
    "since the last step" is everything between two step() calls (the forward and backward graphs built, and whatever
    else the loop does), so it reads as the graph building of a loop that only trains."""
    since = f"{(t0 - self._step_ended) * 1e3:.1f} ms since the last step, " if self._step_ended is not None else ""
    return (f"step {self.steps}: Python {since}{(t1 - t0) * 1e3:.1f} ms building the update, realize "
            f"{(t2 - t1) * 1e3:.1f} ms")


class SGD(Optimizer):
  """p <- p - lr (g + wd p); with momentum b <- mu b + g first and b in place of g (PyTorch's SGD)."""
  def __init__(self, params, lr: float = 1e-2, momentum: float = 0.0, weight_decay: float = 0.0):
    super().__init__(params, lr)
    self.momentum, self.weight_decay = momentum, weight_decay
    self.b = [Tensor(np.zeros(p.shape, np_dtype(p.dtype))) for p in self.params] if momentum else []

  def state_tensors(self):
    return {"lr": self._lr, **{f"b.{k}": b for k, b in enumerate(self.b)}}

  def _updates(self):
    out = []
    for k, p in enumerate(self.params):
      if p.grad is None: continue
      wd = self._setting(k, "weight_decay")
      g = p.grad.detach() + p.detach() * wd if wd else p.grad.detach()
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

  def state_tensors(self):
    return {"lr": self._lr, "b1_t": self.b1_t, "b2_t": self.b2_t, **{f"m.{k}": m for k, m in enumerate(self.m)},
            **{f"v.{k}": v for k, v in enumerate(self.v)}}

  def _updates(self):
    b1_t, b2_t = self.b1_t * self.b1, self.b2_t * self.b2                  # this step's b1^t and b2^t
    out = [(self.b1_t, b1_t), (self.b2_t, b2_t)]
    scalars: dict = {}   # each step scalar computed once, by a kernel of its own (a 0-d STAGE): the update's kernel
    def scalar(key, make):   # only loads them (uopc.codegen.siblings computes every parameter's update in one kernel)
      if key not in scalars: scalars[key] = make().contiguous()
      return scalars[key]
    for k, p in enumerate(self.params):
      if p.grad is None: continue
      g = p.grad.detach()
      m = self.m[k] * self.b1 + g * (1 - self.b1)
      v = self.v[k] * self.b2 + g * g * (1 - self.b2)
      lr = self._scalar(self._lr, p)
      # x / c is x * (1/c): the reciprocals are the step scalars, the same numbers as inside the division
      r1 = scalar(("1/c1", p.dtype), lambda: self._scalar(1 - b1_t, p).recip())
      r2 = scalar(("1/c2", p.dtype), lambda: self._scalar(1 - b2_t, p).recip())
      wd = self._setting(k, "weight_decay")
      decay = scalar(("decay", p.dtype, wd), lambda: 1 - lr * wd) if wd else None
      decayed = p.detach() * decay if wd else p.detach()                         # a group may not decay (wd 0)
      new = decayed - lr * (m * r1) / ((v * r2).sqrt() + self.eps)
      out += [(self.m[k], m), (self.v[k], v), (p, new)]
    return out


class Adam(AdamW):
  """PyTorch's Adam: AdamW's update, with weight decay (default 0) added to the gradient, g + wd p, before the
  moments (L2 regularization), not applied to p apart. (AdamW._updates is chapter 14's printed listing: Adam hands
  it the L2 gradients and a decay of 0, rather than a switch inside it.)"""
  def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
               weight_decay: float = 0.0):
    super().__init__(params, lr, betas, eps, weight_decay)
    self._l2 = False

  def _setting(self, k: int, name: str):
    return 0.0 if name == "weight_decay" and self._l2 else super()._setting(k, name)

  def _updates(self):
    grads = [p.grad for p in self.params]
    for k, p in enumerate(self.params):
      if p.grad is not None and (wd := self._setting(k, "weight_decay")): p.grad = p.grad.detach() + p.detach() * wd
    self._l2 = True
    try: return super()._updates()
    finally:
      self._l2 = False
      for p, g in zip(self.params, grads): p.grad = g


def clip_grad_norm_(params: list[Tensor], max_norm: float, eps: float = 1e-6) -> Tensor:
  """PyTorch's clip_grad_norm_: every .grad multiplied by min(1, max_norm / (total + eps)), total the 2-norm of all
  the gradients together. Lazy: the .grads are replaced by the scaled graphs and the total norm is returned as a
  0-d Tensor; nothing runs until the optimizer's step realizes them (so a captured step clips at every replay)."""
  grads = [p for p in params if p.grad is not None]
  if not grads: raise RuntimeError("clip_grad_norm_: no parameter has a .grad; call backward()")
  gs = [p.grad.detach() for p in grads]   # each DETACH built once (the same node three times before: issue 50)
  total = sum((g * g).sum() for g in gs).sqrt()                                                  # ()
  # one kernel computes the scale (a 0-d STAGE), instead of every update kernel summing the norms again before its loop
  scale = (max_norm / (total + eps)).minimum(1.0).contiguous()
  for p, g in zip(grads, gs): p.grad = g * (scale if scale.dtype is g.dtype else scale.cast(g.dtype))
  pending.add(total)   # realized with the step that overwrites the parameters it reads, as the .grads are
  return total


def clip_grad_norm_numpy(grads: list[np.ndarray], max_norm: float, eps: float = 1e-6) -> tuple[list, float]:
  total = float(np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in grads)))
  return [g * min(1.0, max_norm / (total + eps)) for g in grads], total


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

"""Reverse-mode autograd over the tensor graph, as a table of derivative rules.

Each rule takes the node (as Tensors: out, its sources) and the gradient flowing into it, and
returns one gradient per source (None where none flows). gradient() walks the graph backwards
and sums what reaches each node. The result is another lazy Tensor graph: it fuses and kernelizes
like any other.

PyTorch's semantics, kept by two registries (issue 39):
- a realized tensor is a BUFFER, but it stays in the graph backward walks: realize() records the graph that computed
  it (`made_from`), and the walk goes through a recorded BUFFER into that graph. A value computed outside the graph
  (in NumPy, by a hand-written kernel) records the graph that gives its gradient, or its name: the walk then raises.
- a .grad is lazy, so it would be recomputed from the parameters' buffers when read; an optimizer's step overwrites
  them. A realize that writes into buffers (assign) also realizes what every pending .grad (and clip_grad_norm_'s
  total) reads: the REDUCEs below its elementwise tail, which the plan computes anyway (so no kernel is added), or
  the whole value where its tail reads a buffer being written (`preserve`).
"""
from __future__ import annotations
import math
import weakref
from typing import Callable
from uopc.mixin.indexing import IndexingMixin
from uopc.uop import UOp, Ops
from uopc.errors import UsageError
from uopc.grad_mode import check_saved

# what the rules compute with: a value with the Tensor ops of uopc.mixin (the STACK rule indexes, so up to
# IndexingMixin's). gradient() and backward() also need its graph node .uop, .lazy (the graph that computed it, once
# realized), .grad, and the class made from a UOp: cls(uop). uopc.tensor's Tensor is one; autograd never imports it
TensorLike = IndexingMixin

LN2 = math.log(2)
class Leaves:
  """The tensors backward() fills .grad on, held weakly and found by identity: a WeakSet would compare two Tensors
  with ==, which is elementwise (and so ambiguous) for a Tensor."""
  def __init__(self): self._by_id: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
  def add(self, t) -> None: self._by_id[id(t)] = t
  def discard(self, t) -> None:
    if self._by_id.get(id(t)) is t: del self._by_id[id(t)]
  def __contains__(self, t) -> bool: return self._by_id.get(id(t)) is t
  def __iter__(self): return iter(list(self._by_id.values()))


requires_grad_leaves = Leaves()
parameter_leaves = Leaves()   # every tensor ever marked requires_grad: a frozen one is still a model's parameter


def set_requires_grad(t, v: bool) -> None:
  """t.requires_grad = v. Unmarking (freezing) keeps t in parameter_leaves: PyTorch's state_dict and named_parameters
  keep a frozen parameter, only its gradient stops."""
  if v: requires_grad_leaves.add(t); parameter_leaves.add(t)
  else: requires_grad_leaves.discard(t)


def requires_grad_ids() -> set[int]:
  """ids of the Tensors with requires_grad (the optimizers' and the modules' question). Asking `t.requires_grad` looks
  t up in a WeakSet, whose weakrefs compare their Tensors with ==, which is elementwise: it raises for a Tensor in the
  set. Identity is what is meant."""
  return {id(t) for t in list(requires_grad_leaves)}


def parameter_ids() -> set[int]:
  """ids of the Tensors ever marked requires_grad, frozen ones included (what a module's state holds)."""
  return {id(t) for t in list(parameter_leaves)}
pending = Leaves()   # lazy values that must keep the value they have now: .grads, clip_grad_norm_'s total


# ---- realized tensors stay in the graph ----
class Opaque:
  """What a BUFFER computed outside the graph came from, when it has no derivative: its name and its inputs (so the
  walk knows that a gradient needed it)."""
  def __init__(self, name: str, srcs: tuple[UOp, ...]): self.name, self.srcs = name, srcs


made_from: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # BUFFER -> graph (flat shape) or Opaque


def _base(u: UOp) -> UOp:
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u


def record(realized: UOp, graph: UOp | Opaque) -> None:
  """realized (a BUFFER, or a RESHAPE of one) holds the value of graph: gradients reaching it flow into graph."""
  buf = _base(realized)
  if isinstance(graph, UOp) and graph.shape != buf.shape: graph = UOp(Ops.RESHAPE, (graph,), buf.shape)
  made_from[buf] = graph


custom: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # node -> (its sources, rule(out, srcs, g))


def custom_rule(out: UOp, srcs: tuple[UOp, ...], rule: Callable) -> None:
  """out's gradient is rule(out, srcs, g) -> one per source (pow's, erf's: PyTorch's rule at the edges, where the
  formula that computes out would give nan or 0), not the derivative of the nodes below it."""
  custom[out] = (srcs, rule)


def tracks(roots: list[UOp]) -> bool:
  """Whether a gradient could flow from these graphs to a tensor that requires one (so realizing them records
  where they came from: a realized intermediate keeps its gradient, and inference keeps no graphs alive)."""
  leaves = {t.uop for t in requires_grad_leaves}
  if not leaves and not made_from: return False
  topo = UOp(Ops.SINK, tuple(roots)).toposort()
  return not leaves.isdisjoint(topo) or any(u.op is Ops.BUFFER and u in made_from for u in topo)


def _sources(u: UOp) -> tuple[UOp, ...]:
  """u's sources in the graph backward walks: a recorded BUFFER's are the graph that computed it."""
  if u.op is not Ops.BUFFER or (m := made_from.get(u)) is None: return u.src
  return (m,) if isinstance(m, UOp) else m.srcs


def _toposort(root: UOp) -> list[UOp]:
  """root.toposort() through recorded BUFFERs."""
  topo = root.toposort()
  if not made_from or not any(u.op is Ops.BUFFER and u in made_from for u in topo): return topo
  order, seen, stack = [], set(), [(root, False)]
  while stack:
    u, ready = stack.pop()
    if ready: order.append(u); continue
    if u in seen: continue
    seen.add(u)
    stack.append((u, True))
    stack.extend((s, False) for s in reversed(_sources(u)) if s not in seen)
  return order


# ---- pending values: materialized before the buffers they read are overwritten ----
_CUT = (Ops.REDUCE, Ops.STAGE)   # points every plan computes into a buffer anyway


def preserve(homes: set[UOp]) -> list[tuple[object, list[UOp]]]:
  """(tensor, nodes to realize with this plan) for every pending lazy tensor, as a realize that writes into the
  buffers `homes` needs them: the REDUCEs and STAGEs below its elementwise tail, or the tensor itself where the tail
  reads one of `homes` (it would read the new value)."""
  out = []
  for t in pending:
    if _base(t.uop).op is Ops.BUFFER: pending.discard(t); continue   # data already
    cuts, whole, seen, stack = [], False, set(), [t.uop]
    while stack:
      u = stack.pop()
      if u in seen: continue
      seen.add(u)
      if u.op in _CUT: cuts.append(u)
      elif u.op is Ops.BUFFER: whole = whole or u in homes
      else: stack.extend(u.src)
    if whole: out.append((t, [t.uop]))
    elif cuts: out.append((t, cuts))
  return out


def beside(roots: list[UOp], homes: set[UOp]) -> tuple[list[tuple[object, list[UOp]]], list[UOp]]:
  """What a realize of roots that writes into the buffers `homes` computes beside them: preserve(homes), and its nodes
  that are not roots already, each once (Tensor.realize; uopc.bench's step roots gather them the same way)."""
  kept = preserve(homes) if homes and pending else []
  listed = set(roots)   # a set: `u not in roots` was a scan of the list per node kept (hundreds x hundreds)
  return kept, list(dict.fromkeys(u for _, us in kept for u in us if u not in listed))


def _unexpand(g: TensorLike, shape: tuple[int, ...]) -> TensorLike:
  """The gradient of an EXPAND: sum over the axes that were broadcast."""
  axes = tuple(k for k, (a, b) in enumerate(zip(shape, g.shape)) if a != b)
  return g.sum(axes, keepdim=True).reshape(shape) if axes else g


def _prod_grad(x: TensorLike, out: TensorLike, g: TensorLike, axes: tuple[int, ...]) -> TensorLike:
  """The product of the others: out / x, except at a zero, where it is the product of the nonzero rest (if that
  zero is the only one; with two zeros every gradient is 0)."""
  zero = x.eq(0)
  rest = zero.where(1.0, x)._reduce(Ops.MUL, axes, True).expand(x.shape)
  lone = zero.sum(axes, keepdim=True).eq(1).expand(x.shape)
  return g * zero.where(lone.where(rest, 0.0), out / zero.where(1.0, x))


def _max_reduce_grad(x: TensorLike, out: TensorLike, g: TensorLike, axes: tuple[int, ...]) -> TensorLike:
  """The gradient goes to the maxima, shared equally between ties."""
  hit = x.eq(out).cast(x.dtype)
  count = hit.sum(axes, keepdim=True).expand(x.shape)
  return g * hit / count


# reduce op -> rule(x, out, g, axes), with out and g broadcast back to x's shape over the reduced axes
REDUCE_DERIVATIVES: dict[Ops, Callable] = {
  Ops.ADD: lambda x, out, g, axes: g,                                       # d(sum x) = sum dx
  Ops.MUL: _prod_grad,                                                      # d(prod x) = sum_i (prod_{j!=i} x_j) dx_i
  Ops.MAX: _max_reduce_grad,
}


def _reduce_grad(out: TensorLike, x: TensorLike, g: TensorLike, rop: Ops, n: int) -> TensorLike:
  kept = x.shape[:x.ndim - n]
  def back(t: TensorLike) -> TensorLike: return t.reshape(kept + (1,) * n).expand(x.shape)   # reduced, broadcast back
  return REDUCE_DERIVATIVES[rop](x, back(out), back(g), tuple(range(x.ndim - n, x.ndim)))


def _max_grad(a: TensorLike, b: TensorLike, g: TensorLike) -> tuple[TensorLike, TensorLike]:
  tie = a.eq(b).where(g * 0.5, 0.0)
  return (b < a).where(g, tie), (a < b).where(g, tie)


def _inverse(order: tuple[int, ...]) -> list[int]:
  inv = [0] * len(order)
  for k, p in enumerate(order): inv[p] = k
  return inv


# op -> rule(out, srcs, g, arg) -> one gradient per source
Rule = Callable[..., tuple]   # (out: TensorLike, srcs: list[TensorLike], g: TensorLike, arg) -> one gradient per source
DERIVATIVES: dict[Ops, Rule] = {
  Ops.ADD: lambda out, s, g, arg: (g, g),                                   # d(a+b) = da + db
  Ops.MUL: lambda out, s, g, arg: (g * s[1], g * s[0]),                     # d(ab) = b da + a db
  Ops.RECIP: lambda out, s, g, arg: (-g * out * out,),                      # d(1/x) = -1/x^2 dx
  Ops.EXP2: lambda out, s, g, arg: (g * out * LN2,),                        # d(2^x) = 2^x ln2 dx
  Ops.LOG2: lambda out, s, g, arg: (g / (s[0] * LN2),),                     # d(log2 x) = dx / (x ln2)
  Ops.SQRT: lambda out, s, g, arg: (g / (out * 2),),                        # d(sqrt x) = dx / (2 sqrt x)
  Ops.SIN: lambda out, s, g, arg: (g * s[0].cos(),),                        # d(sin x) = cos x dx (cos: exact at 1e5)
  Ops.MAX: lambda out, s, g, arg: _max_grad(s[0], s[1], g),
  Ops.WHERE: lambda out, s, g, arg: (None, s[0].where(g, 0.0), s[0].where(0.0, g)),
  Ops.CAST: lambda out, s, g, arg: (g.cast(s[0].dtype),),
  Ops.RESHAPE: lambda out, s, g, arg: (g.reshape(s[0].shape),),
  Ops.EXPAND: lambda out, s, g, arg: (_unexpand(g, s[0].shape),),
  Ops.PERMUTE: lambda out, s, g, arg: (g.permute(_inverse(arg)),),
  Ops.SHRINK: lambda out, s, g, arg: (g.pad([(b, n - e) for (b, e), n in zip(arg, s[0].shape)]),),
  Ops.PAD: lambda out, s, g, arg: (g.shrink([(lo, lo + n) for (lo, _), n in zip(arg, s[0].shape)]),),
  Ops.REDUCE: lambda out, s, g, arg: (_reduce_grad(out, s[0], g, *arg),),
  Ops.STACK: lambda out, s, g, arg: tuple(g[k] for k in range(len(s))),
  Ops.STAGE: lambda out, s, g, arg: (g,),
  Ops.DETACH: lambda out, s, g, arg: (None,),
}
NO_GRADIENT = {Ops.CMPLT, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR, Ops.IDIV, Ops.MOD, Ops.CONST, Ops.BUFFER}


def gradient(f: TensorLike, wrt: list[TensorLike], seed: TensorLike | None = None) -> list[TensorLike]:
  """d f / d w for each w in wrt (f a scalar, or give seed: the gradient flowing into f)."""
  if seed is None:
    if f.numel() != 1: raise UsageError(f"gradient: f must be a scalar (shape {f.shape}); pass seed= for other shapes")
    seed = f.const_like(1.0)
  T = type(f)   # the class of the tensors given: this module does not import uopc.tensor
  if f.lazy is not None and _base(f.uop).op is Ops.BUFFER: f = T(f.lazy)   # f itself realized: what computed it
  targets = {w.uop for w in wrt}
  topo = _toposort(f.uop)   # through realized tensors, into the graphs that computed them
  check_saved(topo)   # PyTorch's version-counter rule (uopc.grad_mode)
  # only nodes on a path to a target need a gradient
  needed: set[UOp] = set()
  for u in topo:
    if u in targets or not needed.isdisjoint(_sources(u)): needed.add(u)   # a set method: no Python loop per node
  grads: dict[UOp, TensorLike] = {f.uop: seed}
  for u in reversed(topo):
    if u not in grads or u in targets: continue
    if u.op is Ops.BUFFER and (m := made_from.get(u)) is not None:   # a realized tensor: into what computed it
      if isinstance(m, Opaque):
        if not needed.isdisjoint(m.srcs): raise NotImplementedError(f"gradient: {m.name} has no derivative")
      elif m in needed: grads[m] = grads[m] + grads[u] if m in grads else grads[u]
      continue
    if (c := custom.get(u)) is not None:   # a rule of its own, for the sources it names
      if needed.isdisjoint(c[0]): continue
      for s, gs in zip(c[0], c[1](T(u), [T(x) for x in c[0]], grads[u])):
        if gs is not None and s in needed: grads[s] = grads[s] + gs if s in grads else gs
      continue
    if u.op in NO_GRADIENT or needed.isdisjoint(u.src): continue
    if u.op not in DERIVATIVES: raise NotImplementedError(f"gradient: no derivative rule for {u.op}")
    srcs = [T(s) for s in u.src]
    for s, gs in zip(u.src, DERIVATIVES[u.op](T(u), srcs, grads[u], u.arg)):
      if gs is None or s not in needed: continue
      grads[s] = grads[s] + gs if s in grads else gs
  return [grads[w.uop] if w.uop in grads else w.const_like(0.0) for w in wrt]


def backward(loss: TensorLike) -> None:
  """loss.backward(): set .grad on every tensor with requires_grad that loss depends on."""
  graph = set(_toposort(loss.uop))
  leaves = [t for t in list(requires_grad_leaves) if t.uop in graph]
  for t, g in zip(leaves, gradient(loss, leaves)):
    t.grad = g if t.grad is None else t.grad + g

"""The UOp: one immutable, hash-consed node type for every level of the compiler.

Tensor programs (BUFFER, RESHAPE, REDUCE, ...) and loop programs (RANGE, INDEX, LOAD, STORE, END, ...)
are both graphs of UOps. Building the same node twice gives the same object, so identical
subgraphs are shared for free and a dict keyed by UOp is a memo.
"""
from __future__ import annotations
import math
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable
from uopc.dtype import DType, dtypes
from uopc.helpers import prod
from uopc import trace
# the op enum, its named sets and the axis types live in uopc.ops (one short file); every uopc.uop name stays here
from uopc.ops import Ops, UNARY, BINARY, ALU, MOVEMENT, COMMUTATIVE, COMPARISON, AxisType   # noqa: F401


@dataclass(frozen=True)
class ParamArg:
  """The arg of BUFFER (a kernel parameter, data{slot}) and ALLOC (local storage, acc{slot})."""
  slot: int
  dtype: DType
  shape: tuple[int, ...]

  @property
  def size(self) -> int: return prod(self.shape)


@dataclass(frozen=True)
class LocalArg(ParamArg):
  """The arg of an ALLOC in local memory: one array per work-group, shared by its work-items (lmem{slot})."""


def _infer_dtype(op: Ops, src: tuple[UOp, ...], arg: Any) -> DType:
  if op in _SRC0_DTYPE and src: return src[0].dtype   # most nodes: movement ops and arithmetic
  if op in (Ops.BUFFER, Ops.ALLOC): return arg.dtype
  if op is Ops.CONST: return dtypes.from_py(arg)
  if op in (Ops.RANGE, Ops.SPECIAL): return dtypes.int
  if op in (Ops.STORE, Ops.END, Ops.SINK, Ops.BARRIER, Ops.WMMA): return dtypes.void
  if op in COMPARISON: return dtypes.bool.vec(src[0].dtype.count)
  if op is Ops.VECTORIZE: return src[0].dtype.vec(len(src))
  if op is Ops.GEP: return src[0].dtype.scalar
  if op is Ops.WHERE: return src[1].dtype
  if op is Ops.CAST: raise TypeError("CAST needs an explicit dtype")
  if op is Ops.STACK: return src[0].dtype
  if not src: raise TypeError(f"cannot infer the dtype of {op} with no sources")
  return src[0].dtype


# the ops whose dtype is their first source's (the last line of _infer_dtype): the rules above it do not apply
_SRC0_DTYPE = set(Ops) - {Ops.BUFFER, Ops.ALLOC, Ops.CONST, Ops.RANGE, Ops.SPECIAL, Ops.STORE, Ops.END, Ops.SINK,
                          Ops.BARRIER, Ops.WMMA, Ops.VECTORIZE, Ops.GEP, Ops.WHERE, Ops.CAST, Ops.STACK} - COMPARISON


class _NodeRef(weakref.ref):
  """A weak reference to a node that knows the node's key in the table below, so the table forgets the node when it
  dies. (weakref.WeakValueDictionary does the same, in Python code around every get and set: a plain dict of these
  costs a third of it, and every Tensor operation builds nodes.)"""
  __slots__ = ("key",)


def _forget(ref: _NodeRef) -> None:
  if _nodes.get(ref.key) is ref: del _nodes[ref.key]   # a node built since under the same key stays


_nodes: dict[tuple, _NodeRef] = {}


class _UOpMeta(type):
  """Hash-consing: UOp(op, src, arg, dtype) returns the existing node when an identical one is alive."""

  def __call__(cls, op: Ops, src: Iterable[UOp] = (), arg: Any = None, dtype: DType | None = None):
    src = tuple(src)
    for s in src:
      if not isinstance(s, UOp): raise TypeError(f"{op}: sources must be UOps, got {type(s).__name__} {s!r}")
    if dtype is None: dtype = src[0].dtype if op in _SRC0_DTYPE and src else _infer_dtype(op, src, arg)
    # 0.0 == -0.0 and nan != nan in Python: key floats by their repr so each constant is its own node
    key = (op, dtype, src, ("float", repr(arg)) if isinstance(arg, float) else arg)
    if (ref := _nodes.get(key)) is not None and (hit := ref()) is not None: return hit
    u = _new_node(cls)   # the fields set here, not by an __init__: one Python frame less per node built
    _set_op(u, op); _set_src(u, src); _set_arg(u, arg); _set_dtype(u, dtype)
    ref = _NodeRef(u, _forget)
    ref.key = key
    _nodes[key] = ref
    return u


def _const_like(x: UOp, v) -> UOp:
  """A Python number as a constant of x's dtype, so that `i * 64` and `s * 0.125` need no explicit consts."""
  if isinstance(v, UOp): return v
  if x.dtype is dtypes.bool or isinstance(v, bool): return UOp.const(v)
  if not x.dtype.is_float and isinstance(v, float) and not (v.is_integer() or is_inf(v)):
    raise TypeError(f"{v!r} is not a whole number, but it meets an integer {x.op} ({x.dtype}); cast first")
  return UOp.const(v, x.dtype)


class _Shape:
  """UOp.shape: computed on first use and stored in the node's __dict__ under the same name. A descriptor without
  __set__, so every later u.shape is a plain attribute read (no Python call): Tensor methods read shapes at every
  node they build."""
  def __get__(self, u: UOp | None, owner=None):
    if u is None: return self
    u.__dict__["shape"] = s = _shape(u)
    return s


class UOp(metaclass=_UOpMeta):
  __slots__ = ("op", "dtype", "src", "arg", "__weakref__", "__dict__")   # set once, by _UOpMeta.__call__

  def __setattr__(self, k, v): raise AttributeError(f"UOp is immutable (tried to set {k})")
  def __reduce__(self): return UOp, (self.op, self.src, self.arg, self.dtype)

  # ---- construction ----
  @staticmethod
  def const(v, dtype: DType | None = None) -> UOp:
    dtype = dtype or dtypes.from_py(v)
    if not dtype.is_float and isinstance(v, float) and not v.is_integer():
      raise TypeError(f"the constant {v!r} is not a whole number, so it cannot be a {dtype}")
    if dtype.is_float: v = float(v)
    elif dtype is dtypes.bool: v = bool(v)
    else: v = int(v)
    return UOp(Ops.CONST, (), v, dtype)

  def replace(self, **kw) -> UOp:
    args = {"op": self.op, "src": self.src, "arg": self.arg, "dtype": self.dtype} | kw
    return UOp(args["op"], args["src"], args["arg"], args["dtype"])

  def cast(self, dtype: DType) -> UOp: return self if dtype is self.dtype else UOp(Ops.CAST, (self,), None, dtype)

  def with_src(self, src: tuple[UOp, ...]) -> UOp:
    """This node over other sources of the same dtypes (a graph rebuilt node by node: uopc.kernelize.normalize). The
    table is asked first, with the key UOp() would make: a rebuild that finds its node skips UOp()'s checks."""
    arg = self.arg
    key = (self.op, self.dtype, src, ("float", repr(arg)) if isinstance(arg, float) else arg)
    if (ref := _nodes.get(key)) is not None and (hit := ref()) is not None: return hit
    return UOp(self.op, src, arg, self.dtype)

  def toposort(self) -> list[UOp]:
    """Every node reachable from self, sources before users (depth first, sources in order)."""
    # the cache holds the nodes below self, never self: a node whose own __dict__ held it would be a reference cycle,
    # and the arrays of its BUFFERs would wait for the cyclic garbage collector instead of being freed (NOTES 25)
    if (below := self.__dict__.get("_below")) is not None: return [*below, self]
    order, seen, stack = [], set(), [self]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
      u = pop()
      if u is _DONE: order.append(pop()); continue   # the node under the marker: its sources are all in order now
      if u in seen: continue
      seen.add(u)
      if u.src: push(u); push(_DONE); extend(u.src[::-1])   # a source seen by the time it is popped is skipped
      else: order.append(u)
    self.__dict__["_below"] = tuple(order[:-1])
    return order

  @staticmethod
  def wrap(roots: list[UOp], todo: set[UOp], fn: Callable[[UOp], UOp]) -> list[UOp]:
    """Rebuild roots with every node n in todo replaced by fn(n) (n's own sources rebuilt first)."""
    # a loop over the toposort, not a recursive closure: a closure that calls itself is a reference cycle, which would
    # keep memo, and every array under it, alive until the cyclic garbage collector runs (NOTES 25)
    memo: dict[UOp, UOp] = {}
    for u in UOp(Ops.SINK, tuple(roots)).toposort():
      new = u.replace(src=tuple(memo[s] for s in u.src)) if u.src else u
      memo[u] = fn(new) if u in todo else new
    return [memo[r] for r in roots]

  # ---- ALU operators ----
  def alu(self, op: Ops, *src) -> UOp:
    src = tuple(_const_like(self, s) for s in src)
    lanes = max(u.dtype.count for u in (self, *src))   # a scalar meeting a vector is broadcast to its lanes
    wide = lambda u: u.broadcast(lanes) if u.dtype.count == 1 < lanes else u
    return UOp(op, tuple(wide(u) for u in (self, *src)))
  def __add__(self, x): return self.alu(Ops.ADD, x)
  def __radd__(self, x): return _const_like(self, x).alu(Ops.ADD, self)
  def __mul__(self, x): return self.alu(Ops.MUL, x)
  def __rmul__(self, x): return _const_like(self, x).alu(Ops.MUL, self)
  def __neg__(self): return self * -1
  def __sub__(self, x): return self + (-_const_like(self, x))          # a - b is a + b*-1: one fewer op to optimize
  def __rsub__(self, x): return _const_like(self, x) + (-self)
  def __truediv__(self, x): return self * _const_like(self, x).recip()
  def __rtruediv__(self, x): return _const_like(self, x) * self.recip()
  def __floordiv__(self, x): return self.alu(Ops.IDIV, x)             # C semantics (truncation): use on indices >= 0
  def __mod__(self, x): return self.alu(Ops.MOD, x)
  def __lt__(self, x): return self.alu(Ops.CMPLT, x)
  def __gt__(self, x): return _const_like(self, x).alu(Ops.CMPLT, self)
  def __and__(self, x): return self.alu(Ops.AND, x)
  def __or__(self, x): return self.alu(Ops.OR, x)
  def __xor__(self, x): return self.alu(Ops.XOR, x)
  def ne(self, x) -> UOp: return self.alu(Ops.CMPNE, x)
  def maximum(self, x) -> UOp: return self.alu(Ops.MAX, x)
  def recip(self) -> UOp: return UOp(Ops.RECIP, (self,))
  def exp2(self) -> UOp: return UOp(Ops.EXP2, (self,))
  def log2(self) -> UOp: return UOp(Ops.LOG2, (self,))
  def sqrt(self) -> UOp: return UOp(Ops.SQRT, (self,))
  def where(self, a, b) -> UOp:
    a = a if isinstance(a, UOp) else UOp.const(a, b.dtype if isinstance(b, UOp) else None)
    src = (self, a, _const_like(a, b))
    lanes = max(u.dtype.count for u in src)
    return UOp(Ops.WHERE, tuple(u.broadcast(lanes) if u.dtype.count == 1 < lanes else u for u in src))
  __hash__ = object.__hash__
  __eq__ = object.__eq__   # identity: hash-consing makes structural equality and identity the same

  # ---- loop-program builders ----
  def after(self, *deps: UOp) -> UOp:
    """self, placed inside the loops in deps and ordered after the stores in deps."""
    return UOp(Ops.AFTER, (self, *deps), None, self.dtype)
  def index(self, i) -> UOp: return UOp(Ops.INDEX, (self, i if isinstance(i, UOp) else UOp.const(i)), None, self.dtype)
  def load(self, lanes: int = 1) -> UOp:
    """The element at this INDEX; with lanes > 1, that element and the next lanes - 1 as one vector."""
    if self.op is not Ops.INDEX: raise TypeError(f"load() needs an INDEX, got {self.op}")
    return UOp(Ops.LOAD, (self,), None, self.dtype.vec(lanes) if self.dtype.count == 1 else self.dtype)

  # ---- vectors ----
  @staticmethod
  def vectorize(*lanes: UOp) -> UOp:
    """The scalars as the lanes of one vector."""
    if len({u.dtype for u in lanes}) != 1 or lanes[0].dtype.count != 1:
      raise TypeError(f"vectorize takes scalars of one dtype, got {[u.dtype for u in lanes]}")
    return UOp(Ops.VECTORIZE, lanes)
  def broadcast(self, lanes: int) -> UOp:
    """This scalar in every one of `lanes` lanes (a constant stays a constant)."""
    if self.op is Ops.CONST: return UOp.const(self.arg, self.dtype.vec(lanes))
    return UOp.vectorize(*[self] * lanes)
  def gep(self, lane: int) -> UOp:
    """Lane `lane` of this vector, a scalar."""
    if not 0 <= lane < self.dtype.count: raise IndexError(f"lane {lane} of a {self.dtype!r}")
    return UOp(Ops.GEP, (self,), lane)
  def lanes(self) -> list[UOp]: return [self.gep(i) for i in range(self.dtype.count)]
  def store(self, v) -> UOp:
    if self.op is not Ops.INDEX: raise TypeError(f"store() needs an INDEX, got {self.op}")
    return UOp(Ops.STORE, (self, v if isinstance(v, UOp) else UOp.const(v, self.dtype)))
  def end(self, *ranges: UOp) -> UOp:
    """Close loops: the ranges' bodies end after self. One END may close several ranges (lowest id outermost)."""
    for r in ranges:
      if r.op is not Ops.RANGE: raise TypeError(f"end() takes RANGEs, got {r.op}")
    return UOp(Ops.END, (self, *ranges)) if ranges else self

  # ---- tensor-level shape ----
  shape = _Shape()   # the shape of a tensor-level node (loop-level nodes are scalars: ()), computed once per node

  # ---- printing ----
  def __repr__(self) -> str: return pretty(self)

  def render(self, names: dict[UOp, str] | None = None) -> str:
    """An infix form of an index or scalar expression, e.g. ((i*512)+j)."""
    return render_expr(self, names or {})


_DONE = object()   # toposort's marker on its stack: the node below it has had its sources visited
_new_node = object.__new__
_set_op, _set_src, _set_arg, _set_dtype = UOp.op.__set__, UOp.src.__set__, UOp.arg.__set__, UOp.dtype.__set__


def _shape(u: UOp) -> tuple[int, ...]:
  op = u.op
  if op is Ops.BUFFER: return tuple(u.arg.shape)
  if op in (Ops.RESHAPE, Ops.EXPAND): return tuple(u.arg)
  if op is Ops.PERMUTE: return tuple(u.src[0].shape[p] for p in u.arg)
  if op is Ops.SHRINK: return tuple(e - b for b, e in u.arg)
  if op is Ops.PAD: return tuple(s + lo + hi for s, (lo, hi) in zip(u.src[0].shape, u.arg))
  if op is Ops.REDUCE: return u.src[0].shape[:len(u.src[0].shape) - u.arg[1]]
  if op is Ops.STACK: return (len(u.src),) + u.src[0].shape
  if op is Ops.INDEX and u.src[0].op not in (Ops.BUFFER, Ops.ALLOC, Ops.AFTER): return u.src[0].shape[len(u.src) - 1:]
  if op in ALU: return u.src[-1].shape if op is Ops.WHERE else u.src[0].shape
  if op in (Ops.STAGE, Ops.DETACH): return u.src[0].shape
  return ()


def range_(n: int | UOp, id: int, axis_type: AxisType = AxisType.LOOP) -> UOp:
  """A loop variable running 0 <= r < n; id names it (ridx{id}) and must be unique in a program."""
  return UOp(Ops.RANGE, (n if isinstance(n, UOp) else UOp.const(n),), (id, axis_type), dtypes.int)


def sink(*srcs: UOp) -> UOp: return UOp(Ops.SINK, srcs)


# ---- printing as Python ----
def pretty(u: UOp, indent: int = 0) -> str:
  """A UOp as the Python that builds it. Nodes used more than once are still written out each time."""
  pad = " " * indent
  if u.op is Ops.CONST:
    v = f"float('{u.arg}')" if isinstance(u.arg, float) and not math.isfinite(u.arg) else repr(u.arg)
    return f"{pad}UOp.const({v}, {u.dtype!r})"
  if u.op is Ops.RANGE and u.src[0].op is Ops.CONST: return f"{pad}range_({u.src[0].arg}, {u.arg[0]}, {u.arg[1]!r})"
  head = f"{pad}UOp({u.op!r}"
  arg = "" if u.arg is None else f", arg={u.arg!r}"
  if not u.src: return f"{head}, (){arg})"
  inner = ",\n".join(pretty(s, indent + 2) for s in u.src)
  return f"{head}, (\n{inner},\n{pad}){arg}, dtype={u.dtype!r})"


INFIX = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.AND: "&",
         Ops.OR: "|", Ops.XOR: "^"}


def render_expr(u: UOp, names: dict[UOp, str]) -> str:
  if u in names: return names[u]
  if u.op is Ops.CONST: return repr(u.arg)
  if u.op is Ops.RANGE: return f"ridx{u.arg[0]}"
  if u.op in INFIX: return f"({render_expr(u.src[0], names)}{INFIX[u.op]}{render_expr(u.src[1], names)})"
  if u.op is Ops.MAX: return f"max({render_expr(u.src[0], names)}, {render_expr(u.src[1], names)})"
  if u.op is Ops.WHERE:
    c, a, b = (render_expr(s, names) for s in u.src)
    return f"({a} if {c} else {b})"
  return f"{u.op.name.lower()}({', '.join(render_expr(s, names) for s in u.src)})"


def base_alloc(u: UOp) -> UOp | None:
  """The ALLOC under a chain of AFTERs, if any (the storage a loop program's state lives in)."""
  while u.op is Ops.AFTER: u = u.src[0]
  return u if u.op is Ops.ALLOC else None


def is_local(u: UOp | None) -> bool:
  """An ALLOC in local memory (one array per work-group, chapter 12)."""
  return u is not None and u.op is Ops.ALLOC and isinstance(u.arg, LocalArg)


def substitute(u: UOp, mapping: dict[UOp, UOp]) -> UOp:
  """u with every node in mapping replaced (the replaced node's sources are not visited)."""
  memo: dict[UOp, UOp] = dict(mapping)   # an explicit stack, not a recursive closure (a cycle: see UOp.wrap)
  stack = [(u, False)]
  while stack:
    x, ready = stack.pop()
    if x in memo: continue
    if ready: memo[x] = UOp(x.op, tuple(memo[s] for s in x.src), x.arg, x.dtype); continue
    if not x.src: memo[x] = x; continue
    stack.append((x, True))
    stack.extend((s, False) for s in x.src if s not in memo)
  return memo[u]


# ---- rewriting ----
class Pat:
  """A pattern over UOps. Pat(Ops.ADD, (Pat.var("x"), Pat.cvar("c"))) matches x + c and binds x and c."""

  def __init__(self, op: Ops | set[Ops] | None = None, src: tuple[Pat, ...] | None = None, name: str | None = None,
               arg: Any = None, dtype_kind: str | None = None):
    self.ops = None if op is None else ({op} if isinstance(op, Ops) else set(op))
    self.src, self.name, self.arg, self.dtype_kind = src, name, arg, dtype_kind

  @staticmethod
  def var(name: str, dtype_kind: str | None = None) -> Pat: return Pat(name=name, dtype_kind=dtype_kind)
  @staticmethod
  def cvar(name: str, value: Any = None) -> Pat: return Pat(Ops.CONST, name=name, arg=value)

  def match(self, u: UOp, env: dict[str, UOp]) -> bool:
    if self.ops is not None and u.op not in self.ops: return False
    if self.arg is not None and u.arg != self.arg: return False
    if self.dtype_kind is not None and u.dtype.kind not in self.dtype_kind: return False
    if self.name is not None:
      if self.name in env and env[self.name] is not u: return False
      env[self.name] = u
    if self.src is None: return True
    if len(self.src) != len(u.src): return False
    return all(p.match(s, env) for p, s in zip(self.src, u.src))


Rule = tuple[Pat, Callable[..., "UOp | None"]]


def rewrite_once(u: UOp, rules: list[Rule]) -> UOp | None:
  for pat, fn in rules:
    env: dict[str, UOp] = {}
    if pat.match(u, env) and (r := fn(**env)) is not None and r is not u: return r
  return None


def graph_rewrite(root: UOp, rules: list[Rule], memo: dict[UOp, UOp] | None = None) -> UOp:
  """Rewrite bottom-up: sources first, then the node itself until no rule applies."""
  memo = {} if memo is None else memo
  for u in root.toposort():
    if u in memo: continue
    new = u.replace(src=tuple(memo[s] for s in u.src)) if u.src else u
    # a rule's result may hold new nodes: rewrite it the same way (its result is then a fixed point)
    if (r := rewrite_once(new, rules)) is not None:
      if trace.RECORDERS: trace.rewrote(new, r, rules)   # uopc.viz steps through each rewrite
      new = graph_rewrite(r, rules, memo)
    memo[u] = new
  return memo[root]


def is_inf(x) -> bool: return isinstance(x, float) and math.isinf(x)

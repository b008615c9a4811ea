"""The C renderer: a linearized loop program -> the text of one C function.

Loads are named val, shared ALU results alu, accumulators acc{slot}, parameters data{slot}, loop
variables ridx{id}; an ALU result used once is written inline. Same graph, same text.
"""
from __future__ import annotations
import math
from dataclasses import dataclass
from uopc.uop import UOp, Ops, AxisType, ALU
from uopc.dtype import DType
from uopc.linearize import linearize, rname


def render_const(v, dtype: DType) -> str:
  if dtype.is_float:
    if math.isnan(v): return "NAN"
    if math.isinf(v): return "INFINITY" if v > 0 else "-INFINITY"
    return f"{v!r}f" if dtype.c == "float" else repr(v)
  if dtype.c == "bool": return "1" if v else "0"
  return f"{v}ll" if dtype.itemsize == 8 else str(v)


def _fn(name: str):
  """A C math function: exp2f for float, exp2 for double."""
  return lambda d, x: f"{name}{'f' if d.c == 'float' else ''}({x})"


# how each ALU op is written, given the result dtype and the rendered sources
C_ALU = {
  Ops.ADD: lambda d, a, b: f"({a}+{b})", Ops.MUL: lambda d, a, b: f"({a}*{b})",
  Ops.IDIV: lambda d, a, b: f"({a}/{b})", Ops.MOD: lambda d, a, b: f"({a}%{b})",
  Ops.MAX: lambda d, a, b: f"(({a}>{b})?{a}:{b})",
  Ops.CMPLT: lambda d, a, b: f"({a}<{b})", Ops.CMPNE: lambda d, a, b: f"({a}!={b})",
  Ops.AND: lambda d, a, b: f"({a}&{b})", Ops.OR: lambda d, a, b: f"({a}|{b})", Ops.XOR: lambda d, a, b: f"({a}^{b})",
  Ops.WHERE: lambda d, c, a, b: f"({c}?{a}:{b})",
  Ops.EXP2: _fn("exp2"), Ops.LOG2: _fn("log2"), Ops.SQRT: _fn("sqrt"), Ops.SIN: _fn("sin"),
  Ops.RECIP: lambda d, x: f"({render_const(1.0, d)}/{x})",
  Ops.CAST: lambda d, x: f"(({d.c}){x})",
}


@dataclass
class Rendered:
  src: str
  flops: int                    # float ops executed: an inlined op runs where its user is written
  acc_trips: dict[int, int]     # ALLOC slot -> how many times its declaration runs (trips of the loops around it)


def render_c(sink: UOp, name: str) -> str:
  """C source of `void name(data0, data1, ...)` computing the loop program under sink."""
  return render(sink, name).src


def count_flops(sink: UOp) -> int:
  """Floating-point ALU ops the program executes: each op counted once per trip of the loop it is written in."""
  return render(sink, "flops").flops


def render(sink: UOp, name: str) -> Rendered:
  """The C source of the program, with what it costs."""
  lines = linearize(sink)
  topo = sink.toposort()
  uses: dict[UOp, int] = {}
  max_users: set[UOp] = set()   # sources of a MAX: ((a>b)?a:b) writes each twice
  for u in topo:
    for s in u.src: uses[s] = uses.get(s, 0) + 1
    if u.op is Ops.MAX: max_users.update(u.src)
  doubles: set[UOp] = set()     # inline expressions that hold a MAX
  # an ALLOC is declared where it is first placed inside loops (its outermost .after), else at the top
  decl_at: dict[UOp, UOp] = {}
  order = {ln.uop: k for k, ln in enumerate(lines) if ln.kind == "node"}
  for u in topo:
    if u.op is Ops.AFTER and u.src[0].op is Ops.ALLOC and u in order:
      a = u.src[0]
      if a not in decl_at or order[u] < order[decl_at[a]]: decl_at[a] = u
  for u in topo:
    # an ALLOC used directly (not through .after) is function-wide state: declared at the top
    used_bare = u.op is Ops.ALLOC and any(x.op is not Ops.AFTER and u in x.src for x in topo)
    if u.op is Ops.ALLOC and (u not in decl_at or used_bare): decl_at[u] = u

  buffers = sorted({u.arg.slot: u for u in topo if u.op is Ops.BUFFER}.items())
  slots = [s for s, _ in buffers]
  if len(set(slots)) != len([u for u in topo if u.op is Ops.BUFFER]):
    raise ValueError(f"{name}: two different BUFFERs share a slot ({slots})")
  alloc_slots = [u.arg.slot for u in topo if u.op is Ops.ALLOC]
  if len(set(alloc_slots)) != len(alloc_slots):
    raise ValueError(f"{name}: two different ALLOCs share a slot ({sorted(alloc_slots)}): each is acc{{slot}} in the C")
  params = ", ".join(f"{u.arg.dtype.c}* restrict data{s}" for s, u in buffers)
  out = [f"void {name}({params}) {{"]
  names: dict[UOp, str] = {}
  ops_in: dict[UOp, int] = {}   # float ops inside a name's inline expression, not yet counted
  trips, flops = [1], 0
  depth, counter = 1, [0]
  def emit(text: str): out.append("  " * depth + text)
  def new_name(prefix: str) -> str:
    counter[0] += 1
    return f"{prefix}{counter[0]}"
  # a one-element ALLOC only ever read at [0] is a plain local variable (a register), anything else an array
  at_zero = lambda i: i.op is Ops.CONST and i.arg == 0
  indexed = {base_alloc(u.src[0]) for u in topo if u.op is Ops.INDEX and not at_zero(u.src[1])}
  scalar = {u for u in topo if u.op is Ops.ALLOC and u.arg.size == 1 and u not in indexed}
  acc_trips: dict[int, int] = {}
  def declare(a: UOp) -> None:
    acc_trips[a.arg.slot] = trips[-1]
    emit(f"{a.arg.dtype.c} acc{a.arg.slot};" if a in scalar else f"{a.arg.dtype.c} acc{a.arg.slot}[{a.arg.size}];")

  for u in topo:   # leaves every line may refer to
    if u.op is Ops.CONST: names[u] = render_const(u.arg, u.dtype)
    elif u.op is Ops.BUFFER: names[u] = f"data{u.arg.slot}"
    elif u.op is Ops.ALLOC: names[u] = f"acc{u.arg.slot}"
    elif u.op is Ops.RANGE: names[u] = rname(u)

  for ln in lines:
    u = ln.uop
    if ln.kind == "open":
      if u.arg[1] is AxisType.THREAD: emit("#pragma omp parallel for")
      emit(f"for (int {names[u]} = 0; {names[u]} < {names[u.src[0]]}; {names[u]}++) {{")
      depth += 1
      trips.append(trips[-1] * (u.src[0].arg if u.src[0].op is Ops.CONST else 1))
      continue
    if ln.kind == "close":
      depth -= 1; emit("}"); trips.pop()
      continue
    if u.op is Ops.ALLOC:
      if decl_at[u] is u: declare(u)
    elif u.op is Ops.AFTER:
      names[u] = names[u.src[0]]
      if u.src[0].op is Ops.ALLOC and decl_at[u.src[0]] is u: declare(u.src[0])
    elif u.op is Ops.INDEX:
      base, i = u.src
      names[u] = names[base] if base_alloc(base) in scalar else f"{names[base]}[{names[i]}]"
    elif u.op is Ops.LOAD:
      names[u] = new_name("val")
      emit(f"{u.dtype.c} {names[u]} = {names[u.src[0]]};")
    elif u.op is Ops.STORE:
      emit(f"{names[u.src[0]]} = {names[u.src[1]]};")
      flops += ops_in.get(u.src[1], 0) * trips[-1]
    elif u.op in ALU:
      expr = C_ALU[u.op](u.dtype, *[names[s] for s in u.src])
      ops_in[u] = (u.dtype.is_float or any(s.dtype.is_float for s in u.src)) + sum(ops_in.get(s, 0) for s in u.src)
      if u.op is Ops.MAX or any(s in doubles for s in u.src): doubles.add(u)
      # shared values get a name; so does a MAX inside a MAX, whose text would otherwise double at every level
      if uses.get(u, 0) > 1 or (u in max_users and u in doubles):
        names[u] = new_name("alu")
        emit(f"{u.dtype.c} {names[u]} = {expr};")
        flops += ops_in.pop(u) * trips[-1]
      else: names[u] = expr
    elif u.op in (Ops.CONST, Ops.BUFFER, Ops.SINK): pass
    else: raise NotImplementedError(f"render_c: {u.op} has no C form (is this a tensor-level op in a loop program?)")
  out.append("}")
  return Rendered("\n".join(out), flops, acc_trips)


def base_alloc(u: UOp) -> UOp | None:
  """The ALLOC under a chain of AFTERs, if any."""
  while u.op is Ops.AFTER: u = u.src[0]
  return u if u.op is Ops.ALLOC else None

"""The linearizer: a loop program (a graph) -> an ordered list of lines with loop scopes.

Every node lives in the innermost loop it depends on: its open ranges are the ranges its sources
use, minus the ones an END has closed. The nesting of loops comes from the ENDs (the loops still
open at an END enclose the loops it closes). Inside one loop, nodes come in depth-first order of
the graph, and nested loops are placed as late as their users allow. declarations() says where among
those lines each ALLOC is declared, and whether it is a register or an array.
"""
from __future__ import annotations
import heapq
from dataclasses import dataclass
from uopc.uop import UOp, Ops, base_alloc, is_local


class LinearizeError(ValueError):
  """The loop program cannot be turned into nested loops (an unclosed or badly nested RANGE)."""


def rname(r: UOp) -> str: return f"ridx{r.arg[0]}"


@dataclass(frozen=True)
class Line:
  kind: str      # "open" a loop, "node" a value or statement, "close" a loop
  uop: UOp


def open_ranges(topo: list[UOp]) -> dict[UOp, frozenset[UOp]]:
  """For every node, the loops it sits inside."""
  rng: dict[UOp, frozenset[UOp]] = {}
  for u in topo:
    inner = frozenset().union(*(rng[s] for s in u.src)) if u.src else frozenset()
    if u.op is Ops.RANGE: inner = inner | {u}
    if u.op is Ops.END: inner = inner - set(u.src[1:])
    rng[u] = inner
  return rng


def loop_nesting(topo: list[UOp], rng: dict[UOp, frozenset[UOp]]) -> dict[UOp, list[UOp]]:
  """For every RANGE, the ranges enclosing it, outermost first."""
  ranges = [u for u in topo if u.op is Ops.RANGE]
  by_id: dict[int, UOp] = {}
  for r in ranges:
    if r.arg[0] in by_id: raise LinearizeError(f"two different loops are named {rname(r)}: {by_id[r.arg[0]]} and {r}")
    by_id[r.arg[0]] = r
  outer: dict[UOp, set[UOp]] = {r: set() for r in ranges}
  closed: set[UOp] = set()
  for u in topo:
    if u.op is not Ops.END: continue
    rs = sorted(u.src[1:], key=lambda r: r.arg[0])      # one END closing several loops: the lowest id is outermost
    for k, r in enumerate(rs):
      outer[r] |= set(rng[u]) | set(rs[:k])
      closed.add(r)
  for r in ranges:
    if r not in closed: raise LinearizeError(f"loop {rname(r)} (RANGE {r.arg}) is never closed: add .end({rname(r)})")
  # transitive closure, then check each set of enclosing loops is a chain
  full: dict[UOp, set[UOp]] = {}
  def close(r: UOp, seen: tuple = ()) -> set[UOp]:
    if r in full: return full[r]
    if r in seen: raise LinearizeError(f"loop {rname(r)} encloses itself")
    s = set(outer[r])
    for p in outer[r]: s |= close(p, seen + (r,))
    full[r] = s
    return s
  for r in ranges: close(r)
  nest = {r: sorted(full[r], key=lambda p: len(full[p])) for r in ranges}
  for r, chain in nest.items():
    for a, b in zip(chain, chain[1:]):
      if a not in full[b]:
        x, y = sorted((a, b), key=lambda q: q.arg[0])
        raise LinearizeError(f"loops {rname(x)} and {rname(y)} both enclose {rname(r)} but not each other")
  return nest


def linearize(sink: UOp) -> list[Line]:
  topo = sink.toposort()
  pos = {u: k for k, u in enumerate(topo)}
  rng = open_ranges(topo)
  if rng[sink]: raise LinearizeError(f"loops {[rname(r) for r in rng[sink]]} are still open at the end of the program")
  nest = loop_nesting(topo, rng)
  parent = {r: (chain[-1] if chain else None) for r, chain in nest.items()}
  depth = {r: len(chain) + 1 for r, chain in nest.items()}

  def scope_of(u: UOp) -> UOp | None:
    """The innermost open loop of u (None: the function body)."""
    inner = rng[u] - {u} if u.op is Ops.RANGE else rng[u]
    if u.op is Ops.RANGE: return u
    if not inner: return None
    return max(inner, key=lambda r: depth[r])

  def home(u: UOp) -> UOp | None:
    if u.op is Ops.END: return min(u.src[1:], key=lambda r: depth[r])   # an END belongs to the outermost loop it closes
    return scope_of(u)

  def chain(s: UOp | None) -> list[UOp | None]:
    out = [s]
    while s is not None: s = parent[s]; out.append(s)
    return out

  structural = lambda u: u.op in (Ops.RANGE, Ops.END)
  def item_in(s: UOp | None, u: UOp):
    """The item of scope s that contains u: u itself, or the block of the child loop it sits in (None if outside s)."""
    path = chain(home(u))
    if s not in path: return None
    k = path.index(s)
    if k == 0: return None if structural(u) else u
    return ("block", path[k - 1])

  items: dict[UOp | None, set] = {}
  deps: dict[object, set] = {}
  for u in topo:
    if u.op is Ops.SINK and u is sink: continue
    for s in chain(home(u)):
      it = item_in(s, u)
      if it is None: continue
      items.setdefault(s, set()).add(it)
      for m in u.src:
        im = item_in(s, m)
        if im is not None and im != it: deps.setdefault(it, set()).add(im)

  last_end: dict[UOp, int] = {}
  for e in topo:
    if e.op is Ops.END:
      for r in e.src[1:]: last_end[r] = pos[e]
  def key(it) -> tuple[int, int]:
    if isinstance(it, tuple): return (1, last_end[it[1]])   # nested loops go as late as their users allow
    return (0, pos[it])

  lines: list[Line] = []
  def emit(s: UOp | None) -> None:
    todo = items.get(s, set())
    waiting = {it: {d for d in deps.get(it, ()) if d in todo} for it in todo}
    users: dict[object, list] = {}
    for it, ds in waiting.items():
      for d in ds: users.setdefault(d, []).append(it)
    ready = [(key(it), k, it) for k, it in enumerate(todo) if not waiting[it]]
    heapq.heapify(ready)
    done = 0
    while ready:
      _, _, it = heapq.heappop(ready)
      done += 1
      if isinstance(it, tuple):
        lines.append(Line("open", it[1])); emit(it[1]); lines.append(Line("close", it[1]))
      else: lines.append(Line("node", it))
      for v in users.get(it, ()):
        waiting[v].discard(it)
        if not waiting[v]: heapq.heappush(ready, (key(v), id(v), v))
    if done != len(todo): raise LinearizeError("the loop program has a cycle (a value used before its loop ends)")
  emit(None)
  return lines


def declarations(topo: list[UOp], lines: list[Line]) -> tuple[dict[UOp, UOp], set[UOp]]:
  """ALLOC -> the node whose line declares it (itself: the top of the function), and the ALLOCs that are registers."""
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
    # local memory belongs to the work-group: declared once, at the top, whatever loops use it
    if u.op is Ops.ALLOC and (u not in decl_at or used_bare or is_local(u)): decl_at[u] = u
  # a one-element ALLOC only ever read at [0] is a plain local variable (a register), anything else an array
  at_zero = lambda i: i.op is Ops.CONST and i.arg == 0
  indexed = {base_alloc(u.src[0]) for u in topo if u.op is Ops.INDEX and not at_zero(u.src[1])}
  scalar = {u for u in topo if u.op is Ops.ALLOC and u.arg.size == 1 and u not in indexed and not is_local(u)}
  return decl_at, scalar

"""Data races in a loop program, found from its index expressions rather than from a run.

A THREAD loop's iterations run at the same time on different threads. Two iterations race when they can touch one
address of one buffer and at least one of them stores there. For each THREAD loop, every store to memory the loop's
iterations share (a parameter buffer, or an ALLOC declared outside the loop) is compared with every access to the
same memory in the loop: with index s(i, ...) for the store and a(i, ...) for the other access, iterations i1 != i2
collide when s(i1, x) == a(i2, y) for some values x, y of the loops inside it. Where both indices are c*i + g with
the same c and |a - s| over the inner loops' values (outer loops hold the same value in both iterations) stays below
|c|, no two iterations meet: proven independent. Otherwise it is a race (a store whose index does not depend on i:
every iteration writes one address) or, where the algebra cannot tell, a possible race that says so.

For a GPU kernel (chapter 12) local memory is shared by a work-group's items: every load of a local ALLOC must come
after a BARRIER that follows the stores it may read (local_races).

A run cannot find these reliably: a race shows only when threads interleave badly, never on one thread (a Mac without
libomp), and PoCL runs a work-group's items one after another. This reads the program, so it answers the same way on
every machine (issue 49).
"""
from __future__ import annotations
import math
import re
from dataclasses import dataclass
from uopc.linearize import linearize, open_ranges, loop_nesting, declarations, rname
from uopc.ops import AxisType
from uopc.symbolic import bounds, linear_form, ranges_in
from uopc.uop import UOp, Ops, is_local


@dataclass(frozen=True)
class Race:
  """Two accesses of one buffer from different iterations of a THREAD loop (certain: False when unproven)."""
  loop: str           # "ridx0 (0 <= ridx0 < 1000)"
  buffer: str         # "data1", "acc0"
  store: str          # the store's index expression, "ridx0*2"
  other: str          # the other access: "loads data1[(ridx0+1)]", "stores to data1[...]", "stores there too"
  certain: bool
  why: str

  def __str__(self) -> str:
    kind = "a race" if self.certain else "a possible race (independence not proven)"
    return (f"{kind}: in THREAD loop {self.loop}, one iteration stores to {self.buffer}[{self.store}] and another "
            f"{self.other}, the same element: {self.why}")


def _name(mem: UOp) -> str:
  if mem.op is Ops.BUFFER: return f"data{mem.arg.slot}"
  return f"lmem{mem.arg.slot}" if is_local(mem) else f"acc{mem.arg.slot}"


def _memory(index: UOp) -> UOp:
  """The BUFFER or ALLOC an INDEX addresses (under its AFTERs)."""
  m = index.src[0]
  while m.op is Ops.AFTER: m = m.src[0]
  return m


def _expr(u: UOp) -> str:
  return u.render({r: rname(r) for r in ranges_in(u)})


@dataclass(frozen=True)
class _Access:
  node: UOp         # the LOAD or STORE
  memory: UOp
  index: UOp
  lanes: int        # elements from index on (a vector access)

  @property
  def is_store(self) -> bool: return self.node.op is Ops.STORE

  def describe(self) -> str:
    verb = "stores to" if self.is_store else "loads"
    return f"{verb} {_name(self.memory)}[{_expr(self.index)}]"


def _access(u: UOp) -> _Access | None:
  if u.op not in (Ops.LOAD, Ops.STORE) or u.src[0].op is not Ops.INDEX: return None
  idx = u.src[0]
  lanes = (u.src[1] if u.op is Ops.STORE else u).dtype.count
  return _Access(u, _memory(idx), idx.src[1], lanes)


MAX_CASES = 200_000   # differences followed exactly before the analysis gives up and calls the pair unproven


def _differences(progressions: list[tuple[int, int, int]], const: int, window: tuple[int, int]) -> set[int] | None:
  """The values const + sum(step * t, lo <= t <= hi) can take inside window (None: more than MAX_CASES to follow).
  Big steps first, and only the t that can still land in the window once the rest is added, so that a row stride
  of 1536 beside a column step of 16 costs a few dozen cases, not the product of the loops' lengths."""
  progressions = sorted(progressions, key=lambda p: -abs(p[0]))
  rest = [(0, 0)] * (len(progressions) + 1)       # rest[k]: (min, max) of what progressions k.. can still add
  for k in range(len(progressions) - 1, -1, -1):
    step, lo, hi = progressions[k]
    a, b = sorted((step * lo, step * hi))
    rest[k] = (rest[k + 1][0] + a, rest[k + 1][1] + b)
  values = {const}
  for k, (step, lo, hi) in enumerate(progressions):
    want_lo, want_hi = window[0] - rest[k + 1][1], window[1] - rest[k + 1][0]
    nxt: set[int] = set()
    for v in values:
      t0, t1 = sorted(((want_lo - v) / step, (want_hi - v) / step)) if step else (lo, hi)
      for t in range(max(lo, math.ceil(t0)), min(hi, math.floor(t1)) + 1):
        nxt.add(v + step * t)
        if len(nxt) > MAX_CASES: return None
    values = nxt
  return {v for v in values if window[0] <= v <= window[1]}


def _collide(r: UOp, outer: set[UOp], s: _Access, a: _Access) -> tuple[bool, str] | None:
  """None where no two different iterations of r reach one element through s and a; else (certain, why).
  With s = c*r + gs and a = c*r + ga, iterations r1 != r2 meet where c*(r1 - r2) = ga - gs: the differences
  ga - gs are followed exactly over the loops' values (outer loops hold one value in both iterations, inner loops
  any value in each), a term that is not a loop variable over its bounds (then a meeting is possible, not certain)."""
  ts, cs = linear_form(s.index)
  ta, ca = linear_form(a.index)
  ks, ka = ts.pop(r, 0), ta.pop(r, 0)
  for t in (*ts, *ta):
    if r in ranges_in(t):
      return False, f"the index uses {rname(r)} through {_expr(t)}, not as c*{rname(r)} + the rest"
  if ks != ka:
    return False, f"{rname(r)} steps the two indices differently ({ks}*{rname(r)} and {ka}*{rname(r)})"
  extent = int(bounds(r)[1])
  if extent < 1: return None   # one iteration: nothing to race with
  exact = all(t.op is Ops.RANGE for t in (*ts, *ta))
  progressions: list[tuple[int, int, int]] = [(1, -(s.lanes - 1), a.lanes - 1)]   # the lanes of vector accesses
  for t in dict.fromkeys((*ts, *ta)):
    lo, hi = (int(x) for x in bounds(t))
    if set(ranges_in(t)) <= outer:   # one value in both iterations: its coefficients subtract
      if ta.get(t, 0) != ts.get(t, 0): progressions.append((ta.get(t, 0) - ts.get(t, 0), lo, hi))
      continue
    if t in ta: progressions.append((ta[t], lo, hi))
    if t in ts: progressions.append((-ts[t], lo, hi))
  span = abs(ks) * extent
  diffs = _differences(progressions, ca - cs, (-span, span))
  if diffs is None: return False, f"too many index values to follow (over {MAX_CASES})"
  if ks == 0:
    if 0 not in diffs: return None
    return exact, f"the store's index does not depend on {rname(r)}: every iteration writes that element"
  meets = sorted((v for v in diffs if v and v % ks == 0), key=abs)
  if not meets: return None
  d = -meets[0] // ks   # the other access is d iterations from the store's
  other = f"{rname(r)} {'+' if d > 0 else '-'} {abs(d)}"
  return exact, f"iteration {other} reaches an element iteration {rname(r)} stores"


def thread_races(sink: UOp) -> list[Race]:
  """Every pair of accesses in a THREAD loop of the loop program `sink` that may touch one element from two
  different iterations, at least one a store (empty: every THREAD loop proven free of races)."""
  if not isinstance(sink, UOp):
    raise TypeError(f"thread_races(sink): sink must be a UOp loop program, got {sink!r:.80}")
  topo = sink.toposort()
  lines = linearize(sink)
  nest = loop_nesting(topo, open_ranges(topo))
  decl_at, _ = declarations(topo, lines)
  inside: dict[UOp, list[UOp]] = {}     # THREAD loop -> the nodes in its body, in order
  declared_in: dict[UOp, set[UOp]] = {}   # THREAD loop -> the ALLOCs declared inside it (one per iteration)
  stack: list[UOp] = []
  where_declared = {at: a for a, at in decl_at.items()}
  for ln in lines:
    if ln.kind == "open": stack.append(ln.uop); continue
    if ln.kind == "close": stack.pop(); continue
    for r in stack:
      if r.arg[1] is not AxisType.THREAD: continue
      inside.setdefault(r, []).append(ln.uop)
      if ln.uop in where_declared and where_declared[ln.uop] is not ln.uop:
        declared_in.setdefault(r, set()).add(where_declared[ln.uop])
  races: list[Race] = []
  for r, body in inside.items():
    accesses = [x for x in map(_access, body) if x is not None and x.memory not in declared_in.get(r, set())]
    outer = set(nest[r])
    seen: set[tuple[UOp, UOp]] = set()
    for s in (x for x in accesses if x.is_store):
      for a in accesses:
        if a.memory is not s.memory or (a.node, s.node) in seen: continue
        seen.add((s.node, a.node))
        found = _collide(r, outer, s, a)
        if found is None: continue
        certain, why = found
        if s.memory.op is Ops.ALLOC:
          why += f" ({_name(s.memory)} is placed outside the THREAD loop: one variable that all its iterations share)"
        n = r.src[0].render({}) if r.src[0].op is Ops.CONST else _expr(r.src[0])
        races.append(Race(f"{rname(r)} (0 <= {rname(r)} < {n})", _name(s.memory), _expr(s.index),
                          "stores there too" if a.node is s.node else a.describe(), certain, why))
  # the one to show first: certain, and naming two different accesses (two index expressions)
  return sorted(races, key=lambda x: (not x.certain, x.other == "stores there too"))


def _unordered(events: list[tuple], own: list[set], launch=lambda r: False) -> list[int]:
  """The accesses among events (kind "load" | "store" | "barrier", memory, open loops, key, slot) that may meet
  another work-item's access of the other kind with no barrier between. Walking back from each access in program
  order: a barrier first means everything before it is done; the other kind of access to the same memory first is a
  race. At the top of a loop the walk takes both ways in: from the loop's last event (a store late in one trip meets
  a load early in the next) and from before the loop (the first trip). own[k]: keys that do not count against access
  k (the loads a store's own value is made of); one slot text on both sides is the work-item's own element."""
  def verdict(js, want: str, k: int) -> str | None:
    mem, slot = events[k][1], events[k][4]
    for j in js:
      kind, m, _, key, other_slot = events[j]
      if kind == "barrier": return "safe"
      if kind == want and m == mem and key not in own[k] and (slot is None or other_slot != slot): return "race"
    return None

  unordered = []
  for k, (kind, _, loops, _, _) in enumerate(events):
    if kind == "barrier": continue
    want = "store" if kind == "load" else "load"
    lo, hi, result = k, k, None      # [lo, hi]: the events already walked
    for r in reversed(loops):        # innermost loop first
      if launch(r): continue
      body = [j for j, e in enumerate(events) if r in e[2]]
      first, last = body[0], body[-1]
      result = verdict(range(lo - 1, first - 1, -1), want, k)
      if result: break
      if verdict(range(last, hi, -1), want, k) == "race": result = "race"; break
      lo, hi = first, last
    if (result or verdict(range(lo - 1, -1, -1), want, k)) == "race": unordered.append(k)
  return unordered


def local_races(sink: UOp) -> list[str]:
  """Accesses of local memory (an ALLOC shared by a work-group) that may meet another work-item's with no BARRIER
  between them: a load after a store it may read (read after write), and a store after a load that may still be
  reading the old value (write after read; the loads that feed the store's own value excepted). Walking back from
  each access in program order: a BARRIER first means everything before it is done; the other kind of access to the
  same memory first is a race. At the top of a loop the access sits in, the walk goes on from the loop's last event
  (a store late in one trip meets a load early in the next), then out to the enclosing loop."""
  if not isinstance(sink, UOp):
    raise TypeError(f"local_races(sink): sink must be a UOp loop program, got {sink!r:.80}")
  events: list[tuple[str, UOp | None, tuple[UOp, ...], UOp]] = []   # (kind, memory, open loops, node)
  stack: list[UOp] = []
  for ln in linearize(sink):
    if ln.kind == "open": stack.append(ln.uop); continue
    if ln.kind == "close": stack.pop(); continue
    if ln.uop.op is Ops.BARRIER: events.append(("barrier", None, tuple(stack), ln.uop)); continue
    acc = _access(ln.uop)
    if acc is not None and is_local(acc.memory):
      events.append(("store" if acc.is_store else "load", acc.memory, tuple(stack), ln.uop))

  found: list[str] = []
  own = [set(node.src[1].toposort()) if kind == "store" else set() for kind, _, _, node in events]
  launch = lambda r: r.arg[1] in (AxisType.GLOBAL, AxisType.LOCAL)   # each work-item is one value: no loop
  for k in _unordered([(kind, mem, loops, node, None) for kind, mem, loops, node in events], own, launch):
    kind, mem = events[k][0], events[k][1]
    if kind == "load":
      found.append(f"a race: a load of {_name(mem)} (local memory) may read another work-item's store with no "
                   f"barrier between them (a barrier must come after the stores a load reads, before the load)")
    else:
      found.append(f"a race: a store to {_name(mem)} (local memory) may overwrite what another work-item is still "
                   f"loading, with no barrier between the load and the store")
  return list(dict.fromkeys(found))


def check_no_races(name: str, program: UOp) -> None:
  """The visible check of a loop program's parallelism (assignments, `make check`): an AssertionError
  `name: expected no race, got a race: ...` where two iterations of a THREAD loop certainly touch one element, one
  storing, or a load of local memory is not ordered after the stores it reads by a barrier. The same answer on every
  machine and thread count, with or without OpenMP. A pair it cannot prove independent is printed as a note, not
  failed (a run on threads, check_threads_agree, may still show it). Prints `ok: name`."""
  if not isinstance(program, UOp):
    raise AssertionError(f"{name}: expected a loop program (a UOp, as sink(...) returns), got {program!r:.80}")
  races = thread_races(program)
  certain = [r for r in races if r.certain] + local_races(program)
  if certain: raise AssertionError(f"{name}: expected no race, got {certain[0]}")
  for r in races: print(f"note: {name}: {r}")
  print(f"ok: {name}")


# ---- OpenCL C source (a student's hand-written kernel: chapter 12, week 6) ----
def _statements(body: str) -> list[tuple[str, tuple[int, ...]]]:
  """The statements of C source in order, each with the loops (for / while / do, numbered) it sits in."""
  out: list[tuple[str, tuple[int, ...]]] = []
  stack: list[tuple[int, int]] = []   # (loop number, brace depth its body closes at; -1: one statement, no braces)
  depth, k, n, count = 0, 0, len(body), 0
  pending_loop: int | None = None
  while k < n:
    m = re.match(r"\s*(for|while)\s*\(", body[k:])
    if m:   # a loop header: its parentheses hold no statement of the body
      j, level = k + m.end(), 1
      while j < n and level:
        level += {"(": 1, ")": -1}.get(body[j], 0)
        j += 1
      count += 1
      pending_loop, k = count, j
      continue
    m = re.match(r"\s*do\b", body[k:])
    if m: count += 1; pending_loop, k = count, k + m.end(); continue
    c = body[k]
    if c.isspace(): k += 1; continue
    if c == "{":
      depth += 1
      if pending_loop is not None: stack.append((pending_loop, depth)); pending_loop = None
      k += 1; continue
    if c == "}":
      while stack and stack[-1][1] == depth: stack.pop()
      depth -= 1
      k += 1
      while stack and stack[-1][1] == -1: stack.pop()   # a braceless loop whose body was this block's statement
      continue
    j = body.find(";", k)
    j = n if j < 0 else j
    if pending_loop is not None: stack.append((pending_loop, -1)); pending_loop = None
    # a statement ends at ';' or where a block opens first (if (...) {)
    brace = body.find("{", k, j)
    end = brace if brace >= 0 else j + 1
    out.append((body[k:end].strip(), tuple(loop for loop, _ in stack)))
    k = end
    if brace < 0:
      while stack and stack[-1][1] == -1: stack.pop()
  return out


def opencl_local_races(src: str) -> list[str]:
  """local_races for OpenCL C source: in the kernel, every read of another work-item's slot of a __local array
  (an index other than the one the work-item stores at, and not a constant) is ordered after the stores it can see by
  a barrier(...) on every way there (the first trip of a loop and the trips after). A barrier placed before the
  stores, or only inside the loop, does not order the stores of stage 1 before the tree's first read."""
  if not isinstance(src, str): raise TypeError(f"opencl_local_races(src): src must be OpenCL C source, got {src!r:.80}")
  text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", src, flags=re.S)
  names = re.findall(r"__local\s+\w+\s+(\w+)\s*\[", text)
  if not names: return []
  access = re.compile(rf"\b({'|'.join(map(re.escape, names))})\s*\[")
  events: list[tuple] = []
  own: list[set] = []
  for s_id, (stmt, loops) in enumerate(_statements(text)):
    if re.match(r"__local\b", stmt): continue
    if re.search(r"\bbarrier\s*\(", stmt):
      events.append(("barrier", None, loops, (s_id, -1), None)); own.append(set()); continue
    stores, loads = [], []
    for m in access.finditer(stmt):
      j, level = m.end(), 1
      while j < len(stmt) and level:
        level += {"[": 1, "]": -1}.get(stmt[j], 0)
        j += 1
      index = re.sub(r"\s+", "", stmt[m.end():j - 1])
      is_store = re.match(r"\s*([-+*/]?=)(?!=)", stmt[j:]) is not None
      (stores if is_store else loads).append((m.group(1), index, m.start()))
    for name, index, at in loads:
      if not re.fullmatch(r"\d+", index): events.append(("load", name, loops, (s_id, at), index)); own.append(set())
    for name, index, at in stores:   # after the loads of its own statement, which it does not race with
      events.append(("store", name, loops, (s_id, at), index)); own.append({(s_id, a) for _, _, a in loads})
  # reads only: a store after another item's read of the same step is often guarded out of reach (if (lid < s)),
  # which text cannot tell; a tree with no barrier in its loop is caught by the read on the next trip
  found = [f"a race: the read {events[k][1]}[{events[k][4]}] is not ordered by a barrier(CLK_LOCAL_MEM_FENCE) after "
           f"the stores of other work-items it can see, on every way to it (the loop's first trip too)"
           for k in _unordered(events, own) if events[k][0] == "load"]
  return list(dict.fromkeys(found))


def check_local_barriers(name: str, src: str) -> None:
  """The visible check of a hand-written OpenCL kernel's local memory: `name: expected every read of another
  work-item's local slot after a barrier, got a race: ...`; PoCL runs a work-group's items one after another, so a
  run cannot show this race. Prints `ok: name`."""
  races = opencl_local_races(src)
  if races: raise AssertionError(f"{name}: expected every read of another work-item's __local slot ordered by a "
                                 f"barrier, got {races[0]}")
  print(f"ok: {name}")

"""Online softmax as a lowering: reductions that share a running max become one pass over their axis.

Section 11.6's algebra, applied by the compiler. A sum over j of

    g(j) * 2^(c * (x(j) - m)),   m = max_j' x(j'),  c > 0 a constant

can be carried as a running state while j goes by once: a running max M, and an accumulator A holding the sum
relative to M. When M grows to M', everything accumulated so far is rescaled by 2^(c * (M - M')):

    M' = max(M, x(j));  A' = A * 2^(c * (M - M')) + g(j) * 2^(c * (x(j) - M'))

The matching sum of exponentials (g = 1: softmax's denominator) rides along as one more accumulator L. So
softmax(x) @ v, log-sum-exp and softmax alone each need one pass instead of two or three (or six, fused).

find_groups() finds the (max, sum) pairs in a tensor graph; online_fusion() is the kernelizer's pass that keeps each
group in one kernel (uopc.kernelize calls it when the options ask for online softmax). OnlineSoftmax is a
reduce lowering: an optimizer puts it in Ctx.lowerings when the options ask for online softmax, and rangeify's
_reduce asks it first. Its lower_reduce returns the lowered value, or None to leave the reduce to the ordinary
lowering (the pattern did not match: a max of a different value, another axis, ...). It attempts each pass on a
fork of the context and adopts the fork only when the pass is complete, so a failed attempt leaves nothing behind.
"""
from __future__ import annotations
import itertools
from dataclasses import dataclass, field
from typing import Callable
from uopc.uop import UOp, Ops, ParamArg, AxisType, MOVEMENT, ALU, substitute
from uopc.symbolic import ranges_in
from uopc.rangeify import Ctx, rangeify, axis_parts, combos


def reachable(u: UOp, through: set[Ops]) -> list[UOp]:
  """u and every node below it reached only through ops in `through` (the boundary nodes are included)."""
  out, seen, stack = [], set(), [u]
  while stack:
    x = stack.pop()
    if x in seen: continue
    seen.add(x); out.append(x)
    if x is u or x.op in through: stack.extend(x.src)
  return out


def find_groups(roots: list[UOp]) -> dict[UOp, UOp]:
  """sum -> max for every REDUCE(ADD) over one axis of an exponential of something minus a REDUCE(MAX) over an axis
  of the same length: softmax's denominator. These are the candidates for one online pass (rangeify checks the
  exact form when it lowers them)."""
  groups = {}
  for sm in UOp(Ops.SINK, tuple(roots)).toposort():
    if sm.op is not Ops.REDUCE or sm.arg != (Ops.ADD, 1): continue
    e = sm.src[0]
    while e.op in MOVEMENT: e = e.src[0]
    if e.op is not Ops.EXP2: continue
    for mx in reachable(e, ALU | MOVEMENT):
      if mx.op is Ops.REDUCE and mx.arg == (Ops.MAX, 1) and mx.src[0].shape[-1] == sm.src[0].shape[-1]: groups[sm] = mx
  return groups


@dataclass
class OnlineFusion:
  """What online_fusion gives the kernelizer back."""
  roots: list[UOp]      # the roots, with the STAGEs of a group's broadcasts removed
  points: list[UOp]     # the materialization points, without the reduces a group's single pass computes
  notes: list[str]      # one line per group for Plan.explain()


def online_fusion(roots: list[UOp], cut: Callable[[list[UOp]], list[UOp]]) -> OnlineFusion:
  """Tensor-level roots -> the same roots with softmax groups fused. A group (its max, its sum, and the reduces its
  max reads, such as S = Q K^T) is computed once per key inside its consumer's single pass: fusing it recomputes
  nothing, so it is not cut, and a broadcast of its result is not staged either. cut(roots): the kernelizer's points."""
  groups = find_groups(roots)
  stages = {u for u in UOp(Ops.SINK, tuple(roots)).toposort() if u.op is Ops.STAGE}
  unstage = {s for s in stages if s.src[0] not in roots and not _one_pass(groups).isdisjoint(s.toposort())}
  if unstage:   # other roots, other nodes: their groups are found again (else once per plan)
    roots = UOp.wrap(roots, unstage, lambda n: n.src[0])
    groups = find_groups(roots)
  one_pass = _one_pass(groups)
  return OnlineFusion(roots, [p for p in cut(roots) if p not in one_pass or p in roots], _notes(roots, groups))


def _one_pass(groups: dict[UOp, UOp]) -> set[UOp]:
  """The reduces the groups' single passes compute: each sum, each max, and the reduces a max reads."""
  out = set(groups) | set(groups.values())
  for mx in groups.values(): out |= {x for x in reachable(mx.src[0], ALU | MOVEMENT) if x.op is Ops.REDUCE}
  return out


def _notes(roots: list[UOp], groups: dict[UOp, UOp]) -> list[str]:
  """explain()'s line per group: the reductions its one pass merges."""
  topo, notes = UOp(Ops.SINK, tuple(roots)).toposort(), []
  for sm, mx in groups.items():
    # the weighted sums over the same axis that read this softmax (P @ V) ride in the same pass
    users = [u for u in topo if u.op is Ops.REDUCE and u.arg == (Ops.ADD, 1) and u is not sm
             and mx in reachable(u.src[0], ALU | MOVEMENT)]
    notes.append(f"online softmax: {2 + len(users)} reductions merged into 1 pass (max{list(mx.shape)}, "
                 f"sum{list(sm.shape)}" + "".join(f", sum{list(u.shape)}" for u in users) + ")")
  return notes


@dataclass
class Frame:
  """An online pass being built: its loop, and the group members its body asked for (as placeholders)."""
  j: UOp
  placeholders: dict[tuple, UOp] = field(default_factory=dict)   # (member, idx) -> placeholder load


def _factors(u: UOp) -> list[UOp]:
  return _factors(u.src[0]) + _factors(u.src[1]) if u.op is Ops.MUL else [u]


def _exp_form(e: UOp, m: UOp) -> tuple[UOp, UOp] | None:
  """(x, c) if e is 2^((x + m*-1) * c) with c a positive constant, else None."""
  if e.op is not Ops.EXP2 or e.src[0].op is not Ops.MUL: return None
  inner, c = e.src[0].src
  if c.op is not Ops.CONST or c.arg <= 0 or inner.op is not Ops.ADD: return None
  x, neg = inner.src
  if neg.op is not Ops.MUL or neg.src[0] is not m or neg.src[1].op is not Ops.CONST or neg.src[1].arg != -1: return None
  return x, c


class OnlineSoftmax:
  """The online-softmax reduce lowering for one kernel body. Its own memo lives in ctx.scratch["online"] (forked
  with the context): the finished row max and sum ("final"), the column arrays of a weighted sum ("columns") and the
  running state of each pass ("state")."""
  name = "online"

  def __init__(self, body: UOp):
    self.groups = find_groups([body])   # sum -> max
    self.frames: list[Frame] = []       # the passes being built, innermost last
    self._marks = itertools.count(1)    # placeholder ids: unique within this lowering

  def placeholder(self, dtype) -> UOp:
    """A stand-in value (a load of an ALLOC that is never rendered): unique, so it can be found and replaced."""
    return UOp(Ops.ALLOC, (), ParamArg(-next(self._marks), dtype, (1,))).index(0).load()

  def lower_reduce(self, u: UOp, idx: tuple[UOp, ...], ctx: Ctx) -> UOp | None:
    """The value of REDUCE u at idx, computed in one online pass; None if u is not part of such a pass."""
    if u.arg[1] != 1 or not self.groups: return None
    memo = ctx.scratch.setdefault(self.name, {})
    members = {**{s: s for s in self.groups}, **{m: s for s, m in self.groups.items()}}
    # asked for inside a pass being built: hand out a placeholder, resolved when the pass is finished
    for fr in reversed(self.frames):
      if u in members and fr.j not in ranges_in(*idx):
        key = (u, idx)
        if key not in fr.placeholders: fr.placeholders[key] = self.placeholder(u.dtype)
        return fr.placeholders[key]
    if u in members and ("final", u, idx) in memo: return memo[("final", u, idx)]
    # a weighted sum whose output columns are all unrolled keeps them in one array, updated by a loop over the
    # columns inside the pass (the book's acc2[64]): one pass serves every column, and the column loop vectorises
    columns = u not in members and len(idx) > 0 and idx[-1].op is Ops.CONST and u.shape[-1] > 1
    if columns and ("columns", u, idx[:-1]) in memo:
      arr, scale = memo[("columns", u, idx[:-1])]
      return arr.index(idx[-1]).load() * scale if scale is not None else arr.index(idx[-1]).load()
    if u.arg[0] is Ops.ADD and u not in self.groups: body = u.src[0]    # a weighted sum: sum_j g(j) * softmax_j
    elif u in members: body = members[u].src[0]                        # the group's own sum (softmax, logsumexp)
    else: return None
    trial = ctx.fork()
    r = self._attempt(u, idx, trial, members, body, columns)
    if r is not None: ctx.adopt(trial)
    return r

  def _attempt(self, u, idx, ctx: Ctx, members, body, columns) -> UOp | None:
    memo = ctx.scratch[self.name]
    # the pass: one loop over the reduce axis, shared by the unrolled copies of this reduce (like _reduce)
    n = body.shape[-1]
    rkey = (u if u.arg[0] is Ops.ADD and u not in self.groups else members[u], frozenset(ranges_in(*idx)))
    if (parts := ctx.reduce_ranges.get(rkey)) is None:
      parts = ctx.reduce_ranges[rkey] = [axis_parts(ctx, n, ctx.opts.unroll, AxisType.REDUCE)]
    j = parts[0][0]
    if j.op is not Ops.RANGE: return None
    keys = [c[0] for c in combos(parts)]          # the keys of one iteration: a tile of `unroll` keys
    col = ctx.range(u.shape[-1], AxisType.LOOP) if columns else None
    at = idx[:-1] + (col,) if columns else idx
    self.frames.append(Frame(j))
    try: summands = [rangeify(body, at + (kx,), ctx) for kx in keys]
    finally: fr = self.frames.pop()
    got = {k[0]: (k, p) for k, p in fr.placeholders.items()}
    sums = [m for m in got if m in self.groups]
    maxes = [m for m in got if m not in self.groups]
    if len(maxes) != 1 or len(sums) > 1: return None
    mx = maxes[0]
    (_, midx), pm = got[mx]
    if sums and (self.groups[sums[0]] is not mx or got[sums[0]][0][1] != midx): return None
    pl = got[sums[0]][1] if sums else None
    # each key's summand must be g(j) * 2^((x(j) - m) c) * h, g free of m and l, h free of j
    xs, gs, hs, cs = [], [], [], set()
    for kx, summand in zip(keys, summands):
      exps, g, h = [], [], []
      for f in _factors(summand):
        holds = set(f.toposort())
        if pm in holds: exps.append(f)
        elif pl is not None and pl in holds: h.append(f)
        else: g.append(f)
      if len(exps) != 1 or (form := _exp_form(exps[0], pm)) is None or any(j in ranges_in(f) for f in h): return None
      x, c = form
      if col is not None and col in ranges_in(x): return None
      if rangeify(mx.src[0], midx + (kx,), ctx) is not x: return None   # a max of a different value
      if pl is not None and rangeify(sums[0].src[0], midx + (kx,), ctx) is not exps[0]: return None
      xs.append(x); gs.append(g); hs.append(tuple(h)); cs.add(c)
    if len(cs) != 1 or len(set(hs)) != 1: return None
    h, c = list(hs[0]), cs.pop()
    m_final, l_final, a_final = _online_loop(ctx, memo, self.groups, mx, midx, idx, j, xs, c, gs, u, col)
    # values computed with placeholders inside the pass are not the truth anywhere else: forget them
    marks = set(fr.placeholders.values())
    ctx.memo = {k: v for k, v in ctx.memo.items() if not isinstance(v, UOp) or marks.isdisjoint(v.toposort())}
    if set(ranges_in(*idx)) == set(ranges_in(*midx)):   # the row's max and sum are now known, for uses after the pass
      memo[("final", mx, midx)] = m_final
      group_sum = next((s for s, m in self.groups.items() if m is mx), None)
      if group_sum is not None: memo[("final", group_sum, midx)] = l_final
    if u in members: return m_final if u is mx else l_final
    scale = None
    for f in h:
      f = substitute(f, {pl: l_final} if pl is not None else {})
      scale = f if scale is None else scale * f
    if columns:
      memo[("columns", u, idx[:-1])] = (a_final, scale)
      a_final = a_final.index(idx[-1]).load()
    return a_final * scale if scale is not None else a_final


def _online_loop(ctx: Ctx, memo: dict, groups: dict, mx: UOp, midx, idx, j: UOp, xs: list[UOp], c: UOp,
                 gs: list[list[UOp]], u: UOp, col: UOp | None = None):
  """Build (or reuse) the running max and sum of this group's row, and one rescaled accumulator for u at idx.
  xs: the scores of the keys one iteration takes (a tile), gs: each key's other factors."""
  dt = xs[0].dtype
  # the state lives where the accumulators do: inside every output loop (a loop over output columns that are not
  # unrolled makes its own pass, as in section 11.4; an optimizer that unrolls them gets exactly one)
  key = ("state", mx, midx, frozenset(ranges_in(*idx)))
  if key not in memo:
    M, L = ctx.alloc(dt), ctx.alloc(dt)
    Mr, Lr = M.after(*ranges_in(*idx)), L.after(*ranges_in(*idx))
    init_m = Mr.index(0).store(UOp.const(float("-inf"), dt))
    init_l = Lr.index(0).store(UOp.const(0.0, dt))
    Mj, Lj = Mr.after(init_m, j), Lr.after(init_l, j)
    m_old = Mj.index(0).load()
    m_new = m_old
    for x in xs: m_new = m_new.maximum(x)
    corr = UOp(Ops.EXP2, ((m_old + m_new * -1) * c,))                 # rescale what was accumulated so far
    ps = [UOp(Ops.EXP2, ((x + m_new * -1) * c,)) for x in xs]
    tile = ps[0]
    for p in ps[1:]: tile = tile + p
    st_l = Lj.index(0).store(Lj.index(0).load() * corr + tile)
    st_m = Mj.index(0).store(m_new)
    state = UOp(Ops.SINK, (st_l, st_m))
    done = state.end(j)
    memo[key] = (Mr, Lr, corr, ps, state, done)
  Mr, Lr, corr, ps, state, done = memo[key]
  m_final = Mr.after(done).index(0).load()
  l_final = Lr.after(done).index(0).load()
  if u.arg[0] is not Ops.ADD or u in groups: return m_final, l_final, l_final
  weight = None
  for p, g in zip(ps, gs):
    for f in g: p = p * f
    weight = p if weight is None else weight + p
  if col is None:   # one accumulator
    A = ctx.alloc(dt)
    Ar = A.after(*ranges_in(*idx))
    init_a = Ar.index(0).store(UOp.const(0.0, dt))
    Aj = Ar.after(init_a, j)
    st_a = Aj.index(0).store(Aj.index(0).load() * corr + weight)
    return m_final, l_final, Ar.after(UOp(Ops.SINK, (st_a, state)).end(j)).index(0).load()
  # one array of accumulators, every column updated by a loop inside the pass; returned unindexed
  n = col.src[0].arg
  A = ctx.alloc(dt, n)
  Ar = A.after(*ranges_in(*idx))
  c0 = ctx.range(n, col.arg[1])
  init_a = Ar.index(c0).store(UOp.const(0.0, dt)).end(c0)
  Aj = Ar.after(init_a, j, col)
  st_a = Aj.index(col).store(Aj.index(col).load() * corr + weight).end(col)
  return m_final, l_final, Ar.after(UOp(Ops.SINK, (st_a, state)).end(j))

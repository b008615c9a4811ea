"""Sibling outputs: the elementwise outputs of one realize that no other kernel reads, computed by one kernel (a
multi-output, multi-tensor kernel: what PyTorch's fused AdamW is for an optimizer step; NOTES 45).

An optimizer step realizes, for every parameter, its new value and new moments: three outputs of the parameter's
shape, each one kernel of its own (159 kernels for the baby GPT's 53 parameters), each reading the gradient again,
and the parameter's kernel reading the two moments back from memory. Here:

  sibling_groups(roots, points)   which points share a kernel: elementwise roots that no point outside the group reads;
                                  a group member may use another at the same element (the new parameter reads the new
                                  moments), and then computes it inline instead of loading it
  merge(programs)                 the members' loop programs as one: members whose loops are the same loops share
                                  them (one loop nest storing m, v and p, each value computed once), the others follow
                                  one after another, each its own loop nest (its loops renumbered)
"""
from __future__ import annotations
from uopc.uop import UOp, Ops, ALU, substitute

MIN_GROUP = 2   # a group of one is the ordinary kernel


def _reads(p: UOp, points: set[UOp]) -> set[UOp]:
  """The points p's kernel reads (the walk stops at them: their values come from their buffers). It starts below p,
  at p's sources: a STAGE's body may itself be a point (x.contiguous() of a root x), which the STAGE's kernel then
  copies from its buffer, so that body is a read too."""
  out, seen, stack = set(), set(), list(p.src)
  while stack:
    u = stack.pop()
    if u in seen: continue
    seen.add(u)
    if u in points: out.add(u); continue
    stack.extend(u.src)
  return out


def _elementwise(p: UOp, points: set[UOp]) -> bool:
  """No REDUCE between p and the points it reads (a reduction is a kernel of its own)."""
  seen, stack = set(), [p]
  while stack:
    u = stack.pop()
    if u in seen or (u in points and u is not p): continue
    seen.add(u)
    if u.op in (Ops.REDUCE, Ops.STAGE): return False
    stack.extend(u.src)
  return True


def _at_same_element(user: UOp, p: UOp, points: set[UOp]) -> bool:
  """Whether user reads p only through ALU ops (so at the very element it computes), with the same shape."""
  if user.shape != p.shape: return False
  seen, stack = set(), [user]
  while stack:
    u = stack.pop()
    if u in seen or u is p: continue
    seen.add(u)
    if u is not user and u in points: continue
    if p in u.src and u.op not in ALU: return False
    stack.extend(u.src)
  return True


def sibling_groups(roots: list[UOp], points: list[UOp]) -> list[tuple[UOp, ...]]:
  """points in kernel order, as groups: each group one kernel (most are groups of one). A group sits where its last
  member was: every member's inputs are computed by then, and no point outside the group reads a member."""
  pset, rset = set(points), set(roots)
  reads = {p: _reads(p, pset) for p in points}
  cand = {p for p in points if p in rset and p.shape and p.op is not Ops.STAGE and _elementwise(p, pset)}
  changed = True
  while changed:   # a member read by a kernel outside the group, or at another element, is a kernel of its own
    changed = False
    for p in points:
      for q in reads[p] & cand:
        if p not in cand or not _at_same_element(p, q, pset): cand.discard(q); changed = True
  if len(cand) < MIN_GROUP: return [(p,) for p in points]
  last = max(k for k, p in enumerate(points) if p in cand)
  group = tuple(p for p in points if p in cand)
  return [(p,) for p in points[:last] if p not in cand] + [group] + [(p,) for p in points[last + 1:]]


def merge(programs: list[UOp]) -> UOp:
  """One loop program from several (each SINK(END(stores, *loops)) or SINK(stores)): those with the same loops share
  them, the rest follow one after another with their loops renumbered past the ones before."""
  nests: dict[tuple[UOp, ...], list[UOp]] = {}
  for prog in programs:
    for e in prog.src:
      loops = tuple(e.src[1:]) if e.op is Ops.END else ()
      body = e.src[0] if e.op is Ops.END else e
      nests.setdefault(loops, []).extend(body.src if body.op is Ops.SINK else (body,))
  out, used = [], 0
  for loops, stores in nests.items():
    ranges = {u for s in stores for u in s.toposort() if u.op is Ops.RANGE and u.arg[0] >= 0}
    fresh = {r: UOp(Ops.RANGE, r.src, (used + r.arg[0], r.arg[1])) for r in ranges}
    used += max((r.arg[0] for r in ranges), default=-1) + 1
    nest = UOp(Ops.SINK, tuple(stores)) if len(stores) > 1 else stores[0]
    out.append(substitute(nest.end(*loops) if loops else nest, fresh) if fresh else nest.end(*loops) if loops else nest)
  return UOp(Ops.SINK, tuple(out))

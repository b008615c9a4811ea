"""A realize's passes one at a time, each as (the graph before, the graph after, the rewrites between), to be drawn.

The tensor-level passes are run again here, in the order uopc.kernelize._make_plan runs them and with its own
functions (its lines are fixed by the book, so it cannot stop to report between them; tests/viz/test_viz.py checks that
the cut found here gives the plan's kernels). The kernels' passes are read off the plan: each kernel's body, the
program rangeify made of it (kept by uopc.viz.trace while recording), simplify's rewrites of that program (simplify
run again, each rewrite logged), and the linearized loops.

replay(roots, rewrites[:k]) rebuilds the graph as it was after k rewrites, for stepping through a pass.
"""
from __future__ import annotations
import re
from dataclasses import dataclass, field
from uopc import kernelize
from uopc.codegen.online import online_fusion
from uopc.helpers import prod
from uopc.symbolic import symbolic_rules
from uopc.uop import UOp, Ops, rewrite_once


@dataclass
class Pass:
  name: str
  before: list          # the graph the pass takes (its roots; [] where the pass starts a new graph)
  after: list           # the graph it gives
  rewrites: list = field(default_factory=list)   # (node, what it became), in the order they were made
  marks: dict = field(default_factory=dict)      # node -> outline (the cut's points)
  notes: dict = field(default_factory=dict)      # node -> one more line (the kernel a point becomes)
  doc: str = ""
  local: bool = False   # the rewrites were made on expressions inside the pass (each is drawn alone), not on before


def _docs() -> dict[str, str]:
  """Each pass's line in kernelize's docstring: what it does, said once, there."""
  out = {}
  for line in (kernelize.__doc__ or "").splitlines():
    if m := re.match(r"  (\w[\w.]*)\s{2,}(.*)", line): out[m.group(1)] = m.group(2).strip()
  return out


DOCS = {**_docs(), "normalize": "Tensor data -> numbered inputs (graphs of one shape are one object)",
        "layout": _docs().get("opt.layout", "the optimizer's layout pass"),
        "cut": "where kernels are cut: roots, STAGEs, REDUCEs (outlined), each point a kernel",
        "kernel body": "what this kernel computes: the other points read back from their buffers",
        "rangeify": "the tensor-level body -> a loop program (RANGE, INDEX, LOAD, STORE, END); each index is "
                    "simplified as it is built (section 11.5): those rewrites one by one",
        "simplify": "the final cleanup of every index expression (uopc.symbolic), rewrite by rewrite",
        "lower": "the optimizer's own lowering (no rangeify step to show)",
        "linearize": "the loop program -> ordered lines in nested loops (drawn as loops, the C beside)"}


def traced_rewrite(root: UOp, rules, log: list, memo: dict | None = None) -> UOp:
  """uopc.uop.graph_rewrite, with every rewrite appended to log as (node, result) in the order it is made."""
  memo = {} if memo is None else memo
  for u in root.toposort():
    if u in memo: continue
    new = u.replace(src=tuple(memo[s] for s in u.src)) if u.src else u
    if (r := rewrite_once(new, rules)) is not None:
      log.append((new, r))
      new = traced_rewrite(r, rules, log, memo)
    memo[u] = new
  return memo[root]


def replay(roots: list, rewrites: list, rebuild=lambda u, src: u.replace(src=src)) -> list:
  """roots with the rewrites applied in order: each node rebuilt over its rewritten sources, then replaced by what it
  became (itself rewritten) if a rewrite names it. With all the rewrites of a graph_rewrite this is its result.
  rebuild(u, sources) makes a node like u over new sources (a UOp's replace, or a recorded trace's own)."""
  mapping = {}
  for before, after in rewrites: mapping.setdefault(before, after)
  memo: dict = {}

  def apply(u):
    stack = [(u, False)]
    while stack:
      x, ready = stack.pop()
      if x in memo: continue
      if not ready:
        stack.append((x, True)); stack.extend((s, False) for s in x.src if s not in memo); continue
      y = rebuild(x, tuple(memo[s] for s in x.src)) if x.src else x
      memo[x] = y
      if y in mapping:
        memo[y] = y           # what it became may hold it (a STAGE around it): that copy stays
        memo[x] = apply(mapping[y])
    return memo[u]
  return [apply(r) for r in roots]


def _pairs(old: list[UOp], new: list[UOp]) -> list[tuple[UOp, UOp]]:
  """normalize's replacements: each Tensor's data buffer (or an empty tensor) and what took its place."""
  out, seen, stack = [], set(), list(zip(old, new))
  while stack:
    o, n = stack.pop()
    if o is n or (o, n) in seen: continue
    seen.add((o, n))
    if o.op is not n.op or not o.src or len(o.src) != len(n.src): out.append((o, n))
    else: stack.extend(zip(o.src, n.src))
  return sorted(out, key=lambda p: str(p[0].arg))


def tensor_passes(roots: list[UOp] | None, norm: list[UOp], options) -> tuple[list[Pass], list[UOp]]:
  """The passes from a realize's graph (roots, None if not at hand) to the kernelizer's cut; and the cut's points."""
  passes = [Pass("normalize", roots, norm, _pairs(roots, norm))] if roots is not None else []
  stripped, log = [], []
  memo: dict = {}
  for r in norm: stripped.append(traced_rewrite(r, kernelize.strip_detach, log, memo))
  passes.append(Pass("strip_detach", norm, stripped, log))
  staged = stripped if options.fuse_reduce else kernelize.stage_broadcast_compute(stripped)
  passes.append(Pass("stage_broadcast_compute", stripped, staged, _staged(stripped, staged)))
  opt = kernelize.BoundOpt(options.opt, options) if options.opt is not None else None
  laid = opt.layout(staged) if opt is not None else staged
  passes.append(Pass("layout", staged, laid, _staged(staged, laid)))
  points = kernelize._materialize_points(laid, options.fuse_reduce)
  cut = laid
  if options.online_softmax:
    online = online_fusion(laid, lambda rs: kernelize._materialize_points(rs, options.fuse_reduce))
    passes.append(Pass("online_fusion", laid, online.roots))
    cut, points = online.roots, online.points
  points = [p for p in points if prod(p.shape)]
  passes.append(Pass("cut", cut, cut, marks={p: "point" for p in points}))
  for p in passes: p.doc = DOCS.get(p.name, "")
  return passes, points


def _staged(before: list[UOp], after: list[UOp]) -> list[tuple[UOp, UOp]]:
  """A pass that wraps nodes in STAGEs (UOp.wrap): each new STAGE's source and the STAGE, sources first."""
  old = set(UOp(Ops.SINK, tuple(before)).toposort())
  return [(u.src[0], u) for u in UOp(Ops.SINK, tuple(after)).toposort() if u.op is Ops.STAGE and u not in old]


def kernel_passes(kernel, raw: UOp | None, log: list) -> list[Pass]:
  """One kernel's passes: its body, rangeify's program (with the rewrites simplify made of each index while it was
  built, log) and the final simplify's rewrites of it (or the optimizer's lowering, where it built the loops
  itself), then linearize (drawn as loops beside the C, by the caller)."""
  passes = [Pass("kernel body", [], [kernel.body])]
  if raw is not None:
    final: list = []
    done = traced_rewrite(raw, symbolic_rules, final)
    seen = set(final)
    passes += [Pass("rangeify", [kernel.body], [raw], [rw for rw in log if rw not in seen], local=True),
               Pass("simplify", [raw], [done], final if done is kernel.ast else [])]
    if done is not kernel.ast: passes.append(Pass("lower", [done], [kernel.ast]))   # an optimizer's later steps
  else: passes.append(Pass("lower", [kernel.body], [kernel.ast]))
  passes.append(Pass("linearize", [kernel.ast], [kernel.ast]))
  for p in passes: p.doc = DOCS.get(p.name, "")
  return passes

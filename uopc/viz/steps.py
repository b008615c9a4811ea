"""Reading a recorded trace (uopc.viz.record): the graph of any pass at any step, drawn, with what changed outlined.

The trace's node table is turned back into nodes that behave like UOps for drawing (op, src) and are hash-consed
the same way (one node per op, dtype, arg and sources), so replaying a pass's first k rewrites (uopc.viz.passes.replay)
gives exactly the graph the compiler had after them. Nothing here needs the compiler: a trace can be read anywhere.
"""
from __future__ import annotations
from uopc.ops import Ops
from uopc.viz.dag import toposort, uop_graph
from uopc.viz.passes import replay
from uopc.viz.svg import Node, render


class TNode:
  """One node of a trace's table."""
  __slots__ = ("n", "op", "dtype", "arg", "src", "lines", "kind", "title")

  def __init__(self, n: int, op: str, dtype: str, arg: str, src: tuple, lines: list, kind: str, title: str):
    self.n, self.op, self.dtype, self.arg, self.src = n, Ops[op], dtype, arg, src
    self.lines, self.kind, self.title = lines, kind, title

  def box(self) -> Node: return Node(list(self.lines), self.kind, self.title)


class Table:
  def __init__(self, rows: list[list]):
    self.nodes: list[TNode] = []
    self.by_key: dict[tuple, TNode] = {}
    for op, dtype, arg, src, lines, kind, title in rows:   # row k is node k, even if a row repeats an earlier one
      self._add(op, dtype, arg, tuple(self.nodes[s] for s in src), lines, kind, title, always=True)

  def _add(self, op, dtype, arg, src, lines, kind, title, always: bool = False) -> TNode:
    key = (op, dtype, arg, tuple(s.n for s in src))
    if (t := self.by_key.get(key)) is None or always:
      t = TNode(len(self.nodes), op, dtype, arg, src, lines, kind, title)
      self.nodes.append(t)
      self.by_key.setdefault(key, t)
    return t

  def rebuild(self, like: TNode, src: tuple) -> TNode:
    """The node like `like` over other sources: the recorded one if the compiler made it, else a new one."""
    return self._add(like.op.name, like.dtype, like.arg, src, like.lines, like.kind, like.title)

  def __getitem__(self, n: int) -> TNode: return self.nodes[n]


def steps(p: dict) -> int:
  """How many steps a pass has after its first graph: one per rewrite (at least one: the pass as a whole); a pass
  whose rewrites were made inside it (rangeify's of each index) has one more, its result."""
  n = len(p.get("rewrites", []))
  return n + 1 if p.get("local") else max(1, n)


def graph_at(table: Table, p: dict, step: int | None = None) -> tuple[list[TNode], set[TNode], str]:
  """The roots of the pass's graph after `step` steps (None: the last), the nodes that step made, and a line saying
  what it did. Step 0 is the graph before the pass."""
  before, after = [table[i] for i in p["before"]], [table[i] for i in p["after"]]
  rewrites = [(table[a], table[b]) for a, b in p.get("rewrites", [])]
  n = steps(p)
  step = n if step is None else max(0, min(step, n))
  if step == 0: return (before or after), set(), "before the pass"
  if p.get("local"):   # each rewrite drawn alone: the expression, and what it became
    if step == n: return after, set(), "after the pass"
    a, b = rewrites[step - 1]
    return [a, b], set(toposort([b])) - set(toposort([a])) | {b}, f"rewrite {step} of {n - 1}: {p['texts'][step - 1]}"
  if not rewrites or step == n:
    prev = before if step == n and not rewrites else replay(before, rewrites[:n - 1], table.rebuild)
    roots, what = after, (f"rewrite {n} of {n}: {p['texts'][-1]}" if rewrites else "after the pass")
  else:
    prev = replay(before, rewrites[:step - 1], table.rebuild)
    roots, what = replay(before, rewrites[:step], table.rebuild), f"rewrite {step} of {n}: {p['texts'][step - 1]}"
  old = set(toposort(prev))
  new = {u for u in toposort(roots) if u not in old}
  return roots, (new if old and len(new) < len(old) + len(new) else set()), what


def pass_svg(table: Table, p: dict, step: int | None = None) -> tuple[str, str]:
  """The pass drawn at a step (SVG), and what the step did. The changed nodes are outlined in red, the cut's points
  in blue, each with the kernel it becomes."""
  if "loops" in p: return p["loops"], "the loops of the linearized program"
  roots, changed, what = graph_at(table, p, step)
  marks = {table[int(k)]: m for k, m in p.get("marks", {}).items()} if step is None or step >= steps(p) else {}
  notes = {table[int(k)]: t for k, t in p.get("notes", {}).items()} if marks else {}
  marks.update({u: "changed" for u in changed if u not in marks})
  if p.get("local") and step is not None and 0 < step < steps(p):
    # one rewrite made inside the pass: the expression it found, and what that became, drawn apart
    a, b = (render(uop_graph(r, m, describe=TNode.box), legend=False, caption=c)
            for r, m, c in zip(roots, ({}, marks), ("found", "became")))
    return f'<div style="display:flex;gap:32px;align-items:flex-start">{a}{b}</div>', what
  return render(uop_graph(roots, marks, notes=notes, describe=TNode.box)), what

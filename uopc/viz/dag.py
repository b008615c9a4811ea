"""A UOp graph as a drawing: one box per node (op; dtype and shape; arg), coloured by kind, an edge per source.

Only the node's fields are read (op, src, arg, dtype, shape), so this module imports no compiler module but the op
table.
"""
from __future__ import annotations
from typing import Any
from uopc.ops import ALU, MOVEMENT, Ops
from uopc.viz.svg import Graph, Node, render

KIND = {**{op: "alu" for op in ALU | {Ops.VECTORIZE, Ops.GEP, Ops.WMMA}},
        **{op: "movement" for op in MOVEMENT},
        Ops.BUFFER: "buffer", Ops.ALLOC: "buffer", Ops.CONST: "const", Ops.REDUCE: "reduce",
        Ops.RANGE: "range", Ops.END: "range", Ops.SPECIAL: "range", Ops.BARRIER: "range",
        Ops.INDEX: "load", Ops.LOAD: "load", Ops.AFTER: "load", Ops.STORE: "store", Ops.STAGE: "stage"}
WIDE = 34   # characters a label line keeps; the whole text is in the node's title


def short(s: str, n: int = WIDE) -> str: return s if len(s) <= n else s[:n - 1] + "…"


def dtype_name(dtype) -> str: return repr(dtype).removeprefix("dtypes.")


def arg_text(u) -> str:
  """The arg as a reader names it: a buffer by its role (in 0, temp 1, data2), a loop by its variable."""
  op, arg = u.op, u.arg
  if op in (Ops.BUFFER, Ops.ALLOC):
    if hasattr(arg, "kind") and hasattr(arg, "n"): return f"{arg.kind} {arg.n}"                # a plan's buffer
    if hasattr(arg, "slot"):
      name = "lmem" if type(arg).__name__ == "LocalArg" else "data" if op is Ops.BUFFER else "acc"
      return f"{name}{arg.slot} [{arg.size}]"
    if hasattr(arg, "shape"): return "tensor data"
  if op is Ops.RANGE: return f"ridx{arg[0]} {arg[1].name}"
  if op is Ops.REDUCE: return f"{arg[0].name} over last {arg[1]}"
  if op is Ops.CONST: return repr(arg)
  return "" if arg is None else repr(arg)


def describe(u) -> Node:
  """The node's box: the op (and a short arg) on the first line, dtype and shape, then a long arg."""
  arg = arg_text(u)
  first = f"{u.op.name} {arg}" if arg and len(arg) <= 18 else u.op.name
  shape = getattr(u, "shape", ())
  lines = [short(first), dtype_name(u.dtype) + (f" {tuple(shape)}" if shape else "")]
  if arg and first == u.op.name: lines.append(short(arg))
  title = f"{u.op.name} {dtype_name(u.dtype)}" + (f" shape={tuple(shape)}" if shape else "")
  title += f" arg={arg}" if arg else ""
  return Node(lines, KIND.get(u.op, "other"), title)


def toposort(roots) -> list:
  """Every node under roots, sources before users, sources in order (roots may be one UOp or several)."""
  order, seen = [], set()
  for r in roots:
    stack = [(r, False)]
    while stack:
      u, done = stack.pop()
      if done: order.append(u); continue
      if u in seen: continue
      seen.add(u)
      stack.append((u, True))
      stack.extend((s, False) for s in reversed(u.src))
  return order


def uop_graph(roots, marks: dict | None = None, tree: bool = False, share_consts: bool = False,
              notes: dict | None = None, limit: int = 5000, describe=describe) -> Graph:
  """The drawing of one UOp or several. marks: node -> an outline (svg.MARKS); notes: node -> a last line for its
  box (the kernel a materialization point becomes); describe: node -> its box (a recorded trace's nodes carry
  their own). A constant is drawn once per use
  (share_consts=False) so shared constants draw no long edges; tree=True draws every use of every node as a copy
  of its own, as a program without hash-consing would hold it."""
  roots = [roots] if hasattr(roots, "op") else list(roots)
  marks, notes = marks or {}, notes or {}
  g, ids = Graph(), {}
  number: dict[Any, int] = {u: k for k, u in enumerate(toposort(roots))}   # data-node: the node's place in order

  def node(u) -> int:
    node = describe(u)
    node.mark, node.ident = marks.get(u, ""), str(number[u])
    if u in notes: node.lines.append(short(notes[u]))
    return g.add(node)

  if tree:
    def copy(u) -> int:
      if len(g.nodes) > limit: raise ValueError(f"the tree of this graph has more than {limit} nodes: draw it as a DAG")
      srcs = [copy(s) for s in u.src]
      k = node(u)
      g.edges.extend((s, k) for s in srcs)
      return k
    for r in roots: copy(r)
    return g
  for u in number:
    if u.op is Ops.CONST and not share_consts and u not in roots: continue   # drawn beside each user below
    ids[u] = node(u)
    for s in u.src: g.edges.append((ids[s] if s in ids else node(s), ids[u]))
  return g


def uop_svg(roots, marks: dict | None = None, **kw) -> str:
  """The drawing as SVG text (UOp._repr_svg_)."""
  legend, caption = kw.pop("legend", True), kw.pop("caption", "")
  return render(uop_graph(roots, marks, **kw), legend=legend, caption=caption)

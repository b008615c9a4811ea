"""A drawable graph (labelled, coloured nodes; an edge per source, in order) and its SVG.

The SVG is plain text, the same for the same graph (a notebook compares it), with no ids that could clash when many
drawings share a page: each node is a <g class="node kind-..."> holding a <title> (the full text, shown on hover), a
box and its lines; each edge a path and an arrowhead. An edge enters its user at a port along the top edge, source 0
leftmost, so the order of a node's sources can be read off the drawing.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from xml.sax.saxutils import escape
from uopc.viz.layout import layout

CHAR_W, LINE_H, PAD = 6.6, 13.0, 6.0   # monospace at 11 px

# kind -> (fill, what the legend calls it)
KINDS = {
  "buffer": ("#ffe38f", "buffer"), "const": ("#ececec", "const"), "movement": ("#bfe0ff", "movement"),
  "alu": ("#c9efc4", "ALU"), "reduce": ("#ffb4a8", "reduce"), "range": ("#dccbff", "range/loop"),
  "load": ("#c8eeee", "index/load"), "store": ("#ffc27a", "store"), "stage": ("#f6b3dc", "stage/kernel"),
  "other": ("#ffffff", "other"), "kernel": ("#d9d9f7", "kernel"), "temp": ("#fff6d6", "temporary"),
}
# mark -> (stroke, width, dash): how a highlighted node is outlined
MARKS = {"": ("#555555", 1.0, ""), "changed": ("#d62728", 3.0, ""), "point": ("#1f3fbf", 3.0, ""),
         "temp": ("#8a6d00", 1.5, "5,3")}
MARK_NAMES = {"changed": "changed by the pass", "point": "a kernel's output (cut)", "temp": "temporary"}


@dataclass
class Node:
  lines: list[str]            # the label: the first line is the op (bold), then dtype and shape, then the arg
  kind: str = "other"         # the fill colour (KINDS)
  title: str = ""             # the full text, shown on hover
  mark: str = ""              # an outline (MARKS): "changed" by a pass, a kernel's "point", a "temp" buffer
  ident: str = ""             # data-node: a stable name for the page and for tests


@dataclass
class Graph:
  nodes: list[Node] = field(default_factory=list)
  edges: list[tuple[int, int]] = field(default_factory=list)   # (source, user), a user's sources in order

  def add(self, node: Node) -> int:
    self.nodes.append(node)
    return len(self.nodes) - 1


def size(node: Node) -> tuple[float, float]:
  return max(len(s) for s in node.lines) * CHAR_W + 2 * PAD, len(node.lines) * LINE_H + PAD


def f(v: float) -> str: return f"{v:.1f}".removesuffix(".0")


def render(g: Graph, legend: bool = True, caption: str = "") -> str:
  """The graph as an <svg> element (a string)."""
  sizes = [size(n) for n in g.nodes]
  lay = layout(sizes, g.edges)
  head = (LINE_H + 8) * ((1 if legend and g.nodes else 0) + (1 if caption else 0))
  width, height = max(lay.width, 200.0, _legend_width(g) if legend else 0.0), lay.height + head
  out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="uopc-graph" width="{f(width)}" height="{f(height)}" '
         f'viewBox="0 0 {f(width)} {f(height)}" font-family="monospace" font-size="11">']
  top = 4.0
  if caption:
    out.append(f'<text x="6" y="{f(top + LINE_H)}" font-weight="bold">{escape(caption)}</text>')
    top += LINE_H + 8
  if legend and g.nodes: out.append(_legend(g, top))
  out.append(f'<g transform="translate(0,{f(head)})">')
  ports: dict[int, list[int]] = {}
  for k, (_, d) in enumerate(g.edges): ports.setdefault(d, []).append(k)
  for k, ((s, d), pts) in enumerate(zip(g.edges, lay.edges)):
    w = sizes[d][0]
    users = ports[d]
    px = pts[-1][0] - w / 2 + w * (users.index(k) + 1) / (len(users) + 1)   # source i enters at the i-th port
    pts = pts[:-1] + [(px, pts[-1][1])]
    path = [f"M{f(pts[0][0])},{f(pts[0][1])}"]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
      ym = (y0 + y1) / 2
      path.append(f"C{f(x0)},{f(ym)} {f(x1)},{f(ym)} {f(x1)},{f(y1)}")
    x1, y1 = pts[-1]
    out.append(f'<g class="edge" data-src="{s}" data-dst="{d}"><path d="{" ".join(path)}" fill="none" '
               f'stroke="#777"/><path d="M{f(x1 - 3.5)},{f(y1 - 6)}L{f(x1 + 3.5)},{f(y1 - 6)}L{f(x1)},{f(y1)}Z" '
               f'fill="#777"/></g>')
  for k, (n, (w, h)) in enumerate(zip(g.nodes, sizes)):
    x, y = lay.x[k] - w / 2, lay.y[k]
    stroke, sw, dash = MARKS[n.mark]
    cls = f"node kind-{n.kind}" + (f" mark-{n.mark}" if n.mark else "")
    out.append(f'<g class="{cls}" data-node="{escape(n.ident or str(k))}"><title>{escape(n.title or " ".join(n.lines))}'
               f'</title><rect x="{f(x)}" y="{f(y)}" width="{f(w)}" height="{f(h)}" rx="4" fill="{KINDS[n.kind][0]}" '
               f'stroke="{stroke}" stroke-width="{f(sw)}"' + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
    for i, line in enumerate(n.lines):
      bold = ' font-weight="bold"' if i == 0 else ""
      out.append(f'<text x="{f(x + PAD)}" y="{f(y + PAD / 2 + LINE_H * (i + 1) - 3)}"{bold}>{escape(line)}</text>')
    out.append("</g>")
  out.append("</g></svg>")
  return "\n".join(out)


def _legend_items(g: Graph) -> list[tuple[str, tuple, str]]:
  """(fill, outline, name) for each kind of node drawn, then for each outline used."""
  kinds = sorted({n.kind for n in g.nodes}, key=list(KINDS).index)
  marks = sorted({n.mark for n in g.nodes if n.mark and n.mark != n.kind}, key=list(MARKS).index)
  return [(KINDS[k][0], MARKS[""], KINDS[k][1]) for k in kinds] + [("#ffffff", MARKS[m], MARK_NAMES[m]) for m in marks]


def _legend_width(g: Graph) -> float: return 6.0 + sum(30 + len(name) * CHAR_W for _, _, name in _legend_items(g))


def _legend(g: Graph, top: float) -> str:
  """A box per kind of node drawn (its fill), then one per outline used."""
  parts, x = [], 6.0
  for fill, (stroke, sw, dash), name in _legend_items(g):
    parts.append(f'<rect x="{f(x)}" y="{f(top)}" width="12" height="12" rx="2" fill="{fill}" stroke="{stroke}" '
                 f'stroke-width="{f(min(sw, 2.0))}"' + (' stroke-dasharray="3,2"' if dash else "") + "/>"
                 f'<text x="{f(x + 16)}" y="{f(top + 10)}">{escape(name)}</text>')
    x += 16 + len(name) * CHAR_W + 14
  return '<g class="legend">' + "".join(parts) + "</g>"

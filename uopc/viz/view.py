"""uopc.viz.show and side_by_side: what the compiler makes, drawn for a notebook; a realize drawn pass by pass."""
from __future__ import annotations
from html import escape
from uopc.kernelize import isolated_plan_cache, normalize, plan_for
from uopc.options import Options
from uopc.viz.record import recording
from uopc.viz.dag import uop_svg
from uopc.viz.plan import html_of
from uopc.viz.steps import Table, pass_svg, steps


BOX = '<g class="node '   # how each box of a drawing starts


class Drawing:
  """A drawing as HTML (str() of it): Jupyter shows the picture, a console a short line."""
  def __init__(self, html: str): self.html = html
  def _repr_html_(self) -> str: return self.html
  def __str__(self) -> str: return self.html
  def __repr__(self) -> str: return f"<uopc.viz drawing: {self.html.count(BOX)} boxes>"


def _roots(x) -> list:
  xs = x if isinstance(x, (list, tuple)) else [x]
  return [getattr(t, "uop", t) for t in xs]   # a Tensor's graph, or the UOp itself


def show(x, passes: bool = False, options: Options | None = None, **kw) -> Drawing:
  if passes: return realize_passes(x, options)
  if hasattr(x, "kernels") or hasattr(x, "ast"): return Drawing(html_of(x))   # a Plan, a Kernel
  return Drawing(uop_svg(_roots(x), **kw))


def side_by_side(*drawings, captions: list[str] | None = None) -> Drawing:
  captions = captions or [""] * len(drawings)
  cells = "".join(f'<div><div style="font:bold 12px monospace">{escape(c)}</div>{d}</div>'
                  for d, c in zip(map(str, drawings), captions))
  return Drawing(f'<div style="display:flex;gap:24px;align-items:flex-start;flex-wrap:wrap">{cells}</div>')


def realize_passes(x, options: Options | None = None) -> Drawing:
  """Plan x afresh (the plan cache set aside, so every pass runs) while recording, and draw what was recorded."""
  roots = _roots(x)
  if options is None:
    first = x[0] if isinstance(x, (list, tuple)) else x
    options = type(first).options() if hasattr(type(first), "options") else Options()
  with recording() as rec, isolated_plan_cache():
    norm, _ = normalize(roots)
    rec.realized(roots, norm, plan_for(norm, options), options)
  return Drawing(trace_html(rec.trace(), 0))


def _pass_html(table: Table, p: dict, src: str = "") -> str:
  n = len(p.get("rewrites", []))
  head = f"<b>{escape(p['name'])}</b> &mdash; {escape(p.get('doc', ''))}" + (f" ({n} rewrites)" if n else "")
  if "loops" in p:
    body = (f'<div style="display:flex;gap:16px;align-items:flex-start">{p["loops"]}'
            f'<pre style="font-size:11px;margin:0">{escape(src)}</pre></div>')
  elif p["before"] == p["after"] and not p.get("rewrites") and "marks" not in p:
    body = "<p><i>no change: the graph after is the graph before</i></p>"
  else:
    before = pass_svg(table, p, 0)[0] if p["before"] else ""
    after = pass_svg(table, p, steps(p))[0]
    body = side_by_side(*([before] if before else []), after, captions=(["before"] if before else []) + ["after"])
  return f'<details open="" class="uopc-pass"><summary>{head}</summary>{body}</details>'


def trace_html(tr: dict, plan: int = 0) -> str:
  """One plan of a trace as static HTML: the tensor passes, the plan, then each kernel's passes."""
  table, pl = Table(tr["nodes"]), tr["plans"][plan]
  parts = [_pass_html(table, p) for p in pl["passes"]]
  parts.append(f"<h4>the plan</h4>{pl['plan']}<pre style='font-size:11px'>{escape(pl['explain'])}</pre>")
  for k in pl["kernels"]:
    parts.append(f"<h4>kernel {escape(k['name'])}</h4>" + "".join(_pass_html(table, p, k["src"]) for p in k["passes"]))
  return '<div class="uopc-passes">' + "\n".join(parts) + "</div>"

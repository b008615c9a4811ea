"""A Plan drawn as kernels and the buffers between them; a kernel as its loops beside its C; the kernelizer's cut.

Plan and Kernel draw themselves in Jupyter through html_of (importing uopc.viz sets their _repr_html_).
"""
from __future__ import annotations
from html import escape
from uopc.uop import UOp, Ops
from uopc.viz.dag import dtype_name, uop_svg
from uopc.viz.loops import loops_svg
from uopc.viz.svg import Graph, Node, render

ROLE = {"in": "input", "temp": "temporary", "out": "output"}


def _buffers(plan) -> dict[tuple[str, int], str]:
  """(kind, n) -> "dtype shape" for every buffer a kernel reads or writes, read off the kernels' bodies."""
  info: dict[tuple[str, int], str] = {}
  for k in plan.kernels:
    for u in k.body.toposort():
      if u.op is Ops.BUFFER and hasattr(u.arg, "kind"):
        info[(u.arg.kind, u.arg.n)] = f"{dtype_name(u.dtype)} {u.arg.shape}"
  for n, (dtype, size) in enumerate(plan.temps): info.setdefault(("temp", n), f"{dtype_name(dtype)} ({size},)")
  for n, o in enumerate(plan.outs):
    if not isinstance(o[0], str): info.setdefault(("out", n), f"{dtype_name(o[0])} ({o[1]},)")
  return info


def plan_graph(plan) -> Graph:
  """Kernels (boxes, in run order) and buffers (inputs, temporaries dashed, outputs): an edge from each buffer a
  kernel reads, in argument order, and from the kernel to the buffer it writes."""
  g, buf = Graph(), {}
  info = _buffers(plan)
  notes = plan.notes[:len(plan.kernels)]

  def buffer(key) -> int:
    if key not in buf:
      kind, n = key
      mark = "temp" if kind == "temp" else ""
      buf[key] = g.add(Node([f"{ROLE[kind]} {n}", info.get(key, "")], "temp" if kind == "temp" else "buffer",
                            f"{ROLE[kind]} {n}: {info.get(key, '')}", mark, f"{kind}{n}"))
    return buf[key]
  for k, kern in enumerate(plan.kernels):
    reads = [buffer(tuple(a)) for a in kern.args[:-1]]
    lines = [kern.name, f"{kern.flops:,} flops"]
    if kern.recompute: lines.append("recomputes " + ", ".join(f"x{n:g}" for n in kern.recompute.values()))
    node = g.add(Node(lines, "kernel", notes[k].strip() if k < len(notes) else kern.name, "", f"kernel{k}"))
    g.edges.extend((r, node) for r in reads)
    g.edges.append((node, buffer(tuple(kern.args[-1]))))
  return g


def plan_svg(plan, caption: str = "") -> str: return render(plan_graph(plan), caption=caption)


def kernel_html(kernel) -> str:
  """The kernel's loop program drawn beside its C source."""
  return ('<div class="uopc-kernel" style="display:flex;gap:16px;align-items:flex-start">'
          f"<div>{loops_svg(kernel.ast, caption=kernel.name)}</div>"
          f'<pre style="font-size:11px;margin:0">{escape(str(kernel.src))}</pre></div>')


def cut_svg(roots: list[UOp], points: list[UOp], names: dict[UOp, str] | None = None, caption: str = "") -> str:
  """The tensor graph with every materialization point outlined: where the kernelizer cuts it into kernels."""
  return uop_svg(roots, {p: "point" for p in points}, notes=names or {}, caption=caption)


def html_of(x) -> str:
  """What Jupyter shows for a Plan (its drawing and explain()) or a Kernel (loops beside C)."""
  if hasattr(x, "kernels"):
    return f'<div class="uopc-plan">{plan_svg(x)}<pre style="font-size:11px">{escape(x.explain())}</pre></div>'
  return kernel_html(x)

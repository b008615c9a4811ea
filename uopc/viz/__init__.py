"""uopc.viz: see the compiler work. Every graph it builds, and every pass between them, drawn.

  uopc.viz.show(x)                 a Tensor's or UOp's graph, a Plan (kernels and buffers), a Kernel (loops beside C);
                                   in Jupyter a UOp, a Plan and a Kernel also draw themselves
  uopc.viz.show(t, passes=True)    realizing t, pass by pass: each pass's graph before and after, changes outlined
  with uopc.viz.recording() as r   every realize in the block recorded (r.trace(), r.save(path))
  VIZ=1 python prog.py             every realize of the program recorded to a trace file, its path printed at exit
  python -m uopc.viz [TRACE]       the trace served as one page on localhost: realizes, kernels, passes, rewrites

The drawings are laid out here (uopc.viz.layout: Sugiyama's layered method) and written as SVG text: no Graphviz,
nothing to install, and the same graph always gives the same text. The compiler never imports this package: it calls
the ground floor's hooks (uopc.trace), which this package listens to, and importing it teaches a UOp, a Plan and a
Kernel to draw themselves in Jupyter. `import uopc` imports it when VIZ is set.
"""
from __future__ import annotations
import atexit, os, sys
from uopc.helpers import getenv
from uopc import trace
from uopc.kernelize import Kernel, Plan
from uopc.uop import UOp

DRAW_LIMIT = 1500   # nodes a notebook draws by itself (a layout of more takes seconds; show() draws any)


def _uop_svg(u: UOp) -> str | None:
  """Jupyter draws a UOp as its graph; past DRAW_LIMIT nodes it shows the text instead."""
  if len(u.toposort()) > DRAW_LIMIT: return None
  from uopc.viz.dag import uop_svg
  return uop_svg(u)


def _plan_html(x) -> str:
  """Jupyter draws a Plan's kernels and buffers, a Kernel's loops beside its C."""
  from uopc.viz.plan import html_of
  return html_of(x)


UOp._repr_svg_ = _uop_svg
Plan._repr_html_ = Kernel._repr_html_ = _plan_html


def show(x, passes: bool = False, **kw):
  """x drawn, as an object Jupyter displays (its text is the HTML). passes=True: realizing x (a Tensor, a UOp or a
  list of them) pass by pass, with the Tensor switches as they are now (or options=)."""
  from uopc.viz.view import show as _show
  return _show(x, passes, **kw)


def side_by_side(*drawings, captions: list[str] | None = None):
  """Several drawings (SVG or HTML text) in one row, each under its caption."""
  from uopc.viz.view import side_by_side as _sbs
  return _sbs(*drawings, captions=captions)


def recording(path=None):
  """with uopc.viz.recording() as rec: every realize inside the block is recorded (rec.trace(), rec.save(path));
  saved to path at the end if one is given."""
  from uopc.viz.record import recording as _recording
  return _recording(path)


def trace_path():
  """Where VIZ=1 writes its trace: $VIZ_TRACE, else uopc-trace-<pid>.json in the temporary folder."""
  import tempfile
  from pathlib import Path
  return Path(os.environ.get("VIZ_TRACE") or Path(tempfile.gettempdir()) / f"uopc-trace-{os.getpid()}.json")


class _AtExit:
  """The recorder VIZ=1 starts: a Recorder made at the first event (uopc.viz.record imports the compiler, which is
  still being imported when this module is), saved when the program exits."""
  def __init__(self): self.rec = None

  def _get(self):
    if self.rec is None:
      from uopc.viz.record import Recorder
      self.rec = Recorder(trace_path())
      atexit.register(self.save)
    return self.rec

  def realized(self, *args) -> None: self._get().realized(*args)
  def lowering(self) -> None: self._get().lowering()
  def lowered(self, *args) -> None: self._get().lowered(*args)
  def rewrote(self, *args) -> None:   # a rewrite before the first lowering belongs to no kernel
    if self.rec is not None: self.rec.rewrote(*args)

  def save(self) -> None:
    path = self.rec.save()
    print(f"VIZ: {len(self.rec.realizes)} realizes, {len(self.rec.plans)} plans recorded to {path}\n"
          f"     see them: python -m uopc.viz {path}", file=sys.stderr)


if getenv("VIZ", 0): trace.RECORDERS.append(_AtExit())

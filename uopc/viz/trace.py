"""The hooks the compiler calls for uopc.viz, and the recorders listening to them.

kernelize.realize calls realized() after planning and rangeify.lower calls lowered() after its final simplify, each
behind `if trace.RECORDERS:`: with nothing recording (VIZ unset, no uopc.viz.recording() block) a realize pays one
test of an empty list and nothing else. This module imports nothing from uopc, so any module can call it.
"""
from __future__ import annotations

RECORDERS: list = []   # objects with realized(roots, norm, plan, options) and lowered(raw, prog): uopc.viz.record


def realized(roots, norm, plan, options) -> None:
  """A realize ran: roots as given, norm as normalized, the plan it ran (made now or taken from the cache)."""
  for r in list(RECORDERS): r.realized(roots, norm, plan, options)


def lowered(raw, prog) -> None:
  """rangeify.lower made raw, and simplify made prog of it (the program a kernel renders)."""
  for r in list(RECORDERS): r.lowered(raw, prog)

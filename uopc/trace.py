"""The hooks the compiler calls, on the ground floor, and the recorders listening to them (uopc.viz's; any observer's).

kernelize.realize calls realized() after running a plan; rangeify.lower calls lowering() as it starts and lowered()
after its final simplify; graph_rewrite calls rewrote() for each rewrite a rule makes. Each call sits behind
`if trace.RECORDERS:`, so with nothing recording (VIZ unset, no uopc.viz.recording() block) the compiler pays one
test of an empty list at each of those points and nothing else. This module imports nothing from uopc: the compiler
never imports the viewer, the viewer subscribes here (STYLE.md, \"Hooks live below what they observe\").
"""
from __future__ import annotations

RECORDERS: list = []   # objects with the methods below (uopc.viz.record.Recorder)


def realized(roots, norm, plan, options) -> None:
  """A realize ran: roots as given, norm as normalized, the plan it ran (made now or taken from the cache)."""
  for r in list(RECORDERS): r.realized(roots, norm, plan, options)


def lowered(raw, prog) -> None:
  """rangeify.lower made raw, and simplify made prog of it (the program a kernel renders)."""
  for r in list(RECORDERS): r.lowered(raw, prog)


def lowering() -> None:
  """rangeify.lower starts a kernel: the rewrites from here to lowered() are this lowering's."""
  for r in list(RECORDERS): r.lowering()


def rewrote(before, after, rules) -> None:
  """graph_rewrite replaced before by after (one rule of the table `rules` fired)."""
  for r in list(RECORDERS): r.rewrote(before, after, rules)

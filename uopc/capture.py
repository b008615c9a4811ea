"""The record of realizes that a capture (uopc.jit.TinyJit) keeps while it runs a function once more.

Tensor.realize appends (plan, options, input arrays, outputs, writes, bounds checks: (output, message) of each
computed index's range flag, uopc.bounds) to the innermost record under way; a read of
a value into Python (Tensor.item, `if t:`) is counted in its `reads`, since the function may branch on it.
"""
from __future__ import annotations
import contextlib

class Record(list):
  """The realizes of one capture, in order, and how many values were read into Python meanwhile."""
  reads: int = 0


class Captures:
  """The captures under way, innermost last: a stack, not a memo (it is empty whenever no capture block is open, and
  clearing it would lose a capture's record). Process-wide, like the switches: a realize on any thread appends to the
  innermost capture open."""
  def __init__(self): self.stack: list[Record] = []

  def recording(self) -> Record | None:
    """The record a realize should append to, or None when no capture is under way."""
    return self.stack[-1] if self.stack else None

  @contextlib.contextmanager
  def capturing(self):
    """Within the block, every Tensor.realize appends one entry to the yielded list."""
    rec = Record()
    self.stack.append(rec)
    try: yield rec
    finally: self.stack.pop()

  def note_read(self) -> None:
    """A value went into Python (Tensor.item): every capture under way counts it."""
    for rec in self.stack: rec.reads += 1


CAPTURES = Captures()
recording, capturing, note_read = CAPTURES.recording, CAPTURES.capturing, CAPTURES.note_read

"""The record of realizes that a capture (uopc.jit.TinyJit) keeps while it runs a function once more.

Tensor.realize appends (plan, options, input arrays, outputs, writes) to the innermost record under way.
"""
from __future__ import annotations
import contextlib


class Captures:
  """The captures under way, innermost last: a stack, not a memo (it is empty whenever no capture block is open, and
  clearing it would lose a capture's record). Process-wide, like the switches: a realize on any thread appends to the
  innermost capture open."""
  def __init__(self): self.stack: list[list] = []

  def recording(self) -> list | None:
    """The record a realize should append to, or None when no capture is under way."""
    return self.stack[-1] if self.stack else None

  @contextlib.contextmanager
  def capturing(self):
    """Within the block, every Tensor.realize appends one entry to the yielded list."""
    rec: list = []
    self.stack.append(rec)
    try: yield rec
    finally: self.stack.pop()


CAPTURES = Captures()
recording, capturing = CAPTURES.recording, CAPTURES.capturing

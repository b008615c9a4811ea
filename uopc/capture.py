"""The record of realizes that a capture (uopc.jit.TinyJit) keeps while it runs a function once more.

Tensor.realize appends (plan, options, input arrays, outputs, writes) to the innermost record under way; a read of
a value into Python (Tensor.item, `if t:`) is counted in its `reads`, since the function may branch on it.
"""
from __future__ import annotations
import contextlib

class Record(list):
  """The realizes of one capture, in order, and how many values were read into Python meanwhile."""
  reads: int = 0


_records: list[Record] = []   # the captures under way, innermost last


def recording() -> Record | None:
  """The record a realize should append to, or None when no capture is under way."""
  return _records[-1] if _records else None


@contextlib.contextmanager
def capturing():
  """Within the block, every Tensor.realize appends one entry to the yielded list."""
  rec = Record()
  _records.append(rec)
  try: yield rec
  finally: _records.pop()


def note_read() -> None:
  """A value went into Python (Tensor.item): every capture under way counts it."""
  for rec in _records: rec.reads += 1

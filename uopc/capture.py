"""The record of realizes that a capture (uopc.jit.TinyJit) keeps while it runs a function once more.

Tensor.realize appends (plan, options, input arrays, outputs, writes) to the innermost record under way.
"""
from __future__ import annotations
import contextlib

_records: list[list] = []   # the captures under way, innermost last


def recording() -> list | None:
  """The record a realize should append to, or None when no capture is under way."""
  return _records[-1] if _records else None


@contextlib.contextmanager
def capturing():
  """Within the block, every Tensor.realize appends one entry to the yielded list."""
  rec: list = []
  _records.append(rec)
  try: yield rec
  finally: _records.pop()

"""Index bounds that only a kernel knows: a computed index out of range raises after the realize, not 0.

An integer-tensor index is a one-hot select (uopc.mixin.indexing): an index that matches no row selects nothing, so
x[arange(4) + 3] on 5 rows would quietly give 0 where NumPy and PyTorch raise. An index known when the op is built
is checked then. A computed one registers a flag with its node: ((idx >= -n) & (idx < n)).all(), a one-number
reduction. Tensor.realize finds the flags of the nodes it computes, computes them in the same plan (as extra
outputs: the index is computed once for both), and raises IndexError if one is False.

A captured step (uopc.jit) replays the flags' kernels and checks their outputs too (Step.checks): kernel by kernel,
before that realize's write-backs; as one step program, after the call (its writes are done by then, as a GPU's
device-side assert reports after the launch).
"""
from __future__ import annotations
import weakref
from uopc.uop import UOp

flags: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # index node -> (flag node, message)


def register(index: UOp, flag: UOp, message: str) -> None: flags[index] = (flag, message)


def flags_of(topo) -> list[tuple[UOp, str]]:
  """The flags of the nodes in topo (a graph's toposort) that have one."""
  if not flags: return []
  return [flags[u] for u in topo if u in flags]


def raise_if_out_of_range(found: list[tuple[UOp, str]], values) -> None:
  for (_, message), value in zip(found, values):
    if not value.all(): raise IndexError(message)


def check_outputs(checks: list[tuple[int, str]], outs) -> None:
  """A replay's check: checks holds (output position, message) of each flag its realize computed."""
  for i, message in checks:
    if not outs[i].all(): raise IndexError(message)

"""The options of one realize: every switch that changes what the compiler produces, in one frozen value.

realize builds it once from the book's switches (Tensor.fuse_reduce, Tensor.opt, Tensor.online_softmax) and the
environment (DEVICE=, DEBUG=, TC=); make_plan keys its cache on it; the lowering context (rangeify.Ctx) carries it.
No pass reads a global switch.
"""
from __future__ import annotations
import functools
import inspect
from dataclasses import dataclass, field, replace
from typing import Any, Callable


@dataclass(frozen=True)
class Options:
  fuse_reduce: bool = False      # do not cut kernels at REDUCEs; fused consumers recompute them (chapter 11)
  opt: Any = None                # the optimizer: layout(roots) and lower(body, out), e.g. DefaultOpt or the book's
  online_softmax: bool = False   # lower softmax groups in one online pass (uopc.codegen.online, chapter 11 appendix)
  device: str = "CPU"            # where the kernels run (uopc.device)
  debug: int = field(default=0, compare=False)   # how much realize prints; never changes a plan, so not in the key
  tc: int = 0                    # tensor-core lowering of matmuls on GPU devices (uopc.codegen.tc; TC=): 0 off
  # a CPU kernel whose loads, stores and float ops together number fewer than this runs on one thread: waking
  # OpenMP's workers and joining them costs more than they would save (NOTES 27); 0: every kernel uses every thread
  one_thread_below: int = 1 << 20
  # write a float max as the book prints it, ((a>b)?a:b): a max reduction then drops a NaN that numbers follow.
  # Off, a max is NaN wherever a NaN is (NumPy, PyTorch). Chapter 11 prints the book's kernel with it on.
  book_max: bool = False
  lanes: int | None = None       # floats per vector register for CPU vector code (VectorOpt); None: the target's
  # the level CPU kernels are built for (UOPC_MARCH, uopc.runtime.machine): realize fills it in, so a plan made for
  # x86-64-v3 is not reused for x86-64-v4; "" this CPU, None whatever UOPC_MARCH says when it is read
  march: str | None = None
  # elementwise outputs of one realize that no other kernel reads are computed by one kernel (uopc.codegen.siblings:
  # an optimizer step's new parameters and moments, PyTorch's fused AdamW); False: a kernel per output
  siblings: bool = True

  def __post_init__(self):
    if self.lanes is not None and self.lanes not in (4, 8, 16):
      raise ValueError(f"Options: lanes must be None, 4, 8 or 16 (floats per vector register), got {self.lanes!r}")

  def replace(self, **changes) -> Options: return replace(self, **changes)


@functools.cache
def _takes_options(fn: Callable) -> bool:
  try: return "options" in inspect.signature(fn).parameters
  except (TypeError, ValueError): return False


def call_with_options(fn: Callable, *args, options: Options) -> Any:
  """fn(*args, options=options) if fn declares an `options` parameter, else fn(*args): the book's optimizers
  (FlashOpt.lower(body, out)) predate options and keep working."""
  return fn(*args, options=options) if _takes_options(fn) else fn(*args)

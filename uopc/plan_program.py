"""A plan that has run before, run as one step program: the eager training step run the way a replayed one is.

A student's loop without TinyJit (forward, backward, opt.step() every step) builds the same graph each step, so
realize finds the same plan (kernelize.plan_for). Run kernel by kernel (kernelize.run_kernels), each kernel is a call
of its own and each assigned output (a parameter, an optimizer's moment) is copied into its array with np.copyto.
Where the step program links the kernels' own objects (gcc on Linux: the same code, so the same bits, as kernel by
kernel; NOTES 68-69; EAGER_GRAPH=0 turns it off), from the plan's third realize on (PROGRAM_AFTER_RUNS,
PROGRAM_MIN_KERNELS), kernelize.realize runs it here instead: the plan's kernels and the realize's write-backs as one
step program (uopc.render_step, the replayed step's machinery, uopc.jit.Graph),
made once per plan and shape of write-backs, those that uopc.step_calls.write_in_place proves safe written in place
by their kernels (only under a compiler that keeps their bits: uopc.runtime.toolchain.keeps_in_place_bits).

The step buffers: the plan's inputs (bound at every run), its temporaries (bound once), its fresh outputs (new
arrays at every run), then each assigned array that the plan does not read (bound at every run). An output written
in place is no array of its own: the realize returns its target, which now holds its value.
"""
from __future__ import annotations
import weakref
from dataclasses import dataclass, field
import numpy as np
from uopc.device import Device
from uopc.dtype import np_dtype
from uopc.helpers import EAGER_GRAPH, JIT_INPLACE
from uopc.step_calls import Call, Copy, write_in_place
from uopc.runtime.toolchain import keeps_in_place_bits


# A program costs a compile of all the plan's kernels once more (seconds for a GPT step) and saves a call and a copy
# per kernel per run (microseconds): it is made for a plan of at least PROGRAM_MIN_KERNELS kernels that has already
# run PROGRAM_AFTER_RUNS times (a loop's step, not a graph realized twice: a test, a notebook's cell run again)
PROGRAM_MIN_KERNELS = 8
PROGRAM_AFTER_RUNS = 2


@dataclass
class Runs:
  """What this module keeps of a plan, beside it (chapter 11 prints kernelize.Plan): its realizes counted, and its
  programs by (inputs, write-backs' shape)."""
  count: int = 0
  programs: dict = field(default_factory=dict)


_runs: dict[int, Runs] = {}   # id(plan) -> its Runs, dropped when the plan is


def runs_of(plan) -> Runs:
  if (r := _runs.get(id(plan))) is None:
    r = _runs[id(plan)] = Runs()
    weakref.finalize(plan, _runs.pop, id(plan), None)
  return r


def program_for(plan, arrays: list[np.ndarray], writes, options, device: Device) -> PlanProgram | None:
  """Count this run of the plan; the plan as one step program for this shape of write-backs, made the first time a plan
  that has run often enough (above) is run with it (None: run it kernel by kernel): on a device whose graph renders
  kernels and links their own builds' code (Device.graph_links: the same bits as kernel by kernel), without DEBUG=2's
  per-kernel lines, where EAGER_GRAPH is on, and where no target shares memory with another input (write_targets)."""
  runs = runs_of(plan)
  runs.count += 1
  if runs.count <= PROGRAM_AFTER_RUNS or len(plan.kernels) < PROGRAM_MIN_KERNELS: return None
  if not EAGER_GRAPH or options.debug >= 2 or not device.graph_renders or any(k.ast is None for k in plan.kernels):
    return None
  if (targets := write_targets(arrays, writes)) is None: return None
  key = (len(arrays), targets)
  if key not in runs.programs:
    if not device.graph_links(): return None   # its kernels compiled in the step's text: not their bits (NOTES 68)
    in_place = bool(JIT_INPLACE) and keeps_in_place_bits()
    renderer = device.renderer.for_options(options)
    runs.programs[key] = PlanProgram(plan, len(arrays), writes, targets, device, renderer, in_place)
  return runs.programs[key]


def kernel_calls(plan, pick: dict) -> list[Call]:
  """The plan's kernels as step calls; pick names the step buffer of each of the plan's slots ("in", "temp", "out":
  lists of buffer numbers). A small kernel (Kernel.threads = 1, NOTES 27) runs whole on one thread, by its own text:
  shared out, such a kernel summed in another order than its own build in one case found (NOTES 45)."""
  return [Call(k.ast, k.name, tuple(pick[kind][n] for kind, n in k.args),
               tuple(p.writes for p in k.src.signature.params), k.threads == 1, k.prg) for k in plan.kernels]


def write_targets(arrays: list[np.ndarray], writes: list[tuple[int, np.ndarray]]) -> tuple | None:
  """Each write-back's target as ("in", j) (the plan reads it as input j) or ("new", m), the shape of the write-backs
  a program is made for; None where a target shares memory with an input it is not (its base), which the step
  program cannot see."""
  base = lambda a: id(a if a.base is None else a.base)
  index = {id(a): j for j, a in enumerate(arrays)}
  bases: dict[int, int] = {}
  for a in arrays: bases[base(a)] = bases.get(base(a), 0) + 1
  shape, new = [], 0
  for i, target in writes:
    j = index.get(id(target))
    if bases.get(base(target), 0) > (j is not None): return None   # another input over the target's memory
    if j is None: shape.append((i, "new", new)); new += 1
    else: shape.append((i, "in", j))
  return tuple(shape)


class PlanProgram:
  """One plan's kernels and one shape of write-backs (write_targets) as one step program on a device with a graph that
  renders its kernels (Device.graph_renders)."""

  def __init__(self, plan, n_in: int, writes: list[tuple[int, np.ndarray]], targets: tuple, device: Device, renderer,
               in_place: bool):
    self.targets = targets
    ins, temps = list(range(n_in)), list(range(n_in, n_in + len(plan.temps)))
    nbufs, outs, self.fresh = n_in + len(temps), [], []   # fresh: (buffer, output, dtype, size), new at every run
    for i, o in enumerate(plan.outs):
      if o[0] == "in": outs.append(ins[o[1]])
      elif o[0] == "out": outs.append(outs[o[1]])
      else: outs.append(nbufs); self.fresh.append((nbufs, i, np_dtype(o[0]), o[1])); nbufs += 1
    target_bufs = []
    for _, kind, j in targets:
      target_bufs.append(ins[j] if kind == "in" else nbufs + j)
    nbufs += sum(kind == "new" for _, kind, _ in targets)
    calls: list = kernel_calls(plan, {"in": ins, "temp": temps, "out": outs})
    calls += [Copy(t, outs[i], target.nbytes) for t, (i, target) in zip(target_bufs, writes) if t != outs[i]]
    # an output may become its target where it is this program's own array, named by one root only
    movable = {outs[i] for i, _ in writes if outs.count(outs[i]) == 1} & {b for b, *_ in self.fresh}
    moved: dict[int, int] = {}
    if in_place: calls, moved = write_in_place(calls, movable, device.keeps_code(renderer))
    self.in_place = {i for i, _ in writes if outs[i] in moved}   # outputs written into their targets by their kernels
    self.fresh = [f for f in self.fresh if f[0] not in moved]
    self.new = [(pos, b) for pos, ((_, kind, _), b) in enumerate(zip(targets, target_bufs)) if kind == "new"]
    self.calls, self.copies = calls, sum(isinstance(c, Copy) for c in calls)   # copies: the write-backs left
    self.program = device.graph(calls, nbufs, renderer)
    for b, a in zip(temps, plan.temp_arrays): self.program.bind(b, a)
    for b in moved: self.program.bind(b, np.empty(0, np.float32))   # an output that is its target now: named nowhere

  def run(self, plan, arrays: list[np.ndarray], writes: list[tuple[int, np.ndarray]]) -> list[np.ndarray]:
    """The plan on these inputs with these write-backs (of this program's targets): the outputs, each written in
    place as its target."""
    prg, results = self.program, [None] * len(plan.outs)
    for b, i, dtype, size in self.fresh: results[i] = np.empty(size, dtype)
    with plan.lock:   # the table of pointers is the program's, and the temporaries the plan's: one run at a time
      for b, a in enumerate(arrays): prg.bind(b, a)
      for b, i, _, _ in self.fresh: prg.bind(b, results[i])
      for pos, b in self.new: prg.bind(b, writes[pos][1])
      prg()
    for i, target in writes:
      if i in self.in_place: results[i] = target
    for i, o in enumerate(plan.outs):   # an input passed through, an earlier output again
      if o[0] == "in": results[i] = arrays[o[1]]
      elif o[0] == "out": results[i] = results[o[1]]
    return results

"""Capture and replay: a training step's plans, run again without building its graph (tinygrad's TinyJit).

  @TinyJit
  def step(x, y):
    loss = model(x).cross_entropy(y)
    loss.backward(); opt.step()
    return loss
  for x, y in batches: step(x, y).item()

The first call runs the function as it is (plans are built and compiled). The second call runs it too, and records
every realize it makes: the plan, where each of the plan's inputs came from (an argument of the call, an output of
an earlier realize in the same call, or an array that lives on, such as a parameter), and which outputs were
written back into which arrays (assign). Every later call replays the record: the same kernels on the new
arguments' data, with no Python graph, no normalize and no plan lookup.

What replay cannot see: a value the function builds from Python on each call (a learning rate as a Python float,
a Tensor made from fresh NumPy data inside the function) is captured as it was on the second call. Pass such
values as arguments, or keep them in Tensors the function assigns.

What replay checks (a JitError names what differed): each Tensor argument's shape, dtype and device; which
arguments were one and the same tensor; every other argument's value (a Python float is part of the capture, so a
new value cannot be replayed: pass it as a Tensor); and each index computed in a kernel (an IndexError, as the
eager realize raises: uopc.bounds). A function that reads a value into Python while it is captured
(.item(), `if t:`) may branch on it, which replay cannot: the capture raises. A TinyJit called inside
another's capture runs its function plainly, so the outer capture records its realizes.
A random seed made by uopc.rng.draw_seed (dropout's) is the one value built afresh: the capture notes it, and
every replay first writes its generator's next draw into it, so each replay draws fresh random numbers.

One program: where the device has a graph (Device.graph; the CPU's is uopc.render_step's step program), the capture
becomes one program that runs every kernel of every realize in order, and the write-backs, and a replay is one call
(JIT_GRAPH=0: kernel by kernel, as before). DEBUG=2 prints the step program's outline when it is made, and a line
per replay. Its assigned outputs are written in place by their kernels where that is proved safe
(uopc.step_calls.write_in_place; JIT_INPLACE=0: each written to a buffer of its own, then copied).
"""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any, Callable
import contextlib, time
import numpy as np
from uopc.bounds import check_outputs
from uopc.capture import capturing, recording
from uopc.device import get_device
from uopc.dtype import np_dtype
from uopc.helpers import JIT_GRAPH, JIT_INPLACE
from uopc.kernelize import replay
from uopc.plan_program import kernel_calls
from uopc.step_calls import Call, Copy, write_in_place
from uopc.rng import refill_of
from uopc.runtime.toolchain import keeps_in_place_bits   # noqa: F401 (uopc.jit.keeps_in_place_bits, as the tests name it)
from uopc.runtime.calls import call_kernel
from uopc.tensor import Tensor

@dataclass
class Step:
  """One realize of a captured call: run plan on inputs; write outputs back where writes say."""
  plan: Any
  options: Any
  inputs: list[tuple]                      # per plan input: ("arg", k) | ("out", step, i) | ("keep", array)
  writes: list[tuple[int, np.ndarray]] = field(default_factory=list)   # (output i, array it is copied into)
  bound: list[list] | None = None          # per kernel, per argument: its converted pointer if it never changes
  direct: bool | None = None               # whether every kernel is a Program that converts its own arguments
  free: list[list] | None = None           # per kernel: (position, kind, n) of each argument converted at every call
  checks: list[tuple[int, str]] = field(default_factory=list)   # (output i, message): computed indices' range flags

  def run(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """The plan on these inputs. On the CPU the pointers of what is the same array at every replay (the plan's
    temporaries, the arrays the capture keeps: parameters, optimizer state) are converted once: converting every
    argument of every call was a tenth of a replayed GPT step (NOTES 37). Elsewhere, or printing (DEBUG=2), replay."""
    plan = self.plan
    if self.direct is None: self.direct = all(hasattr(k.prg, "_convert") for k in plan.kernels)   # once, not per call
    if self.options.device != "CPU" or self.options.debug >= 2 or plan.temp_arrays is None or not self.direct:
      return replay(plan, arrays, self.options)
    if self.bound is None:
      fixed = {"temp": lambda n: plan.temp_arrays[n], "in": lambda n: self.inputs[n][1] if self.inputs[n][0] == "keep"
               else None, "out": lambda n: None}
      self.bound = [[None if (a := fixed[kind](n)) is None else k.prg._convert(i, a, k.prg.params[i])
                     for i, (kind, n) in enumerate(k.args)] for k in plan.kernels]
      self.free = [[(i, kind, n) for i, ((kind, n), b) in enumerate(zip(k.args, bound)) if b is None]
                   for k, bound in zip(plan.kernels, self.bound)]
    outs: list[np.ndarray] = []
    for o in plan.outs:   # as kernelize.run_kernels: an input passed through, an earlier output, or a fresh array
      outs.append(arrays[o[1]] if o[0] == "in" else outs[o[1]] if o[0] == "out" else np.empty(o[1], np_dtype(o[0])))
    pick = {"in": arrays, "temp": plan.temp_arrays, "out": outs}
    with plan.lock:   # per kernel: the bound pointers, the rest converted now (a loop: no comprehension's frame)
      for k, bound, free in zip(plan.kernels, self.bound, self.free):
        prg, args = k.prg, bound.copy()
        for i, kind, n in free: args[i] = prg._convert(i, pick[kind][n], prg.params[i])
        call_kernel(prg, args)
    return outs


class Graph:
  """The captured steps as one program on their device: every buffer of every step numbered once (an argument, an
  array the capture keeps, a plan's temporary, an output), the kernels and the write-backs in order. An output the
  function returns is a fresh array at every replay; every other output is the graph's own, reused. in_place: where
  the device's graph renders the kernels, an output assigned to an array the capture keeps is written by its kernel
  into that array where uopc.step_calls.write_in_place proves it safe (its Copy gone); the others are copied."""

  def __init__(self, steps: list[Step], args: list[np.ndarray], returned: set[tuple[int, int]],
               in_place: bool = True):
    options = steps[0].options
    device = get_device(options.device)
    self.ids: dict[int, int] = {}            # id(array) -> buffer, for the arrays that stay (keep, temporaries)
    self.fixed: list[tuple[int, np.ndarray]] = []   # (buffer, array) bound once
    self.arg_bufs: list[tuple[int, int]] = []       # (buffer, argument k) bound at every replay
    self.fresh: list[tuple[int, int, int, np.dtype, int]] = []   # (buffer, step, output, dtype, size): every replay
    self.results: list[list] = []            # per step, per output: its array (None: fresh at every replay)
    self.plans = list({id(st.plan): st.plan for st in steps}.values())
    self.n, calls = 0, []
    arg_buf = {}
    def buffer_of(a: np.ndarray) -> int:
      for k, x in enumerate(args):
        if a is x:
          if k not in arg_buf: arg_buf[k] = self._new(); self.arg_bufs.append((arg_buf[k], k))
          return arg_buf[k]
      if id(a) not in self.ids: self.ids[id(a)] = self._new(); self.fixed.append((self.ids[id(a)], a))
      return self.ids[id(a)]
    out_bufs: list[list[int]] = []
    movable: set[int] = set()                # the graph's own outputs assigned to a kept array, no range flags
    for s, st in enumerate(steps):
      plan = st.plan
      ins = [buffer_of(args[x[1]]) if x[0] == "arg" else out_bufs[x[1]][x[2]] if x[0] == "out" else buffer_of(x[1])
             for x in st.inputs]
      temps = [buffer_of(a) for a in plan.temp_arrays]
      outs, arrays = [], []
      for i, o in enumerate(plan.outs):
        if o[0] == "in": outs.append(ins[o[1]]); arrays.append(None)
        elif o[0] == "out": outs.append(outs[o[1]]); arrays.append(arrays[o[1]])
        elif (s, i) in returned:
          outs.append(self._new()); arrays.append(None)
          self.fresh.append((outs[-1], s, i, np_dtype(o[0]), o[1]))
        else:
          outs.append(buffer_of(np.empty(o[1], np_dtype(o[0])))); arrays.append(self.fixed[-1][1])
      calls += kernel_calls(plan, {"in": ins, "temp": temps, "out": outs})
      own = {outs[i] for i, a in enumerate(arrays) if a is not None} - {outs[i] for i, _ in st.checks}
      for i, target in st.writes:
        calls.append(Copy(buffer_of(target), outs[i], target.nbytes))
        if outs[i] in own and id(target) in self.ids: movable.add(outs[i])
      out_bufs.append(outs)
      self.results.append(arrays)
    renderer = device.renderer.for_options(options)
    if in_place and device.graph_renders and keeps_in_place_bits():
      calls = self._write_in_place(calls, movable, device.keeps_code(renderer))
    self.calls = calls                       # the step program's kernels and write-backs, in order
    self.kernels = sum(isinstance(c, Call) for c in calls)
    self.program = device.graph(calls, self.n, renderer)
    for k, a in self.fixed: self.program.bind(k, a)
    self.debug = options.debug
    if self.debug >= 2:
      print(f"step program: {self.program}\n  " + "\n  ".join(getattr(self.program.step, "outline", [])))

  def _write_in_place(self, calls: list, movable: set[int], keeps_code) -> list:
    """The calls with the write-backs that are safe made in place; each moved output's buffer and result is then its
    target's array (its own array is dropped)."""
    calls, moved = write_in_place(calls, movable, keeps_code)
    array = dict(self.fixed)
    now = {id(array[o]): array[t] for o, t in moved.items()}
    self.fixed = [(k, array[moved.get(k, k)]) for k, _ in self.fixed]
    self.results = [[now.get(id(a), a) for a in r] for r in self.results]
    return calls

  def _new(self) -> int:
    self.n += 1
    return self.n - 1

  def run(self, args: list[np.ndarray]) -> list[list]:
    """One replay: bind this call's arguments and fresh outputs, one call; the outputs of every step."""
    prg = self.program
    for k, a in self.arg_bufs: prg.bind(k, args[a])
    results = [list(r) for r in self.results] if self.fresh else self.results
    for k, s, i, dtype, n in self.fresh:
      results[s][i] = np.empty(n, dtype)
      prg.bind(k, results[s][i])
    t = time.perf_counter()
    with contextlib.ExitStack() as locks:   # the plans' temporaries are shared with every realize of those plans
      for plan in self.plans: locks.enter_context(plan.lock)
      prg()
    if self.debug >= 2:
      print(f"step program: {self.kernels} kernels in one call, {(time.perf_counter() - t) * 1e3:.3f} ms")
    return results


class JitError(RuntimeError):
  """A captured function was called in a way its capture cannot replay."""


class TinyJit:
  def __init__(self, fn: Callable):
    self.fn, self.calls, self.steps = fn, 0, None
    self.refills: list[Callable] = []        # per seed array (uopc.rng) the plans read: draw its next value
    self.spec: list[tuple] | None = None     # (shape, dtype, device, first alias) of each Tensor argument, as captured
    self.consts: list[tuple] | None = None   # (position, value) of each other argument, as captured
    self.returns: Any = None                 # how to rebuild the result: ("out", step, i, shape, dtype) leaves
    self.graph: Graph | None = None          # the capture as one program, where the device has a graph

  def reset(self) -> None:
    """Forget the capture: the next two calls run the function again."""
    self.calls, self.steps, self.spec, self.consts, self.returns, self.refills = 0, None, None, None, None, []
    self.graph = None

  def __call__(self, *args):
    if recording() is not None: return self.fn(*args)   # inside another capture: that one records these realizes
    tensors = [a for a in args if isinstance(a, Tensor)]
    for t in tensors: t.realize()
    arrays = [t._data() for t in tensors]
    # the first argument holding the same array: f(X, X) captured must not replay f(X, Y) as f(X, X)
    alias = [next(j for j, b in enumerate(arrays) if b is a) for a in arrays]
    spec = [(t.shape, t.dtype, t.device, k) for t, k in zip(tensors, alias)]
    consts = [(n, a) for n, a in enumerate(args) if not isinstance(a, Tensor)]
    if self.steps is not None:
      self._check(spec, consts)
      return self._replay(arrays)
    self.calls += 1
    if self.calls == 1: return self.fn(*args)
    with capturing() as rec:
      out = self.fn(*args)
      leaves = [t for t in _tensors_in(out)]
      if leaves: Tensor.realize(*leaves)
    if rec.reads:
      raise JitError(f"{self.fn.__name__} read a Tensor's value into Python while it was captured ({rec.reads}); "
                     "Python code that branches on it would replay the captured branch. Keep reads outside the "
                     "jitted function")
    self._args = arrays
    self.steps, self.spec, self.consts = self._resolve(rec, arrays), spec, consts
    self.returns = _structure(out, self._origin)
    del self._args
    self.graph = self._graph(arrays)
    return out

  def _graph(self, arrays: list[np.ndarray]) -> Graph | None:
    """The capture as one program: where JIT_GRAPH is on, every realize ran on one device that has a graph, and each
    kernel came from a loop program (Kernel.ast)."""
    steps = self.steps
    if not JIT_GRAPH or not steps or len({st.options.device for st in steps}) != 1: return None
    if get_device(steps[0].options.device).graph is None: return None
    if any(st.plan.temp_arrays is None or any(k.ast is None for k in st.plan.kernels) for st in steps): return None
    returned = {(leaf[1], leaf[2]) for leaf in _leaves(self.returns) if leaf[0] == "out"}
    return Graph(steps, arrays, returned, in_place=bool(JIT_INPLACE))

  def _check(self, spec: list[tuple], consts: list[tuple]) -> None:
    """A JitError naming the first argument that differs from the capture."""
    name = self.fn.__name__
    if len(spec) != len(self.spec):
      raise JitError(f"{name} was captured with {len(self.spec)} Tensor arguments, called with {len(spec)}")
    for k, (now, was) in enumerate(zip(spec, self.spec)):
      for what, a, b in zip(("shape", "dtype", "device"), now, was):
        if a != b: raise JitError(f"{name}: Tensor argument {k} has {what} {a}, captured with {b}; call .reset() "
                                  f"to capture again (captured for Tensor arguments {[s[:2] for s in self.spec]})")
      if now[3] != was[3]:
        same = lambda j: f"the same tensor as argument {j}" if j != k else "a tensor of its own"
        raise JitError(f"{name}: Tensor argument {k} is {same(now[3])}, captured as {same(was[3])}")
    if [n for n, _ in consts] != [n for n, _ in self.consts]:
      raise JitError(f"{name}: arguments at {[n for n, _ in consts]} are not Tensors, captured with "
                     f"{[n for n, _ in self.consts]}")
    for (n, a), (_, b) in zip(consts, self.consts):
      if type(a) is not type(b) or not _same(a, b):
        raise JitError(f"{name}: argument {n} is {a!r}, captured as {b!r}: a value that is not a Tensor is part of "
                       "the capture; pass values that change as Tensors")

  def _resolve(self, rec: list, arg_arrays: list[np.ndarray]) -> list[Step]:
    """Name where every input array of every recorded realize came from."""
    made: dict[int, tuple[int, int]] = {}   # id(array) -> (step, output) of the realize that produced it
    steps, seeds = [], {}
    for k, (plan, options, arrays, outs, writes, checks) in enumerate(rec):
      src = []
      for a in arrays:
        if any(a is x for x in arg_arrays): src.append(("arg", next(n for n, x in enumerate(arg_arrays) if a is x)))
        elif id(a) in made: src.append(("out",) + made[id(a)])
        else:
          src.append(("keep", a))
          if (refill := refill_of(a)) is not None: seeds.setdefault(id(a), refill)
      for i, o in enumerate(outs): made[id(o)] = (k, i)
      steps.append(Step(plan, options, src, writes, checks=checks))
    self._made, self.refills = made, list(seeds.values())
    return steps

  def _origin(self, t) -> tuple:
    a = t._data()
    if id(a) in self._made: return ("out",) + self._made[id(a)] + (t.shape,)
    for k, x in enumerate(self._args):   # an argument returned: the new call's argument, not the captured one
      if a is x: return ("arg", k, t.shape)
    return ("keep", t)

  def _replay(self, arg_arrays: list[np.ndarray]):
    results: list[list[np.ndarray]] = []
    for refill in self.refills: refill()     # each random seed once per replay, before any kernel reads it
    if self.graph is not None:
      results = self.graph.run(arg_arrays)
      for st, outs in zip(self.steps, results): check_outputs(st.checks, outs)
      return _rebuild(self.returns, results, arg_arrays)
    for st in self.steps:
      arrays = [arg_arrays[s[1]] if s[0] == "arg" else results[s[1]][s[2]] if s[0] == "out" else s[1]
                for s in st.inputs]
      outs = st.run(arrays)
      check_outputs(st.checks, outs)
      for i, target in st.writes: np.copyto(target, outs[i])
      results.append(outs)
    return _rebuild(self.returns, results, arg_arrays)


def _tensors_in(out) -> list:
  if isinstance(out, Tensor): return [out]
  if isinstance(out, (tuple, list)): return [t for o in out for t in _tensors_in(o)]
  if out is None: return []
  raise JitError(f"a captured function returns Tensors, tuples or lists of them, or None; got {type(out).__name__}")


def _structure(out, origin) -> Any:
  if isinstance(out, Tensor): return origin(out)
  if isinstance(out, (tuple, list)): return type(out)(_structure(o, origin) for o in out)
  return None


def _leaves(spec) -> list:
  if spec is None: return []
  if isinstance(spec, (tuple, list)) and (not spec or not isinstance(spec[0], str)):
    return [x for s in spec for x in _leaves(s)]
  return [spec]


def _same(a, b) -> bool:
  try: return bool(a == b) or (a != a and b != b)   # NaN equals NaN here
  except Exception: return a is b                    # noqa: BLE001 (== on an arbitrary object may raise)


def _rebuild(spec, results, args):
  if spec is None: return None
  if isinstance(spec, (tuple, list)) and (not spec or not isinstance(spec[0], str)):
    return type(spec)(_rebuild(s, results, args) for s in spec)
  if spec[0] == "keep": return spec[1]
  if spec[0] == "arg": return Tensor._from_array(args[spec[1]], spec[2])
  _, k, i, shape = spec
  return Tensor._from_array(results[k][i], shape)

"""Devices: where kernels run. A device is a table of four things:

  renderer   loop program -> source text + signature      (uopc.renderer: a CStyleRenderer dialect)
  compile    rendered source -> a program, prg(*buffers)  (CPU: the system C compiler, cached, loaded with cffi)
  alloc      (dtype, n) -> a buffer of n elements          (CPU: a NumPy array)
  copyin / copyout   NumPy array <-> buffer                (CPU: the array itself, no copy)

The kernelizer asks the options for the device's name and this registry for the device; it never imports a
renderer or a runtime. A new backend is one more entry: DEVICES["CL"] = a function returning its Device. "CL"
(OpenCL on PoCL, uopc.runtime.cl) and "CUDA" (NVRTC, launched where a GPU is: uopc.runtime.cuda) are two such entries.
A device may also have a graph: a captured step's kernels as one program, replayed with one call (uopc.jit).
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Any, Callable
import numpy as np
from uopc.dtype import DType, np_dtype
from uopc.renderer import CStyleRenderer
from uopc.signature import KernelSource
from uopc.helpers import STEP_OBJECTS, cache


@dataclass(frozen=True)
class Device:
  name: str
  renderer: CStyleRenderer
  compile: Callable[[KernelSource], Callable]    # source -> program
  alloc: Callable[[DType, int], Any]
  copyin: Callable[[np.ndarray], Any]           # a flat, C-contiguous host array -> a buffer holding it
  copyout: Callable[[Any], np.ndarray]          # a buffer -> a flat host array
  graph: Callable | None = None                 # (calls, buffers, renderer) -> a step program (uopc.jit), or None
  graph_renders: bool = False                   # whether the graph renders each kernel from Call.ast (not its program)
  graph_links: Callable[[], bool] = lambda: False   # whether its graph runs each kernel's own build's code (NOTES 69)
  # (call, renderer) -> whether a linked graph's kernel written in place is its own build's machine code (NOTES 71)
  same_code_in_place: Callable[[Any, CStyleRenderer], bool] | None = None

  def keeps_code(self, renderer: CStyleRenderer):
    """uopc.step_calls.write_in_place's rule 6 for this device's graph with this renderer: where the graph links the
    kernels' own builds, a writer stays in place only if its code does; None (no such rule) elsewhere."""
    if self.same_code_in_place is None or not self.graph_links(): return None
    return lambda call: self.same_code_in_place(call, renderer)


def _cpu() -> Device:
  from uopc.render_c import C
  from uopc.runtime import Program
  compile = lambda src: Program(src, src.name, linkable=True)   # its object kept for a linked step
  return Device("CPU", C, compile, lambda dtype, n: np.empty(n, np_dtype(dtype)), lambda a: a, lambda b: b,
                _cpu_graph, graph_renders=True, graph_links=_cpu_graph_links, same_code_in_place=_cpu_same_code)


def _cpu_graph_links() -> bool:
  """Whether the CPU's step program links its kernels' own objects (uopc.render_step.LINKED): where the toolchain
  can, unless STEP_OBJECTS=0."""
  from uopc.runtime.build import links_objects
  from uopc.runtime.toolchain import compiler
  return bool(STEP_OBJECTS.value) and links_objects(compiler())


def _cpu_same_code(call, renderer) -> bool:
  """Whether call's kernel, as a linked step renders it written in place (its aliased pointers), compiles to its own
  build's machine code (uopc.runtime.graph.same_machine_code)."""
  from uopc.render_step import kernel_object
  from uopc.runtime.graph import same_machine_code
  aliased = frozenset(j for j, b in enumerate(call.bufs) if call.bufs.count(b) > 1)
  o = kernel_object(call, renderer, aliased, call.name)
  return same_machine_code(o.src, o.own_name, call.prg)


def _cpu_graph(calls: list, nbufs: int, renderer):
  """A captured step's kernels as one C function in one OpenMP region (uopc.render_step, uopc.runtime.graph)."""
  from uopc.render_step import render_step
  from uopc.runtime.graph import StepProgram
  return StepProgram(render_step(calls, renderer, linked=_cpu_graph_links()), nbufs)


def _host_alloc(dtype: DType, n: int) -> np.ndarray: return np.empty(n, np_dtype(dtype))


def _cl() -> Device:
  """OpenCL C on PoCL (uopc.runtime.cl); buffers stay host arrays, each program maps them for its launch."""
  from uopc.render_gpu import CL
  from uopc.runtime.cl import CLProgram
  from uopc.runtime.graph import CLGraph
  graph = lambda calls, nbufs, renderer: CLGraph(calls, nbufs)   # the kernels' own programs, enqueued in one go
  return Device("CL", CL, CLProgram, _host_alloc, lambda a: a, lambda b: b, graph)


def _cuda() -> Device:
  """CUDA C, compiled by NVRTC anywhere, launched where a GPU is (uopc.runtime.cuda)."""
  from uopc.render_gpu import CUDA
  from uopc.runtime.cuda import CUDAProgram
  return Device("CUDA", CUDA, CUDAProgram, _host_alloc, lambda a: a, lambda b: b)


# name -> a function that builds the device (called once, on first use: a backend's imports stay lazy)
DEVICES: dict[str, Callable[[], Device]] = {"CPU": _cpu, "CL": _cl, "CUDA": _cuda}


def canonical(name: str) -> str:
  """The registry's spelling of a device name: "cpu" -> "CPU"."""
  if not isinstance(name, str): raise TypeError(f"a device name is a string such as 'CPU', got {name!r}")
  key = name.upper()
  if key not in DEVICES: raise ValueError(f"unknown device {name!r}; known devices are {sorted(DEVICES)}")
  return key


# name -> (the registry entry it was built from, the device): built once, rebuilt after clear_caches()
_opened: dict[str, tuple[Callable, Device]] = cache("device.opened", {})


def get_device(name: str = "CPU") -> Device:
  """The device registered under name, built on first use (again if its registry entry was replaced)."""
  key = canonical(name)
  factory = DEVICES[key]
  if key not in _opened or _opened[key][0] is not factory: _opened[key] = (factory, factory())
  return _opened[key][1]

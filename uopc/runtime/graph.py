"""A captured step as one program on its device (uopc.jit runs it; each device's table names its graph).

  prg = StepProgram(step_source, nbufs)   # CPU: compiles, or loads the cached object for this source and compiler
  prg = CLGraph(calls, nbufs)             # CL: the kernels' own programs, enqueued in one go
  prg.bind(k, array)                      # buffer k of the step is this array (kept until bound again)
  prg()                                   # one call: every kernel

A linked step (uopc.render_step.LINKED, gcc on Linux) is its calls compiled and linked with the object files its
kernels' own builds were made from (kernel_objects; each renamed for the step by objcopy, renamed()), so it runs
their machine code (NOTES 69); elsewhere the step's text holds the kernels and is compiled whole.

On the CPU the kernels read their buffers through one table of pointers, `void* b[nbufs]`: what never changes between
steps (a plan's temporaries, parameters, optimizer state) is bound once; only a step's new arguments and fresh
outputs are bound again before each call. On CL each array is wrapped once as a buffer over its own memory; a call
enqueues every kernel (and every write-back copy) on the in-order queue, then maps what the step wrote and waits once,
instead of waiting after each kernel.
"""
from __future__ import annotations
import os
import re
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import cffi
import numpy as np
from uopc.runtime import build, calls
from uopc.runtime.flags import FLAGS, PRELUDE, with_prelude
from uopc.runtime.toolchain import CompileError, compiler

LINK_FLAGS = ("-Wl,--wrap=GOMP_parallel",)   # a linked step's kernels join its team (uopc.render_step.LINKED)


class StepProgram:
  """The step's C function, void uopc_step(void** b), compiled and loaded, with its table of buffer pointers."""

  def __init__(self, step, nbufs: int):
    self.step, self.name, self.nbufs = step, step.name, nbufs
    self.threads, self._quick, self.scalar_slots = None, None, ()   # what uopc.runtime.calls asks of a program
    cc, full = compiler(), PRELUDE + step.src
    t0 = time.perf_counter()
    self.objects = objects = kernel_objects(step.objects, cc)   # the kernels' object files (a linked step)
    # the objects' names carry their content hashes: the step's cache key holds them through its text
    if objects: full += f"\n/* linked with: {' '.join(o.name for o in objects)} */\n"
    self.flags, self.path, self.cached = build.locate(full, self.name, cc, FLAGS + (LINK_FLAGS if objects else ()))
    if not self.cached:
      with build.build_lock(self.path), tempfile.TemporaryDirectory(prefix="uopc-step-") as tmp:
        if not build.intact(self.path): build.build(full, self.path, cc, self.flags, renamed(step.objects, objects,
                                                                                            Path(tmp)))
    self.compile_s = time.perf_counter() - t0
    self.ffi = cffi.FFI()
    self.ffi.cdef(f"void {self.name}(void** b);")
    self.lib = self.ffi.dlopen(str(self.path))
    self.fn = getattr(self.lib, self.name)
    self.table = self.ffi.new("void*[]", max(nbufs, 1))
    self.arrays: list[np.ndarray | None] = [None] * nbufs   # what each pointer points into: kept alive here
    self._char = self.ffi.typeof("char[]")
    backend = getattr(self.ffi, "_backend", None)
    self._from_buffer = backend.from_buffer if hasattr(backend, "from_buffer") else \
      lambda ctype, arg, writes: self.ffi.from_buffer(ctype, arg, require_writable=writes)

  def __repr__(self):
    s = self.step
    return (f"StepProgram({s.functions} functions; {s.shared} kernels shared out, {s.serial} serial, {s.copies} "
            f"copies; {s.barriers} barriers; cached={self.cached})")

  def bind(self, k: int, array: np.ndarray) -> None:
    """Buffer k is array from now on (C-contiguous: the step's kernels index it flat)."""
    if self.arrays[k] is array: return   # bound already (held in self.arrays, so its memory has not moved)
    if not array.flags.c_contiguous: raise ValueError(f"step buffer {k}: the array is not C-contiguous")
    self.arrays[k] = array
    self.table[k] = self._from_buffer(self._char, array, False) if array.nbytes else self.ffi.NULL

  def __call__(self) -> None:
    missing = [k for k, a in enumerate(self.arrays) if a is None]
    if missing: raise RuntimeError(f"{self.name}: step buffers {missing[:8]} were never bound")
    calls.call_kernel(self, [self.table])


def kernel_objects(objects: tuple, cc: str) -> tuple[Path, ...]:
  """The object file of each KernelObject of a linked step: the one its own build was linked from (uopc.runtime.
  Program keeps it where steps link: build(keep_object=True)), compiled now where it is missing, several at once."""
  if len(objects) <= 1: return tuple(object_file(o.src, o.own_name, cc) for o in objects)
  with ThreadPoolExecutor(max_workers=min(len(objects), os.cpu_count() or 1)) as pool:
    return tuple(pool.map(lambda o: object_file(o.src, o.own_name, cc), objects))


def object_file(src: str, name: str, cc: str) -> Path:
  """The object file of the kernel `name` of this C text, as uopc.runtime.Program builds it (kept beside its cache
  entry), compiled now where it is missing."""
  src = with_prelude(src)   # as uopc.runtime.Program compiles it
  flags, so_path, _ = build.locate(src, name, cc, FLAGS)
  path = build.object_path(so_path)
  if not build.intact(path):
    with build.build_lock(path):
      if not build.intact(path): build.build(src, path, cc, flags)
  return path


def same_machine_code(src: str, name: str, prg) -> bool:
  """Whether the kernel `name` of this C text (a kernel written in place: its aliased pointers without restrict,
  uopc.step_calls.write_in_place) compiles to the machine code of prg's own build: the same instructions with the same
  relocations, and the same constants, the function's name aside. Where it does, a linked step that runs it in place
  runs the kernel's own code, so its bits (NOTES 71); where it does not (gcc vectorizes the two texts differently on
  some machines), the write-back stays a copy. False where objdump is missing or prg has no build of its own."""
  if getattr(prg, "path", None) is None or getattr(prg, "src", None) is None: return False
  if not shutil.which("objdump"): return False
  cc = compiler()
  return _code(object_file(src, name, cc), name) == _code(object_file(prg.src, prg.name, cc), prg.name)


def _code(path: Path, name: str) -> str:
  """An object's instructions with their relocations, and the contents of its sections, as objdump prints them, the
  file's path and the kernel's name made neutral."""
  out = []
  for what in ("-d", "-s"):
    r = subprocess.run(["objdump", what, "-r", "--no-show-raw-insn", str(path)], capture_output=True, text=True)
    if r.returncode != 0: raise CompileError(f"objdump {what} failed on {path}: {r.stderr.strip()}")
    out.append(r.stdout.replace(str(path), "OBJECT"))
  return re.sub(rf"\b{re.escape(name)}\b", "KERNEL", "\n".join(out))


def renamed(objects: tuple, paths: tuple[Path, ...], into: Path) -> tuple[Path, ...]:
  """Copies of the objects with each kernel's function named as the step calls it (two kernels of a step may share a
  name): objcopy renames a symbol and changes no instruction."""
  out = []
  for o, path in zip(objects, paths):
    out.append(into / f"{o.name}.o")
    r = subprocess.run(["objcopy", f"--redefine-sym={o.own_name}={o.name}", str(path), str(out[-1])],
                       capture_output=True, text=True)
    if r.returncode != 0: raise CompileError(f"objcopy could not rename {o.own_name} in {path}: {r.stderr.strip()}")
  return tuple(out)


class CLGraph:
  """A captured step on device CL: every kernel enqueued in one go, one wait at the end (module docstring)."""

  def __init__(self, calls: list, nbufs: int):
    from uopc.step_calls import Copy
    self.calls, self.nbufs, self.name = calls, nbufs, "cl_step"
    self.arrays: list[np.ndarray | None] = [None] * nbufs
    self.buffers: list = [None] * nbufs
    self.written = sorted({c.dst for c in calls if isinstance(c, Copy)} |
                          {b for c in calls if not isinstance(c, Copy) for b, w in zip(c.bufs, c.writes) if w})
    self.queue = next(c.prg.queue for c in calls if not isinstance(c, Copy))
    self.step = None

  def __repr__(self): return f"CLGraph({sum(not hasattr(c, 'dst') for c in self.calls)} kernels, one wait)"

  def bind(self, k: int, array: np.ndarray) -> None:
    import pyopencl as cl
    if self.arrays[k] is array: return
    mf, ctx = cl.mem_flags, self.queue.context
    self.arrays[k] = array
    self.buffers[k] = cl.Buffer(ctx, mf.USE_HOST_PTR | mf.READ_WRITE, hostbuf=array) if array.nbytes else \
      cl.Buffer(ctx, mf.READ_WRITE, 8)

  def __call__(self) -> None:
    import pyopencl as cl
    for c in self.calls:
      if hasattr(c, "dst"): cl.enqueue_copy(self.queue, self.buffers[c.dst], self.buffers[c.src], byte_count=c.nbytes)
      else: c.prg.kernel(self.queue, c.prg.launch.global_size, c.prg.launch.block, *[self.buffers[b] for b in c.bufs])
    for k in self.written:   # what the OpenCL standard asks before the host reads a USE_HOST_PTR array
      a = self.arrays[k]
      if a.nbytes:
        mapped, _ = cl.enqueue_map_buffer(self.queue, self.buffers[k], cl.map_flags.READ, 0, a.shape, a.dtype)
        mapped.base.release()
    self.queue.finish()

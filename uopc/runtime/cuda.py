"""The CUDA device: CUDA C kernels (uopc.render_gpu) compiled by NVRTC everywhere, launched only where a GPU is.

NVRTC is a library (pip: cuda-bindings + nvidia-cuda-nvrtc), so every kernel can be compiled and checked on a machine
without a GPU; a launch there raises NoGPUError. Where the CUDA driver finds a GPU, the kernel is compiled for that
GPU's architecture and launched through the driver API: host NumPy arrays are copied to device memory, and the ones
the kernel writes are copied back. Those packages have wheels for Linux and Windows only: on a Mac (or wherever they
are missing) compiling raises NVRTCUnavailable, which names the machine and the packages.
"""
from __future__ import annotations
import functools
import numpy as np
from uopc.dtype import np_dtype
from uopc.errors import DeviceUnavailable
from uopc.signature import KernelSource
from uopc.render_gpu import CUDA_PRELUDE
from uopc.runtime.machine import platform_name
from uopc.runtime.toolchain import CompileError, numbered

DEFAULT_ARCH = "sm_80"   # what kernels compile for when there is no GPU to ask
PACKAGES = "cuda-bindings nvidia-cuda-nvrtc"


class NoGPUError(DeviceUnavailable):
  """A CUDA kernel was launched on a machine where the CUDA driver finds no GPU."""


class NVRTCUnavailable(DeviceUnavailable):
  """Device CUDA cannot compile here: NVRTC (the pip packages cuda-bindings and nvidia-cuda-nvrtc) is missing."""


@functools.cache
def nvrtc_unavailable() -> str | None:
  """Why NVRTC cannot compile here (the machine, the packages to install, the error), or None where it can."""
  try:
    from cuda.bindings import nvrtc
    _check(nvrtc.nvrtcVersion(), "nvrtcVersion")   # loads the NVRTC library itself, not only the bindings
    return None
  except Exception as e:   # no bindings (ModuleNotFoundError), no library (the bindings' own error)
    why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
  return (f"device CUDA cannot compile here ({platform_name()}): NVRTC is missing ({why}). pip install {PACKAGES} "
          f"(make setup installs them on Linux and Windows; they have no macOS wheels)")


def _check(result, what: str):
  err, *rest = result
  if int(err) != 0: raise RuntimeError(f"CUDA: {what} failed: {err!r}")
  return rest[0] if len(rest) == 1 else rest


@functools.cache
def gpu():
  """(context, architecture) of GPU 0, or the reason there is none (a str)."""
  try:
    from cuda.bindings import driver
    if int(driver.cuInit(0)[0]) != 0: return "cuInit found no CUDA device"
    dev = _check(driver.cuDeviceGet(0), "cuDeviceGet")
    major = _check(driver.cuDeviceGetAttribute(driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                               dev), "cuDeviceGetAttribute")
    minor = _check(driver.cuDeviceGetAttribute(driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                               dev), "cuDeviceGetAttribute")
    ctx = _check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    return ctx, f"sm_{major}{minor}"
  except Exception as e:   # no driver library, no device: a machine without a GPU
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def gpu_present() -> bool: return not isinstance(gpu(), str)


def no_gpu_reason() -> str:
  return "" if gpu_present() else f"no GPU found (the CUDA driver says: {gpu()})"


def nvrtc_compile(src: str, name: str, arch: str = DEFAULT_ARCH) -> bytes:
  """CUDA C -> a cubin for arch (sm_80, sm_90, ...), with NVRTC. Raises CompileError with NVRTC's log, and
  NVRTCUnavailable where NVRTC is missing."""
  if why := nvrtc_unavailable(): raise NVRTCUnavailable(why)
  from cuda.bindings import nvrtc
  prog = _check(nvrtc.nvrtcCreateProgram(src.encode(), f"{name}.cu".encode(), 0, [], []), "nvrtcCreateProgram")
  try:
    opts = [f"--gpu-architecture={arch}".encode(), b"-default-device"]
    err = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
    if int(err) != 0:
      size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
      log = b" " * size
      nvrtc.nvrtcGetProgramLog(prog, log)
      text = log.decode(errors="replace").strip("\0 \n")
      raise CompileError(f"NVRTC could not compile {name} for {arch}:\n{text}\n\nsource:\n{numbered(src)}")
    size = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
    cubin = b" " * size
    _check((nvrtc.nvrtcGetCUBIN(prog, cubin)[0], None), "nvrtcGetCUBIN")
    return cubin
  finally: nvrtc.nvrtcDestroyProgram(prog)


class CUDAProgram:
  """One CUDA kernel: compiled on creation (for the GPU's architecture, or sm_80 without one), launched on call."""

  def __init__(self, src: KernelSource, arch: str | None = None):
    self.src, self.name, self.signature, self.launch = src, src.name, src.signature, src.signature.launch
    g = gpu()
    self.arch = arch or (g[1] if not isinstance(g, str) else DEFAULT_ARCH)
    self.cubin = nvrtc_compile(CUDA_PRELUDE + src, src.name, self.arch)
    self.fn = None

  def __repr__(self):
    return f"CUDAProgram({self.name!r}, {self.arch}, grid={self.launch.grid}, block={self.launch.block})"

  def __call__(self, *arrays: np.ndarray) -> None:
    if not gpu_present(): raise NoGPUError(f"CUDA: cannot launch {self.name}: {no_gpu_reason()}")
    from cuda.bindings import driver
    _check(driver.cuCtxSetCurrent(gpu()[0]), "cuCtxSetCurrent")
    if self.fn is None:
      self.module = _check(driver.cuModuleLoadData(self.cubin), "cuModuleLoadData")
      self.fn = _check(driver.cuModuleGetFunction(self.module, self.name.encode()), "cuModuleGetFunction")
    params = self.signature.params
    if len(arrays) != len(params): raise TypeError(f"{self.name} takes {len(params)} arrays, got {len(arrays)}")
    ptrs = []
    try:
      for k, (a, p) in enumerate(zip(arrays, params)):
        if not isinstance(a, np.ndarray) or a.dtype != np_dtype(p.dtype) or not a.flags.c_contiguous:
          raise TypeError(f"{self.name}: argument {k} must be a C-contiguous {np_dtype(p.dtype)} array")
        ptr = _check(driver.cuMemAlloc(max(a.nbytes, 8)), "cuMemAlloc")
        ptrs.append(ptr)
        if a.nbytes: _check((driver.cuMemcpyHtoD(ptr, a.ctypes.data, a.nbytes)[0], None), "cuMemcpyHtoD")
      args = np.array([int(p) for p in ptrs], dtype=np.uint64)
      argp = np.array([args.ctypes.data + 8 * k for k in range(len(ptrs))], dtype=np.uint64)
      grid = tuple(self.launch.grid) + (1,) * (3 - len(self.launch.grid))
      block = tuple(self.launch.block) + (1,) * (3 - len(self.launch.block))
      _check((driver.cuLaunchKernel(self.fn, *grid, *block, 0, 0, argp.ctypes.data, 0)[0], None), "cuLaunchKernel")
      _check((driver.cuCtxSynchronize()[0], None), "cuCtxSynchronize")
      for a, p, ptr in zip(arrays, params, ptrs):
        if p.writes and a.nbytes: _check((driver.cuMemcpyDtoH(a.ctypes.data, ptr, a.nbytes)[0], None), "cuMemcpyDtoH")
    finally:
      for ptr in ptrs: driver.cuMemFree(ptr)


"""The GPU dialects: OpenCL C and CUDA C, each a table over the one C-style renderer (uopc.renderer).

A GPU renderer first makes the loop program a launch (uopc.gpu): its parallel output loops become GLOBAL x LOCAL
axes (unless an optimizer already chose them), and those become the group and local ids of each work-item. Then
the shared walk prints it with this dialect's words:

                 OpenCL C                        CUDA C
  kernel         __kernel void                   extern "C" __global__ void
  launch bounds  reqd_work_group_size(x,y,z)     __launch_bounds__(threads)
  buffer         __global float* restrict        float* __restrict__
  group id       get_group_id(0)                 blockIdx.x
  local id       get_local_id(0)                 threadIdx.x
  local memory   __local float lmem0[256];       __shared__ float lmem0[256];
  barrier        barrier(CLK_LOCAL_MEM_FENCE);   __syncthreads();
"""
from __future__ import annotations
from typing import ClassVar
from uopc.uop import UOp, Ops
from uopc.dtype import dtypes
from uopc.renderer import CStyleRenderer, Rendered
from uopc.gpu import launch_axes, to_special, BLOCK_LIMIT


def _gpu_fn(name: str):
  return lambda r, d, x: f"{name}({x})"   # OpenCL's math builtins are overloaded: exp2 for float and double


class GPURenderer(CStyleRenderer):
  """What both GPU dialects share: no thread pragma (the launch is the parallel loop), the launch opt first."""
  thread_pragma = None
  block_limit: ClassVar[int] = BLOCK_LIMIT

  def render(self, sink: UOp, name: str) -> Rendered:
    prog, _ = to_special(launch_axes(sink, self.block_limit))
    return super().render(prog, name)


class OpenCLRenderer(GPURenderer):
  device = "CL"
  # the work-group size is fixed at compile time: the compiler may specialize for it (PoCL does)
  kernel_prefix = "__kernel __attribute__((reqd_work_group_size({block}))) void "
  buffer_decl = "__global {type}* restrict {name}"
  # OpenCL C has no bool or `long long` buffers: bool is stored as a byte, 64-bit ints are `long`; no half arithmetic
  types = {dtypes.f32: "float", dtypes.f64: "double", dtypes.i32: "int", dtypes.i64: "long", dtypes.u8: "uchar",
           dtypes.bool: "uchar"}
  code_for_workitem = {"gidx": "get_group_id({dim})", "lidx": "get_local_id({dim})"}
  barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
  smem_prefix = "__local "
  code_for_op = {**CStyleRenderer.code_for_op, Ops.EXP2: _gpu_fn("exp2"), Ops.LOG2: _gpu_fn("log2"),
                 Ops.SQRT: _gpu_fn("sqrt"), Ops.SIN: _gpu_fn("sin"),
                 # a cast to a byte-sized bool must still turn 0.5 into 1
                 Ops.CAST: lambda r, d, x: f"(({x})!=0)" if d is dtypes.bool else f"(({r.type(d)}){x})"}

  def const(self, v, dtype):
    out = super().const(v, dtype)
    return out[:-2] + "l" if out.endswith("ll") else out   # OpenCL's 64-bit literal suffix is l


class CUDARenderer(GPURenderer):
  device = "CUDA"
  kernel_prefix = 'extern "C" __global__ void __launch_bounds__({threads}) '
  buffer_decl = "{type}* __restrict__ {name}"
  # half needs cuda_fp16.h, which NVRTC alone does not ship
  types = {dtypes.f32: "float", dtypes.f64: "double", dtypes.i32: "int", dtypes.i64: "long long",
           dtypes.u8: "unsigned char", dtypes.bool: "bool"}
  code_for_workitem = {"gidx": "blockIdx.{xyz}", "lidx": "threadIdx.{xyz}"}
  barrier = "__syncthreads();"
  smem_prefix = "__shared__ "


# what the devices prepend when they compile (not part of the printed kernel, as runtime.PRELUDE is for C)
CL_PRELUDE = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
CUDA_PRELUDE = "#define INFINITY (__int_as_float(0x7f800000))\n#define NAN (__int_as_float(0x7fffffff))\n"

CL, CUDA = OpenCLRenderer(), CUDARenderer()

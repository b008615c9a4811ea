"""The GPU dialects: OpenCL C and CUDA C, each a table over the one C-style renderer (uopc.renderer).

A GPU renderer first makes the loop program a launch (uopc.codegen.gpudims): its parallel output loops become GLOBAL x
LOCAL axes (unless an optimizer already chose them), and those become the group and local ids of each work-item. Then
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
from uopc.codegen import wmma
from uopc.uop import UOp, Ops, LocalArg, substitute
from uopc.dtype import dtypes
from uopc.renderer import CStyleRenderer, Rendered
from uopc.codegen.gpudims import launch_axes, to_special, BLOCK_LIMIT


def _gpu_fn(name: str):
  return lambda r, d, x: f"{name}({x})"   # OpenCL's math builtins are overloaded: exp2 for float and double


def _tile_index(op: wmma.Operand, i: int, ld: int, g: str, t: str) -> str:
  """The row-major offset in its tile of element i of a lane's fragment, printed from uopc.codegen.wmma's table."""
  (ra, rb, rc), (ca, cb, cc) = wmma.affine(op, i, 0), wmma.affine(op, i, 1)
  return f"({g}*{ra}+{t}*{rb}+{rc})*{ld}+({g}*{ca}+{t}*{cb}+{cc})"


class GPURenderer(CStyleRenderer):
  """What both GPU dialects share: no thread pragma (the launch is the parallel loop), the launch opt first."""
  thread_pragma = None
  block_limit: ClassVar[int] = BLOCK_LIMIT
  tensor_cores: ClassVar[bool] = False   # WMMA is the instruction itself; otherwise emulated through local memory
  tf32_round: ClassVar[str] = "{x}"      # the emulation's float -> tf32 (10 mantissa bits), as cvt.rna rounds

  def render(self, sink: UOp, name: str) -> Rendered:
    prog, _ = to_special(launch_axes(sink, self.block_limit))
    if not self.tensor_cores: prog = _wmma_scratch(prog)
    return super().render(prog, name)

  def render_wmma(self, u: UOp, names: dict[UOp, str]) -> list[str]:
    """The emulation: every lane writes its A and B registers where the hardware's table says they belong in the
    tile (local memory), the work-group waits, and each lane computes the C elements its registers hold."""
    arg, shape = u.arg, u.arg.layout
    a, b, c, lane, sa, sb = (names[s] for s in u.src)
    emulated = "emulated: fragments through local memory (uopc.codegen.wmma)"
    lines = [f"/* WMMA {shape.name} {arg.dtype} -> f32, {emulated} */",
             "{", f"  int wg = {lane}/4, wt = {lane}%4;"]
    rnd = (lambda x: self.tf32_round.format(x=x)) if arg.dtype == "tf32" else (lambda x: x)
    lines += [f"  {sa}[{_tile_index(shape.a, i, shape.k, 'wg', 'wt')}] = {rnd(f'{a}[{i}]')};"
              for i in range(shape.a.per_lane)]
    lines += [f"  {sb}[{_tile_index(shape.b, i, shape.n, 'wg', 'wt')}] = {rnd(f'{b}[{i}]')};"
              for i in range(shape.b.per_lane)]
    lines += [f"  {self.barrier}", f"  for (int wk = 0; wk < {shape.k}; wk++) {{"]
    for i in range(shape.c.per_lane):
      (ra, rb, rc), (ca, cb, cc) = wmma.affine(shape.c, i, 0), wmma.affine(shape.c, i, 1)
      row, col = f"(wg*{ra}+wt*{rb}+{rc})", f"(wg*{ca}+wt*{cb}+{cc})"
      lines.append(f"    {c}[{i}] += {sa}[{row}*{shape.k}+wk] * {sb}[wk*{shape.n}+{col}];")
    return lines + ["  }", f"  {self.barrier}", "}"]


def _wmma_scratch(prog: UOp) -> UOp:
  """Each WMMA gets the two local tiles its emulation exchanges fragments through (A: m x k, B: k x n floats)."""
  wmmas = [u for u in prog.toposort() if u.op is Ops.WMMA]
  if not wmmas: return prog
  slot = 1 + max((u.arg.slot for u in prog.toposort() if u.op is Ops.ALLOC), default=-1)
  mapping = {}
  for w in wmmas:
    shape = w.arg.layout
    sa = UOp(Ops.ALLOC, (), LocalArg(slot, dtypes.f32, (shape.m * shape.k,)))
    sb = UOp(Ops.ALLOC, (), LocalArg(slot + 1, dtypes.f32, (shape.k * shape.n,)))
    mapping[w], slot = w.replace(src=w.src + (sa, sb)), slot + 2
  return substitute(prog, mapping)


class OpenCLRenderer(GPURenderer):
  device = "CL"
  # the work-group size is fixed at compile time: the compiler may specialize for it (PoCL does)
  kernel_prefix = "__kernel __attribute__((reqd_work_group_size({block}))) void "
  buffer_decl = "__global {type}* restrict {name}"
  # OpenCL C has no bool or `long long` buffers: bool is stored as a byte, 64-bit ints are `long`; no half arithmetic
  types = {dtypes.f32: "float", dtypes.f64: "double", dtypes.i32: "int", dtypes.i64: "long", dtypes.u8: "uchar",
           dtypes.i8: "char", dtypes.bool: "uchar", dtypes.f16: "float", dtypes.u32: "uint", dtypes.u64: "ulong"}
  # a half is a storage format (OpenCL 1.2 core, no cl_khr_fp16 needed, so every device runs it): vload_half reads
  # one into a float, vstore_half rounds a float into one, and the arithmetic between is float's
  load_only = {dtypes.f16: ("half", "float {name} = vload_half({idx}, {buf});")}
  store_from_float = {dtypes.f16: "vstore_half({val}, {idx}, {buf});"}
  tf32_round = "as_float((as_uint({x})+0x1000u)&0xffffe000u)"   # round half away from zero at bit 13, drop 13 bits
  # each float16 result rounded to a half (CL_PRELUDE's function), as NumPy's and PyTorch's ops round: (a*a)/c with
  # the product kept in float was one unit in the last place off in a quarter of cases
  code_for_workitem = {"gidx": "get_group_id({dim})", "lidx": "get_local_id({dim})"}
  barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
  smem_prefix = "__local "
  code_for_op = {**CStyleRenderer.code_for_op, Ops.EXP2: _gpu_fn("exp2"), Ops.LOG2: _gpu_fn("log2"),
                 Ops.SQRT: _gpu_fn("sqrt"), Ops.SIN: _gpu_fn("sin"),
                 # a cast to a byte-sized bool must still turn 0.5 into 1
                 Ops.CAST: lambda r, d, x: f"(({x})!=0)" if d is dtypes.bool else
                 r.rounded_to_half(x) if d is dtypes.f16 else f"(({r.type(d)}){x})"}

  def rounded_to_half(self, x: str) -> str: return f"uopc_round_half({x})"

  def const(self, v, dtype):
    out = super().const(v, dtype)
    return out[:-2] + "l" if out.endswith("ll") else out   # OpenCL's 64-bit literal suffix is l (ull: ul)


class CUDARenderer(GPURenderer):
  device = "CUDA"
  kernel_prefix = 'extern "C" __global__ void __launch_bounds__({threads}) '
  buffer_decl = "{type}* __restrict__ {name}"
  # half needs cuda_fp16.h, which NVRTC alone does not ship
  types = {dtypes.f32: "float", dtypes.f64: "double", dtypes.i32: "int", dtypes.i64: "long long",
           dtypes.u8: "unsigned char", dtypes.i8: "signed char", dtypes.bool: "bool", dtypes.u32: "unsigned int",
           dtypes.u64: "unsigned long long"}
  # a half travels as its 16 bits; PTX converts it (no cuda_fp16.h under NVRTC alone)
  load_only = {dtypes.f16: ("unsigned short",
                            'float {name}; asm("cvt.f32.f16 %0, %1;" : "=f"({name}) : "h"({buf}[{idx}]));')}
  code_for_workitem = {"gidx": "blockIdx.{xyz}", "lidx": "threadIdx.{xyz}"}
  barrier = "__syncthreads();"
  smem_prefix = "__shared__ "
  tensor_cores = True

  def render_wmma(self, u: UOp, names: dict[UOp, str]) -> list[str]:
    """The instruction: the lane's float registers packed into the 32-bit registers mma.sync takes (two halves, or
    one tf32), then inline PTX from uopc.codegen.wmma.ptx_mma; C is updated in place."""
    arg, shape = u.arg, u.arg.layout
    a, b, c = (names[s] for s in u.src[:3])
    lines = [f"/* WMMA {shape.name} {arg.dtype} -> f32: mma.sync */", "{"]
    regs = {}
    for name, src, n in (("wa", a, shape.a.per_lane), ("wb", b, shape.b.per_lane)):
      if arg.dtype == "tf32":
        regs[name] = [f"{name}[{i}]" for i in range(n)]
        lines.append(f"  unsigned {name}[{n}];")
        lines += [f'  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"({name}[{i}]) : "f"({src}[{i}]));' for i in range(n)]
      else:   # element 2r in the low half, 2r+1 in the high half (cvt's first operand goes high)
        regs[name] = [f"{name}[{r}]" for r in range(n // 2)]
        lines.append(f"  unsigned {name}[{n // 2}];")
        lines += [f'  asm("cvt.rn.{arg.dtype}x2.f32 %0, %1, %2;" : "=r"({name}[{r}]) : "f"({src}[{2 * r + 1}]), '
                  f'"f"({src}[{2 * r}]));' for r in range(n // 2)]
    acc = [f"{c}[{i}]" for i in range(shape.c.per_lane)]
    return lines + ["  " + wmma.ptx_mma(shape, arg.dtype, acc, regs["wa"], regs["wb"], acc), "}"]


# what the devices prepend when they compile (not part of the printed kernel, as runtime.PRELUDE is for C)
# uopc_round_half: a float through a half and back (vstore_half rounds to nearest even; no cl_khr_fp16 needed)
CL_PRELUDE = ("#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
              "float uopc_round_half(float x) {\n"
              "  ushort h; vstore_half(x, 0, (half*)&h); return vload_half(0, (half*)&h);\n}\n")
CUDA_PRELUDE = "#define INFINITY (__int_as_float(0x7f800000))\n#define NAN (__int_as_float(0x7fffffff))\n"

CL, CUDA = OpenCLRenderer(), CUDARenderer()

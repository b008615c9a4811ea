"""The C dialect: C with OpenMP, compiled by the system C compiler for the CPU device.

The walk over the linearized program lives in uopc.renderer (CStyleRenderer); C's words are its defaults: `void`,
`T* restrict dataN` parameters, `#pragma omp parallel for` above the THREAD loop. render_c is the book's call:

  Program(render_c(online_attention_ir(N, D), "flash"), "flash")

What render_c returns is the C text (a str) that also carries its typed signature, so Program need not parse it.
"""
from __future__ import annotations
from uopc.dtype import DType, dtypes
from uopc.uop import UOp, Ops
from uopc.renderer import CStyleRenderer, KernelSource, Rendered
from uopc.codegen.vector import c_vector_name, c_typedefs


class CRenderer(CStyleRenderer):
  """C99 with OpenMP: the CStyleRenderer's defaults, spelled out."""
  device = "CPU"
  kernel_prefix = "void "
  buffer_decl = "{type}* restrict {name}"
  thread_pragma = "#pragma omp parallel for"

  # vectors: GCC's vector extensions (uopc.codegen.vector); an op missing here is written as on scalars
  def vector_type(self, dtype: DType) -> str: return c_vector_name(dtype)
  def render(self, sink: UOp, name: str) -> Rendered:
    # a vector square root or exp2 needs its helper in the preamble, which is written before the walk sees the op
    on_vectors = {u.op for u in sink.toposort() if u.dtype.count > 1}
    self.vector_sqrt, self.vector_exp2 = Ops.SQRT in on_vectors, Ops.EXP2 in on_vectors
    return super().render(sink, name)
  def vector_preamble(self, used: set[DType], sqrt: bool | None = None, exp2: bool | None = None) -> list[str]:
    sqrt = getattr(self, "vector_sqrt", False) if sqrt is None else sqrt
    exp2 = getattr(self, "vector_exp2", False) if exp2 is None else exp2
    return c_typedefs(used, self.type, self.book_max, sqrt, exp2) if used else []
  def vectorize(self, u: UOp, srcs: list[str]) -> str:
    """Lanes of one vector in another order are a shuffle (gcc 12 and clang both have __builtin_shufflevector)."""
    v = u.src[0].src[0] if u.src[0].op is Ops.GEP else None
    if v is not None and len(set(u.src)) > 1 and all(s.op is Ops.GEP and s.src[0] is v for s in u.src):
      name = srcs[0].rsplit("[", 1)[0]
      return f"__builtin_shufflevector({name}, {name}, {', '.join(str(s.arg) for s in u.src)})"
    return super().vectorize(u, srcs)
  def vector_op(self, u: UOp, *srcs: str) -> str | None:
    op, dtype, src_kind = u.op, u.dtype, u.src[0].dtype.kind
    t = c_vector_name(dtype)
    if op is Ops.WHERE and dtype.kind == "b":   # masks in, a mask out (-1 or 0 in each lane): a bitwise select
      return f"(({srcs[0]} & {srcs[1]}) | (~{srcs[0]} & {srcs[2]}))"
    if op in (Ops.MAX, Ops.WHERE) and dtype.itemsize != 4:
      raise NotImplementedError(f"CRenderer: {op} on {dtype!r}: vector selects are written for 32-bit lanes only")
    if op is Ops.MAX: return f"uopc_max_{t}({srcs[0]}, {srcs[1]})"
    if op is Ops.WHERE: return f"uopc_where_{t}({srcs[0]}, {srcs[1]}, {srcs[2]})"
    if op is Ops.EXP2 and dtype.scalar.itemsize == 4: return f"uopc_exp2_{t}({srcs[0]})"
    if op is Ops.SQRT and dtype.scalar.itemsize == 4 and dtype.kind == "f": return f"uopc_sqrt_{t}({srcs[0]})"
    if op is Ops.CAST and dtype.kind == "b": return f"({srcs[0]} != 0)"   # to a mask: -1 where nonzero
    if op is Ops.CAST and u.src[0].dtype.scalar is dtypes.u8 and dtype.itemsize == 4:   # a bool mask's bytes
      return f"uopc_widen_u8x{dtype.count}({srcs[0]})"
    if op is Ops.CAST and src_kind == "b": return f"__builtin_convertvector(-{srcs[0]}, {t})"   # a mask: 1, 0
    if op is Ops.CAST: return f"__builtin_convertvector({srcs[0]}, {t})"
    if op in (Ops.LOG2, Ops.SQRT, Ops.SIN, Ops.EXP2):
      raise NotImplementedError(f"CRenderer: {op} on {dtype!r} has no vector form (compute it on scalars)")
    return None


C = CRenderer()

# how OpenMP hands the THREAD loop's iterations to threads: static (the book's: contiguous halves) or in small chunks
# taken as threads come free, which evens out blocks of unequal cost and cores that other work delays (NOTES 24)
SCHEDULES = {"static": "", "dynamic": " schedule(dynamic, 4)", "guided": " schedule(guided)"}


def c_renderer(schedule: str = "static") -> CRenderer:
  """The C dialect with the THREAD loop scheduled as named (one of SCHEDULES; never text from a caller)."""
  if schedule not in SCHEDULES:
    raise ValueError(f"unknown OpenMP schedule {schedule!r}: expected one of {list(SCHEDULES)}")
  if schedule == "static": return C
  return type(f"CRenderer_{schedule}", (CRenderer,), {"thread_pragma": CRenderer.thread_pragma + SCHEDULES[schedule]})()


def render(sink: UOp, name: str) -> Rendered:
  """The C source of the program, its signature, and what it costs."""
  return C.render(sink, name)


def render_c(sink: UOp, name: str) -> KernelSource:
  """C source of `void name(data0, data1, ...)` computing the loop program under sink."""
  return C.render(sink, name).src


def count_flops(sink: UOp) -> int:
  """Floating-point ALU ops the program executes: each op counted once per trip of the loop it is written in."""
  return C.render(sink, "flops").flops

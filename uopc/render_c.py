"""The C dialect: C with OpenMP, compiled by the system C compiler for the CPU device.

The walk over the linearized program lives in uopc.renderer (CStyleRenderer); C's words are its defaults: `void`,
`T* restrict dataN` parameters, `#pragma omp parallel for` above the THREAD loop. render_c is the book's call:

  Program(render_c(online_attention_ir(N, D), "flash"), "flash")

What render_c returns is the C text (a str) that also carries its typed signature, so Program need not parse it.
"""
from __future__ import annotations
from uopc.uop import UOp
from uopc.renderer import CStyleRenderer, KernelSource, Rendered


class CRenderer(CStyleRenderer):
  """C99 with OpenMP: the CStyleRenderer's defaults, spelled out."""
  device = "CPU"
  kernel_prefix = "void "
  buffer_decl = "{type}* restrict {name}"
  thread_pragma = "#pragma omp parallel for"


C = CRenderer()


def render(sink: UOp, name: str) -> Rendered:
  """The C source of the program, its signature, and what it costs."""
  return C.render(sink, name)


def render_c(sink: UOp, name: str) -> KernelSource:
  """C source of `void name(data0, data1, ...)` computing the loop program under sink."""
  return C.render(sink, name).src


def count_flops(sink: UOp) -> int:
  """Floating-point ALU ops the program executes: each op counted once per trip of the loop it is written in."""
  return C.render(sink, "flops").flops

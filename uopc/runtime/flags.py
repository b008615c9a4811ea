"""The flags a kernel is compiled with, as part of its opts: chosen per kernel, and part of its cache key.

runtime.FLAGS is what CompileOpts() gives: -O3 -march=native, OpenMP, and the float reassociation that lets gcc
vectorize a reduction while infinities and NaNs keep their meaning (NOTES 2). Two flags are the ones most likely to
differ by kernel and machine (the issue measured both on hand-written C; NOTES 24 on uopc's vector kernel):
- `-mprefer-vector-width`: the width gcc's auto-vectorizer uses (x86). Explicit vectors (uopc.codegen.vector) keep their
  own width whatever it says.
- `-ffinite-math-only` lets gcc assume no infinity or NaN exists. The online softmax's running max starts at -inf and
  masks are -inf, so no kernel here gets it: the vector kernels get its speed from code that needs no assumption.
"""
from __future__ import annotations
import platform
from dataclasses import dataclass

BASE = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fassociative-math", "-fno-signed-zeros",
        "-fno-trapping-math", "-shared", "-fPIC")
X86 = platform.machine() in ("x86_64", "AMD64")


@dataclass(frozen=True)
class CompileOpts:
  vector_width: int | None = 256 if X86 else None   # -mprefer-vector-width=N (x86 only); None: the compiler's choice
  unroll: bool = False                               # -funroll-loops

  def __post_init__(self):
    if self.vector_width not in (None, 128, 256, 512):
      raise ValueError(f"CompileOpts: vector_width must be None, 128, 256 or 512, got {self.vector_width!r}")

  @property
  def flags(self) -> tuple[str, ...]:
    width = (f"-mprefer-vector-width={self.vector_width}",) if self.vector_width and X86 else ()
    return BASE[:3] + width + BASE[3:] + (("-funroll-loops",) if self.unroll else ())

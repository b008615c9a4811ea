"""What a kernel is compiled with: its flags (CompileOpts, chosen per kernel and part of its cache key; FLAGS, the
default) and the C prelude before its text (PRELUDE).

FLAGS is what CompileOpts() gives: -O3 -march=native, OpenMP, and the float reassociation that lets gcc
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


# Reassociating float sums lets the compiler vectorize reductions. Unlike -ffast-math this keeps infinities and NaNs
# meaningful, which the online softmax needs (its running max starts at -INFINITY). See NOTES 2. 256-bit vectors on
# x86: a register tile's 16 accumulators then reduce across fewer lanes (NOTES 2). A kernel may choose others
# (CompileOpts above; NOTES 24).
FLAGS = CompileOpts().flags

# What every rendered kernel may use (INFINITY, bool, exp2f); the renderer prints only the function. glibc's exp2f
# is a call the compiler cannot vectorize, so exp2f is this inline polynomial: 2^x = 2^n * 2^f, n = round(x),
# |f| <= 1/2, 2^f by its Taylor series to degree 7 (relative error below 1e-7); exp2f(-inf) = 0, exp2f(inf) = inf,
# exp2f(nan) = nan; results below 2^-126 flush to zero.
PRELUDE = """#include <math.h>
#include <stdbool.h>
#include <string.h>
static inline float uopc_exp2f(float x) {
  float xc = x < -126.0f ? -126.0f : (x > 128.0f ? 128.0f : x);
  float n = __builtin_floorf(xc + 0.5f), f = xc - n;
  float p = 1.5252733804059841e-05f;
  p = p * f + 1.5403530393381609e-04f; p = p * f + 1.3333558146428443e-03f; p = p * f + 9.6181291076284772e-03f;
  p = p * f + 5.5504108664821580e-02f; p = p * f + 2.4022650695910071e-01f; p = p * f + 6.9314718055994531e-01f;
  p = p * f + 1.0f;
  /* times 2^n as an integer add to the exponent field: float reassociation cannot reorder it into an overflow */
  int bits; memcpy(&bits, &p, sizeof bits);
  bits = x < -126.0f ? 0 : bits + (int)((unsigned)(int)n << 23);   /* x >= 128 lands on inf; nan stays nan */
  float r; memcpy(&r, &bits, sizeof r);
  return r;
}
#define exp2f(x) uopc_exp2f(x)
"""


def with_prelude(src: str) -> str:
  """The C a kernel's build compiles: PRELUDE, then the kernel; a source that starts with a preprocessor line brings
  its own preamble and is compiled as it is."""
  return src if src.lstrip().startswith("#") else PRELUDE + src

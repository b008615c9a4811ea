"""NOTES 22: kernels past 2^31 elements with 32-bit indices, and with the 64-bit ones uopc now renders.

  python notes/notes22_wide_index.py      # the transpose needs about 8 GB of memory
"""
import numpy as np
import uopc.renderer
from uopc.dtype import dtypes
from uopc.kernelize import clear_plan_cache
from uopc.render_c import render_c
from uopc.runtime import CompileError, Program
from uopc.tensor import Tensor
from uopc.uop import AxisType, Ops, ParamArg, UOp, range_, sink

FIRST, NOW = 2**62, 2**31 - 1   # the size past which the renderer writes every int as 64-bit: never, and now
n = (1 << 31) + 8
src, dst = (UOp(Ops.BUFFER, (), ParamArg(k, dtypes.u8, (n,))) for k in range(2))
i = range_(n, 0, AxisType.THREAD)
copy = sink(dst.index(i).store(src.index(i).load()).end(i))
for label, limit in (("32-bit indices (the first renderer)", FIRST), ("64-bit where sizes need them", NOW)):
  uopc.renderer.INT32_MAX = limit
  c = render_c(copy, "big_copy")
  try: Program(c, "big_copy"); result = "compiles"
  except CompileError as e: result = next(line.split("error: ")[1] for line in str(e).splitlines() if "error: " in line)
  print(f"copy of 2^31 + 8 bytes, {label}: `{c.splitlines()[2].strip()}` -> {result}")

rows, cols = 65537, 32768                                        # 2^31 + 32768 elements
a = np.random.default_rng(0).integers(0, 256, (rows, cols), dtype=np.uint8)
want = np.ascontiguousarray(a.T)
for label, limit in (("32-bit indices", FIRST), ("64-bit indices", NOW)):
  uopc.renderer.INT32_MAX = limit
  clear_plan_cache()
  got = Tensor(a).T.numpy()
  print(f"transpose ({rows}, {cols}) uint8, {label}: {int((got != want).sum())} wrong elements of {got.size}")

"""NOTES 21: an empty tensor's kernel, as the first lowering wrote it, and as uopc plans it now.

  python notes/notes21_empty.py
"""
import numpy as np
import uopc.rangeify as R
from uopc.kernelize import make_plan
from uopc.options import Options
from uopc.render_c import render_c
from uopc.tensor import Tensor
from uopc.uop import Ops, ParamArg, UOp, substitute

x = Tensor(np.ones((0, 4), np.float32)).reshape(4, 0) + 1     # an empty tensor, viewed in another shape
data = {u: UOp(Ops.BUFFER, (), ParamArg(0, u.dtype, (0,))) for u in x.uop.toposort() if u.op is Ops.BUFFER}
body, out = substitute(x.uop, data), UOp(Ops.BUFFER, (), ParamArg(1, x.dtype, (0,)))
fixed = R._axis_parts
# the first rule: an axis of fewer than two trips is no loop, so an axis of size 0 ran its body once
R._axis_parts = lambda ctx, size, factor, kind: (ctx.range(size, kind) if size > 1 else UOp.const(0), 1)
try: print("the first lowering of ones((0, 4)).reshape(4, 0) + 1:\n" + render_c(R.lower(body, out), "e_4_0"))
finally: R._axis_parts = fixed
plan = make_plan([x.uop], options=Options(opt=Tensor.opt))
print(f"\nnow: {len(plan.kernels)} kernels, outputs {plan.outs}; the value {x.numpy()!r}")

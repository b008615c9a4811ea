"""Issue 50: the LeNet step's convolution kernels (`python -m uopc.bench cnn`'s model, batch 64, AdamW, VectorOpt),
each timed alone: CPU seconds, best of 5 (uopc.bench.steps.kernel_times), with its GFLOP/s, vector width and
accumulators. Run with one OpenMP thread for per-kernel figures that other processes do not inflate:

  OMP_NUM_THREADS=1 python notes/notes62_conv_kernels.py [all]     (all: every kernel, not only the convolutions')
"""
import sys
from uopc.bench.cnn import ADAMW, batches, lenet, step_roots
from uopc.bench.steps import kernel_times
from uopc.opt import VectorOpt
from uopc.optim import AdamW
from uopc.tensor import Tensor
from uopc.uop import Ops

# the output shapes of the convolutions' kernels at batch 64 (and of what they read: padded copies, flipped weights;
# before issue 50, conv2's input gradient as the windows' gradient g and its fold). Other kernels of these shapes (a
# ReLU's, a pool's gradient) are listed too: the name says which is which (r_: a reduction, e_: elementwise)
CONV_SHAPES = {(64, 6, 28, 28): "conv1 y", (6, 1, 5, 5): "conv1 dw", (64, 1, 32, 32): "conv1 x pad",
               (64, 16, 10, 10): "conv2 y", (16, 6, 5, 5): "conv2 dw", (64, 6, 14, 14): "conv2 dx",
               (64, 16, 18, 18): "conv2 g pad", (6, 16, 5, 5): "conv2 w flip", (64, 6, 10, 10, 5, 5): "conv2 dx g"}

Tensor.opt = VectorOpt
model = lenet()
opt = AdamW(model.parameters(), **ADAMW)
x, y = batches(1)[0]
kt = kernel_times(step_roots(model, opt, x, y))
print(f"{'kernel':<28s} {'computes':<10s} {'ms':>8s} {'MFLOP':>8s} {'GFLOP/s':>8s} {'lanes':>5s} {'accs':>4s}")
for k, s in zip(kt["plan"].kernels, kt["kernel_s"]):
  what = CONV_SHAPES.get(tuple(k.body.shape), "")
  if not what and sys.argv[1:] != ["all"]: continue
  lanes = max([u.dtype.count for u in k.ast.toposort() if u.dtype is not None] + [1])
  accs = sum(1 for u in k.ast.toposort() if u.op is Ops.ALLOC)
  print(f"{k.name[:28]:<28s} {what:<10s} {s * 1e3:8.3f} {k.flops / 1e6:8.2f} {k.flops / s / 1e9 if s else 0:8.2f} "
        f"{lanes:5d} {accs:4d}")
print(f"all {len(kt['plan'].kernels)} kernels: {kt['total_s'] * 1e3:.2f} ms, {kt['flops'] / 1e6:.0f} MFLOP")

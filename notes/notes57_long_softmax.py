"""NOTES 57: softmax and log_softmax over one row of 1,000,003 float32 elements, forward and backward, against float64:
how many values fall outside PyTorch's float32 tolerance (rtol 1.3e-6, atol 1e-5) and the largest relative error,
for uopc and, where it is installed, PyTorch.

  python notes/notes57_long_softmax.py [scale]      (x = scale * N(0, 1), default 1; the note used 3)
"""
import sys
import numpy as np
from uopc.tensor import Tensor

N = 1_000_003
rng = np.random.default_rng(0)
x = (rng.standard_normal(N) * float(sys.argv[1] if len(sys.argv) > 1 else 1)).astype(np.float32)
g = rng.standard_normal(N).astype(np.float32)
x64, g64 = x.astype(np.float64), g.astype(np.float64)
e = np.exp(x64 - x64.max())
sm, ls = e / e.sum(), x64 - x64.max() - np.log(e.sum())
# (forward, gradient of sum(out * g)) in float64
REFERENCE = {"softmax": (sm, sm * (g64 - (g64 * sm).sum())), "log_softmax": (ls, g64 - sm * g64.sum())}


def outside(a: np.ndarray, ref: np.ndarray, rtol: float = 1.3e-6, atol: float = 1e-5) -> tuple[int, float]:
  err = np.abs(a.astype(np.float64) - ref)
  return int((err > atol + rtol * np.abs(ref)).sum()), float((err / (np.abs(ref) + 1e-30)).max())


try:
  import torch
except ImportError:
  torch = None
for name, (fwd, bwd) in REFERENCE.items():
  t = Tensor(x, requires_grad=True)
  out = getattr(t, name)(-1)
  (out * Tensor(g)).sum().backward()
  print(f"{name:12s} uopc   forward {outside(out.numpy(), fwd)}  backward {outside(t.grad.numpy(), bwd)}")
  if torch is not None:
    tt = torch.tensor(x, requires_grad=True)
    o = getattr(tt, name)(-1)
    (o * torch.tensor(g)).sum().backward()
    print(f"{name:12s} torch  forward {outside(o.detach().numpy(), fwd)}  backward {outside(tt.grad.numpy(), bwd)}")

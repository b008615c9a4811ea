"""NOTES 71: how close LeNet's float64 SGD trajectory (tests/nn/test_lenet_torch.py's model, optimizer and batches)
comes to a kink (a max-pool window's top two values, a ReLU's input at 0), in units of float32's rounding of the sum
behind each value (u * sum |w x|), per data seed. Below about 7 units gcc, clang and PyTorch float32 may land on
different sides of it and part for good. Needs PyTorch (the optional peer).

  python notes/notes71_kinks.py [seed ...]     (default: 1 to 11)
"""
import sys
from pathlib import Path
import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "nn"))
import torch   # noqa: E402
import test_lenet_torch as T   # noqa: E402


def margins(seed: int) -> list[float]:
  """The kink margin of each of the 20 steps' forwards, along the float64 trajectory."""
  net = T.torch_lenet(T.lenet().state_dict()).double()
  opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
  out = []
  for x, y in T.batches(seed):
    x = torch.tensor(x, dtype=torch.float64)
    with torch.no_grad(): out.append(T.kink_margin(net, x))
    opt.zero_grad()
    torch.nn.functional.cross_entropy(net(x), torch.tensor(y)).backward()
    opt.step()
  return out


if __name__ == "__main__":
  for seed in [int(s) for s in sys.argv[1:]] or range(1, 12):
    m = margins(seed)
    print(f"seed {seed:2d}: smallest margin {min(m):7.2f} roundings, at step {int(np.argmin(m))}")

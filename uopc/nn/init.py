"""PyTorch's torch.nn.init: fill a Tensor in place (under no_grad, as PyTorch's do), from Tensor's seeded generator
(Tensor.manual_seed resets it).

  init.kaiming_uniform_(conv.weight, a=math.sqrt(5))      # what nn.Conv2d and nn.Linear do by default
  init.zeros_(conv.bias)

fan_in = weight.shape[1] * prod(kernel), fan_out = weight.shape[0] * prod(kernel), as PyTorch computes them.
"""
from __future__ import annotations
import math
from uopc.grad_mode import no_grad
from uopc.tensor import Tensor

GAINS = {"linear": 1.0, "conv1d": 1.0, "conv2d": 1.0, "conv3d": 1.0, "conv_transpose1d": 1.0,
         "conv_transpose2d": 1.0, "conv_transpose3d": 1.0, "sigmoid": 1.0, "tanh": 5 / 3, "relu": math.sqrt(2.0),
         "selu": 3 / 4}


def calculate_gain(nonlinearity: str, param=None) -> float:
  if nonlinearity == "leaky_relu":
    slope = 0.01 if param is None else param
    return math.sqrt(2.0 / (1 + slope ** 2))
  if nonlinearity not in GAINS: raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")
  return GAINS[nonlinearity]


def _fans(t: Tensor) -> tuple[int, int]:
  if t.ndim < 2:
    raise ValueError(f"fan in and fan out need a tensor of 2 or more dimensions, got shape {t.shape}")
  field = math.prod(t.shape[2:])
  return t.shape[1] * field, t.shape[0] * field


def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
  with no_grad(): return t.uniform_(a, b)
def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
  with no_grad(): return t.normal_(mean, std)
def constant_(t: Tensor, val: float) -> Tensor:
  with no_grad(): return t.fill_(val)
def zeros_(t: Tensor) -> Tensor: return constant_(t, 0.0)
def ones_(t: Tensor) -> Tensor: return constant_(t, 1.0)


def _kaiming_std(t: Tensor, a: float, mode: str, nonlinearity: str) -> float:
  if mode not in ("fan_in", "fan_out"): raise ValueError(f"kaiming: mode must be 'fan_in' or 'fan_out', got {mode!r}")
  fan_in, fan_out = _fans(t)
  return calculate_gain(nonlinearity, a) / math.sqrt(fan_in if mode == "fan_in" else fan_out)


def kaiming_uniform_(t: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
  bound = math.sqrt(3.0) * _kaiming_std(t, a, mode, nonlinearity)
  return uniform_(t, -bound, bound)


def kaiming_normal_(t: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
  return normal_(t, 0.0, _kaiming_std(t, a, mode, nonlinearity))


def xavier_uniform_(t: Tensor, gain: float = 1.0) -> Tensor:
  fan_in, fan_out = _fans(t)
  bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
  return uniform_(t, -bound, bound)


def xavier_normal_(t: Tensor, gain: float = 1.0) -> Tensor:
  fan_in, fan_out = _fans(t)
  return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))

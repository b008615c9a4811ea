"""Convolution layers in PyTorch's shapes: Conv1d, Conv2d, ConvTranspose2d (Tensor.conv2d and conv_transpose2d).

  conv = Conv2d(1, 6, 5, padding=2, seed=0)     # weight (6, 1, 5, 5), bias (6,)
  y = conv(x)                                   # (N, 1, 28, 28) -> (N, 6, 28, 28)

PyTorch's initialisation (kaiming_uniform_ with a = sqrt(5)): weight and bias uniform in +-1/sqrt(fan_in), fan_in
the inputs one output sums over (in_channels / groups * prod(kernel)).
"""
from __future__ import annotations
import math
import numpy as np
from uopc.dtype import DType, dtypes
from uopc.nn.layers import Module, parameter, _rng
from uopc.tensor import Tensor


def sizes(v, n: int, what: str, low: int) -> tuple[int, ...]:
  """An int or n ints, each >= low: a float or a bool is a TypeError naming `what`, as PyTorch's."""
  t = (v,) * n if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else v
  if not isinstance(t, (tuple, list)) or len(t) != n:
    raise TypeError(f"{what} must be an int or a tuple of {n} ints, got {v!r} ({type(v).__name__})")
  for a in t:
    if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)):
      raise TypeError(f"{what} must be an int or a tuple of {n} ints, got {v!r} ({type(a).__name__} inside)")
    if a < low: raise ValueError(f"{what} must be >= {low}, got {v!r}")
  return tuple(int(a) for a in t)


class _ConvNd(Module):
  n: int = 2
  transposed: bool = False

  def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
               groups: int = 1, bias: bool = True, output_padding=0, seed=None, dtype: DType = dtypes.f32):
    name, n = type(self).__name__, self.n
    in_channels, out_channels = sizes(in_channels, 1, f"{name}: in_channels", 1)[0], \
      sizes(out_channels, 1, f"{name}: out_channels", 1)[0]
    groups = sizes(groups, 1, f"{name}: groups", 1)[0]
    if in_channels % groups or out_channels % groups:
      raise ValueError(f"{name}: in_channels {in_channels} and out_channels {out_channels} must be divisible by "
                       f"groups {groups}")
    self.kernel_size = sizes(kernel_size, n, f"{name}: kernel_size", 1)
    self.stride, self.dilation = sizes(stride, n, f"{name}: stride", 1), sizes(dilation, n, f"{name}: dilation", 1)
    self.padding = padding if isinstance(padding, str) else sizes(padding, n, f"{name}: padding", 0) \
      if not (isinstance(padding, (tuple, list)) and len(padding) == 2 * n) else tuple(padding)
    self.output_padding = sizes(output_padding, n, f"{name}: output_padding", 0)
    if self.transposed and any(o >= max(s, d) for o, s, d in zip(self.output_padding, self.stride, self.dilation)):
      raise ValueError(f"{name}: output_padding {self.output_padding} must be smaller than stride {self.stride} or "
                       f"dilation {self.dilation}")
    self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
    shape = (in_channels, out_channels // groups) if self.transposed else (out_channels, in_channels // groups)
    fan_in = shape[1] * math.prod(self.kernel_size)
    rng, bound = _rng(seed), 1 / math.sqrt(fan_in)
    self.weight = parameter(rng.uniform(-bound, bound, (*shape, *self.kernel_size)), dtype)
    self.bias = parameter(rng.uniform(-bound, bound, out_channels), dtype) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim != self.n + 2 or x.shape[1] != self.in_channels:
      raise ValueError(f"{type(self).__name__}: expected input (N, {self.in_channels}, *{self.n} spatial axes), got "
                       f"shape {x.shape}")
    if self.transposed:
      return x.conv_transpose2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding,
                                self.output_padding)
    return x.conv2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding)


class Conv1d(_ConvNd):
  """PyTorch's nn.Conv1d: (N, C_in, L) -> (N, C_out, L_out)."""
  n = 1


class Conv2d(_ConvNd):
  """PyTorch's nn.Conv2d: (N, C_in, H, W) -> (N, C_out, H_out, W_out)."""
  n = 2


class ConvTranspose2d(_ConvNd):
  """PyTorch's nn.ConvTranspose2d: weight (C_in, C_out / groups, kh, kw); output_padding < stride or dilation."""
  n, transposed = 2, True

  def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
               groups: int = 1, bias: bool = True, dilation=1, seed=None, dtype: DType = dtypes.f32):
    super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, output_padding,
                     seed, dtype)


__all__ = ["Conv1d", "Conv2d", "ConvTranspose2d", "sizes"]

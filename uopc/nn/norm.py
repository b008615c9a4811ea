"""Batch normalization in PyTorch's shapes: BatchNorm1d ((N, C) or (N, C, L)) and BatchNorm2d ((N, C, H, W)).

  bn = BatchNorm2d(6)          # weight (6,) ones, bias (6,) zeros; buffers running_mean (6,) zeros, running_var ones
  y = bn(x)                    # train(): the batch's statistics, and the running ones updated; eval(): the running ones

PyTorch's rule: y = (x - mean) / sqrt(var + eps) * weight + bias, var the biased variance of the batch; the running
variance is updated with the unbiased one: r <- (1 - momentum) r + momentum * batch (momentum=None: the cumulative
average over num_batches_tracked). The running statistics are buffers: in state_dict, never in parameters().
"""
from __future__ import annotations
import numpy as np
from uopc.dtype import DType, dtypes
from uopc.grad_mode import no_grad
from uopc.nn.layers import Module, buffer, parameter
from uopc.tensor import Tensor


class _BatchNorm(Module):
  ndims: tuple[int, ...] = (4,)

  def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
               track_running_stats: bool = True, dtype: DType = dtypes.f32):
    if isinstance(num_features, bool) or not isinstance(num_features, (int, np.integer)) or num_features < 1:
      raise ValueError(f"{type(self).__name__}: num_features must be a positive int, got {num_features!r}")
    if momentum is not None and not 0 <= momentum <= 1:
      raise ValueError(f"{type(self).__name__}: momentum must be in [0, 1] or None, got {momentum!r}")
    self.num_features, self.eps, self.momentum = int(num_features), eps, momentum
    self.weight = parameter(np.ones(num_features), dtype) if affine else None
    self.bias = parameter(np.zeros(num_features), dtype) if affine else None
    self.track_running_stats = track_running_stats
    if track_running_stats:
      self.running_mean = buffer(np.zeros(num_features), dtype)
      self.running_var = buffer(np.ones(num_features), dtype)
      self.num_batches_tracked = buffer(np.zeros(()), dtypes.int64)
    else: self.running_mean = self.running_var = self.num_batches_tracked = None

  def __call__(self, x: Tensor) -> Tensor:
    name = type(self).__name__
    if x.ndim not in self.ndims or x.shape[1] != self.num_features:
      raise ValueError(f"{name}: expected {' or '.join(f'{n}-d' for n in self.ndims)} input with "
                       f"{self.num_features} channels on axis 1, got shape {x.shape}")
    axes = (0, *range(2, x.ndim))
    shape = (1, -1, *[1] * (x.ndim - 2))
    if self.training or self.running_mean is None:
      count = x.numel() // self.num_features
      if count < 2 and self.training: raise ValueError(f"{name}: expected more than 1 value per channel when "
                                                       f"training, got input of shape {x.shape}")
      mean, var = x.mean(axes), x.var(axes, correction=0)
      if self.training and self.running_mean is not None: self._track(mean, var, count)
    else: mean, var = self.running_mean, self.running_var
    y = (x - mean.reshape(shape)) * (var.reshape(shape) + self.eps).rsqrt()
    if self.weight is not None: y = y * self.weight.reshape(shape) + self.bias.reshape(shape)
    return y

  def _track(self, mean: Tensor, var: Tensor, count: int) -> None:
    """The running statistics, written into their own buffers now (a captured step replays the write)."""
    with no_grad():
      # momentum=None: the cumulative average, 1 / (batches so far + 1) computed in the kernel from the buffer, so a
      # captured step (TinyJit) replays it with each step's count (a Python number here would be the capture's)
      m = self.momentum if self.momentum is not None else 1 / (self.num_batches_tracked.cast(mean.dtype) + 1)
      self.num_batches_tracked.assign(self.num_batches_tracked + 1)
      unbiased = var.detach() * (count / (count - 1))
      self.running_mean.assign(self.running_mean * (1 - m) + mean.detach() * m)
      self.running_var.assign(self.running_var * (1 - m) + unbiased * m)
      Tensor.realize(self.running_mean, self.running_var, self.num_batches_tracked)


class BatchNorm1d(_BatchNorm):
  """PyTorch's nn.BatchNorm1d: (N, C) or (N, C, L), statistics over N (and L)."""
  ndims = (2, 3)


class BatchNorm2d(_BatchNorm):
  """PyTorch's nn.BatchNorm2d: (N, C, H, W), statistics over N, H and W."""
  ndims = (4,)

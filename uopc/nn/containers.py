"""Modules without parameters, in PyTorch's shapes: Sequential, Flatten, Identity, the pools and the activations.

  net = Sequential(Conv2d(1, 6, 5), ReLU(), MaxPool2d(2), Flatten(), Linear(864, 10))
  net(x)                                        # each module applied in turn; state_dict keys "0.weight", "4.bias"

Each is a thin wrapper over the Tensor method of the same name (relu, max_pool2d, flatten, ...), holding its
arguments, so a model reads as PyTorch's does.
"""
from __future__ import annotations
from uopc.nn.conv import sizes
from uopc.nn.layers import Module
from uopc.tensor import Tensor


class Sequential(Module):
  """The modules (or callables) applied in order; indexed, iterated and named "0", "1", ... as PyTorch's."""
  def __init__(self, *layers):
    for k, m in enumerate(layers):
      if not callable(m): raise TypeError(f"Sequential: item {k} ({type(m).__name__}) is not a module or callable")
      setattr(self, str(k), m)

  def _layers(self) -> list: return [v for k, v in vars(self).items() if k.isdigit()]
  def __len__(self) -> int: return len(self._layers())
  def __iter__(self): return iter(self._layers())
  def __getitem__(self, k): return Sequential(*self._layers()[k]) if isinstance(k, slice) else self._layers()[k]

  def __call__(self, x: Tensor) -> Tensor:
    for m in self._layers(): x = m(x)
    return x


class Flatten(Module):
  """PyTorch's nn.Flatten: axes start_dim..end_dim into one (by default all but the batch axis)."""
  def __init__(self, start_dim: int = 1, end_dim: int = -1): self.start_dim, self.end_dim = start_dim, end_dim
  def __call__(self, x: Tensor) -> Tensor: return x.flatten(self.start_dim, self.end_dim)


class Identity(Module):
  def __init__(self, *args, **kwargs): pass
  def __call__(self, x: Tensor) -> Tensor: return x


# ---- pools ----
class MaxPool2d(Module):
  """PyTorch's nn.MaxPool2d (stride defaults to kernel_size)."""
  def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False,
               ceil_mode: bool = False):
    self.kernel_size = sizes(kernel_size, 2, "MaxPool2d: kernel_size", 1)
    self.stride = None if stride is None else sizes(stride, 2, "MaxPool2d: stride", 1)
    self.padding = sizes(padding, 2, "MaxPool2d: padding", 0)
    self.dilation = sizes(dilation, 2, "MaxPool2d: dilation", 1)
    self.return_indices, self.ceil_mode = return_indices, ceil_mode
  def __call__(self, x: Tensor):
    return x.max_pool2d(self.kernel_size, self.stride, self.dilation, self.padding, self.ceil_mode, self.return_indices)


class AvgPool2d(Module):
  """PyTorch's nn.AvgPool2d (stride defaults to kernel_size)."""
  def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True):
    self.kernel_size = sizes(kernel_size, 2, "AvgPool2d: kernel_size", 1)
    self.stride = None if stride is None else sizes(stride, 2, "AvgPool2d: stride", 1)
    self.padding = sizes(padding, 2, "AvgPool2d: padding", 0)
    self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad
  def __call__(self, x: Tensor) -> Tensor:
    return x.avg_pool2d(self.kernel_size, self.stride, 1, self.padding, self.ceil_mode, self.count_include_pad)


class AdaptiveAvgPool2d(Module):
  """PyTorch's nn.AdaptiveAvgPool2d: output (..., *output_size) (None in it keeps that axis)."""
  def __init__(self, output_size): self.output_size = output_size
  def __call__(self, x: Tensor) -> Tensor: return x.adaptive_avg_pool2d(self.output_size)


# ---- losses: PyTorch's criterion modules, loss = criterion(output, target) ----
class CrossEntropyLoss(Module):
  """PyTorch's nn.CrossEntropyLoss: logits and class indices (or probabilities), Tensor.cross_entropy."""
  def __init__(self, weight=None, *, ignore_index: int | None = None, reduction: str = "mean",
               label_smoothing: float = 0.0):
    self.weight, self.ignore_index = weight, ignore_index
    self.reduction, self.label_smoothing = reduction, label_smoothing
  def __call__(self, logits: Tensor, target) -> Tensor:
    return logits.cross_entropy(target, self.reduction, self.label_smoothing, self.weight, self.ignore_index)


class NLLLoss(Module):
  """PyTorch's nn.NLLLoss: log-probabilities and class indices, Tensor.nll_loss."""
  def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean"):
    self.weight, self.ignore_index, self.reduction = weight, ignore_index, reduction
  def __call__(self, logp: Tensor, target) -> Tensor:
    return logp.nll_loss(target, self.weight, self.ignore_index, self.reduction)


class MSELoss(Module):
  """PyTorch's nn.MSELoss: the squared differences, averaged ("mean"), summed ("sum") or kept ("none")."""
  def __init__(self, reduction: str = "mean"):
    if reduction not in ("mean", "sum", "none"):
      raise ValueError(f"MSELoss: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    self.reduction = reduction
  def __call__(self, output: Tensor, target) -> Tensor:
    sq = (output - target).square()
    return sq.mean() if self.reduction == "mean" else sq.sum() if self.reduction == "sum" else sq


# ---- activations: the Tensor method, named as PyTorch's module ----
class _Activation(Module):
  method, keywords = "", ()
  def __init__(self, *args, **kwargs):
    names = self.keywords
    if len(args) > len(names): raise TypeError(f"{type(self).__name__} takes at most {len(names)} arguments")
    unknown = set(kwargs) - set(names)
    if unknown: raise TypeError(f"{type(self).__name__}: unexpected arguments {sorted(unknown)}")
    self.kwargs = {**dict(zip(names, args)), **kwargs}
  def __call__(self, x: Tensor) -> Tensor: return getattr(x, self.method)(**self._arguments())
  def _arguments(self) -> dict: return self.kwargs


def _activation(name: str, method: str, keywords: tuple = (), rename: dict | None = None, defaults: dict | None = None):
  """A module class calling Tensor.method; rename maps PyTorch's argument names to the method's."""
  def arguments(self) -> dict:
    given = {**(defaults or {}), **self.kwargs}
    given.pop("inplace", None)   # PyTorch's memory saving: the result is the same
    return {(rename or {}).get(k, k): v for k, v in given.items()}
  return type(name, (_Activation,), {"method": method, "keywords": keywords, "_arguments": arguments,
                                     "__doc__": f"PyTorch's nn.{name}: Tensor.{method}."})


ReLU = _activation("ReLU", "relu", ("inplace",))
ReLU6 = _activation("ReLU6", "relu6", ("inplace",))
Sigmoid = _activation("Sigmoid", "sigmoid")
Tanh = _activation("Tanh", "tanh")
SiLU = _activation("SiLU", "silu", ("inplace",))
Mish = _activation("Mish", "mish", ("inplace",))
GELU = _activation("GELU", "gelu", ("approximate",), defaults={"approximate": "none"})
LeakyReLU = _activation("LeakyReLU", "leaky_relu", ("negative_slope", "inplace"), {"negative_slope": "neg_slope"})
ELU = _activation("ELU", "elu", ("alpha", "inplace"))
Softplus = _activation("Softplus", "softplus", ("beta",))
Hardswish = _activation("Hardswish", "hardswish", ("inplace",))
Hardsigmoid = _activation("Hardsigmoid", "hardsigmoid", ("inplace",))
Softmax = _activation("Softmax", "softmax", ("dim",), {"dim": "axis"}, {"dim": -1})
LogSoftmax = _activation("LogSoftmax", "log_softmax", ("dim",), {"dim": "axis"}, {"dim": -1})

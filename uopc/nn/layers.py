"""Layers with parameters, in the shapes PyTorch users know: Module, Linear, Embedding, LayerNorm, Dropout.

  lin = Linear(64, 256, seed=0)                       # weight (256, 64), bias (256,): y = x @ weight.T + bias
  y = lin(x)                                          # (B, T, 64) -> (B, T, 256), lazy like every Tensor op
  lin.parameters()                                    # found from the attributes, recursively (lists too)
  lin.save("lin.npz"); lin.load("lin.npz")            # a state dict: {"weight": array, "bias": array}

A parameter is an ordinary Tensor with requires_grad=True whose graph is one BUFFER; an optimizer's step replaces
that buffer by the updated one (uopc.optim), so the Tensor object the model holds stays the same.
"""
from __future__ import annotations
import math
import numpy as np
from uopc.autograd import Leaves, parameter_ids, requires_grad_ids
from uopc.dtype import DType, dtypes, np_dtype
from uopc.rng import draw_seed, uniform
from uopc.tensor import Tensor
from uopc.errors import UsageError


def _rng(seed) -> np.random.Generator:
  return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(0 if seed is None else seed)


def parameter(a: np.ndarray, dtype: DType = dtypes.f32) -> Tensor:
  """A leaf Tensor holding a copy of a, that backward() fills .grad on."""
  return Tensor(np.asarray(a, np_dtype(dtype)), requires_grad=True)


_buffers = Leaves()   # the tensors buffer() made, held weakly


def buffer(a: np.ndarray, dtype: DType = dtypes.f32) -> Tensor:
  """A Tensor that is part of a module's state but takes no gradient (PyTorch's register_buffer: BatchNorm's running
  statistics): state_dict saves it and load_state_dict restores it; parameters() never lists it."""
  t = Tensor(np.asarray(a, np_dtype(dtype)))
  _buffers.add(t)
  return t


def _walk(obj, prefix: str, seen: set[int], out: dict[str, Tensor], wanted: set[int]) -> None:
  if isinstance(obj, Tensor):
    if id(obj) in wanted and id(obj) not in seen: seen.add(id(obj)); out[prefix] = obj   # a tied weight once
  elif isinstance(obj, (list, tuple)):
    for k, x in enumerate(obj): _walk(x, f"{prefix}.{k}" if prefix else str(k), seen, out, wanted)
  elif isinstance(obj, dict):
    for k, x in obj.items(): _walk(x, f"{prefix}.{k}" if prefix else str(k), seen, out, wanted)
  elif isinstance(obj, Module):
    for k, x in vars(obj).items():
      if not k.startswith("_"): _walk(x, f"{prefix}.{k}" if prefix else k, seen, out, wanted)


def _named(obj, wanted: set[int]) -> dict[str, Tensor]:
  out: dict[str, Tensor] = {}
  _walk(obj, "", set(), out, wanted)
  return out


def named_parameters(obj) -> dict[str, Tensor]:
  """{"blocks.0.attn.qkv.weight": Tensor, ...}: every parameter reachable through obj's public attributes (Modules,
  lists, tuples, dicts), in attribute order; a Tensor reached twice (a tied weight) keeps its first name. A
  parameter is a Tensor ever marked requires_grad: a frozen one (requires_grad=False) is still listed, as PyTorch
  lists it."""
  return _named(obj, parameter_ids())


def named_buffers(obj) -> dict[str, Tensor]:
  """{"bn.running_mean": Tensor, ...}: the Tensors made by buffer() reachable through obj, in attribute order."""
  return _named(obj, {id(t) for t in _buffers})


def save_npz(state: dict[str, np.ndarray], path) -> None:
  """Write the arrays to exactly `path` (np.savez given a name appends .npz to one that lacks it; given a file, not)."""
  with open(path, "wb") as f: np.savez(f, **state)


def load_npz(path) -> dict[str, np.ndarray]:
  with np.load(path) as f: return {k: f[k] for k in f.files}


class Module:
  """A container of parameters and submodules. Subclasses set attributes in __init__ and define __call__, or
  forward as in PyTorch (model(x) calls it)."""
  training: bool = True

  def __call__(self, *args, **kwargs): return self.forward(*args, **kwargs)
  def forward(self, *args, **kwargs):
    raise NotImplementedError(f"{type(self).__name__}: define forward(self, ...) (or __call__) to call the module")
  def zero_grad(self) -> None:
    for p in self.parameters(): p.grad = None

  def named_parameters(self) -> dict[str, Tensor]: return named_parameters(self)
  def named_buffers(self) -> dict[str, Tensor]: return named_buffers(self)
  def parameters(self) -> list[Tensor]:
    """The parameters an optimizer should train: frozen ones (requires_grad=False) are left out, because uopc's
    optimizers mark every tensor they are given requires_grad (PyTorch lists them and its optimizers skip a None
    .grad); named_parameters() and state_dict() keep them."""
    marked = requires_grad_ids()
    return [p for p in named_parameters(self).values() if id(p) in marked]
  def num_parameters(self) -> int: return sum(p.numel() for p in named_parameters(self).values())

  def modules(self) -> list[Module]:
    found: list[Module] = []
    def visit(o):
      if isinstance(o, Module) and all(o is not m for m in found):
        found.append(o)
        for k, x in vars(o).items():
          if not k.startswith("_"): visit(x)
      elif isinstance(o, (list, tuple)):
        for x in o: visit(x)
    visit(self)
    return found

  def train(self, mode: bool = True) -> Module:
    for m in self.modules(): m.training = mode
    return self
  def eval(self) -> Module: return self.train(False)

  def _state_tensors(self) -> dict[str, Tensor]:
    return _named(self, parameter_ids() | {id(t) for t in _buffers})

  def state_dict(self) -> dict[str, np.ndarray]:
    """name -> a copy of the data of every parameter, frozen or not, and every buffer (realized first if still lazy),
    in attribute order: PyTorch's rule, so a checkpoint of a model with a frozen layer loads into a fresh one."""
    return {k: p.numpy().copy() for k, p in self._state_tensors().items()}

  def load_state_dict(self, state: dict[str, np.ndarray], strict: bool = True) -> None:
    """Replace the data of each parameter and buffer by state[name]. The array's dtype is kept: loading float64 arrays
    makes a float64 model (the gradient checks do that). strict: the names must match exactly."""
    params = self._state_tensors()
    missing, unexpected = sorted(set(params) - set(state)), sorted(set(state) - set(params))
    if strict and (missing or unexpected):
      raise KeyError(f"load_state_dict: missing {missing}, unexpected {unexpected}")
    for k, p in params.items():
      if k not in state: continue
      a = np.asarray(state[k])
      if a.shape != p.shape: raise UsageError(f"load_state_dict: {k} has shape {a.shape}, the model's is {p.shape}")
      if np_dtype(p.dtype) == a.dtype: np.copyto(p._data(), a.reshape(-1))   # into its own buffer: a captured step
      else: p.uop, p.lazy = Tensor(a).uop, None                               # (uopc.jit) sees the new weights
      p.grad = None

  def save(self, path) -> None: save_npz(self.state_dict(), path)
  def load(self, path) -> None: self.load_state_dict(load_npz(path))


class Linear(Module):
  """y = x @ weight.T + bias; weight (out, in). PyTorch's initialisation: uniform in +-1/sqrt(in), or normal with
  the given std (GPT-2 uses 0.02)."""
  def __init__(self, in_features: int, out_features: int, bias: bool = True, seed=None, std: float | None = None,
               dtype: DType = dtypes.f32):
    rng, bound = _rng(seed), 1 / math.sqrt(in_features)
    w = rng.normal(0, std, (out_features, in_features)) if std else rng.uniform(-bound, bound,
                                                                               (out_features, in_features))
    self.weight = parameter(w, dtype)                                                     # (out, in)
    self.bias = parameter(np.zeros(out_features) if std else rng.uniform(-bound, bound, out_features),
                          dtype) if bias else None                                         # (out,)

  def __call__(self, x: Tensor) -> Tensor:
    y = x @ self.weight.T                                                                 # (..., in) -> (..., out)
    return y + self.bias if self.bias is not None else y


class Embedding(Module):
  """out[..., :] = weight[idx[...], :]; weight (num, dim), normal(0, std). The lookup is integer-Tensor indexing,
  which uopc computes as a one-hot select (idx == arange(num)).where(weight, 0) summed over num, as tinygrad does;
  its gradient scatters back through the same select."""
  def __init__(self, num_embeddings: int, embedding_dim: int, seed=None, std: float = 1.0, dtype: DType = dtypes.f32):
    self.weight = parameter(_rng(seed).normal(0, std, (num_embeddings, embedding_dim)), dtype)   # (num, dim)

  def __call__(self, idx) -> Tensor:
    idx = idx if isinstance(idx, Tensor) else Tensor(np.asarray(idx))
    if not idx.dtype.is_int: raise TypeError(f"Embedding: indices must be integers, got {idx.dtype}")
    return self.weight[idx]                                                               # (..., dim)


class LayerNorm(Module):
  """PyTorch's nn.LayerNorm: (x - mean) / sqrt(var + eps) * weight + bias over the last len(normalized_shape) axes
  (biased variance, eps inside the root). normalized_shape: an int (the last axis) or a tuple (the last axes)."""
  def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
               dtype: DType = dtypes.f32):
    shape = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else tuple(normalized_shape)
    if not shape or any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1 for n in shape):
      raise UsageError(f"LayerNorm: normalized_shape must be positive ints, got {normalized_shape!r}")
    self.normalized_shape, self.eps = tuple(int(n) for n in shape), eps
    self.weight = parameter(np.ones(shape), dtype) if elementwise_affine else None
    self.bias = parameter(np.zeros(shape), dtype) if elementwise_affine and bias else None

  def __call__(self, x: Tensor) -> Tensor:
    k = len(self.normalized_shape)
    if x.shape[x.ndim - k:] != self.normalized_shape or x.ndim < k:
      raise UsageError(f"LayerNorm{self.normalized_shape}: the last axes of {x.shape} must be {self.normalized_shape}")
    y = x.layernorm(tuple(range(-k, 0)) if k > 1 else -1, self.eps)                   # (..., *normalized_shape)
    if self.weight is not None: y = y * self.weight
    return y + self.bias if self.bias is not None else y


class LayerNorm2d(LayerNorm):
  """tinygrad's: LayerNorm over the channel axis of (N, C, H, W) images, at every pixel."""
  def __init__(self, channels: int, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
               dtype: DType = dtypes.f32):
    super().__init__(channels, eps, elementwise_affine, bias, dtype)

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim != 4: raise UsageError(f"LayerNorm2d takes (N, C, H, W) images, got shape {x.shape}")
    return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class Dropout(Module):
  """Zeroes each element with probability p while training and scales the rest by 1/(1-p); the identity in eval().
  The mask is computed in the kernel from a seed (uopc.rng.uniform): each call draws the seed from the module's own
  generator into a one-number buffer, and a captured step (uopc.jit) draws the next seed at every replay, so every
  step has a fresh mask and the same seed reproduces a run."""
  def __init__(self, p: float = 0.5, seed: int = 0):
    if not 0 <= p < 1: raise UsageError(f"Dropout: p must be in [0, 1), got {p}")
    self.p, self._gen = p, np.random.default_rng(seed)

  def __call__(self, x: Tensor) -> Tensor:
    if not self.training or self.p == 0: return x
    keep = uniform(x.shape, draw_seed(self._gen)) >= self.p                              # bool, x's shape
    return keep.where(x * (1 / (1 - self.p)), 0.0)

"""Tensor methods over sliding windows: convolution (1-D, 2-D, 3-D, groups, stride, dilation, padding), transposed
convolution, max and average pooling, and interpolation, as tinygrad builds them.

No new kernel kind: a window is a view. `_pool` turns (..., i) into (..., o, k), element [o, k] being x[o*s + k*d],
with movement ops only: the axis repeated (an EXPAND and a RESHAPE), cut to k rows of i + d elements each (row k then
starts d further along the repeated axis), then every s-th column kept (a RESHAPE and a SHRINK). The index algebra
(uopc.symbolic) folds the repeat's `% i` away, so the kernel reads x[o*s + k*d] directly. A convolution is that view
times the weights, summed over (channels, window): one REDUCE, which the optimizer fuses and vectorizes like a matmul.
A stride-1 convolution's two gradients may be convolutions too (_conv_grads, under VectorOpt), each one REDUCE over a
padded buffer.
"""
from __future__ import annotations
import itertools, math
from typing import Sequence
import numpy as np
from uopc.dtype import dtypes
from uopc.helpers import prod
from uopc.mixin.elementwise import Self
from uopc.mixin.indexing import IndexingMixin
from uopc.errors import UsageError, UsageTypeError


def _tuple(v, n: int, what: str, low: int | None = None) -> tuple[int, ...]:
  """An int (the same for every spatial axis) or one per axis, each >= low if given. A float is a TypeError that
  names the argument (PyTorch's), not Python's "'float' object is not iterable"."""
  t = (v,) * n if isinstance(v, (int, np.integer)) else tuple(v) if isinstance(v, (tuple, list)) else None
  if t is None or not all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in t):
    raise UsageTypeError(f"{what} must be an int or a tuple of {n} ints, got {v!r} ({type(v).__name__})")
  if len(t) != n: raise UsageError(f"{what} must be an int or {n} ints, got {v!r}")
  if low is not None and any(a < low for a in t): raise UsageError(f"{what} must be >= {low}, got {v!r}")
  return tuple(int(a) for a in t)


def _kernel(kernel_size, n: int) -> tuple[int, ...]:
  """A pool's kernel_size: an int (n axes) or a tuple (its length is the number of axes), each >= 1."""
  m = len(kernel_size) if isinstance(kernel_size, (tuple, list)) else n
  return _tuple(kernel_size, m, "kernel_size", 1)


def _ceil(a: int, b: int) -> int: return -(-a // b)


def _max_pool_grad(out, s, g):
  """PyTorch's rule: a window's whole gradient goes to the index max_pool returns, its first maximum (a nan counts as
  the maximum); tied maxima do not share it, as the max reduction's rule would have them (uopc.autograd)."""
  win = s[0]
  n = win.ndim - out.ndim
  flat = win.reshape(*out.shape, -1)                                   # (..., *o, k1*k2)
  first = flat.argmax(-1).unsqueeze(-1)                                # (..., *o, 1)
  at_first = type(win).arange(flat.shape[-1]).eq(first)               # (..., *o, k1*k2)
  return (at_first.where(g.unsqueeze(-1), 0.0).reshape(*out.shape, *win.shape[-n:]),)


MAX_FOLD_TERMS = 64   # a window of more elements keeps the view's own gradient (a sum of that many shifted copies)


def _fold(g, i_: Sequence[int], o_: Sequence[int], k_: Sequence[int]):
  """The gradient of a stride-1 window view (..., *o, *k) -> (..., *i): x[o + k] received g[o, k] for every k, so
  the input's gradient is the sum over the window's positions k of g[..., k] shifted by k (padded by k before and
  i - o - k after). Each term reads g directly; the view's own gradient (the transpose of the repeat in _pool) is
  the same sum, indexed with a division and a modulo per element."""
  n, lead = len(k_), g.shape[:g.ndim - 2 * len(k_)]
  noop = [None] * len(lead)
  total = None
  for ks in itertools.product(*[range(k) for k in k_]):
    term = g.shrink(noop + [None] * n + [(k, k + 1) for k in ks]).reshape(*lead, *o_)   # g[..., *o, *ks]
    term = term.pad(noop + [(k, i - o - k) for k, i, o in zip(ks, i_, o_)])             # at x[o + ks]
    total = term if total is None else total + term
  return total


# a stride-1 convolution's gradients as convolutions (_conv_grads) where the optimizer the graph is built under
# (Tensor.opt) says `conv_gradients`: VectorOpt, whose lanes make the full convolution the cheaper form (the default
# lowering, scalar, runs it at half the speed of autograd's). False: autograd's always, through the view
CONV_GRADS_AS_CONVS = True


def _conv_grads(x, weight, g, pads: Sequence[tuple[int, int]]):
  """The gradients of a stride-1, undilated, ungrouped convolution (x (N, C_in, *i), weight (C_out, C_in, *k), g
  (N, C_out, *o)) as two convolutions, each a REDUCE whose windows read one padded buffer (PyTorch's backward):
    dx  g padded by k - 1 less the forward's padding, convolved with the kernel flipped and its channels swapped
        (conv_transpose): dx[i] = sum_k g[i + pad - k] w[k]. Autograd's own would sum over C_out into a (N, C_in, *o,
        *k) tensor and fold its prod(k) shifted copies back, a padding check for each
    dw  the padded input's windows times g, summed over the batch and the output positions: autograd's sum, the
        product and its order of terms unchanged."""
  k_, n = weight.shape[2:], weight.ndim - 2
  spatial = tuple(range(2, 2 + n))
  wt = weight.transpose(0, 1).flip(spatial)                                           # (C_in, C_out, *k)
  dx = g.pad([None, None, *[(k - 1 - a, k - 1 - b) for k, (a, b) in zip(k_, pads)]]).conv2d(wt)
  win = x.pad([None, None, *pads])._pool(k_)                                          # (N, C_in, *o, *k)
  (bs, cout), o_ = g.shape[:2], g.shape[2:]
  terms = g.reshape(bs, cout, 1, *o_, *[1] * n) * win.reshape(bs, 1, x.shape[1], *o_, *k_)   # (N, C_out, C_in, *o, *k)
  return dx, terms.sum((0, *range(3, 3 + n)))                                         # (C_out, C_in, *k)


class WindowMixin(IndexingMixin):
  def _pool(self, k_: Sequence[int], stride=1, dilation=1) -> Self:
    """(..., *i) -> (..., *o, *k): the windows of the last len(k_) axes, [*o, *k] = x[o*s + k*d] per axis."""
    n = len(k_)
    if self.ndim < n: raise UsageError(f"a window of {n} axes over a tensor of shape {self.shape}")
    s_, d_ = _tuple(stride, n, "stride"), _tuple(dilation, n, "dilation")
    if any(s < 1 for s in s_) or any(d < 1 for d in d_): raise UsageError(f"stride {s_} and dilation {d_} must be >= 1")
    noop, i_ = [None] * (self.ndim - n), self.shape[-n:]
    if any(d * (k - 1) + 1 > i for k, d, i in zip(k_, d_, i_)):
      raise UsageError(f"a window of {tuple(k_)} (dilation {d_}) is larger than the input's {i_}")
    o_ = [_ceil(i - d * (k - 1), s) for i, d, k, s in zip(i_, d_, k_, s_)]
    if any(k > s for k, s in zip(k_, s_)) or any(d != 1 for d in d_):   # overlapping windows: the repeat
      f_ = [1 + int(o * s > i - d * (k - 1)) for o, s, i, d, k in zip(o_, s_, i_, d_, k_)]   # room to cut the stride
      x = self.repeat([1] * len(noop) + [_ceil(k * (i * f + d), i) for k, i, d, f in zip(k_, i_, d_, f_)])
      x = x.shrink(noop + [(0, k * (i * f + d)) for k, i, d, f in zip(k_, i_, d_, f_)])
      x = x.reshape(*[s for s in self.shape[:-n]], *[a for k, i, d, f in zip(k_, i_, d_, f_) for a in (k, i * f + d)])
      x = x.shrink(noop + [p for k, o, s in zip(k_, o_, s_) for p in ((0, k), (0, o * s))])
      x = x.reshape(*self.shape[:-n], *[a for k, o, s in zip(k_, o_, s_) for a in (k, o, s)])
      x = x.shrink(noop + [p for k, o in zip(k_, o_) for p in ((0, k), (0, o), (0, 1))])
      x = x.reshape(*self.shape[:-n], *[a for k, o in zip(k_, o_) for a in (k, o)])
      m = len(noop)
      win = x.permute(*range(m), *[m + 2 * j + 1 for j in range(n)], *[m + 2 * j for j in range(n)])
      if s_ == d_ == (1,) * n and prod(k_) <= MAX_FOLD_TERMS:
        win = win._custom_grad((self,), lambda out, s, g: (_fold(g, i_, o_, k_),))
      return win
    # windows that do not overlap (k <= s): a pad to whole strides and a reshape, no repeat
    x = self.pad(noop + [(0, max(0, o * s - i)) for i, o, s in zip(i_, o_, s_)])
    x = x.shrink(noop + [(0, o * s) for o, s in zip(o_, s_)])
    x = x.reshape(*self.shape[:-n], *[a for o, s in zip(o_, s_) for a in (o, s)])
    x = x.shrink(noop + [p for o, k in zip(o_, k_) for p in ((0, o), (0, k))])
    m = len(noop)
    return x.permute(*range(m), *[m + 2 * j for j in range(n)], *[m + 2 * j + 1 for j in range(n)])

  def _spatial_pads(self, padding, k_: Sequence[int], dilation, stride, what: str) -> list[tuple[int, int]]:
    """(before, after) per spatial axis: PyTorch's int, one int per axis, pairs per axis, "valid" or "same"."""
    n = len(k_)
    if padding == "valid": return [(0, 0)] * n
    if padding == "same":
      if any(s != 1 for s in _tuple(stride, n, "stride")):
        raise UsageError(f"{what}: padding='same' needs stride 1, as in PyTorch")
      total = [d * (k - 1) for d, k in zip(_tuple(dilation, n, "dilation"), k_)]
      return [(t // 2, t - t // 2) for t in total]
    if isinstance(padding, str): raise UsageError(f"{what}: padding must be an int, a tuple, 'valid' or 'same'")
    if not isinstance(padding, (int, np.integer)) and len(padding) == 2 * n or \
       not isinstance(padding, (int, np.integer)) and all(isinstance(p, (tuple, list)) for p in padding):
      pairs = [tuple(p) for p in padding] if all(isinstance(p, (tuple, list)) for p in padding) else \
        [tuple(padding[k:k + 2]) for k in range(0, 2 * n, 2)][::-1]   # tinygrad's flat form: last axis first
      if any(isinstance(a, bool) or not isinstance(a, (int, np.integer)) for p in pairs for a in p):
        raise UsageTypeError(f"{what}: padding must be ints, got {padding!r}")
      if any(a < 0 for p in pairs for a in p):
        raise UsageError(f"{what}: padding must be non-negative, got {padding!r} (a negative padding would crop)")
      return [(int(a), int(b)) for a, b in pairs]
    return [(p, p) for p in _tuple(padding, n, f"{what}: padding", 0)]

  # ---- convolution ----
  def conv2d(self, weight: Self, bias: Self | None = None, groups: int = 1, stride=1, dilation=1, padding=0,
             dtype=None) -> Self:
    """PyTorch's convolution over the last len(weight.shape) - 2 axes (conv1d, conv2d and conv3d are this one):
    self (N, C_in, *spatial), weight (C_out, C_in / groups, *kernel), bias (C_out,). Cross-correlation, as PyTorch's
    (the kernel is not flipped). (N, C_out, *out) with out = (i + pads - dilation (k - 1) - 1) // stride + 1."""
    if self.ndim != weight.ndim or self.ndim < 3:
      raise UsageError(f"conv: input {self.shape} and weight {weight.shape} need the same number of axes, at least 3 "
                       "((N, C, *spatial) and (C_out, C_in / groups, *kernel))")
    (bs, cin_), (cout, cin), HW = self.shape[:2], weight.shape[:2], weight.shape[2:]
    if groups < 1 or cout % groups or groups * cin != cin_:
      raise UsageError(f"conv: input {self.shape} has {cin_} channels, weight {weight.shape} takes {cin} per group "
                       f"with groups={groups} (need C_in == groups * weight.shape[1], C_out divisible by groups)")
    pads = self._spatial_pads(padding, HW, dilation, stride, "conv")
    x = self.pad([None, None, *pads])._pool(HW, stride, dilation)              # (bs, groups*cin, *o, *HW)
    rcout, oyx = cout // groups, x.shape[2:-len(HW)]
    n = len(oyx)
    x = x.reshape(bs, groups, cin, 1, *oyx, *HW).expand(bs, groups, cin, rcout, *oyx, *HW)
    x = x.permute(0, 1, 3, *[4 + i for i in range(n)], 2, *[4 + n + i for i in range(len(HW))])
    # (bs, cout, *o, cin, *HW) times the weights, summed over (cin, *HW): the REDUCE is (bs, cout, *o) itself (a
    # RESHAPE after it would be a copy kernel of its own)
    x = x.reshape(bs, cout, *oyx, cin, *HW)
    w = weight.reshape(1, cout, *[1] * n, cin, *HW)
    out = (x * w).sum(tuple(-1 - i for i in range(1 + len(HW))), dtype=dtype)
    asked = CONV_GRADS_AS_CONVS and getattr(getattr(type(self), "opt", None), "conv_gradients", False)
    if asked and groups == 1 and dtype is None and self.dtype == weight.dtype and self.dtype.is_float \
       and _tuple(stride, n, "stride") == _tuple(dilation, n, "dilation") == (1,) * n:
      out = out._custom_grad((self, weight), lambda out, s, g: _conv_grads(s[0], s[1], g, pads))
    return out if bias is None else out + bias.reshape(1, -1, *[1] * n)
  conv1d = conv3d = conv2d

  def conv_transpose2d(self, weight: Self, bias: Self | None = None, groups: int = 1, stride=1, dilation=1,
                       padding=0, output_padding=0) -> Self:
    """PyTorch's transposed convolution (conv_transpose1d/2d/3d): weight (C_in, C_out / groups, *kernel). The input
    spread out by the stride (zeros between), then a convolution with the flipped, transposed kernel."""
    HW = weight.shape[2:]
    n = len(HW)
    if self.ndim != n + 2: raise UsageError(f"conv_transpose: input {self.shape} for weight {weight.shape}")
    if weight.shape[0] != self.shape[1] or weight.shape[0] % groups:
      raise UsageError(f"conv_transpose: input {self.shape} has {self.shape[1]} channels, weight {weight.shape} "
                       f"takes {weight.shape[0]} (groups={groups})")
    w = weight.reshape(groups, weight.shape[0] // groups, *weight.shape[1:]).transpose(1, 2)
    w = w.flip(tuple(range(3, w.ndim)))
    d_, s_ = _tuple(dilation, n, "dilation", 1), _tuple(stride, n, "stride", 1)
    op_ = _tuple(output_padding, n, "output_padding", 0)
    if any(o >= max(s, d) for o, s, d in zip(op_, s_, d_)):
      raise UsageError(f"conv_transpose: output_padding {op_} must be smaller than either stride {s_} or dilation "
                       f"{d_}, as in PyTorch")
    pads = self._spatial_pads(padding, HW, dilation, 1, "conv_transpose")
    x = self
    if any(s > 1 for s in s_):   # (k) -> (k, 1) -> pad to (k, s) -> (k*s) -> cut the last s - 1
      x = x.reshape(*x.shape[:2], *[a for k in x.shape[2:] for a in (k, 1)])
      x = x.pad([None, None, *[p for s in s_ for p in (None, (0, s - 1))]])
      x = x.reshape(*x.shape[:2], *[k * s for k, s in zip(x.shape[2::2], s_)])
      x = x.shrink([None, None, *[(0, k - (s - 1)) for k, s in zip(x.shape[2:], s_)]])
    conv_pads = [((k - 1) * d - pb, (k - 1) * d - pa + op) for k, d, (pb, pa), op in zip(HW, d_, pads, op_)]
    x = x.pad([None, None, *conv_pads])   # a negative size cuts
    return x.conv2d(w.reshape(-1, *w.shape[2:]), bias=bias, groups=groups, dilation=dilation)
  conv_transpose1d = conv_transpose3d = conv_transpose2d

  # ---- pooling ----
  def _pool_pads(self, k_, stride, padding, dilation, ceil_mode: bool) -> tuple[list, tuple]:
    n = len(k_)
    s_ = k_ if stride is None else _tuple(stride, n, "stride", 1)
    d_ = _tuple(dilation, n, "dilation", 1)
    pads = self._spatial_pads(padding, k_, d_, s_, "pool")
    if any(max(p) > k // 2 for p, k in zip(pads, k_)):
      raise UsageError(f"pool: padding {pads} should be at most half the kernel {tuple(k_)}, as in PyTorch")
    if ceil_mode:   # one more window where the input leaves a partial one (it must start inside input or left pad)
      i_ = self.shape[-n:]
      for j, (i, k, s, d, (pb, pa)) in enumerate(zip(i_, k_, s_, d_, pads)):
        span = i + pb + pa - d * (k - 1) - 1
        o = _ceil(span, s) + 1
        if (o - 1) * s >= i + pb: o -= 1
        pads[j] = (pb, max(pa, (o - 1) * s + d * (k - 1) + 1 - i - pb))
    return pads, s_

  def max_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode: bool = False,
                 return_indices: bool = False):
    """PyTorch's max pooling over the last len(kernel_size) axes (an int kernel_size: two axes, as max_pool2d);
    stride defaults to the kernel. return_indices: also the flat index of each max in its input plane."""
    k_ = _kernel(kernel_size, 2)
    pads, s_ = self._pool_pads(k_, stride, padding, dilation, ceil_mode)
    lowest = -math.inf if self.dtype.is_float else self.dtype.min
    x = self.pad([None] * (self.ndim - len(k_)) + pads, value=lowest)
    win = x._pool(k_, s_, dilation)
    out = win.max(tuple(range(-len(k_), 0)))._custom_grad((win,), _max_pool_grad)
    if not return_indices: return out
    # each window's first maximum, as an index into the unpadded plane
    T, n = type(self), len(k_)
    plane = T(np.arange(math.prod(self.shape[-n:]), dtype=np.int32).reshape(self.shape[-n:]))
    idx = plane.pad(pads, value=-1)._pool(k_, s_, dilation)
    flat_win = win.reshape(*win.shape[:-n], -1)
    first = flat_win.argmax(-1)
    idx = idx.reshape(*idx.shape[:-n], -1).expand(*flat_win.shape)
    return out, idx.gather(-1, first.unsqueeze(-1)).squeeze(-1).cast(dtypes.i64)
  def max_pool1d(self, kernel_size=2, stride=None, dilation=1, padding=0, ceil_mode=False, return_indices=False):
    return self.max_pool2d(_kernel(kernel_size, 1), stride, dilation, padding, ceil_mode, return_indices)
  def max_pool3d(self, kernel_size=2, stride=None, dilation=1, padding=0, ceil_mode=False, return_indices=False):
    return self.max_pool2d(_kernel(kernel_size, 3), stride, dilation, padding, ceil_mode,
                           return_indices)

  def avg_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> Self:
    """PyTorch's average pooling: the mean of each window, padding counted as zeros (count_include_pad) or not; a
    window that ceil_mode adds past the padding counts only what it covers."""
    k_ = _kernel(kernel_size, 2)
    n = len(k_)
    pads, s_ = self._pool_pads(k_, stride, padding, dilation, ceil_mode)
    plain, _ = self._pool_pads(k_, stride, padding, dilation, False)
    axes = tuple(range(-n, 0))
    x = self if self.dtype.is_float else self.float()
    total = x.pad([None] * (self.ndim - n) + pads)._pool(k_, s_, dilation).sum(axes)
    T = type(self)
    if count_include_pad:   # the padded plane counts, the part ceil_mode adds beyond it does not
      padded = tuple(i + a + b for i, (a, b) in zip(self.shape[-n:], plain))
      counted = T.full(padded, 1.0, x.dtype).pad([(pb - qb, pa - qa) for (pb, pa), (qb, qa) in zip(pads, plain)])
    else: counted = T.full(self.shape[-n:], 1.0, x.dtype).pad(pads)
    return total / counted._pool(k_, s_, dilation).sum(axes)
  def avg_pool1d(self, kernel_size=2, stride=None, padding=0, ceil_mode=False, count_include_pad=True) -> Self:
    return self.avg_pool2d(_kernel(kernel_size, 1), stride, 1, padding, ceil_mode, count_include_pad)
  def avg_pool3d(self, kernel_size=2, stride=None, padding=0, ceil_mode=False, count_include_pad=True) -> Self:
    return self.avg_pool2d(_kernel(kernel_size, 3), stride, 1, padding, ceil_mode, count_include_pad)

  def adaptive_avg_pool2d(self, output_size) -> Self:
    """PyTorch's adaptive average pooling over the last len(output_size) axes (an int: two axes): output cell o
    averages input cells floor(o i / n) up to ceil((o + 1) i / n), a (n, i) matrix of weights per axis, applied as
    a matmul (None keeps that axis)."""
    sizes_ = (output_size,) * 2 if isinstance(output_size, (int, np.integer)) or output_size is None else output_size
    n = len(sizes_)
    if self.ndim < n + 1: raise UsageError(f"adaptive_avg_pool: input of shape {self.shape} for output {output_size}")
    x, T = self if self.dtype.is_float else self.float(), type(self)
    for j, o in enumerate(sizes_):
      axis, i = self.ndim - n + j, self.shape[self.ndim - n + j]
      if o is None: continue
      if isinstance(o, bool) or not isinstance(o, (int, np.integer)) or o < 1:
        raise UsageError(f"adaptive_avg_pool: output_size must be positive ints, got {output_size!r}")
      w = np.zeros((o, i))
      for k in range(o): w[k, (k * i) // o:_ceil((k + 1) * i, o)] = 1 / (_ceil((k + 1) * i, o) - (k * i) // o)
      w = T(w.T.astype(np.float64 if x.dtype is dtypes.f64 else np.float32))   # (i, o)
      x = (x.transpose(axis, -1) @ w).transpose(axis, -1)
    return x

  # ---- interpolation ----
  def interpolate(self, size=None, scale_factor=None, mode: str = "nearest", align_corners: bool | None = None) -> Self:
    """PyTorch's F.interpolate over the axes after (N, C): "nearest", "nearest-exact", or "linear" / "bilinear" /
    "trilinear" (the same rule on each axis in turn), with align_corners. The source positions and weights are
    computed here in NumPy (they depend on the sizes only); each axis is then a select and a blend."""
    n = self.ndim - 2
    if n < 1: raise UsageError(f"interpolate: needs (N, C, *spatial), got shape {self.shape}")
    if mode not in ("nearest", "nearest-exact", "linear", "bilinear", "trilinear", "bicubic", "area"):
      raise UsageError(f"interpolate: unknown mode {mode!r}")
    if mode in ("bicubic", "area"): raise NotImplementedError(f"interpolate: mode {mode!r} is not implemented")
    linear = mode in ("linear", "bilinear", "trilinear")
    if align_corners is not None and not linear:
      raise UsageError("interpolate: align_corners goes with the linear modes only, as in PyTorch")
    ins = self.shape[2:]
    if (size is None) == (scale_factor is None): raise UsageError("interpolate: give size or scale_factor, one of them")
    if size is not None: outs = _tuple(size, n, "size", 1); scales = [i / o for i, o in zip(ins, outs)]
    else:
      f = (scale_factor,) * n if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
      if len(f) != n or any(isinstance(s, bool) or not isinstance(s, (int, float)) or not s > 0 for s in f):
        raise UsageError(f"interpolate: scale_factor must be positive numbers, one or {n}, got {scale_factor!r}")
      outs, scales = tuple(int(math.floor(i * s)) for i, s in zip(ins, f)), [1 / s for s in f]
    x = self if self.dtype.is_float or not linear else self.float()   # nearest only selects: a uint8 image stays uint8
    T = type(self)
    f = np.float64 if x.dtype is dtypes.f64 else np.float32   # positions in the input's precision, as PyTorch's
    for j, (i, o, sc) in enumerate(zip(ins, outs, scales)):
      axis, dst = 2 + j, np.arange(o, dtype=f)
      if not linear:
        src = np.floor((dst + 0.5) * f(sc)) if mode == "nearest-exact" else np.floor(dst * f(sc))
        x = x._take(axis, T(np.minimum(src, i - 1).astype(np.int32)))
        continue
      if align_corners: src = dst * f((i - 1) / (o - 1) if o > 1 else 0)
      else: src = np.maximum((dst + 0.5) * f(sc) - 0.5, 0)
      lo = np.minimum(np.floor(src), i - 1).astype(np.int32)
      hi = np.minimum(lo + 1, i - 1).astype(np.int32)
      w = T((src - lo).astype(f)).cast(x.dtype).reshape(o, *[1] * (n - 1 - j))
      x = x._take(axis, T(lo)) * (1 - w) + x._take(axis, T(hi)) * w
    return x

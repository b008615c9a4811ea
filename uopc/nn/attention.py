"""Neural-network functions built on uopc's kernels, in the shapes PyTorch users know.

  out = scaled_dot_product_attention(q, k, v, attn_mask=None, is_causal=False, scale=None)

q (..., Nq, D), k (..., Nk, D), v (..., Nk, Dv): Tensors or NumPy arrays; the leading (batch, head) dims
broadcast. It runs uopc.kernels.flash's tiled online-softmax kernel (no N x N buffer), or, for a few queries against
many keys, flash-decoding: the keys split into chunks processed in parallel, then a second kernel that merges the
partial (m, l, o) states (section 11.6's merge rule). Tensors on CL or CUDA run FlashAttention-2
(uopc.kernels.fa2: K and V tiles in local memory, a work-group per query block) or, with a mask or flash-decoding,
the same kernels as on the CPU through the GPU renderers; the result is a Tensor on that device.
"""
from __future__ import annotations
import math
import numpy as np
from uopc.helpers import cache, omp_threads
from uopc.kernels.flash import flash_attention_ir, merge_partials_ir
from uopc.kernels.fa2 import fa2_ir
from uopc.nn import flash as nn_flash
from uopc.render_c import render_c
from uopc.runtime import Program
from uopc.errors import UsageError

ROWS, KEYS = 8, 32          # query block and key tile (see uopc.bench attention and NOTES)
FA2_BQ, FA2_BK = 32, 16     # on a GPU device: queries per work-group (one a work-item), keys per local tile
_programs: dict[tuple, Program] = cache("nn.attention.programs", {})   # per kernel key and device


def _program(name: str, make, key: tuple, device: str = "CPU") -> Program:
  """The kernel `make()` builds, compiled once per key and device (CL, CUDA: through the GPU renderers, whose launch
  opt makes each query block a work-item)."""
  if (key, device) not in _programs:
    if device == "CPU": _programs[key, device] = Program(render_c(make(), name), name)
    else:
      from uopc.device import get_device
      dev = get_device(device)
      _programs[key, device] = dev.compile(dev.renderer.render(make(), name).src)
  return _programs[key, device]


def _fa2_bq(nq: int) -> int: return min(FA2_BQ, 1 << (nq - 1).bit_length())


def _fa2(q: np.ndarray, k: np.ndarray, v: np.ndarray, batch: tuple, causal: bool, scale: float, device: str):
  """FlashAttention-2 on a GPU device (uopc.kernels.fa2): queries padded to whole blocks, keys to whole tiles
  (masked)."""
  from uopc.tensor import Tensor
  nq, nk, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
  heads, bq = math.prod(batch), _fa2_bq(nq)
  nq_p, nk_p = _ceil(nq, bq) * bq, _ceil(nk, FA2_BK) * FA2_BK
  flat = lambda a, n, w, size: np.ascontiguousarray(_pad_to(np.broadcast_to(a, batch + (n, w)).reshape(heads, n, w),
                                                            1, size), np.float32)
  args = [flat(q, nq, d, nq_p), flat(k, nk, d, nk_p), flat(v, nk, dv, nk_p)]
  key = ("fa2", heads, nq_p, nk_p, d, dv, bq, causal, scale, nk)
  prg = _program("fa2", lambda: fa2_ir(heads, nq_p, nk_p, d, dv, bq, FA2_BK, causal, scale, nk), key, device)
  out = np.empty((heads, nq_p, dv), np.float32)
  prg(*args, out)
  return Tensor(np.ascontiguousarray(out[:, :nq]).reshape(batch + (nq, dv)), device=device)


def _device_of(*xs) -> str:
  """The device of the Tensors among xs (CPU for arrays); they must agree."""
  from uopc.tensor import Tensor
  devices = {x.device for x in xs if isinstance(x, Tensor)}
  if len(devices) > 1: raise UsageError(f"scaled_dot_product_attention: q, k, v are on different devices {devices}")
  return devices.pop() if devices else "CPU"


def _as_array(x, what: str) -> np.ndarray:
  from uopc.tensor import Tensor
  a = x.numpy() if isinstance(x, Tensor) else np.asarray(x)
  if a.ndim < 2: raise UsageError(f"scaled_dot_product_attention: {what} needs shape (..., N, D), got {a.shape}")
  if a.dtype != np.float32: raise TypeError(f"scaled_dot_product_attention: {what} is {a.dtype}, only float32 works")
  return a


def _pad_to(a: np.ndarray, axis: int, size: int, value: float = 0.0) -> np.ndarray:
  if a.shape[axis] == size: return a
  widths = [(0, 0)] * a.ndim
  widths[axis] = (0, size - a.shape[axis])
  return np.pad(a, widths, constant_values=value)


def _ceil(a: int, b: int) -> int: return -(-a // b)


def scaled_dot_product_attention(q, k, v, attn_mask=None, is_causal: bool = False, scale: float | None = None,
                                 splits: int | None = None, enable_gqa: bool = False):
  """softmax(q k^T * scale + mask) v; scale defaults to 1/sqrt(D). attn_mask: bool or integer (nonzero takes
  part) or additive float, broadcastable to (..., Nq, Nk). is_causal: query i attends keys j <= i. A query whose keys
  are all masked gets zeros. splits: how many key chunks flash-decoding uses (default: chosen from the shapes; 1 turns
  it off). enable_gqa: k and v may have fewer heads (axis -3) than q, each shared by a group (PyTorch's flag).

  Differentiable: where q, k, v (or a float mask) are Tensors a gradient can reach, the result records the unfused
  graph of the same attention (uopc.autograd.record), and backward() differentiates that graph, as FlashAttention's
  backward recomputes the probabilities instead of keeping them; the forward stays the fused kernel."""
  from uopc.autograd import record, tracks
  from uopc.tensor import Tensor
  if enable_gqa:
    from uopc.mixin.torchlike import repeat_heads
    k, v = repeat_heads(*(x if isinstance(x, Tensor) else Tensor(np.asarray(x, np.float32)) for x in (k, v)),
                        q.shape[-3])
  given = [x for x in (q, k, v, attn_mask) if isinstance(x, Tensor)]
  tracked = bool(given) and tracks([x.uop for x in given])   # asked before the inputs are realized below
  out = _attention(q, k, v, attn_mask, is_causal, scale, splits)
  if tracked:
    T = lambda x: x if isinstance(x, Tensor) else Tensor(np.asarray(x, np.float32))
    record(out.uop, attention_graph(T(q), T(k), T(v), attn_mask, is_causal, scale).uop)
  return out


def attention_graph(q, k, v, attn_mask=None, is_causal: bool = False, scale: float | None = None,
                    dropout_p: float = 0.0):
  """The same attention as Tensor operations, unfused (the graph backward() differentiates): Tensor's method."""
  return q.scaled_dot_product_attention(k, v, attn_mask, dropout_p, is_causal, scale)


def _attention(q, k, v, attn_mask, is_causal: bool, scale: float | None, splits: int | None):
  from uopc.tensor import Tensor
  device = _device_of(q, k, v)
  q, k, v = _as_array(q, "q"), _as_array(k, "k"), _as_array(v, "v")
  where = "scaled_dot_product_attention"
  if q.shape[-1] != k.shape[-1]: raise UsageError(f"{where}: q {q.shape} and k {k.shape} differ in D")
  if k.shape[-2] != v.shape[-2]: raise UsageError(f"{where}: k {k.shape} and v {v.shape} differ in Nk")
  try: batch = q.shape[:-2] if q.shape[:-2] == k.shape[:-2] == v.shape[:-2] else \
    tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
  except ValueError:
    raise UsageError(f"{where}: batch dims of q {q.shape}, k {k.shape}, v {v.shape} do not broadcast") from None
  nq, nk, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
  heads = math.prod(batch)
  if d == 0 and scale is None: raise UsageError(f"{where}: q {q.shape} has D = 0, so the default scale 1/sqrt(D) is "
                                                "infinite; give scale=")
  if splits is not None and (isinstance(splits, bool) or not isinstance(splits, (int, np.integer)) or splits < 1):
    raise UsageError(f"{where}: splits must be a positive integer (1 turns flash-decoding off), got {splits!r}")
  scale = 1 / math.sqrt(d) if scale is None else float(scale)
  if heads == 0 or nq == 0 or nk == 0:   # nothing to attend
    return Tensor(np.zeros(batch + (nq, dv), np.float32), device=device)
  mask = None
  if attn_mask is not None:
    m = attn_mask.numpy() if isinstance(attn_mask, Tensor) else np.asarray(attn_mask)
    if m.dtype.kind not in "biuf":
      raise TypeError(f"{where}: attn_mask must be bool (True takes part), integer 0/1 or additive float, "
                      f"got dtype {m.dtype}" + (" (does it hold None?)" if m.dtype == object else ""))
    if m.dtype.kind in "iu": m = m != 0   # an integer mask is a boolean one (1 takes part), not scores to add
    try: m = np.broadcast_to(m, batch + (nq, nk))
    except ValueError:
      raise UsageError(f"{where}: attn_mask {m.shape} does not broadcast to {batch + (nq, nk)}") from None
    mask = np.where(m, 0.0, -np.inf).astype(np.float32) if m.dtype == np.bool_ else m.astype(np.float32)
  # flash-decoding when there are too few query rows to keep every thread busy
  threads = omp_threads()
  few_rows = heads * _ceil(nq, ROWS) < 2 * threads
  if splits is None: splits = min(32, max(1, nk // 256)) if few_rows and not is_causal else 1
  if is_causal and splits > 1: raise UsageError(f"{where}: flash-decoding (splits > 1) is not causal")
  if device != "CPU" and mask is None and splits == 1 and (FA2_BK * d) % _fa2_bq(nq) == 0 \
     and (FA2_BK * dv) % _fa2_bq(nq) == 0:
    return _fa2(q, k, v, batch, is_causal, scale, device)
  if device == "CPU" and mask is None and splits == 1 and nn_flash.fits(d, dv):   # the vector kernels
    # (heads, n, x) views; broadcast_to only where a batch dim broadcasts (it costs more than the rest of the call)
    flat = lambda a, n, x: np.ascontiguousarray((a if a.shape[:-2] == batch else np.broadcast_to(a, batch + (n, x)))
                                                .reshape(heads, n, x))
    out = nn_flash.attention(flat(q, nq, d), flat(k, nk, d), flat(v, nk, dv), is_causal, scale)
    return Tensor._from_array(np.ascontiguousarray(out).reshape(-1), batch + (nq, dv), device)   # no second copy
  rows = min(ROWS, 1 << (nq - 1).bit_length())
  keys = min(KEYS, 1 << (_ceil(nk, splits) - 1).bit_length())
  chunk = _ceil(_ceil(nk, splits), keys) * keys         # keys per chunk, a whole number of tiles
  splits = _ceil(nk, chunk)
  nq_p = _ceil(nq, rows) * rows
  # (heads, ...) views padded to whole blocks; padded queries are dropped, padded keys masked in the kernel
  qf = _pad_to(np.broadcast_to(q, batch + (nq, d)).reshape(heads, nq, d), 1, nq_p)
  kf = _pad_to(np.broadcast_to(k, batch + (nk, d)).reshape(heads, nk, d), 1, splits * chunk)
  vf = _pad_to(np.broadcast_to(v, batch + (nk, dv)).reshape(heads, nk, dv), 1, splits * chunk)
  # a packed copy of K, transposed chunk by chunk, so that the kernel reads consecutive keys from consecutive floats
  owned = lambda a: np.require(a, np.float32, ["C_CONTIGUOUS", "WRITEABLE"])   # kernels take float*, never a view
  args = [owned(np.repeat(qf, splits, axis=0) if splits > 1 else qf),
          owned(kf.reshape(heads * splits, chunk, d).transpose(0, 2, 1)),
          owned(vf.reshape(heads * splits, chunk, dv))]
  if mask is not None:
    mf = _pad_to(_pad_to(mask.reshape(heads, nq, nk), 1, nq_p), 2, splits * chunk, -np.inf)
    args.append(owned(mf.reshape(heads, nq_p, splits, chunk).transpose(0, 2, 1, 3)))
  key = ("flash", heads * splits, nq_p, chunk, d, dv, rows, keys, is_causal, mask is not None, scale, nk, splits)
  prg = _program("flash", lambda: flash_attention_ir(heads * splits, nq_p, chunk, d, rows, keys, causal=is_causal,
                                                      masked=mask is not None, scale=scale, dv=dv, total_keys=nk,
                                                      splits=splits, partial=splits > 1), key, device)
  out = np.empty((heads, nq_p, dv), np.float32)
  if splits == 1: prg(*args, out)
  else:
    po, pm, pl = (np.empty((heads * splits, nq_p, dv), np.float32), np.empty((heads * splits, nq_p), np.float32),
                  np.empty((heads * splits, nq_p), np.float32))
    prg(*args, po, pm, pl)
    merge = _program("merge", lambda: merge_partials_ir(heads, splits, nq_p, dv), ("merge", heads, splits, nq_p, dv),
                     device)
    merge(po, pm, pl, out)
  return Tensor(np.ascontiguousarray(out[:, :nq]).reshape(batch + (nq, dv)), device=device)


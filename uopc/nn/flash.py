"""Attention on the CPU with a vector kernel: pick its opts, run it.

nn.scaled_dot_product_attention comes here for the common case (no attn_mask, no flash-decoding, a head dim the
vectors divide); everything else runs uopc.kernels.flash's scalar kernel. There are two vector kernels, and the opts say
which: uopc.kernels.flash_vec_q (FlashQOpts: queries in the lanes, q, k, v read as they are; the heuristic with 32
registers, and below KEYS_LAYOUT_FROM keys) and uopc.kernels.flash_vec (FlashVecOpts: keys in the lanes, after
K^T is packed in panels here; the heuristic with 16 registers from KEYS_LAYOUT_FROM keys).
The opts are the tuner's (uopc.runtime.tune): the winner cached for this problem on this machine, or the heuristic;
BEAM=n searches.
"""
from __future__ import annotations
import dataclasses
import math
import numpy as np
from uopc.helpers import cache
from uopc.kernels.flash_vec import FlashVecOpts, flash_vector_ir, candidate_opts, kt_panels
from uopc.kernels.flash_vec import default_opts   # chapter 10 reads the keys layout's heuristic here
from uopc.kernels import flash_vec_q
from uopc.kernels.flash_vec_q import FlashQOpts, flash_queries_ir
from uopc.render_c import c_renderer
from uopc.runtime import Program, native_lanes
from uopc.runtime import tune
from uopc.runtime.machine import target

_programs: dict[tuple, Program] = cache("nn.flash.programs", {})   # compiled once per problem and opts


lanes_here = native_lanes   # floats per vector register of the target (UOPC_MARCH, else this CPU)


def fits(d: int, dv: int) -> bool:
  """Whether the vector kernel takes this head dim: the output row is a whole number of vectors."""
  return dv % lanes_here() == 0 and d >= 1


def _ceil_to(n: int, m: int) -> int: return -(-n // m) * m


def program(heads: int, nq: int, nk: int, d: int, dv: int, causal: bool, scale: float,
            opts: FlashVecOpts | FlashQOpts) -> Program:
  """The compiled kernel for this problem and opts (the opts' type is the layout), made once per process."""
  key = (heads, nq, nk, d, dv, causal, scale, opts, target().flags)   # built for the target of the moment
  if key not in _programs:
    if isinstance(opts, FlashQOpts):   # q, k, v as they are
      name, sink = "flash_vec_q", flash_queries_ir(heads, nq, nk, d, opts, causal=causal, scale=scale, dv=dv)
    else:                              # q and out as they are, K^T in panels padded to whole steps (run makes it)
      nq_p, nk_p = _ceil_to(nq, opts.rows * opts.qblocks), _ceil_to(nk, opts.span)
      name, sink = "flash_vec", flash_vector_ir(heads, nq_p, nk_p, d, opts, causal=causal, scale=scale, dv=dv,
                                                total_keys=nk, total_queries=nq)
    _programs[key] = Program(c_renderer(opts.schedule).render(sink, name).src, name, opts.compile.flags)
  return _programs[key]


def run(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool, scale: float,
        opts: FlashVecOpts | FlashQOpts) -> np.ndarray:
  """q (heads, nq, d), k (heads, nk, d), v (heads, nk, dv), float32 -> out (heads, nq, dv)."""
  heads, nq, d = q.shape
  nk, dv = k.shape[1], v.shape[2]
  if isinstance(opts, FlashQOpts):   # the kernel reads q, k, v as they are and writes exactly out
    out = np.empty((heads, nq, dv), np.float32)
    program(heads, nq, nk, d, dv, causal, scale, opts)(*(np.ascontiguousarray(a, np.float32) for a in (q, k, v)),
                                                       out)
    return out
  nk_p = _ceil_to(nk, opts.span)
  qc = np.require(q, np.float32, ["C_CONTIGUOUS"])   # the last block re-reads the last query: no padded copy
  # K^T in panels of a tile's keys (kt_panels); padded keys are zeros here and masked in the kernel
  kp = k if nk_p == nk else np.concatenate([k, np.zeros((heads, nk_p - nk, d), np.float32)], axis=1)
  kt = kt_panels(kp, opts.keys)
  vp = v if nk_p == nk else np.concatenate([v, np.zeros((heads, nk_p - nk, dv), np.float32)], axis=1)
  vp = np.require(vp, np.float32, ["C_CONTIGUOUS"])
  out = np.empty((heads, nq, dv), np.float32)
  program(heads, nq, nk, d, dv, causal, scale, opts)(qc, kt, vp, out)
  return out


# the choice per problem, made once per process (BEAM too)
_chosen: dict[tuple, FlashVecOpts | FlashQOpts] = cache("nn.flash.chosen", {})


def choose_opts(heads: int, nq: int, nk: int, d: int, dv: int, causal: bool,
                scale: float) -> FlashVecOpts | FlashQOpts:
  key = (heads, nq, nk, d, dv, causal, scale)
  if (key, target()) not in _chosen: _chosen[key, target()] = _choose(*key)
  return _chosen[key, target()]


# With 16 registers (AVX2, SSE) the queries layout broadcasts one of K's floats from memory for every FMA (there is no
# FMA with a broadcast operand before AVX-512): from this many keys the keys layout is faster (NOTES 39, on a Zen 5,
# lscpu family 26 model 2, with x86-64-v3: 1.18x against 1.04x PyTorch's SDPA at N = 512, and at N = 1024 to 4096
# 1.08-1.21x against 0.88-0.98x; at N = 256 and below the queries layout, 1.5-1.9x against 1.1-1.5x, causal)
KEYS_LAYOUT_FROM = 512


def _choose(heads: int, nq: int, nk: int, d: int, dv: int, causal: bool,
            scale: float) -> FlashVecOpts | FlashQOpts:
  isa = target().isa   # the tiles are sized to its registers and lanes (uopc.runtime.machine)
  lanes = isa.lanes
  if isa.registers <= 16 and nk >= KEYS_LAYOUT_FROM:   # AVX2, SSE: the keys layout, its K^T copy paid for
    heuristic = default_opts(isa, nk, nq)
    if dv % (heuristic.dchunk * lanes): heuristic = dataclasses.replace(heuristic, dchunk=1)   # lanes divide dv
  else:
    heuristic = flash_vec_q.default_opts(isa)
    if not heuristic.fits(dv): heuristic = dataclasses.replace(heuristic, dcols=lanes)   # fits() said lanes divide dv
  problem = (heads, nq, nk, d, dv, causal)
  def timer(opts: FlashVecOpts | FlashQOpts):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((heads, n, x)).astype(np.float32) for n, x in ((nq, d), (nk, d), (nk, dv)))
    return lambda: run(q, k, v, causal, scale, opts)
  candidates = flash_vec_q.candidate_opts(isa, dv) + candidate_opts(isa, dv)
  return tune.choose("flash_vec", problem, candidates, heuristic, timer)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool, scale: float | None = None) -> np.ndarray:
  """softmax(q k^T * scale) v for (heads, n, d) float32 arrays, by the vector kernel."""
  heads, nq, d = q.shape
  scale = 1 / math.sqrt(d) if scale is None else float(scale)
  opts = choose_opts(heads, nq, k.shape[1], d, v.shape[2], causal, scale)
  return run(q, k, v, causal, scale, opts)


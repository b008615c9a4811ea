"""Random numbers computed inside kernels, from a seed that is an input of the plan (dropout's masks).

  seed = draw_seed(gen)                     # a 0-d int64 buffer holding gen's next draw (a NumPy Generator)
  u = uniform((B, T, C), seed)              # (B, T, C) float32 in [0, 1): hash(seed, element index) / 2^32
  uniform_numpy((B, T, C), seed.item())     # the same numbers, computed with NumPy (the tests' reference)

A mask drawn with NumPy and handed to the graph as a buffer is an array the plan reads; a captured step
(uopc.jit.TinyJit) keeps that array and replays the same mask at every step. Here the mask is computed by the
kernel from the element's index and a seed: a counter-based generator (a 32-bit integer hash, as Philox-style
generators are used on GPUs), so the only random state the plan reads is the seed's one number. draw_seed registers
the seed's array with the generator it came from; the capture notes which of its inputs are such seeds, and every
replay writes each one's generator's next draw into it first (refill). So a replayed step draws a fresh mask, and
eager steps, captured steps and replays draw the same sequence of seeds from the same generator: a seed reproduces a
run, captured or not.

The hash is integer arithmetic on int64 values below 2^32 (products of such a value and a constant below 2^31 stay
below 2^63, so nothing overflows in any C); a shift right is a division by a power of two (the values are never
negative).
"""
from __future__ import annotations
import weakref
import numpy as np
from uopc.dtype import dtypes
from uopc.ops import Ops
from uopc.tensor import Tensor

MASK32 = 0xFFFFFFFF
# (shift, multiplier) rounds of a lowbias32-style mixer; the multipliers are odd and below 2^31
ROUNDS = ((16, 0x7FEB352D), (15, 0x2C1B3C6D), (16, 0x297A2D39))
SEED_MUL = 0x2545F491   # spreads the seed before it is mixed with the element index

_refill: dict[int, tuple[weakref.ref, np.random.Generator]] = {}   # id(seed array) -> (the array, its generator)


def draw_seed(gen: np.random.Generator) -> Tensor:
  """A 0-d int64 Tensor holding gen's next draw (below 2^31), registered so that a replay draws the next one."""
  t = Tensor(np.array(gen.integers(1 << 31), np.int64))
  a = t._data()
  key = id(a)
  _refill[key] = (weakref.ref(a, lambda _: _refill.pop(key, None)), gen)
  return t


def refill_of(a: np.ndarray):
  """For a seed array made by draw_seed: a function that writes its generator's next draw into it; else None."""
  entry = _refill.get(id(a))
  if entry is None or entry[0]() is not a: return None
  gen = entry[1]
  def refill() -> None: a[...] = gen.integers(1 << 31)
  return refill


def _shr(x: Tensor, k: int) -> Tensor: return x._binary(Ops.IDIV, 1 << k)   # x >= 0: C's / is a shift


def hash32(x: Tensor) -> Tensor:
  """An int64 Tensor of values in [0, 2^32) mixed into another: each round x ^= x >> s, then x = x * m mod 2^32."""
  for s, m in ROUNDS: x = ((x ^ _shr(x, s)) * m) & MASK32
  return x ^ _shr(x, 16)


def uniform(shape: tuple[int, ...], seed: Tensor) -> Tensor:
  """float32 in [0, 1) of the given shape: the top 24 bits of hash(spread seed ^ element index), over 2^24."""
  n = int(np.prod(shape))
  idx = Tensor.arange(n).cast(dtypes.i64).reshape(shape)
  spread = (seed.reshape((1,) * len(shape)) * SEED_MUL) & MASK32
  bits = hash32(idx ^ spread)
  return _shr(bits, 8).cast(dtypes.f32) * (1.0 / (1 << 24))


# ---- the reference: the same numbers with NumPy ----
def hash32_numpy(x: np.ndarray) -> np.ndarray:
  x = x.astype(np.int64)
  for s, m in ROUNDS: x = ((x ^ (x >> s)) * m) & MASK32
  return x ^ (x >> 16)


def uniform_numpy(shape: tuple[int, ...], seed: int) -> np.ndarray:
  idx = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
  bits = hash32_numpy(idx ^ ((np.int64(seed) * SEED_MUL) & MASK32))
  return ((bits >> 8).astype(np.float32) * np.float32(1.0 / (1 << 24)))


__all__ = ["draw_seed", "refill_of", "hash32", "uniform", "hash32_numpy", "uniform_numpy"]

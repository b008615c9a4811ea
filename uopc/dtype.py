"""Data types: what a value is in Python and in NumPy. How each is spelled in a kernel is the renderer's business
(uopc.renderer: each dialect has its table of type names)."""
from __future__ import annotations
from dataclasses import dataclass
import numpy as np


@dataclass(frozen=True, eq=True)
class DType:
  name: str
  itemsize: int
  kind: str       # "f" float, "i" signed int, "u" unsigned int, "b" bool, "v" void

  def __repr__(self): return f"dtypes.{self.name}"
  @property
  def is_float(self) -> bool: return self.kind == "f"
  @property
  def is_int(self) -> bool: return self.kind in "iu"


class dtypes:
  f32 = float32 = DType("f32", 4, "f")
  f64 = float64 = DType("f64", 8, "f")
  f16 = float16 = DType("f16", 2, "f")
  i32 = int32 = DType("i32", 4, "i")
  i64 = int64 = DType("i64", 8, "i")
  u8 = uint8 = DType("u8", 1, "u")
  bool = DType("bool", 1, "b")
  void = DType("void", 0, "v")
  int = i32      # the type of loop indices
  default_float = f32

  @staticmethod
  def from_py(x) -> DType:
    if isinstance(x, bool): return dtypes.bool
    if isinstance(x, int): return dtypes.int
    if isinstance(x, float): return dtypes.default_float
    raise TypeError(f"no dtype for Python value {x!r} of type {type(x).__name__}")


_TO_NP = {dtypes.f32: np.float32, dtypes.f64: np.float64, dtypes.f16: np.float16, dtypes.i32: np.int32,
          dtypes.i64: np.int64, dtypes.u8: np.uint8, dtypes.bool: np.bool_}
_FROM_NP = {np.dtype(v): k for k, v in _TO_NP.items()}


def np_dtype(d: DType) -> np.dtype:
  if d not in _TO_NP: raise TypeError(f"{d} has no NumPy equivalent")
  return np.dtype(_TO_NP[d])


def from_np(d) -> DType:
  d = np.dtype(d)
  if d not in _FROM_NP:
    raise TypeError(f"NumPy dtype {d} is not supported, use one of {sorted(str(k) for k in _FROM_NP)}")
  return _FROM_NP[d]

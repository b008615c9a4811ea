"""Data types: what a value is in Python and in NumPy. How each is spelled in a kernel is the renderer's business
(uopc.renderer: each dialect has its table of type names)."""
from __future__ import annotations
import functools
from dataclasses import dataclass
import numpy as np


_MADE: dict[tuple, DType] = {}   # (name, itemsize, kind, count) -> the one DType with those fields


@dataclass(frozen=True, eq=False)
class DType:
  name: str
  itemsize: int   # bytes of one lane
  kind: str       # "f" float, "i" signed int, "u" unsigned int, "b" bool, "v" void
  count: int = 1  # lanes: 1 for a scalar; dtypes.f32.vec(16) is 16 floats in one register (chapter 10, vector code)

  # one object per value: DType(...) gives back the dtype made before with those fields, so equal dtypes are one
  # object and == and hash are object identity, at C speed (every UOp's key in the node table holds its dtype, and
  # a dataclass's generated __hash__ and __eq__ are Python code run at every node built)
  def __new__(cls, name: str, itemsize: int, kind: str, count: int = 1):
    return _MADE.setdefault((name, itemsize, kind, count), object.__new__(cls))
  # an unpickled dtype is looked up by its fields, not restored as a second object
  def __reduce__(self): return DType, (self.name, self.itemsize, self.kind, self.count)
  def __repr__(self): return f"dtypes.{self.name}" + (f".vec({self.count})" if self.count > 1 else "")
  def vec(self, lanes: int) -> DType:
    """This scalar dtype with `lanes` lanes: one node of the loop IR then computes `lanes` values at once."""
    if type(lanes) is not int or lanes < 1: raise ValueError(f"a vector needs lanes >= 1, got {lanes!r}")
    if self.count != 1: raise TypeError(f"{self!r} is already a vector")
    if self.kind == "v": raise TypeError("void has no vectors")
    return self if lanes == 1 else _vector(self, lanes)
  @property
  def scalar(self) -> DType:
    """One lane of this dtype (itself for a scalar)."""
    return self if self.count == 1 else _SCALARS[self.name]
  @property
  def is_float(self) -> bool: return self.kind == "f"
  @property
  def is_int(self) -> bool: return self.kind in "iu"
  @property
  def is_unsigned(self) -> bool: return self.kind == "u"
  @property
  def min(self):
    """The smallest value (dtypes.int.min == -2**31; -inf for floats), like torch.iinfo / tinygrad's dtypes.min."""
    return _limits(self)[0]
  @property
  def max(self):
    """The largest value (dtypes.int.max == 2**31 - 1; inf for floats)."""
    return _limits(self)[1]


class dtypes:
  f32 = float32 = DType("f32", 4, "f")
  f64 = float64 = DType("f64", 8, "f")
  f16 = float16 = DType("f16", 2, "f")
  i32 = int32 = DType("i32", 4, "i")
  i64 = int64 = DType("i64", 8, "i")
  u8 = uint8 = DType("u8", 1, "u")
  u32 = uint32 = DType("u32", 4, "u")
  u64 = uint64 = DType("u64", 8, "u")
  i8 = int8 = DType("i8", 1, "i")
  bool = DType("bool", 1, "b")
  void = DType("void", 0, "v")
  int = i32      # the type of loop indices
  # tinygrad's C-style aliases (dtypes.half, dtypes.float, dtypes.long...), so its users' code reads the same here
  half, float, double, long, char, uchar, uint, ulong = f16, f32, f64, i64, i8, u8, u32, u64
  default_float = f32

  @staticmethod
  def from_py(x) -> DType:
    if isinstance(x, (bool, np.bool_)): return dtypes.bool            # NumPy scalars count as Python's
    if isinstance(x, (int, np.integer)): return dtypes.int
    if isinstance(x, (float, np.floating)): return dtypes.default_float
    raise TypeError(f"no dtype for Python value {x!r} of type {type(x).__name__}")


_SCALARS = {d.name: d for d in vars(dtypes).values() if isinstance(d, DType)}


@functools.cache
def _vector(d: DType, lanes: int) -> DType:
  """One object per (dtype, lanes), so `is` compares vector dtypes as it compares scalar ones."""
  return DType(d.name, d.itemsize, d.kind, lanes)


_TO_NP = {dtypes.f32: np.float32, dtypes.f64: np.float64, dtypes.f16: np.float16, dtypes.i32: np.int32,
          dtypes.i64: np.int64, dtypes.u8: np.uint8, dtypes.i8: np.int8, dtypes.u32: np.uint32, dtypes.u64: np.uint64,
          dtypes.bool: np.bool_}
_FROM_NP = {np.dtype(v): k for k, v in _TO_NP.items()}


# a dtype by name: NumPy's spellings (np.dtype(name) knows them) and PyTorch's own ("float", "long", "half", ...)
_TORCH_NAMES = {"float": dtypes.f32, "double": dtypes.f64, "half": dtypes.f16, "long": dtypes.i64, "int": dtypes.i32,
                "bool": dtypes.bool, "uint8": dtypes.u8, "int8": dtypes.i8, "float32": dtypes.f32,
                "float64": dtypes.f64, "float16": dtypes.f16, "int32": dtypes.i32, "int64": dtypes.i64,
                "uint32": dtypes.u32, "uint64": dtypes.u64, **{d.name: d for d in vars(dtypes).values()
                                                               if isinstance(d, DType) and d.kind != "v"}}


def to_dtype(d) -> DType:
  """d as a DType: a DType, a name ("float32", "int", "long", "f32", "torch.float16"), a NumPy dtype or type, a
  PyTorch dtype, or Python's bool/int/float. Anything else is a TypeError that names it."""
  if isinstance(d, DType): return d
  if d in (bool, int, float): return {bool: dtypes.bool, int: dtypes.int, float: dtypes.default_float}[d]
  name = str(d)
  if name.startswith("torch."): name = name[6:]
  if name in _TORCH_NAMES: return _TORCH_NAMES[name]
  try: return from_np(np.dtype(d))
  except TypeError: pass
  raise TypeError(f"not a dtype uopc has: {d!r} (use a uopc.dtype.dtypes member or one of the names "
                  f"{sorted(_TORCH_NAMES)})")


def np_dtype(d: DType) -> np.dtype:
  if d not in _TO_NP: raise TypeError(f"{d} has no NumPy equivalent")
  return np.dtype(_TO_NP[d])


def from_np(d) -> DType:
  d = np.dtype(d)
  if d not in _FROM_NP:
    raise TypeError(f"NumPy dtype {d} is not supported, use one of {sorted(str(k) for k in _FROM_NP)}")
  return _FROM_NP[d]


def _limits(d: DType) -> tuple:
  if d.is_float: return (-float("inf"), float("inf"))
  if d is dtypes.bool: return (False, True)
  if d.is_unsigned: return (0, 2 ** (8 * d.itemsize) - 1)
  if d.is_int: return (-2 ** (8 * d.itemsize - 1), 2 ** (8 * d.itemsize - 1) - 1)
  raise TypeError(f"{d} has no range of values")


# ---- promotion: which dtype an op between two dtypes computes in ----
# One chain, as PyTorch and tinygrad order them: any float beats any integer, a wider type beats a narrower one.
# (NumPy differs in one place: int64 with float32 gives float64 there; here, as in PyTorch, float32.)
# uint8 with int8 needs int16, which uopc lacks: int32, the next wider type that holds both.
PROMOTION_ORDER = (dtypes.bool, dtypes.u8, dtypes.i8, dtypes.i32, dtypes.u32, dtypes.i64, dtypes.u64, dtypes.f16,
                   dtypes.f32, dtypes.f64)


def least_upper_dtype(*ds: DType) -> DType:
  """The smallest dtype every one of ds converts to: least_upper_dtype(i32, i64) is i64, (i64, f16) is f16."""
  for d in ds:
    if d not in PROMOTION_ORDER: raise TypeError(f"{d} does not take part in type promotion")
  if dtypes.u8 in ds and dtypes.i8 in ds: ds = ds + (dtypes.i32,)
  if dtypes.u32 in ds and any(d.kind == "i" for d in ds): ds = ds + (dtypes.i64,)   # holds both, as NumPy
  return max(ds, key=PROMOTION_ORDER.index)


def scalar_dtype(d: DType, x) -> DType:
  """The dtype of `tensor op x` for a Python scalar x: a scalar only widens the kind (int tensor + 0.5 is float,
  bool tensor + 1 is int); otherwise the tensor's dtype wins (a float16 tensor * 2.0 stays float16)."""
  kind = dtypes.from_py(x)
  if kind.is_float and not d.is_float: return dtypes.default_float
  if kind.is_int and d is dtypes.bool: return dtypes.int
  return d


def sum_dtype(d: DType) -> DType:
  """The dtype a sum accumulates in: integers and bools widen to int64 (as NumPy and PyTorch), floats stay."""
  return d if d.is_float else dtypes.i64


# ---- Python data -> NumPy: the dtype a Tensor made from a list gets ----
def to_array(data, dtype: DType | None = None) -> np.ndarray:
  """data as a NumPy array: Python floats become float32; Python ints int32, or int64 where a value needs it."""
  if dtype is not None: dtype = to_dtype(dtype)
  arr = np.asarray(data)
  if arr.dtype == object:
    raise TypeError(f"cannot make a Tensor from {_short(data)}: not numbers of one kind (an int beyond 64 bits, None?)")
  python = not isinstance(data, np.ndarray)
  if dtype is not None:
    if dtype.is_int and arr.dtype.kind in "iub" and arr.size and (arr.min() < dtype.min or arr.max() > dtype.max):
      raise OverflowError(f"values of {_short(data)} do not fit in {dtype} ({dtype.min} .. {dtype.max})")
    return arr.astype(np_dtype(dtype))
  if python and arr.dtype == np.float64: return arr.astype(np.float32)
  if python and arr.dtype == np.uint64: raise OverflowError(f"{_short(data)}: integers beyond int64 are not supported")
  if python and arr.dtype == np.int64:
    fits = not arr.size or (dtypes.int.min <= arr.min() and arr.max() <= dtypes.int.max)
    return arr.astype(np.int32) if fits else arr
  return arr


def _short(data) -> str:
  r = repr(data)
  return r if len(r) < 60 else r[:57] + "..."

"""NumPy's integer meaning in C's text: what the renderer writes where C's own operator means something else.

C and NumPy agree on most integer ops; where they do not, the C is undefined or traps (NOTES 35):
- signed + and * that overflow are undefined: gcc at -O3 folds `(x + 1) > x` to 1. NumPy wraps. Written through
  the unsigned type, whose arithmetic wraps by definition: `((int)((unsigned int)a+(unsigned int)b))`.
- INT_MIN / -1 and INT_MIN % -1 trap (SIGFPE on x86). NumPy gives INT_MIN and 0. A divisor that is not a positive
  constant is tested for -1 first. (x / 0 never reaches C: Tensor's // and % replace a zero divisor.)
- a value narrower than int (uint8, int8) is promoted to int, so `(a + b) < c` compares 260 where NumPy compares 4:
  each such result is cast back to its type.
- a float out of an integer's range (NaN, inf, 3e9 to int32) is undefined; x86's conversion gives INT_MIN, and so
  does NumPy; gcc may fold `(float)(int)x` to a truncation that keeps the value. Written with a range test that
  gives INT_MIN; uint8 and int8 are converted through int32 and wrapped, as NumPy does on x86.
- _Float16 arithmetic is done in float and rounded only where gcc chooses: each float16 result is cast to
  _Float16, which rounds (300*300/1000 is inf, as in NumPy, not 90). OpenCL computes halves in float
  (r.rounded_to_half rounds there): each op's result is a half, as NumPy's and PyTorch's are.
Index arithmetic (loop variables, constants) never overflows and keeps C's plain text: only values read from memory
get the unsigned form, and a division by a positive constant is written as C's.
"""
from __future__ import annotations
import functools
from typing import Any
from uopc.dtype import dtypes
from uopc.helpers import cache
from uopc.uop import UOp, Ops

Renderer = Any   # a uopc.renderer.CStyleRenderer (not imported: the renderer imports this module)

WRAPS = {Ops.ADD: "+", Ops.MUL: "*"}
NARROW_OPS = {Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR}
F16_ROUNDS = {Ops.ADD, Ops.MUL, Ops.RECIP, Ops.EXP2, Ops.LOG2, Ops.SQRT, Ops.SIN}
MEMORY = {Ops.LOAD, Ops.INDEX, Ops.AFTER, Ops.ALLOC, Ops.BUFFER}
LEAVES = {Ops.CONST, Ops.RANGE, Ops.SPECIAL}


@functools.lru_cache(maxsize=1 << 14)
def from_memory(u: UOp) -> bool:
  """u's value depends on a value read from memory (a loaded value can be anything; a loop index cannot overflow)."""
  if u.op in MEMORY: return True
  return u.op not in LEAVES and any(from_memory(s) for s in u.src)


cache("codegen.cint.from_memory", from_memory)


def nan_max(r: Renderer, d, a: str, b: str) -> str:
  """max(a, b) that is NaN when either is, as NumPy's and PyTorch's max: `a!=a` keeps a NaN in a, the compare gives
  b when b is NaN. The book's ((a>b)?a:b) (r.book_max) returns b when a is NaN, so a max reduction's update
  acc = ((acc>x)?acc:x) drops a NaN the moment a number follows it (chapter 11's pitfall)."""
  if r.book_max or not d.is_float: return f"(({a}>{b})?{a}:{b})"
  return f"(({a}>{b}||{a}!={a})?{a}:{b})"


@functools.cache
def book_variant(cls: type) -> Any:
  """The dialect `cls` writing a float MAX as the book prints it (Options.book_max): one subclass per dialect."""
  return type(f"{cls.__name__}_book_max", (cls,), {"book_max": True})()


def _positive_const(u: UOp) -> bool: return u.op is Ops.CONST and u.arg > 0


def _int_min(r: Renderer, bits: int) -> str:
  return f"(-{2 ** (bits - 1) - 1}{'ll' if bits == 64 else ''}-1)"   # -2147483648 is unary minus on a too-big literal


def float_to_int(r: Renderer, d, x: str) -> str:
  """(T)x where x is in T's range, else T's minimum (x86's and NumPy's answer); 8-bit types go through int32."""
  bits = 64 if d.itemsize == 8 else 32
  wide = r.type(dtypes.i64 if bits == 64 else dtypes.i32)
  lim = f"{float(2 ** (bits - 1))!r}"
  conv = f"((({x})>=-{lim}&&({x})<{lim})?({wide})({x}):{_int_min(r, bits)})"
  return conv if d.itemsize >= 4 else f"(({r.type(d)}){conv})"


def int_semantics(r: Renderer, u: UOp, srcs: list[str]) -> str | None:
  """The text of scalar ALU op u where NumPy's meaning needs more than the dialect's table gives, else None."""
  d = u.dtype
  if d.count > 1 or any(s.dtype.count > 1 for s in u.src): return None
  if u.op is Ops.CAST and d.is_int and u.src[0].dtype.is_float: return float_to_int(r, d, srcs[0])
  if d is dtypes.f16 and u.op in F16_ROUNDS: return r.rounded_to_half(r.code_for_op[u.op](r, d, *srcs))
  if not d.is_int or u.op not in NARROW_OPS: return None
  text = r.code_for_op[u.op](r, d, *srcs)
  if d.itemsize < 4: return f"(({r.type(d)}){text})"   # C computed it in int: wrap it back
  if d.is_unsigned: return None
  if u.op in (Ops.IDIV, Ops.MOD) and not _positive_const(u.src[1]):
    t, ut = r.type(d), "unsigned " + r.type(d)
    a, b = srcs
    return f"(({b})==-1?({t})(0u-({ut}){a}):{text})" if u.op is Ops.IDIV else f"(({b})==-1?0:{text})"
  if u.op in WRAPS and from_memory(u):
    t, ut = r.type(d), "unsigned " + r.type(d)
    a, b = srcs
    return f"(({t})(({ut}){a}{WRAPS[u.op]}({ut}){b}))"
  return None

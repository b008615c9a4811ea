"""Index algebra: constant folding and simplification that knows the bounds of every loop variable.

  ((i*N + j)//N) % N  ->  i        (0 <= j < N, so j//N is 0)
  ((i*N + j)//1) % N  ->  j        (i*N is a multiple of N)

Integer division and modulo follow C (truncation); the rules that move terms across // and % only
fire when the operands are known to be non-negative, where C and Python agree.
"""
from __future__ import annotations
import math
import operator
from uopc.uop import UOp, Ops, Pat, Rule, graph_rewrite, ALU
from uopc.dtype import dtypes

INT_LIMITS = {dtypes.i32: (-2**31, 2**31 - 1), dtypes.i64: (-2**63, 2**63 - 1), dtypes.u8: (0, 255),
              dtypes.i8: (-128, 127), dtypes.bool: (0, 1), dtypes.u32: (0, 2**32 - 1), dtypes.u64: (0, 2**64 - 1)}


def ranges_in(*us: UOp) -> list[UOp]:
  """The loop variables (RANGEs) an expression mentions, by id. Ask this of a simplified expression (NOTES 12)."""
  found = {r for u in us for r in u.toposort() if r.op is Ops.RANGE}
  return sorted(found, key=lambda r: r.arg[0])


# ---- bounds ----
def bounds(u: UOp) -> tuple[float, float]:
  """(lowest, highest) value u can take. Loop variables give the facts; everything else is interval arithmetic."""
  if "_bounds" in u.__dict__: return u.__dict__["_bounds"]
  b = _bounds(u)
  u.__dict__["_bounds"] = b
  return b


def _bounds(u: UOp) -> tuple[float, float]:
  if u.op is Ops.CONST: return (u.arg, u.arg)
  if u.dtype.is_float: return (-math.inf, math.inf)
  lim = INT_LIMITS.get(u.dtype, (-math.inf, math.inf))
  if u.op in (Ops.RANGE, Ops.SPECIAL): return (0, bounds(u.src[0])[1] - 1)
  s = [bounds(x) for x in u.src]
  if u.op is Ops.ADD: return (s[0][0] + s[1][0], s[0][1] + s[1][1])
  if u.op is Ops.MUL:
    if any(math.isinf(v) for v in s[0] + s[1]): return lim
    products = [a * b for a in s[0] for b in s[1]]
    return (min(products), max(products))
  if u.op is Ops.IDIV and u.src[1].op is Ops.CONST and u.src[1].arg > 0 and s[0][0] >= 0:
    return (s[0][0] // u.src[1].arg, s[0][1] // u.src[1].arg)
  if u.op is Ops.MOD and u.src[1].op is Ops.CONST and u.src[1].arg > 0 and s[0][0] >= 0:
    c = u.src[1].arg
    return s[0] if s[0][1] < c else (0, c - 1)
  if u.op is Ops.MAX: return (max(s[0][0], s[1][0]), max(s[0][1], s[1][1]))
  if u.op is Ops.WHERE: return (min(s[1][0], s[2][0]), max(s[1][1], s[2][1]))
  if u.op in (Ops.CMPLT, Ops.CMPNE, Ops.AND, Ops.OR) and u.dtype is dtypes.bool: return (0, 1)
  return lim


# ---- evaluation (the reference every rule is tested against) ----
def _cdiv(a, b):
  if isinstance(a, float) or isinstance(b, float): return int(a / b)
  return (abs(a) // abs(b)) * (1 if (a >= 0) == (b > 0) else -1)   # C truncates toward zero
def _cmod(a, b): return a - b * _cdiv(a, b)


EVAL = {Ops.ADD: operator.add, Ops.MUL: operator.mul, Ops.IDIV: _cdiv, Ops.MOD: _cmod, Ops.MAX: max,
        Ops.CMPLT: operator.lt, Ops.CMPNE: operator.ne, Ops.AND: operator.and_, Ops.OR: operator.or_,
        Ops.XOR: operator.xor, Ops.WHERE: lambda c, a, b: a if c else b, Ops.RECIP: lambda x: 1 / x,
        Ops.EXP2: lambda x: 2.0 ** x, Ops.LOG2: math.log2, Ops.SQRT: math.sqrt, Ops.SIN: math.sin}


def evaluate(u: UOp, env: dict[UOp, int | float]) -> int | float:
  """The value of an expression, given values for its RANGEs (and any other leaves) in env."""
  vals: dict[UOp, int | float] = {}
  for x in u.toposort():
    if x in env: vals[x] = env[x]
    elif x.op is Ops.CONST: vals[x] = x.arg
    elif x.op is Ops.CAST: vals[x] = (float if x.dtype.is_float else int)(vals[x.src[0]])
    elif x.op in EVAL: vals[x] = EVAL[x.op](*[vals[s] for s in x.src])
    else: raise ValueError(f"evaluate: no value for {x.op}")
  return vals[u]


# ---- the rules ----
def fold_constants(x: UOp) -> UOp | None:
  if x.op not in ALU or x.op is Ops.CAST or not all(s.op is Ops.CONST for s in x.src): return None
  try: v = EVAL[x.op](*[s.arg for s in x.src])
  except (ZeroDivisionError, ValueError, OverflowError): return None   # leave it to run time, as C would
  return UOp.const(v, x.dtype)


def linear_form(u: UOp) -> tuple[dict[UOp, int], int]:
  """An integer expression as sum(coeff * term) + const, terms in the order they first appear."""
  if u.op is Ops.CONST: return {}, u.arg
  if u.op is Ops.ADD:
    (ta, ca), (tb, cb) = linear_form(u.src[0]), linear_form(u.src[1])
    for t, k in tb.items(): ta[t] = ta.get(t, 0) + k
    return ta, ca + cb
  if u.op is Ops.MUL and (u.src[1].op is Ops.CONST or u.src[0].op is Ops.CONST):
    x, c = (u.src[0], u.src[1].arg) if u.src[1].op is Ops.CONST else (u.src[1], u.src[0].arg)
    t, k0 = linear_form(x)
    return {term: k * c for term, k in t.items()}, k0 * c
  return {u: 1}, 0


def from_linear(terms: dict[UOp, int], const: int, dtype) -> UOp:
  """Rebuild left to right, constant last: (((a*4096)+b)+1024) shares its prefix with ((a*4096)+b)."""
  out = None
  for t, k in terms.items():
    if k == 0: continue
    piece = t if k == 1 else UOp(Ops.MUL, (t, UOp.const(k, dtype)))
    out = piece if out is None else UOp(Ops.ADD, (out, piece))
  if out is None: return UOp.const(const, dtype)
  return UOp(Ops.ADD, (out, UOp.const(const, dtype))) if const else out


def canonical_sum(x: UOp) -> UOp | None:
  terms, c = linear_form(x)
  new = from_linear(terms, c, x.dtype)
  return None if new is x else new


def _split(x: UOp, c: int) -> tuple[dict[UOp, int], dict[UOp, int], int]:
  """x's terms divisible by c (coefficients divided), the other terms, and x's constant."""
  terms, k0 = linear_form(x)
  div = {t: k // c for t, k in terms.items() if k % c == 0}
  rest = {t: k for t, k in terms.items() if k % c != 0}
  return div, rest, k0


def simplify_idiv(x: UOp, c: UOp) -> UOp | None:
  n = c.arg
  if n == 1: return x
  lo, hi = bounds(x)
  if n <= 0 or lo < 0: return None
  if lo // n == hi // n: return UOp.const(int(lo // n), x.dtype)               # x // n is the same for every x
  if x.op is Ops.IDIV and x.src[1].op is Ops.CONST and x.src[1].arg > 0:      # (a // b) // n -> a // (b*n)
    return UOp(Ops.IDIV, (x.src[0], UOp.const(x.src[1].arg * n, x.dtype)))
  div, rest, k0 = _split(x, n)
  if not div and k0 < n: return None
  rest_x = from_linear(rest, k0 % n, x.dtype)
  rlo, rhi = bounds(rest_x)
  if rlo < 0: return None
  q = from_linear(div, k0 // n, x.dtype)
  if rlo // n == rhi // n: return q + int(rlo // n) if rlo // n else q      # (a*n + b)//n -> a, when 0 <= b < n
  return q + UOp(Ops.IDIV, (rest_x, c))                                      # (a*n + b)//n -> a + b//n


def simplify_mod(x: UOp, c: UOp) -> UOp | None:
  n = c.arg
  if n == 1: return UOp.const(0, x.dtype)
  lo, hi = bounds(x)
  if n <= 0 or lo < 0: return None
  if hi < n: return x                                                       # 0 <= x < n
  div, rest, k0 = _split(x, n)
  wide = {t: k % n for t, k in rest.items() if k > n}                         # (a*(n+1) + b) % n -> (a + b) % n
  if not div and k0 < n and not wide: return None
  rest_x = from_linear(rest | wide, k0 % n, x.dtype)
  if bounds(rest_x)[0] < 0: return None
  if bounds(rest_x)[1] < n: return rest_x                                    # a window's index: no % left (conv)
  return UOp(Ops.MOD, (rest_x, c))                                            # (a*n + b) % n -> b % n


def fold_by_bounds_lt(a: UOp, b: UOp) -> UOp | None:
  (alo, ahi), (blo, bhi) = bounds(a), bounds(b)
  if ahi < blo: return UOp.const(True)
  if alo >= bhi: return UOp.const(False)
  return None


def fold_by_bounds_max(a: UOp, b: UOp) -> UOp | None:
  (alo, ahi), (blo, bhi) = bounds(a), bounds(b)
  if a.dtype.is_float: return None
  if alo >= bhi: return a
  if blo >= ahi: return b
  return None


x, y, c, z = Pat.var("x", "iu"), Pat.var("y"), Pat.cvar("c"), Pat.var("z")
any_alu = Pat(ALU, name="x")

symbolic_rules: list[Rule] = [
  (any_alu, fold_constants),                                                          # 2*3 -> 6
  (Pat({Ops.ADD, Ops.MUL}, name="x", dtype_kind="iu"), canonical_sum),                # (a+b)*4 + a -> a*5 + b*4
  (Pat(Ops.IDIV, (Pat.var("x", "iu"), c)), lambda x, c: simplify_idiv(x, c)),         # (a*n + b)//n -> a
  (Pat(Ops.MOD, (Pat.var("x", "iu"), c)), lambda x, c: simplify_mod(x, c)),           # (a*n + b)%n -> b
  (Pat(Ops.CMPLT, (Pat.var("a", "iub"), Pat.var("b", "iub"))), fold_by_bounds_lt),      # ridx < 9999 -> True
  (Pat(Ops.MAX, (Pat.var("a"), Pat.var("b"))), lambda a, b: fold_by_bounds_max(a, b)),  # max(ridx, 0) -> ridx
  (Pat(Ops.WHERE, (Pat.cvar("c"), y, z)), lambda c, y, z: y if c.arg else z),         # True ? y : z -> y
  (Pat(Ops.WHERE, (Pat.var("c"), y, y)), lambda c, y: y),                             # c ? y : y -> y
]


def simplify(u: UOp) -> UOp:
  """u with every rule of symbolic_rules applied until none fires."""
  return graph_rewrite(u, symbolic_rules)


# ---- two rules more, for the index of a merged pair of axes (uopc.codegen.gemm_vec: dW sums over batch and time) ----
# Not in symbolic_rules: the book's simplify leaves (x//c)*c + x%c alone, and week 2's assignment has students write
# that rule themselves. simplify_index is simplify plus these two.
def recombine_div_mod(terms: dict[UOp, int], const: int) -> tuple[dict[UOp, int], int]:
  """(a//n)*(n*k) + (a%n)*k -> a*k: a quotient and its remainder put back together (C's / and % keep
  a == (a/n)*n + a%n for every a, negative too). A merged pair of axes indexes this way (dW: batch and time)."""
  again = True
  while again:
    again = False
    for r, k in terms.items():
      if r.op is not Ops.MOD or r.src[1].op is not Ops.CONST or not k: continue
      a, n = r.src
      q = next((t for t, kq in terms.items() if t.op is Ops.IDIV and t.src[0] is a and t.src[1].op is Ops.CONST
                and t.src[1].arg == n.arg and kq == k * n.arg), None)
      if q is None: continue
      terms = {t: c for t, c in terms.items() if t is not q and t is not r}
      ta, ca = linear_form(a)
      for t, c in ta.items(): terms[t] = terms.get(t, 0) + c * k
      const, again = const + ca * k, True
      break
  return terms, const


def _factor(x: UOp, n: int) -> tuple[UOp, int, UOp] | None:
  """x as f*y + r with f dividing n, y >= 0 and 0 <= r < f (the largest such f), or None: then x // n is y // (n/f)
  and x % n is (y % (n/f))*f + r. (k*64 + j) // 2048 with 0 <= j < 64 is k // 32."""
  terms, k0 = linear_form(x)
  for f in sorted({k for k in terms.values() if k > 1 and n % k == 0}, reverse=True):
    big = {t: k // f for t, k in terms.items() if k % f == 0}
    y, r = from_linear(big, 0, x.dtype), from_linear({t: k for t, k in terms.items() if k % f}, k0, x.dtype)
    if bounds(y)[0] >= 0 and bounds(r)[0] >= 0 and bounds(r)[1] < f: return y, f, r
  return None


def recombine(x: UOp) -> UOp | None:
  terms, c = linear_form(x)
  new_terms, new_c = recombine_div_mod(dict(terms), c)
  return None if (new_terms, new_c) == (terms, c) else from_linear(new_terms, new_c, x.dtype)


def factor_idiv(x: UOp, c: UOp) -> UOp | None:
  n = c.arg
  if n <= 1 or (fyr := _factor(x, n)) is None: return None
  y, f, _ = fyr
  return y if n == f else UOp(Ops.IDIV, (y, UOp.const(n // f, x.dtype)))


def factor_mod(x: UOp, c: UOp) -> UOp | None:
  n = c.arg
  if n <= 1 or (fyr := _factor(x, n)) is None: return None
  y, f, r = fyr
  return r if n == f else UOp(Ops.MOD, (y, UOp.const(n // f, x.dtype))) * f + r


index_rules: list[Rule] = symbolic_rules + [
  (Pat(Ops.ADD, name="x", dtype_kind="iu"), recombine),                               # (k//32)*64 + (k%32)*2 -> k*2
  (Pat(Ops.IDIV, (Pat.var("x", "iu"), c)), lambda x, c: factor_idiv(x, c)),           # (k*64 + j)//2048 -> k//32
  (Pat(Ops.MOD, (Pat.var("x", "iu"), c)), lambda x, c: factor_mod(x, c)),             # (k*64 + j)%2048 -> (k%32)*64+j
]


def simplify_index(u: UOp) -> UOp:
  """simplify, and index_rules' two more."""
  return graph_rewrite(u, index_rules)

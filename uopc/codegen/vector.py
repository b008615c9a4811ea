"""Vector code (chapter 10): what a vector of lanes is in C, and the lane reductions the IR builds from GEPs.

A loop-IR node whose dtype has lanes (dtypes.f32.vec(16)) computes that many values at once. The C renderer spells
it with GCC's vector extensions, which gcc and clang both read:

  typedef float f32x16 __attribute__((vector_size(64)));

Arithmetic and comparisons work on whole vectors (a comparison gives a mask of -1/0 lanes), a scalar meets a vector
by being broadcast, v[i] reads a lane. C has no `?:` on vectors, so a select is a bitwise blend, and MAX and EXP2 are
small always-inline functions here: a call would clobber every vector register, and a register tile lives in them.

Lanes go to and from memory through a pointer to the `_u` twin of a vector type: any alignment, allowed to alias the
scalars (the compilers' own _mm512_loadu_ps is written so). One instruction, whatever -mprefer-vector-width says.
"""
from __future__ import annotations
from uopc.dtype import DType, dtypes
from uopc.uop import UOp

def c_vector_name(d: DType) -> str:
  """f32x16, i32x8, m32x16 (a bool vector: a comparison's mask of 32-bit lanes)."""
  if d.kind == "b": return f"m32x{d.count}"
  return f"{d.name}x{d.count}"


def c_typedefs(used: set[DType], scalar_type, book_max: bool = False, sqrt: bool = False,
               exp2: bool = False) -> list[str]:
  """The typedef of every vector dtype the kernel uses, the select and max of its 32-bit vectors, and the exp2 and
  square root of its float ones where the kernel takes one on vectors (exp2, sqrt): x86's exp2 forms include
  <immintrin.h>, whose parse is most of a small kernel's compile (NOTES 65). book_max (Options.book_max): a float max
  as the book's ((a>b)?a:b), lane by lane."""
  out: list[str] = []
  lanes = sorted({d.count for d in used})
  masks = {n: f"m32x{n}" for n in lanes}
  for d in sorted(used, key=lambda d: (d.kind == "b", d.name, d.count)):
    if d.kind == "b": continue
    # (bytes, u8, are only loaded to be widened: a bool mask read from memory)
    if d.itemsize != 4 and d.scalar is not dtypes.u8 and any(u.kind == "b" and u.count == d.count for u in used):
      raise NotImplementedError(f"a mask of {d!r}: vector comparisons are supported on 32-bit lanes only")
    size = d.itemsize * d.count
    out.append(f"typedef {scalar_type(d.scalar)} {c_vector_name(d)} __attribute__((vector_size({size})));")
    # what a load or store of consecutive elements goes through: any alignment, and allowed to alias the scalars
    # (how the compilers' own _mm512_loadu_ps is written)
    out.append(f"typedef {scalar_type(d.scalar)} {c_vector_name(d)}_u __attribute__((vector_size({size}), aligned("
               f"{d.itemsize}), may_alias));")
  for n in lanes:   # every vector kernel may compare, so each lane count has its mask type
    out.append(f"typedef int {masks[n]} __attribute__((vector_size({4 * n})));")
  for d in sorted(used, key=lambda d: (d.name, d.count)):
    # an int vector selects with the same mask (the renderer writes WHERE and MAX on it as on floats)
    if d.kind in "fi" and d.itemsize == 4:
      out += _select_helpers(c_vector_name(d), masks[d.count], nan=d.kind == "f" and not book_max)
    if d.kind == "f" and d.itemsize == 4 and exp2: out += _exp2_helpers(c_vector_name(d), masks[d.count])
    if d.kind == "f" and d.itemsize == 4 and sqrt: out += _sqrt_helper(c_vector_name(d), d.count)
    if d.scalar is dtypes.u8: out += _widen_helper(d.count)
  return out


# x86's one instruction that zero-extends bytes to 32-bit lanes (vpmovzxbd), per lane count; gcc 12 writes
# __builtin_convertvector from bytes lane by lane (a load and an insert each, NOTES 38)
_ZX = {16: ("__AVX512F__", "_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)&v))"),
       8: ("__AVX2__", "_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)&v))"),
       4: ("__SSE4_1__", "_mm_cvtepu8_epi32(_mm_cvtsi32_si128(*(const int*)&v))")}


def _widen_helper(n: int) -> list[str]:
  """uopc_widen_u8xN: bytes (a bool mask as memory holds it) to 32-bit lanes, 0 or 1."""
  head = [f"{INLINE} i32x{n} uopc_widen_u8x{n}(u8x{n} v) {{"]
  if n not in _ZX: return head + [f"  return __builtin_convertvector(v, i32x{n});", "}"]
  isa, expr = _ZX[n]
  return [f"#if defined({isa}) && defined(__x86_64__)", "#include <immintrin.h>", *head, f"  return (i32x{n}){expr};",
          "}", "#else", *head, f"  return __builtin_convertvector(v, i32x{n});", "}", "#endif"]


INLINE = "static inline __attribute__((always_inline))"


def _select_helpers(t: str, m: str, nan: bool) -> list[str]:
  # nan: the scalar max's rule (codegen.cint.nan_max), lane by lane: a lane that is NaN in a or in b is NaN, as in
  # NumPy. Without it (integers, Options.book_max) the book's ((a>b)?a:b), which keeps a NaN in b but not one in a
  keep_a = "(a > b) | (a != a)" if nan else "a > b"
  return [
    f"{INLINE} {t} uopc_where_{t}({m} c, {t} a, {t} b) {{ return ({t})((c & ({m})a) | (~c & ({m})b)); }}",
    f"{INLINE} {t} uopc_max_{t}({t} a, {t} b) {{ return uopc_where_{t}({keep_a}, a, b); }}"]


def _exp2_poly(t: str) -> list[str]:
  """2^f for |f| <= 1/2 into p: the Taylor series of every form below, to degree 7 (Horner, a multiply-add a term)."""
  return [
    f"  {t} p = ({t}){{}} + 1.5252733804059841e-05f;",
    "  p = p * f + 1.5403530393381609e-04f; p = p * f + 1.3333558146428443e-03f; p = p * f + 9.6181291076284772e-03f;",
    "  p = p * f + 5.5504108664821580e-02f; p = p * f + 2.4022650695910071e-01f; p = p * f + 6.9314718055994531e-01f;",
    "  p = p * f + 1.0f;"]


def _sqrt_helper(t: str, n: int) -> list[str]:
  """uopc_sqrt_T: the square root of each lane, which gcc and clang write as one vsqrtps (IEEE-rounded, as sqrtf)."""
  return [f"{INLINE} {t} uopc_sqrt_{t}({t} x) {{",
          f"  {t} r; for (int k = 0; k < {n}; k++) r[k] = __builtin_sqrtf(x[k]); return r;", "}"]


def _exp2_helpers(t: str, m: str) -> list[str]:
  x86 = {"f32x16": _exp2_avx512, "f32x8": _exp2_avx2}.get(t)   # an #if with x86's own form, the portable one #else
  return [
    # runtime.PRELUDE's exp2f on every lane: 2^x = 2^n 2^f, n = round(x), 2^f by its Taylor series to degree 7.
    # n is found by truncating xc + 127.5 (positive, so truncation is floor), never by adding and subtracting
    # 1.5*2^23, which -fassociative-math would fold away
    *(x86(t) if x86 else []),
    f"{INLINE} {t} uopc_exp2_{t}({t} x) {{",
    f"  {m} lo = x < -126.0f, hi = x > 128.0f;",
    f"  {t} xc = uopc_where_{t}(lo, ({t}){{}} - 126.0f, uopc_where_{t}(hi, ({t}){{}} + 128.0f, x));",
    f"  {m} n = __builtin_convertvector(xc + 127.5f, {m}) - 127;",
    f"  {t} f = xc - __builtin_convertvector(n, {t});",
    *_exp2_poly(t),
    f"  {m} bits = ({m})p + (n << 23);   /* times 2^n in the exponent field; x >= 128 lands on inf */",
    "  /* nan stays nan; below 2^-126: 0 */",
    f"  return uopc_where_{t}(x != x, x, uopc_where_{t}(lo, ({t}){{}}, ({t})bits));",
    "}", *(["#endif"] if x86 else [])]


def _exp2_avx512(t: str) -> list[str]:
  """With AVX-512, vscalefps multiplies by 2^n and gets inf and NaN right itself: half the instructions of the
  portable form (NOTES 24). max(c, x) and min(c, x) return x when x is NaN, so a NaN stays one. The lanes below
  2^-126 are masked off, 0 as in the other forms: a vscalefps whose result underflows takes a microcode assist on
  Intel cores, 24 times the vector's time, and a causal mask's exp(-inf) is half of attention's lanes (NOTES 50)."""
  return [
    "#if defined(__AVX512F__) && defined(__x86_64__)",
    "#include <immintrin.h>",
    f"{INLINE} {t} uopc_exp2_{t}({t} x) {{",
    f"  {t} xc = ({t})_mm512_min_ps(_mm512_set1_ps(150.0f), _mm512_max_ps(_mm512_set1_ps(-150.0f), (__m512)x));",
    f"  {t} n = ({t})_mm512_roundscale_ps((__m512)xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);",
    f"  {t} f = xc - n;",
    *_exp2_poly(t),
    "  __mmask16 normal = _mm512_cmp_ps_mask((__m512)x, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);   /* NaN too */",
    f"  return ({t})_mm512_maskz_scalef_ps(normal, (__m512)p, (__m512)n);",
    "}",
    "#else"]


def _exp2_avx2(t: str) -> list[str]:
  """With AVX2 and FMA: the clamp by vmaxps/vminps, n by vroundps, and one mask for the results below 2^-126, in
  place of the portable form's four selects (NOTES 40). max(c, x) and min(c, x) return x when x is NaN, so a NaN
  stays one (n's bits are then 0 and p is NaN)."""
  return [
    "#if defined(__AVX2__) && defined(__FMA__) && defined(__x86_64__)",
    "#include <immintrin.h>",
    f"{INLINE} {t} uopc_exp2_{t}({t} x) {{",
    f"  {t} xc = ({t})_mm256_min_ps(_mm256_set1_ps(128.0f), _mm256_max_ps(_mm256_set1_ps(-127.0f), (__m256)x));",
    f"  {t} n = ({t})_mm256_round_ps((__m256)xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);",
    f"  {t} f = xc - n;",
    *_exp2_poly(t),
    "  /* times 2^n in the exponent field (x >= 128 lands on inf); below 2^-126: 0 */",
    "  __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32((__m256)n), 23);",
    "  __m256 bits = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256((__m256)p), e));",
    f"  return ({t})_mm256_andnot_ps(_mm256_cmp_ps((__m256)x, _mm256_set1_ps(-126.0f), _CMP_LT_OQ), bits);",
    "}",
    "#else"]


# ---- lane reductions, built in the IR ----
def tree(xs: list[UOp], combine) -> UOp:
  """A balanced tree: log2(lanes) levels of independent ops, not a chain of lanes - 1 dependent ones."""
  while len(xs) > 1:
    xs = [combine(xs[i], xs[i + 1]) if i + 1 < len(xs) else xs[i] for i in range(0, len(xs), 2)]
  return xs[0]


def hsum(v: UOp) -> UOp:
  """The sum of v's lanes, a scalar."""
  return tree(v.lanes(), lambda a, b: a + b) if v.dtype.count > 1 else v


def hmax(v: UOp) -> UOp:
  """The largest of v's lanes, a scalar."""
  return tree(v.lanes(), lambda a, b: a.maximum(b)) if v.dtype.count > 1 else v


def fold(v: UOp, combine) -> UOp:
  """combine over all lanes, a scalar: the high half of the lanes combined with the low half, log2(lanes) times, each
  step one vector op on half as many lanes (the compilers read a half as an extract, not lane by lane)."""
  while v.dtype.count > 1:
    h = v.dtype.count // 2
    half = lambda lo: UOp.vectorize(*[v.gep(i) for i in range(lo, lo + h)]) if h > 1 else v.gep(lo)
    v = combine(half(0), half(h))
  return v


def butterfly(v: UOp, combine) -> UOp:
  """combine over all lanes, the result in every lane: log2(lanes) steps, each v combined with v's lanes swapped
  in pairs 1 apart, then 2, 4, ... (a shuffle and one op each, no lane leaves the register)."""
  n, step = v.dtype.count, v.dtype.count // 2
  if n & (n - 1): raise ValueError(f"butterfly needs a power-of-two number of lanes, got {n}")
  while step:
    v = combine(v, UOp.vectorize(*[v.gep(i ^ step) for i in range(n)]))
    step //= 2
  return v


def vector_dtypes(topo: list[UOp]) -> set[DType]:
  return {u.dtype for u in topo if u.dtype.count > 1}


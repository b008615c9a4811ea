"""Chapter 10, vector code: loop programs whose nodes hold 16 lanes (uopc.codegen.vector), compiled and run on NumPy
arrays.

Each vector kernel is checked against NumPy and, where the scalar kernel defines the meaning (MAX with a NaN), against
the same program built with one lane. Then the lane reductions, the generated code's shape (typedefs only where
vectors are used, flops counted per lane), the errors, the vector FlashAttention kernel against a float64 reference,
and the assembly of its hot loops, which must keep every accumulator in a register.
"""
import math
import platform
import re
import numpy as np
import pytest
from uopc.dtype import dtypes, from_np, np_dtype
from uopc.kernels.flash_vec import FlashVecOpts, LOG2E, flash_vector_ir, kt_panels, default_opts as default_flash_opts
from uopc.kernels.flash_vec_q import FlashQOpts, flash_queries_ir, default_opts as default_queries_opts
from uopc.render_c import C, render, render_c
from uopc.render_gpu import CL, CUDA
from uopc.runtime import FLAGS, Program, compiler, vector_bits
from uopc.runtime.machine import ISAS, X86_LEVELS
from uopc.uop import AxisType, Ops, ParamArg, UOp, range_, sink
from uopc.codegen.vector import butterfly, hmax, hsum

pytestmark = pytest.mark.ch10
W = 16
F32 = dtypes.f32
X86 = platform.machine() in ("x86_64", "AMD64")


def buf(slot: int, n: int, dtype=F32) -> UOp:
  return UOp(Ops.BUFFER, (), ParamArg(slot, dtype, (n,)))


def lanewise_ir(fn, dtypes_in, n: int, out_dtype=F32, lanes: int = W) -> UOp:
  """out[i:i+lanes] = fn(in0[i:i+lanes], in1[i:i+lanes], ...): one loop of n / lanes trips (lanes=1: the scalar
  kernel of the same fn)."""
  ins = [buf(k, n, d) for k, d in enumerate(dtypes_in)]
  i = range_(n // lanes, 0)
  vals = [b.index(i * lanes).load(lanes) for b in ins]
  return sink(buf(len(ins), n, out_dtype).index(i * lanes).store(fn(*vals)).end(i))


def run_lanewise(fn, *xs: np.ndarray, out_dtype=F32, lanes: int = W, flags=None) -> np.ndarray:
  n = xs[0].size
  prog = lanewise_ir(fn, [from_np(x.dtype) for x in xs], n, out_dtype, lanes)
  out = np.zeros(n, np_dtype(out_dtype))
  Program(render_c(prog, "lanewise"), "lanewise", flags)(*xs, out)
  return out


def rand(n: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


# ---- 1. vector load, ALU, store ----
LANEWISE = {   # name: (the IR's fn, NumPy's)
  "add": (lambda a, b: a + b, lambda a, b: a + b),
  "mul": (lambda a, b: a * b, lambda a, b: a * b),
  "sub and divide": (lambda a, b: (a - b) / (b * b + 1.0), lambda a, b: (a - b) / (b * b + 1)),
  "fma with a broadcast scalar": (lambda a, b: a * b + 0.5, lambda a, b: a * b + np.float32(0.5)),
  "max": (lambda a, b: a.maximum(b), np.maximum),
  "where on a vector comparison": (lambda a, b: (a < b).where(a * 2.0, b + 1.0),
                                   lambda a, b: np.where(a < b, a * 2, b + 1)),
}


@pytest.mark.parametrize("fn, ref", LANEWISE.values(), ids=LANEWISE.keys())
def test_lanewise_ops_match_numpy(fn, ref):
  a, b = rand(64), rand(64, seed=1)
  np.testing.assert_allclose(run_lanewise(fn, a, b), ref(a, b), rtol=1e-6, atol=1e-7)


def test_vector_max_propagates_nans_as_the_scalar_max_does():
  """A vector MAX is NaN in every lane where a or b is NaN, as the scalar MAX (codegen.cint.nan_max) and NumPy's
  maximum (issue 30); Options.book_max keeps the book's ((a>b)?a:b) per lane: a NaN in b is kept, one in a is not."""
  a, b = rand(64), rand(64, seed=1)
  a[[1, 5, 9]] = np.nan; b[[5, 7, 20]] = np.nan; b[30] = a[30]   # NaN in a, in both, in b; equal lanes
  vector = run_lanewise(lambda x, y: x.maximum(y), a, b)
  scalar = run_lanewise(lambda x, y: x.maximum(y), a, b, lanes=1)
  np.testing.assert_array_equal(vector, np.maximum(a, b))
  np.testing.assert_array_equal(scalar, np.maximum(a, b))
  np.testing.assert_array_equal(np.isnan(vector), np.isnan(a) | np.isnan(b))
  book = C_book_max().render(lanewise_ir(lambda x, y: x.maximum(y), [F32, F32], 64), "lanewise_book").src
  out = np.zeros(64, np.float32)
  Program(book, "lanewise_book")(a, b, out)
  with np.errstate(invalid="ignore"): np.testing.assert_array_equal(out, np.where(a > b, a, b))


def C_book_max():
  from uopc.codegen.cint import book_variant
  from uopc.render_c import CRenderer
  return book_variant(CRenderer)


def test_casts_between_float_and_int_vectors():
  """__builtin_convertvector: float -> int truncates toward zero as C's (int) does, int -> float is exact here."""
  x = (rand(64) * 1000).astype(np.float32)
  np.testing.assert_array_equal(run_lanewise(lambda a: a.cast(dtypes.i32.vec(W)), x, out_dtype=dtypes.i32),
                                x.astype(np.int32))
  ints = np.random.default_rng(2).integers(-2**24, 2**24, 64).astype(np.int32)
  np.testing.assert_array_equal(run_lanewise(lambda a: a.cast(F32.vec(W)), ints), ints.astype(np.float32))


def test_int_vectors_select_and_max_with_the_float_masks():
  x, y = (np.random.default_rng(s).integers(-1000, 1000, 64).astype(np.int32) for s in (3, 4))
  got = run_lanewise(lambda a, b: (a < b).where(a + b, a * 3), x, y, out_dtype=dtypes.i32)
  np.testing.assert_array_equal(got, np.where(x < y, x + y, x * 3))
  np.testing.assert_array_equal(run_lanewise(lambda a, b: a.maximum(b), x, y, out_dtype=dtypes.i32), np.maximum(x, y))


# A mask lane is -1 (all bits) or 0: uopc_where_ blends bits. A bool vector that does not come from a comparison (a
# cast, a constant, a broadcast scalar) must still be -1 where true, and a mask cast to a number must give 1.
def test_a_comparison_cast_to_float_is_one_or_zero():
  x = rand(64)
  np.testing.assert_array_equal(run_lanewise(lambda a: (a < 0.0).cast(F32.vec(W)), x), (x < 0).astype(np.float32))


def test_a_constant_true_mask_selects_the_first_operand():
  a, b = rand(64), rand(64, seed=1)
  np.testing.assert_array_equal(run_lanewise(lambda x, y: UOp.const(True).where(x, y), a, b), a)


def test_a_select_between_masks_is_a_mask():
  """WHERE with bool lanes (the GPT's training plan has `(x < c) ^ True` selecting True or False): a bitwise select of
  masks, whose lanes are -1 or 0 again, so the mask it makes selects and casts like a comparison's."""
  a, b = rand(64), rand(64, seed=1)
  pick = lambda x, y: ((x < 0.0) ^ True).where(y < 0.0, UOp.const(False, dtypes.bool.vec(W)))   # x >= 0 and y < 0
  want = (a >= 0) & (b < 0)
  np.testing.assert_array_equal(run_lanewise(lambda x, y: pick(x, y).cast(F32.vec(W)), a, b), want.astype(np.float32))
  np.testing.assert_array_equal(run_lanewise(lambda x, y: pick(x, y).where(x, y), a, b), np.where(want, a, b))


def test_a_scalar_condition_selects_whole_vectors():
  a, b = rand(64), rand(64, seed=1)
  n = 64
  i = range_(n // W, 0)
  va, vb = buf(0, n).index(i * W).load(W), buf(1, n).index(i * W).load(W)
  prog = sink(buf(2, n).index(i * W).store((i < 2).where(va, vb)).end(i))
  out = np.zeros(n, np.float32)
  Program(render_c(prog, "scalar_cond"), "scalar_cond")(a, b, out)
  np.testing.assert_array_equal(out, np.where(np.arange(n) < 2 * W, a, b))


# ---- 2. exp2 on vectors: each of its implementations ----
def has_avx512() -> bool:
  """Whether -march=native gives this compiler AVX-512 (then f32x16's exp2 is the vscalefps form)."""
  return X86 and vector_bits(compiler()) == 512


def cpu_has(*features: str) -> bool:
  """Whether /proc/cpuinfo lists every one of these flags (a kernel built for them runs here)."""
  try: flags = set(re.findall(r"^flags\s*:(.*)$", open("/proc/cpuinfo").read(), re.M)[0].split())
  except (OSError, IndexError): return False
  return set(features) <= flags


AVX512 = has_avx512()
AVX2 = X86 and cpu_has("avx2", "fma")
# (lanes, flags): the AVX-512 form, the portable form of f32x16 (AVX-512 switched off), f32x8's AVX2 form (vroundps and
# one mask) and its portable form (AVX2 switched off)
EXP2_PATHS = {"avx512": (16, None), "portable16": (16, FLAGS + ("-mno-avx512f",) if X86 else None),
              "avx2": (8, FLAGS + ("-mavx2", "-mfma") if X86 else None),
              "portable8": (8, FLAGS + ("-mno-avx2",) if X86 else None)}
SKIP_EXP2 = {"avx512": pytest.mark.skipif(not AVX512, reason="no AVX-512 for -march=native"),
             "avx2": pytest.mark.skipif(not AVX2, reason="this CPU has no AVX2 and FMA")}
EACH_EXP2 = [pytest.param(path, id=name, marks=SKIP_EXP2.get(name, ())) for name, path in EXP2_PATHS.items()]


def run_exp2(x: np.ndarray, path) -> np.ndarray:
  lanes, flags = path
  padded = np.concatenate([x, np.zeros(-x.size % lanes, np.float32)]).astype(np.float32)
  return run_lanewise(lambda a: a.exp2(), padded, lanes=lanes, flags=flags)[:x.size]


@pytest.mark.parametrize("path", EACH_EXP2)
def test_vector_exp2_accuracy(path):
  x = np.concatenate([np.linspace(-125, 127, 1 << 16), np.random.default_rng(0).uniform(-125, 127, 1 << 14)])
  x = x.astype(np.float32)
  ref = np.exp2(x.astype(np.float64))
  assert np.max(np.abs(run_exp2(x, path) - ref) / ref) < 2e-7
  ints = np.arange(-126, 128, dtype=np.float32)   # f = 0: the polynomial is 1, the result exactly 2^n
  # (against float64: NumPy's float32 exp2(127) is one ulp off)
  np.testing.assert_array_equal(run_exp2(ints, path), np.exp2(ints.astype(np.float64)).astype(np.float32))


@pytest.mark.parametrize("path", EACH_EXP2)
def test_vector_exp2_specials(path):
  x = np.array([-np.inf, np.inf, np.nan, 128, 128.5, 129, 200, 1e30, -150, -200, -1e30, 0, 1, -1], np.float32)
  want = np.array([0, np.inf, np.nan, np.inf, np.inf, np.inf, np.inf, np.inf, 0, 0, 0, 1, 2, 0.5], np.float32)
  np.testing.assert_array_equal(run_exp2(x, path), want)


@pytest.mark.skipif(not X86, reason="x86 instruction names")
def test_f32x8_exp2_is_the_avx2_form_where_the_flags_have_avx2():
  """The #if picks the form: a rounding instruction (vroundps; vrndscaleps where AVX-512 is on too) and no selects with
  AVX2 and FMA; with AVX2 switched off, the portable form's truncation and no rounding instruction."""
  from uopc.runtime.asm import assembly   # (compiles only: any x86 machine)
  src = render_c(lanewise_ir(lambda a: a.exp2(), [F32], 64, F32, 8), "lanewise")
  avx2, portable = (assembly(src, EXP2_PATHS[name][1]) for name in ("avx2", "portable8"))
  rounds = re.compile(r"\bv(roundps|rndscaleps)\b")
  assert rounds.search(avx2) and "cvttps2dq" not in avx2 and "blendv" not in avx2
  assert not rounds.search(portable) and "cvttps2dq" in portable   # n by truncating xc + 127.5


def test_only_a_kernel_that_takes_exp2_on_vectors_has_its_helpers():
  """The exp2 helpers (and with x86's forms, <immintrin.h>, whose parse is most of a small kernel's compile: NOTES 65)
  only in a kernel, or a step program, that takes exp2 on vectors; a kernel without it gets the same machine code
  without them (unused static inline functions), and it has the select and max it may use."""
  from uopc.render_step import render_step
  from uopc.step_calls import Call
  add, exp = (lanewise_ir(fn, [F32], 64, F32, 8) for fn in (lambda a: a + 1.0, lambda a: a.exp2()))
  has = lambda src: ("uopc_exp2_f32x8(f32x8 x)" in src, "immintrin.h" in src, "uopc_max_f32x8(" in src)
  assert has(render_c(add, "add")) == (False, False, True)
  assert has(render_c(exp, "exp")) == (True, X86, True)
  calls = lambda *asts: [Call(a, f"k{k}", (0, 1), (False, True)) for k, a in enumerate(asts)]
  assert has(render_step(calls(add), C).src) == (False, False, True)
  assert has(render_step(calls(add, exp), C).src) == (True, X86, True)


def test_exp2_below_2_to_the_minus_126():
  """Every form flushes below 2^-126 to 0. AVX-512's vscalefps could give the denormals down to 2^-149, but a result
  that underflows costs it a microcode assist on Intel cores, and a causal mask sends half of attention's lanes
  there (NOTES 50): its form masks those lanes off."""
  x = np.array([-126.5, -140, -149, -np.inf], np.float32)
  forms = ("portable16", "portable8") + (("avx2",) if AVX2 else ()) + (("avx512",) if AVX512 else ())
  for form in forms:
    np.testing.assert_array_equal(run_exp2(x, EXP2_PATHS[form]), np.zeros(4, np.float32), err_msg=form)
    at_edge = run_exp2(np.array([-126.0, -125.75], np.float32), EXP2_PATHS[form])   # the smallest normals stay
    np.testing.assert_allclose(at_edge, np.exp2([-126.0, -125.75]), rtol=1e-6, err_msg=form)


# ---- 3. lane reductions ----
def reduce_ir(fn, n: int, lanes: int, out_lanes: int) -> UOp:
  """out[i*out_lanes:...] = fn(x[i*lanes:(i+1)*lanes]) for every vector of x."""
  i = range_(n // lanes, 0)
  v = buf(0, n).index(i * lanes).load(lanes)
  return sink(buf(1, n // lanes * out_lanes).index(i * out_lanes).store(fn(v)).end(i))


def run_reduce(fn, x: np.ndarray, lanes: int, out_lanes: int) -> tuple[np.ndarray, str]:
  src = render_c(reduce_ir(fn, x.size, lanes, out_lanes), "lane_reduce")
  out = np.zeros(x.size // lanes * out_lanes, np.float32)
  Program(src, "lane_reduce")(x, out)
  return out, src


@pytest.mark.parametrize("lanes", [8, 16])
def test_hsum_and_hmax_reduce_each_vector_to_a_scalar(lanes):
  x = rand(128)
  rows = x.reshape(-1, lanes)
  got, _ = run_reduce(hsum, x, lanes, 1)
  np.testing.assert_allclose(got, rows.sum(1), rtol=1e-5, atol=1e-6)
  got, _ = run_reduce(hmax, x, lanes, 1)
  np.testing.assert_array_equal(got, rows.max(1))


@pytest.mark.parametrize("lanes", [8, 16])
def test_butterfly_puts_the_reduction_in_every_lane(lanes):
  x = rand(128)
  rows = x.reshape(-1, lanes)
  got, src = run_reduce(lambda v: butterfly(v, UOp.__add__), x, lanes, lanes)
  np.testing.assert_allclose(got.reshape(-1, lanes), np.repeat(rows.sum(1, keepdims=True), lanes, 1), rtol=1e-5,
                             atol=1e-6)
  assert src.count("__builtin_shufflevector") == int(math.log2(lanes))   # one shuffle a step, no lane leaves
  got, _ = run_reduce(lambda v: butterfly(v, UOp.maximum), x, lanes, lanes)
  np.testing.assert_array_equal(got.reshape(-1, lanes), np.repeat(rows.max(1, keepdims=True), lanes, 1))


def test_butterfly_needs_a_power_of_two_number_of_lanes():
  v = UOp.vectorize(*[buf(0, 12).index(k).load() for k in range(12)])
  with pytest.raises(ValueError, match="power-of-two"): butterfly(v, UOp.__add__)


# ---- 4. the generated code ----
def test_vector_typedefs_appear_only_in_vector_kernels():
  scalar = render_c(lanewise_ir(lambda a, b: a + b, [F32, F32], 64, lanes=1), "k")
  assert scalar.startswith("void k(") and "typedef" not in scalar and "f32x" not in scalar   # as before vectors
  vector = render_c(lanewise_ir(lambda a, b: a + b, [F32, F32], 64), "k")
  assert "typedef float f32x16 " in vector and vector.count("void k(") == 1
  ints = render_c(lanewise_ir(lambda a, b: a + b, [dtypes.i32] * 2, 64, dtypes.i32), "k")
  assert "typedef int i32x16 " in ints and "f32x16" not in ints   # float helpers only for float vectors
  assert render_c(lanewise_ir(lambda a, b: a + b, [F32, F32], 64), "k") == vector   # same graph, same text


@pytest.mark.parametrize("fn, per_element", [(lambda a, b: a + b, 1), (lambda a, b: a * b + 1.0, 2),
                                             (lambda a, b: (a - b).exp2(), 3)])
def test_flops_count_every_lane(fn, per_element):
  """A 16-lane add is 16 flops: the vector kernel and the scalar kernel of one fn count the same."""
  n = 256
  assert render(lanewise_ir(fn, [F32, F32], n), "k").flops == n * per_element
  assert render(lanewise_ir(fn, [F32, F32], n, lanes=1), "k").flops == n * per_element


def test_flops_of_the_lane_reductions():
  n = 256
  assert render(reduce_ir(hsum, n, W, 1), "k").flops == n // W * (W - 1)             # a tree of 15 scalar adds
  assert render(reduce_ir(lambda v: butterfly(v, UOp.__add__), n, W, W), "k").flops == n // W * 4 * W   # 4 steps


# ---- 5. errors ----
@pytest.mark.parametrize("lanes", [0, -1, 1.5, True, "16"])
def test_vec_needs_a_whole_positive_number_of_lanes(lanes):
  with pytest.raises(ValueError, match="lanes"): F32.vec(lanes)


def test_vector_dtype_basics_and_misuse():
  assert F32.vec(16) is F32.vec(16) and F32.vec(16).scalar is F32 and F32.vec(1) is F32 and F32.vec(16).count == 16
  with pytest.raises(TypeError, match="already a vector"): F32.vec(4).vec(2)
  with pytest.raises(TypeError, match="void"): dtypes.void.vec(4)
  v = buf(0, 16).index(0).load(W)
  assert v.dtype is F32.vec(W) and v.gep(15).dtype is F32 and len(v.lanes()) == W
  for lane in (16, -1):
    with pytest.raises(IndexError, match=f"lane {lane}"): v.gep(lane)
  with pytest.raises(TypeError, match="one dtype"): UOp.vectorize(UOp.const(1.0), UOp.const(1))
  with pytest.raises(TypeError, match="scalars"): UOp.vectorize(v, v)


@pytest.mark.parametrize("renderer", [CL, CUDA], ids=["OpenCL", "CUDA"])
@pytest.mark.parametrize("axis", [AxisType.LOOP, AxisType.THREAD])
def test_gpu_dialects_refuse_vectors_by_name(renderer, axis):
  i = range_(4, 0, axis)
  prog = sink(buf(1, 64).index(i * W).store(buf(0, 64).index(i * W).load(W) + 1.0).end(i))
  dialect = rf"{type(renderer).__name__}: vector dtype .* device {renderer.device}"
  with pytest.raises(NotImplementedError, match=dialect): renderer.render(prog, "k")


@pytest.mark.parametrize("fn, op", [(lambda a: a.log2(), "LOG2"), (lambda a: a.cast(dtypes.f64.vec(W)).sqrt(), "SQRT"),
                                    (lambda a: a.cast(dtypes.f64.vec(W)).exp2(), "EXP2")])
def test_c_renderer_refuses_vector_math_it_has_no_form_for(fn, op):
  with pytest.raises(NotImplementedError, match=rf"CRenderer: Ops.{op} on dtypes.f.*vec\(16\) has no vector form"):
    render_c(lanewise_ir(fn, [F32], 64, out_dtype=F32), "k")


def test_a_vector_square_root_is_every_lane_s_square_root():
  x = np.abs(rand(64, seed=3)) * 100
  x[:4] = [0.0, np.inf, np.nan, -1.0]   # IEEE's: 0, inf, and NaN for NaN and below 0, as sqrtf
  with np.errstate(invalid="ignore"): want = np.sqrt(x)
  np.testing.assert_array_equal(run_lanewise(lambda a: a.sqrt(), x), want)   # correctly rounded: exactly NumPy's
  assert "uopc_sqrt_f32x16" in render_c(lanewise_ir(lambda a: a.sqrt(), [F32], 64), "k")


# ---- 6. the vector FlashAttention kernel ----
def attention_reference(q, k, v, causal: bool, total_keys: int) -> np.ndarray:
  """softmax(q k^T / sqrt(d)) v in float64 over the first total_keys keys; q, k, v (heads, n, d)."""
  q, k, v = (x.astype(np.float64) for x in (q, k, v))
  k, v = k[:, :total_keys], v[:, :total_keys]
  s = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
  if causal: s = np.where(np.arange(total_keys)[None, :] > np.arange(q.shape[1])[:, None], -np.inf, s)
  p = np.exp(s - s.max(-1, keepdims=True))
  return (p / p.sum(-1, keepdims=True)) @ v


FLASH_CASES = {   # heads, nq, nk, d, opts, causal, total_keys
  "64x32": (1, 64, 64, 32, FlashVecOpts(rows=8, kvec=2, dchunk=2), False, None),
  "64x32 causal dchunk1": (1, 64, 64, 32, FlashVecOpts(rows=8, kvec=2, dchunk=1), True, None),
  "128x64 heads2 causal": (2, 128, 128, 64, FlashVecOpts(rows=4, kvec=4, dchunk=2), True, None),
  "128x64 default tile, nq padded": (1, 132, 128, 64, FlashVecOpts(rows=6, kvec=4, dchunk=2), False, None),
  "64x64 padded keys": (1, 64, 64, 64, FlashVecOpts(rows=4, kvec=1, dchunk=1), False, 50),
  "128x32 heads2 causal padded": (2, 128, 128, 32, FlashVecOpts(rows=8, kvec=2, dchunk=1), True, 100),
  "128x32 whole tiles of padding": (1, 128, 128, 32, FlashVecOpts(rows=4, kvec=2, dchunk=2), False, 40),
  "64x32 8 lanes": (1, 64, 64, 32, FlashVecOpts(rows=4, kvec=2, dchunk=2, lanes=8), True, None),
  # several score tiles per softmax step (NOTES 39): the step's max over all of them, one rescale of O a step
  "256x64 8 lanes, 4 tiles a step": (1, 258, 256, 64, FlashVecOpts(rows=6, kvec=2, dchunk=2, groups=4, lanes=8),
                                     False, None),
  "256x32 heads2 causal, 8 tiles a step": (2, 258, 256, 32, FlashVecOpts(rows=6, kvec=2, dchunk=2, groups=8,
                                                                          lanes=8), True, None),
  "192x32 causal padded, 3 tiles a step": (1, 192, 192, 32, FlashVecOpts(rows=4, kvec=1, dchunk=1, groups=3), True,
                                           150),
  # two and three blocks of rows through each step in turn
  "264x64 8 lanes, 2 blocks a step": (2, 264, 256, 64, FlashVecOpts(rows=6, kvec=2, dchunk=2, groups=4, qblocks=2,
                                                                     lanes=8), False, None),
  "96x32 causal padded, 3 blocks a step": (1, 96, 96, 32, FlashVecOpts(rows=4, kvec=2, dchunk=1, groups=1, qblocks=3),
                                           True, 90),
}


@pytest.mark.parametrize("case", FLASH_CASES.values(), ids=FLASH_CASES.keys())
def test_flash_vector_matches_float64_attention(case):
  heads, nq, nk, d, opts, causal, total_keys = case
  rng = np.random.default_rng(0)
  q = rng.standard_normal((heads, nq, d)).astype(np.float32)
  k, v = (rng.standard_normal((heads, nk, d)).astype(np.float32) for _ in range(2))
  if total_keys is not None: k[:, total_keys:], v[:, total_keys:] = 1e30, 1e30   # padding: garbage, must be masked
  prog = flash_vector_ir(heads, nq, nk, d, opts, causal=causal, total_keys=total_keys)
  out = np.full((heads, nq, d), np.nan, np.float32)
  Program(render_c(prog, "flash_vec"), "flash_vec", opts.compile.flags)(q, kt_panels(k, opts.keys), v, out)
  want = attention_reference(q, k, v, causal, nk if total_keys is None else total_keys)
  assert np.max(np.abs(out - want)) < 1e-5 * max(1.0, np.abs(want).max())


@pytest.mark.parametrize("causal", [False, True])
def test_the_last_block_rereads_the_last_query(causal):
  """q and out hold 70 rows, the blocks 72: the last block's rows 70 and 71 read query 69 again and write its row
  again, nothing outside the buffers (out starts as NaN: a row not written stays NaN)."""
  opts = FlashVecOpts(rows=6, kvec=1, dchunk=1, lanes=8)
  rng = np.random.default_rng(2)
  q, k, v = (rng.standard_normal((2, n, 32)).astype(np.float32) for n in (70, 64, 64))
  out = np.full((2, 70, 32), np.nan, np.float32)
  prog = flash_vector_ir(2, 72, 64, 32, opts, causal=causal, total_queries=70)
  Program(render_c(prog, "flash_vec"), "flash_vec", opts.compile.flags)(q, kt_panels(k, opts.keys), v, out)
  assert np.max(np.abs(out - attention_reference(q, k, v, causal, 64))) < 1e-5
  with pytest.raises(ValueError, match="total_queries"): flash_vector_ir(1, 72, 64, 32, opts, total_queries=80)


@pytest.mark.parametrize("groups", [1, 4])
def test_a_steps_max_is_over_all_its_tiles(groups):
  """Scores far apart (the first tile's 200 above the rest, in base 2): P = 2^(s - m) stays finite only where m is the
  max over every tile of the step, not the last tile's."""
  opts = FlashVecOpts(rows=4, kvec=1, dchunk=1, groups=groups, lanes=8)
  nq, nk, d = 8, 64, 16
  rng = np.random.default_rng(1)
  q = np.ones((1, nq, d), np.float32)
  k, v = (rng.standard_normal((1, nk, d)).astype(np.float32) for _ in range(2))
  k[:, :8] += 200 / (d * LOG2E / math.sqrt(d))   # the first tile's scores 200 higher (in base 2) than the others'
  out = np.full((1, nq, d), np.nan, np.float32)
  Program(render_c(flash_vector_ir(1, nq, nk, d, opts), "flash_vec"), "flash_vec", opts.compile.flags)(
    q, kt_panels(k, opts.keys), v, out)
  want = attention_reference(q, k, v, False, nk)
  assert np.max(np.abs(out - want)) < 1e-4


def test_flash_vector_refuses_tiles_that_do_not_divide():
  with pytest.raises(ValueError, match="rows=6"): flash_vector_ir(1, 64, 64, 32, FlashVecOpts(rows=6))


# ---- the same attention with the queries in the lanes (uopc.kernels.flash_vec_q): q, k, v as they are ----
FLASH_Q_CASES = {   # heads, nq, nk, d, dv, opts, causal
  "64x64 default": (1, 64, 64, 64, 64, FlashQOpts(), False),
  "64x64 default causal": (1, 64, 64, 64, 64, FlashQOpts(), True),
  "ragged queries and keys": (2, 50, 37, 32, 48, FlashQOpts(keys=12, dcols=8), False),
  "ragged causal, two vectors of queries": (1, 100, 100, 64, 64, FlashQOpts(qvec=2, keys=12, dcols=8), True),
  "fewer queries than a block": (3, 5, 70, 16, 16, FlashQOpts(keys=24, dcols=16), True),
  "more queries than keys": (1, 40, 9, 32, 32, FlashQOpts(keys=8, dcols=32), False),
  "8 lanes": (1, 33, 33, 32, 32, FlashQOpts(keys=8, dcols=8, lanes=8), True),
}


@pytest.mark.parametrize("case", FLASH_Q_CASES.values(), ids=FLASH_Q_CASES.keys())
def test_flash_queries_matches_float64_attention(case):
  """Nothing padded: the last block and tile read clamped rows, and the output rows past nq are never written (a
  NaN canary after the output stays a NaN)."""
  heads, nq, nk, d, dv, opts, causal = case
  rng = np.random.default_rng(1)
  q, k = rng.standard_normal((heads, nq, d)).astype(np.float32), rng.standard_normal((heads, nk, d)).astype(np.float32)
  v = rng.standard_normal((heads, nk, dv)).astype(np.float32)
  prog = flash_queries_ir(heads, nq, nk, d, opts, causal=causal, dv=dv)
  out = np.full(heads * nq * dv + 64, np.nan, np.float32)
  Program(render_c(prog, "flash_vec_q"), "flash_vec_q", opts.compile.flags)(q, k, v, out)
  s = q.astype(np.float64) @ k.transpose(0, 2, 1) / math.sqrt(d)
  if causal: s = np.where(np.arange(nk)[None, :] > np.arange(nq)[:, None], -np.inf, s)
  p = np.exp(s - s.max(-1, keepdims=True))
  want = (p / p.sum(-1, keepdims=True)) @ v
  got = out[:heads * nq * dv].reshape(heads, nq, dv)
  assert np.max(np.abs(got - want)) < 1e-5 * max(1.0, np.abs(want).max())
  assert np.isnan(out[heads * nq * dv:]).all()


def test_flash_queries_has_no_lane_reductions_and_reads_k_as_it_is():
  """Lanes are queries: the softmax's max is a max of whole vectors (no shuffle, no lane read in the tile loop), and
  K is read by scalar broadcasts, never as a vector (which would need it transposed)."""
  src = render_c(flash_queries_ir(1, 64, 64, 64, FlashQOpts()), "flash_vec_q")
  assert "__builtin_shufflevector" not in src
  body = src[src.index("void flash_vec_q"):]
  assert "data1[" in body and "*(f32x16_u*)&data1" not in body and "*(f32x16_u*)&acc" in body


def test_flash_queries_refuses_what_it_cannot_tile():
  with pytest.raises(ValueError, match="dcols=16"): flash_queries_ir(1, 64, 64, 64, FlashQOpts(), dv=40)
  with pytest.raises(ValueError, match="empty problem"): flash_queries_ir(1, 0, 64, 64, FlashQOpts())


# ---- 7. no stack spills in the hot loops ----
from uopc.runtime.asm import hot_loops, stack_spills, assembly  # noqa: E402


CLEAN_ASM = """\
.L3:
\tvmovups\t(%rdi), %zmm3
\tvbroadcastss\t-4(%rsi), %zmm4
\tvfmadd231ps\t%zmm3, %zmm4, %zmm7
\tvmovaps\t(%rsp,%rax,4), %zmm1
\taddq\t$4, %rsi
\tcmpq\t%rdi, %rax
\tjne\t.L3
\tvmovaps\t%zmm7, 64(%rsp)
\tjmp\t.L3
"""
SPILLED_ASM = """\
.L2:
\tvmovaps\t%zmm4, 3904(%rsp)
.L5:
\tvbroadcastss\t-4(%rsi), %zmm4
\tvfmadd213ps\t3840(%rsp), %zmm4, %zmm3
\tvmovaps\t%zmm3, 3840(%rsp)
\tcmpq\t%rdi, %rax
\tjne\t.L5
\tdecl\t%ecx
\tjnz\t.L2
"""


def test_the_spill_checker_on_hand_written_loops():
  """A stack slot outside the loop, an indexed stack address, an unconditional jmp: none of them is a hot-loop spill;
  the FMA with a stack operand and the store back to it are."""
  (loop,) = hot_loops(CLEAN_ASM, "vfmadd")   # AVX's FMA, whatever the target's is
  assert len(loop) == 8 and stack_spills(loop) == []
  (loop,) = hot_loops(SPILLED_ASM, "vfmadd")   # the inner loop only: .L2 holds .L5
  assert loop[0] == ".L5:" and stack_spills(loop) == ["vfmadd213ps\t3840(%rsp), %zmm4, %zmm3",
                                                      "vmovaps\t%zmm3, 3840(%rsp)"]
  assert stack_spills(["\tvmovaps\t-128(%rbp), %ymm2"])                               # a frame-pointer slot too
  assert hot_loops(".L1:\n\tvaddps\t%zmm1, %zmm2, %zmm3\n\tjne\t.L1\n", "vfmadd") == []   # no FMA: not a register tile


def flash_assembly(opts: FlashVecOpts, nq: int = 256, nk: int = 256, d: int = 64, flags=None) -> str:
  """The x86 assembly of the flash kernel, compiled as Program compiles it (PRELUDE first, the kernel's flags)."""
  nq = -(-nq // (opts.rows * opts.qblocks)) * opts.rows * opts.qblocks   # whole blocks, as uopc.nn.flash pads
  return assembly(render_c(flash_vector_ir(1, nq, nk, d, opts), "flash_vec"), flags or opts.compile.flags)


# every x86 level and the ISA its tiles are sized for: the assembly of each is read here on any x86 CPU (compiling
# for a level needs no CPU that runs it), so an AVX-512 machine proves the AVX2 and SSE tiles too
LEVELS = X86_LEVELS
EACH_LEVEL = [pytest.param(level, id=level, marks=pytest.mark.skipif(not X86, reason="x86 assembly"))
              for level in LEVELS]


def level_flags(flags: tuple[str, ...], level: str) -> tuple[str, ...]:
  return tuple(f"-march={level}" if f == "-march=native" else f for f in flags)


def level_loops(src: str, flags: tuple[str, ...], level: str) -> list[list[str]]:
  return hot_loops(assembly(src, level_flags(flags, level)), ISAS[LEVELS[level]].fma_asm)


def compiler_is_clang() -> bool:
  from uopc.runtime import compiler, compiler_version
  return "clang" in compiler_version(compiler())


@pytest.mark.xfail(compiler_is_clang(), strict=False,
                   reason="clang 14's SSE (x86-64-v2, no FMA: a product needs a temporary) build of the 6 x 2 tile "
                          "unrolls the score loop at -O3 and spills (104 reloads in a 386-instruction loop; with "
                          "-fno-unroll-loops still 6); gcc's does not spill, and the tiles are sized for gcc")
@pytest.mark.parametrize("level", EACH_LEVEL)
def test_hot_loops_of_the_default_flash_tile_do_not_spill(level):
  """The keys layout's heuristic tile for the level's registers (AVX-512: rows=6, kvec=4, dchunk=2, 24 score and 12
  output accumulators; 16 registers: 6 x 2), each accumulator kept in a register. The tiles' loops are those with a
  multiply-add per accumulator (the exp2 loops of a step of several tiles have one polynomial's, and may read their
  constants from the stack)."""
  isa = ISAS[LEVELS[level]]
  opts = default_flash_opts(isa, nq=4096)
  assert opts.groups > 1 and opts.qblocks > 1   # several score tiles a softmax step and two blocks, as for long inputs
  nq = -(-256 // (opts.rows * opts.qblocks)) * opts.rows * opts.qblocks
  loops = level_loops(render_c(flash_vector_ir(1, nq, 256, 64, opts), "flash_vec"), opts.compile.flags, level)
  loops = [loop for loop in loops if sum(line.strip().startswith(isa.fma_asm) for line in loop) >= 2 * opts.rows]
  assert len(loops) >= 2   # S = Q K^T and O += P V: the checker found the loops it is meant to read
  assert [s for loop in loops for s in stack_spills(loop)] == []


@pytest.mark.parametrize("level", EACH_LEVEL)
def test_hot_loops_of_the_default_queries_tile_do_not_spill(level):
  """The queries layout's heuristic tile (AVX-512: 16 score accumulators, then 16 output ones; 16 registers: 12, 8)."""
  opts = default_queries_opts(ISAS[LEVELS[level]])
  loops = level_loops(render_c(flash_queries_ir(1, 256, 256, 64, opts), "flash_vec_q"), opts.compile.flags, level)
  assert len(loops) >= 2
  assert [s for loop in loops for s in stack_spills(loop)] == []


@pytest.mark.xfail(compiler_is_clang(), strict=False,
                   reason="clang 14 unrolls the k loop and, under -mprefer-vector-width=256, spills halves of the "
                          "accumulators; on one thread it ran about as fast as without spills (NOTES 31)")
@pytest.mark.parametrize("threads", [2, 1000], ids=["panel packed inline", "panels packed by a copy kernel"])
@pytest.mark.parametrize("level", EACH_LEVEL)
def test_hot_loops_of_the_default_gemm_tile_do_not_spill(level, threads):
  """The heuristic tile for the level (AVX-512: 8 rows x 2 vectors, 16 accumulators; AVX2 and SSE at 512: 4 x 2);
  inline, B's vectors come from the thread's own panel on its stack (an indexed stack address, which is a load and
  not a spill)."""
  from uopc.codegen import gemm_vec
  opts = gemm_vec.heuristic_opts(ISAS[LEVELS[level]], 512, 512, 512)
  loops = level_loops(render_c(gemm_vec.program(512, 512, 512, opts, threads), "gemm_tune"), FLAGS, level)
  assert len(loops) == 1
  assert [s for loop in loops for s in stack_spills(loop)] == []


@pytest.mark.parametrize("level", EACH_LEVEL)
def test_hot_loop_of_the_peak_kernel_does_not_spill(level):
  """uopc.bench's FMA peak kernel, sized by the level's table entry: its chains, the multiplier and the addend all
  in registers (ten chains of 64-byte vectors needed 20 of AVX2's 16 and spilled: the next test)."""
  from uopc.bench import fma_source
  (loop,) = level_loops(fma_source(ISAS[LEVELS[level]]), FLAGS, level)
  assert stack_spills(loop) == []
  assert sum(bool(re.match(rf"\s+{ISAS[LEVELS[level]].fma_asm}", line)) for line in loop) >= ISAS[LEVELS[level]].chains


@pytest.mark.skipif(not X86, reason="x86 assembly")
def test_the_spill_checker_sees_the_old_peak_kernel_spill_on_avx2():
  """The peak kernel as it was: ten chains of 16-lane (two-ymm) vectors under AVX2."""
  from uopc.bench import fma_source
  old = fma_source(ISAS["avx512"])   # 10 chains of 64-byte vectors
  loops = level_loops(old, FLAGS, "x86-64-v3")
  assert any(stack_spills(loop) for loop in loops)


@pytest.mark.skipif(not AVX512, reason="the tile is sized for 32 AVX-512 registers (x86_64 with -march=native)")
def test_the_spill_checker_sees_a_tile_too_big_for_the_registers():
  """rows=8, kvec=4: 32 score accumulators, and a K^T vector and a broadcast need registers too."""
  loops = hot_loops(flash_assembly(FlashVecOpts(rows=8, kvec=4, dchunk=2)))
  assert any(stack_spills(loop) for loop in loops)

"""Bad and hostile input at the compiler's depth (issue: a clear error or a right answer, every time): empty tensors,
64-bit indices, two threads on one plan, names that reach C, float16, and a plan cache that gives memory back."""
import threading
import numpy as np
import pytest
import uopc.kernelize
from uopc.dtype import DType, dtypes
from uopc.kernelize import PlanCache, make_plan
from uopc.render_c import render_c
from uopc.runtime import CompileError, Program
from capabilities import compiler_has_float16   # tests/capabilities.py
from uopc.tensor import Tensor
from uopc.uop import AxisType, Ops, ParamArg, UOp, range_, sink


# ---- empty tensors: no kernel touches them, reductions over nothing are their identity ----
EMPTY = [
  ("add", lambda x: x + 1, (0, 4)),
  ("exp of (0,)", lambda x: x.exp(), (0,)),
  ("sum over the empty axis", lambda x: x.sum(0), (0, 4)),
  ("sum over the full axis", lambda x: x.sum(1), (0, 4)),
  ("max over the full axis", lambda x: x.max(1), (0, 4)),
  ("mean of (4, 0) rows", lambda x: x.sum(1), (4, 0)),
  ("softmax of (4, 0)", lambda x: x.softmax(-1), (4, 0)),
  ("matmul with a zero inner dim", lambda x: x @ Tensor(np.ones((0, 5), np.float32)), (3, 0)),
  ("matmul with a zero outer dim", lambda x: x @ Tensor(np.ones((4, 5), np.float32)), (0, 4)),
  ("pad of empty", lambda x: x.pad(((1, 1), (0, 0))), (0, 4)),
]
NUMPY = {"add": lambda a: a + 1, "exp of (0,)": np.exp, "sum over the empty axis": lambda a: a.sum(0),
         "sum over the full axis": lambda a: a.sum(1), "max over the full axis": lambda a: a.max(1, initial=-np.inf),
         "mean of (4, 0) rows": lambda a: a.sum(1), "softmax of (4, 0)": lambda a: a,
         "matmul with a zero inner dim": lambda a: a @ np.ones((0, 5), np.float32),
         "matmul with a zero outer dim": lambda a: a @ np.ones((4, 5), np.float32),
         "pad of empty": lambda a: np.pad(a, ((1, 1), (0, 0)))}


@pytest.mark.parametrize("name,fn,shape", EMPTY, ids=[e[0] for e in EMPTY])
def test_empty_tensors_give_numpys_answer(name, fn, shape):
  a = np.ones(shape, np.float32)
  got, want = fn(Tensor(a)).numpy(), NUMPY[name](a)
  assert got.shape == want.shape
  np.testing.assert_array_equal(got, want)


def test_an_empty_output_gets_no_kernel():
  plan = make_plan([(Tensor(np.ones((0, 4), np.float32)) + 1).uop], options=uopc.kernelize.Options(opt=Tensor.opt))
  assert plan.kernels == [] and plan.outs[0][1] == 0


# ---- indices wider than 32 bits ----
def copy_ir(n: int, dtype=dtypes.u8) -> UOp:
  src, dst = (UOp(Ops.BUFFER, (), ParamArg(k, dtype, (n,))) for k in range(2))
  i = range_(n, 0, AxisType.THREAD)
  return sink(dst.index(i).store(src.index(i).load()).end(i))


def test_a_buffer_of_more_than_2_31_elements_gets_64_bit_loops_and_compiles():
  src = render_c(copy_ir((1 << 31) + 8), "big_copy")
  assert "for (long long ridx0 = 0; ridx0 < 2147483656;" in src
  Program(src, "big_copy")                                   # 32-bit: "invalid controlling predicate" from gcc
  assert "for (int ridx0" in render_c(copy_ir(1 << 20), "small_copy")   # small kernels keep int indices


def test_a_transpose_past_2_31_elements_is_right():
  rows, cols = 65537, 32768                                   # 2^31 + 32768 bytes
  a = np.zeros((rows, cols), np.uint8)
  picks = [(0, 1), (1, 0), (rows - 1, cols - 1), (rows - 1, 0), (65536, 12345), (40000, 32767)]
  for k, (r, c) in enumerate(picks): a[r, c] = k + 1
  t = Tensor(a).T.numpy()
  for k, (r, c) in enumerate(picks): assert t[c, r] == k + 1, (r, c)
  assert int(t.sum(dtype=np.int64)) == sum(range(1, len(picks) + 1))


# ---- two threads, one plan ----
def test_two_threads_realizing_the_same_plan_get_their_own_answers():
  xs = [np.random.default_rng(s).standard_normal((64, 33)).astype(np.float32) for s in range(2)]
  want = [np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True) for x in xs]
  Tensor(xs[0]).softmax(-1).numpy()                         # build the plan once
  wrong = []
  def work(k):
    for _ in range(40):
      if not np.allclose(Tensor(xs[k]).softmax(-1).numpy(), want[k], atol=1e-6): wrong.append(k)
  threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
  for t in threads: t.start()
  for t in threads: t.join()
  assert wrong == []


# ---- what reaches the C source ----
def test_a_crafted_dtype_cannot_put_text_into_the_source():
  evil = DType("f32", 4, "f")                                # equal to f32 by value: it renders as float
  assert "float*" in render_c(copy_ir(4, evil), "ok")
  worse = DType('x"); system("id', 4, "f")
  with pytest.raises(TypeError, match="not supported on device CPU"):
    render_c(copy_ir(4, worse), "evil")


def test_a_range_id_must_be_an_int():
  buf = UOp(Ops.BUFFER, (), ParamArg(0, dtypes.f32, (4,)))
  r = UOp(Ops.RANGE, (UOp.const(4),), ("0; system(1)", AxisType.LOOP))
  with pytest.raises(TypeError, match="RANGE's arg must be"):
    render_c(sink(buf.index(r).store(UOp.const(1.0)).end(r)), "evil")


# ---- float16 ----
def test_float16_tensors_compute_or_say_the_compiler_lacks_it():
  a = np.linspace(-2, 2, 11).astype(np.float16)
  if not compiler_has_float16():   # e.g. clang before 15 on x86-64: the compiler's own words name the problem
    with pytest.raises(CompileError, match="_Float16"): (Tensor(a) * 2 + 1).numpy()
    return
  out = (Tensor(a) * 2 + 1).numpy()
  assert out.dtype == np.float16
  np.testing.assert_allclose(out, a * 2 + 1, rtol=1e-3)


# ---- the plan cache gives memory back ----
def test_the_plan_cache_is_bounded_by_bytes_of_temporaries():
  with uopc.kernelize.isolated_plan_cache(max_bytes=3 * 4 * 1000) as cache:   # three plans of 1000-float temps
    assert isinstance(cache, PlanCache)
    for n in range(1000, 1006):                             # six shapes, each a plan with an n-float temporary
      x = Tensor(np.ones(n, np.float32))
      (x.exp().contiguous() * 2).sum().numpy()              # contiguous(): a temporary of n floats
    assert 1 <= len(cache) <= 3 and cache.nbytes <= cache.max_bytes
    uopc.kernelize.clear_plan_cache()
    assert len(cache) == 0 and cache.nbytes == 0

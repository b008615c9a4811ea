"""Chapter 12, GPUs: Tensor programs on the CL device (OpenCL on PoCL) against NumPy, the launch opt, the structure of
the rendered OpenCL and CUDA, a local-memory kernel with its barrier, and NVRTC compiling the attention plans.

No test needs a GPU: CUDA kernels are compiled (NVRTC) and checked, and the tests that launch one skip where the CUDA
driver finds no GPU, with the driver's reason.
"""
import math
import numpy as np
import pytest
from uopc.book import load_example
from uopc.device import get_device
from uopc.dtype import dtypes
from uopc.codegen.gpudims import default_block, launch_axes, to_special, traffic, parallel_loops
from uopc.helpers import Context
from uopc.kernelize import make_plan
from uopc.rangeify import lower, Ctx
from uopc.render_c import render_c
from uopc.render_gpu import CL, CUDA
from uopc.runtime import Program
from uopc.tensor import Tensor
from uopc.uop import UOp, Ops, ParamArg, LocalArg, AxisType, range_, sink

pytestmark = pytest.mark.ch12
book = load_example("flash_attention")
rng = np.random.default_rng(12)


def arr(*shape, dtype=np.float32) -> np.ndarray: return rng.standard_normal(shape).astype(dtype)


def on_cl(fn, *arrays):
  """fn applied to CL Tensors of the arrays, as NumPy."""
  return fn(*(Tensor(a, device="CL") for a in arrays)).numpy()


def attention_ref(q, k, v) -> np.ndarray:
  s = q.astype(np.float64) @ k.T.astype(np.float64) / math.sqrt(q.shape[1])
  p = np.exp(s - s.max(-1, keepdims=True))
  return (p / p.sum(-1, keepdims=True)) @ v


# ---- values on CL ----
@pytest.mark.parametrize("shape", [(37, 5), (1000,), (2, 3, 7)])
def test_elementwise_on_cl(shape):
  a, b = arr(*shape), arr(*shape)
  out = on_cl(lambda x, y: (x * y + 1).relu() - x.exp() / (y.abs() + 1), a, b)
  np.testing.assert_allclose(out, np.maximum(a * b + 1, 0) - np.exp(a) / (np.abs(b) + 1), rtol=1e-5, atol=1e-6)


def test_broadcast_on_cl():
  a, b = arr(37, 1), arr(1, 29)
  np.testing.assert_allclose(on_cl(lambda x, y: x * y + y, a, b), a * b + b, rtol=1e-6)


@pytest.mark.parametrize("axis", [0, -1, None, (0, 2)])
def test_reductions_on_cl(axis):
  a = arr(13, 7, 3)
  np.testing.assert_allclose(on_cl(lambda x: x.sum(axis), a), a.sum(axis), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(on_cl(lambda x: x.max(axis), a), a.max(axis))


def test_int_and_bool_on_cl():
  a = rng.integers(-50, 50, (17, 9)).astype(np.int32)
  np.testing.assert_array_equal(on_cl(lambda x: x.sum(-1), a), a.sum(-1))
  np.testing.assert_array_equal(on_cl(lambda x: (x < 3).where(x, x * 2), a), np.where(a < 3, a, a * 2))
  np.testing.assert_array_equal(on_cl(lambda x: x > 0, a), a > 0)


def test_f64_i64_u8_and_casts_on_cl():
  a = rng.standard_normal((33, 7))
  np.testing.assert_allclose(on_cl(lambda x: x.exp().sum(-1), a), np.exp(a).sum(-1), rtol=1e-12)
  f = a.astype(np.float32)
  np.testing.assert_array_equal(on_cl(lambda x: (x * 10).cast(dtypes.i32), f), (f * 10).astype(np.int32))
  np.testing.assert_array_equal(on_cl(lambda x: (x * 0.3).cast(dtypes.bool), f), (f * 0.3).astype(bool))
  big = np.arange(40, dtype=np.int64).reshape(5, 8) * 10**10   # needs 64 bits
  np.testing.assert_array_equal(on_cl(lambda x: x.sum(-1), big), big.sum(-1))
  small = np.arange(24, dtype=np.uint8)
  np.testing.assert_array_equal(on_cl(lambda x: x + x, small), small * 2)


def test_matmul_on_cl():
  a, b = arr(17, 23), arr(23, 19)
  np.testing.assert_allclose(on_cl(lambda x, y: x @ y, a, b), a @ b, rtol=1e-5, atol=1e-5)
  c, d = arr(3, 5, 8), arr(3, 8, 6)
  np.testing.assert_allclose(on_cl(lambda x, y: x @ y, c, d), c @ d, rtol=1e-5, atol=1e-5)


def test_softmax_on_cl():
  a = arr(13, 50)
  e = np.exp(a - a.max(-1, keepdims=True))
  np.testing.assert_allclose(on_cl(lambda x: x.softmax(-1), a), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("mode", ["unfused", "fused", "online"])
def test_attention_on_cl(mode):
  q, k, v = arr(37, 12), arr(37, 12), arr(37, 12)
  if mode == "fused": Tensor.fuse_reduce, Tensor.opt = True, book.FlashOpt
  if mode == "online": Tensor.online_softmax = True
  out = on_cl(book.attention, q, k, v)
  np.testing.assert_allclose(out, attention_ref(q, k, v), atol=1e-5)


def test_device_env_and_to():
  a = arr(9, 4)
  with Context(DEVICE="CL"):
    t = Tensor(a)
    assert t.device == "CL" and (t * 2).device == "CL"
    np.testing.assert_allclose((t * 2).sum(0).numpy(), (a * 2).sum(0), rtol=1e-6)
  assert Tensor(a).device == "CPU"
  c = Tensor(a, device="cl")
  assert c.device == "CL"
  back = (c + 1).to("CPU")
  assert back.device == "CPU"
  np.testing.assert_allclose((back * 3).numpy(), (a + 1) * 3, rtol=1e-6)
  with pytest.raises(ValueError, match="devices"): (c + Tensor(a, device="CPU")).numpy()
  with pytest.raises(ValueError, match="unknown device"): Tensor(a, device="TPU")


def test_plans_are_made_and_cached_per_device(fresh_plan_cache):
  from uopc.runtime.cl import CLProgram
  from uopc.kernelize import plan_cache_size
  from uopc.options import Options
  a = arr(5, 6)
  for device in ("CPU", "CL", "CL"): Tensor(a, device=device).exp().sum(0).numpy()
  assert plan_cache_size() == 2
  root = (Tensor(a).exp().sum(0)).uop
  plan = make_plan([root], options=Options(opt=Tensor.opt, device="CL"))
  assert all(isinstance(k.prg, CLProgram) for k in plan.kernels)
  assert make_plan([root], options=Options(opt=Tensor.opt)) is not plan


def test_debug_lines_name_the_device(capsys):
  a = arr(256, 8)
  with Context(DEBUG=4): Tensor(a, device="CL").exp().sum(-1).numpy()
  out = capsys.readouterr().out
  assert "__kernel __attribute__((reqd_work_group_size(" in out and "get_local_id(0)" in out
  assert any("GFLOP/s  CL" in line for line in out.splitlines())
  assert "realize on CL:" in out


def test_f16_on_cl_is_stored_as_halves_and_computed_in_float():
  """vload_half / vstore_half (OpenCL 1.2 core): f16 runs on a device without cl_khr_fp16 too."""
  x = arr(4).astype(np.float16)
  out = (Tensor(x, device="CL") * 2).numpy()
  assert out.dtype == np.float16
  np.testing.assert_array_equal(out, x * 2)


# ---- the launch opt ----
def test_default_launch_leaves_several_work_groups():
  prog, launch = to_special(launch_axes(book.online_attention_ir(256, 8)))
  assert launch.grid == (4,) and launch.block == (64,)
  prog, launch = to_special(launch_axes(book.online_attention_ir(4096, 8)))
  assert launch.grid == (16,) and launch.block == (256,)


def test_default_block_divides_and_respects_the_limit():
  assert default_block([1024, 1024]) == [256, 1]
  assert default_block([64, 64]) == [64, 4]
  assert default_block([37, 5]) == [37, 5]
  assert default_block([257]) == [1]   # a prime above the limit
  for sizes in ([1000, 30], [7, 11, 13], [4096]):
    bs = default_block(sizes, 128)
    assert math.prod(bs) <= 128 and all(n % b == 0 for n, b in zip(sizes, bs))


def test_launch_axes_are_loops_on_the_cpu():
  """A grid of work-groups is a loop nest: the C renderer prints GLOBAL x LOCAL loops, and the values are the same."""
  x = Tensor(arr(24, 40))
  body = (x.exp() * 2).sum(-1).uop
  out = UOp(Ops.BUFFER, (), ParamArg(1, dtypes.f32, (24,)))
  prog = lower(_params(body), out, Ctx())
  split = launch_axes(prog, block=(8,))
  kinds = sorted(u.arg[1].name for u in split.toposort() if u.op is Ops.RANGE)
  assert kinds == ["GLOBAL", "LOCAL", "REDUCE"]
  xs = x.numpy()
  res = np.zeros(24, np.float32)
  Program(render_c(split, "split"), "split")(xs.reshape(-1), res)
  np.testing.assert_allclose(res, (np.exp(xs) * 2).sum(-1), rtol=1e-5)


def _params(body: UOp) -> UOp:
  """body with its data buffers as kernel parameters data0, data1, ..."""
  from uopc.uop import substitute
  bufs = [u for u in body.toposort() if u.op is Ops.BUFFER]
  return substitute(body, {b: UOp(Ops.BUFFER, (), ParamArg(k, b.dtype, b.arg.shape)) for k, b in enumerate(bufs)})


def test_parallel_loops_are_the_output_loops():
  prog = book.online_attention_ir(32, 8)
  loops = parallel_loops(prog)
  assert [r.arg for r in loops] == [(0, AxisType.THREAD)]   # the query rows; the loops over keys are not parallel
  special, launch = to_special(launch_axes(prog))
  assert launch.grid == (4,) and launch.block == (8,)
  assert not any(u.op is Ops.RANGE and u.arg[0] == 0 for u in special.toposort())


def test_launch_axis_must_enclose_every_statement():
  X = UOp(Ops.BUFFER, (), ParamArg(0, dtypes.f32, (8,)))
  g, j = range_(4, 0, AxisType.GLOBAL), range_(8, 1)
  first = X.index(j).store(UOp.const(0.0)).end(j)
  prog = sink(first, X.index(g).store(UOp.const(1.0)).end(g))
  with pytest.raises(ValueError, match="does not enclose every statement"): to_special(prog)


# ---- rendered OpenCL and CUDA ----
def attention_plan_table(n: int = 64, d: int = 16):
  q, k, v = (Tensor(arr(n, d)) for _ in range(3))
  root = book.attention(q, k, v).uop
  return {"unfused": make_plan([root], opt=Tensor.opt), "fused": make_plan([root], fuse_reduce=True, opt=book.FlashOpt),
          "online": make_plan([root], opt=Tensor.opt, online_softmax=True)}


def test_rendered_opencl_and_cuda_structure():
  for name, plan in attention_plan_table().items():
    for k in plan.kernels:
      cl, cu = CL.render(k.ast, k.name), CUDA.render(k.ast, k.name)
      for r in (cl, cu): assert "#pragma omp" not in r.src and r.signature.launch.items > 1, (name, k.name)
      bx, by = (cl.signature.launch.block + (1, 1))[:2]
      assert cl.src.startswith(f"__kernel __attribute__((reqd_work_group_size({bx},{by},1))) void ")
      assert "__global float* restrict data0" in cl.src
      assert "get_local_id(0)" in cl.src and "threadIdx.x" in cu.src
      assert cu.src.startswith(f'extern "C" __global__ void __launch_bounds__({cu.signature.launch.threads}) ')
      assert cl.flops == cu.flops == k.flops   # the same work, counted per work-item times the launch


def local_normalize_ir(rows: int, width: int) -> UOp:
  """out[i, :] = 2^x[i, :] / sum(2^x[i, :]): one work-group per row, its 2^x staged in local memory."""
  f32 = dtypes.f32
  X, OUT = (UOp(Ops.BUFFER, (), ParamArg(s, f32, (rows * width,))) for s in range(2))
  LM, S = UOp(Ops.ALLOC, (), LocalArg(0, f32, (width,))), UOp(Ops.ALLOC, (), ParamArg(1, f32, (1,)))
  g, lo = range_(rows, 0, AxisType.GLOBAL), range_(width, 1, AxisType.LOCAL)
  staged = LM.index(lo).store(X.index(g * width + lo).load().exp2())
  bar = UOp(Ops.BARRIER, (staged,))
  Si = S.after(g, lo)
  init = Si.index(0).store(UOp.const(0.0))
  k = range_(width, 2, AxisType.REDUCE)
  Sk = Si.after(init, k)
  total = Sk.index(0).store(Sk.index(0).load() + LM.after(bar, k).index(k).load()).end(k)
  out = OUT.index(g * width + lo).store(LM.after(bar).index(lo).load() * Si.after(total).index(0).load().recip())
  return sink(out.end(g, lo))


def test_local_memory_kernel_barrier_after_local_stores():
  prog = local_normalize_ir(6, 16)
  src = CL.render(prog, "row_norm").src
  lines = [ln.strip() for ln in src.splitlines()]
  store = next(i for i, ln in enumerate(lines) if ln.startswith("lmem0[") and "=" in ln)
  barrier = lines.index("barrier(CLK_LOCAL_MEM_FENCE);")
  first_load = next(i for i, ln in enumerate(lines) if "= lmem0[" in ln)
  assert "__local float lmem0[16];" in lines and store < barrier < first_load
  cu = CUDA.render(prog, "row_norm").src
  assert "__syncthreads();" in cu and "__shared__ float lmem0[16];" in cu
  x = arr(6, 16)
  out = np.zeros(96, np.float32)
  get_device("CL").compile(src)(x.reshape(-1), out)
  e = np.exp2(x)
  np.testing.assert_allclose(out.reshape(6, 16), e / e.sum(-1, keepdims=True), rtol=1e-5)
  t = traffic(prog)
  assert t["global_load"] == t["global_store"] == t["local_store"] == 96 * 4 and t["local_load"] == 96 * 17 * 4
  with pytest.raises(NotImplementedError, match="local memory"): render_c(prog, "row_norm")


def test_c_renderer_refuses_gpu_ops():
  prog, _ = to_special(launch_axes(book.online_attention_ir(8, 4)))
  with pytest.raises(NotImplementedError, match="no form on device CPU"): render_c(prog, "flash")


# ---- CUDA: NVRTC everywhere, a launch only on a GPU ----
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_every_attention_kernel(arch):
  from uopc.runtime.cuda import CUDAProgram
  for name, plan in attention_plan_table().items():
    for k in plan.kernels:
      prg = CUDAProgram(CUDA.render(k.ast, k.name).src, arch)
      assert prg.cubin[:4] == b"\x7fELF", (name, k.name)
  prg = CUDAProgram(CUDA.render(local_normalize_ir(4, 32), "row_norm").src, arch)
  assert prg.cubin[:4] == b"\x7fELF"


def test_nvrtc_errors_carry_the_source():
  from uopc.runtime.cuda import nvrtc_compile
  from uopc.runtime import CompileError
  with pytest.raises(CompileError, match="  1 \\| "): nvrtc_compile('extern "C" __global__ void k() { oops; }', "k")


def test_cuda_launch():
  from uopc.runtime.cuda import NoGPUError, gpu_present, no_gpu_reason
  q, k, v = arr(37, 12), arr(37, 12), arr(37, 12)
  if not gpu_present():
    with pytest.raises(NoGPUError, match="no GPU found"):
      book.attention(*(Tensor(a, device="CUDA") for a in (q, k, v))).numpy()
    pytest.skip(no_gpu_reason())
  out = book.attention(*(Tensor(a, device="CUDA") for a in (q, k, v))).numpy()
  np.testing.assert_allclose(out, attention_ref(q, k, v), atol=1e-5)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_the_mma_tile_kernels(arch):
  """uopc.codegen.wmma prints CUDA with inline PTX mma.sync: NVRTC checks it here, before any GPU runs it."""
  from uopc.codegen import wmma
  from uopc.runtime.cuda import nvrtc_compile
  for shape in wmma.SHAPES.values():
    for dtype in set(shape.inputs) & {"f16", "bf16"}:   # the tile kernel packs 16-bit inputs
      assert nvrtc_compile(wmma.mma_tile_kernel(shape, dtype), "mma_tile", arch)[:4] == b"\x7fELF", (shape.name, dtype)

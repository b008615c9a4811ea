"""The machine kernels are built for (uopc.runtime.machine): the ISA table, UOPC_MARCH, and its place in every key."""
from __future__ import annotations
import os
import subprocess
import numpy as np
import pytest
from uopc.tensor import Tensor
from uopc.helpers import Context, MARCH
from uopc.kernelize import make_plan
from uopc.opt import VectorOpt
from uopc.runtime import Program, native_lanes, tune
from uopc.runtime.flags import FLAGS
from uopc.runtime.machine import HOST_ARCH, ISAS, MarchError, compiler, resolve, target, target_for

X86 = HOST_ARCH == "x86_64"
LANES = {"x86-64-v4": 16, "x86-64-v3": 8, "x86-64-v2": 4}


def compiler_knows(level: str) -> bool:
  r = subprocess.run([compiler(), f"-march={level}", "-E", "-x", "c", os.devnull], capture_output=True)
  return r.returncode == 0


def runs_here(level: str) -> bool:
  try: target(level); return True
  except MarchError: return False


LEVELS_HERE = [pytest.param(level, id=level, marks=pytest.mark.skipif(not (X86 and runs_here(level)),
                                                                       reason=f"this CPU cannot run {level}"))
               for level in LANES]


def test_the_table_sizes_what_the_heuristics_read():
  """BLIS's counts: AVX-512 32 x 16, AVX2 16 x 8, SSE 16 x 4, NEON 32 x 4; enough chains for latency x units, and
  each chain, the multiplier and the addend in a register."""
  assert {n: (i.registers, i.lanes) for n, i in ISAS.items()} == {"avx512": (32, 16), "avx2": (16, 8), "sse": (16, 4),
                                                                   "neon": (32, 4)}
  for isa in ISAS.values():
    assert isa.fma_units * isa.fma_latency <= isa.chains <= isa.registers - 2


@pytest.mark.parametrize("level", LEVELS_HERE)
def test_a_level_sets_the_flags_and_the_lanes(level, tmp_path, monkeypatch):
  monkeypatch.setenv("UOPC_CACHE_DIR", str(tmp_path))
  with Context(UOPC_MARCH=level):
    assert target().flags == (f"-march={level}",) and native_lanes() == LANES[level]
    prg = Program("void f(float* x) { x[0] = 1.0f; }", "f")
    assert f"-march={level}" in prg.flags and "-march=native" not in prg.flags
    x = np.zeros(1, np.float32)
    prg(x)
    assert x[0] == 1.0
  with Context(UOPC_MARCH=""): native = Program("void f(float* x) { x[0] = 1.0f; }", "f")   # whatever the env says
  assert "-march=native" in native.flags and native.path != prg.path   # the level is in the object's key


def test_a_level_this_cpu_cannot_run_is_refused_by_name():
  with pytest.raises(MarchError, match="not a level or CPU"): target("no-such-cpu")
  # a level the compiler knows with a feature this CPU lacks (AVX-512 itself on an AVX2 machine; AMX or AVX-512 FP16
  # on an older AVX-512 one; Xeon Phi's AVX-512 ER on a Sapphire Rapids; gcc 12 knows no graniterapids)
  known = [m for m in ("x86-64-v4", "sapphirerapids", "graniterapids", "knl") if compiler_knows(m)]
  beyond = next((m for m in known if X86 and not runs_here(m)), None)
  if beyond is None: pytest.skip(f"this CPU runs every level tried that the compiler knows ({', '.join(known)})")
  with pytest.raises(MarchError, match="this CPU cannot run code built with"): target(beyond)
  with Context(UOPC_MARCH=beyond), pytest.raises(MarchError, match="lacks"):
    Program("void f(float* x) { x[0] = 1.0f; }", "f")


def test_a_level_is_in_the_plan_key_and_the_tuners_key():
  level = next((m for m in ("x86-64-v3", "x86-64-v2") if X86 and runs_here(m)), None)
  if level is None: pytest.skip("no lower x86 level runs here")
  a = Tensor(np.ones((256, 256), np.float32))
  with Context(UOPC_MARCH=""): native_key = tune.machine_key()
  with Context(UOPC_MARCH=level):
    options = Tensor.options()
    assert options.march == level == MARCH.value
    plan = make_plan([(a @ a).uop], options=options.replace(opt=VectorOpt))
    assert tune.machine_key() != native_key
  assert f"f32x{LANES[level]}" in plan.kernels[-1].src
  with Context(UOPC_MARCH=""): assert Tensor.options() != options   # another Options value: another plan


def test_resolve_replaces_native_and_drops_another_architectures_flags():
  arm = target_for("cc", "", "aarch64", check=False)   # the flags only: what the host compiler says is not used
  flags = resolve(FLAGS, arm)
  assert "-mcpu=native" in flags and "-march=native" not in flags
  assert not any(f.startswith("-mprefer-vector-width") for f in flags)
  if X86: assert resolve(FLAGS, target("")) == FLAGS   # this CPU: the flags as they always were

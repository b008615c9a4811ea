"""Memory a realize leaves behind (NOTES 25): a Tensor's arrays are freed when the last reference goes, without the
cyclic garbage collector, and uopc's malloc policy steps aside for a user's own glibc settings."""
import gc
import platform
import weakref
import numpy as np
import pytest
from uopc.runtime import process
from uopc.opt import DefaultOpt, VectorOpt
from uopc.tensor import Tensor, _flat


@pytest.mark.parametrize("opt", [DefaultOpt, VectorOpt])
def test_inputs_and_outputs_are_freed_without_the_garbage_collector(monkeypatch, opt):
  monkeypatch.setattr(Tensor, "opt", opt)
  a = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
  (Tensor(a) @ Tensor(a)).numpy()   # the plan exists: what is left after a call is the call's own
  gc.collect()
  gc.disable()
  try:
    x, y = Tensor(a), Tensor(a)
    z = (x @ y + 1).realize()
    arrays = [weakref.ref(_flat(t.uop)) for t in (x, y, z)]
    del x, y, z
    assert [r() is None for r in arrays] == [True, True, True]
  finally: gc.enable()


def test_the_malloc_policy_leaves_a_users_settings_alone():
  for key in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"):
    assert process.set_malloc_policy({key: "65536"}) is False


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_the_malloc_policy_applies_on_glibc():
  assert process.set_malloc_policy({}) is True

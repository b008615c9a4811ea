"""The plan cache as a training loop uses it (issue 50): a step built again every time (no TinyJit) finds the plan of
the step before by the graph's structure (its buffers numbered as placeholders, uopc.kernelize.normalize), binds this
step's arrays and runs the same compiled kernels. A cached plan gives the bits of a fresh one; a graph that differs in
a constant, a shape, a dtype or an op is another plan; and the cache keeps no user array alive."""
import gc
import re
import tracemalloc
import weakref
import numpy as np
import pytest
import uopc.kernelize
from uopc.helpers import Context
from uopc.kernelize import clear_plan_cache, plan_cache_size
from uopc.optim import AdamW
from uopc.tensor import Tensor

rng = np.random.default_rng(50)
X = rng.standard_normal((16, 8)).astype(np.float32)
Y = rng.standard_normal((16, 4)).astype(np.float32)
W1, B1 = (rng.standard_normal((8, 16)) * 0.3).astype(np.float32), np.zeros(16, np.float32)
W2 = (rng.standard_normal((16, 4)) * 0.3).astype(np.float32)


def mlp_steps(n: int, replan_every_step: bool) -> tuple[list[float], list[np.ndarray]]:
  """n AdamW steps of a two-layer MLP (x @ w1 + b1, relu, @ w2, mean squared error), the graph built every step;
  replan_every_step: the plan cache emptied before each step, so every step is planned from nothing."""
  params = [Tensor(W1.copy()), Tensor(B1.copy()), Tensor(W2.copy())]
  opt = AdamW(params, lr=1e-2, weight_decay=0.1)
  losses = []
  for k in range(n):
    if replan_every_step: clear_plan_cache()
    x, y = Tensor(X * (1 + k)), Tensor(Y)   # new input arrays every step, as a data loader gives them
    w1, b1, w2 = params
    loss = (((x @ w1 + b1).relu() @ w2 - y) ** 2).mean()
    opt.zero_grad(); loss.backward()
    opt.step(loss)
    losses.append(loss.item())
  return losses, [p.numpy().copy() for p in params]


def test_a_cached_plan_gives_the_bits_of_a_plan_made_afresh(fresh_plan_cache, monkeypatch):
  made = []
  real = uopc.kernelize._make_plan
  monkeypatch.setattr(uopc.kernelize, "_make_plan", lambda roots, options: made.append(1) or real(roots, options))
  cached_losses, cached = mlp_steps(3, replan_every_step=False)
  assert len(made) == 1                              # steps 2 and 3 found step 1's plan
  made.clear()
  fresh_losses, fresh = mlp_steps(3, replan_every_step=True)
  assert len(made) == 3                              # every step planned again
  assert cached_losses == fresh_losses               # bit for bit
  for a, b in zip(cached, fresh): np.testing.assert_array_equal(a, b)
  # and both are AdamW: the first loss against NumPy in float64
  h = np.maximum(X.astype(np.float64) @ W1 + B1, 0)
  np.testing.assert_allclose(cached_losses[0], ((h @ W2 - Y) ** 2).mean(), rtol=1e-5)


def graph(shape=(4, 4), dtype=np.float32, constant=2.0, op="add"):
  x = Tensor(np.arange(np.prod(shape)).reshape(shape).astype(dtype))
  return (x * constant + 1 if op == "add" else x * constant - 1).sum(1), x.numpy().astype(np.float64)


@pytest.mark.parametrize("change", [{"constant": 3.0}, {"shape": (5, 4)}, {"dtype": np.float64}, {"op": "sub"}])
def test_a_graph_that_differs_in_a_constant_shape_dtype_or_op_is_another_plan(fresh_plan_cache, change):
  base, _ = graph()
  base.numpy()
  again, _ = graph()   # the same structure over new arrays: the same plan
  np.testing.assert_allclose(again.numpy(), (np.arange(16.0).reshape(4, 4) * 2 + 1).sum(1))
  assert plan_cache_size() == 1
  other, x = graph(**change)
  opts = {"constant": 2.0, "op": "add", **change}
  want = (x * opts["constant"] + (1 if opts["op"] == "add" else -1)).sum(1)
  np.testing.assert_allclose(other.numpy(), want, rtol=1e-6)   # computed by its own plan, not the base's
  assert plan_cache_size() == 2


def test_the_cache_keeps_no_user_array_alive(fresh_plan_cache):
  x = Tensor(rng.standard_normal((32, 32)).astype(np.float32))
  y = (x.exp() * 2).sum(0)
  y.numpy()
  refs = [weakref.ref(x.numpy()), weakref.ref(y.numpy())]
  assert plan_cache_size() == 1
  del x, y
  assert [r() for r in refs] == [None, None]   # freed at once (no cycle waits for the collector) though cached
  assert plan_cache_size() == 1


def test_fifty_steps_keep_memory_flat(fresh_plan_cache):
  x, y = rng.standard_normal((2048, 8)).astype(np.float32), rng.standard_normal((2048, 4)).astype(np.float32)
  params = [Tensor(W1.copy()), Tensor(B1.copy()), Tensor(W2.copy())]
  opt = AdamW(params, lr=1e-3)
  def step():
    w1, b1, w2 = params
    loss = ((((Tensor(x) @ w1 + b1).relu() @ w2) - Tensor(y)) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step(loss)
    return loss.item()
  for _ in range(5): step()   # the plan made, its temporaries allocated
  gc.collect()
  tracemalloc.start()
  grown = []
  try:
    step(); gc.collect()
    for _ in range(2):   # two windows of 25 steps
      start = tracemalloc.get_traced_memory()[0]
      for _ in range(25): step()
      gc.collect()
      grown.append(tracemalloc.get_traced_memory()[0] - start)
  finally: tracemalloc.stop()
  # a step's own arrays (its input copies, its activations of 2048 rows) kept per step would be megabytes in each
  # window. What happens once may land in either: the node table's dict resized (~150 kB), Python's small-object
  # pools, whatever else tracemalloc counts (every thread's allocations: 2.6 MB once under 3 workers, its cause not
  # found). So the window that grew less is the one that counts (NOTES 73)
  step_inputs = x.nbytes + y.nbytes
  assert min(grown) < 5 * step_inputs, f"25 steps kept {min(grown)} bytes, and 25 more {max(grown)} (a step's " \
                                       f"inputs are {step_inputs})"
  assert plan_cache_size() == 1


def test_debug2_reports_the_python_time_of_each_step(fresh_plan_cache, capsys):
  mlp_steps(1, replan_every_step=False)
  capsys.readouterr()
  with Context(DEBUG=2): mlp_steps(2, replan_every_step=False)
  lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("step ")]
  assert re.fullmatch(r"step 0: Python \d+\.\d ms building the update, realize \d+\.\d ms", lines[0])
  assert re.fullmatch(r"step 1: Python \d+\.\d ms since the last step, \d+\.\d ms building the update, "
                      r"realize \d+\.\d ms", lines[1])

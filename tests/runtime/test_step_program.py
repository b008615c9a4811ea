"""A captured step as one program (uopc.render_step, uopc.runtime.graph, uopc.jit; NOTES 45) and the multi-output
kernel of an optimizer step (uopc.codegen.siblings). Values against NumPy (float64) and bit for bit against the
kernel-by-kernel replay; the step program's structure read from its calls and levels, not from its spelling."""
import numpy as np
import pytest
import uopc.runtime.build
import uopc.runtime.calls
from uopc.dtype import dtypes
from uopc.helpers import Context
from uopc.jit import TinyJit
from uopc.kernelize import make_plan
from uopc.opt import VectorOpt
from uopc.optim import AdamW, clip_grad_norm_
from uopc.options import Options
from uopc.render_c import C
from uopc.render_step import render_step, worksharable
from uopc.step_calls import Call, Copy, levels
from uopc.tensor import Tensor
from uopc.uop import AxisType, Ops, ParamArg, UOp, range_, sink

pytestmark = pytest.mark.ch14
rng = np.random.default_rng(0)


def mlp_step(seed: int = 0, clip: float = 1.0):
  """A two-layer MLP's training step (AdamW with decay on the matrices, clipping), captured by TinyJit."""
  r = np.random.default_rng(seed)
  w1, b1 = Tensor(r.standard_normal((16, 32)).astype(np.float32) * 0.3), Tensor(np.zeros(32, np.float32))
  w2, b2 = Tensor(r.standard_normal((32, 4)).astype(np.float32) * 0.3), Tensor(np.zeros(4, np.float32))
  opt = AdamW([{"params": [w1, w2], "weight_decay": 0.1}, {"params": [b1, b2], "weight_decay": 0.0}], lr=1e-2)
  def step(x: Tensor, y: Tensor) -> Tensor:
    loss = (((x @ w1 + b1).relu() @ w2 + b2 - y) ** 2).mean()
    opt.zero_grad(); loss.backward()
    if clip: clip_grad_norm_(opt.params, clip)
    opt.step(loss)
    return loss
  return TinyJit(step), [w1, b1, w2, b2], opt


def batches(n: int):
  return [(rng.standard_normal((64, 16)).astype(np.float32), rng.standard_normal((64, 4)).astype(np.float32))
          for _ in range(n)]


@pytest.mark.parametrize("opt", [None, VectorOpt])
def test_the_replayed_step_is_one_call_and_bit_for_bit_the_kernels(opt, monkeypatch):
  Tensor.opt = opt or Tensor.opt
  (graph, params, _), (kernels, kparams, _) = mlp_step(), mlp_step()
  calls = []
  real = uopc.runtime.calls.call_kernel
  monkeypatch.setattr(uopc.runtime.calls, "call_kernel", lambda prg, args: calls.append(prg.name) or real(prg, args))
  for k, (x, y) in enumerate(batches(6)):
    calls.clear()
    a = graph(Tensor(x), Tensor(y)).item()
    n_graph = len(calls)
    with Context(JIT_GRAPH=0): b = kernels(Tensor(x), Tensor(y)).item()
    assert a == b, f"step {k}: the step program's loss {a!r}, the kernels' {b!r}"
    if k >= 2: assert n_graph == 1 and calls[0] == "uopc_step"   # a replay: one C call
  assert graph.graph is not None and kernels.graph is None
  for p, q in zip(params, kparams): np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_the_step_program_trains_as_numpy_does():
  step, params, opt = mlp_step(seed=3, clip=0.0)
  ref = [p.numpy().astype(np.float64) for p in params]
  m, v = [np.zeros_like(p) for p in ref], [np.zeros_like(p) for p in ref]
  for t, (x, y) in enumerate(batches(5), start=1):
    loss = step(Tensor(x), Tensor(y)).item()
    w1, b1, w2, b2 = ref
    h = x @ w1 + b1
    a = np.maximum(h, 0)
    d = 2 * (a @ w2 + b2 - y) / y.size
    ref_loss = ((a @ w2 + b2 - y) ** 2).mean()
    dh = (d @ w2.T) * (h > 0)
    grads = [x.T @ dh, dh.sum(0), a.T @ d, d.sum(0)]
    for k, g in enumerate(grads):
      wd, b1, b2 = (0.1 if k in (0, 2) else 0.0), 0.9, 0.999
      m[k], v[k] = b1 * m[k] + (1 - b1) * g, b2 * v[k] + (1 - b2) * g * g
      ref[k] = ref[k] * (1 - 1e-2 * wd) - 1e-2 * (m[k] / (1 - b1 ** t)) / (np.sqrt(v[k] / (1 - b2 ** t)) + 1e-8)
    assert loss == pytest.approx(ref_loss, rel=1e-4)
  assert step.graph is not None
  for p, r in zip(params, ref): np.testing.assert_allclose(p.numpy(), r, rtol=1e-4, atol=1e-5)


# ---- the step program's structure ----
def copy_kernel(n: int, thread: bool = True, hoist: bool = False) -> UOp:
  """dst[i] = 2 src[i] over a THREAD (or plain) loop; hoist: a running state declared before the loop (NOTES 9)."""
  src, dst = (UOp(Ops.BUFFER, (), ParamArg(k, dtypes.f32, (n,))) for k in range(2))
  i = range_(n, 0, AxisType.THREAD if thread else AxisType.LOOP)
  if not hoist: return sink(dst.index(i).store(src.index(i).load() * 2.0).end(i))
  acc = UOp(Ops.ALLOC, (), ParamArg(0, dtypes.f32, (1,)))
  a = acc.after()   # placed before the loop: the state every thread of a `parallel for` shares
  init = a.index(0).store(UOp.const(0.0, dtypes.f32))
  run = a.after(init, i)
  upd = run.index(0).store(run.index(0).load() + src.index(i).load())
  total = a.after(upd.end(i)).index(0).load()
  return sink(dst.index(UOp.const(0)).store(total))


def test_a_loop_is_shared_out_only_when_that_is_the_same_program():
  assert worksharable(copy_kernel(64))
  assert not worksharable(copy_kernel(64, thread=False))   # no THREAD loop: one thread runs it
  assert not worksharable(copy_kernel(64, hoist=True))     # state before the loop would be each thread's own


def test_levels_put_barriers_only_where_a_kernel_touches_what_another_wrote():
  def call(reads, writes): return Call(None, "k", (*reads, *writes), (False,) * len(reads) + (True,) * len(writes))
  calls = [call([0], [1]), call([0], [2]), call([1, 2], [3]), call([0], [4]), Copy(0, 3, 4), call([4], [5])]
  # 0 and 1 read the same input; 2 reads what they wrote; 3 is independent of all before it; the copy into buffer 0
  # must wait for every kernel that read 0; 5 reads what 3 wrote
  assert levels(calls) == [[0, 1, 3], [2, 5], [4]]


def test_the_step_is_one_parallel_region_with_shared_loops_and_serial_kernels():
  calls = [Call(copy_kernel(4096), "a", (0, 1), (False, True)),
           Call(copy_kernel(64, thread=False), "b", (1, 2), (False, True)),
           Call(copy_kernel(4096), "a", (2, 3), (False, True), serial=True)]
  step = render_step(calls, C)
  assert (step.functions, step.shared, step.serial, step.barriers) == (3, 1, 2, 2)
  assert step.src.count("#pragma omp parallel\n") == 1   # one region: the workers are woken once a step
  assert [ln for ln in step.outline if not ln.startswith("#")] == [
    "a_0((void*[]){b[0], b[1]});", "uopc_barrier(&bar, nth, &sense);", "b_1(b[1], b[2]);",
    "uopc_barrier(&bar, nth, &sense);", "a_2(b[2], b[3]);"]


def test_without_openmp_the_step_program_runs_serially_and_computes_the_same(monkeypatch, tmp_path, fresh_plan_cache):
  import warnings
  data = batches(4)
  monkeypatch.setenv("UOPC_CACHE_DIR", str(tmp_path))   # nothing cached: every kernel is built again, without OpenMP
  monkeypatch.setattr(uopc.runtime.build, "openmp_flags", lambda cc: None)   # no flags give this compiler OpenMP
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)     # "cannot build with -fopenmp", said once per process
    (graph, params, _), (kernels, kparams, _) = mlp_step(seed=5), mlp_step(seed=5)
    for x, y in data:
      a = graph(Tensor(x), Tensor(y)).item()
      with Context(JIT_GRAPH=0): b = kernels(Tensor(x), Tensor(y)).item()
      assert a == b   # the kernels' own builds are serial too: the same program, bit for bit
  assert "-fopenmp" not in graph.graph.program.flags and kernels.graph is None
  for p, q in zip(params, kparams): np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_debug_2_prints_the_step_program(capsys):
  step, _, _ = mlp_step(seed=1)
  x, y = batches(1)[0]
  step(Tensor(x), Tensor(y))
  with Context(DEBUG=2):
    step(Tensor(x), Tensor(y))   # the capture
    capsys.readouterr()
    step.reset(); step(Tensor(x), Tensor(y)); step(Tensor(x), Tensor(y))
    made = capsys.readouterr().out
    step(Tensor(x), Tensor(y))
    replay = capsys.readouterr().out
  assert "step program: StepProgram(" in made and "uopc_barrier" in made
  assert replay.count("step program:") == 1 and "kernels in one call" in replay


# ---- an optimizer step's updates in one kernel ----
def adamw_reference(p, g, lr, wd, b1=0.9, b2=0.999, eps=1e-8):
  """One AdamW step from zero moments, in float64 (PyTorch's formula)."""
  m, v = (1 - b1) * g, (1 - b2) * g * g
  return p * (1 - lr * wd) - lr * (m / (1 - b1)) / (np.sqrt(v / (1 - b2)) + eps), m, v


@pytest.mark.parametrize("opt", [None, VectorOpt])
def test_adamw_updates_every_parameter_in_one_kernel(opt):
  Tensor.opt = opt or Tensor.opt
  shapes = [(8, 16), (16,), (16, 32), (32,), (8, 16)]
  start = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  grads = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  ps = [Tensor(p) for p in start]
  adam = AdamW(ps, lr=1e-2, weight_decay=0.1)
  for p, g in zip(ps, grads): p.grad = Tensor(g)
  roots = [new.uop for new in adam.schedule_step()]
  plan = make_plan(roots, options=Options(opt=Tensor.opt))
  names = [k.name for k in plan.kernels]
  assert sum(n.endswith(f"_x{3 * len(shapes)}") for n in names) == 1, names   # m, v and p of every parameter
  assert len(make_plan(roots, options=Options(opt=Tensor.opt, siblings=False)).kernels) >= 3 * len(shapes)
  adam.step()
  for k, (p, g, p0) in enumerate(zip(ps, grads, start)):
    ref_p, ref_m, ref_v = adamw_reference(p0.astype(np.float64), g.astype(np.float64), 1e-2, 0.1)
    np.testing.assert_allclose(p.numpy(), ref_p, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(adam.m[k].numpy(), ref_m, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(adam.v[k].numpy(), ref_v, rtol=1e-5, atol=1e-9)


def test_an_output_another_kernel_reads_keeps_its_own_kernel():
  x = Tensor(rng.standard_normal((6, 8)).astype(np.float32))
  a, b = x * 2, x + 1
  c = (a * 3).sum(1)    # reads a: a must be in memory before c's kernel runs
  plan = make_plan([a.uop, b.uop, c.uop], options=Options(opt=Tensor.opt))
  assert not any("_x" in k.name for k in plan.kernels)
  Tensor.realize(a, b, c)
  np.testing.assert_allclose(c.numpy(), (x.numpy() * 6).sum(1), rtol=1e-5)
  np.testing.assert_allclose(b.numpy(), x.numpy() + 1)


def test_on_cl_the_capture_enqueues_every_kernel_in_one_go(monkeypatch):
  from uopc.runtime.cl import cl_queue
  cl_queue()   # CLUnavailable here: reported skipped (tests/conftest.py)
  import uopc.runtime.graph
  w = Tensor(rng.standard_normal((16, 4)).astype(np.float32), device="CL")
  @TinyJit
  def step(x: Tensor) -> Tensor:
    y = (x @ w).relu()
    w.assign(w - 0.01 * (x.T @ y))
    Tensor.realize(y, w)
    return y
  xs = [rng.standard_normal((8, 16)).astype(np.float32) for _ in range(4)]
  ref = w.numpy().astype(np.float64)
  waits = []
  real = uopc.runtime.graph.CLGraph.__call__
  monkeypatch.setattr(uopc.runtime.graph.CLGraph, "__call__", lambda self: waits.append(1) or real(self))
  for x in xs:
    y = step(Tensor(x, device="CL")).numpy()
    ry = np.maximum(x @ ref, 0)
    ref = ref - 0.01 * (x.T @ ry)
    np.testing.assert_allclose(y, ry, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(w.numpy(), ref, rtol=1e-4, atol=1e-5)
  assert type(step.graph.program).__name__ == "CLGraph" and len(waits) == 2   # the two replays: one call each


def test_under_clang_the_write_backs_stay_copies(monkeypatch):
  """clang ignores `#pragma GCC ivdep`, which keeps a kernel written in place bit for bit: without OpenMP, clang's
  build of the in-place step put 24 of 512 values 1 ulp off the kernel-by-kernel replay (the test above)."""
  import shutil
  from uopc.jit import keeps_in_place_bits
  from uopc.runtime import toolchain
  if shutil.which("clang") is None: pytest.skip("no clang here")
  monkeypatch.setenv("CC", "clang")
  toolchain._version_cache.pop("clang", None)
  assert not keeps_in_place_bits()


def replayed_and_eager_padded_convolution(linked: bool) -> tuple[np.ndarray, np.ndarray]:
  """LeNet's first layer (batch 8, 5 x 5, padding 2) replayed from a capture, and run eagerly; the step linked from
  the kernels' objects (tests/runtime/test_step_linked.py) or with their text compiled in its own (STEP_OBJECTS=0)."""
  from uopc import nn, no_grad
  conv = nn.Conv2d(1, 6, 5, padding=2)
  x = np.random.default_rng(0).standard_normal((8, 1, 28, 28)).astype(np.float32)
  with no_grad(), Context(EAGER_GRAPH=0, STEP_OBJECTS=int(linked)):
    eager = conv(Tensor(x)).numpy()
    step = TinyJit(lambda t: conv(t).realize())
    replayed = [step(Tensor(x)).numpy() for _ in range(3)][-1]   # run, capture, replay
  return replayed, eager


def test_a_padded_convolution_in_a_steps_text_is_its_own_kernel_within_a_rounding():
  """What holds on every level and compiler for a step that compiles its kernels' text itself (clang, macOS; here
  STEP_OBJECTS=0): the two orders of the same 25-term sums agree to float32's rounding of them."""
  replayed, eager = replayed_and_eager_padded_convolution(linked=False)
  np.testing.assert_allclose(replayed, eager, rtol=0, atol=25 * np.finfo(np.float32).eps * np.abs(eager).max())


# not strict: the defect shows where gcc vectorizes the tile in one form and not the other (here at AVX2; at x86-64-v2
# both stay scalar and it passes), which depends on the level and the compiler. A linked step has its kernels' own
# code and their bits (test_step_linked.py); this form stays where a step cannot be linked.
@pytest.mark.xfail(strict=False, reason="NOTES 68: in the step's text gcc vectorizes the padded convolution's 4 x 4 "
                   "tile, not in the kernel's own build, and sums it in another order (1 ulp); open for that form")
def test_a_padded_convolution_in_a_steps_text_is_bit_for_bit_its_own_kernel():
  """The same bits. Found by tests/nn/test_lenet.py's checkpoint round trip once eager plans ran as step programs
  (uopc.plan_program)."""
  np.testing.assert_array_equal(*replayed_and_eager_padded_convolution(linked=False))

"""Write-backs in place (uopc.step_calls.write_in_place, uopc.jit.Graph): an output assigned to an array that lives
on is written by its kernel into that array, and its Copy disappears, where the step's calls prove it safe. Each rule
on synthetic calls (what is moved, what is kept), then captured steps bit for bit against JIT_INPLACE=0 (every output
copied), and the count of copies read from the step program (StepSource.copies)."""
from dataclasses import replace
import numpy as np
import pytest
from uopc.dtype import dtypes
from uopc.helpers import Context
from uopc.jit import TinyJit, keeps_in_place_bits
from uopc.nn import GPT
from uopc.nn.train import configure_optimizer, preset
from uopc.opt import VectorOpt
from uopc.optim import AdamW, clip_grad_norm_
from uopc.render_c import C
from uopc.render_step import render_step
from uopc.step_calls import Call, Copy, levels, write_in_place
from uopc.tensor import Tensor
from uopc.uop import AxisType, Ops, ParamArg, UOp, range_, sink

CLANG = "this C compiler (clang) ignores `#pragma GCC ivdep`: write-backs stay copies (uopc.jit.keeps_in_place_bits)"
pytestmark = [pytest.mark.ch14, pytest.mark.skipif(not keeps_in_place_bits(), reason=CLANG)]
N = 64
T, G, O, X, Y = range(5)   # step buffers: the target, a gradient, the writer's output, another output, another input


# ---- the rules, on synthetic calls ----
def update(read: str = "same") -> UOp:
  """out[i] = target[j] * 0.5 + g[i] (data0 the target, data1 g, data2 out), j = i ("same"), N-1-i ("reversed"), or
  the target's sum ("sum", a reduction over it); "state": target[i] * 0.5 + the sum of g, in an accumulator."""
  t, g, out = (UOp(Ops.BUFFER, (), ParamArg(k, dtypes.f32, (N,))) for k in range(3))
  i = range_(N, 0, AxisType.THREAD)
  if read in ("sum", "state"):
    j = range_(N, 1, AxisType.REDUCE)
    acc = UOp(Ops.ALLOC, (), ParamArg(0, dtypes.f32, (1,)))
    a = acc.after()
    init = a.index(0).store(UOp.const(0.0, dtypes.f32))
    run = a.after(init, j)
    total = a.after(run.index(0).store(run.index(0).load() + (t if read == "sum" else g).index(j).load()).end(j))
    if read == "state": return sink(out.index(i).store(t.index(i).load() * 0.5 + total.index(0).load()).end(i))
    old = total.index(0).load()
  else: old = t.index(i if read == "same" else i * -1 + (N - 1)).load()
  return sink(out.index(i).store(old * 0.5 + g.index(i).load()).end(i))


def reader(src: int, dst: int) -> Call:
  """A kernel that reads buffer src (dst = 2 src)."""
  a, b = (UOp(Ops.BUFFER, (), ParamArg(k, dtypes.f32, (N,))) for k in range(2))
  i = range_(N, 0, AxisType.THREAD)
  return Call(sink(b.index(i).store(a.index(i).load() * 2.0).end(i)), "r", (src, dst), (False, True))


def writer(read: str = "same") -> Call: return Call(update(read), "u", (T, G, O), (False, False, True))
def copy() -> Copy: return Copy(T, O, N * 4)


def test_an_elementwise_update_writes_its_target_through_two_plain_pointers():
  calls, moved = write_in_place([writer(), copy()], {O})
  assert moved == {O: T} and not any(isinstance(c, Copy) for c in calls)
  (c,) = calls
  assert c.ast is writer().ast and c.bufs == (T, G, T) and c.writes == (False, False, True)
  # the two parameters into the target are not restrict pointers; the gradient's stays one
  for shared in (True, False):
    step = render_step([replace(c, serial=not shared)], C)
    assert step.copies == 0 and (step.shared, step.serial) == (int(shared), int(not shared))
    assert "float* data0" in step.src and "float* data2" in step.src and "float* restrict data1" in step.src
    assert "#pragma GCC ivdep" in step.src   # no iteration depends on another (rule 2): vectorized as over restrict
  assert "float* restrict data0" in render_step([writer(), copy()], C).src   # copied: every pointer restrict


@pytest.mark.parametrize("read", ["reversed", "sum", "state"])   # state: an accumulator (ivdep could not be said)
def test_a_writer_that_reads_its_target_at_another_element_keeps_the_copy(read):
  calls = [writer(read), copy()]
  assert write_in_place(calls, {O}) == (calls, {})


def test_a_later_reader_of_the_old_value_keeps_the_copy():
  calls = [writer(), reader(T, X), copy()]
  assert write_in_place(calls, {O}) == (calls, {})
  # a reader before the writer is fine: levels() runs the writer, which now writes the target, a level after it
  calls, moved = write_in_place([reader(T, X), writer(), copy()], {O})
  assert moved == {O: T} and levels(calls) == [[0], [1]]


def test_an_output_read_after_its_target_is_written_again_keeps_the_copy():
  calls = [writer(), copy(), reader(Y, T), reader(O, X)]   # out is read after the target has a newer value
  assert write_in_place(calls, {O}) == (calls, {})
  calls, moved = write_in_place([writer(), copy(), reader(O, X), reader(Y, T)], {O})
  assert moved == {O: T} and calls[1].bufs == (T, X)   # the reader of out reads the target, before it changes


def test_an_output_that_is_not_the_graphs_own_keeps_the_copy():
  calls = [writer(), copy()]
  assert write_in_place(calls, set()) == (calls, {})   # a returned output (fresh at every replay), an argument


def test_a_writer_whose_code_in_place_is_not_its_own_keeps_its_copies():
  """Rule 6 (a linked step runs each kernel's own build, NOTES 71): a writer that keeps_code refuses keeps its copy,
  and another writer, accepted, is still moved."""
  calls = [writer(), copy()]
  assert write_in_place(calls, {O}, keeps_code=lambda c: False) == (calls, {})
  asked = []
  moved_calls, moved = write_in_place(calls, {O}, keeps_code=lambda c: asked.append(c) or True)
  assert moved == {O: T} and [c.bufs for c in asked] == [(T, G, T)]   # asked of the writer as it would run
  second = Call(update(), "v", (Y, G, X), (False, False, True))   # another update: X written back into Y
  both = [writer(), copy(), second, Copy(Y, X, N * 4)]
  out, moved = write_in_place(both, {O, X}, keeps_code=lambda c: c.name == "v")
  assert moved == {X: Y} and out[:2] == both[:2]


def every_copy_refused(calls: list) -> None:
  """Each write-back a step program still copies is one whose writer, written in place, would not be its own build's
  machine code (rule 6; which ones depends on how gcc vectorizes for this machine, NOTES 71)."""
  from uopc.device import get_device
  keeps = get_device("CPU").keeps_code(C)
  writer_of = {b: c for c in calls if isinstance(c, Call) for b, w in zip(c.bufs, c.writes) if w}
  for c in calls:
    if isinstance(c, Copy):
      w = writer_of[c.src]
      assert keeps is not None and not keeps(replace(w, bufs=tuple(c.dst if b == c.src else b for b in w.bufs)))


# ---- captured steps, bit for bit against the copies ----
def mlp(seed: int = 0):
  """A two-layer MLP's AdamW step with clipping, captured; (step, parameters and moments)."""
  r = np.random.default_rng(seed)
  w1, b1 = Tensor(r.standard_normal((16, 32)).astype(np.float32) * 0.3), Tensor(np.zeros(32, np.float32))
  w2, b2 = Tensor(r.standard_normal((32, 4)).astype(np.float32) * 0.3), Tensor(np.zeros(4, np.float32))
  opt = AdamW([{"params": [w1, w2], "weight_decay": 0.1}, {"params": [b1, b2], "weight_decay": 0.0}], lr=1e-2)
  def step(x: Tensor, y: Tensor) -> Tensor:
    loss = (((x @ w1 + b1).relu() @ w2 + b2 - y) ** 2).mean()
    opt.zero_grad(); loss.backward()
    clip_grad_norm_(opt.params, 1.0)
    opt.step(loss)
    return loss
  return TinyJit(step), [w1, b1, w2, b2, *opt.m, *opt.v, opt.b1_t, opt.b2_t]


# the baby GPT's recipe on one of its 4 layers and 4 of its 12 sequences: the same kernels, rules and write-backs per
# layer at a quarter of the compile (the whole step's 212 write-backs: notes/notes63_step_inplace.py)
SMALL_BABY = dict(n_layer=1, batch=4)


def baby_gpt():
  """nanoGPT's baby GPT (uopc.nn.train's preset, SMALL_BABY) and its recipe's step (AdamW's groups, clipping),
  captured."""
  cfg, tc = preset("baby", vocab_size=76, **SMALL_BABY)
  model = GPT(cfg, seed=0)
  opt = configure_optimizer(model, tc)
  def step(x: Tensor, y: Tensor) -> Tensor:
    _, loss = model(x, y)
    opt.zero_grad(); loss.backward()
    clip_grad_norm_(opt.params, tc.grad_clip)
    opt.step(loss)
    return loss
  return TinyJit(step), [*model.parameters(), *opt.m, *opt.v, opt.b1_t, opt.b2_t]


def train_both(make, data: list) -> tuple:
  """The same step captured with and without write-backs in place, trained on the same data: losses, final arrays,
  and each captured step."""
  runs = []
  for in_place in (1, 0):
    with Context(JIT_INPLACE=in_place):
      step, arrays = make()
      losses = [step(Tensor(x), Tensor(y)).item() for x, y in data]
    runs.append((losses, [a.numpy() for a in arrays], step))
  return runs


def check_bit_for_bit(on, off):
  assert on[0] == off[0], f"losses in place {on[0]}, copied {off[0]}"
  for k, (a, b) in enumerate(zip(on[1], off[1])): np.testing.assert_array_equal(a, b, err_msg=f"array {k}")


def write_backs(step: TinyJit) -> int:
  """The outputs the capture assigns to arrays that live on (Step.writes), in every realize of the step."""
  return sum(len(st.writes) for st in step.steps)


@pytest.mark.parametrize("opt", [None, VectorOpt])
def test_an_adamw_mlp_step_in_place_is_bit_for_bit_the_copies(opt):
  Tensor.opt = opt or Tensor.opt
  rng = np.random.default_rng(1)
  data = [(rng.standard_normal((64, 16)).astype(np.float32), rng.standard_normal((64, 4)).astype(np.float32))
          for _ in range(6)]
  on, off = train_both(mlp, data)
  check_bit_for_bit(on, off)
  # every parameter, both moments, b1^t and b2^t, and the clipped gradients and their norm (clip_grad_norm_ assigns)
  assert off[2].graph.program.step.copies == write_backs(off[2]) == 4 * 3 + 2 + 4 + 1
  assert on[2].graph.program.step.copies < off[2].graph.program.step.copies
  every_copy_refused(on[2].graph.calls)


def test_the_baby_gpt_step_in_place_is_bit_for_bit_the_copies():
  Tensor.opt = VectorOpt   # as uopc.bench gpt measures it (DefaultOpt's step: bit for bit too, checked by hand)
  cfg, tc = preset("baby", vocab_size=76, **SMALL_BABY)
  rng = np.random.default_rng(2)
  data = [tuple(rng.integers(0, 76, (tc.batch, cfg.block_size)).astype(np.int32) for _ in range(2)) for _ in range(4)]
  on, off = train_both(baby_gpt, data)
  check_bit_for_bit(on, off)
  assert off[2].graph.program.step.copies == write_backs(off[2]) > len(on[1])
  assert on[2].graph.program.step.copies < off[2].graph.program.step.copies
  every_copy_refused(on[2].graph.calls)


# ---- what stays copied, end to end ----
def assign_step(transpose: bool):
  """w <- w.T / 2 + x (transpose) or w / 2 + x, captured: the transposed read keeps its copy."""
  w = Tensor(np.arange(N, dtype=np.float32).reshape(8, 8))
  @TinyJit
  def step(x: Tensor) -> None:
    w.assign((w.T if transpose else w) * 0.5 + x).realize()
  return step, w


@pytest.mark.parametrize("transpose", [True, False])
def test_a_transposed_update_keeps_its_copy_and_stays_right(transpose):
  step, w = assign_step(transpose)
  ref = w.numpy().astype(np.float64)
  for k in range(5):
    x = np.full((8, 8), k, np.float32)
    step(Tensor(x))
    ref = (ref.T if transpose else ref) * 0.5 + x
  np.testing.assert_array_equal(w.numpy(), ref.astype(np.float32))
  assert step.graph.program.step.copies == (1 if transpose else 0)


def test_a_later_reader_of_the_old_value_keeps_its_copy_and_stays_right():
  w = Tensor(np.arange(N, dtype=np.float32).reshape(8, 8))
  @TinyJit
  def step(x: Tensor) -> Tensor:
    new = w * 0.5 + x
    s = (new * w).sum()       # a reduction after the update's kernel that reads the old w (and the new)
    w.assign(new)
    Tensor.realize(w, s)
    return s
  ref = w.numpy().astype(np.float64)
  for k in range(5):
    x = np.full((8, 8), k, np.float32)
    got = step(Tensor(x)).item()
    new = ref * 0.5 + x
    assert got == pytest.approx((new * ref).sum(), rel=1e-6)
    ref = new
  np.testing.assert_array_equal(w.numpy(), ref.astype(np.float32))
  assert step.graph.program.step.copies == 1

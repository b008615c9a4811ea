"""A plan that has run before runs as one step program (uopc.plan_program): the eager step (its graph built every
time, no TinyJit) bit for bit what the kernel-by-kernel run gives (EAGER_GRAPH=0), its write-backs in place where
the compiler keeps their bits, and counted from the code's own calls and the program, never timed."""
import numpy as np
import pytest
from uopc import kernelize, plan_program
from uopc.device import _cpu_graph_links
from uopc.helpers import Context
from uopc.nn import GPT
from uopc.nn.train import configure_optimizer, preset
from uopc.opt import VectorOpt
from uopc.optim import AdamW, clip_grad_norm_
from uopc.plan_program import PROGRAM_AFTER_RUNS, write_targets
from uopc.runtime.toolchain import keeps_in_place_bits
from uopc.tensor import Tensor

pytestmark = pytest.mark.ch14
# the eager program is made only where the step links its kernels' own objects (gcc on Linux: NOTES 69)
makes_programs = pytest.mark.skipif(not _cpu_graph_links(), reason="the step cannot link its kernels' objects here "
                                    "(clang, macOS): the eager plan runs kernel by kernel (the last test)")


def mlp_trainer():
  """An MLP with AdamW (two groups) and clipping, its step as a student writes it: (step(x, y) -> loss, arrays)."""
  r = np.random.default_rng(0)
  w1, b1 = Tensor(r.standard_normal((16, 32)).astype(np.float32) * 0.3), Tensor(np.zeros(32, np.float32))
  w2, b2 = Tensor(r.standard_normal((32, 4)).astype(np.float32) * 0.3), Tensor(np.zeros(4, np.float32))
  opt = AdamW([{"params": [w1, w2], "weight_decay": 0.1}, {"params": [b1, b2], "weight_decay": 0.0}], lr=1e-2)
  def step(x, y) -> float:
    loss = (((Tensor(x) @ w1 + b1).relu() @ w2 + b2 - Tensor(y)) ** 2).mean()
    opt.zero_grad(); loss.backward()
    clip_grad_norm_(opt.params, 1.0)
    opt.step(loss)
    return loss.item()
  return step, [w1, b1, w2, b2, *opt.m, *opt.v, opt.b1_t, opt.b2_t]


def gpt_trainer():
  """Chapter 14's GPT with its recipe (AdamW's groups, clipping), stepped eagerly as uopc.bench gpt does (the baby
  GPT, bit for bit too, checked by hand over 11 steps: its step program takes minutes to build here)."""
  cfg, tc = preset("chapter", vocab_size=76)
  model = GPT(cfg, seed=0)
  opt = configure_optimizer(model, tc)
  def step(x, y) -> float:
    _, loss = model(Tensor(x), Tensor(y))
    opt.zero_grad(); loss.backward()
    clip_grad_norm_(opt.params, tc.grad_clip)
    opt.step(loss)
    return loss.item()
  return step, [*model.parameters(), *opt.m, *opt.v, opt.b1_t, opt.b2_t]


def gpt_parameters() -> int: return len(GPT(preset("chapter", vocab_size=76)[0], seed=0).parameters())


def train(make, data, graph: int, monkeypatch, cache) -> tuple:
  """Losses (hex), final arrays, the kernel-by-kernel runs counted, and the step programs the plans made. Every plan in
  the cache starts as one that has never run (the plans are shared by both runs: planning a GPT twice costs seconds)."""
  runs = []
  plans = cache.plans.values()
  for plan in plans: plan_program._runs.pop(id(plan), None)
  with monkeypatch.context() as m, Context(EAGER_GRAPH=graph):
    m.setattr(kernelize, "run_kernels", lambda *a, _f=kernelize.run_kernels, **k: runs.append(1) or _f(*a, **k))
    step, arrays = make()
    losses = [float(step(x, y)).hex() for x, y in data]
  programs = [p for plan in plans for p in plan_program.runs_of(plan).programs.values()]
  return losses, [a.numpy() for a in arrays], len(runs), programs


def check(make, data, monkeypatch) -> list:
  """Eager with step programs against kernel by kernel, bit for bit; the programs made."""
  with kernelize.isolated_plan_cache() as cache:
    off, on = train(make, data, 0, monkeypatch, cache), train(make, data, 1, monkeypatch, cache)
  assert on[0] == off[0]
  for k, (a, b) in enumerate(zip(on[1], off[1])): np.testing.assert_array_equal(a, b, err_msg=f"array {k}")
  assert off[2] >= len(data) and off[3] == []   # every step kernel by kernel, no program
  # the step's plan: kernel by kernel twice (PROGRAM_AFTER_RUNS), then one program a step
  assert on[2] == off[2] - (len(data) - PROGRAM_AFTER_RUNS)
  return on[3]


@makes_programs
def test_an_eager_mlp_step_runs_its_plan_as_one_program_bit_for_bit(monkeypatch):
  rng = np.random.default_rng(1)
  data = [(rng.standard_normal((64, 16)).astype(np.float32), rng.standard_normal((64, 4)).astype(np.float32))
          for _ in range(5)]
  (program,) = check(mlp_trainer, data, monkeypatch)
  # every parameter and both its moments, b1^t and b2^t (the step's one realize: .item() reads the loss it computed)
  assert len(program.targets) == 4 * 3 + 2
  copies_explained(program)


@makes_programs
def test_where_the_compiler_does_not_keep_in_place_bits_the_program_copies(monkeypatch):
  """clang (uopc.runtime.toolchain.keeps_in_place_bits): every write-back stays a copy, still bit for bit."""
  import uopc.plan_program
  rng = np.random.default_rng(2)
  data = [(rng.standard_normal((64, 16)).astype(np.float32), rng.standard_normal((64, 4)).astype(np.float32))
          for _ in range(4)]
  monkeypatch.setattr(uopc.plan_program, "keeps_in_place_bits", lambda: False)
  (program,) = check(mlp_trainer, data, monkeypatch)
  assert program.copies == len(program.targets) > 0


@makes_programs
def test_the_gpt_eager_step_is_bit_for_bit_with_its_write_backs_in_place(monkeypatch):
  old, Tensor.opt = Tensor.opt, VectorOpt   # as uopc.bench gpt measures it
  try:
    cfg, tc = preset("chapter", vocab_size=76)
    rng = np.random.default_rng(2)
    data = [tuple(rng.integers(0, 76, (tc.batch, cfg.block_size)).astype(np.int32) for _ in range(2))
            for _ in range(4)]
    (program,) = check(gpt_trainer, data, monkeypatch)
  finally: Tensor.opt = old
  assert len(program.targets) == 3 * gpt_parameters() + 2   # each parameter and its two moments, b1^t and b2^t
  copies_explained(program)


def copies_explained(program) -> None:
  """Under a compiler that keeps in-place bits, the write-backs still copied are those whose writer would not be its own
  build's code in place (b1^t's and b2^t's 0-d kernels always are: some move); elsewhere every one is copied."""
  if not keeps_in_place_bits(): assert program.copies == len(program.targets); return
  from test_step_inplace import every_copy_refused
  assert program.copies < len(program.targets)
  every_copy_refused(program.calls)


def lenet_trainer():
  """A LeNet-5 with AdamW, stepped eagerly: its update kernel (every parameter's in one, uopc.codegen.siblings) over
  the aliased pointers was other machine code than its own build on a Zen 4 (NOTES 71)."""
  from uopc import nn
  model = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2, seed=0), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(6, 16, 5, seed=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Linear(400, 120, seed=2), nn.ReLU(), nn.Linear(120, 84, seed=3), nn.ReLU(),
                        nn.Linear(84, 10, seed=4))
  opt = AdamW(model.parameters(), lr=2e-3)
  def step(x, y) -> float:
    opt.zero_grad()
    loss = model(Tensor(x)).cross_entropy(Tensor(y))
    loss.backward()
    opt.step(loss)
    return loss.item()
  return step, [*model.parameters(), *opt.m, *opt.v, opt.b1_t, opt.b2_t]


@makes_programs
def test_an_eager_lenet_step_is_bit_for_bit_with_adamw(monkeypatch):
  rng = np.random.default_rng(11)
  data = [(rng.standard_normal((8, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, 8).astype(np.int32))
          for _ in range(4)]
  (program,) = check(lenet_trainer, data, monkeypatch)
  copies_explained(program)


def test_a_target_over_another_inputs_memory_is_run_kernel_by_kernel():
  """A write-back whose array shares memory with another input of the plan: the step program could not see the
  alias (two buffer numbers), so there is no program shape for it."""
  a = np.zeros(8, np.float32)
  other = np.zeros(8, np.float32)
  assert write_targets([a, other], [(0, a)]) == ((0, "in", 0),)
  assert write_targets([a, other], [(0, np.zeros(4, np.float32))]) == ((0, "new", 0),)
  assert write_targets([a[:], other], [(0, a)]) is None   # a view of the target is another input
  assert write_targets([a, a[:4]], [(0, a)]) is None


def test_a_plan_runs_as_a_program_only_from_its_third_run_and_with_enough_kernels(monkeypatch):
  """A graph realized twice (a test, a cell run again) and a plan of a few kernels never pay a program's compile."""
  import uopc.plan_program
  rng = np.random.default_rng(3)
  data = [(rng.standard_normal((64, 16)).astype(np.float32), rng.standard_normal((64, 4)).astype(np.float32))
          for _ in range(PROGRAM_AFTER_RUNS)]
  with kernelize.isolated_plan_cache() as cache:
    assert train(mlp_trainer, data, 1, monkeypatch, cache)[3] == []
    monkeypatch.setattr(uopc.plan_program, "PROGRAM_MIN_KERNELS", 10 ** 6)
    assert train(mlp_trainer, data * 3, 1, monkeypatch, cache)[3] == []


def test_where_the_step_cannot_link_its_kernels_objects_the_eager_plan_runs_kernel_by_kernel(monkeypatch):
  """A step that compiles its kernels' text itself (clang, macOS; STEP_OBJECTS=0 here) is not always their bits (NOTES
  68): an eager run must not change with the number of times its plan has run, so it makes no program."""
  rng = np.random.default_rng(3)
  data = [(rng.standard_normal((64, 16)).astype(np.float32), rng.standard_normal((64, 4)).astype(np.float32))
          for _ in range(4)]
  with kernelize.isolated_plan_cache() as cache, Context(STEP_OBJECTS=0):
    losses, _, runs, programs = train(mlp_trainer, data, 1, monkeypatch, cache)
  assert programs == [] and runs >= len(data)

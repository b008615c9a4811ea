"""Training as nanoGPT trains it (issue 29): presets, AdamW's parameter groups and gradient clipping against NumPy
in float64, the schedule, checkpoints that resume exactly, dropout drawn afresh at every replay of a captured step
(uopc.rng), the baby model for a few steps, and the PyTorch twin when torch is importable."""
import dataclasses
import gc
import math
import numpy as np
import pytest
from uopc.jit import TinyJit
from uopc.nn import GPT, Dropout, Linear
from uopc.nn.data import CharTokenizer, load_text, split
from uopc.nn.train import PROMPT, TrainConfig, Trainer, decays, lr_at, preset, sample
from uopc.optim import SGD, AdamW, adamw_step_numpy, clip_grad_norm_, clip_grad_norm_numpy
from uopc.rng import draw_seed, uniform, uniform_numpy
from uopc.tensor import Tensor

pytestmark = pytest.mark.ch14

IDS = np.tile(np.arange(11, dtype=np.int32), 40)          # k -> k+1: a sequence a model learns quickly
SMALL = dict(vocab_size=11, block_size=6, n_layer=1, n_head=2, n_embd=8, steps=10, warmup=3, batch=4, lr=1e-2,
             min_lr=1e-3, eval_batches=2)


# ---- the random numbers a kernel computes ----
def test_uniform_matches_numpy_and_is_uniform():
  seed = draw_seed(np.random.default_rng(0))
  u = uniform((12, 64, 16), seed).numpy()
  np.testing.assert_array_equal(u, uniform_numpy((12, 64, 16), int(seed.item())))
  assert u.dtype == np.float32 and 0 <= u.min() and u.max() < 1
  assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.01
  other = uniform_numpy((12, 64, 16), int(seed.item()) + 1)
  assert abs(np.corrcoef(u.ravel(), other.ravel())[0, 1]) < 0.03      # neighbouring seeds: unrelated numbers


def dropout_step(p=0.5, seed=1):
  lin, drop = Linear(8, 8, seed=0), Dropout(p, seed=seed)
  opt = SGD(lin.parameters(), lr=0.0)
  def step(x):
    y = drop(lin(x))
    loss = y.sum()
    opt.zero_grad(); loss.backward(); opt.step(loss, y)
    return y
  return step


def test_captured_dropout_draws_a_fresh_mask_every_replay():
  step = TinyJit(dropout_step())
  x = Tensor(np.ones((16, 8), np.float32))
  masks = [step(x).numpy() == 0 for _ in range(5)]
  assert step.steps is not None and len(step.refills) == 1          # captured, with one seed to draw per replay
  for a, b in zip(masks[2:], masks[3:]): assert not np.array_equal(a, b)   # replays 3, 4, 5: all different
  assert all(0.3 < m.mean() < 0.7 for m in masks)


def test_dropout_same_seed_same_run_captured_or_not():
  x = Tensor(np.ones((16, 8), np.float32))
  plain = dropout_step(seed=7)
  eager = [plain(x).numpy() for _ in range(5)]
  jitted = TinyJit(dropout_step(seed=7))
  again = [jitted(x).numpy() for _ in range(5)]
  for a, b in zip(eager, again): np.testing.assert_array_equal(a, b)


def test_gpt_with_dropout_captured_matches_eager():
  cfg, tc = preset("chapter", **{**SMALL, "dropout": 0.1})   # the checkpoint tests' model: they reuse these plans
  runs = []
  for jit in (False, True):
    t = Trainer(GPT(cfg, seed=0), tc, IDS, IDS, jit=jit)
    runs.append([t.step() for _ in range(5)])
  np.testing.assert_allclose(runs[1], runs[0], rtol=1e-6)
  assert len(set(np.round(runs[1], 6))) == 5


# ---- the optimizer: groups, clipping, schedule ----
def test_adamw_groups_decay_only_their_parameters():
  rng = np.random.default_rng(0)
  a0, b0, ca, cb = (rng.standard_normal((3, 4)) for _ in range(4))
  a, b = Tensor(a0, requires_grad=True), Tensor(b0[0], requires_grad=True)
  opt = AdamW([{"params": [a], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.0}], lr=0.05)
  ra, rb, ma, va, mb, vb = a0.copy(), b0[0].copy(), 0, 0, 0, 0
  for t in range(1, 4):
    loss = ((a * Tensor(ca)) ** 2).sum() + ((b * Tensor(cb[0])) ** 2).sum()
    opt.zero_grad(); loss.backward(); opt.step(loss)
    ra, ma, va = adamw_step_numpy(ra, 2 * ca * ca * ra, ma, va, t, 0.05, weight_decay=0.1)
    rb, mb, vb = adamw_step_numpy(rb, 2 * cb[0] * cb[0] * rb, mb, vb, t, 0.05, weight_decay=0.0)
    np.testing.assert_allclose(a.numpy(), ra, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(b.numpy(), rb, rtol=1e-12, atol=1e-12)
  with pytest.raises(ValueError, match="parameter group"): AdamW([{"params": [a], "momentum": 0.9}])


def test_gpt_decays_two_dimensional_weights_only():
  cfg, tc = preset("baby")
  decay, keep = decays(GPT(cfg))
  assert all(len(p.shape) == 2 for p in decay) and all(len(p.shape) == 1 for p in keep)
  assert sum(p.numel() for p in decay) + sum(p.numel() for p in keep) == 811_264
  assert len(keep) == 4 * 8 + 2                     # per block: 2 LayerNorms (gain, bias), 4 biases; ln_f


@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grad_norm_matches_numpy(max_norm):
  rng = np.random.default_rng(1)
  ps = [Tensor(rng.standard_normal(s), requires_grad=True) for s in ((3, 4), (5,))]
  cs = [rng.standard_normal(p.shape) for p in ps]
  loss = sum(((p * Tensor(c)) ** 2).sum() for p, c in zip(ps, cs))
  loss.backward()
  grads = [2 * c * c * p.numpy() for p, c in zip(ps, cs)]
  total = clip_grad_norm_(ps, max_norm)
  ref, ref_total = clip_grad_norm_numpy(grads, max_norm)
  assert abs(total.item() - ref_total) < 1e-12
  for p, g in zip(ps, ref): np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-12)


def test_schedule_warms_up_then_decays_to_min_lr():
  tc = TrainConfig(steps=2000, lr=1e-3, min_lr=1e-4, warmup=100)
  lrs = [lr_at(k, tc) for k in range(2001)]
  assert lrs[0] == pytest.approx(1e-3 / 101) and lrs[99] == pytest.approx(1e-3 * 100 / 101)
  assert lrs[100] == pytest.approx(1e-3) and lrs[2000] == pytest.approx(1e-4) and lr_at(5000, tc) == 1e-4
  assert lrs[1050] == pytest.approx(1e-4 + 0.5 * 9e-4)                 # half way down the cosine
  assert all(a >= b for a, b in zip(lrs[100:], lrs[101:]))


# ---- checkpoints ----
@pytest.mark.parametrize("jit", [False, True])
def test_checkpoint_resumes_exactly(tmp_path, jit):
  cfg, tc = preset("chapter", **{**SMALL, "dropout": 0.1})
  whole = Trainer(GPT(cfg, seed=0), tc, IDS, IDS, jit=jit)
  losses = [whole.step() for _ in range(8)]
  first = Trainer(GPT(cfg, seed=0), tc, IDS, IDS, jit=jit)
  head = [first.step() for _ in range(4)]
  first.save(tmp_path / "ck.npz")
  resumed = Trainer.load(tmp_path / "ck.npz", IDS, IDS, jit=jit)
  assert resumed.step_count == 4 and resumed.tc == tc
  assert head + [resumed.step() for _ in range(4)] == losses            # bit for bit
  for k, v in whole.model.state_dict().items(): np.testing.assert_array_equal(resumed.model.state_dict()[k], v)
  for k, v in whole.opt.state_dict().items(): np.testing.assert_array_equal(resumed.opt.state_dict()[k], v)


def test_evaluation_uses_fixed_batches():
  cfg, tc = preset("chapter", **SMALL)
  t = Trainer(GPT(cfg, seed=0), tc, IDS, IDS)
  a, b = t.evaluate(), t.evaluate()
  t.step()
  assert a == b and t.evaluate() != a


# ---- the garbage collector: frozen by the Trainer, on purpose and only when asked ----
def test_trainer_freezes_the_collector_only_when_asked():
  cfg, tc = preset("chapter", **SMALL)
  gc.unfreeze()
  try:
    off = Trainer(GPT(cfg, seed=0), tc, IDS, IDS, jit=False, freeze_gc=False)
    lost = [off.step() for _ in range(2)]
    assert gc.get_freeze_count() == 0                                     # freeze_gc=False: the collector as it was
    on = Trainer(GPT(cfg, seed=0), tc, IDS, IDS, jit=False)
    made = gc.get_freeze_count()
    assert made > 0                                                       # after the model and optimizer
    got = [on.step() for _ in range(2)]
    assert gc.get_freeze_count() > made                                   # and after the first step
    assert got == lost                                                    # the same values either way
  finally: gc.unfreeze()


# ---- the baby model, a few steps ----
def test_baby_preset_trains_and_samples():
  text = load_text()
  tok = CharTokenizer(text)
  train_ids, val_ids = split(tok.encode(text))
  cfg, tc = preset("baby", tok.vocab_size)
  assert (cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.block_size, cfg.dropout, tc.batch) == (4, 4, 128, 64, 0.0, 12)
  assert (tc.lr, tc.min_lr, tc.betas, tc.weight_decay, tc.grad_clip, tc.steps) == (1e-3, 1e-4, (0.9, 0.99), 0.1,
                                                                                    1.0, 2000)
  # its layers are alike (the same kernels, four times over): one of them trains as the four do, for a quarter of the
  # planning (CI's slowest test, NOTES 51)
  t = Trainer(GPT(dataclasses.replace(cfg, n_layer=1), seed=0), tc, train_ids, val_ids)
  losses = [t.step() for _ in range(6)]   # the first step plans; the others replay it
  assert all(abs(x - math.log(76)) < 0.15 for x in losses[:3])         # a fresh model guesses about uniformly
  assert t.evaluate(1) < math.log(76)
  assert PROMPT in text
  out = sample(t.model, tok, n=10, seed=0)
  assert out.startswith(PROMPT) and len(out) == len(PROMPT) + 10


# ---- the PyTorch twin (optional: skipped without torch) ----
def test_pytorch_twin_agrees_for_the_first_ten_steps(tmp_path):
  pytest.importorskip("torch")
  from uopc.bench.gpt_twin import twin
  rows = twin("chapter", steps=10, out=tmp_path, progress=False)
  line = next(r for r in rows if r.startswith("first 10 steps"))
  assert float(line.split("=")[1].split(";")[0]) < 1e-3, line
  table = np.loadtxt(tmp_path / "gpt_chapter_twin.csv", delimiter=",", skiprows=1)
  assert table.shape == (10, 4) and np.abs(table[:, 2] - table[:, 3]).max() < 1e-3
  assert (tmp_path / "gpt_chapter_twin.png").stat().st_size > 0
  assert (tmp_path / "gpt_chapter_sample.txt").read_text().splitlines()[2] == PROMPT.strip()

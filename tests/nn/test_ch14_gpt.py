"""Chapter 14: uopc.nn modules, state dicts, the optimizers against NumPy reference steps, a tiny GPT against a NumPy
float64 forward and finite differences, one plan reused across training steps, and a loss that falls."""
import math
import numpy as np
import pytest
from uopc.nn.data import CharTokenizer, get_batch, load_text, split
from uopc.dtype import dtypes
import uopc.kernelize
from uopc.jit import TinyJit
from uopc.kernelize import plan_cache_size
from uopc.nn import GPT, GPTConfig, Dropout, Embedding, LayerNorm, Linear, Module, load_npz
from uopc.nn.gpt import cross_entropy_numpy, gpt_forward_numpy
from uopc.optim import SGD, AdamW, adamw_step_numpy, realize, sgd_step_numpy
from uopc.tensor import Tensor

pytestmark = pytest.mark.ch14

TINY = GPTConfig(vocab_size=11, block_size=6, n_layer=2, n_head=2, n_embd=8)


def f64(model: Module) -> Module:
  """The same model in float64 (load_state_dict keeps the arrays' dtype)."""
  model.load_state_dict({k: v.astype(np.float64) for k, v in model.state_dict().items()})
  return model


def batch(cfg=TINY, B=3, seed=0):
  rng = np.random.default_rng(seed)
  return (rng.integers(0, cfg.vocab_size, (B, cfg.block_size)).astype(np.int32),
          rng.integers(0, cfg.vocab_size, (B, cfg.block_size)).astype(np.int32))


# ---- modules and parameters ----
def test_parameters_found_recursively_tied_once():
  m = GPT(TINY)
  names = list(m.named_parameters())
  assert names[:2] == ["wte.weight", "wpe.weight"]
  assert "blocks.1.attn.qkv.weight" in names and "blocks.0.mlp.proj.bias" in names and "ln_f.weight" in names
  assert "head.weight" not in names                       # tied: the head is wte.weight, counted once
  per_block = 2 + 2 + 2 + 2 + 2 + 2                       # ln1, qkv, proj, ln2, fc, proj: weight and bias each
  assert len(names) == 2 + TINY.n_layer * per_block + 2
  C, V = TINY.n_embd, TINY.vocab_size
  assert m.num_parameters() == V * C + TINY.block_size * C + TINY.n_layer * (12 * C * C + 13 * C) + 2 * C
  untied = GPT(GPTConfig(**{**TINY.to_dict(), "tie_weights": False}))
  assert untied.named_parameters()["head.weight"].shape == (V, C)


def test_module_attributes_lists_and_dicts():
  class Net(Module):
    def __init__(self):
      self.layers = [Linear(3, 4, seed=0), Linear(4, 2, bias=False, seed=1)]
      self.norms = {"a": LayerNorm(2)}
      self._hidden = Linear(2, 2)                          # private attributes are not parameters
  assert list(Net().named_parameters()) == ["layers.0.weight", "layers.0.bias", "layers.1.weight",
                                            "norms.a.weight", "norms.a.bias"]


def test_linear_embedding_layernorm_values():
  lin, x = Linear(5, 3, seed=0), np.random.default_rng(1).standard_normal((2, 4, 5)).astype(np.float32)
  w, b = lin.weight.numpy(), lin.bias.numpy()
  np.testing.assert_allclose(lin(Tensor(x)).numpy(), x @ w.T + b, rtol=1e-5, atol=1e-6)
  emb, idx = Embedding(7, 3, seed=0), np.array([[0, 6, 2], [2, 2, 1]], np.int32)
  np.testing.assert_array_equal(emb(idx).numpy(), emb.weight.numpy()[idx])
  ln = LayerNorm(5)
  ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
  np.testing.assert_allclose(ln(Tensor(x)).numpy(), ref, rtol=1e-4, atol=1e-5)
  with pytest.raises(TypeError, match="integers"): emb(np.zeros(3, np.float32))


def test_dropout_seeded_and_off_in_eval():
  x = Tensor(np.ones((4, 50), np.float32))
  a, b = Dropout(0.5, seed=3)(x).numpy(), Dropout(0.5, seed=3)(x).numpy()
  np.testing.assert_array_equal(a, b)                     # same seed, same mask
  assert set(np.unique(a)) <= {0.0, 2.0} and 0.3 < (a == 0).mean() < 0.7
  d = Dropout(0.5, seed=3)
  assert not np.array_equal(d(x).numpy(), d(x).numpy())   # a fresh mask each call
  np.testing.assert_array_equal(d.eval()(x).numpy(), x.numpy())
  with pytest.raises(ValueError): Dropout(1.0)


def test_state_dict_npz_round_trip(tmp_path):
  a, b = GPT(TINY, seed=0), GPT(TINY, seed=1)
  x, _ = batch()
  a.save(tmp_path / "a.npz")
  assert set(load_npz(tmp_path / "a.npz")) == set(a.named_parameters())
  b.load(tmp_path / "a.npz")
  for k, v in a.state_dict().items(): np.testing.assert_array_equal(b.state_dict()[k], v)
  np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())
  with pytest.raises(KeyError, match="missing"): b.load_state_dict({"wte.weight": a.state_dict()["wte.weight"]})
  with pytest.raises(ValueError, match="shape"): b.load_state_dict({**a.state_dict(), "wpe.weight": np.zeros((1, 8))})


# ---- optimizers against NumPy reference steps (float64) ----
def _quadratic(p: Tensor, c: np.ndarray) -> Tensor: return ((p * Tensor(c)) ** 2).sum() + p.sum()


def _grad_np(p: np.ndarray, c: np.ndarray) -> np.ndarray: return 2 * c * c * p + 1


@pytest.mark.parametrize("momentum,wd", [(0.0, 0.0), (0.9, 0.1)])
def test_sgd_matches_numpy(momentum, wd):
  rng = np.random.default_rng(0)
  p0, c = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
  p = Tensor(p0, requires_grad=True)
  opt = SGD([p], lr=0.05, momentum=momentum, weight_decay=wd)
  ref, b = p0.copy(), np.zeros_like(p0)
  for _ in range(3):
    opt.zero_grad(); _quadratic(p, c).backward(); opt.step()
    ref, b = sgd_step_numpy(ref, _grad_np(ref, c), b, 0.05, momentum, wd)
    np.testing.assert_allclose(p.numpy(), ref, rtol=1e-12, atol=1e-12)


def test_adamw_matches_numpy_with_changing_lr():
  rng = np.random.default_rng(0)
  p0, c = rng.standard_normal((5,)), rng.standard_normal((5,))
  p = Tensor(p0, requires_grad=True)
  opt = AdamW([p], lr=0.1, betas=(0.8, 0.95), eps=1e-8, weight_decay=0.1)
  ref, m, v = p0.copy(), np.zeros(5), np.zeros(5)
  for t in range(1, 5):
    opt.lr = 0.1 / t                                       # a buffer: the same plan every step
    loss = _quadratic(p, c)
    opt.zero_grad(); loss.backward(); opt.step(loss)
    ref, m, v = adamw_step_numpy(ref, _grad_np(ref, c), m, v, t, 0.1 / t, 0.8, 0.95, 1e-8, 0.1)
    np.testing.assert_allclose(p.numpy(), ref, rtol=1e-12, atol=1e-12)
  np.testing.assert_allclose(opt.m[0].numpy(), m, rtol=1e-12)
  np.testing.assert_allclose(opt.v[0].numpy(), v, rtol=1e-12)


def test_optimizer_errors():
  with pytest.raises(ValueError, match="no parameters"): SGD([])
  p = Tensor(np.zeros(3), requires_grad=True)
  with pytest.raises(RuntimeError, match="backward"): AdamW([p]).step()


# ---- the GPT against NumPy (float64) ----
def test_gpt_forward_matches_numpy_float64():
  m = f64(GPT(TINY, seed=0))
  x, y = batch()
  logits, loss = m(x, y)
  realize(logits, loss)                                   # one plan for both
  assert logits.dtype is dtypes.f64 and logits.shape == (3, TINY.block_size, TINY.vocab_size)
  ref = gpt_forward_numpy(m.state_dict(), TINY, x)
  np.testing.assert_allclose(logits.numpy(), ref, rtol=1e-10, atol=1e-12)
  assert abs(loss.item() - cross_entropy_numpy(ref, y)) < 1e-12


def test_gpt_gradients_match_finite_differences():
  cfg = GPTConfig(**{**TINY.to_dict(), "tie_weights": False})
  m = f64(GPT(cfg, seed=2))
  x, y = batch(cfg, B=2, seed=1)
  _, loss = m(x, y)
  loss.backward()
  params = m.named_parameters()
  realize(*(p.grad for p in params.values()))
  sd, rng, h = m.state_dict(), np.random.default_rng(0), 1e-6
  for name, p in params.items():
    g = p.grad.numpy()
    for flat in rng.choice(p.numel(), 2, replace=False):     # two entries of every parameter
      k = np.unravel_index(flat, p.shape)
      plus, minus = {**sd, name: sd[name].copy()}, {**sd, name: sd[name].copy()}
      plus[name][k] += h; minus[name][k] -= h
      fd = (cross_entropy_numpy(gpt_forward_numpy(plus, cfg, x), y) -
            cross_entropy_numpy(gpt_forward_numpy(minus, cfg, x), y)) / (2 * h)
      assert abs(g[k] - fd) < 1e-7 + 1e-5 * abs(fd), f"{name}{k}: autograd {g[k]}, finite difference {fd}"


# ---- training ----
STEP_CFG = GPTConfig(vocab_size=11, block_size=6, n_layer=1, n_head=2, n_embd=8)
IDS = np.tile(np.arange(11, dtype=np.int32), 40)          # a sequence a model learns quickly: k -> k+1


def train_tiny(steps: int, jit: bool = False, watch=None):
  m = GPT(STEP_CFG, seed=0)
  opt = AdamW(m.parameters(), lr=1e-2, weight_decay=0.1)
  def step(x, y):
    _, loss = m(x, y)
    opt.zero_grad(); loss.backward(); opt.step(loss)
    return loss
  step = TinyJit(step) if jit else step
  rng, losses = np.random.default_rng(0), []
  for k in range(steps):
    opt.lr = 1e-2 * (1 - k / (2 * steps))                  # changes every step: a buffer, not a constant
    x, y = get_batch(IDS, 4, STEP_CFG.block_size, rng)
    losses.append(step(Tensor(x), Tensor(y)).item())
    if watch: watch()
  return losses, m.state_dict()


def test_step_reuses_one_plan_and_loss_falls(monkeypatch):
  used, real = [], uopc.kernelize.plan_for
  monkeypatch.setattr(uopc.kernelize, "plan_for", lambda roots, options: used.append(real(roots, options)) or used[-1])
  sizes = []
  losses, _ = train_tiny(40, watch=lambda: sizes.append(plan_cache_size()))
  steps = [p for p in used if len(p.kernels) > 20]    # the training step's plan (item() realizes nothing)
  assert len(steps) == 40 and all(p is steps[1] for p in steps[1:]), "a new plan after step 2"
  assert sizes[1] == sizes[-1]
  assert losses[0] > math.log(11) - 0.3 and np.mean(losses[-5:]) < losses[0] - 1.0, losses


def test_captured_step_replays_the_same_training():
  eager, s_eager = train_tiny(8)
  jitted, s_jit = train_tiny(8, jit=True)
  np.testing.assert_allclose(jitted, eager, rtol=1e-6)
  for k, v in s_eager.items(): np.testing.assert_allclose(s_jit[k], v, rtol=1e-5, atol=1e-7)


def test_generate_is_seeded_and_one_shape():
  m = GPT(TINY, seed=0)
  a, b = m.generate([1, 2], 8, seed=5), m.generate([1, 2], 8, seed=5)
  assert a == b and len(a) == 8 and all(0 <= t < TINY.vocab_size for t in a)


# ---- data ----
def test_text_tokenizer_split():
  text = load_text()                                      # verifies data/shakespeare.txt.sha256
  assert 1_000_000 < len(text) < 1_100_000 and text.startswith("HAMLET")
  tok = CharTokenizer(text)
  assert tok.vocab_size == 76
  s = "To be, or not to be"
  assert tok.decode(tok.encode(s)) == s
  train, val = split(tok.encode(text[:1000]), 0.9)
  assert len(train) == 900 and len(val) == 100
  x, y = get_batch(train, 4, 8, np.random.default_rng(0))
  assert x.shape == y.shape == (4, 8) and x.dtype == np.int32
  np.testing.assert_array_equal(x[:, 1:], y[:, :-1])
  with pytest.raises(ValueError, match="alphabet"): tok.encode("\u00e9")


# ---- the command line and the benchmark ----
def test_examples_gpt_trains_writes_a_checkpoint_and_loads_it(tmp_path):
  import subprocess, sys
  from pathlib import Path
  script = Path(__file__).resolve().parents[2] / "examples" / "gpt.py"
  small = ["--layers", "1", "--embd", "16", "--heads", "2", "--block", "8", "--batch", "4", "--eval-batches", "1"]
  ckpt = tmp_path / "ck.npz"
  run = subprocess.run([sys.executable, str(script), "--steps", "3", *small, "--sample", "5", "--checkpoint",
                        str(ckpt)], capture_output=True, text=True, timeout=600)
  assert run.returncode == 0, run.stderr
  last = run.stdout.strip().splitlines()[-1]
  assert last.startswith("validation loss ") and "(ln V = 4.3307)" in last
  assert "3/3" in run.stderr and ckpt.exists()
  again = subprocess.run([sys.executable, str(script), "--steps", "0", "--load", str(ckpt), "--sample", "0",
                          "--eval-batches", "1", "--batch", "4"], capture_output=True, text=True, timeout=600)
  assert again.returncode == 0, again.stderr
  assert again.stdout.strip().splitlines()[-1] == last    # the same weights, the same fixed validation batches


def test_bench_gpt_rows():
  from uopc.bench.gpt import gpt
  rows = gpt(reps=2, warmup=1)
  assert any(r.startswith("uopc ") for r in rows) and any(r.startswith("uopc jit") for r in rows)
  assert any("graph building" in r for r in rows)

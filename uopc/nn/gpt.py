"""A GPT (nanoGPT's, in uopc Tensors): token and position embeddings, pre-LN blocks of causal self-attention and an
MLP, a final LayerNorm and a head tied to the token embedding (or not).

  model = GPT(GPTConfig(vocab_size=76, block_size=32, n_layer=1, n_head=2, n_embd=64))
  logits, loss = model(idx, targets)          # idx, targets (B, T) integers -> logits (B, T, V), loss ()
  model.generate(prompt, 200, seed=0)         # sampled token ids

Everything is lazy: model(...) builds one graph, and the optimizer realizes loss, gradients and updates together
(chapter 14). causal_self_attention is the naive form (scores, mask, softmax, weighted sum) because it must have a
gradient; uopc.nn.scaled_dot_product_attention is the fast forward-only kernel it is checked against.
"""
from __future__ import annotations
import math
from dataclasses import dataclass, asdict
import numpy as np
from uopc.dtype import DType, dtypes
from uopc.nn.layers import Module, Linear, Embedding, LayerNorm, Dropout, _rng
from uopc.tensor import Tensor
from uopc.errors import UsageError


@dataclass(frozen=True)
class GPTConfig:
  vocab_size: int = 76
  block_size: int = 32      # the longest context
  n_layer: int = 1
  n_head: int = 2
  n_embd: int = 64
  dropout: float = 0.0
  bias: bool = True
  tie_weights: bool = True  # the head is the token embedding's transpose (GPT-2), else its own Linear

  def to_dict(self) -> dict: return asdict(self)


def causal_mask(T: int) -> Tensor:
  """(T, T) bool, True above the diagonal: the keys j > i that query i must not see."""
  return Tensor.ones(T, T, dtype=dtypes.bool).triu(1)


def causal_self_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
  """softmax(q k^T / sqrt(D), keys j <= i) v for q, k, v (B, H, T, D)."""
  T, D = q.shape[-2], q.shape[-1]
  att = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(D))                                  # (B, H, T, T)
  att = att.masked_fill(causal_mask(T), -math.inf).softmax(-1)
  return att @ v                                                                        # (B, H, T, D)


class CausalSelfAttention(Module):
  def __init__(self, cfg: GPTConfig, rng, dtype: DType):
    C = cfg.n_embd
    self.n_head = cfg.n_head
    self.qkv = Linear(C, 3 * C, cfg.bias, rng, std=0.02, dtype=dtype)
    # GPT-2 scales the residual projections by 1/sqrt(2 n_layer) so the residual stream does not grow with depth
    self.proj = Linear(C, C, cfg.bias, rng, std=0.02 / math.sqrt(2 * cfg.n_layer), dtype=dtype)
    self.drop = Dropout(cfg.dropout, int(rng.integers(1 << 30)))

  def __call__(self, x: Tensor) -> Tensor:
    B, T, C = x.shape
    H = self.n_head
    q, k, v = self.qkv(x).split(C, dim=-1)                                              # (B, T, C) each
    q, k, v = (t.reshape(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))           # (B, H, T, D)
    y = causal_self_attention(q, k, v).transpose(1, 2).reshape(B, T, C)                 # heads side by side
    return self.drop(self.proj(y))


class MLP(Module):
  def __init__(self, cfg: GPTConfig, rng, dtype: DType):
    C = cfg.n_embd
    self.fc = Linear(C, 4 * C, cfg.bias, rng, std=0.02, dtype=dtype)
    self.proj = Linear(4 * C, C, cfg.bias, rng, std=0.02 / math.sqrt(2 * cfg.n_layer), dtype=dtype)
    self.drop = Dropout(cfg.dropout, int(rng.integers(1 << 30)))

  def __call__(self, x: Tensor) -> Tensor: return self.drop(self.proj(self.fc(x).gelu()))   # (B, T, C)


class Block(Module):
  """Pre-LN: x + attn(ln1(x)), then + mlp(ln2(x))."""
  def __init__(self, cfg: GPTConfig, rng, dtype: DType):
    self.ln1, self.attn = LayerNorm(cfg.n_embd, bias=cfg.bias, dtype=dtype), CausalSelfAttention(cfg, rng, dtype)
    self.ln2, self.mlp = LayerNorm(cfg.n_embd, bias=cfg.bias, dtype=dtype), MLP(cfg, rng, dtype)

  def __call__(self, x: Tensor) -> Tensor:
    x = x + self.attn(self.ln1(x))
    return x + self.mlp(self.ln2(x))


class GPT(Module):
  def __init__(self, cfg: GPTConfig, seed: int = 0, dtype: DType = dtypes.f32):
    if cfg.n_embd % cfg.n_head: raise UsageError(f"GPT: n_embd {cfg.n_embd} is not a multiple of n_head {cfg.n_head}")
    rng = _rng(seed)
    self.config = cfg
    self.wte = Embedding(cfg.vocab_size, cfg.n_embd, rng, std=0.02, dtype=dtype)        # (V, C)
    self.wpe = Embedding(cfg.block_size, cfg.n_embd, rng, std=0.02, dtype=dtype)        # (T_max, C)
    self.drop = Dropout(cfg.dropout, int(rng.integers(1 << 30)))
    self.blocks = [Block(cfg, rng, dtype) for _ in range(cfg.n_layer)]
    self.ln_f = LayerNorm(cfg.n_embd, bias=cfg.bias, dtype=dtype)
    self.head = None if cfg.tie_weights else Linear(cfg.n_embd, cfg.vocab_size, False, rng, std=0.02, dtype=dtype)

  def __call__(self, idx, targets=None):
    """idx (B, T) token ids -> logits (B, T, V); with targets (B, T) also the mean cross entropy: (logits, loss)."""
    idx = idx if isinstance(idx, Tensor) else Tensor(np.asarray(idx, np.int32))
    B, T = idx.shape
    if T > self.config.block_size: raise UsageError(f"GPT: {T} tokens, the block size is {self.config.block_size}")
    pos = self.wpe.weight[:T]                                                             # (T, C)
    x = self.drop(self.wte(idx) + pos)                                                    # (B, T, C)
    for block in self.blocks: x = block(x)
    x = self.ln_f(x)
    logits = x @ self.wte.weight.T if self.head is None else self.head(x)                 # (B, T, V)
    if targets is None: return logits
    targets = targets if isinstance(targets, Tensor) else Tensor(np.asarray(targets, np.int32))
    return logits, logits.reshape(B * T, -1).cross_entropy(targets.reshape(B * T))

  def generate(self, prompt: list[int], max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
               seed: int = 0) -> list[int]:
    """Sample max_new_tokens ids after prompt. The model always sees a full (1, block_size) window, the context at
    its start and zeros after: causal attention keeps the padding out of the logits read, and one shape is one plan
    (a shape per length would compile a plan per length)."""
    rng, bs, out = np.random.default_rng(seed), self.config.block_size, list(prompt)
    was = self.training
    self.eval()
    try:
      for _ in range(max_new_tokens):
        ctx = out[-bs:]
        window = np.zeros((1, bs), np.int32)
        window[0, :len(ctx)] = ctx
        logits = self(Tensor(window)).numpy()[0, len(ctx) - 1].astype(np.float64) / temperature   # (V,)
        if top_k is not None: logits[logits < np.sort(logits)[-top_k]] = -np.inf
        p = np.exp(logits - logits.max())
        out.append(int(rng.choice(len(p), p=p / p.sum())))
    finally: self.train(was)
    return out[len(prompt):]


# ---- the reference: the same forward in NumPy (float64), from the same state dict ----
def gpt_forward_numpy(sd: dict[str, np.ndarray], cfg: GPTConfig, idx: np.ndarray) -> np.ndarray:
  """logits (B, T, V) for idx (B, T), computed with NumPy from model.state_dict() (dropout off)."""
  f = {k: v.astype(np.float64) for k, v in sd.items()}
  def ln(x, p):
    m, v = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    y = (x - m) / np.sqrt(v + 1e-5) * f[p + ".weight"]
    return y + f[p + ".bias"] if p + ".bias" in f else y
  def lin(x, p): return x @ f[p + ".weight"].T + (f[p + ".bias"] if p + ".bias" in f else 0)
  def gelu(x): return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
  B, T = idx.shape
  C, H = cfg.n_embd, cfg.n_head
  x = f["wte.weight"][idx] + f["wpe.weight"][:T]                                          # (B, T, C)
  for i in range(cfg.n_layer):
    p = f"blocks.{i}"
    q, k, v = np.split(lin(ln(x, p + ".ln1"), p + ".attn.qkv"), 3, axis=-1)
    q, k, v = (t.reshape(B, T, H, C // H).transpose(0, 2, 1, 3) for t in (q, k, v))      # (B, H, T, D)
    att = q @ k.transpose(0, 1, 3, 2) / math.sqrt(C // H)
    att = np.where(np.triu(np.ones((T, T), bool), 1), -np.inf, att)
    att = np.exp(att - att.max(-1, keepdims=True))
    att /= att.sum(-1, keepdims=True)
    x = x + lin((att @ v).transpose(0, 2, 1, 3).reshape(B, T, C), p + ".attn.proj")
    x = x + lin(gelu(lin(ln(x, p + ".ln2"), p + ".mlp.fc")), p + ".mlp.proj")
  x = ln(x, "ln_f")
  return x @ f["wte.weight"].T if cfg.tie_weights else x @ f["head.weight"].T


def cross_entropy_numpy(logits: np.ndarray, targets: np.ndarray) -> float:
  z = logits.reshape(-1, logits.shape[-1]).astype(np.float64)
  z = z - z.max(-1, keepdims=True)
  logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
  return float(-logp[np.arange(len(z)), targets.reshape(-1)].mean())


__all__ = ["GPT", "GPTConfig", "Block", "MLP", "CausalSelfAttention", "causal_self_attention", "causal_mask",
           "gpt_forward_numpy", "cross_entropy_numpy"]

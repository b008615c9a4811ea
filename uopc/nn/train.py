"""Training a GPT as nanoGPT trains it: presets, AdamW with weight decay on the 2-D weights only, gradient clipping
by global norm, warm-up then cosine decay, evaluation on fixed validation batches, checkpoints that resume exactly.

  cfg, tc = preset("baby", vocab_size=76)       # nanoGPT's CPU "baby GPT" and its recipe
  trainer = Trainer(GPT(cfg, seed=0), tc, train_ids, val_ids)
  for k in range(tc.steps): loss = trainer.step()          # a captured (uopc.jit) step after the second
  trainer.evaluate()                                        # the mean loss over the same validation batches
  trainer.save("ck.npz"); Trainer.load("ck.npz", train_ids, val_ids)   # weights, optimizer, step, RNGs

A step is one plan (the forward, the backward, the clipping and AdamW's update realized together) replayed by
uopc.jit.TinyJit: everything that changes between steps is data (the batch, the learning rate's buffer, Adam's
b^t, a dropout seed that the replay draws afresh), never a constant in the graph.
"""
from __future__ import annotations
import gc, json, math
from dataclasses import dataclass, asdict, replace
import numpy as np
from uopc.jit import TinyJit
from uopc.nn.data import get_batch
from uopc.nn.gpt import GPT, GPTConfig
from uopc.nn.layers import Dropout, load_npz, save_npz
from uopc.optim import AdamW, clip_grad_norm_
from uopc.tensor import Tensor
from uopc.errors import UsageError

PROMPT = "Ham.\n"   # data/shakespeare.txt names a speaker on a line of its own: "Ham." (Hamlet) 358 times


@dataclass(frozen=True)
class TrainConfig:
  steps: int = 1000                 # the decay runs over this many steps (nanoGPT's lr_decay_iters = max_iters)
  batch: int = 16
  lr: float = 3e-3                  # the peak, after the warm-up
  min_lr: float = 3e-4              # where the cosine ends
  warmup: int = 20
  betas: tuple[float, float] = (0.9, 0.99)
  weight_decay: float = 0.01        # on the 2-D parameters only (decays())
  grad_clip: float = 1.0            # the gradients' global 2-norm at most this (0: no clipping)
  eval_interval: int = 100
  eval_batches: int = 4
  seed: int = 0                     # the training batches' generator

  def to_dict(self) -> dict: return asdict(self)


PRESETS: dict[str, tuple[dict, TrainConfig]] = {
  # chapter 14's model: 57,024 parameters, 1000 steps in the notebook
  "chapter": (dict(block_size=32, n_layer=1, n_head=2, n_embd=64, dropout=0.0),
              TrainConfig(steps=1000, batch=16, lr=3e-3, min_lr=3e-4, warmup=20, weight_decay=0.01)),
  # nanoGPT's CPU "baby GPT" (README, "I only have a macbook"): 811,264 parameters with 76 characters
  "baby": (dict(block_size=64, n_layer=4, n_head=4, n_embd=128, dropout=0.0),
           TrainConfig(steps=2000, batch=12, lr=1e-3, min_lr=1e-4, warmup=100, betas=(0.9, 0.99), weight_decay=0.1,
                       grad_clip=1.0, eval_interval=250, eval_batches=20)),
}


def preset(name: str, vocab_size: int = 76, **overrides) -> tuple[GPTConfig, TrainConfig]:
  """The model and training configuration named (PRESETS); overrides replace fields of either."""
  if name not in PRESETS: raise ValueError(f"preset: {name!r} is not one of {sorted(PRESETS)}")
  model, tc = PRESETS[name]
  cfg = GPTConfig(vocab_size=vocab_size, **model)
  mine = {k: v for k, v in overrides.items() if k in GPTConfig.__dataclass_fields__}
  rest = {k: v for k, v in overrides.items() if k not in mine}
  unknown = set(rest) - set(TrainConfig.__dataclass_fields__)
  if unknown: raise ValueError(f"preset: unknown settings {sorted(unknown)}")
  return replace(cfg, **mine), replace(tc, **rest)


def lr_at(step: int, tc: TrainConfig) -> float:
  """nanoGPT's get_lr: linear warm-up over tc.warmup steps, then a cosine from tc.lr down to tc.min_lr at tc.steps."""
  if step < tc.warmup: return tc.lr * (step + 1) / (tc.warmup + 1)
  if step > tc.steps: return tc.min_lr
  ratio = (step - tc.warmup) / max(tc.steps - tc.warmup, 1)
  return tc.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (tc.lr - tc.min_lr)


def decays(model: GPT) -> tuple[list[Tensor], list[Tensor]]:
  """nanoGPT's split: every parameter of 2 or more dimensions (the Linear weights and the embedding tables) is
  decayed, the 1-D ones (LayerNorm gains, biases) are not."""
  params = model.parameters()
  return [p for p in params if len(p.shape) >= 2], [p for p in params if len(p.shape) < 2]


def configure_optimizer(model: GPT, tc: TrainConfig) -> AdamW:
  """AdamW with two parameter groups, as nanoGPT's configure_optimizers builds it."""
  decay, keep = decays(model)
  return AdamW([{"params": decay, "weight_decay": tc.weight_decay}, {"params": keep, "weight_decay": 0.0}],
               lr=lr_at(0, tc), betas=tc.betas)


def read_checkpoint(path, vocab_size: int | None = None) -> tuple[dict, dict]:
  """(arrays, meta) of a checkpoint Trainer.save wrote. A model trained on another alphabet is refused here, with a
  message naming both sizes, rather than later in decode (vocab_size: this text's, or None not to check)."""
  state = load_npz(path)
  if "__meta__" not in state: raise UsageError(f"{path}: not a checkpoint written by uopc.nn.train (no __meta__)")
  meta = json.loads(str(state.pop("__meta__")))
  have = meta["config"]["vocab_size"]
  if vocab_size is not None and have != vocab_size:
    raise UsageError(f"{path}: a model of {have} tokens, but this text's alphabet has {vocab_size} characters: it was "
                     "trained on another text")
  return state, meta


class Trainer:
  """Trains a GPT with tc's recipe. freeze_gc (default True) calls gc.freeze() once the model and optimizer exist and
  again after the first step (its plan, kernels and cached graph made): those long-lived objects leave the cyclic
  garbage collector's generations. A step built every time (jit=False) makes ~10,000 new nodes; they die by reference
  count (UOps form no cycles), but their allocations trigger full collections, which walked every object of the
  process (~200,000, about 150 ms each; NOTES 37). Frozen objects are still freed by reference count; only a cycle
  among them would wait for gc.unfreeze(). This is a process-wide setting, made here on purpose: freeze_gc=False
  leaves the collector as it was."""
  def __init__(self, model: GPT, tc: TrainConfig, train_ids: np.ndarray, val_ids: np.ndarray, jit: bool = True,
               freeze_gc: bool = True):
    self.model, self.tc, self.train_ids, self.val_ids = model, tc, train_ids, val_ids
    self.opt = configure_optimizer(model, tc)
    self.rng = np.random.default_rng(tc.seed)          # the training batches
    self.step_count = 0
    self.losses: list[float] = []                      # the training loss of every step since this Trainer began
    self.evals: list[tuple[int, float]] = []           # (step, validation loss)
    self._step = TinyJit(self._train_step) if jit else self._train_step
    self._eval = TinyJit(self._eval_loss) if jit else self._eval_loss
    self._val_batches: list[tuple[np.ndarray, np.ndarray]] = []
    self._val_rng = np.random.default_rng(1234)        # the validation batches: drawn once, the same at every call
    self._freeze = freeze_gc
    if freeze_gc: freeze_collector()

  def _train_step(self, x: Tensor, y: Tensor) -> Tensor:
    _, loss = self.model(x, y)
    self.opt.zero_grad()
    loss.backward()
    if self.tc.grad_clip: clip_grad_norm_(self.opt.params, self.tc.grad_clip)
    self.opt.step(loss)                                # loss, gradients, clipping and updates: one plan
    return loss

  def _eval_loss(self, x: Tensor, y: Tensor) -> Tensor:
    loss = self.model(x, y)[1]
    loss.realize()
    return loss

  def batch(self) -> tuple[np.ndarray, np.ndarray]:
    return get_batch(self.train_ids, self.tc.batch, self.model.config.block_size, self.rng)

  def step(self) -> float:
    """One training step at this step's learning rate, on the next batch; returns its loss."""
    self.opt.lr = lr_at(self.step_count, self.tc)      # into its buffer: the captured step reads it
    x, y = self.batch()
    loss = self._step(Tensor(x), Tensor(y)).item()
    if self._freeze and not self.losses: freeze_collector()    # the first step's plan and graph are long-lived too
    self.step_count += 1
    self.losses.append(loss)
    return loss

  def evaluate(self, batches: int | None = None) -> float:
    """The mean loss over the first `batches` (default tc.eval_batches) fixed validation batches, in eval mode:
    the same batches at every call."""
    n = batches or self.tc.eval_batches
    while len(self._val_batches) < n:
      self._val_batches.append(get_batch(self.val_ids, self.tc.batch, self.model.config.block_size, self._val_rng))
    was = self.model.training
    self.model.eval()
    try: return float(np.mean([self._eval(Tensor(x), Tensor(y)).item() for x, y in self._val_batches[:n]]))
    finally: self.model.train(was)

  def due(self) -> bool:
    """Whether the validation loss is due after the step just taken (every tc.eval_interval steps, and the last)."""
    k = self.step_count
    return k % self.tc.eval_interval == 0 or k == self.tc.steps

  # ---- checkpoints ----
  def dropout_generators(self) -> list[np.random.Generator]:
    return [m._gen for m in self.model.modules() if isinstance(m, Dropout)]

  def save(self, path) -> None:
    """Weights, the optimizer's state, the step, the batches' and every dropout's generator state, the configs."""
    meta = {"config": self.model.config.to_dict(), "train": self.tc.to_dict(), "step": self.step_count,
            "rng": self.rng.bit_generator.state, "dropout": [g.bit_generator.state for g in self.dropout_generators()],
            "evals": self.evals}
    state = {f"model.{k}": v for k, v in self.model.state_dict().items()}
    state.update({f"opt.{k}": v for k, v in self.opt.state_dict().items()})
    save_npz({**state, "__meta__": np.array(json.dumps(meta))}, path)

  @classmethod
  def load(cls, path, train_ids: np.ndarray, val_ids: np.ndarray, jit: bool = True,
           vocab_size: int | None = None) -> Trainer:
    """A Trainer that continues exactly where the one saved to path stopped (vocab_size: the text's, checked)."""
    state, meta = read_checkpoint(path, vocab_size)
    cfg = GPTConfig(**meta["config"])
    tc = TrainConfig(**{**meta["train"], "betas": tuple(meta["train"]["betas"])})
    t = cls(GPT(cfg), tc, train_ids, val_ids, jit=jit)
    t.model.load_state_dict({k[6:]: v for k, v in state.items() if k.startswith("model.")})
    t.opt.load_state_dict({k[4:]: v for k, v in state.items() if k.startswith("opt.")})
    t.step_count, t.evals = meta["step"], [tuple(e) for e in meta["evals"]]
    t.rng.bit_generator.state = meta["rng"]
    for g, s in zip(t.dropout_generators(), meta["dropout"]): g.bit_generator.state = s
    return t


def freeze_collector() -> None:
  """Collect what is garbage now, then move every surviving object out of the collector's generations."""
  gc.collect()
  gc.freeze()


def sample(model: GPT, tok, prompt: str = PROMPT, n: int = 300, temperature: float = 0.8, top_k: int | None = 20,
           seed: int = 0) -> str:
  """The prompt and n characters sampled after it (temperature, top-k)."""
  return prompt + tok.decode(model.generate(tok.encode(prompt).tolist(), n, temperature, top_k, seed))


__all__ = ["TrainConfig", "PRESETS", "PROMPT", "preset", "lr_at", "decays", "configure_optimizer", "Trainer", "sample"]

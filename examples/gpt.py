"""Train a character-level GPT on eight Shakespeare plays with uopc (chapter 14), from the command line.

  python examples/gpt.py --steps 300                       # trains, writes gpt_checkpoint.npz, prints the val loss
  python examples/gpt.py --steps 0 --load gpt_checkpoint.npz --sample 300

Each training step is one plan: the forward, the backward and AdamW's updates realized together; after the first
step (which compiles) every step reuses that plan. Progress goes to stderr; the last line on stdout is
`validation loss X.XXXX (ln V = Y.YYYY)`. On cores shared with other work, OMP_NUM_THREADS=1 is the faster setting
(NOTES 15 has the numbers).
"""
from __future__ import annotations
import argparse, json, math, pathlib, sys, time
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from uopc.nn.data import load_text, CharTokenizer, split, get_batch   # noqa: E402
from uopc.nn import GPT, GPTConfig, save_npz, load_npz             # noqa: E402
from uopc.jit import TinyJit                                        # noqa: E402
from uopc.opt import DefaultOpt, VectorOpt                         # noqa: E402
from uopc.optim import AdamW                                       # noqa: E402
from uopc.tensor import Tensor                                     # noqa: E402

# the chapter's model: small enough that 300 steps take well under two minutes on two cores
MODEL = dict(block_size=32, n_layer=1, n_head=2, n_embd=64)
BATCH, LR = 16, 3e-3


def bar(k: int, n: int, msg: str, width: int = 30) -> None:
  """A one-line progress bar on stderr (no tqdm)."""
  done = width * k // max(n, 1)
  sys.stderr.write(f"\r[{'#' * done}{'.' * (width - done)}] {k}/{n} {msg}")
  if k == n: sys.stderr.write("\n")
  sys.stderr.flush()


def evaluate(model: GPT, ids: np.ndarray, batches: int, batch: int, seed: int = 1234) -> float:
  """Mean loss over `batches` fixed random batches (the same ones every call): one forward plan."""
  rng = np.random.default_rng(seed)
  model.eval()
  losses = []
  for _ in range(batches):
    x, y = get_batch(ids, batch, model.config.block_size, rng)
    losses.append(model(x, y)[1].item())
  model.train()
  return float(np.mean(losses))


def train(model: GPT, train_ids: np.ndarray, steps: int, batch: int = BATCH, lr: float = LR, seed: int = 0,
          warmup: int = 20, progress: bool = True, jit: bool = True) -> list[float]:
  """AdamW with a linear warm-up and a cosine decay to lr/10; returns the training loss of every step. jit: capture
  the step with uopc.jit.TinyJit and replay it."""
  opt = AdamW(model.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=0.01)

  def step(x: Tensor, y: Tensor) -> Tensor:
    _, loss = model(x, y)
    opt.zero_grad()
    loss.backward()
    opt.step(loss)                                  # loss, gradients and updates: one plan
    return loss

  step = TinyJit(step) if jit else step             # from the third call on: the plan replayed, no graph built
  rng, losses, t0 = np.random.default_rng(seed), [], time.perf_counter()
  for k in range(steps):
    opt.lr = lr * min(1.0, (k + 1) / warmup) * (0.55 + 0.45 * math.cos(math.pi * k / steps))   # into its buffer
    x, y = get_batch(train_ids, batch, model.config.block_size, rng)
    losses.append(step(Tensor(x), Tensor(y)).item())
    if progress and (k % 10 == 0 or k + 1 == steps):
      bar(k + 1, steps, f"loss {losses[-1]:.3f}  {time.perf_counter() - t0:.1f} s")
  return losses


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--steps", type=int, default=300)
  ap.add_argument("--batch", type=int, default=BATCH)
  ap.add_argument("--lr", type=float, default=LR)
  ap.add_argument("--layers", type=int, default=MODEL["n_layer"])
  ap.add_argument("--embd", type=int, default=MODEL["n_embd"])
  ap.add_argument("--heads", type=int, default=MODEL["n_head"])
  ap.add_argument("--block", type=int, default=MODEL["block_size"])
  ap.add_argument("--eval-batches", type=int, default=20)
  ap.add_argument("--no-jit", action="store_true", help="build every step's graph instead of replaying it")
  ap.add_argument("--opt", choices=["vector", "default"], default="vector",
                  help="the optimizer: VectorOpt (matmuls as vector code) or DefaultOpt (the kernels the book prints)")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--checkpoint", default="gpt_checkpoint.npz", help="where to write the trained weights")
  ap.add_argument("--load", default=None, help="start from this checkpoint")
  ap.add_argument("--sample", type=int, default=200, help="characters to generate after training (0: none)")
  args = ap.parse_args()
  Tensor.opt = VectorOpt if args.opt == "vector" else DefaultOpt

  text = load_text()
  tok = CharTokenizer(text)
  train_ids, val_ids = split(tok.encode(text), 0.9)
  if args.load:
    state = load_npz(args.load)
    cfg = GPTConfig(**json.loads(str(state.pop("__config__"))))
    if cfg.vocab_size != tok.vocab_size:
      raise SystemExit(f"{args.load}: a model of {cfg.vocab_size} tokens, but this text's alphabet has "
                       f"{tok.vocab_size} characters: it was trained on another text")
  else:
    cfg = GPTConfig(vocab_size=tok.vocab_size, block_size=args.block, n_layer=args.layers, n_head=args.heads,
                    n_embd=args.embd)
  model = GPT(cfg, seed=args.seed)
  if args.load: model.load_state_dict(state)
  print(f"GPT {cfg}: {model.num_parameters()} parameters; {len(train_ids)} train / {len(val_ids)} val characters",
        file=sys.stderr)

  t0 = time.perf_counter()
  if args.steps:   # one throw-away step compiles the step's plan; the weights are then put back
    start = model.state_dict()
    train(model, train_ids, 1, args.batch, args.lr, seed=args.seed + 1, progress=False, jit=False)
    model.load_state_dict(start)
  t1 = time.perf_counter()
  losses = train(model, train_ids, args.steps, args.batch, args.lr, seed=args.seed, jit=not args.no_jit) \
    if args.steps else []
  t2 = time.perf_counter()
  val = evaluate(model, val_ids, args.eval_batches, args.batch)
  t3 = time.perf_counter()
  if args.steps:
    print(f"compile {t1 - t0:.1f} s, {args.steps} steps {t2 - t1:.1f} s ({(t2 - t1) / args.steps * 1e3:.0f} ms/step, "
          f"{args.steps * args.batch * cfg.block_size / (t2 - t1):.0f} tokens/s), eval {t3 - t2:.1f} s; "
          f"train loss {np.mean(losses[-20:]):.4f} (last 20)", file=sys.stderr)
    save_npz({**model.state_dict(), "__config__": np.array(json.dumps(cfg.to_dict()))}, args.checkpoint)
    print(f"wrote {args.checkpoint}", file=sys.stderr)
  if args.sample:
    print(tok.decode(model.generate(tok.encode("ROMEO:\n").tolist(), args.sample, temperature=0.8, seed=0)),
          file=sys.stderr)
  print(f"validation loss {val:.4f} (ln V = {math.log(cfg.vocab_size):.4f})")


if __name__ == "__main__": main()

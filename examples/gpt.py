"""Train a character-level GPT on eight Shakespeare plays with uopc (chapter 14), from the command line.

  python examples/gpt.py --preset baby --steps 2000       # nanoGPT's CPU "baby GPT" and its recipe
  python examples/gpt.py --steps 300                       # the chapter's model (--preset chapter)
  python examples/gpt.py --resume gpt_checkpoint.npz --steps 2000   # continue a run exactly where it stopped
  python examples/gpt.py --steps 0 --load gpt_checkpoint.npz --sample 300

The recipe is uopc.nn.train's (AdamW on two parameter groups, gradient clipping, warm-up and cosine decay); each
step is one plan, captured and replayed (uopc.jit.TinyJit). Progress goes to stderr: a bar with the loss, the step
time and tokens/s, and the validation loss every eval_interval steps. The loss curve is written as CSV and PNG
(--curve PREFIX; by default beside the checkpoint), the checkpoint as .npz. The last line on stdout is
`validation loss X.XXXX (ln V = Y.YYYY)`. On cores shared with other work, OMP_NUM_THREADS=1 is the faster setting
(NOTES 15 has the numbers).
"""
from __future__ import annotations
import argparse, math, pathlib, sys, time
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from uopc.nn.data import load_text, CharTokenizer, split                   # noqa: E402
from uopc.nn import GPT, GPTConfig                                       # noqa: E402
from uopc.errors import UsageError                                        # noqa: E402
from uopc.nn.train import PRESETS, PROMPT, Trainer, preset, read_checkpoint, sample   # noqa: E402
from uopc.opt import DefaultOpt, VectorOpt                               # noqa: E402
from uopc.tensor import Tensor                                           # noqa: E402


def bar(k: int, n: int, msg: str, width: int = 30) -> None:
  """A one-line progress bar on stderr (no tqdm)."""
  done = width * k // max(n, 1)
  sys.stderr.write(f"\r[{'#' * done}{'.' * (width - done)}] {k}/{n} {msg}")
  if k == n: sys.stderr.write("\n")
  sys.stderr.flush()


def write_curve(prefix: str, rows: list[tuple], evals: list[tuple[int, float]], title: str) -> None:
  """rows (step, loss, lr, seconds) as PREFIX.csv, evaluations as PREFIX_val.csv, both drawn in PREFIX.png."""
  path = pathlib.Path(prefix)
  path.parent.mkdir(parents=True, exist_ok=True)
  np.savetxt(f"{prefix}.csv", np.array(rows, np.float64).reshape(-1, 4), delimiter=",",
             header="step,train_loss,lr,step_seconds", comments="", fmt=["%d", "%.6f", "%.6g", "%.6f"])
  np.savetxt(f"{prefix}_val.csv", np.array(evals, np.float64).reshape(-1, 2), delimiter=",",
             header="step,val_loss", comments="", fmt=["%d", "%.6f"])
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(8, 4.5))
  if rows:
    steps, loss = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    ax.plot(steps, loss, color="tab:blue", alpha=0.3, label="train (each step)")
    if len(loss) >= 20: ax.plot(steps[19:], np.convolve(loss, np.ones(20) / 20, "valid"), color="tab:blue",
                                label="train (mean of 20 steps)")
  if evals: ax.plot(*zip(*evals), "o-", color="tab:orange", label="validation")
  ax.set(xlabel="step", ylabel="cross entropy (nats per character)", title=title)
  ax.grid(alpha=0.3); ax.legend()
  fig.tight_layout(); fig.savefig(f"{prefix}.png", dpi=110); plt.close(fig)


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--preset", choices=sorted(PRESETS), default="chapter")
  ap.add_argument("--steps", type=int, default=None, help="training steps (default: the preset's)")
  ap.add_argument("--batch", type=int, default=None)
  ap.add_argument("--lr", type=float, default=None)
  ap.add_argument("--layers", type=int, default=None)
  ap.add_argument("--embd", type=int, default=None)
  ap.add_argument("--heads", type=int, default=None)
  ap.add_argument("--block", type=int, default=None)
  ap.add_argument("--dropout", type=float, default=None)
  ap.add_argument("--eval-interval", type=int, default=None)
  ap.add_argument("--eval-batches", type=int, default=None, help="validation batches during training")
  ap.add_argument("--final-eval-batches", type=int, default=200, help="validation batches at the end")
  ap.add_argument("--no-jit", action="store_true", help="build every step's graph instead of replaying it")
  ap.add_argument("--opt", choices=["vector", "default"], default="vector",
                  help="the optimizer: VectorOpt (matmuls as vector code) or DefaultOpt (the kernels the book prints)")
  ap.add_argument("--seed", type=int, default=0, help="the initial weights")
  ap.add_argument("--checkpoint", default="gpt_checkpoint.npz", help="where to write the trained state")
  ap.add_argument("--resume", default=None, help="continue training from this checkpoint (Trainer.save's)")
  ap.add_argument("--load", default=None, help="start from the weights of this checkpoint")
  ap.add_argument("--curve", default=None, help="write the loss curve to CURVE.csv, CURVE_val.csv, CURVE.png "
                                                "(default: beside the checkpoint, <checkpoint>_loss)")
  ap.add_argument("--sample", type=int, default=200, help="characters to generate after training (0: none)")
  args = ap.parse_args()
  Tensor.opt = VectorOpt if args.opt == "vector" else DefaultOpt

  text = load_text()
  tok = CharTokenizer(text)
  train_ids, val_ids = split(tok.encode(text), 0.9)
  names = dict(steps="steps", batch="batch", lr="lr", layers="n_layer", embd="n_embd", heads="n_head",
               block="block_size", dropout="dropout", eval_interval="eval_interval", eval_batches="eval_batches")
  overrides = {key: getattr(args, a) for a, key in names.items() if getattr(args, a) is not None}
  if args.resume:
    trainer = Trainer.load(args.resume, train_ids, val_ids, jit=not args.no_jit, vocab_size=tok.vocab_size)
    if "steps" in overrides: trainer.tc = type(trainer.tc)(**{**trainer.tc.to_dict(), "steps": overrides["steps"]})
  else:
    cfg, tc = preset(args.preset, tok.vocab_size, **overrides)
    model = GPT(cfg, seed=args.seed)
    if args.load:
      state, meta = read_checkpoint(args.load, tok.vocab_size)
      model = GPT(GPTConfig(**meta["config"]))
      model.load_state_dict({k[6:]: v for k, v in state.items() if k.startswith("model.")})
    trainer = Trainer(model, tc, train_ids, val_ids, jit=not args.no_jit)
  model, tc = trainer.model, trainer.tc
  print(f"GPT {model.config}: {model.num_parameters()} parameters; {len(train_ids)} train / {len(val_ids)} val "
        f"characters; {tc}", file=sys.stderr)

  tokens = tc.batch * model.config.block_size
  rows: list[tuple] = []
  t_start = time.perf_counter()
  first = trainer.step_count
  while trainer.step_count < tc.steps:
    t = time.perf_counter()
    loss = trainer.step()
    dt = time.perf_counter() - t
    rows.append((trainer.step_count, loss, trainer.opt.lr, dt))
    msg = f"loss {loss:.4f}  {dt * 1e3:6.1f} ms/step  {tokens / dt:8.0f} tokens/s"
    if trainer.due():
      trainer.evals.append((trainer.step_count, trainer.evaluate()))
      msg += f"  val {trainer.evals[-1][1]:.4f}"
    if trainer.step_count % 10 == 0 or trainer.due() or trainer.step_count == tc.steps:
      bar(trainer.step_count - first, tc.steps - first, msg)
  t_train = time.perf_counter() - t_start
  val = trainer.evaluate(args.final_eval_batches)
  if rows:
    steady = [r[3] for r in rows[2:]] or [r[3] for r in rows]   # after the first step (compiles) and the capture
    print(f"{len(rows)} steps in {t_train:.1f} s (evaluations included); median step {np.median(steady) * 1e3:.1f} ms, "
          f"{tokens / np.median(steady):.0f} tokens/s; train loss {np.mean([r[1] for r in rows[-20:]]):.4f} "
          f"(last 20)", file=sys.stderr)
    trainer.save(args.checkpoint)
    curve = args.curve or str(pathlib.Path(args.checkpoint).with_suffix("")) + "_loss"
    write_curve(curve, rows, trainer.evals, f"uopc, preset {args.preset}: {model.num_parameters()} parameters")
    print(f"wrote {args.checkpoint}, {curve}.csv, {curve}_val.csv, {curve}.png", file=sys.stderr)
  if args.sample:
    print(sample(model, tok, PROMPT, args.sample, temperature=0.8, top_k=20, seed=0), file=sys.stderr)
  print(f"validation loss {val:.4f} (ln V = {math.log(model.config.vocab_size):.4f})")


if __name__ == "__main__":
  try: main()
  except UsageError as e: raise SystemExit(f"gpt.py: {e}") from None   # a bad checkpoint: its message, no traceback

"""`python -m uopc.bench gpt --preset baby`: the preset's GPT trained by uopc (uopc.nn.train.Trainer, the step
captured and replayed) and, when torch is importable, by its PyTorch eager twin (uopc.bench.gpt.torch_peer): the
same initial weights copied over, the same batches, the same schedule and validation batches. Each is timed over
its whole run (wall clock, evaluations included); the two loss curves are written to one CSV and drawn on one plot.

  rows = twin("baby", steps=2000, out="outputs")     # gpt_baby_twin.csv, gpt_baby_twin_val.csv, gpt_baby_twin.png,
                                                     # gpt_baby_sample.txt; rows: the summary lines it prints
"""
from __future__ import annotations
import os, sys, time
from pathlib import Path
import numpy as np
from uopc.nn import GPT
from uopc.nn.data import CharTokenizer, get_batch, load_text, split
from uopc.nn.train import PROMPT, Trainer, lr_at, preset, sample

FINAL_EVAL = 200   # validation batches at the end (nanoGPT's eval_iters)


def _bar(name: str, k: int, n: int, loss: float, t0: float) -> None:
  if k % 10 and k != n: return
  done = 30 * k // max(n, 1)
  sys.stderr.write(f"\r{name:<5s} [{'#' * done}{'.' * (30 - done)}] {k}/{n} loss {loss:.4f} "
                   f"{time.perf_counter() - t0:7.1f} s")
  if k == n: sys.stderr.write("\n")
  sys.stderr.flush()


def run_uopc(trainer: Trainer, steps: int, progress: bool = True) -> dict:
  """steps of trainer, evaluating when due; the per-step losses, the evaluations, the wall time."""
  t0, losses = time.perf_counter(), []
  for _ in range(steps):
    losses.append(trainer.step())
    if trainer.due(): trainer.evals.append((trainer.step_count, trainer.evaluate()))
    if progress: _bar("uopc", trainer.step_count, steps, losses[-1], t0)
  wall = time.perf_counter() - t0
  return {"losses": losses, "evals": list(trainer.evals), "wall_s": wall, "val": trainer.evaluate(FINAL_EVAL)}


def run_torch(state: dict, trainer: Trainer, steps: int, threads: int, progress: bool = True) -> dict:
  """The PyTorch twin from the same initial state, on the batches and validation batches trainer draws."""
  import torch
  from uopc.bench.gpt import torch_peer
  cfg, tc = trainer.model.config, trainer.tc
  step, forward = torch_peer(state, cfg, threads, tc)
  rng = np.random.default_rng(tc.seed)                 # the Trainer's batch generator, from its start
  trainer.evaluate(FINAL_EVAL)                          # draws the fixed validation batches (the same ones)
  def evaluate(n: int) -> float:
    with torch.no_grad():
      return float(np.mean([forward(torch.from_numpy(x).long(), torch.from_numpy(y).long()).item()
                            for x, y in trainer._val_batches[:n]]))
  t0, losses, evals = time.perf_counter(), [], []
  for k in range(steps):
    x, y = get_batch(trainer.train_ids, tc.batch, cfg.block_size, rng)
    losses.append(step(x, y, lr_at(k, tc)))
    if (k + 1) % tc.eval_interval == 0 or k + 1 == tc.steps: evals.append((k + 1, evaluate(tc.eval_batches)))
    if progress: _bar("torch", k + 1, steps, losses[-1], t0)
  wall = time.perf_counter() - t0
  return {"losses": losses, "evals": evals, "wall_s": wall, "val": evaluate(FINAL_EVAL)}


def twin(preset_name: str = "baby", steps: int | None = None, out: str | Path | None = None, seed: int = 0,
         progress: bool = True, torch_too: bool = True) -> list[str]:
  """Train the preset with uopc and (if importable) PyTorch; summary rows; with `out`, the curves and a sample."""
  text = load_text()
  tok = CharTokenizer(text)
  train_ids, val_ids = split(tok.encode(text))
  cfg, tc = preset(preset_name, tok.vocab_size)
  steps = tc.steps if steps is None else steps
  threads = int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1))
  model = GPT(cfg, seed=seed)
  state = model.state_dict()
  trainer = Trainer(model, tc, train_ids, val_ids)
  runs = {"uopc": run_uopc(trainer, steps, progress)}
  if torch_too:
    try:
      import torch  # noqa: F401
      runs["torch"] = run_torch(state, Trainer(GPT(cfg, seed=seed), tc, train_ids, val_ids), steps, threads, progress)
    except ImportError: pass
  rows = [f"# twin             preset {preset_name}: {cfg}; {tc}; {model.num_parameters()} parameters; "
          f"{threads} threads; {steps} steps",
          f"{'impl':<6s} {'val loss':>9s}  (validation: {FINAL_EVAL} fixed batches)"]
  # no time column: the twin trains PyTorch in this process, where its ops run on uopc's libgomp and its passive wait
  # policy, and with the evaluations in between; the step times of `python -m uopc.bench gpt` (PyTorch in a process
  # of its own) are the speed comparison
  for k, r in runs.items(): rows.append(f"{k:<6s} {r['val']:9.4f}")
  if "torch" in runs:
    n = min(10, steps)
    diff = np.abs(np.array(runs["uopc"]["losses"][:n]) - np.array(runs["torch"]["losses"][:n]))
    rows.append(f"first {n} steps: max |uopc loss - torch loss| = {diff.max():.2e}; validation losses differ by "
                f"{abs(runs['uopc']['val'] - runs['torch']['val']):.4f}")
    rows.append("step times: `python -m uopc.bench gpt` (gpt_<preset>_bench.txt), each implementation in a process "
                "of its own; this run times nothing")
  else: rows.append("torch: not importable (optional twin: pip install torch)")
  if out is not None:
    write(Path(out), preset_name, runs, steps, tc, rows)
    (Path(out) / f"gpt_{preset_name}_sample.txt").write_text(
      f"# {rows[0][2:]}\n# uopc's model after {steps} steps, temperature 0.8, top-k 20, seed 0, prompt {PROMPT!r}\n"
      + sample(trainer.model, tok, PROMPT, 400, temperature=0.8, top_k=20, seed=0) + "\n")
  return rows


def write(out: Path, name: str, runs: dict, steps: int, tc, rows: list[str]) -> None:
  """gpt_<name>_twin.csv (step, lr, a loss column per impl), _val.csv, .png (both curves on one plot), .txt."""
  out.mkdir(parents=True, exist_ok=True)
  impls = list(runs)
  table = np.column_stack([np.arange(1, steps + 1), [lr_at(k, tc) for k in range(steps)]]
                          + [np.array(runs[i]["losses"]) for i in impls])
  np.savetxt(out / f"gpt_{name}_twin.csv", table, delimiter=",", comments="",
             header="step,lr," + ",".join(f"{i}_loss" for i in impls), fmt=["%d", "%.6g"] + ["%.6f"] * len(impls))
  val = [(s, *(dict(runs[i]["evals"]).get(s, np.nan) for i in impls)) for s, _ in runs["uopc"]["evals"]]
  np.savetxt(out / f"gpt_{name}_twin_val.csv", np.array(val).reshape(-1, 1 + len(impls)), delimiter=",",
             comments="", header="step," + ",".join(f"{i}_val" for i in impls), fmt=["%d"] + ["%.6f"] * len(impls))
  (out / f"gpt_{name}_twin.txt").write_text("\n".join(rows) + "\n")
  plot(out, name)


def plot(out: Path, name: str) -> None:
  """gpt_<name>_twin.png from the two CSVs: uopc wide and pale underneath, PyTorch thin on top, so that two curves
  that agree are both seen; validation losses as markers only (nothing drawn across the steps between evaluations)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  curves = np.genfromtxt(out / f"gpt_{name}_twin.csv", delimiter=",", names=True)
  vals = np.genfromtxt(out / f"gpt_{name}_twin_val.csv", delimiter=",", names=True, ndmin=1)
  style = {"uopc": dict(color="tab:blue", lw=4, alpha=0.45), "torch": dict(color="tab:red", lw=1)}
  marker = {"uopc": dict(marker="o", ms=9, mfc="none", mew=1.5), "torch": dict(marker="o", ms=4)}
  fig, ax = plt.subplots(figsize=(8, 4.5))
  for i in style:
    if f"{i}_loss" not in curves.dtype.names: continue
    loss = curves[f"{i}_loss"]
    w = min(20, len(loss))
    ax.plot(curves["step"][w - 1:], np.convolve(loss, np.ones(w) / w, "valid"), **style[i],
            label=f"{i} train (mean of {w} steps)")
    ax.plot(vals["step"], vals[f"{i}_val"], ls="none", color=style[i]["color"], **marker[i], label=f"{i} validation")
  ax.set(xlabel="step", ylabel="cross entropy (nats per character)",
         title=f"preset {name}: uopc and its PyTorch twin (same weights, batches, schedule)")
  ax.grid(alpha=0.3); ax.legend()
  fig.tight_layout(); fig.savefig(out / f"gpt_{name}_twin.png", dpi=110); plt.close(fig)

"""Rebuild outputs/: the captured runs and plots that chapter 11 quotes (`make outputs`).

  python scripts/outputs.py                       # everything, into outputs/
  python scripts/outputs.py --quick --out /tmp/o  # tiny sizes (N = 128, 256), for the test of this script
  python scripts/outputs.py --only gpt            # only chapter 14's files (the baby GPT, 2000 steps, both twins)

Writes, every text file starting with uopc.bench.header() as `#` lines:
  flash_1024.txt, flash_2048.txt   the exact stdout of `python examples/flash_attention.py N 64`
  attention_sweep.txt              unfused, fused, online, NumPy (and PyTorch SDPA if importable) at
                                   N = 256 ... 4096, D = 64: best-of-k, each peer in its own process, the
                                   sweep run --rounds times (uopc.bench.attention, method isolated), ms and
                                   GFLOP/s; then the N x N traffic table
  attention_time.png               time against N, log-log
  attention_roofline.png           GFLOP/s at N = 1024 and 2048 on this machine's roofline (uopc.bench.peak)
  attention_traffic.png            bytes of N x N traffic against N, counted from the plans
  gpt_baby_bench.txt               the stdout of `python -m uopc.bench gpt --preset baby --steps 2000`: the step
                                   timed (uopc built every step, uopc replayed, PyTorch eager if importable), then
                                   2000 steps trained by uopc and by its PyTorch twin, wall times and validation losses
  gpt_baby_twin.csv, _val.csv      both loss curves (per step; validation every 250 steps), chapter 14 plots them
  gpt_baby_twin.png, _twin.txt     the two curves on one plot; the summary rows
  gpt_baby_sample.txt              400 characters sampled from uopc's trained model after the prompt "Ham."

How traffic is counted: a plan's temporary that its kernel computes in shape (N, N) is an N x N buffer; every
kernel that has it as an argument makes one pass over it (the kernel that computes it writes it once, every other
kernel that takes it reads it once: none of these kernels reads an element twice), so its traffic is
passes * N*N * 4 bytes. The online kernel has no plan: its buffers are Q, K, V, OUT and its ALLOCs hold at
most D floats, so it moves none.
"""
from __future__ import annotations
import argparse, os, subprocess, sys, textwrap, time
from pathlib import Path
import numpy as np
from uopc import bench
from uopc.book import load_example
from uopc.kernelize import make_plan
from uopc.runtime.process import user_environ
from uopc.tensor import Tensor
from uopc.uop import Ops

ROOT = Path(__file__).resolve().parent.parent
book = load_example("flash_attention")

D = 64
FUSED_MAX = 2048   # bench.attention skips fused above this: at 4096 one call takes seconds (6 passes of QK^T a row)
METHOD = "isolated"   # how the sweep is timed (uopc.bench.METHODS); the file's header says it
IMPLS = ["unfused", "fused", "online", "rewrite", "flash", "numpy", "torch"]
COLORS = {"unfused": "C0", "fused": "C1", "online": "C2", "numpy": "C3", "torch": "C4", "rewrite": "C5", "flash": "C6"}


class Progress:
  """A one-line progress bar on stderr (no dependency): [#####.....] 3/8 what."""

  def __init__(self, total: int, width: int = 30):
    self.total, self.done, self.width, self.t0 = total, 0, width, time.perf_counter()

  def step(self, what: str) -> None:
    self.done += 1
    fill = self.width * self.done // self.total
    bar = "#" * fill + "." * (self.width - fill)
    sys.stderr.write(f"\r[{bar}] {self.done}/{self.total} {what:<34s} {time.perf_counter() - self.t0:6.1f} s")
    if self.done == self.total: sys.stderr.write("\n")
    sys.stderr.flush()


def header(method: str | None = None, reps: int = 5, rounds: int = 1) -> str:
  """uopc.bench.header() (with the timing method, for a file of timings), plus the load average: other processes
  inflate wall-clock times."""
  load = " ".join(f"{x:.2f}" for x in os.getloadavg())
  return (bench.header(method, reps, rounds)
          + f"\n# {'load average':<17s} {load} (1, 5, 15 min, when this file was written)")


def machine_title() -> str:
  m = bench.machine()
  return f"{m['cpu']}, {m['cores']} cores, {m['date']} (load average {os.getloadavg()[0]:.1f})"


# ---- the example's output ----
def flash_run(n: int) -> str:
  cmd = [sys.executable, "examples/flash_attention.py", str(n), str(D)]
  r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=user_environ())
  if r.returncode != 0: raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr}")
  return f"{header()}\n# command           python examples/flash_attention.py {n} {D}\n{r.stdout}"


# ---- N x N traffic, from the plans ----
def inputs(n: int) -> tuple[np.ndarray, ...]:
  rng = np.random.default_rng(0)
  return tuple(rng.standard_normal((n, D)).astype(np.float32) for _ in range(3))


def plan_traffic(n: int, fuse: bool) -> tuple[int, int, int]:
  """(N x N buffers, passes over them, bytes) of the plan of attention at N, unfused or fused with FlashOpt."""
  q, k, v = inputs(n)
  out = book.attention(Tensor(q), Tensor(k), Tensor(v))
  plan = make_plan([out.uop], fuse, book.FlashOpt if fuse else Tensor.opt)
  buffers = passes = nbytes = 0
  for t, (dtype, size) in enumerate(plan.temps):
    # the shape it is computed in, not its size: at N = D the (1, D, N) copy of V has N*N elements too
    writer = next(kern for kern in plan.kernels if kern.args[-1] == ("temp", t))
    if writer.body.shape != (n, n): continue
    p = sum(("temp", t) in kern.args for kern in plan.kernels)
    buffers, passes, nbytes = buffers + 1, passes + p, nbytes + p * size * dtype.itemsize
  return buffers, passes, nbytes


def online_traffic(n: int) -> tuple[int, int, int]:
  """The online kernel's N x N traffic: it has no plan, so look at its program's own storage."""
  ast = book.online_attention_ir(n, D)
  big = [u for u in ast.toposort() if u.op is Ops.ALLOC and u.arg.size >= n * n]
  return len(big), 0, 0


def all_temp_bytes(n: int, fuse: bool) -> int:
  """Every temporary's traffic (not only N x N): for the roofline's bytes."""
  q, k, v = inputs(n)
  plan = make_plan([book.attention(Tensor(q), Tensor(k), Tensor(v)).uop], fuse, book.FlashOpt if fuse else Tensor.opt)
  return sum(sum(("temp", t) in kern.args for kern in plan.kernels) * size * dt.itemsize
             for t, (dt, size) in enumerate(plan.temps))


def bytes_moved(impl: str, n: int) -> float:
  """Bytes an implementation moves: Q, K, V read and O written once, plus its temporaries' passes.
  NumPy makes 12 passes over N x N arrays (chapter 1): QK^T writes S, the scale reads and writes it, max reads,
  subtract reads and writes, exp reads and writes, sum reads, divide reads and writes, P V reads."""
  io = 4 * n * D * 4
  if impl == "unfused": return io + all_temp_bytes(n, False)
  if impl == "fused": return io + all_temp_bytes(n, True)
  if impl == "numpy": return io + 12 * n * n * 4
  return io   # online, torch (a fused kernel: assume it keeps the N x N tile on chip)


# ---- the sweep ----
def sweep(sizes: list[int], reps: int, progress: Progress, rounds: int = 1) -> list[bench.Row]:
  """Each size's peers, the whole size run `rounds` times, each peer's best: a shared machine slows one run now and
  then, for seconds at a time, and one run alone would print that as the peer's speed."""
  rows = []
  for n in sizes:
    rows += bench.attention([n], [D], reps, {"fused", "torch"}, method=METHOD, rounds=rounds)
    progress.step(f"sweep N={n}")
  return rows


def sweep_table(rows: list[bench.Row], sizes: list[int]) -> str:
  t = {(r.case, r.impl): r for r in rows}
  impls = [i for i in IMPLS if any(r.impl == i for r in rows)]
  lines = [f"# D = {D}; timed by uopc.bench.attention as the method line above says;",
           "# GFLOP/s counts the useful 4 N^2 D FLOPs (the fused kernel's recomputation is not counted);",
           f"# fused is skipped above N = {FUSED_MAX} (one call would take seconds); '-' marks a skipped run",
           f"{'N':>6s} " + " ".join(f"{i + ' ms':>12s} {i + ' GF/s':>13s}" for i in impls)]
  for n in sizes:
    cells = []
    for i in impls:
      r = t.get((f"N={n} D={D}", i))
      cells.append(f"{r.seconds * 1e3:12.3f} {r.flops / r.seconds / 1e9:13.1f}" if r else f"{'-':>12s} {'-':>13s}")
    lines.append(f"{n:>6d} " + " ".join(cells))
  return "\n".join(lines)


def traffic_table(traffic: dict[str, list[tuple[int, int, int]]], sizes: list[int]) -> str:
  lines = ["# N x N traffic, counted from the plans: every kernel that takes an N*N temporary makes one pass",
           "# over it (written once by its kernel, read once by each other kernel); bytes = passes * N*N * 4",
           f"{'N':>6s} " + " ".join(f"{i + ' bufs':>13s} {i + ' passes':>15s} {i + ' MB':>11s}" for i in traffic)]
  for k, n in enumerate(sizes):
    lines.append(f"{n:>6d} " + " ".join(f"{b:13d} {p:15d} {nb / 1e6:11.1f}" for b, p, nb in
                                         (traffic[i][k] for i in traffic)))
  return "\n".join(lines)


# ---- chapter 14: the baby GPT and its PyTorch twin ----
def gpt_run(out: Path, steps: int) -> None:
  cmd = [sys.executable, "-m", "uopc.bench", "gpt", "--preset", "baby", "--steps", str(steps), "--out", str(out)]
  # the user's environment: not the wait policy this process's uopc set for itself, which the bench would take for
  # the user's and hand to PyTorch (NOTES 45)
  r = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True, env=user_environ())   # bars on stderr
  if r.returncode != 0: raise RuntimeError(f"{' '.join(cmd)} failed")
  command = f"# command           python -m uopc.bench gpt --preset baby --steps {steps}\n"
  (out / "gpt_baby_bench.txt").write_text(command + r.stdout)


# ---- plots ----
def plot_time(rows: list[bench.Row], sizes: list[int], reps: int, path: Path) -> None:
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(7, 4.5))
  for impl in IMPLS:
    pts = [(int(r.case.split()[0][2:]), r.seconds * 1e3) for r in rows if r.impl == impl]
    if pts: ax.loglog(*zip(*pts), "o-", color=COLORS[impl], label=impl)
  ax.set_xticks(sizes, [str(n) for n in sizes])
  ax.xaxis.set_minor_formatter(plt.NullFormatter())
  ax.set(xlabel=f"N (sequence length), D = {D}", ylabel=f"time per call (ms), wall clock, best of {reps}",
         title=f"attention, time against N\n{machine_title()}")
  ax.grid(True, which="major", alpha=0.3)
  ax.legend()
  fig.tight_layout(); fig.savefig(path, dpi=120); plt.close(fig)


def steady_peak(runs: int) -> dict[str, float]:
  """The roofline's two lines: the best FMA rate of `runs` measurements (the peak is a ceiling), and the median triad
  bandwidth (on a VM the memory bandwidth can jump from one run to the next: a best-of would draw the roof at a rate
  the machine reaches only now and then, above what chapter 10 measures)."""
  runs_ = [bench.peak(1) for _ in range(runs)]
  return {"fma_gflops": max(r["fma_gflops"] for r in runs_),
          "triad_gbs": float(np.median([r["triad_gbs"] for r in runs_]))}


def plot_roofline(rows: list[bench.Row], peak: dict[str, float], sizes: list[int], path: Path) -> None:
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(9.5, 4.8))
  rates = {f"{r.impl}, N={r.case.split()[0][2:]}": r.flops / r.seconds / 1e9 for r in rows
           if int(r.case.split()[0][2:]) in sizes}
  flops_peak, what = bench.ceiling(peak["fma_gflops"], rates)   # never a roof under a measured point
  bw = peak["triad_gbs"]
  xs = np.logspace(-1, 3, 200)
  ax.loglog(xs, np.minimum(flops_peak, bw * xs), "k-", lw=1.5,
            label=f"roof: {flops_peak:.0f} GFLOP/s, {bw:.0f} GB/s triad (median)\n" + textwrap.fill(what, 48))
  for r in rows:
    n = int(r.case.split()[0][2:])
    if n not in sizes: continue
    intensity = r.flops / bytes_moved(r.impl, n)
    ax.loglog(intensity, r.flops / r.seconds / 1e9, "o" if n == sizes[0] else "s", color=COLORS[r.impl],
              label=f"{r.impl}, N={n}")
  ax.set(xlabel="arithmetic intensity (useful FLOPs / bytes moved, counted)", ylabel="GFLOP/s (useful FLOPs)",
         title=f"attention on this machine's roofline (D = {D})\n{machine_title()}")
  ax.grid(True, which="major", alpha=0.3)
  ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
  fig.text(0.01, 0.01, "bytes: Q, K, V, O once + every pass over a temporary (NumPy: 12 passes over N x N); "
           "caches not modelled; GFLOP/s from best-of-k wall clock, all threads", fontsize=7)
  fig.tight_layout(rect=(0, 0.03, 1, 1)); fig.savefig(path, dpi=120); plt.close(fig)


def plot_traffic(traffic: dict[str, list[tuple[int, int, int]]], sizes: list[int], path: Path) -> None:
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(7, 4.5))
  for impl, marker in (("unfused", "o-"), ("fused", "s--"), ("online", "^:")):
    ax.plot(sizes, [nb / 1e6 for _, _, nb in traffic[impl]], marker, color=COLORS[impl],
            label=f"{impl}: {traffic[impl][-1][1]} passes over {traffic[impl][-1][0]} N x N buffers")
  ax.set_xscale("log", base=2)
  ax.set_yscale("symlog", linthresh=1)   # symlog: the fused and online lines are exactly 0
  ax.set_ylim(bottom=0)                  # traffic is never negative: no ticks below 0
  ax.set_xticks(sizes, [str(n) for n in sizes])
  ax.xaxis.set_minor_formatter(plt.NullFormatter())
  ax.set(xlabel=f"N (sequence length), D = {D}", ylabel="N x N traffic per call (MB)",
         title=f"bytes of N x N traffic, counted from the plans\n{machine_title()}")
  ax.grid(True, which="major", alpha=0.3)
  ax.legend()
  fig.tight_layout(); fig.savefig(path, dpi=120); plt.close(fig)


def main(argv: list[str] | None = None) -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--quick", action="store_true", help="tiny sizes (N = 128, 256) and one repetition")
  ap.add_argument("--out", default=str(ROOT / "outputs"), help="folder to write to (default: outputs/)")
  ap.add_argument("--reps", type=int, help="best of how many calls (default 5, quick 1)")
  ap.add_argument("--rounds", type=int, help="the sweep run this many times, each row its best (default 3, quick 1)")
  ap.add_argument("--gpt-steps", type=int, help="chapter 14's baby GPT: training steps (default 2000, quick 0: none)")
  ap.add_argument("--only", choices=["gpt"], help="rebuild only these files")
  args = ap.parse_args(argv)
  out = Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  gpt_steps = args.gpt_steps if args.gpt_steps is not None else (0 if args.quick else 2000)
  if args.only == "gpt" or gpt_steps:
    gpt_run(out, gpt_steps or 2000)
    if args.only == "gpt":
      print(f"wrote gpt_baby_* to {out}")
      return
  flash_sizes = [128, 256] if args.quick else [1024, 2048]
  sizes = [128, 256] if args.quick else [256, 512, 1024, 2048, 4096]
  roof_sizes = [128, 256] if args.quick else [1024, 2048]
  reps = args.reps or (1 if args.quick else 5)
  rounds = args.rounds or (1 if args.quick else 3)
  # matplotlib prints a warning while it builds its font cache: do it before the bar starts
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot  # noqa: F401

  progress = Progress(len(flash_sizes) + len(sizes) + 3)
  for n in flash_sizes:
    (out / f"flash_{n}.txt").write_text(flash_run(n))
    progress.step(f"flash_{n}.txt")
  rows = sweep(sizes, reps, progress, rounds)
  traffic = {"unfused": [plan_traffic(n, False) for n in sizes], "fused": [plan_traffic(n, True) for n in sizes],
             "online": [online_traffic(n) for n in sizes]}
  text = f"{header(METHOD, reps, rounds)}\n{sweep_table(rows, sizes)}\n\n{traffic_table(traffic, sizes)}\n"
  (out / "attention_sweep.txt").write_text(text)
  progress.step("attention_sweep.txt")
  peak = steady_peak(1 if args.quick else 5)
  progress.step("peak (FMA, triad)")
  plot_time(rows, sizes, reps, out / "attention_time.png")
  plot_roofline(rows, peak, roof_sizes, out / "attention_roofline.png")
  plot_traffic(traffic, sizes, out / "attention_traffic.png")
  progress.step("plots")
  print(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))} to {out}")


if __name__ == "__main__":
  main()

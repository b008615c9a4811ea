"""NOTES 47: what uopc.viz's hooks cost when nothing records (VIZ unset): this branch against main, A/B in turns.

  python notes/notes47_viz_cost.py [--base /path/to/a/checkout] [--turns 10] [--callgrind]

Each measurement runs in a fresh process, with PYTHONPATH pointing at one tree (the commit where this branch left
main, exported by `git archive` to a temporary folder, unless --base names a checkout), one OpenMP thread, in
turns: A, B, A, B, ... so that a change in the machine's load falls on both alike. Two things are timed, in CPU
seconds of the process (time.process_time):
  realize   a small program (softmax and layernorm of a 64 x 256 tensor, three kernels) realized again and again
            with its plan cached: the hook there is one test of an empty list per realize
  plan      the same program planned from nothing in an isolated plan cache (the compiled kernels come from the
            disk cache): rangeify, simplify and graph_rewrite run, and their hooks with them
--callgrind also counts instructions (valgrind --tool=callgrind), which the load of the machine does not change:
the difference between 500 and 100 iterations (plans: 8 and 2), per iteration, on each tree (kernels built for
x86-64-v3: valgrind runs no AVX-512; one PYTHONHASHSEED). --turns 0 skips the timing.
--rewrites records `VIZ=1 python examples/flash_attention.py 256 64` and prints, per kernel, the rewrites simplify
made while rangeify built the loop program and those the final simplify of rangeify.lower made after it.
"""
from __future__ import annotations
import argparse, json, os, re, statistics, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import sys, time
import numpy as np
import uopc
from uopc.kernelize import isolated_plan_cache, make_plan
from uopc.tensor import Tensor
what, n = sys.argv[1], int(sys.argv[2])
x = Tensor(np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32))
prog = lambda: Tensor.realize(x.softmax(-1), x.layernorm())
prog()
if what == "realize":
  t0 = time.process_time()
  for _ in range(n): prog()
elif what == "plan":
  roots = [x.softmax(-1).uop, x.layernorm().uop]
  with isolated_plan_cache(): make_plan(roots)   # warm: the kernels' compiled objects in the disk cache
  t0 = time.process_time()
  for _ in range(n):
    with isolated_plan_cache(): make_plan(roots)
print(f"{uopc.__file__} {(time.process_time() - t0) / max(n, 1) * 1e6:.2f}")
"""


def run(tree: Path, what: str, n: int, callgrind: bool = False) -> float:
  # run in the tree: `python -c` puts the working folder first on sys.path, before PYTHONPATH and the editable install
  env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
  env.pop("VIZ", None)
  cmd = [sys.executable, "-c", CHILD, what, str(n)]
  if callgrind:   # valgrind has no AVX-512: kernels for x86-64-v3 (AVX2), which it runs
    # one hash seed: with a random one, dicts and sets probe differently in every process, and the count of a whole
    # process moves by more than the difference between the trees
    env.update(UOPC_MARCH="x86-64-v3", PYTHONHASHSEED="0")
    with tempfile.TemporaryDirectory() as tmp:
      out = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out", *cmd], env=env,
                           capture_output=True, text=True, check=True, cwd=tree)
      return float(re.search(r"Collected : (\d+)", out.stderr).group(1))
  out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd=tree).stdout.split()
  assert Path(out[0]).resolve().is_relative_to(tree.resolve()), f"{out[0]} is not from {tree}"
  return float(out[1])


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--base", help="a checkout of main (default: `git archive main` into a temporary folder)")
  ap.add_argument("--turns", type=int, default=10)
  ap.add_argument("--callgrind", action="store_true")
  ap.add_argument("--rewrites", action="store_true")
  args = ap.parse_args()
  if args.rewrites: return rewrites()
  rev = lambda r: subprocess.run(["git", "-C", str(ROOT), "rev-parse", r], capture_output=True,
                                 text=True).stdout.strip()
  base_rev = subprocess.run(["git", "-C", str(ROOT), "merge-base", "HEAD", "main"], capture_output=True,
                            text=True).stdout.strip()
  with tempfile.TemporaryDirectory() as tmp:
    base = Path(args.base) if args.base else Path(tmp)
    if not args.base:
      archive = subprocess.run(["git", "-C", str(ROOT), "archive", base_rev, "uopc"], capture_output=True, check=True)
      subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
    trees = {"main": base, "viz": ROOT}
    print(f"# {base_rev[:9]} (where this branch left main) against this branch {rev('HEAD')[:9]}; "
          f"{os.uname().machine}, CPU seconds of each process")
    for what, n in (("realize", 400), ("plan", 20)) if args.turns else ():
      got: dict[str, list[float]] = {k: [] for k in trees}
      for _ in range(args.turns):
        for name, tree in trees.items(): got[name].append(run(tree, what, n))
      med = {k: statistics.median(v) for k, v in got.items()}
      spread = {k: f"{min(v):.1f}-{max(v):.1f}" for k, v in got.items()}
      print(f"{what:8s} CPU us per iteration, median of {args.turns} turns: main {med['main']:9.2f}  "
            f"viz {med['viz']:9.2f}  viz/main {med['viz'] / med['main']:.3f}  "
            f"(spread main {spread['main']}, viz {spread['viz']})")
    if args.callgrind:
      for what, (lo, hi) in (("realize", (100, 500)), ("plan", (2, 8))):
        per = {k: (run(t, what, hi, True) - run(t, what, lo, True)) / (hi - lo) for k, t in trees.items()}
        diff = per["viz"] - per["main"]
        print(f"{what:8s} instructions per iteration (callgrind, {hi} minus {lo}): main {per['main']:,.0f}  "
              f"viz {per['viz']:,.0f}  difference {diff:+,.0f} ({diff / per['main']:+.3%})")
  return 0


def rewrites() -> int:
  with tempfile.TemporaryDirectory() as tmp:
    env = {**os.environ, "VIZ": "1", "VIZ_TRACE": f"{tmp}/t.json", "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, str(ROOT / "examples/flash_attention.py"), "256", "64"], env=env, check=True,
                   capture_output=True)
    tr = json.loads(Path(f"{tmp}/t.json").read_text())
  print(f"{'plan':>4} {'kernel':<12} {'rewrites in rangeify':>20} {'in the final simplify':>22}")
  for n, plan in enumerate(tr["plans"]):
    for k in plan["kernels"]:
      ps = {p["name"]: p for p in k["passes"]}
      print(f"{n:>4} {k['name']:<12} {len(ps['rangeify']['rewrites']):>20} {len(ps['simplify']['rewrites']):>22}")
  return 0


if __name__ == "__main__": sys.exit(main())

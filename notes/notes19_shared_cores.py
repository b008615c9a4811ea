"""NOTES 19: OpenMP kernels on cores that another process keeps busy, under each OpenMP wait policy.

  python notes/notes19_shared_cores.py [reps] [checkout]   # checkout: another clone to time (with its own python)

Each configuration runs in a fresh process (libgomp reads its wait policy once, when it is loaded), first on a quiet
machine, then with one busy `python -c 'while 1: pass'` per core, started here and killed after. Timed: the unfused
attention of `examples/flash_attention.py 256 64` and a 256 x 256 Tensor chain, best of `reps` calls after a warm-up.
"""
import os, platform, re, subprocess, sys, time
from pathlib import Path

ROOT = Path(sys.argv[2]).resolve() if len(sys.argv) > 2 else Path(__file__).resolve().parent.parent
CHAIN = """if 1:
  import numpy as np
  from uopc.tensor import Tensor
  from uopc.helpers import best_of
  rng = np.random.default_rng(0)
  a, b, c = (Tensor(rng.standard_normal((256, 256)).astype(np.float32)) for _ in range(3))
  f = lambda: ((a @ b) * 0.5 + c).relu().sum(-1).numpy()
  print(f"chain {best_of(f, k=REPS) * 1e3:.3f}")
"""
# the environment each configuration adds; "uopc" adds nothing and gets uopc.runtime's default
CONFIGS = {"libgomp default (spin 300k)": {"GOMP_SPINCOUNT": "300000"},
           "GOMP_SPINCOUNT=10000": {"GOMP_SPINCOUNT": "10000"},
           "OMP_WAIT_POLICY=PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
           "uopc (nothing set)": {}}


def measure(env: dict[str, str], reps: int) -> tuple[float, float]:
  base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
  run = lambda args: subprocess.run([sys.executable, *args], env={**base, **env}, cwd=ROOT, capture_output=True,
                                    text=True, check=True).stdout
  # the example times each variant best of 3: run it `reps // 3` times and keep the best
  unfused = min(float(re.search(r"unfused\s+([\d.]+) ms", run(["examples/flash_attention.py", "256", "64"]))[1])
                for _ in range(max(1, reps // 3)))
  chain = float(run(["-c", CHAIN.replace("REPS", str(reps))]).split()[1])
  return unfused, chain


def busy(n: int) -> list[subprocess.Popen]:
  return [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(n)]


if __name__ == "__main__":
  reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
  cpu = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text())
  print(f"# {cpu[1] if cpu else platform.processor()}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}")
  print(f"{'configuration':30s} {'quiet unfused':>14s} {'busy unfused':>13s} {'quiet chain':>12s} {'busy chain':>11s}")
  for name, env in CONFIGS.items():
    quiet = measure(env, reps)
    hogs = busy(os.cpu_count() or 1)
    try:
      time.sleep(0.5)
      loaded = measure(env, reps)
    finally:
      for h in hogs: h.kill(); h.wait()
    print(f"{name:30s} {quiet[0]:11.2f} ms {loaded[0]:10.2f} ms {quiet[1]:9.3f} ms {loaded[1]:8.3f} ms", flush=True)

"""NOTES 20: OpenMP kernels on cores that another process keeps busy, under each OpenMP wait policy.

  python notes/notes20_shared_cores.py [reps] [checkout]   # checkout: another clone to time (run with its python)

Each configuration runs in a fresh process (libgomp reads its wait policy once, when it is loaded), first as the
machine is, then with one busy `python -c 'while 1: pass'` per core, started here and killed after. Timed, `reps`
calls each after a warm-up: the unfused attention of `examples/flash_attention.py 256 64` (its `attention`, on
Tensors) and a 256 x 256 Tensor chain. Printed: the median call (what a user waits) and the best one.
"""
import os, platform, re, statistics, subprocess, sys, time
from pathlib import Path

ROOT = Path(sys.argv[2]).resolve() if len(sys.argv) > 2 else Path(__file__).resolve().parent.parent
WORK = """if 1:
  import sys, time
  import numpy as np
  sys.path.insert(0, "examples")
  from flash_attention import attention
  from uopc.tensor import Tensor
  rng = np.random.default_rng(0)
  q, k, v = (rng.standard_normal((256, 64)).astype(np.float32) for _ in range(3))
  a, b, c = (Tensor(rng.standard_normal((256, 256)).astype(np.float32)) for _ in range(3))
  work = {"unfused": lambda: attention(Tensor(q), Tensor(k), Tensor(v)).numpy(),
          "chain": lambda: ((a @ b) * 0.5 + c).relu().sum(-1).numpy()}
  for name, fn in work.items():
    fn(); times = []
    for _ in range(REPS):
      t0 = time.perf_counter(); fn(); times.append(time.perf_counter() - t0)
    print(name, *times)
"""
# the environment each configuration adds; "uopc" adds nothing and gets uopc.runtime's default
CONFIGS = {"libgomp default (spin 300k)": {"GOMP_SPINCOUNT": "300000"},
           "GOMP_SPINCOUNT=10000": {"GOMP_SPINCOUNT": "10000"},
           "OMP_WAIT_POLICY=PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
           "uopc (nothing set)": {}}


def measure(env: dict[str, str], reps: int) -> dict[str, list[float]]:
  base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
  out = subprocess.run([sys.executable, "-c", WORK.replace("REPS", str(reps))], env={**base, **env}, cwd=ROOT,
                       capture_output=True, text=True, check=True).stdout
  return {line.split()[0]: [float(t) for t in line.split()[1:]] for line in out.splitlines()}


def busy(n: int) -> list[subprocess.Popen]:
  return [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(n)]


def fmt(ts: list[float]) -> str: return f"{statistics.median(ts) * 1e3:7.2f} / {min(ts) * 1e3:5.2f}"


if __name__ == "__main__":
  reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
  cpu = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text())
  print(f"# {cpu[1] if cpu else platform.processor()}, {os.cpu_count()} cores, {ROOT}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.1f}; ms, median / best of {reps}")
  print(f"{'configuration':28s} {'unfused':>15s} {'unfused busy':>15s} {'chain':>15s} {'chain busy':>15s}")
  for name, env in CONFIGS.items():
    quiet = measure(env, reps)
    hogs = busy(os.cpu_count() or 1)
    try:
      time.sleep(0.5)
      loaded = measure(env, reps)
    finally:
      for h in hogs: h.kill(); h.wait()
    cells = [fmt(quiet["unfused"]), fmt(loaded["unfused"]), fmt(quiet["chain"]), fmt(loaded["chain"])]
    print(f"{name:28s} " + " ".join(f"{c:>15s}" for c in cells), flush=True)

"""Benchmarks: uopc against its peers, best-of-k after a warm-up, every result checked against float64 first.

  python -m uopc.bench gemm                 # uopc vs NumPy matmul, 256 ... 2048
  python -m uopc.bench peak                 # the roofline's two lines: FP32 FMA peak and memory bandwidth
  python -m uopc.bench attention            # unfused, fused, online (book) and NumPy (and PyTorch, if importable)
  python -m uopc.bench gpt                  # chapter 14's training step: uopc vs PyTorch eager and torch.compile
  python -m uopc.bench gpt --preset baby    # nanoGPT's baby GPT: the step timed, then 2000 steps trained by both
  python -m uopc.bench conv                 # a small CNN's conv2d against PyTorch's, at 1 and 2 threads
  python -m uopc.bench cnn                  # a LeNet-5's training step: uopc vs PyTorch eager and torch.compile

gemm and attention time each peer in a process of its own, one process at a time (--method isolated, the default:
uopc.bench.isolated), so that no other OpenMP runtime's spinning threads slow it down; --method interleaved times
them all in this process, in turns (uopc.bench.interleaved). The header's method line says which.

On machines where OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are set, NumPy runs a slower kernel: unset both for the
run that compares with NumPy (the header says what NumPy's BLAS runs).
"""
from __future__ import annotations
import argparse, datetime, math, os, platform, time
from dataclasses import dataclass
from typing import Callable
import numpy as np
import uopc
from uopc.bench.cases import Case, case_peers, check, inputs, reference
from uopc.bench.cases import attention_peers  # noqa: F401  (chapter 11b imports it from here)
from uopc.bench.isolated import MIN_SECONDS, run_isolated, warm_allocator
from uopc.bench.steps import cpu_family_model
from uopc.helpers import omp_threads
from uopc.runtime import Program, compiler, compiler_version
from uopc.runtime.machine import target
from uopc.runtime.toolchain import cpu_brand

METHODS = {"isolated": "each peer in its own process, one at a time, best of {reps} after a warm-up (more calls where "
                       f"{MIN_SECONDS:g} s holds more)",
           "interleaved": "all peers in one process, in turns, best of {reps} after a warm-up"}
# the whole sweep runs this many times and each row keeps its best: a burst of load from outside (other machines'
# work on shared cores lasts seconds here, NOTES 20) then hits a peer in one round, not in all of them
ROUNDS = 2


# ---- the machine ----
def cpu_model() -> str:
  return cpu_brand() or platform.processor() or platform.machine()   # /proc/cpuinfo, or a Mac's sysctl


def blas_info() -> str:
  try:
    from threadpoolctl import threadpool_info
    pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    describe = lambda p: f"{p['internal_api']} {p.get('version')} ({p.get('architecture')}, {p['num_threads']} threads)"
    if pools: return ", ".join(describe(p) for p in pools)
  except ImportError: pass
  return "unknown (install threadpoolctl to see it)"


def machine() -> dict[str, str]:
  return {"cpu": cpu_model(), "cpu family/model": cpu_family_model(), "cores": str(os.cpu_count()),
          "compiler": compiler_version(compiler()),
          "date": datetime.date.today().isoformat(), "uopc": uopc.__version__, "numpy": np.__version__,
          "blas": blas_info(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "(all cores)"),
          "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", "(unset)")}


def describe_method(method: str, reps: int, rounds: int = 1) -> str:
  if method not in METHODS: raise ValueError(f"unknown timing method {method!r}: expected one of {list(METHODS)}")
  text = METHODS[method].format(reps=reps)
  return text + (f"; the sweep run {rounds} times, each row its best" if rounds > 1 else "")


def header(method: str | None = None, reps: int = 5, rounds: int = 1) -> str:
  """The machine as `#` lines; given the timing method, a last line saying how the rows below were measured."""
  lines = {**machine(), **({"method": describe_method(method, reps, rounds)} if method else {})}
  return "\n".join(f"# {k:<17s} {v}" for k, v in lines.items())


# ---- timing ----
def interleaved(fns: dict[str, Callable[[], object]], reps: int = 5, warmup: int = 1,
                settle: float = 0.1) -> dict[str, float]:
  """Best seconds of each function, running them in turn so every peer sees the same machine state. Before each
  timed call the machine settles for `settle` seconds (OpenBLAS's and OpenMP's worker threads keep spinning for a
  while after a call returns, and would steal the cores from whichever peer runs next), then the function runs
  once untimed, so that its own threads are awake and the cores at speed when the timed call starts."""
  for _ in range(warmup):
    for f in fns.values(): f()
  best = {k: math.inf for k in fns}
  for _ in range(reps):
    for k, f in fns.items():
      time.sleep(settle)
      f()
      t0 = time.perf_counter(); f(); best[k] = min(best[k], time.perf_counter() - t0)
  return best


@dataclass
class Row:
  case: str
  impl: str
  seconds: float
  flops: float
  base: float | None = None   # the reference time this row's ratio is against

  def line(self, peak_gflops: float | None = None) -> str:
    """One printed row; with the measured FMA peak, also the fraction of it this row reached."""
    ratio = f"{self.base / self.seconds:7.2f}x" if self.base else ""
    rate = self.flops / self.seconds / 1e9
    frac = f"  {rate / peak_gflops:6.1%} of peak" if peak_gflops else ""
    return f"{self.case:<20s} {self.impl:<10s} {self.seconds * 1e3:10.3f} ms {rate:9.1f} GFLOP/s {ratio}{frac}"


# ---- one case, either way ----
def time_case(case: Case, reps: int, method: str = "isolated") -> dict[str, float]:
  """Best seconds of each of the case's peers (uopc.bench.cases), each result checked against float64 first."""
  describe_method(method, reps)   # an unknown method fails before anything runs
  if reps < 1: raise ValueError(f"reps must be >= 1, got {reps}")
  if method == "isolated": return {name: m.seconds for name, m in run_isolated(case, reps).items()}
  warm_allocator()   # the same allocator state as an isolated worker's
  arrays = inputs(case)
  fns, ref = case_peers(case, arrays), reference(case, arrays)
  for name, f in fns.items(): check(case, name, f(), ref)
  return interleaved(fns, reps)


def case_rows(case: Case, seconds: dict[str, float]) -> list[Row]:
  return [Row(case.name, name, sec, case.flops, seconds["numpy"] if name != "numpy" else None)
          for name, sec in seconds.items()]


# ---- gemm ----
def best_of_rounds(cases: list[Case], reps: int, method: str, rounds: int) -> list[Row]:
  """Every case timed `rounds` times over (the whole list each round), each peer's best kept."""
  if rounds < 1: raise ValueError(f"rounds must be >= 1, got {rounds}")
  best: list[dict[str, float]] = [{} for _ in cases]
  for _ in range(rounds):
    for b, case in zip(best, cases):
      for name, sec in time_case(case, reps, method).items(): b[name] = min(sec, b.get(name, math.inf))
  return [row for case, b in zip(cases, best) for row in case_rows(case, b)]


def gemm(sizes: list[int], reps: int, method: str = "isolated", rounds: int = 1) -> list[Row]:
  return best_of_rounds([Case("gemm", n) for n in sizes], reps, method, rounds)


# ---- peak: the roofline's two lines ----
def fma_source(isa, threads: int | None = None) -> str:
  """The FMA peak kernel for a vector ISA (uopc.runtime.machine's table): vectors of its width, isa.chains independent
  chains (enough to cover the FMA latency on every unit, few enough that each stays in a register with the
  multiplier and addend: ten 64-byte chains on AVX2 need 20 of its 16 registers, spill, and measured a quarter of
  the peak). `threads` fixes the parallel region's thread count (None: OpenMP's default)."""
  n = isa.chains
  chains = "\n".join(f"      x{i} = x{i} * b + c;" for i in range(n))
  return f"""typedef float vec __attribute__((vector_size({isa.lanes * 4})));
void fma_peak(float* restrict out, int iters) {{
  #pragma omp parallel{f" num_threads({threads})" if threads else ""}
  {{
    vec a = {{0}};   /* different starting values: identical chains would be merged into one by the compiler */
    vec {", ".join(f"x{i} = a + {i}" for i in range(n))};
    vec b = a + 0.999999f, c = a + 1e-7f;
    for (int i = 0; i < iters; i++) {{   /* {n} independent chains hide the FMA latency */
{chains}
    }}
    vec s = {" + ".join(f"x{i}" for i in range(n))};
    float t = 0; for (int k = 0; k < {isa.lanes}; k++) t += s[k];
    #pragma omp atomic
    out[0] += t;
  }}
}}"""


TRIAD_SRC = """void triad(float* restrict a, float* restrict b, float* restrict c, int n) {
  #pragma omp parallel for
  for (int i = 0; i < n; i++) a[i] = b[i] + 3.0f * c[i];
}"""


def peak(reps: int) -> dict[str, float]:
  """FP32 FMA GFLOP/s (fma_source's chains of the target's vectors, per thread) and STREAM-triad GB/s (three 128 MB
  arrays)."""
  threads = omp_threads()
  isa = target().isa
  fma, tri = Program(fma_source(isa), "fma_peak"), Program(TRIAD_SRC, "triad")
  out, iters = np.zeros(1, np.float32), 20_000_000
  n = 32 * 1024 * 1024
  a, b, c = np.zeros(n, np.float32), np.ones(n, np.float32), np.ones(n, np.float32)
  t = interleaved({"fma": lambda: fma(out, iters), "triad": lambda: tri(a, b, c, n)}, reps)
  return {"fma_gflops": threads * iters * isa.chains * isa.lanes * 2 / t["fma"] / 1e9,
          "triad_gbs": 3 * 4 * n / t["triad"] / 1e9}


def fma_peak_cpu(reps: int = 5, iters: int = 5_000_000) -> float:
  """One thread's FP32 FMA GFLOP/s in CPU time (time.process_time), best of reps after a warm-up: the ceiling to draw
  over rates of single-thread CPU time, measured the same way (other processes delay a wall clock, not CPU time)."""
  isa = target().isa
  fma, out = Program(fma_source(isa, threads=1), "fma_peak"), np.zeros(1, np.float32)
  fma(out, iters)
  best = math.inf
  for _ in range(reps):
    t0 = time.process_time(); fma(out, iters); best = min(best, time.process_time() - t0)
  return iters * isa.chains * isa.lanes * 2 / best / 1e9


def ceiling(peak_gflops: float, rates: dict[str, float]) -> tuple[float, str]:
  """The roofline's compute ceiling and what it is: the measured FMA peak, or the best of the measured kernels' rates
  where the peak came out below it (measured while other work shared the cores, or by a clock the kernels were not
  measured with): a roof under a measured kernel is wrong, the kernel's rate is a lower bound of the true peak."""
  best = max(rates, key=rates.get, default=None)
  if best is None or rates[best] <= peak_gflops: return peak_gflops, "the FMA peak, measured"
  return rates[best], f"the best measured kernel, {best} (the FMA peak measured {peak_gflops:.0f} GFLOP/s, below it)"


# ---- attention ----
def attention(sizes: list[int], dims: list[int], reps: int, peers: set[str], causal_too: bool = False,
              method: str = "isolated", rounds: int = 1) -> list[Row]:
  """unfused, online, fused, rewrite, flash and NumPy (PyTorch too, if importable and in peers) at every size."""
  cases = [Case("attention", n, d, causal, frozenset(peers)) for d in dims
           for causal in ((False, True) if causal_too else (False,)) for n in sizes]
  return best_of_rounds(cases, reps, method, rounds)


def positive_int(text: str) -> int:
  value = int(text)
  if value < 1: raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
  return value


def main(argv: list[str] | None = None) -> None:
  ap = argparse.ArgumentParser(prog="python -m uopc.bench", description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("what", choices=["gemm", "peak", "attention", "gpt", "conv", "cnn"])
  ap.add_argument("--sizes", type=positive_int, nargs="+")
  ap.add_argument("--dims", type=positive_int, nargs="+", default=[64])
  ap.add_argument("--reps", type=positive_int, default=5)
  ap.add_argument("--peers", nargs="+", default=["fused", "torch"], choices=["fused", "torch"],
                  help="optional attention peers: fused, torch")
  ap.add_argument("--method", choices=list(METHODS), default="isolated",
                  help="gemm, attention: isolated (each peer in its own process, the default) or interleaved")
  ap.add_argument("--causal", action="store_true", help="attention: also run causal (keys j <= i)")
  ap.add_argument("--rounds", type=positive_int, default=ROUNDS, help="run the sweep this many times, keep each best")
  ap.add_argument("--no-peak", action="store_true", help="skip measuring the FMA peak (no fraction-of-peak column)")
  ap.add_argument("--layers", type=int, help="gpt: number of layers (default: the preset's)")
  ap.add_argument("--preset", choices=["chapter", "baby"], help="gpt: the model and recipe (uopc.nn.train); "
                  "given, the two also train side by side (uopc.bench.gpt_twin)")
  ap.add_argument("--steps", type=int, help="gpt --preset: training steps (default: the preset's; 0: none)")
  ap.add_argument("--out", help="gpt --preset: write the loss curves (CSV, PNG) and a sample to this folder")
  ap.add_argument("--opt", choices=["vector", "default"], default="vector",
                  help="gpt: uopc's optimizer, VectorOpt (the default here) or DefaultOpt (the book's kernels)")
  ap.add_argument("--threads", type=positive_int, nargs="+",
                  help="gpt, cnn: run once per thread count (each its own process) and print each peer's scaling")
  ap.add_argument("--no-torch-compile", action="store_true",
                  help="gpt, cnn: leave torch.compile out (its compile is long)")
  args = ap.parse_args(argv)
  print(header(args.method, args.reps, args.rounds) if args.what in ("gemm", "attention") else header())
  if args.what in ("gpt", "cnn") and args.threads:
    import sys
    from uopc.bench.gpt import scaling
    rest = [a for a in (argv if argv is not None else sys.argv[1:]) if a != args.what]
    k = rest.index("--threads")
    while k + 1 < len(rest) and rest[k + 1].isdigit(): rest.pop(k + 1)
    rest.pop(k)
    print("\n".join(scaling(args.threads, rest, args.what)))
    return
  if args.what == "cnn":
    from uopc.bench.cnn import cnn
    fma = None if args.no_peak else (lambda: peak(3)["fma_gflops"])
    peers = ("eager",) if args.no_torch_compile else ("eager", "compile")
    print("\n".join(cnn(reps=max(args.reps, 10), torch_peers=peers, fma_peak=fma)), flush=True)
    return
  if args.what == "gpt":
    from uopc.bench.gpt import gpt
    from uopc.opt import DefaultOpt, VectorOpt
    opt = VectorOpt if args.opt == "vector" else DefaultOpt
    peers = ("eager",) if args.no_torch_compile else ("eager", "compile")
    fma = None if args.no_peak else (lambda: peak(3)["fma_gflops"])
    print("\n".join(gpt(reps=max(args.reps, 10), layers=args.layers, opt=opt, preset_name=args.preset or "chapter",
                         torch_peers=peers, fma_peak=fma)), flush=True)
    if args.preset and args.steps != 0:
      from uopc.bench.gpt_twin import twin
      from uopc.tensor import Tensor
      old, Tensor.opt = Tensor.opt, opt
      try: print("\n".join(twin(args.preset, args.steps, args.out)))
      finally: Tensor.opt = old
    return
  if args.what == "conv":
    from uopc.bench.conv import conv
    print("\n".join(conv(max(args.reps, 20))), flush=True)
    return
  if args.what == "peak":
    r = peak(args.reps)
    print(f"FP32 FMA peak   {r['fma_gflops']:9.1f} GFLOP/s\nmemory (triad)  {r['triad_gbs']:9.1f} GB/s")
    return
  # the peak is measured before and after the sweep and the larger kept: a peak measured while the machine was
  # busy is too low, and would print fractions of it above 100%
  peaks = [peak(3)["fma_gflops"]] if args.what == "attention" and not args.no_peak else []
  rows = gemm(args.sizes or [256, 512, 1024, 2048], args.reps, args.method, args.rounds) if args.what == "gemm" else \
    attention(args.sizes or [256, 512, 1024, 2048, 4096, 8192], args.dims, args.reps, set(args.peers), args.causal,
              args.method, args.rounds)
  peak_gflops = max(peaks + [peak(3)["fma_gflops"]]) if peaks else None
  if peak_gflops:   # still below a row (a busy machine), the best row is the ceiling: no row prints over 100%
    peak_gflops, what = ceiling(peak_gflops, {f"{r.impl} {r.case}": r.flops / r.seconds / 1e9 for r in rows})
    print(f"# ceiling          {peak_gflops:.1f} GFLOP/s: {what} (the FMA peak is the best of before and after)")
  print(f"{'case':<20s} {'impl':<10s} {'time':>13s} {'rate':>17s} speedup over numpy")
  for r in rows: print(r.line(peak_gflops))

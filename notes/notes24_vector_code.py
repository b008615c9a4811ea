"""NOTES 24: the vector kernels' findings, measured on this machine.

  python notes/notes24_vector_code.py

1. Vector loads and stores written as memcpy, with and without -mprefer-vector-width=256 (uopc's default flags on
   x86), and through a pointer to the `_u` typedef, as uopc writes them now.
2. The flash tile: 6 x 4 (24 accumulators) against 8 x 4 (32: spills), and the time of the vector exp2.
3. GEMM tiles 16 x 1 and 8 x 2 at K = 512 and K = 1024 (16 rows of A a multiple of 4 KB apart share L1 sets).
Each group's variants are timed in turns, 15 rounds, best of each (a burst of outside load then hits them alike);
both cores, one head.
"""
import re
import time
import numpy as np
from uopc.codegen import gemm_vec
from uopc.opt import kernel_timer
from uopc.runtime.asm import assembly, hot_loops, stack_spills
from uopc.bench import header
from uopc.runtime.flags import CompileOpts
from uopc.kernels.flash_vec import FlashVecOpts, flash_vector_ir
from uopc.render_c import render_c
from uopc.renderer import KernelSource
from uopc.runtime import Program


def in_turns(fns: dict, rounds: int = 15) -> dict:
  """Best seconds of each function, all run once per round."""
  for f in fns.values(): f()
  best = {k: float("inf") for k in fns}
  for _ in range(rounds):
    for k, f in fns.items():
      t0 = time.perf_counter(); f(); best[k] = min(best[k], time.perf_counter() - t0)
  return best


print(header())
N, D = 2048, 64
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((N, D)).astype(np.float32) for _ in range(3))
kt = np.ascontiguousarray(k.T)
flops = 4 * N * N * D


def flash(opts: FlashVecOpts, edit=lambda s: s) -> tuple[object, str]:
  """A function running the flash kernel with opts (its source edited by `edit`), and that source."""
  src = render_c(flash_vector_ir(1, -(-N // opts.rows) * opts.rows, N, D, opts), "flash_vec")
  text = edit(str(src))
  prg = Program(KernelSource(text, "flash_vec", src.signature), "flash_vec", opts.compile.flags)
  qp = np.zeros((-(-N // opts.rows) * opts.rows, D), np.float32); qp[:N] = q
  out = np.zeros_like(qp)
  return (lambda: prg(qp, kt, v, out)), text


# 1. memcpy loads and the vector-width flag
LOAD = re.compile(r"(f32x16) (val\d+) = \*\(f32x16_u\*\)&([^;]+);")
STORE = re.compile(r"\*\(f32x16_u\*\)&([^=]+) = ([^;]+);")
as_memcpy = lambda s: STORE.sub(r"{ f32x16 t_ = \2; memcpy(&\1, &t_, sizeof t_); }",
                                LOAD.sub(r"\1 \2; memcpy(&\2, &\3, sizeof \2);", s))
print(f"\n1. flash N={N} D={D}, tile 6x4x2")
variants = {label: flash(FlashVecOpts(rows=6, kvec=4, dchunk=2, compile=CompileOpts(vector_width=width)), edit)[0]
            for label, width, edit in [("memcpy loads and stores, -mprefer-vector-width=256", 256, as_memcpy),
                                       ("memcpy loads and stores, no width preference", None, as_memcpy),
                                       ("_u pointer loads and stores, -mprefer-vector-width=256", 256, lambda s: s),
                                       ("_u pointer loads and stores, no width preference", None, lambda s: s)]}
for label, t in in_turns(variants).items(): print(f"  {label:56s} {t * 1e3:7.3f} ms {flops / t / 1e9:7.1f} GFLOP/s")

# 2. spills and exp2
print(f"\n2. flash N={N} D={D}: tiles, spills in the hot loops, and the exp2")
no_exp = lambda s: s.replace("{\n  f32x16 xc", "{ return x;\n  f32x16 xc", 1)   # exp2(x) = x: wrong, for timing only
built = {label: (opts, *flash(opts, edit)) for opts, edit, label in [
  (FlashVecOpts(rows=6, kvec=4, dchunk=2), lambda s: s, "6x4x2"),
  (FlashVecOpts(rows=8, kvec=4, dchunk=2), lambda s: s, "8x4x2"),
  (FlashVecOpts(rows=6, kvec=4, dchunk=2), no_exp, "6x4x2, exp2 replaced by x")]}
times = in_turns({label: fn for label, (_, fn, _) in built.items()})
for label, (opts, _, text) in built.items():
  spills = [len(stack_spills(loop)) for loop in hot_loops(assembly(text, opts.compile.flags))]
  t = times[label]
  print(f"  {label:28s} {t * 1e3:7.3f} ms {flops / t / 1e9:7.1f} GFLOP/s  spills per hot loop {spills}")

# 3. GEMM tiles and 4 KB aliasing
print("\n3. GEMM kernel (B packed), M = N = 1024")
for K in (512, 1024):
  tiles = (gemm_vec.GemmOpts(rows=16, nvec=1), gemm_vec.GemmOpts(rows=8, nvec=2))
  times = in_turns({o: kernel_timer(gemm_vec.program(1024, 1024, K, o), "gemm_tune") for o in tiles})
  for o, t in times.items():
    rate = 2 * 1024 * 1024 * K / t / 1e9
    print(f"  K={K:5d} rows={o.rows:2d} nvec={o.nvec}  {t * 1e3:7.3f} ms {rate:7.1f} GFLOP/s")

# 4. the THREAD loop's schedule: static halves (the book's pragma) or chunks taken as threads come free
print("\n4. flash, OpenMP schedule of the query blocks")
from uopc.render_c import c_renderer   # noqa: E402
for n, d in ((1024, 64), (4096, 64), (1024, 128)):
  opts = FlashVecOpts(rows=6, kvec=4, dchunk=2)
  nq = -(-n // opts.rows) * opts.rows
  qs, kts, vs = (rng.standard_normal(s).astype(np.float32) for s in ((nq, d), (d, n), (n, d)))
  sink = flash_vector_ir(1, nq, n, d, opts)
  fns = {}
  for schedule in ("static", "dynamic", "guided"):
    prg = Program(c_renderer(schedule).render(sink, "flash_vec").src, "flash_vec", opts.compile.flags)
    fns[schedule] = (lambda p=prg, o=np.zeros((nq, d), np.float32): p(qs, kts, vs, o))
  times = in_turns(fns)
  print(f"  N={n} D={d}  " + "  ".join(f"{s} {t * 1e3:.3f} ms" for s, t in times.items()))

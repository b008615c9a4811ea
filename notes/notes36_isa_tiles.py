"""NOTES 36: the tiles the heuristics choose at each x86 level this CPU can run, and whether their hot loops spill.

  PYTHONPATH=. python notes/notes36_isa_tiles.py

For each level (this CPU's own -march=native, then x86-64-v4, v3, v2 where the CPU runs them), under
Context(UOPC_MARCH=level): the vector ISA from uopc.runtime.machine's table, the GEMM tile VectorOpt's heuristic
picks for 512^3 and 384^3, both flash layouts' heuristic tiles, the FMA peak kernel's chains; then each of those
kernels compiled as Program compiles it and its hot loops (uopc.runtime.asm) searched for stack spills.
Nothing is timed: the GFLOP/s columns of NOTES 36 are for a benchmark run on a quiet machine.
"""
import datetime
import platform
import re
import subprocess
from uopc.helpers import Context
from uopc.render_c import render_c
from uopc.runtime import compiler, compiler_version
from uopc.runtime.asm import assembly, hot_loops, stack_spills
from uopc.runtime.flags import FLAGS
from uopc.runtime.machine import MarchError, target
from uopc.codegen import gemm_vec
from uopc.kernels import flash_vec, flash_vec_q
from uopc.bench import fma_source

LEVELS = ("", "x86-64-v4", "x86-64-v3", "x86-64-v2")


def spills(src: str, flags=FLAGS) -> str:
  loops = hot_loops(assembly(src, flags))
  if not loops: return "no hot loop"
  n = sum(len(stack_spills(loop)) for loop in loops)
  return f"{len(loops)} loops, {n} spills"


def row(level: str) -> dict[str, str]:
  with Context(UOPC_MARCH=level):
    isa = target().isa
    g512, g384 = gemm_vec.heuristic_opts(isa, 512, 512, 512), gemm_vec.heuristic_opts(isa, 384, 384, 512)
    fv, fq = flash_vec.default_opts(isa), flash_vec_q.default_opts(isa)
    nq = -(-256 // (fv.rows * fv.qblocks)) * fv.rows * fv.qblocks
    return {
      "level": level or "native", "ISA": f"{isa.name} {isa.registers}x{isa.lanes}",
      "gemm 512 (384)": f"{g512.rows}x{g512.nvec} ({g384.rows}x{g384.nvec})",
      "flash_vec rows x kvec, dchunk": f"{fv.rows}x{fv.kvec}, {fv.dchunk}",
      "flash_vec_q keys, dcols": f"{fq.keys}, {fq.dcols}",
      "peak chains": str(isa.chains),
      "gemm loops (inline; copy)": "; ".join(
        spills(render_c(gemm_vec.program(512, 512, 512, g512, t), "gemm_tune")) for t in (2, 1000)),
      "flash_vec": spills(render_c(flash_vec.flash_vector_ir(1, nq, 256, 64, fv), "flash_vec"), fv.compile.flags),
      "flash_vec_q": spills(render_c(flash_vec_q.flash_queries_ir(1, 256, 256, 64, fq), "flash_vec_q"),
                            fq.compile.flags),
      "peak": spills(fma_source(isa)),
    }


def cpu() -> str:
  info = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
  get = lambda k: (m.group(1).strip() if (m := re.search(rf"^{k}:\s*(.*)$", info, re.M)) else "?")
  return f"{get('Model name')} (family {get('CPU family')}, model {get('Model')}), {platform.machine()}"


if __name__ == "__main__":
  print(f"# {cpu()}; {compiler_version(compiler())}; {datetime.date.today()}")
  rows = []
  for level in LEVELS:
    try: rows.append(row(level))
    except MarchError as e: print(f"# {level}: skipped ({e})")
  cols = list(rows[0])
  print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
  for r in rows: print("| " + " | ".join(r[c] for c in cols) + " |")

"""NOTES 65: what a small vector kernel's compile costs, with and without the exp2 helpers it does not use (x86's AVX2
and AVX-512 forms of exp2 include <immintrin.h>). The kernel out = x + 1 on 8 lanes as uopc renders it now, and the
same source with the f32x8 exp2 helper that every vector kernel carried before (uopc.codegen.vector.c_typedefs with
exp2=True); each compiled REPS times with uopc's flags, best and median; the two shared objects' code compared.

  python notes/notes65_compile_headers.py
"""
import os, re, statistics, subprocess, tempfile, time
from pathlib import Path
from uopc.codegen.vector import c_typedefs
from uopc.dtype import dtypes
from uopc.render_c import C, render_c
from uopc.runtime import FLAGS, compiler
from uopc.uop import Ops, ParamArg, UOp, range_, sink

REPS = int(os.environ.get("REPS", "10"))
F8 = dtypes.f32.vec(8)
x, out = (UOp(Ops.BUFFER, (), ParamArg(k, dtypes.f32, (64,))) for k in range(2))
i = range_(8, 0)
now = render_c(sink(out.index(i * 8).store(x.index(i * 8).load(8) + 1.0).end(i)), "add")
typedefs = "\n".join(c_typedefs({F8}, C.type))
before = now.replace(typedefs, "\n".join(c_typedefs({F8}, C.type, exp2=True)))
assert before != now and "immintrin.h" in before and "immintrin.h" not in now


def compile_times(src: str, out: Path) -> list[float]:
  c_file = out.with_suffix(".c")
  c_file.write_text(src)
  times = []
  for _ in range(REPS):
    t = time.perf_counter()
    subprocess.run([compiler(), *FLAGS, "-o", str(out), str(c_file), "-lm"], check=True)
    times.append(time.perf_counter() - t)
  return times


def code(so: Path) -> str:
  d = subprocess.run(["objdump", "-d", "--no-addresses", "--no-show-raw-insn", str(so)], capture_output=True,
                     text=True).stdout
  return re.sub(r"<[^>]*>", "", d.split("Disassembly of section .text:")[1].split("Disassembly of section .fini")[0])


with tempfile.TemporaryDirectory() as tmp:
  rows = {name: compile_times(src, Path(tmp) / f"{name}.so") for name, src in (("now", now), ("before", before))}
  same = code(Path(tmp) / "now.so") == code(Path(tmp) / "before.so")
print(f"{compiler()} {' '.join(FLAGS)}; {REPS} compiles each")
for name, t in rows.items():
  print(f"  {name:7s} {len(now if name == 'now' else before):6d} characters of C: best {min(t) * 1e3:6.1f} ms, "
        f"median {statistics.median(t) * 1e3:6.1f} ms")
print(f"  the same machine code: {same}")

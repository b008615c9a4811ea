"""NOTES 35: C's integer semantics against NumPy's, compiled as uopc compiles (gcc, runtime flags) and through uopc.

  PYTHONPATH=. python notes/notes35_c_integers.py

Each case is one C function on one input, compiled twice: as C writes it and as uopc.codegen.cint renders it; then
the same op through uopc's Tensor, and NumPy's answer. A C case that traps (SIGFPE) runs in a child process.
"""
import datetime
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
import numpy as np
from uopc.runtime.flags import CompileOpts
from uopc.tensor import Tensor
from uopc.dtype import dtypes

FLAGS = [f for f in CompileOpts().flags if f not in ("-shared", "-fPIC")]
CASES = {   # name: (C type, plain C body, uopc's body, input, Tensor op, NumPy op)
  "INT_MIN / -1": ("int", "return a / b;", "return (b==-1?(int)(0u-(unsigned int)a):a/b);", (-2**31, -1),
                   lambda a, b: a // b, lambda a, b: a // b),
  "(x + 1) > x at INT_MAX": ("int", "return (a + 1) > a;", "return ((int)((unsigned int)a+(unsigned int)1)) > a;",
                              (2**31 - 1, 0), lambda a, b: (a + 1) > a, lambda a, b: (a + 1) > a),
  "uint8 (a + b) < 5": ("unsigned char", "return (a + b) < 5;", "return ((unsigned char)(a + b)) < 5;", (250, 10),
                        lambda a, b: (a + b) < 5, lambda a, b: (a + b) < 5),
  "(float)(int)3e9f": ("float", "return (float)(int)a;",
                       "return (float)((a>=-2147483648.0&&a<2147483648.0)?(int)a:(-2147483647-1));", (3e9, 0),
                       lambda a, b: a.cast(dtypes.i32).cast(dtypes.f32),
                       lambda a, b: a.astype(np.int32).astype(np.float32)),
}
DTYPES = {"int": np.int32, "unsigned char": np.uint8, "float": np.float32}


def run_c(ctype: str, body: str, a, b) -> str:
  src = f"""#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) double f({ctype} a, {ctype} b) {{ {body} }}
int main(int argc, char** argv) {{ printf("%.9g\\n", f(({ctype})strtod(argv[1], 0), ({ctype})strtod(argv[2], 0))); }}
"""
  with tempfile.TemporaryDirectory() as d:
    c, exe = Path(d) / "k.c", Path(d) / "k"
    c.write_text(src)
    subprocess.run(["gcc", *FLAGS, str(c), "-o", str(exe)], check=True)
    r = subprocess.run([str(exe), repr(float(a)), repr(float(b))], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else f"signal {-r.returncode} (SIGFPE)" if r.returncode == -8 \
      else f"exit {r.returncode}"


def main():
  lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
  cpu = [ln.split(":", 1)[1].strip() for ln in lscpu if ln.split(":")[0] in ("Model name", "CPU family", "Model")]
  gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
  print(f"machine: {platform.machine()} {' / '.join(cpu)}; {gcc}; {datetime.date.today()}")
  print(f"flags: {' '.join(FLAGS)}\n")
  print(f"{'case':26} {'C as written':>22} {'uopc renders':>14} {'uopc Tensor':>12} {'NumPy':>12}")
  for name, (ctype, plain, ours, (a, b), top, nop) in CASES.items():
    na, nb = np.array([a], DTYPES[ctype]), np.array([b], DTYPES[ctype])
    with np.errstate(all="ignore"):
      want = nop(na, nb)[0]
      got = top(Tensor(na), Tensor(nb)).numpy()[0]
    print(f"{name:26} {run_c(ctype, plain, a, b):>22} {run_c(ctype, ours, a, b):>14} {got!s:>12} {want!s:>12}")


if __name__ == "__main__": sys.exit(main())

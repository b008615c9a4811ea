"""Reading a kernel's assembly (chapter 10): is the register tile in registers?

  asm = assembly(src, flags)      the x86 (or other) assembly the C compiler makes of a kernel, as Program builds it
  hot_loops(asm, fma)             the innermost loops that hold FMAs (`fma`: the target ISA's mnemonic, by default
                                  uopc.runtime.machine's for UOPC_MARCH or this CPU): where a tile's multiply-adds run
  stack_spills(loop)              the instructions in one that move a vector register to or from a stack slot

A tile with more accumulators than the machine has vector registers still compiles; the compiler keeps some in
stack slots, and every trip of the hot loop then loads and stores them. No timing shows that as clearly as these
lines do.
"""
from __future__ import annotations
import re
import subprocess
from uopc.runtime.flags import FLAGS, with_prelude
from uopc.runtime.machine import resolve, target
from uopc.runtime.toolchain import CompileError, compiler

LABEL = re.compile(r"^(\.L\w+):")
COND_JUMP = re.compile(r"^\s+(j(?!mp)\w+)\s+(\.L\w+)\s*$")            # jne .L6, not jmp
VECTOR_REG = re.compile(r"%[xyz]mm\d+")
STACK_SLOT = re.compile(r"(?<![\w)])-?\d*\(%r[sb]p\)")                  # 3904(%rsp): no index register


def assembly(src: str, flags: tuple[str, ...] = FLAGS) -> str:
  """The assembly of a rendered kernel (PRELUDE first, as Program compiles it), with `flags` minus the linking ones,
  -march=native replaced as Program replaces it (the target of UOPC_MARCH or this CPU)."""
  full = with_prelude(src)
  flags = resolve(flags, target())
  cmd = [compiler(), *[f for f in flags if f not in ("-shared", "-fPIC")], "-S", "-o", "-", "-x", "c", "-"]
  r = subprocess.run(cmd, input=full, text=True, capture_output=True, timeout=300)
  if r.returncode != 0: raise CompileError(f"{cmd[0]} -S failed:\n{r.stderr.strip()}")
  return r.stdout


def hot_loops(asm: str, fma: str | None = None) -> list[list[str]]:
  """The innermost loops (a label and the last conditional jump back to it, with no such loop inside) that hold an
  FMA (an instruction starting with `fma`: vfmadd on AVX2 and AVX-512, mulps on SSE, which has no FMA; the target's
  by default): where a register tile's multiply-adds run."""
  fma = target().isa.fma_asm if fma is None else fma
  has_fma = re.compile(rf"^\s+{re.escape(fma)}")
  lines = asm.splitlines()
  at: dict[str, int] = {}
  ends: dict[str, int] = {}
  for k, line in enumerate(lines):
    if m := LABEL.match(line): at[m.group(1)] = k
    elif (m := COND_JUMP.match(line)) and m.group(2) in at: ends[m.group(2)] = k
  loops = [(at[label], end) for label, end in ends.items()]
  inner = [(a, b) for a, b in loops if not any((c, d) != (a, b) and a <= c and d <= b for c, d in loops)]
  return [lines[a:b + 1] for a, b in sorted(inner) if any(has_fma.match(line) for line in lines[a:b + 1])]


def stack_spills(loop: list[str]) -> list[str]:
  """The instructions that move a vector register to or from a fixed stack slot, or take one as an operand."""
  return [line.strip() for line in loop if VECTOR_REG.search(line) and STACK_SLOT.search(line)]

"""Tensor-core tiles: which lane of a warp holds which element of an mma's operands, exactly as the hardware does.

An NVIDIA `mma.sync.aligned.m16n8k16` multiplies a 16x16 tile A by a 16x8 tile B and adds a 16x8 tile C, with the
32 lanes of a warp each holding a few elements of every operand in registers (its *fragments*). Which element a lane
holds is fixed by the hardware (PTX ISA, "Matrix Fragments for mma.m16n8k16"); a kernel that loads the wrong element
into a register gets wrong numbers, not an error. This module writes those layouts down as tables, so that

  - a CPU or OpenCL device can emulate the instruction lane by lane (`mma`), keeping the layout exact: a wrong
    swizzle in a generated kernel gives wrong numbers there too, not only on a GPU;
  - the CUDA renderer can emit the real instruction (`ptx_mma`), and a test can check both against NumPy.

With g = lane // 4 (the lane's group) and t = lane % 4 (its place in the group), m16n8k16 (f16 or bf16 in, f32 out):
  A (16 x 16, 8 elements a lane):  row g + 8 * ((i // 2) % 2),  column 2t + i % 2 + 8 * (i // 4)
  B (16 x 8, 4 elements a lane):   row 2t + i % 2 + 8 * (i // 2),  column g
  C, D (16 x 8, 4 a lane):         row g + 8 * (i // 2),  column 2t + i % 2
and m16n8k8 with TF32 inputs (sm_80+):
  A (16 x 8, 4 a lane): row g + 8 * (i % 2), column t + 4 * (i // 2);  B (8 x 8, 2 a lane): row t + 4 * i, column g.
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Callable
import numpy as np

WARP = 32


@dataclass(frozen=True)
class Operand:
  """One operand of an mma: its tile shape and where element i of lane `lane` sits in the tile."""
  rows: int
  cols: int
  per_lane: int
  where: Callable[[int, int], tuple[int, int]]   # (lane, i) -> (row, col)

  def positions(self) -> np.ndarray:
    """(32, per_lane, 2): the (row, col) of every register element of every lane."""
    return np.array([[self.where(lane, i) for i in range(self.per_lane)] for lane in range(WARP)])


@dataclass(frozen=True)
class Shape:
  """An mma instruction: M x N x K, its input and accumulator types, and the fragment layout of A, B, C (= D)."""
  name: str
  m: int
  n: int
  k: int
  inputs: tuple[str, ...]   # the input types it accepts, as PTX spells them
  a: Operand
  b: Operand
  c: Operand


def _g(lane: int) -> int: return lane // 4
def _t(lane: int) -> int: return lane % 4


M16N8K16 = Shape("m16n8k16", 16, 8, 16, ("f16", "bf16"),
                 a=Operand(16, 16, 8, lambda l, i: (_g(l) + 8 * ((i // 2) % 2), 2 * _t(l) + i % 2 + 8 * (i // 4))),
                 b=Operand(16, 8, 4, lambda l, i: (2 * _t(l) + i % 2 + 8 * (i // 2), _g(l))),
                 c=Operand(16, 8, 4, lambda l, i: (_g(l) + 8 * (i // 2), 2 * _t(l) + i % 2)))
M16N8K8_TF32 = Shape("m16n8k8", 16, 8, 8, ("tf32",),
                     a=Operand(16, 8, 4, lambda l, i: (_g(l) + 8 * (i % 2), _t(l) + 4 * (i // 2))),
                     b=Operand(8, 8, 2, lambda l, i: (_t(l) + 4 * i, _g(l))),
                     c=M16N8K16.c)
SHAPES = {"m16n8k16": M16N8K16, "m16n8k8": M16N8K8_TF32}


def to_fragments(tile: np.ndarray, op: Operand) -> np.ndarray:
  """A tile -> the registers of the 32 lanes, (32, per_lane): what each lane loads."""
  if tile.shape != (op.rows, op.cols): raise ValueError(f"a {op.rows} x {op.cols} tile is needed, got {tile.shape}")
  pos = op.positions()
  return tile[pos[..., 0], pos[..., 1]]


def from_fragments(frags: np.ndarray, op: Operand) -> np.ndarray:
  """The registers of the 32 lanes -> the tile they hold together."""
  if frags.shape != (WARP, op.per_lane):
    raise ValueError(f"{WARP} lanes of {op.per_lane} elements are needed, got {frags.shape}")
  tile = np.zeros((op.rows, op.cols), frags.dtype)
  pos = op.positions()
  tile[pos[..., 0], pos[..., 1]] = frags
  return tile


def check_layout(op: Operand) -> None:
  """Every element of the tile is held by exactly one (lane, register): a layout table that is not a bijection is
  a typo in it."""
  seen = {tuple(p) for p in op.positions().reshape(-1, 2)}
  if len(seen) != op.rows * op.cols or len(seen) != WARP * op.per_lane:
    raise AssertionError(f"layout covers {len(seen)} of {op.rows * op.cols} elements with {WARP * op.per_lane} slots")


def mma(shape: Shape, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
  """What `mma.sync` does to the warp's registers: D = A @ B + C in float32, fragment in, fragment out. Each lane's
  inputs are placed into the tiles by the layout and its results taken back out by it: the emulation of a warp."""
  A, B, C = (from_fragments(x, op).astype(np.float32) for x, op in ((a, shape.a), (b, shape.b), (c, shape.c)))
  return to_fragments(A @ B + C, shape.c)


def ptx_mma(shape: Shape, dtype: str, d: list[str], a: list[str], b: list[str], c: list[str]) -> str:
  """The CUDA C statement that runs the instruction on named registers (inline PTX, as tinygrad emits it). A and B
  are passed as 32-bit registers holding two halves each (f16/bf16) or one tf32; C and D as floats."""
  if dtype not in shape.inputs: raise ValueError(f"{shape.name} takes {shape.inputs}, not {dtype}")
  regs = d + a + b + c
  ops = ", ".join("{" + ", ".join(f"%{k}" for k in range(start, start + len(group))) + "}"
                  for start, group in zip((0, len(d), len(d) + len(a), len(d) + len(a) + len(b)), (d, a, b, c)))
  outs = ", ".join(f'"=f"({x})' for x in d)
  ins = ", ".join([f'"r"({x})' for x in a + b] + [f'"f"({x})' for x in c])
  assert len(regs) == len(d) + len(a) + len(b) + len(c)
  return (f'asm volatile("mma.sync.aligned.{shape.name}.row.col.f32.{dtype}.{dtype}.f32 {ops};" : {outs} : {ins});')


def affine(op: Operand, i: int, axis: int) -> tuple[int, int, int]:
  """(a, b, c) with position = a*g + b*t + c for element i, over every lane (every layout above is affine in g and t:
  checked here, so the C the renderer prints from it is the table itself)."""
  at = lambda lane: op.where(lane, i)[axis]
  a, b, c = at(4) - at(0), at(1) - at(0), at(0)
  if any(at(lane) != a * _g(lane) + b * _t(lane) + c for lane in range(WARP)):
    raise AssertionError(f"element {i} of this layout is not affine in the lane's group and place")
  return a, b, c


def _index(op: Operand, i: int, ld: int) -> str:
  (ra, rb, rc), (ca, cb, cc) = affine(op, i, 0), affine(op, i, 1)
  return f"(g*{ra}+t*{rb}+{rc})*{ld}+(g*{ca}+t*{cb}+{cc})"


def mma_tile_kernel(shape: Shape = M16N8K16, dtype: str = "f16", name: str = "mma_tile") -> str:
  """CUDA C for one warp computing D = A @ B of one tile (A row-major M x K, B row-major K x N, halves passed as raw
  16-bit words, D float), each lane loading exactly the elements the layout gives it and packing pairs into the
  32-bit registers mma.sync takes. The check of a layout on a GPU: D must equal NumPy's A @ B."""
  if dtype not in ("f16", "bf16"): raise ValueError("mma_tile_kernel packs 16-bit inputs (f16 or bf16)")
  pa, pb, pc = shape.a.per_lane // 2, shape.b.per_lane // 2, shape.c.per_lane
  lines = [f'extern "C" __global__ void {name}(const unsigned short* A, const unsigned short* B, float* D) {{',
           "  int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;",
           f"  unsigned a[{pa}], b[{pb}]; float c[{pc}], d[{pc}];"]
  for r in range(pa):
    lines.append(f"  a[{r}] = (unsigned)A[{_index(shape.a, 2 * r, shape.k)}] | "
                 f"((unsigned)A[{_index(shape.a, 2 * r + 1, shape.k)}] << 16);")
  for r in range(pb):
    lines.append(f"  b[{r}] = (unsigned)B[{_index(shape.b, 2 * r, shape.n)}] | "
                 f"((unsigned)B[{_index(shape.b, 2 * r + 1, shape.n)}] << 16);")
  lines.append(f"  for (int i = 0; i < {pc}; i++) c[i] = 0.0f;")
  lines.append("  " + ptx_mma(shape, dtype, [f"d[{i}]" for i in range(pc)], [f"a[{i}]" for i in range(pa)],
                                [f"b[{i}]" for i in range(pb)], [f"c[{i}]" for i in range(pc)]))
  for i in range(pc): lines.append(f"  D[{_index(shape.c, i, shape.n)}] = d[{i}];")
  lines.append("}")
  return "\n".join(lines)

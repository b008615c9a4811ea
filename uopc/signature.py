"""What a rendered kernel carries to the runtime: its text, its function name and its Signature (each buffer's
dtype, element count and whether the kernel writes it; the launch of a GPU kernel). The runtime reads these and never
the C, and never imports the renderer that made them."""
from __future__ import annotations
import re
from dataclasses import dataclass
from uopc.dtype import DType
from uopc.helpers import prod
from uopc.uop import UOp, Ops


@dataclass(frozen=True)
class Launch:
  """How a kernel is launched: work-groups per dimension (grid) and work-items per work-group (block)."""
  grid: tuple[int, ...] = (1,)
  block: tuple[int, ...] = (1,)

  @property
  def global_size(self) -> tuple[int, ...]: return tuple(g * b for g, b in zip(self.grid, self.block))
  @property
  def threads(self) -> int: return prod(self.block)
  @property
  def items(self) -> int: return prod(self.grid) * prod(self.block)


def launch_of(topo: list[UOp]) -> Launch:
  """The launch sizes a program's SPECIAL nodes ask for (uopc.codegen.gpudims.to_special makes them)."""
  sizes = {u.arg: u.src[0].arg for u in topo if u.op is Ops.SPECIAL}
  if not sizes: return Launch()
  ndim = max(d for _, d in sizes) + 1
  grid = tuple(sizes.get(("gidx", d), 1) for d in range(ndim))
  return Launch(grid, tuple(sizes.get(("lidx", d), 1) for d in range(ndim)))


@dataclass(frozen=True)
class Param:
  """One kernel parameter: data{slot}, a pointer to `size` elements of dtype."""
  name: str
  dtype: DType
  size: int
  writes: bool     # the kernel stores through it (an input may be read-only memory)


@dataclass(frozen=True)
class Signature:
  params: tuple[Param, ...]
  launch: Launch = Launch()     # work-groups x work-items (a GPU kernel; one of one for C)

  def __len__(self): return len(self.params)


class KernelSource(str):
  """The text of a kernel (a str, as the book prints it) that also knows its function name and signature."""
  name: str
  signature: Signature

  def __new__(cls, text: str, name: str, signature: Signature):
    s = super().__new__(cls, text)
    s.name, s.signature = name, signature
    return s


IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_identifier(name: str, what: str = "kernel name") -> str:
  """Names reach the source text: only C identifiers do (no spaces, quotes, slashes or keywords of the shell)."""
  if not isinstance(name, str) or not IDENTIFIER.fullmatch(name) or len(name) > 200:
    raise ValueError(f"{what} {name!r} is not a C identifier (letters, digits and _, not starting with a digit)")
  return name

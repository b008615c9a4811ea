"""GPU launch axes: a loop program's parallel output loops -> a grid of work-groups of work-items (chapter 12).

Two rewrites, in the order a GPU renderer runs them:
  launch_axes(prog)  loop program -> the same program with its parallel output loops split in two, r = g*b + l, with
                     g a GLOBAL loop (which work-group) and l a LOCAL loop (which work-item in it). Still a loop
                     program: the C renderer prints it as ordinary nested loops, and it computes the same values.
  to_special(prog)   GLOBAL/LOCAL loops -> SPECIAL index values (gidx{d} = group id, lidx{d} = local id in dimension
                     d): the loops disappear, every work-item runs the body once. Also gives the launch sizes.

A loop is parallel if every statement of the program sits inside it (its iterations share nothing: the output loops
lower() makes, with their accumulators declared inside). Dimension 0, the one whose work-items are adjacent, goes to
the innermost such loop, which walks the output with stride 1: neighbouring work-items then store to neighbouring
addresses (coalesced).
"""
from __future__ import annotations
from uopc.uop import UOp, Ops, AxisType, base_alloc, is_local
from uopc.helpers import prod
from uopc.linearize import open_ranges, loop_nesting
from uopc import symbolic
from uopc.signature import Launch, launch_of   # the launch a rendered kernel carries in its Signature

MAX_DIMS = 3                                   # OpenCL and CUDA launch in at most 3 dimensions
MAX_GRID = (2**31 - 1, 65535, 65535)           # CUDA's limits on work-groups per dimension (OpenCL's are larger)
BLOCK_LIMIT = 256                              # default work-items per work-group (a multiple of the 32-wide warp)
MIN_GROUPS = 4                                 # default: at least this many work-groups, where the axes allow, so
                                               # that more than one compute unit (SM) gets work
LAUNCH = (AxisType.GLOBAL, AxisType.LOCAL)


def _size(r: UOp) -> int: return r.src[0].arg


def parallel_loops(prog: UOp) -> list[UOp]:
  """The loops (LOOP or THREAD, constant size) that enclose every statement, outermost first."""
  topo = prog.toposort()
  rng = open_ranges(topo)
  stmts = [u for u in topo if u.op in (Ops.STORE, Ops.BARRIER)]
  if not stmts: return []
  common = frozenset.intersection(*(rng[s] for s in stmts))
  nest = loop_nesting(topo, rng)
  out = []
  for r in sorted(common, key=lambda r: len(nest[r])):
    # a prefix of the nest: a parallel loop inside a sequential one would be split across launches of the outer one
    if r.arg[1] not in (AxisType.LOOP, AxisType.THREAD) or r.src[0].op is not Ops.CONST or nest[r] != out: break
    out.append(r)
  return out


def default_block(sizes: list[int], limit: int = BLOCK_LIMIT) -> list[int]:
  """Work-items per work-group for each axis (dimension 0 first): the largest divisor of the axis that keeps the
  work-group within `limit` work-items. A divisor, so the grid covers the axis exactly and no work-item needs a
  bounds check (an odd size such as 37 gets work-groups of 37, a prime above the limit groups of 1)."""
  out, left = [], limit
  for n in sizes:
    b = max(d for d in range(1, min(n, left) + 1) if n % d == 0)
    out.append(b)
    left //= b
  return out


def has_launch(prog: UOp) -> bool:
  return any((u.op is Ops.RANGE and u.arg[1] in LAUNCH) or u.op is Ops.SPECIAL for u in prog.toposort())


def launch_axes(prog: UOp, limit: int = BLOCK_LIMIT, block: tuple[int, ...] | None = None,
                min_groups: int = MIN_GROUPS) -> UOp:
  """The GPU opt: the innermost (up to 3) parallel loops of prog become GLOBAL x LOCAL loop pairs, with work-groups
  from `block` (dimension 0 first) or the default chooser: at most `limit` work-items a group, and groups small
  enough that there are `min_groups` of them where the launch has that many work-items. A program that already has
  launch axes, or has no parallel loop, comes back unchanged."""
  if has_launch(prog): return prog
  loops = parallel_loops(prog)[-MAX_DIMS:][::-1]   # innermost first: dimension 0
  sizes = [_size(r) for r in loops]
  blocks = list(block) if block is not None else default_block(sizes, min(limit, max(1, prod(sizes) // min_groups)))
  if len(blocks) < len(loops): loops, sizes = loops[:len(blocks)], sizes[:len(blocks)]
  for d, (n, b) in enumerate(zip(sizes, blocks)):
    if b < 1 or n % b: raise ValueError(f"launch_axes: a work-group of {b} does not divide axis {d} of size {n}")
    if n // b > MAX_GRID[d]: loops, sizes = loops[:d], sizes[:d]; break   # the rest stay loops inside the work-item
  if not loops: return prog
  nid = 1 + max(u.arg[0] for u in prog.toposort() if u.op is Ops.RANGE)
  mapping, split = {}, {}
  for r, n, b in sorted(zip(loops, sizes, blocks), key=lambda t: t[0].arg[0]):   # outermost first: ids set the nest
    g = UOp(Ops.RANGE, (UOp.const(n // b),), (nid, AxisType.GLOBAL)) if n // b > 1 else UOp.const(0)
    lo = UOp(Ops.RANGE, (UOp.const(b),), (nid + 1, AxisType.LOCAL)) if b > 1 else UOp.const(0)
    nid += 2
    mapping[r] = symbolic.simplify(g * b + lo)
    split[r] = tuple(x for x in (g, lo) if x.op is Ops.RANGE)
  return symbolic.simplify(_rebuild(prog, mapping, split))


def to_special(prog: UOp) -> tuple[UOp, Launch]:
  """GLOBAL and LOCAL loops -> SPECIAL(gidx{d}) and SPECIAL(lidx{d}); the innermost loop of each kind is dimension 0.
  Every statement must sit inside every launch loop (a work-item runs the whole body once)."""
  topo = prog.toposort()
  rng = open_ranges(topo)
  launch = [u for u in topo if u.op is Ops.RANGE and u.arg[1] in LAUNCH]
  if not launch: return prog, Launch()
  for s in (u for u in topo if u.op in (Ops.STORE, Ops.BARRIER)):
    if outside := [r for r in launch if r not in rng[s]]:
      raise ValueError(f"launch loop ridx{outside[0].arg[0]} ({outside[0].arg[1]}) does not enclose every statement: "
                       "a GPU runs the whole kernel body once per work-item")
  nest = loop_nesting(topo, rng)
  mapping = {}
  for kind, name in ((AxisType.GLOBAL, "gidx"), (AxisType.LOCAL, "lidx")):
    rs = sorted((r for r in launch if r.arg[1] is kind), key=lambda r: -len(nest[r]))
    if len(rs) > MAX_DIMS: raise ValueError(f"{len(rs)} {kind.name} launch axes: a launch has at most {MAX_DIMS}")
    for d, r in enumerate(rs):
      mapping[r] = UOp(Ops.SPECIAL, r.src, (name, d))
  out = _rebuild(prog, mapping, {r: () for r in mapping})
  return out, launch_of(out.toposort())


def _rebuild(prog: UOp, mapping: dict[UOp, UOp], split: dict[UOp, tuple[UOp, ...]]) -> UOp:
  """prog with each RANGE in mapping replaced by its value; where it closes a loop (END) or places a value inside a
  loop (AFTER), it is replaced by the loops in split (none: the END or AFTER no longer mentions it)."""
  memo: dict[UOp, UOp] = {}
  for u in prog.toposort():
    if u in mapping: memo[u] = mapping[u]; continue
    if u.op in (Ops.END, Ops.AFTER):
      deps = [x for r in u.src[1:] for x in (split[r] if r in split else (memo[r],))]
      memo[u] = u.replace(src=(memo[u.src[0]], *deps)) if deps else memo[u.src[0]]
    else: memo[u] = u.replace(src=tuple(memo[s] for s in u.src)) if u.src else u
  return memo[prog]


def traffic(prog: UOp) -> dict[str, int]:
  """Bytes a launch of prog moves, counted per access executed (a value loaded twice counts twice; no cache): loads
  and stores of `global` memory (the BUFFERs) and of `local` memory (LocalArg ALLOCs). Registers (other ALLOCs) are
  free. prog may still have launch loops: they are made SPECIAL first, every work-item counted."""
  from uopc.linearize import linearize
  prog, launch = to_special(prog)
  out = {"global_load": 0, "global_store": 0, "local_load": 0, "local_store": 0}
  trips = [launch.items]
  for ln in linearize(prog):
    u = ln.uop
    if ln.kind == "open": trips.append(trips[-1] * (_size(u) if u.src[0].op is Ops.CONST else 1)); continue
    if ln.kind == "close": trips.pop(); continue
    if u.op not in (Ops.LOAD, Ops.STORE) or u.src[0].op is not Ops.INDEX: continue
    base = u.src[0].src[0]
    while base.op is Ops.AFTER: base = base.src[0]
    space = "global" if base.op is Ops.BUFFER else "local" if is_local(base_alloc(base)) else None
    if space: out[f"{space}_{'load' if u.op is Ops.LOAD else 'store'}"] += trips[-1] * u.src[0].dtype.itemsize
  return out

"""Plan.explain(): why the kernelizer cut the graph where it did, and what each fused reduction costs.

  notes = explain_plan(roots, groups, kernels, temps, asked, fuse_reduce, online, fused_work)

One note per kernel: the rule that made its point (a root, a REDUCE, a STAGE asked for or made by the layout pass or
the broadcast rule), the reductions fused into it with how often each value is computed, then the plan's total.
"""
from __future__ import annotations
from uopc.uop import UOp, Ops, MOVEMENT, base_alloc
from uopc.helpers import prod
from uopc.rangeify import last_axis_stride


def explain_plan(roots, groups, kernels, temps, asked, fuse_reduce: bool, online: list[str], fused_work) -> list[str]:
  """One note per kernel (the rule that cut it, the reductions fused in it), online softmax's groups, the total.
  groups: the points each kernel computes (uopc.codegen.siblings: several for a multi-output kernel)."""
  notes = [f"{k.name:<16s} {_why(g[0], roots, asked, fused_work) if len(g) == 1 else _siblings(g)}"
           f"{recompute_note(k)}" for g, k in zip(groups, kernels)] + online
  notes.append(f"{len(kernels)} kernels, temporaries {[n for _, n in temps]}")
  if fuse_reduce: notes[-1] += " (fuse_reduce: REDUCEs are not cut)"
  return notes


def _siblings(group) -> str:
  shapes = sorted({g.shape for g in group}, key=prod, reverse=True)
  return (f"roots: {len(group)} elementwise outputs no other kernel reads, one kernel (uopc.codegen.siblings; shapes "
          f"{', '.join(str(s) for s in shapes[:3])}{', ...' if len(shapes) > 3 else ''})")


def _why(p: UOp, roots: list[UOp], asked: set[UOp], fused_work) -> str:
  """The rule that made p a materialization point."""
  if p in roots: return "root: an output of the graph"
  if p.op is Ops.REDUCE: return f"REDUCE: {p.arg[0].name.lower()} over the last {p.arg[1]} axis(es), shape {p.shape}"
  if p in asked: return "STAGE: asked for (contiguous())"
  if p.arg == "panels": return "STAGE by the layout pass: repacked (a matmul's B as panels, uopc.codegen.gemm_vec)"
  base = p.src[0]
  while base.op in MOVEMENT: base = base.src[0]
  if base.op is Ops.BUFFER:
    return f"STAGE by the layout pass: a reduce read it with stride {last_axis_stride(p.src[0])}, now 1"
  factor = max((prod(u.shape) // prod(u.src[0].shape) for u in _users(roots, p)), default=0)
  return f"STAGE by the broadcast rule: expanded x{factor}, recompute work {fused_work(p.src[0])} >= 4096"


def _users(roots: list[UOp], p: UOp) -> list[UOp]:
  """The EXPANDs whose source is p, through movement ops."""
  out = []
  for u in UOp(Ops.SINK, tuple(roots)).toposort():
    if u.op is not Ops.EXPAND: continue
    b = u.src[0]
    while b.op in MOVEMENT and b is not p: b = b.src[0]
    if b is p: out.append(u)
  return out


def recompute_note(k) -> str:
  if not k.recompute: return ""
  parts = [f"{u.arg[0].name.lower()}{list(u.shape)} x{n:g}" for u, n in k.recompute.items()]
  return "\n" + " " * 17 + "fused reductions, evaluations per element: " + ", ".join(parts)


def evaluations(accs: tuple[tuple[UOp, UOp], ...], acc_trips: dict[int, int], local: UOp) -> dict[UOp, float]:
  """For every REDUCE fused inside the kernel (not the one it computes, local): how many times each of its values is
  computed (1 is no recompute). accs: (REDUCE, load of its accumulator) as lowered (rangeify.reduce_accumulators)."""
  total: dict[UOp, int] = {}
  for u, val in accs:
    if u is local: continue
    a = base_alloc(val.src[0].src[0])
    if a is not None: total[u] = total.get(u, 0) + acc_trips.get(a.arg.slot, 0)
  return {u: n / prod(u.shape) for u, n in total.items()}

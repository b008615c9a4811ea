"""The recorder: every realize, and every pass of each plan made, written down as a trace (JSON) to draw later.

A trace is plain data: a table of nodes (op, dtype, arg, sources by number, the label to draw) shared by all its
graphs, the realizes (which plan each ran, and whether it made it), and per plan its tensor-level passes and its
kernels, each with its own passes, loops and C. Each pass names the roots of the graph before and after it and the
rewrites between them by node number, so a reader can step through them without uopc (uopc.viz.steps).
"""
from __future__ import annotations
import contextlib, json, threading, weakref
from pathlib import Path
from uopc.uop import INFIX, UOp, Ops, render_expr
from uopc.viz.dag import describe, toposort
from uopc.viz.loops import loops_svg
from uopc.viz.passes import Pass, kernel_passes, tensor_passes
from uopc import trace as viz_trace
from uopc.viz.plan import plan_svg

VERSION = 1


def rewrite_text(a: UOp, b: UOp, wide: int = 90) -> str:
  """A rewrite in one line: infix where the nodes are index arithmetic, the op names elsewhere."""
  def text(u: UOp) -> str:
    s = render_expr(u, {}) if all(x.op in INFIX or x.op in (Ops.CONST, Ops.RANGE, Ops.MAX, Ops.WHERE) for x in
                                   u.toposort()) else f"{u.op.name}({', '.join(x.op.name for x in u.src)})"
    return s if len(s) <= wide else s[:wide - 1] + "…"
  return f"{text(a)}  ->  {text(b)}"


class Recorder:
  """Listens to the compiler (uopc.viz.trace) and keeps what it heard as a trace."""

  def __init__(self, path: str | Path | None = None):
    self.path = Path(path) if path is not None else None
    self.nodes: list[list] = []
    self.realizes: list[dict] = []
    self.plans: list[dict] = []
    self._ids: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # node -> number (never keeps a node alive)
    self._keys: dict[tuple, int] = {}                                     # (op, dtype, arg, sources) -> number
    self._made: dict[int, tuple[weakref.ref, int]] = {}                   # id(plan) -> (the plan, its number)
    self._raw: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # program -> (rangeify's, its rewrites)
    self._lock = threading.RLock()
    self._local = threading.local()   # per thread: the rewrites of the lowering under way

  # ---- the hooks (uopc.viz.trace) ----
  def lowering(self) -> None: self._local.log = []

  def rewrote(self, before: UOp, after: UOp, rules) -> None:
    if (log := getattr(self._local, "log", None)) is not None: log.append((before, after))

  def lowered(self, raw: UOp, prog: UOp) -> None:
    log, self._local.log = getattr(self._local, "log", None) or [], None
    with self._lock: self._raw[prog] = (raw, list(dict.fromkeys(log)))   # a rewrite made again is listed once

  def realized(self, roots: list[UOp], norm: list[UOp], plan, options) -> None:
    with self._lock:
      ref, n = self._made.get(id(plan), (None, None))
      new = ref is None or ref() is not plan
      if new:
        n = len(self.plans)
        self.plans.append(self.plan_record(roots, norm, plan, options))
        self._made[id(plan)] = (weakref.ref(plan), n)
      self.realizes.append({"plan": n, "new": new})

  # ---- what is kept ----
  def number(self, u: UOp) -> int:
    """The node's number in the table (added with its sources if new)."""
    if (k := self._ids.get(u)) is not None: return k
    for x in toposort([u]):
      if x in self._ids: continue
      arg = f"tensor data {id(x.arg)}" if x.op is Ops.BUFFER and hasattr(x.arg, "array") else repr(x.arg)
      src = [self._ids[s] for s in x.src]
      key = (x.op.name, repr(x.dtype), arg, tuple(src))   # a node rebuilt since it was freed is the same row
      if (k := self._keys.get(key)) is None:
        box = describe(x)
        self.nodes.append([x.op.name, repr(x.dtype), arg, src, box.lines, box.kind, box.title])
        k = self._keys[key] = len(self.nodes) - 1
      self._ids[x] = k
    return self._ids[u]

  def pass_record(self, p: Pass) -> dict:
    rec = {"name": p.name, "doc": p.doc, "before": [self.number(u) for u in p.before or []],
           "after": [self.number(u) for u in p.after],
           "rewrites": [[self.number(a), self.number(b)] for a, b in p.rewrites]}
    if p.rewrites: rec["texts"] = [rewrite_text(a, b) for a, b in p.rewrites]
    if p.local: rec["local"] = True
    if p.marks: rec["marks"] = {str(self.number(u)): m for u, m in p.marks.items()}
    if p.notes: rec["notes"] = {str(self.number(u)): t for u, t in p.notes.items()}
    return rec

  def plan_record(self, roots: list[UOp] | None, norm: list[UOp], plan, options) -> dict:
    passes, points = tensor_passes(roots, norm, options)
    cut = passes[-1]
    cut.notes = {p: f"-> {k.name}" for p, k in zip(points, plan.kernels)}
    kernels = []
    for k in plan.kernels:
      kp = kernel_passes(k, *self._raw.get(k.ast, (None, [])))
      recs = [self.pass_record(p) for p in kp[:-1]]
      recs.append({"name": "linearize", "doc": kp[-1].doc, "loops": loops_svg(k.ast, caption=k.name)})
      kernels.append({"name": k.name, "src": str(k.src), "args": [list(a) for a in k.args], "passes": recs})
    return {"kernels": kernels, "passes": [self.pass_record(p) for p in passes], "explain": plan.explain(),
            "plan": plan_svg(plan), "options": {"fuse_reduce": options.fuse_reduce, "device": options.device,
                                                 "online_softmax": options.online_softmax,
                                                 "opt": getattr(options.opt, "__name__", repr(options.opt))}}

  def trace(self) -> dict:
    with self._lock:
      return {"uopc_trace": VERSION, "nodes": self.nodes, "realizes": self.realizes, "plans": self.plans}

  def save(self, path: str | Path | None = None) -> Path:
    path = Path(path or self.path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(self.trace(), separators=(",", ":")))
    tmp.replace(path)
    return path


@contextlib.contextmanager
def recording(path: str | Path | None = None):
  """Record every realize inside the block: yields the Recorder; saved to path at the end if one is given."""
  rec = Recorder(path)
  viz_trace.RECORDERS.append(rec)
  try: yield rec
  finally:
    viz_trace.RECORDERS.remove(rec)
    if path is not None: rec.save()

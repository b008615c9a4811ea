"""UOp graphs as plain data: how a probe hands the judge a loop program, so that the judge renders it, runs it and
reads its structure with its own uopc (never the notebook's render_c, substitute or Program).

`encode` runs in the student's process (records.encode calls it): it needs no import of uopc and reads only a
node's four fields. What it returns is the student's answer, no more: `decode` (the judge's side) trusts nothing in
it, and builds the graph again with the grader's uopc from a closed set of op names, dtypes and argument types, each
source a node listed before it, the whole at most MAX_NODES nodes."""
from __future__ import annotations
from typing import Any

MAX_NODES = 200_000
TAG = "__uops__"


class Unencodable(ValueError):
  """A node whose argument is of a type a loop program never holds."""


# ---- the student's side: no uopc import, plain JSON out -----------------------------------------------------------
def is_uop(value: Any) -> bool:
  return type(value).__name__ == "UOp" and type(value).__module__ == "uopc.uop"


def _arg(a: Any) -> Any:
  if a is None or type(a) in (bool, int, str): return a
  if type(a) is float: return {"f": repr(a)}
  if type(a) in (tuple, list): return {"t": [_arg(x) for x in a]}
  kind = type(a).__name__
  if kind in ("AxisType", "Ops"): return {"e": [kind, a.name]}
  if kind == "DType": return {"d": _dtype(a)}
  if kind in ("ParamArg", "LocalArg"): return {"p": [kind, a.slot, _dtype(a.dtype), [int(n) for n in a.shape]]}
  raise Unencodable(f"an argument of type {kind}")


def _dtype(d: Any) -> list: return [str(d.name), int(d.itemsize), str(d.kind), int(d.count)]


def encode(root: Any) -> dict:
  """{TAG: [[op name, [source indices], arg, dtype], ...]}: the graph in topological order, root last."""
  index: dict[int, int] = {}
  nodes: list = []
  stack = [(root, False)]
  while stack:   # iterative: a deep graph does not hit Python's recursion limit
    u, ready = stack.pop()
    if id(u) in index: continue
    if not ready:
      stack.append((u, True))
      stack.extend((s, False) for s in reversed(u.src) if id(s) not in index)
      continue
    index[id(u)] = len(nodes)
    nodes.append([u.op.name, [index[id(s)] for s in u.src], _arg(u.arg), _dtype(u.dtype)])
    if len(nodes) > MAX_NODES: raise Unencodable(f"a graph of more than {MAX_NODES} nodes")
  return {TAG: nodes}


# ---- the judge's side: the grader's uopc, nothing taken on trust --------------------------------------------------
class Malformed(ValueError):
  """What arrived is not a graph the judge can build; the message says where."""


def _dtypes() -> dict[str, Any]:
  from uopc.dtype import DType, dtypes
  return {d.name: d for d in vars(dtypes).values() if isinstance(d, DType) and d.count == 1}


def _decode_dtype(t: Any, scalars: dict) -> Any:
  if not (type(t) is list and len(t) == 4 and type(t[0]) is str and all(type(x) is int for x in (t[1], t[3]))):
    raise Malformed(f"a dtype {t!r:.60}")
  d = scalars.get(t[0])
  if d is None or (d.itemsize, d.kind) != (t[1], t[2]) or not 1 <= t[3] <= 64: raise Malformed(f"a dtype {t!r:.60}")
  return d if t[3] == 1 else d.vec(t[3])


def _decode_arg(a: Any, scalars: dict, depth: int = 0) -> Any:
  from uopc.uop import AxisType, LocalArg, Ops, ParamArg
  if depth > 8: raise Malformed("an argument nested too deep")
  if a is None or type(a) in (bool, int, str): return a
  if type(a) is not dict or len(a) != 1: raise Malformed(f"an argument {a!r:.60}")
  (tag, v), = a.items()
  if tag == "f" and type(v) is str:
    try: return float(v)
    except ValueError: raise Malformed(f"a float {v!r:.30}") from None
  if tag == "t" and type(v) is list: return tuple(_decode_arg(x, scalars, depth + 1) for x in v)
  if tag == "d": return _decode_dtype(v, scalars)
  if tag == "e" and type(v) is list and len(v) == 2 and v[0] in ("AxisType", "Ops"):
    enum = {"AxisType": AxisType, "Ops": Ops}[v[0]]
    if v[1] in enum.__members__: return enum[v[1]]
  if tag == "p" and type(v) is list and len(v) == 4 and v[0] in ("ParamArg", "LocalArg") and type(v[1]) is int \
     and type(v[3]) is list and all(type(n) is int and 0 <= n < 1 << 40 for n in v[3]):
    return {"ParamArg": ParamArg, "LocalArg": LocalArg}[v[0]](v[1], _decode_dtype(v[2], scalars), tuple(v[3]))
  raise Malformed(f"an argument {a!r:.60}")


def decode(data: Any, what: str = "the graph") -> Any:
  """The UOp the student's process described, built by the grader's uopc; an AssertionError saying what is wrong
  (a test's failure, as a wrong answer is) when it is not a well-formed graph."""
  from uopc.uop import Ops, UOp
  nodes = data.get(TAG) if type(data) is dict else None
  if type(nodes) is not list or not nodes or len(nodes) > MAX_NODES:
    raise AssertionError(f"{what}: expected a UOp graph, found {data!r:.80}")
  scalars, built = _dtypes(), []
  try:
    for k, n in enumerate(nodes):
      if not (type(n) is list and len(n) == 4 and type(n[0]) is str and n[0] in Ops.__members__
              and type(n[1]) is list and all(type(s) is int and 0 <= s < k for s in n[1])):
        raise Malformed(f"node {k} ({n!r:.60})")
      arg = _decode_arg(n[2], scalars)
      built.append(UOp(Ops[n[0]], tuple(built[s] for s in n[1]), arg, _decode_dtype(n[3], scalars)))
  except (Malformed, TypeError, ValueError) as e:
    raise AssertionError(f"{what}: not a graph uopc can build ({e})") from None
  return built[-1]

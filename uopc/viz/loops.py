"""A kernel's loop program drawn as its loops: one box per loop (nested as linearize nests them), one row per store.

Where the C shows every value, this shows the shape of the work: which loops sit inside which, and what each one
accumulates. A reduction recomputed inside another loop is a box inside that loop (chapter 11's fused attention has
a dot-product loop inside each of its key loops; the online kernel has one key loop).
"""
from __future__ import annotations
from xml.sax.saxutils import escape
from uopc.linearize import linearize
from uopc.uop import UOp, Ops, AxisType, base_alloc
from uopc.viz.svg import CHAR_W, f

ROW, INDENT, WIDE = 17.0, 16.0, 64
INFIX = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "/", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.AND: "&",
         Ops.OR: "|", Ops.XOR: "^"}
CALL = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SQRT: "sqrt", Ops.SIN: "sin", Ops.MAX: "max", Ops.WMMA: "wmma"}
# axis type -> the fill of its loop's box
LOOP_FILL = {AxisType.THREAD: "#efe6ff", AxisType.GLOBAL: "#efe6ff", AxisType.LOCAL: "#f3ecff",
             AxisType.REDUCE: "#ffeeea", AxisType.LOOP: "#f4f4f4"}
STMT_FILL = {"init": "#888888", "update": "#b3261e", "store": "#a35a00", "other": "#333333"}


def name(u: UOp) -> str:
  """A buffer, accumulator or loop variable by the name the C renderer gives it."""
  if u.op is Ops.AFTER: return name(u.src[0])
  if u.op is Ops.BUFFER: return f"data{u.arg.slot}"
  if u.op is Ops.ALLOC: return f"{'lmem' if type(u.arg).__name__ == 'LocalArg' else 'acc'}{u.arg.slot}"
  if u.op is Ops.RANGE: return f"ridx{u.arg[0]}"
  return u.op.name.lower()


def expr(u: UOp, memo: dict, cap: int = 240) -> str:
  """u as infix text, each shared subexpression written out again but cut at `cap` characters."""
  if u in memo: return memo[u]
  op, s = u.op, [expr(x, memo, cap) for x in u.src] if u.op not in (Ops.AFTER, Ops.INDEX, Ops.STORE) else []
  if op is Ops.CONST: t = f"{u.arg:g}" if isinstance(u.arg, float) else repr(u.arg)   # -inf, 0.125, 3
  elif op in (Ops.RANGE, Ops.BUFFER, Ops.ALLOC, Ops.AFTER): t = name(u)
  elif op is Ops.INDEX:
    base, i = u.src[0], u.src[1]
    a = base_alloc(base)
    scalar = a is not None and a.arg.size == 1 and i.op is Ops.CONST and i.arg == 0
    t = name(base) if scalar else f"{name(base)}[{expr(i, memo, cap)}]"
  elif op is Ops.LOAD: t = s[0]
  elif op is Ops.STORE: t = f"{expr(u.src[0], memo, cap)} = {expr(u.src[1], memo, cap)}"
  elif op in INFIX: t = f"({s[0]}{INFIX[op]}{s[1]})"
  elif op in CALL: t = f"{CALL[op]}({', '.join(s)})"
  elif op is Ops.RECIP: t = f"1/{s[0]}"
  elif op is Ops.WHERE: t = f"({s[0]}?{s[1]}:{s[2]})"
  elif op is Ops.CAST: t = f"({repr(u.dtype).removeprefix('dtypes.')}){s[0]}"
  elif op is Ops.VECTORIZE: t = "{" + ",".join(s) + "}"
  elif op is Ops.GEP: t = f"{s[0]}.{u.arg}"
  elif op is Ops.SPECIAL: t = str(u.arg[0]) if isinstance(u.arg, tuple) else str(u.arg)
  else: t = f"{op.name.lower()}({', '.join(s)})"
  memo[u] = t if len(t) <= cap else t[:cap - 1] + "…"
  return memo[u]


def _kind(st: UOp) -> str:
  """What a store does: an accumulator's first value, its update, or a result written to a buffer."""
  target, value = base_alloc(st.src[0].src[0]), st.src[1]
  if target is None: return "store"
  return "init" if value.op is Ops.CONST else "update"


def rows(sink: UOp) -> list[tuple[str, int, object]]:
  """The program as ("open", depth, RANGE), ("stmt", depth, STORE or BARRIER), ("close", depth, RANGE) rows."""
  out, depth = [], 0
  for line in linearize(sink):
    if line.kind == "open": out.append(("open", depth, line.uop)); depth += 1
    elif line.kind == "close": depth -= 1; out.append(("close", depth, line.uop))
    elif line.uop.op in (Ops.STORE, Ops.BARRIER): out.append(("stmt", depth, line.uop))
  return out


def loops_svg(sink: UOp, caption: str = "") -> str:
  """The loop program as nested boxes (SVG text): a header per loop (variable, trip count, kind), a row per store."""
  memo: dict = {}
  items = rows(sink)
  texts = []
  for kind, depth, u in items:
    if kind == "open":
      trips = expr(u.src[0], memo)
      texts.append(f"for {name(u)} < {trips}  ({u.arg[1].name.lower()})")
    elif kind == "stmt": texts.append(expr(u, memo) if u.op is Ops.STORE else "barrier")
    else: texts.append("")
  # a row at depth d starts d indents in, inside boxes that are as far in from the right
  width = max([len(t[:WIDE]) * CHAR_W + 2 * (6 + d * INDENT) + 12 for t, (_, d, _) in zip(texts, items)]
              + [len(caption) * CHAR_W + 12, 120.0])
  top = ROW + 6 if caption else 4.0
  body, y, starts = [], top, {}
  for (kind, depth, u), text in zip(items, texts):
    x = 6 + depth * INDENT
    if kind == "open":
      starts[u] = (len(body), y)
      body.append(None)   # the box, once its height is known
      body.append(f'<text x="{f(x + 6)}" y="{f(y + ROW - 5)}" font-weight="bold">{escape(text)}</text>')
      y += ROW
    elif kind == "close":
      at, y0 = starts[u]
      y += 4
      fill = LOOP_FILL.get(u.arg[1], "#f4f4f4")
      body[at] = (f'<g class="loop" data-range="{name(u)}"><rect x="{f(x)}" y="{f(y0)}" width="{f(width - 2 * x)}" '
                  f'height="{f(y - y0)}" rx="5" fill="{fill}" stroke="#666"/></g>')
      y += 4
    else:
      k = _kind(u) if u.op is Ops.STORE else "other"
      short = text if len(text) <= WIDE else text[:WIDE - 1] + "…"
      body.append(f'<g class="node stmt kind-{k}"><title>{escape(text)}</title><text x="{f(x + 6)}" '
                  f'y="{f(y + ROW - 5)}" fill="{STMT_FILL[k]}">{escape(short)}</text></g>')
      y += ROW
  height = y + 6
  head = f'<text x="6" y="{f(ROW - 3)}" font-weight="bold">{escape(caption)}</text>' if caption else ""
  return (f'<svg xmlns="http://www.w3.org/2000/svg" class="uopc-loops" width="{f(width)}" height="{f(height)}" '
          f'viewBox="0 0 {f(width)} {f(height)}" font-family="monospace" font-size="11">{head}'
          + "".join(b for b in body if b) + "</svg>")

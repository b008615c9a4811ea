# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 3. The UOp
#
# A compiler spends its life asking questions about programs. *Is this the same computation as that
# one?* (Then compute it once.) *Can this expression be written more simply?* (Then write less code.)
# *Which loops does this value depend on?* (Then place it in those loops and no others.) Each question is
# easy to ask of a good representation and miserable to ask of a bad one. This chapter builds the
# representation the rest of uopc is made of: the **UOp**, one node type for every level of the compiler,
# from `Tensor` programs down to the loops that become C.
#
# A UOp is `(op, src, arg, dtype)`: an operation, the UOps it reads, an extra argument (a constant's
# value, a loop's id) and a data type. Three properties make the questions above cheap:
# - **Immutable.** A node never changes after it is built, so any answer computed about it stays true.
# - **Hash-consed.** Building the same node twice gives back the *same object*. Identical subgraphs are
#   shared for free, "same computation?" is `a is b`, and a dict keyed by UOp is a memo.
# - **Printable as Python.** `repr(u)` is the code that rebuilds `u`: a program can be read, pasted and
#   re-run.
#
# On top of the node we build **rewrite rules** (tables of pattern -> replacement) and the simplifier,
# `uopc.symbolic.simplify`, which knows the range of every loop variable. Its job is not cosmetic: in
# chapter 11 an index that *mentioned* a loop variable it did not *depend on* made fused attention cubic
# in the sequence length (section 11.5, NOTES 12). That story starts here, in 3.5.
#
# As in every chapter, you first build a small version in the notebook, test it on random values, and then
# switch to the finished `uopc` module.

# %% [markdown]
# ## 3.1 A mini UOp
#
# Thirty lines: a node class whose constructor looks the node up in a cache before making a new one. The
# key is `(op, src, arg)`. The sources are nodes that are themselves hash-consed, so comparing them by
# identity (the default `hash` and `==` of a Python object) is already structural comparison: the whole
# subgraph never has to be walked.

# %%
import operator


class Node:
  """An immutable, hash-consed expression node: building the same node twice gives the same object."""
  cache: dict = {}
  __slots__ = ("op", "src", "arg")

  def __new__(cls, op: str, src: tuple = (), arg=None):
    key = (op, src, arg)
    if key not in Node.cache:
      n = super().__new__(cls)
      for k, v in (("op", op), ("src", src), ("arg", arg)): object.__setattr__(n, k, v)
      Node.cache[key] = n
    return Node.cache[key]

  def __setattr__(self, k, v): raise AttributeError(f"Node is immutable (tried to set {k})")
  @staticmethod
  def c(v) -> "Node": return Node("const", (), v)
  @staticmethod
  def var(name: str) -> "Node": return Node("var", (), name)
  def _bin(self, op: str, x) -> "Node": return Node(op, (self, x if isinstance(x, Node) else Node.c(x)))
  def __add__(self, x): return self._bin("add", x)
  def __mul__(self, x): return self._bin("mul", x)
  def __floordiv__(self, x): return self._bin("idiv", x)
  def __mod__(self, x): return self._bin("mod", x)

  def toposort(self) -> list["Node"]:
    """Every node reachable from self, each once, sources before users."""
    order, seen = [], set()
    def visit(n):
      if n in seen: return
      seen.add(n)
      for s in n.src: visit(s)
      order.append(n)
    visit(self)
    return order

  def __repr__(self):
    if self.op in ("const", "var"): return f"Node.{'c' if self.op == 'const' else 'var'}({self.arg!r})"
    return f"Node({self.op!r}, ({', '.join(map(repr, self.src))},))"

  def show(self) -> str:
    """Infix, for reading: ((x+1)*y)."""
    if self.op in ("const", "var"): return str(self.arg)
    return f"({self.src[0].show()}{INFIX[self.op]}{self.src[1].show()})"


INFIX = {"add": "+", "mul": "*", "idiv": "//", "mod": "%"}


OPS = {"add": operator.add, "mul": operator.mul, "idiv": operator.floordiv, "mod": operator.mod}


def ev(n: Node, env: dict) -> int:
  """The value of n, with env giving the value of every variable."""
  if n.op == "const": return n.arg
  if n.op == "var": return env[n.arg]
  return OPS[n.op](*(ev(s, env) for s in n.src))

# %% [markdown]
# Building the same expression twice gives the same object, and a node cannot be changed:

# %%
x, y = Node.var("x"), Node.var("y")
e1 = (x + 1) * y
e2 = (x + 1) * y
print("e1 is e2:", e1 is e2, "| nodes in the cache:", len(Node.cache))
print("repr:", e1, "| show:", e1.show())
print("eval(repr(e1)) is e1:", eval(repr(e1)) is e1)
try:
  e1.op = "add"
except AttributeError as err:
  print("AttributeError:", err)

# %% [markdown]
# Sharing is where hash-consing pays. Apply `t = t * t + t` twelve times: written out as a tree, the
# expression triples in size at every step (the new tree holds three copies of the old one, plus a MUL and an
# ADD: 3s + 2 nodes); as a graph of distinct nodes it grows by two nodes a step, because all three uses of `t`
# are one object. `toposort` visits each distinct node once:

# %%
def tree_size(n: Node) -> int: return 1 + sum(tree_size(s) for s in n.src)


t, sizes = x, []
for step in range(1, 13):
  t = t * t + t
  sizes.append((step, tree_size(t), len(t.toposort())))
for step, tree, dag in sizes[::3]: print(f"step {step:2}: as a tree {tree:6} nodes, as a graph {dag:3} nodes")
(s0, tree0, dag0), (s1, tree1, dag1) = sizes[-2:]
print(f"from step {s0} to step {s1}: the tree x{tree1 / tree0:.3f}, the graph +{dag1 - dag0} nodes")

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(6, 3.5))
ax.semilogy([s for s, _, _ in sizes], [tr for _, tr, _ in sizes], "o-", label="as a tree (written out)")
ax.semilogy([s for s, _, _ in sizes], [g for _, _, g in sizes], "o-", label="as a graph (hash-consed)")
ax.set(xlabel="steps of t = t * t + t", ylabel="nodes", title="the same expression, two representations")
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# Drawn, the difference is plain. Here is the same expression after two steps, built from uopc's real UOp (section
# 3.3; the variable is a loop variable, `RANGE`, with its bound as a constant) and drawn by `uopc.viz`: each box a
# node (its op, then its dtype), each arrow a source going into its user, sources above their users. On the left
# every use is written out as its own copy, the tree a program without hash-consing would hold; on the right the
# graph uopc holds, where `t` is one box with two arrows leaving it, one per use:

# %%
import uopc.viz as viz
from uopc.uop import range_ as loop_variable
from uopc.viz.dag import uop_graph, uop_svg

t2 = loop_variable(100, 0)
for step in range(2): t2 = t2 * t2 + t2
tree_nodes, graph_nodes = len(uop_graph(t2, tree=True).nodes), len(t2.toposort())
viz.side_by_side(uop_svg(t2, tree=True, legend=False), uop_svg(t2, share_consts=True, legend=False),
                 captions=[f"as a tree: {tree_nodes} nodes", f"as a graph: {graph_nodes} nodes"])

# %% [markdown]
# Anything that walks the tree (our `tree_size`, a naive printer, a recursive evaluator without a memo)
# pays the exponential; anything that walks `toposort()` pays the linear. Keep that in mind when you print
# big UOps in 3.3.
#
# ## 3.2 Five rewrite rules
#
# A rewrite rule looks at one node and either returns a simpler node that computes the same value, or
# `None`. A rule table is a list of rules, read top to bottom; `rewrite` applies it bottom-up (sources
# first, so every rule sees already-simplified sources) and to a fixed point (a rule's result is rewritten
# again). Because nodes are hash-consed, a memo keyed by node makes each distinct node cost one visit.

# %%
def is_c(n: Node, v=None) -> bool: return n.op == "const" and (v is None or n.arg == v)


RULES = [
  ("x + 0 -> x", lambda n: n.src[0] if n.op == "add" and is_c(n.src[1], 0) else None),
  ("x * 1 -> x", lambda n: n.src[0] if n.op == "mul" and is_c(n.src[1], 1) else None),
  ("x * 0 -> 0", lambda n: Node.c(0) if n.op == "mul" and is_c(n.src[1], 0) else None),
  ("fold constants", lambda n: Node.c(OPS[n.op](*(s.arg for s in n.src)))
   if n.src and all(is_c(s) for s in n.src) and not (n.op in ("idiv", "mod") and n.src[1].arg == 0) else None),
  ("(x * c1) * c2 -> x * (c1 * c2)", lambda n: n.src[0].src[0] * (n.src[0].src[1].arg * n.src[1].arg)
   if n.op == "mul" and is_c(n.src[1]) and n.src[0].op == "mul" and is_c(n.src[0].src[1]) else None),
]


def rewrite(n: Node, rules=RULES, memo=None) -> Node:
  memo = {} if memo is None else memo
  if n in memo: return memo[n]
  new = Node(n.op, tuple(rewrite(s, rules, memo) for s in n.src), n.arg) if n.src else n
  for _, rule in rules:
    if (r := rule(new)) is not None:
      new = rewrite(r, rules, memo)       # the result may hold new nodes: rewrite them too
      break
  memo[n] = new
  return new


for e in [(x + 0) * 1, (x * 0 + y) * 1, ((x * 2) * 3) * 4, (Node.c(2) * 3 + 4) * x, ((x + 0) * 5) * (Node.c(1) + 1)]:
  print(f"{e.show():24} -> {rewrite(e).show()}")

# %% [markdown]
# `((x*0)+y)*1` stops at `0+y`: the rules only look for a constant on the right (exercise 1). Every rule
# must keep the value of the expression, for every value of its variables. We check that the
# way every rule in uopc is checked: build random instances of each rule's left side from random
# subexpressions, and evaluate both sides on random variable values. Our variables are non-negative
# integers here (they will be loop indices), which matters for `//` and `%`, see the pitfalls.

# %%
import random

rnd = random.Random(0)
VARS = [Node.var(v) for v in "xyz"]


def rand_expr(depth: int) -> Node:
  if depth == 0 or rnd.random() < 0.3: return rnd.choice(VARS) if rnd.random() < 0.6 else Node.c(rnd.randrange(4))
  op = rnd.choice(["add", "mul", "idiv", "mod"])
  if op in ("idiv", "mod"): return Node(op, (rand_expr(depth - 1), Node.c(rnd.randrange(1, 9))))
  return Node(op, (rand_expr(depth - 1), rand_expr(depth - 1)))


LEFT_SIDES = {   # for each rule: a random instance of the pattern it matches
  "x + 0 -> x": lambda: rand_expr(3) + 0,
  "x * 1 -> x": lambda: rand_expr(3) * 1,
  "x * 0 -> 0": lambda: rand_expr(3) * 0,
  "fold constants": lambda: Node(rnd.choice(list(OPS)), (Node.c(rnd.randrange(50)), Node.c(rnd.randrange(1, 9)))),
  "(x * c1) * c2 -> x * (c1 * c2)": lambda: (rand_expr(3) * rnd.randrange(-5, 9)) * rnd.randrange(-5, 9),
}
for name, rule in RULES:
  fired = agree = 0
  for _ in range(300):
    e = LEFT_SIDES[name]()
    if (r := rule(e)) is None: continue
    fired += 1
    envs = [{v: rnd.randrange(100) for v in "xyz"} for _ in range(20)]
    agree += all(ev(e, env) == ev(r, env) for env in envs)
  print(f"{name:32} fired {fired:3} times, same value on 20 random points every time: {agree == fired}")

# the whole table, on whole random expressions
exprs = [rand_expr(6) for _ in range(500)]
same = all(ev(e, env) == ev(rewrite(e), env) for e in exprs for env in [{v: rnd.randrange(100) for v in "xyz"}])
smaller = sum(len(rewrite(e).toposort()) < len(e.toposort()) for e in exprs)
print(f"500 random expressions: values kept {same}; {smaller} of them got smaller")

# %% [markdown]
# ## 3.3 The real UOp
#
# `uopc.uop.UOp` is the same idea with what a compiler needs on top:
# - a `dtype` on every node (`dtypes.f32`, `dtypes.i32`, ...), inferred from the sources when not given;
# - an `Ops` enum grouped by level, with named sets (`ALU`, `MOVEMENT`, ...) that passes test against;
# - a weak cache (`weakref.WeakValueDictionary`), so nodes nobody uses any more are freed;
# - constants keyed so that `0.0` and `-0.0` (equal in Python, different in C: `1/x` tells them apart)
#   are two nodes, and `nan` (not equal to itself) is one;
# - operators that build the graph, and loop builders (`range_`, `.index`, `.load`, `.store`, `.end`,
#   `.after`) that chapter 4 introduces.

# %%
import math
from uopc.dtype import dtypes
from uopc.uop import AxisType, Ops, ParamArg, Pat, UOp, graph_rewrite, range_

a = UOp.const(3) + 4
print("same node twice:", (UOp.const(3) + 4) is a)
print("0.0 and -0.0:", UOp.const(0.0) is UOp.const(-0.0), "| nan and nan:", UOp.const(math.nan) is UOp.const(math.nan))
print("1 as i32 and as i64:", UOp.const(1, dtypes.i32) is UOp.const(1, dtypes.i64))
print("dtypes:", a.dtype, (UOp.const(2.0) * 3).dtype, (UOp.const(1) < 2).dtype)
try:
  a.arg = 5
except AttributeError as err:
  print("AttributeError:", err)

# %% [markdown]
# A UOp prints as the Python that rebuilds it, and because of hash-consing, rebuilding gives back the very
# same object. Subtraction and division are not ops of their own: `a - b` is `a + b * -1` and `a / b` is
# `a * recip(b)`, so that the rules for `ADD` and `MUL` cover them too (one fewer op for every rule to know):

# %%
f, g = UOp.const(1.5), UOp.const(2.5)
print(f - g)
print(f / g)
names = {"UOp": UOp, "Ops": Ops, "dtypes": dtypes, "range_": range_, "AxisType": AxisType, "ParamArg": ParamArg}
print("eval(repr(f / g)) is f / g:", eval(repr(f / g), names) is f / g)

# %% [markdown]
# Rewrite rules in uopc are written with patterns: `Pat(op, srcs)` matches a node and binds names, and
# `graph_rewrite(root, rules)` applies a table bottom-up to a fixed point, exactly like `rewrite` above.
# Here are our five rules as a uopc table, one rule a line with its algebra as a comment (constant folding is
# two lines, one for ADD and one for MUL: six lines in all):

# %%
xp, c1, c2 = Pat.var("x"), Pat.cvar("c1"), Pat.cvar("c2")
five_rules = [
  (Pat(Ops.ADD, (xp, Pat.cvar("z", 0))), lambda x, z: x),                                   # x + 0 -> x
  (Pat(Ops.MUL, (xp, Pat.cvar("o", 1))), lambda x, o: x),                                   # x * 1 -> x
  (Pat(Ops.MUL, (xp, Pat.cvar("z", 0))), lambda x, z: z),                                   # x * 0 -> 0
  (Pat(Ops.ADD, (c1, c2)), lambda c1, c2: UOp.const(c1.arg + c2.arg, c1.dtype)),            # fold constants
  (Pat(Ops.MUL, (c1, c2)), lambda c1, c2: UOp.const(c1.arg * c2.arg, c1.dtype)),            # fold constants
  (Pat(Ops.MUL, (Pat(Ops.MUL, (xp, c1)), c2)), lambda x, c1, c2: x * (c1.arg * c2.arg)),    # (x*c1)*c2 -> x*(c1*c2)
]
i, j = range_(100, 0), range_(100, 1)
for e in [(i + 0) * 1, (i * 0 + j) * 1, ((i * 2) * 3) * 4, (UOp.const(2) * 3 + 4) * i]:
  print(f"{e.render():28} -> {graph_rewrite(e, five_rules).render()}")

# %% [markdown]
# `.render()` prints an index expression in infix form, with loop variables as `ridx{id}`, the names the
# C renderer gives them. The same expressions through `uopc.symbolic.simplify`, the real simplifier:

# %%
from uopc.symbolic import bounds, evaluate, ranges_in, simplify, symbolic_rules

for e in [(i + 0) * 1, (i * 0 + j) * 1, ((i * 2) * 3) * 4, (UOp.const(2) * 3 + 4) * i, (i + j) * 4 + i]:
  print(f"{e.render():28} -> {simplify(e).render()}")
print(len(symbolic_rules), "rules in uopc.symbolic.symbolic_rules")

# %% [markdown]
# `simplify` gets the same answers with fewer, more general rules. Its table (read it in
# `uopc/symbolic.py`) has eight lines:
# - **fold constants**: any ALU op whose sources are all constants (but not `1 // 0`: that is left for run
#   time, as C would);
# - **canonical sums**: an integer sum of products by constants becomes `sum(coeff * term) + const`, terms in
#   order of first appearance. `x + 0`, `x * 1`, `x * 0`, `(x * c1) * c2`, and `(a + b) * 4 + a -> a*5 + b*4`
#   are all instances of this one rule;
# - **`//` and `%` by a constant**, using bounds (next section);
# - **`<` and `max` decided by bounds** (`ridx < 9999` is `True` when the loop ends before 9999);
# - **`where`** with a constant condition or two equal branches.
#
# The canonical sum is only applied to integers. For floats `x * 0 -> 0` is wrong (`inf * 0` and `nan * 0`
# are `nan`), `x + 0.0 -> x` is wrong for `x = -0.0`, and reassociating a float sum changes its rounding.
# Index arithmetic is integer arithmetic, which is what the simplifier is for.
#
# ## 3.4 Index algebra: what a loop variable can be
#
# A loop variable `range_(N, id)` runs `0 <= r < N`. `bounds(u)` propagates those facts through an
# expression (interval arithmetic), and the `//` and `%` rules use them: `(a*n + b) // n` is `a` when
# `0 <= b < n`, and `(a*n + b) % n` is `b`.

# %%
N = 512
i, j = range_(N, 0), range_(N, 1)
for e in [i, i * N + j, (i * N + j) // N, j % N, j // N]:
  print(f"{e.render({i: 'i', j: 'j'}):16} bounds {bounds(e)}")

# %% [markdown]
# ## 3.5 The two indices of section 11.5
#
# Chapter 6's rangeify turns a tensor program into loops by following an index through every movement
# op. A RESHAPE ravels the index into a flat offset and unravels it into the source's shape. For an
# (N, N) index `(i, j)` viewed through a reshape, that produces exactly these two expressions, the row and
# the column:

# %%
flat = (UOp.const(0) * N + i) * N + j           # ravel((i, j)) for shape (N, N), as rangeify builds it
row, col = (flat // N) % N, (flat // 1) % N     # unravel(flat) into shape (N, N)
nm = {i: "i", j: "j"}
for e in (row, col):
  print(f"raw {e.render(nm)} mentions {[nm[r] for r in ranges_in(e)]}   simplified {simplify(e).render(nm)}")

# %% [markdown]
# Mathematically the row *is* `i`: `0 <= j < N`, so `j // N` is 0. Syntactically it *mentions* `j`.
# `ranges_in` answers the syntactic question, which loop variables appear in the expression, and that is
# the question every placement decision asks. Ask it before and after simplification:

# %%
for e in (row, col):
  print(f"ranges_in(raw) = {[nm[r] for r in ranges_in(e)]}   ranges_in(simplified) = "
        f"{[nm[r] for r in ranges_in(simplify(e))]}")
print("row is i:", simplify(row) is i, "| col is j:", simplify(col) is j)
grid = [(vi, vj) for vi in range(0, N, 7) for vj in range(0, N, 5)]
print(f"row == i and col == j at {len(grid)} points:",
      all(evaluate(row, {i: vi, j: vj}) == vi and evaluate(col, {i: vi, j: vj}) == vj for vi, vj in grid))

# %% [markdown]
# This is where NOTES 12's bug starts. In chapter 6, a reduction's accumulator is placed inside exactly
# the loops its output index mentions (`acc.after(*ranges_in(*idx))`). A row max asked for with the raw
# row index mentions `j`, so its accumulator lands inside the `j` loop of its consumer and the whole row
# max is recomputed for every `j`: fused attention became O(N³), many times slower, with *identical output*
# (section 11.5; chapter 6 reproduces the bug and times it). The fix is one call: rangeify simplifies every
# index right after the RESHAPE rule builds it. The lesson is general: any question of the form "what does this
# depend on?" must be asked of the simplified expression, or it is answered about the spelling, not the value.
#
# ## 3.6 Checking simplify on random expressions
#
# The tests of this chapter (`tests/spine/test_ch03_uop.py`) check every rule on a targeted example and check
# the whole simplifier with property tests (the `hypothesis` library generates the expressions). Here is
# the same check in a few lines: random integer expressions over up to three loops with random ends, built
# from `+`, `*`, `//` and `%` by positive constants; `simplify` must give the same value at every point.

# %%
def rand_index(rs: list, depth: int) -> UOp:
  if depth == 0 or rnd.random() < 0.25:
    return rnd.choice(rs) if rnd.random() < 0.7 else UOp.const(rnd.randrange(-4, 40))
  op = rnd.choice(["+", "*", "*c", "//", "%"])
  left = rand_index(rs, depth - 1)
  if op == "+": return left + rand_index(rs, depth - 1)
  if op == "*": return left * rand_index(rs, depth - 1)
  k = rnd.choice([1, 2, 3, 4, 8, 16, 64, 100])
  return {"*c": left * k, "//": left // k, "%": left % k}[op]


checked = points = shrunk = 0
before = after = 0
for trial in range(400):
  rs = [range_(rnd.randrange(1, 200), k) for k in range(rnd.randrange(1, 4))]
  e = rand_index(rs, 5)
  s = simplify(e)
  for _ in range(50):
    env = {r: rnd.randrange(r.src[0].arg) for r in rs}
    assert evaluate(e, env) == evaluate(s, env), (e.render(), s.render(), env)
    points += 1
  checked += 1
  before, after = before + len(e.toposort()), after + len(s.toposort())
  shrunk += len(s.toposort()) < len(e.toposort())
print(f"{checked} expressions, {points} points: all equal. {shrunk} got smaller; nodes {before} -> {after}")

# %% [markdown]
# ## Pitfalls
# - **Equal is not identical for floats.** `0.0 == -0.0` and `nan != nan` in Python. A cache keyed on the
#   raw float merges `0.0` and `-0.0` (a different constant in C) and cannot find `nan` again. Our mini
#   `Node` has the first bug:

# %%
print("mini Node: c(0.0) is c(-0.0):", Node.c(0.0) is Node.c(-0.0), "| uopc:", UOp.const(0.0) is UOp.const(-0.0))
print("mini Node: c(1) is c(True):", Node.c(1) is Node.c(True), "| uopc:", UOp.const(1) is UOp.const(True))

# %% [markdown]
# - **Mutating a shared node.** With hash-consing, one node may be a source of a thousand others. Changing
#   it in place would change all of them, and every cache keyed on it would be wrong. That is why `UOp` and
#   `Node` refuse `setattr`: "changing" a node means building a new one (`u.replace(src=...)`), and its
#   users are rebuilt by a rewrite.
# - **C division is not Python division.** C truncates toward zero, Python floors: `-3 / 4` is `0` in C,
#   `-3 // 4` is `-1` in Python. `uopc.symbolic.evaluate` follows C, and the rules that move terms across
#   `//` and `%` only fire when `bounds` proves the operand non-negative, where the two agree:

# %%
k = range_(8, 0)
e = (k + -4) // 4
print(e.render(), "->", simplify(e).render(), "| bounds of k - 4:", bounds(k + -4))
print("C semantics (evaluate):", [evaluate(e, {k: v}) for v in range(8)])
print("Python floor division: ", [(v - 4) // 4 for v in range(8)])

# %% [markdown]
# - **Asking `ranges_in` of an unsimplified expression** reports the loops its spelling mentions, not the
#   loops its value depends on (3.5). Simplify first.
# - **Printing a big shared graph as a tree.** `repr(u)` writes a node used twice out twice. For the
#   `t = t * t + t` graph of 3.1 that is exponential; for loop programs (chapter 4) it is already long.
#   Walk `toposort()` instead when you want one line per node.
# - **Rules that are only true for integers.** `x * 0 -> 0`, `x + 0 -> x`, and reassociation are wrong or
#   change rounding for floats; uopc's canonical-sum rule matches only integer dtypes.
#
# ## Exercises
# 1. Our mini rules only match constants on the right: `0 + x` and `1 * x` are not simplified. Add a
#    rule that puts constants on the right of `add` and `mul` (is it safe to reorder operands?), and
#    check the table again on random expressions.
# 2. `simplify` leaves `(i // 4) * 4 + i % 4` alone, though it is `i` for `i >= 0`. Write the rule
#    `(x // c) * c + x % c -> x` as a uopc `Pat` rule, add it to a copy of `symbolic_rules`, and check it
#    by evaluation on random expressions. What must be true of `x` for the rule to hold in C?
# 3. `simplify((i % 8) % 4)` is not `i % 4`. Add the rule `(x % a) % b -> x % b` when `b` divides `a`,
#    and test it the same way. Why does "b divides a" matter? Find a counterexample without it.
# 4. Make `Node` use a `weakref.WeakValueDictionary` for its cache, then show that a node nobody refers to
#    any more disappears from the cache. What would go wrong if the cache held the node only weakly but
#    some dict elsewhere (a memo) was keyed by the node's `id()`?
# 5. Write a printer that walks `toposort()` and prints one line per distinct node (`x3 = x1 + x2`), so
#    the 12-step `t * t + t` of 3.1 prints in 25 lines. Check that `exec`-ing its output rebuilds the same
#    node.

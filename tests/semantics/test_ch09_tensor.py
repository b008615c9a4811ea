"""Chapter 9, the Tensor: every op against NumPy, random graphs (both fuse_reduce settings), gradients against
finite differences, and bad input raising errors that name the problem."""
import math
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from uopc.dtype import dtypes
from uopc.tensor import Tensor, gradient
from uopc.uop import UOp, Ops
from numerics import finite_differences   # tests/numerics.py

pytestmark = pytest.mark.ch09




rng = np.random.default_rng(0)
A = rng.standard_normal((3, 4)).astype(np.float32)
B = rng.standard_normal((4,)).astype(np.float32)
C = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)


def close(t: Tensor, ref, tol: float = 1e-5) -> None:
  out = t.numpy()
  ref = np.asarray(ref)
  assert out.shape == ref.shape, f"shape {out.shape}, NumPy says {ref.shape}"
  if ref.dtype == np.bool_: np.testing.assert_array_equal(out, ref)
  else: np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)


# ---- elementwise ----
ELEMENTWISE = {
  "add": (lambda a, b: a + b, lambda a, b: a + b),
  "sub": (lambda a, b: a - b, lambda a, b: a - b),
  "mul": (lambda a, b: a * b, lambda a, b: a * b),
  "div": (lambda a, b: a / b, lambda a, b: a / b),
  "radd": (lambda a, b: 2 + a, lambda a, b: 2 + a),
  "rsub": (lambda a, b: 2 - a, lambda a, b: 2 - a),
  "rdiv": (lambda a, b: 2 / a, lambda a, b: 2 / a),
  "neg": (lambda a, b: -a, lambda a, b: -a),
  "exp": (lambda a, b: a.exp(), lambda a, b: np.exp(a)),
  "exp2": (lambda a, b: a.exp2(), lambda a, b: np.exp2(a)),
  "log": (lambda a, b: a.abs().log(), lambda a, b: np.log(np.abs(a))),
  "log2": (lambda a, b: a.abs().log2(), lambda a, b: np.log2(np.abs(a))),
  "sqrt": (lambda a, b: a.abs().sqrt(), lambda a, b: np.sqrt(np.abs(a))),
  "recip": (lambda a, b: a.recip(), lambda a, b: 1 / a),
  "maximum": (lambda a, b: a.maximum(b), lambda a, b: np.maximum(a, b)),
  "minimum": (lambda a, b: a.minimum(b), lambda a, b: np.minimum(a, b)),
  "relu": (lambda a, b: a.relu(), lambda a, b: np.maximum(a, 0)),
  "sigmoid": (lambda a, b: a.sigmoid(), lambda a, b: 1 / (1 + np.exp(-a))),
  "tanh": (lambda a, b: a.tanh(), lambda a, b: np.tanh(a)),
  "lt": (lambda a, b: a < b, lambda a, b: a < b),
  "gt": (lambda a, b: a > b, lambda a, b: a > b),
  "le": (lambda a, b: a <= 0.1, lambda a, b: a <= np.float32(0.1)),
  "ge": (lambda a, b: a >= b, lambda a, b: a >= b),
  "eq": (lambda a, b: a.eq(a * 1), lambda a, b: a == a),
  "ne": (lambda a, b: a.ne(b), lambda a, b: a != b),
  "where": (lambda a, b: (a < 0).where(a, b), lambda a, b: np.where(a < 0, a, b)),
  "where scalars": (lambda a, b: (a < b).where(1.0, 0.0), lambda a, b: np.where(a < b, 1.0, 0.0).astype(np.float32)),
  "cast to int": (lambda a, b: (a * 10).cast(dtypes.i32), lambda a, b: (a * 10).astype(np.int32)),
  "cast bool to float": (lambda a, b: (a < b).cast(dtypes.f32), lambda a, b: (a < b).astype(np.float32)),
}


@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise_with_broadcasting(name):
  tfn, nfn = ELEMENTWISE[name]
  close(tfn(Tensor(A), Tensor(B)), nfn(A, B))


@pytest.mark.parametrize("sa,sb", [((3, 4), (4,)), ((4,), (3, 4)), ((2, 1, 4), (3, 1)), ((3, 4), (3, 4)), ((), (2, 3))])
def test_broadcasting_builds_the_nodes_expand_builds(sa, sb):
  """Binary ops and Tensor.full build their broadcast views without expand's checks: the nodes must be expand's."""
  a, b = Tensor(rng.standard_normal(sa).astype(np.float32)), Tensor(rng.standard_normal(sb).astype(np.float32))
  shape = tuple(np.broadcast_shapes(sa, sb))
  assert (a + b).uop is UOp(Ops.ADD, (a.expand(shape).uop, b.expand(shape).uop))
  assert (a < 2).uop is UOp(Ops.CMPLT, (a.uop, Tensor(UOp.const(2.0)).reshape((1,) * len(sa)).expand(sa).uop))
  assert Tensor.full(shape, 3).uop is Tensor(UOp.const(3)).reshape((1,) * len(shape)).expand(shape).uop


def test_dtypes_follow_numpy():
  i = np.arange(-3, 9, dtype=np.int32).reshape(3, 4)
  close(Tensor(i) * 3 + Tensor(i), i * 3 + i)
  close(Tensor(i).sum(1), i.sum(1).astype(np.int32))
  close(Tensor(i).max(0), i.max(0))
  d = A.astype(np.float64)
  out = (Tensor(d).exp() * 2).sum(0)
  assert out.dtype is dtypes.f64
  close(out, (np.exp(d) * 2).sum(0), 1e-12)
  assert (Tensor(A) < 0).dtype is dtypes.bool


# ---- reductions ----
@pytest.mark.parametrize("axis", [None, 0, 1, -1, -3, (0, 2), (-1, 1), (0, 1, 2, 3), ()])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op", ["sum", "max", "min", "mean"])
def test_reductions(op, axis, keepdim):
  ref = getattr(np, op)(C, axis=axis, keepdims=keepdim)
  close(getattr(Tensor(C), op)(axis, keepdim=keepdim), ref, 1e-5)


@pytest.mark.parametrize("axis", [-1, 0, 2])
def test_softmax_and_log_softmax(axis):
  m = C - C.max(axis, keepdims=True)
  close(Tensor(C).softmax(axis), np.exp(m) / np.exp(m).sum(axis, keepdims=True))
  close(Tensor(C).log_softmax(axis), m - np.log(np.exp(m).sum(axis, keepdims=True)))


def test_softmax_is_stable_for_large_inputs():
  x = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1000.0, -1000.0]], np.float32)
  e = np.exp(x - x.max(-1, keepdims=True))
  close(Tensor(x).softmax(-1), e / e.sum(-1, keepdims=True))


# ---- movement ----
MOVEMENT = {
  "reshape": (lambda t: t.reshape(6, 20), lambda a: a.reshape(6, 20)),
  "reshape -1": (lambda t: t.reshape(6, -1), lambda a: a.reshape(6, -1)),
  "reshape tuple": (lambda t: t.reshape((4, 30)), lambda a: a.reshape(4, 30)),
  "reshape then reshape": (lambda t: t.reshape(120).reshape(2, 60), lambda a: a.reshape(2, 60)),
  "expand": (lambda t: t[:, :1].expand(2, 3, 4, 5), lambda a: np.broadcast_to(a[:, :1], (2, 3, 4, 5))),
  "expand new axes": (lambda t: t[0, 0, 0].expand(3, 2, 5), lambda a: np.broadcast_to(a[0, 0, 0], (3, 2, 5))),
  "permute": (lambda t: t.permute(2, 0, 3, 1), lambda a: a.transpose(2, 0, 3, 1)),
  "permute negative": (lambda t: t.permute(-1, 0, 1, 2), lambda a: a.transpose(3, 0, 1, 2)),
  "T": (lambda t: t.T, lambda a: a.T),
  "transpose": (lambda t: t.transpose(0, 2), lambda a: a.swapaxes(0, 2)),
  "slice": (lambda t: t[1, :, -2:, 1:4], lambda a: a[1, :, -2:, 1:4]),
  "negative ints": (lambda t: t[-1, -2], lambda a: a[-1, -2]),
  "ellipsis": (lambda t: t[..., 2], lambda a: a[..., 2]),
  "clipped slice": (lambda t: t[:, 1:100, -100:2], lambda a: a[:, 1:100, -100:2]),
  "all ints": (lambda t: t[1, 2, 3, 4], lambda a: a[1, 2, 3, 4]),
  "pad": (lambda t: t.pad(((1, 0), None, (0, 2), (3, 1))), lambda a: np.pad(a, ((1, 0), (0, 0), (0, 2), (3, 1)))),
  "pad then slice": (lambda t: t.pad(((0, 0), (1, 1), (0, 0), (2, 0)))[:, :2, 1:, :4],
                     lambda a: np.pad(a, ((0, 0), (1, 1), (0, 0), (2, 0)))[:, :2, 1:, :4]),
  "cat unequal": (lambda t: Tensor.cat([t, t[:, :1] * 2, t[:, 1:] + 1], 1),
                  lambda a: np.concatenate([a, a[:, :1] * 2, a[:, 1:] + 1], 1)),
  "cat last": (lambda t: Tensor.cat([t[..., :2], t], -1), lambda a: np.concatenate([a[..., :2], a], -1)),
  "stack": (lambda t: Tensor.stack([t, t * 2, -t], 0), lambda a: np.stack([a, a * 2, -a], 0)),
  "stack middle": (lambda t: Tensor.stack([t, t * 2], 2), lambda a: np.stack([a, a * 2], 2)),
  "stack negative": (lambda t: Tensor.stack([t, t * 2], -1), lambda a: np.stack([a, a * 2], -1)),
}


@pytest.mark.parametrize("name", list(MOVEMENT))
def test_movement(name):
  tfn, nfn = MOVEMENT[name]
  close(tfn(Tensor(C)), nfn(C))
  close(tfn(Tensor(C)) * 2 + 1, nfn(C) * 2 + 1)   # computed on, not only returned


def test_realized_tensors_can_be_viewed_again():
  t = Tensor(C) + 1
  t.realize()
  close(t.reshape(6, 20), (C + 1).reshape(6, 20))
  close(t.T.sum(0), (C + 1).T.sum(0))


def test_input_is_copied():
  a = A.copy()
  t = Tensor(a)
  a[:] = 0
  close(t * 1, A)


# ---- matmul ----
MATMUL = [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)),
          ((2, 1, 3, 4), (5, 4, 6)), ((1, 3, 4), (2, 4, 2))]


@pytest.mark.parametrize("sa,sb", MATMUL)
def test_matmul_with_batches_and_broadcasting(sa, sb):
  a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
  close(Tensor(a) @ Tensor(b), a @ b, 1e-4)



@pytest.mark.parametrize("sa,sb", MATMUL)
def test_matmul_builds_the_nodes_its_docstring_describes(sa, sb):
  """matmul builds its views without the movement methods' checks: the nodes must be the ones those methods build."""
  a, b = Tensor(rng.standard_normal(sa).astype(np.float32)), Tensor(rng.standard_normal(sb).astype(np.float32))
  x = a.reshape(1, a.shape[0]) if a.ndim == 1 else a
  y = b.reshape(b.shape[0], 1) if b.ndim == 1 else b
  batch = np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
  n, k, m = x.shape[-2], x.shape[-1], y.shape[-1]
  xs = x.reshape(*x.shape[:-1], 1, k).expand(*batch, n, m, k)
  ys = y.transpose(-1, -2).reshape(*y.shape[:-2], 1, m, k).expand(*batch, n, m, k)
  out = (xs * ys).sum(-1)
  if a.ndim == 1: out = out.reshape(*out.shape[:-2], out.shape[-1])
  if b.ndim == 1: out = out.reshape(out.shape[:-1])
  assert (a @ b).uop is out.uop

def test_attention_matches_numpy():
  q, k, v = (rng.standard_normal((16, 8)).astype(np.float32) for _ in range(3))
  s = q @ k.T / math.sqrt(8)
  p = np.exp(s - s.max(-1, keepdims=True))
  ref = p / p.sum(-1, keepdims=True) @ v
  for fuse in (False, True):
    Tensor.fuse_reduce = fuse
    close((Tensor(q) @ Tensor(k).T * (1 / math.sqrt(8))).softmax(-1) @ Tensor(v), ref, 1e-5)


# ---- random graphs ----
def _broadcastable(draw, shape):
  """A shape that broadcasts against `shape`: some trailing axes, each the same size or 1."""
  n = draw(st.integers(0, len(shape)))
  return tuple(s if draw(st.booleans()) else 1 for s in shape[len(shape) - n:])


@st.composite
def programs(draw):
  """A random graph: an input, then a few ops, each picked among those valid for the current shape.
  Returns (inputs, steps); each step maps (value, inputs) -> value for Tensors and for arrays alike."""
  shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
  seed = draw(st.integers(0, 2**16))
  gen = np.random.default_rng(seed)
  inputs = [gen.standard_normal(shape).astype(np.float32)]
  def new_input(s):
    inputs.append(gen.standard_normal(s).astype(np.float32))
    return len(inputs) - 1
  steps = []
  for _ in range(draw(st.integers(1, 5))):
    nd, n = len(shape), math.prod(shape)
    kinds = ["unary", "binary", "where"] + (["reduce", "softmax", "permute", "slice", "pad", "cat", "matmul", "reshape"]
                                           if nd else ["unsqueeze"])
    if nd and n <= 64: kinds += ["expand", "stack"]
    kind = draw(st.sampled_from(kinds))
    if kind == "unary":
      f = draw(st.sampled_from(["neg", "relu", "sigmoid", "tanh", "abs"]))
      steps.append(lambda x, ins, f=f: -x if f == "neg" else getattr(x, f)() if isinstance(x, Tensor) else
                   {"relu": np.maximum(x, 0), "sigmoid": 1 / (1 + np.exp(-x)), "tanh": np.tanh(x), "abs": np.abs(x)}[f])
    elif kind == "binary":
      k, f = new_input(_broadcastable(draw, shape)), draw(st.sampled_from(["add", "sub", "mul", "maximum"]))
      def step(x, ins, k=k, f=f):
        y = ins[k]
        if f == "maximum": return x.maximum(y) if isinstance(x, Tensor) else np.maximum(x, y)
        return {"add": x + y, "sub": x - y, "mul": x * y}[f]
      steps.append(step)
    elif kind == "where":
      k = new_input(_broadcastable(draw, shape))
      steps.append(lambda x, ins, k=k: (x < ins[k]).where(x, ins[k] * 2) if isinstance(x, Tensor) else
                   np.where(x < ins[k], x, ins[k] * 2))
    elif kind == "reduce":
      axes = tuple(sorted(draw(st.sets(st.integers(0, nd - 1), min_size=1))))
      axes = tuple(a - nd if draw(st.booleans()) else a for a in axes)
      keep, op = draw(st.booleans()), draw(st.sampled_from(["sum", "max", "min", "mean"]))
      steps.append(lambda x, ins, a=axes, kp=keep, op=op: getattr(x, op)(a, keepdim=kp) if isinstance(x, Tensor) else
                   getattr(np, op)(x, axis=a, keepdims=kp))
      shape = np.empty(shape).sum(axes, keepdims=keep).shape
    elif kind == "softmax":
      ax = draw(st.integers(-nd, nd - 1))
      def step(x, ins, ax=ax):
        if isinstance(x, Tensor): return x.softmax(ax)
        e = np.exp(x - x.max(ax, keepdims=True))
        return e / e.sum(ax, keepdims=True)
      steps.append(step)
    elif kind == "permute":
      order = tuple(draw(st.permutations(range(nd))))
      steps.append(lambda x, ins, o=order: x.permute(o) if isinstance(x, Tensor) else x.transpose(o))
      shape = tuple(shape[o] for o in order)
    elif kind == "slice":
      key = []
      for s in shape:
        b = draw(st.integers(0, s - 1))
        if draw(st.booleans()): key.append(slice(b, draw(st.integers(b + 1, s))))
        else: key.append(b - s if draw(st.booleans()) else b)   # an int, maybe negative
      steps.append(lambda x, ins, key=tuple(key): x[key])
      shape = np.empty(shape)[tuple(key)].shape
    elif kind == "pad":
      pads = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
      steps.append(lambda x, ins, p=pads: x.pad(p) if isinstance(x, Tensor) else np.pad(x, p))
      shape = tuple(s + lo + hi for s, (lo, hi) in zip(shape, pads))
    elif kind == "cat":
      ax = draw(st.integers(0, nd - 1))
      cut = draw(st.integers(1, shape[ax]))
      def step(x, ins, ax=ax, cut=cut):
        piece = x[(slice(None),) * ax + (slice(0, cut),)] * 3
        return Tensor.cat([x, piece], ax) if isinstance(x, Tensor) else np.concatenate([x, piece], ax)
      steps.append(step)
      shape = tuple(s + cut if k == ax else s for k, s in enumerate(shape))
    elif kind == "stack":
      ax = draw(st.integers(-nd - 1, nd))
      steps.append(lambda x, ins, ax=ax: Tensor.stack([x, -x], ax) if isinstance(x, Tensor) else np.stack([x, -x], ax))
      shape = np.stack([np.empty(shape)] * 2, ax).shape
    elif kind == "matmul":
      m = draw(st.integers(1, 4))
      k = new_input((shape[-1], m))
      steps.append(lambda x, ins, k=k: x @ ins[k])
      shape = shape[:-1] + (m,)
    elif kind == "reshape":
      new = (-1,) if nd > 1 or draw(st.booleans()) else (1, shape[0])
      steps.append(lambda x, ins, s=new: x.reshape(s))
      shape = np.empty(shape).reshape(new).shape
    elif kind == "unsqueeze":
      steps.append(lambda x, ins: x.reshape(1, 1))
      shape = (1, 1)
    elif kind == "expand":
      lead = draw(st.integers(1, 3))
      steps.append(lambda x, ins, lead=lead: x.expand(lead, *x.shape) if isinstance(x, Tensor) else
                   np.broadcast_to(x, (lead, *x.shape)))
      shape = (lead, *shape)
  return inputs, steps


def run_program(inputs, steps, as_tensor: bool):
  ins = [Tensor(a) for a in inputs] if as_tensor else [a.astype(np.float64) for a in inputs]
  x = ins[0]
  for step in steps: x = step(x, ins)
  return x


@pytest.mark.parametrize("fuse", [False, True])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prog=programs())
def test_random_graphs_match_numpy(fuse, prog):
  inputs, steps = prog
  ref = run_program(inputs, steps, False)
  Tensor.fuse_reduce = fuse
  out = run_program(inputs, steps, True).numpy()
  assert out.shape == ref.shape
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max(initial=0))))


def test_a_matmul_of_a_view_that_reads_only_padding():
  """Found by test_random_graphs_match_numpy in CI: the layout pass asked the memory stride of a view that is all
  padding (a constant after rangeify, no load) and raised IndexError."""
  a, b = np.array([[[0.12573022]]], np.float32), np.array([[-0.13210486, 0.64042264]], np.float32)
  padded = np.pad(a, ((0, 0), (0, 0), (1, 0)))
  x = Tensor(a).pad(((0, 0), (0, 0), (1, 0)))
  for got, ref in [(x[0, 0, 0:1] @ Tensor(b), padded[0, 0, 0:1] @ b),   # only padding
                   (x[0, 0] @ Tensor(b).reshape(2, 1), padded[0, 0] @ b.reshape(2, 1))]:   # padding and a value
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-6)


# ---- gradients ----


def _softmax(x, axis=-1):
  e = np.exp(x - x.max(axis, keepdims=True))
  return e / e.sum(axis, keepdims=True)


W = rng.standard_normal((4, 3))
GRAPHS = {
  "softmax": (lambda x: (x.softmax(-1) * Tensor(W)).sum(), lambda x: (_softmax(x) * W).sum(), [(4, 3)]),
  "matmul": (lambda a, b: ((a @ b) * (a @ b)).sum(), lambda a, b: ((a @ b) ** 2).sum(), [(3, 4), (4, 2)]),
  "batched matmul": (lambda a, b: (a @ b).tanh().sum(), lambda a, b: np.tanh(a @ b).sum(), [(2, 3, 4), (4, 2)]),
  "max": (lambda x: (x.max(1) * Tensor(np.arange(4.0))).sum(), lambda x: (x.max(1) * np.arange(4.0)).sum(), [(4, 5)]),
  "pad and shrink": (lambda x: x.pad(((1, 0), (0, 2)))[1:4, 1:5].exp().sum(),
                     lambda x: np.exp(np.pad(x, ((1, 0), (0, 2)))[1:4, 1:5]).sum(), [(3, 4)]),
  "where": (lambda x, y: (x < y).where(x * y, y.exp()).sum(), lambda x, y: np.where(x < y, x * y, np.exp(y)).sum(),
            [(3, 4), (4,)]),
  "log_softmax mean": (lambda x: x.log_softmax(-1).mean(), lambda x: np.log(_softmax(x)).mean(), [(3, 5)]),
  "attention": (lambda q, k, v: ((q @ k.T * 0.5).softmax(-1) @ v).square().sum(),
                lambda q, k, v: ((_softmax(q @ k.T * 0.5) @ v) ** 2).sum(), [(3, 2), (4, 2), (4, 2)]),
  "cat and stack": (lambda a, b: (Tensor.cat([a, b], 0) * Tensor.stack([a[0], b[1]], 0).sum(0)).sum(),
                    lambda a, b: (np.concatenate([a, b], 0) * np.stack([a[0], b[1]], 0).sum(0)).sum(),
                    [(2, 3), (3, 3)]),
}


@pytest.mark.parametrize("name", list(GRAPHS))
def test_gradient_matches_finite_differences(name):
  tfn, nfn, shapes = GRAPHS[name]
  gen = np.random.default_rng(1)
  xs = [gen.standard_normal(s) for s in shapes]
  ts = [Tensor(x) for x in xs]                     # float64 all the way: the reference is float64 too
  grads = gradient(tfn(*ts), ts)
  for g, ref in zip(grads, finite_differences(nfn, xs)):
    np.testing.assert_allclose(g.numpy(), ref, rtol=1e-5, atol=1e-6)


def test_backward_fills_grad_of_leaves():
  x = Tensor(A.astype(np.float64), requires_grad=True)
  w = Tensor(np.ones((4, 2)), requires_grad=True)
  ((x @ w).relu().sum()).backward()
  np.testing.assert_allclose(w.grad.numpy(), (A.astype(np.float64).T @ ((A @ np.ones((4, 2))) > 0)), rtol=1e-6)
  assert x.grad.shape == x.shape


def test_gradient_stops_at_detach():
  x = Tensor(A.astype(np.float64))
  (g,) = gradient((x * x.detach()).sum(), [x])
  close(g, A.astype(np.float64), 1e-12)   # d(x * c)/dx = c, not 2x


# ---- bad input ----
# mixed dtypes promote (f32 + i32, i32 + 0.5, sqrt of an int) and negative pads cut, as in PyTorch and tinygrad:
# tests/semantics/test_ch09_api.py checks those; here only what stays an error
I32 = Tensor(np.ones((3, 4), np.int32))
BAD = {
  "bitwise on float": (lambda a: a & I32, TypeError, r"bool or integer"),
  "pad cuts too much": (lambda a: a.pad(((-2, -2), (0, 0))), ValueError, r"cuts more"),
  "matmul shapes": (lambda a: a @ Tensor(np.ones((5, 6), np.float32)), ValueError, r"\(3, 4\).*\(5, 6\)"),
  "matmul batch": (lambda a: Tensor(np.ones((2, 3, 4), np.float32)) @ Tensor(np.ones((3, 4, 5), np.float32)),
                   ValueError, r"broadcast"),
  "matmul scalar": (lambda a: a @ Tensor(2.0), ValueError, r"scalar"),
  "axis too large": (lambda a: a.sum(2), IndexError, r"axis 2"),
  "axis too negative": (lambda a: a.max(-3), IndexError, r"axis -3"),
  "axis in a tuple": (lambda a: a.sum((0, 5)), IndexError, r"axis 5"),
  "softmax axis": (lambda a: a.softmax(3), IndexError, r"axis 3"),
  "broadcast": (lambda a: a + Tensor(np.ones((5, 6), np.float32)), ValueError,
                r"\(3, 4\) and \(5, 6\) cannot be broadcast"),
  "broadcast where": (lambda a: (a < 0).where(a, Tensor(np.ones(3, np.float32))), ValueError, r"broadcast"),
  "where condition": (lambda a: a.where(a, a), TypeError, r"bool"),
  "reshape": (lambda a: a.reshape(5, 3), ValueError, r"\(3, 4\).*\(5, 3\)"),
  "reshape two -1": (lambda a: a.reshape(-1, -1), ValueError, r"-1"),
  "reshape -1": (lambda a: a.reshape(5, -1), ValueError, r"\(5, -1\)"),
  "permute repeat": (lambda a: a.permute(0, 0), ValueError, r"permutation"),
  "permute range": (lambda a: a.permute(0, 2), IndexError, r"axis 2"),
  "expand": (lambda a: a.expand(3, 5), ValueError, r"\(3, 4\) to \(3, 5\)"),
  "index out of range": (lambda a: a[3], IndexError, r"index 3 .*size 3"),
  "negative index out of range": (lambda a: a[:, -5], IndexError, r"index -5 .*axis 1"),
  "too many indices": (lambda a: a[0, 0, 0], IndexError, r"too many"),
  "float index": (lambda a: a[1.5], TypeError, r"float"),
  "shrink out of range": (lambda a: a.shrink(((0, 4), None)), IndexError, r"0:4.*size 3"),
  "cat shapes": (lambda a: Tensor.cat([a, Tensor(np.ones((5, 6), np.float32))]), ValueError, r"\(5, 6\)"),
  "stack shapes": (lambda a: Tensor.stack([a, a.T]), ValueError, r"same shape"),
  "item of many": (lambda a: a.item(), ValueError, r"\(3, 4\)"),
  "unsupported dtype": (lambda a: Tensor(np.ones(3, np.complex64)), TypeError, r"complex64"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_names_the_problem(name):
  fn, exc, pattern = BAD[name]
  with pytest.raises(exc, match=pattern):
    fn(Tensor(A))


def test_requires_grad_of_a_tensor_with_many_elements_can_be_read_and_set_again():
  """The leaves are found by identity: a set of Tensors would compare them with ==, which is elementwise."""
  t = Tensor(np.ones((3, 3), np.float32), requires_grad=True)
  assert t.requires_grad
  t.requires_grad = True
  (t * t).sum().backward()
  np.testing.assert_array_equal(t.grad.numpy(), 2 * np.ones((3, 3)))
  t.requires_grad = False
  assert not t.requires_grad

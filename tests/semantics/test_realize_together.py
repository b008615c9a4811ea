"""Every value of a random program realized in one realize (as TinyJit and the step program realize a step's loss,
gradients and updates), each compared with NumPy: the outputs of one plan share kernels (sibling outputs,
uopc.codegen.siblings), and a kernel moved to where its group sits must still come after every kernel that reads
what it writes. Issue 47: `c = x.cumsum(0); i = c.argmin(1); i.realize(c)` once returned argmins of a buffer not
yet written (argmin's staged copy of c was not counted as reading c)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from uopc.tensor import Tensor

DEVICES = ["CPU", "CL"]   # CL skips (uopc.errors.DeviceUnavailable, tests/conftest.py) where there is no OpenCL


def test_the_issue_example():
  x = np.random.default_rng(59).standard_normal((6, 7, 8)).astype(np.float32)
  c = Tensor(x).cumsum(0)
  i = c.argmin(1)
  Tensor.realize(i, c)
  np.testing.assert_array_equal(i.numpy(), np.cumsum(x, 0).argmin(1))
  np.testing.assert_allclose(c.numpy(), np.cumsum(x, 0), rtol=1e-5, atol=1e-5)


FLOAT_OPS = ["unary", "binary", "with_earlier", "reduce", "cumsum", "softmax", "permute", "slice", "pad", "matmul",
             "flatten", "contiguous", "arg"]


@st.composite
def programs(draw):
  """(inputs, steps): step k makes value k+1 from earlier values (usually the last, sometimes any) and the inputs.
  Each step is (source index, function of (value, inputs, values) for Tensors and float64 arrays alike)."""
  shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
  gen = np.random.default_rng(draw(st.integers(0, 2**16)))
  inputs = [gen.standard_normal(shape).astype(np.float32)]
  shapes, is_index, steps = [shape], [False], []

  def new_input(s):
    inputs.append(gen.standard_normal(s).astype(np.float32))
    return len(inputs) - 1

  n = draw(st.integers(2, 6))
  ends_with_arg = draw(st.booleans())   # an index of a value the program also returns: the issue's shape
  for step in range(n):
    floats = [k for k in range(len(shapes)) if not is_index[k] and shapes[k]]
    if not floats: break
    src = floats[-1] if draw(st.booleans()) or step == n - 1 else draw(st.sampled_from(floats))
    shape, nd = shapes[src], len(shapes[src])
    kind, index = "arg" if ends_with_arg and step == n - 1 else draw(st.sampled_from(FLOAT_OPS)), False
    if kind == "unary":
      f = draw(st.sampled_from(["neg", "relu", "tanh", "abs"]))
      fn = lambda x, ins, vals, f=f: -x if f == "neg" else getattr(x, f)() if isinstance(x, Tensor) else \
        {"relu": np.maximum(x, 0), "tanh": np.tanh(x), "abs": np.abs(x)}[f]
    elif kind == "binary":
      k = new_input(shape[draw(st.integers(0, nd)):])
      fn = lambda x, ins, vals, k=k: x * ins[k] + ins[k]
    elif kind == "with_earlier":   # two values of the program meet: a diamond, not a chain
      same = [j for j in floats if shapes[j] == shape and j != src]
      if not same: continue
      j = draw(st.sampled_from(same))
      fn = lambda x, ins, vals, j=j: x - vals[j]
    elif kind == "reduce":
      ax, keep, op = draw(st.integers(-nd, nd - 1)), draw(st.booleans()), draw(st.sampled_from(["sum", "max", "min"]))
      fn = lambda x, ins, vals, ax=ax, kp=keep, op=op: getattr(x, op)(ax, keepdim=kp) if isinstance(x, Tensor) else \
        getattr(np, op)(x, axis=ax, keepdims=kp)
      shape = np.empty(shape).sum(ax, keepdims=keep).shape
    elif kind == "cumsum":
      ax = draw(st.integers(0, nd - 1))
      fn = lambda x, ins, vals, ax=ax: x.cumsum(ax) if isinstance(x, Tensor) else np.cumsum(x, ax)
    elif kind == "softmax":
      ax = draw(st.integers(-nd, nd - 1))
      fn = lambda x, ins, vals, ax=ax: x.softmax(ax) if isinstance(x, Tensor) else \
        np.exp(x - x.max(ax, keepdims=True)) / np.exp(x - x.max(ax, keepdims=True)).sum(ax, keepdims=True)
    elif kind == "permute":
      order = tuple(draw(st.permutations(range(nd))))
      fn = lambda x, ins, vals, o=order: x.permute(o) if isinstance(x, Tensor) else x.transpose(o)
      shape = tuple(shape[o] for o in order)
    elif kind == "slice":
      key = tuple(slice(draw(st.integers(0, s - 1)), None) for s in shape)
      fn = lambda x, ins, vals, key=key: x[key]
      shape = np.empty(shape)[key].shape
    elif kind == "pad":
      pads = tuple((draw(st.integers(0, 1)), draw(st.integers(0, 1))) for _ in shape)
      fn = lambda x, ins, vals, p=pads: x.pad(p) if isinstance(x, Tensor) else np.pad(x, p)
      shape = tuple(s + lo + hi for s, (lo, hi) in zip(shape, pads))
    elif kind == "matmul":
      k = new_input((shape[-1], draw(st.integers(1, 4))))
      fn = lambda x, ins, vals, k=k: x @ ins[k]
      shape = shape[:-1] + (inputs[k].shape[1],)
    elif kind == "flatten":
      fn = lambda x, ins, vals: x.reshape(-1)
      shape = (int(np.prod(shape)),)
    elif kind == "contiguous":
      fn = lambda x, ins, vals: x.contiguous() if isinstance(x, Tensor) else x
    else:   # an index: what argmin/argmax chose (terminal: nothing computes with it)
      ax, name = draw(st.integers(-nd, nd - 1)), draw(st.sampled_from(["argmin", "argmax"]))
      fn = lambda x, ins, vals, ax=ax, name=name: getattr(x, name)(ax) if isinstance(x, Tensor) else (name, ax)
      shape, index = np.empty(shape).sum(ax).shape, True
    steps.append((src, fn))
    shapes.append(shape)
    is_index.append(index)
  return inputs, steps


def run(inputs, steps, device=None):
  """Every value of the program: Tensors on device, or float64 arrays (an index step gives (name, axis) there)."""
  ins = [Tensor(a, device=device) for a in inputs] if device else [a.astype(np.float64) for a in inputs]
  vals = [ins[0]]
  for src, fn in steps:
    vals.append(fn(vals[src], ins, vals))
  return vals


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fuse", [False, True])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prog=programs())
def test_random_programs_realized_together_match_numpy(device, fuse, prog, monkeypatch):
  inputs, steps = prog
  monkeypatch.setattr(Tensor, "fuse_reduce", fuse)
  ref, got = run(inputs, steps), run(inputs, steps, device)
  Tensor.realize(*got)                                  # all of them in one plan
  for k, (r, t) in enumerate(zip(ref, got)):
    src = ref[steps[k - 1][0]] if k else None
    if isinstance(r, tuple):   # an index: in range, and at a value within rounding of the extreme NumPy finds
      name, ax = r
      idx = t.numpy()
      assert idx.shape == np.argmin(src, ax).shape, (k, idx.shape)
      assert ((idx >= 0) & (idx < src.shape[ax])).all(), (k, idx)
      picked = np.take_along_axis(src, np.expand_dims(idx.astype(np.int64), ax), ax).squeeze(ax)
      best = src.min(ax) if name == "argmin" else src.max(ax)
      np.testing.assert_allclose(picked, best, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(src).max())),
                                 err_msg=f"value {k}: {name}({ax})")
    else:
      out = t.numpy()
      assert out.shape == r.shape, (k, out.shape, r.shape)
      np.testing.assert_allclose(out, r, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(r).max(initial=0))),
                                 err_msg=f"value {k}")

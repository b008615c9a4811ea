"""Chapter 9, the Tensor API a PyTorch or tinygrad user reaches for (issue 19; issue 15's GPT ops; issue 18's
silent wrong values and shape arguments): every op's value against NumPy, its gradient against finite differences
in float64, and against PyTorch where it is importable (skipped otherwise)."""
import math
import numpy as np
import pytest
from uopc.dtype import dtypes
from uopc.tensor import Tensor, gradient
from numerics import finite_differences   # tests/numerics.py

pytestmark = pytest.mark.ch09

rng = np.random.default_rng(19)
X = rng.standard_normal((3, 4)).astype(np.float32)
Y = rng.standard_normal((3, 4)).astype(np.float32)
C = rng.standard_normal((2, 3, 4)).astype(np.float32)
I = np.array([[3, -7, 0, 5], [-2, 9, 4, -1], [8, 1, -6, 2]], np.int32)
try:
  import torch
except ImportError:
  torch = None


def close(t: Tensor, ref, tol: float = 1e-5, dtype=None) -> None:
  out, ref = t.numpy(), np.asarray(ref)
  assert out.shape == ref.shape, f"shape {out.shape}, NumPy says {ref.shape}"
  if dtype is not None: assert t.dtype is dtype, f"dtype {t.dtype}, expected {dtype}"
  if ref.dtype == np.bool_ or ref.dtype.kind in "iu": np.testing.assert_array_equal(out, ref)
  else: np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)


def np_softmax(x, axis=-1):
  e = np.exp(x - x.max(axis, keepdims=True))
  return e / e.sum(axis, keepdims=True)


def np_log_softmax(x, axis=-1):
  m = x - x.max(axis, keepdims=True)
  return m - np.log(np.exp(m).sum(axis, keepdims=True))


def np_gelu(x): return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
def np_sigmoid(x): return 1 / (1 + np.exp(-x))
def np_softplus(x): return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)


# ---- forward values: (uopc, NumPy) on X (3, 4) float32 ----
FORWARD = {
  # function forms and operators
  "add": (lambda x: x.add(2.0), lambda x: x + 2),
  "sub": (lambda x: x.sub(Tensor(Y)), lambda x: x - Y),
  "mul": (lambda x: x.mul(x), lambda x: x * x),
  "div": (lambda x: x.div(3.0), lambda x: x / 3),
  "neg": (lambda x: x.neg(), lambda x: -x),
  "pow 3": (lambda x: x ** 3, lambda x: x ** 3),
  "pow -2": (lambda x: x.pow(-2), lambda x: x ** -2.0),
  "pow 0": (lambda x: x ** 0, lambda x: x ** 0),
  "pow 0.5": (lambda x: x.abs() ** 0.5, lambda x: np.abs(x) ** 0.5),
  "pow tensor": (lambda x: x ** Tensor(np.array([1.0, 2.0, 0.5, -1.0], np.float32)),
                 lambda x: np.power(x, np.array([1.0, 2.0, 0.5, -1.0], np.float32))),
  "rpow": (lambda x: 2 ** x, lambda x: 2.0 ** x),
  "dot": (lambda x: x.dot(Tensor(Y.T)), lambda x: x @ Y.T),
  "==": (lambda x: x == Tensor(np.where(X > 0, X, Y)), lambda x: x == np.where(X > 0, X, Y)),
  "!=": (lambda x: x != 0.5, lambda x: x != 0.5),
  "~ bool": (lambda x: ~(x > 0), lambda x: ~(x > 0)),
  "floor": (lambda x: (x * 3).floor(), lambda x: np.floor(x * 3)),
  "ceil": (lambda x: (x * 3).ceil(), lambda x: np.ceil(x * 3)),
  "trunc": (lambda x: (x * 3).trunc(), lambda x: np.trunc(x * 3)),
  "round": (lambda x: Tensor(np.array([0.5, 1.5, 2.5, -0.5, -1.5, 0.4, 2.6], np.float32)).round(),
            lambda x: np.round(np.array([0.5, 1.5, 2.5, -0.5, -1.5, 0.4, 2.6], np.float32))),
  "float //": (lambda x: x // 0.3, lambda x: x // np.float32(0.3)),
  "float %": (lambda x: x % 0.7, lambda x: np.mod(x, np.float32(0.7))),
  "sign": (lambda x: x.sign(), lambda x: np.sign(x)),
  "cos": (lambda x: x.cos(), lambda x: np.cos(x)),
  "rsqrt": (lambda x: x.abs().rsqrt(), lambda x: 1 / np.sqrt(np.abs(x))),
  "clip": (lambda x: x.clip(-0.5, 0.5), lambda x: np.clip(x, -0.5, 0.5)),
  "clip min": (lambda x: x.clamp(0.1), lambda x: np.maximum(x, 0.1)),
  # creation
  "arange": (lambda x: Tensor.arange(5), lambda x: np.arange(5)),
  "arange step": (lambda x: Tensor.arange(10, 2, -3), lambda x: np.arange(10, 2, -3)),
  "arange float": (lambda x: Tensor.arange(0, 1, 0.25), lambda x: np.arange(0, 1, 0.25)),
  "eye": (lambda x: Tensor.eye(3, 4), lambda x: np.eye(3, 4)),
  "tril": (lambda x: x.tril(), lambda x: np.tril(x)),
  "tril -1": (lambda x: x.tril(-1), lambda x: np.tril(x, -1)),
  "triu": (lambda x: x.triu(), lambda x: np.triu(x)),
  "triu 2": (lambda x: x.triu(2), lambda x: np.triu(x, 2)),
  "tril batched": (lambda x: Tensor(C).tril(1), lambda x: np.tril(C, 1)),
  "full_like": (lambda x: x.full_like(7.0), lambda x: np.full_like(x, 7)),
  "zeros_like": (lambda x: x.zeros_like(), lambda x: np.zeros_like(x)),
  "ones_like": (lambda x: x.ones_like(), lambda x: np.ones_like(x)),
  # reductions
  "var": (lambda x: x.var(), lambda x: x.var(ddof=1)),
  "var 1": (lambda x: x.var(1), lambda x: x.var(1, ddof=1)),
  "var 0 keepdim": (lambda x: x.var(0, keepdim=True, correction=0), lambda x: x.var(0, keepdims=True)),
  "std": (lambda x: x.std(-1), lambda x: x.std(-1, ddof=1)),
  "prod": (lambda x: x.prod(1), lambda x: x.prod(1)),
  "prod all": (lambda x: x.prod(), lambda x: x.prod()),
  "logsumexp": (lambda x: x.logsumexp(1), lambda x: np.log(np.exp(x).sum(1))),
  "logsumexp all": (lambda x: (x * 300).logsumexp(), lambda x: np.logaddexp.reduce((x * 300).ravel())),
  "argmax": (lambda x: x.argmax(1), lambda x: x.argmax(1)),
  "argmin": (lambda x: x.argmin(0), lambda x: x.argmin(0)),
  "argmax all": (lambda x: x.argmax(), lambda x: x.argmax()),
  "argmax ties": (lambda x: Tensor(np.array([[1, 3, 3], [2, 2, 0]], np.float32)).argmax(1),
                  lambda x: np.array([[1, 3, 3], [2, 2, 0]], np.float32).argmax(1)),
  "cumsum": (lambda x: x.cumsum(1), lambda x: x.cumsum(1)),
  "cumsum 0": (lambda x: x.cumsum(0), lambda x: x.cumsum(0)),
  "any": (lambda x: (x > 1).any(1), lambda x: (x > 1).any(1)),
  "all": (lambda x: (x > -1).all(0), lambda x: (x > -1).all(0)),
  "min of bools": (lambda x: (x > 0).min(1), lambda x: (x > 0).min(1)),
  "max of bools": (lambda x: (x > 0).max(0), lambda x: (x > 0).max(0)),
  # movement
  "flip": (lambda x: x.flip(1), lambda x: np.flip(x, 1)),
  "flip both": (lambda x: x.flip((0, 1)), lambda x: x[::-1, ::-1]),
  "unsqueeze": (lambda x: x.unsqueeze(1), lambda x: x[:, None]),
  "unsqueeze -1": (lambda x: x.unsqueeze(-1), lambda x: x[..., None]),
  "squeeze": (lambda x: x[:1].squeeze(), lambda x: x[:1].squeeze()),
  "squeeze dim": (lambda x: x[:, :1].squeeze(1), lambda x: x[:, :1].squeeze(1)),
  "flatten": (lambda x: Tensor(C).flatten(1), lambda x: C.reshape(2, 12)),
  "flatten all": (lambda x: x.flatten(), lambda x: x.ravel()),
  "clone": (lambda x: x.clone() * 1, lambda x: x),
  "repeat": (lambda x: x.repeat(2, 3), lambda x: np.tile(x, (2, 3))),
  "repeat more axes": (lambda x: x.repeat(2, 1, 2), lambda x: np.tile(x, (2, 1, 2))),
  "pad value": (lambda x: x.pad(((1, 0), (0, 2)), value=-1.5),
                lambda x: np.pad(x, ((1, 0), (0, 2)), constant_values=-1.5)),
  "pad negative": (lambda x: x.pad(((-1, 1), (2, -3))), lambda x: np.pad(x[1:, :1], ((0, 1), (2, 0)))),
  "pad flat": (lambda x: x.pad((1, 2)), lambda x: np.pad(x, ((0, 0), (1, 2)))),
  "reshape -1 None": (lambda x: x.reshape(None, -1, 2), lambda x: x.reshape(3, -1, 2)),
  "reshape numpy ints": (lambda x: x.reshape(np.int64(4), np.int32(3)), lambda x: x.reshape(4, 3)),
  "cat tinygrad": (lambda x: x.cat(x * 2, x[:1], dim=0), lambda x: np.concatenate([x, x * 2, x[:1]], 0)),
  "cat dims": (lambda x: Tensor.cat([x, x[:, :1]], dim=1), lambda x: np.concatenate([x, x[:, :1]], 1)),
  "stack tinygrad": (lambda x: Tensor.stack(x, x + 1, dim=1), lambda x: np.stack([x, x + 1], 1)),
  "stack method": (lambda x: x.stack(x * 3), lambda x: np.stack([x, x * 3])),
  "split": (lambda x: Tensor.stack(*x.split(2, 1)[:2], dim=0), lambda x: np.stack(np.split(x, 2, 1))),
  "split sizes": (lambda x: x.split([1, 3], 1)[1], lambda x: x[:, 1:]),
  "chunk": (lambda x: x.chunk(2, 0)[1], lambda x: x[2:]),
  # indexing
  "step": (lambda x: x[::2], lambda x: x[::2]),
  "step 3": (lambda x: x[:, 1::3], lambda x: x[:, 1::3]),
  "negative step": (lambda x: x[::-1, ::-2], lambda x: x[::-1, ::-2]),
  "negative step window": (lambda x: x[2:0:-1, -1:0:-2], lambda x: x[2:0:-1, -1:0:-2]),
  "None": (lambda x: x[None, :, None, 1], lambda x: x[None, :, None, 1]),
  "ellipsis middle": (lambda x: Tensor(C)[1, ..., 2], lambda x: C[1, ..., 2]),
  "list": (lambda x: x[[2, 0, 2]], lambda x: x[[2, 0, 2]]),
  "int tensor": (lambda x: x[Tensor(np.array([[1, -1], [0, 2]]))], lambda x: x[np.array([[1, -1], [0, 2]])]),
  "int tensor axis 1": (lambda x: x[:, Tensor([3, 0])], lambda x: x[:, [3, 0]]),
  "two tensors": (lambda x: x[Tensor([0, 2]), Tensor([1, 3])], lambda x: x[[0, 2], [1, 3]]),
  "tensor and int": (lambda x: Tensor(C)[:, Tensor([2, 0]), 1], lambda x: C[:, [2, 0], 1]),
  "tensors apart": (lambda x: Tensor(C)[Tensor([1, 0]), :, Tensor([3, 2])], lambda x: C[[1, 0], :, [3, 2]]),
  "computed index": (lambda x: x[Tensor([5, 6]) - 4], lambda x: x[np.array([1, 2])]),
  "bool mask": (lambda x: x[X > 0], lambda x: x[X > 0]),
  "bool mask tensor": (lambda x: x[Tensor(X) > 0.5], lambda x: x[X > 0.5]),
  "bool mask rows": (lambda x: x[np.array([True, False, True])], lambda x: x[np.array([True, False, True])]),
  "gather": (lambda x: x.gather(1, Tensor(np.array([[0, 0], [3, 1], [2, 2]]))),
             lambda x: np.take_along_axis(x, np.array([[0, 0], [3, 1], [2, 2]]), 1)),
  "gather 0": (lambda x: x.gather(0, Tensor(np.array([[2, 1, 0, 0]]))),
               lambda x: np.take_along_axis(x, np.array([[2, 1, 0, 0]]), 0)),
  "one_hot": (lambda x: Tensor([2, 0, 1]).one_hot(4), lambda x: np.eye(4, dtype=np.int32)[[2, 0, 1]]),
  "masked_fill": (lambda x: x.masked_fill(Tensor(X) > 0, -math.inf), lambda x: np.where(X > 0, -np.inf, x)),
  "where scalars": (lambda x: (x > 0).where(1, 0.5), lambda x: np.where(x > 0, 1, 0.5)),
  "Tensor.where": (lambda x: Tensor.where(x > 0, x, 0), lambda x: np.where(x > 0, x, 0)),
  # activations
  "relu": (lambda x: x.relu(), lambda x: np.maximum(x, 0)),
  "leaky_relu": (lambda x: x.leaky_relu(0.1), lambda x: np.where(x > 0, x, 0.1 * x)),
  "gelu": (lambda x: x.gelu(), np_gelu),
  "quick_gelu": (lambda x: x.quick_gelu(), lambda x: x * np_sigmoid(1.702 * x)),
  "silu": (lambda x: x.silu(), lambda x: x * np_sigmoid(x)),
  "elu": (lambda x: x.elu(0.5), lambda x: np.where(x > 0, x, 0.5 * (np.exp(x) - 1))),
  "relu6": (lambda x: (x * 4).relu6(), lambda x: np.clip(x * 4, 0, 6)),
  "hardswish": (lambda x: (x * 4).hardswish(), lambda x: x * 4 * np.clip(x * 4 + 3, 0, 6) / 6),
  "hardtanh": (lambda x: x.hardtanh(-0.5, 0.2), lambda x: np.clip(x, -0.5, 0.2)),
  "softplus": (lambda x: (x * 50).softplus(), lambda x: np_softplus(x * 50)),
  "softplus beta": (lambda x: x.softplus(2.0), lambda x: np_softplus(2 * x) / 2),
  "tanh": (lambda x: (x * 10).tanh(), lambda x: np.tanh(x * 10)),
  "mish": (lambda x: x.mish(), lambda x: x * np.tanh(np_softplus(x))),
  "celu": (lambda x: x.celu(0.5), lambda x: np.where(x > 0, x, 0.5 * (np.exp(x / 0.5) - 1))),
  "hardsigmoid": (lambda x: (x * 4).hardsigmoid(), lambda x: np.clip(x * 4 + 3, 0, 6) / 6),
  "logsigmoid": (lambda x: (x * 40).logsigmoid(), lambda x: -np_softplus(-40 * x)),
  "swish": (lambda x: x.swish(), lambda x: x * np_sigmoid(x)),
  "relu of ints": (lambda x: Tensor(I).relu(), lambda x: np.maximum(I, 0)),
  "sigmoid": (lambda x: (x * 50).sigmoid(), lambda x: np_sigmoid(x * 50)),
  "layernorm": (lambda x: x.layernorm(),
                lambda x: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)),
  "layernorm axis 0": (lambda x: x.layernorm(0, eps=1e-3),
                       lambda x: (x - x.mean(0, keepdims=True)) / np.sqrt(x.var(0, keepdims=True) + 1e-3)),
  # losses
  "cross_entropy": (lambda x: x.cross_entropy(Tensor([1, 0, 3])),
                    lambda x: -np_log_softmax(x)[[0, 1, 2], [1, 0, 3]].mean()),
  "cross_entropy sum": (lambda x: x.cross_entropy([1, 0, 3], reduction="sum"),
                        lambda x: -np_log_softmax(x)[[0, 1, 2], [1, 0, 3]].sum()),
  "cross_entropy none": (lambda x: x.cross_entropy(np.array([1, 0, 3]), reduction="none"),
                         lambda x: -np_log_softmax(x)[[0, 1, 2], [1, 0, 3]]),
  "cross_entropy probs": (lambda x: x.cross_entropy(Tensor(np_softmax(Y))),
                          lambda x: -(np_log_softmax(x) * np_softmax(Y)).sum(-1).mean()),
  "cross_entropy smoothing": (lambda x: x.cross_entropy(Tensor([1, 0, 3]), label_smoothing=0.1),
                              lambda x: -(np_log_softmax(x) * (np.eye(4)[[1, 0, 3]] * 0.9 + 0.025)).sum(-1).mean()),
  "sparse_categorical_crossentropy": (lambda x: x.sparse_categorical_crossentropy(Tensor([1, -1, 3])),
                                      lambda x: -np_log_softmax(x)[[0, 2], [1, 3]].mean()),
  "nll_loss": (lambda x: x.log_softmax(-1).nll_loss(Tensor([2, 2, 0])),
               lambda x: -np_log_softmax(x)[[0, 1, 2], [2, 2, 0]].mean()),
  "nll_loss weight": (lambda x: x.log_softmax(-1).nll_loss(Tensor([2, 2, 0]),
                                                           weight=Tensor(np.array([1, 2, 3, 4], np.float32))),
                      lambda x: -(np_log_softmax(x)[[0, 1, 2], [2, 2, 0]] * [3, 3, 1]).sum() / 7),
  "binary_crossentropy": (lambda x: x.sigmoid().binary_crossentropy(Tensor((Y > 0).astype(np.float32))),
                          lambda x: -((Y > 0) * np.log(np_sigmoid(x)) + (Y <= 0) * np.log(1 - np_sigmoid(x))).mean()),
  "binary_crossentropy_logits": (
    lambda x: (x * 40).binary_crossentropy_logits(Tensor((Y > 0).astype(np.float32))),
    lambda x: (np.maximum(40 * x, 0) - 40 * x * (Y > 0) + np.log1p(np.exp(-np.abs(40 * x)))).mean()),
}


@pytest.mark.parametrize("name", list(FORWARD))
def test_forward_matches_numpy(name):
  tfn, nfn = FORWARD[name]
  with np.errstate(all="ignore"): ref = nfn(X.copy())   # NumPy's nan for (-x) ** 0.5 is the value we check
  close(tfn(Tensor(X)), ref, 1e-5)


# ---- gradients: uopc's against central differences, float64 ----


W = rng.standard_normal((3, 4))
TARGETS = np.array([1, 0, 3])
GRADS = {
  "pow": (lambda x: (x ** 3).sum() + (x.abs() ** 1.5).sum(), lambda x: (x ** 3).sum() + (np.abs(x) ** 1.5).sum()),
  "var std": (lambda x: x.var(1).sum() + x.std(0).sum(), lambda x: x.var(1, ddof=1).sum() + x.std(0, ddof=1).sum()),
  "prod": (lambda x: (x.prod(1) * Tensor(np.arange(3.0))).sum(), lambda x: (x.prod(1) * np.arange(3.0)).sum()),
  "logsumexp": (lambda x: (x.logsumexp(1) * Tensor(np.arange(3.0))).sum(),
                lambda x: (np.log(np.exp(x).sum(1)) * np.arange(3)).sum()),
  "cumsum": (lambda x: (x.cumsum(1) * Tensor(W)).sum(), lambda x: (x.cumsum(1) * W).sum()),
  "flip and step": (lambda x: (x.flip(1)[::2, ::-3] * Tensor(W[::2, :2])).sum(),
                    lambda x: (x[:, ::-1][::2, ::-3] * W[::2, :2]).sum()),
  "index repeated": (lambda x: (x[Tensor([2, 0, 2, 2])] * Tensor(W[[0, 1, 2, 0]])).sum(),
                     lambda x: (x[[2, 0, 2, 2]] * W[[0, 1, 2, 0]]).sum()),
  "two index tensors": (lambda x: (x[Tensor([0, 2, 0]), Tensor([1, 3, 1])] ** 2).sum(),
                        lambda x: (x[[0, 2, 0], [1, 3, 1]] ** 2).sum()),
  "gather": (lambda x: (x.gather(1, Tensor(np.array([[0, 0], [3, 1], [2, 2]]))) ** 2).sum(),
             lambda x: (np.take_along_axis(x, np.array([[0, 0], [3, 1], [2, 2]]), 1) ** 2).sum()),
  "tril masked_fill": (lambda x: (x.tril() + x.triu(1).masked_fill(Tensor(W) > 0, 0.0) * 2).square().sum(),
                       lambda x: (np.tril(x) + np.where(W > 0, 0, np.triu(x, 1)) * 2).__pow__(2).sum()),
  "gelu": (lambda x: (x.gelu() * Tensor(W)).sum(), lambda x: (np_gelu(x) * W).sum()),
  "activations": (lambda x: (x.silu() + x.elu() + x.leaky_relu() + x.softplus() + x.quick_gelu() + x.hardtanh(-0.3, 0.4)
                             + (x * 4).hardswish() + x.sigmoid() + x.tanh()).sum(),
                  lambda x: (x * np_sigmoid(x) + np.where(x > 0, x, np.exp(x) - 1) + np.where(x > 0, x, 0.01 * x)
                             + np_softplus(x) + x * np_sigmoid(1.702 * x) + np.clip(x, -0.3, 0.4)
                             + 4 * x * np.clip(4 * x + 3, 0, 6) / 6 + np_sigmoid(x) + np.tanh(x)).sum()),
  "layernorm": (lambda x: (x.layernorm() @ Tensor(W.T)).square().sum(),
                lambda x: (((x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)) @ W.T)
                .__pow__(2).sum()),
  "cross_entropy": (lambda x: x.cross_entropy(Tensor(TARGETS)),
                    lambda x: -np_log_softmax(x)[[0, 1, 2], TARGETS].mean()),
  "sparse_categorical_crossentropy": (lambda x: x.sparse_categorical_crossentropy(Tensor([1, -1, 3])),
                                      lambda x: -np_log_softmax(x)[[0, 2], [1, 3]].mean()),
  "binary_crossentropy_logits": (lambda x: x.binary_crossentropy_logits(Tensor((W > 0) * 1.0)),
                                 lambda x: (np.maximum(x, 0) - x * (W > 0) + np.log1p(np.exp(-np.abs(x)))).mean()),
  "pad value repeat split": (
    lambda x: (x.pad(((1, 0), (0, 1)), value=2.0).repeat(1, 2) ** 2).sum() + x.split(3, 1)[1].sum() * 3,
    lambda x: (np.tile(np.pad(x, ((1, 0), (0, 1)), constant_values=2.0), (1, 2)) ** 2).sum() + x[:, 3:].sum() * 3),
  "cat tinygrad": (lambda x: (x.cat(x[:1] * 3, dim=0) ** 2).sum(),
                   lambda x: (np.concatenate([x, x[:1] * 3]) ** 2).sum()),
}


@pytest.mark.parametrize("name", list(GRADS))
def test_gradient_matches_finite_differences(name):
  tfn, nfn = GRADS[name]
  x = np.random.default_rng(3).standard_normal((3, 4))
  t = Tensor(x)
  (g,) = gradient(tfn(t), [t])
  np.testing.assert_allclose(g.numpy(), finite_differences(nfn, [x])[0], rtol=1e-5, atol=1e-6)


def test_prod_gradient_with_zeros():
  x = np.array([[2.0, 0.0, 3.0, 4.0], [0.0, 0.0, 5.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
  t = Tensor(x)
  (g,) = gradient(t.prod(1).sum(), [t])
  np.testing.assert_allclose(g.numpy(), [[0, 24, 0, 0], [0, 0, 0, 0], [24, 12, 8, 6]])


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
@pytest.mark.parametrize("name", ["gelu", "activations", "layernorm", "cross_entropy", "gather", "cumsum", "prod"])
def test_gradient_matches_pytorch(name):
  F = torch.nn.functional
  torch_fns = {
    "gelu": lambda x: (F.gelu(x, approximate="tanh") * torch.tensor(W)).sum(),
    "layernorm": lambda x: (F.layer_norm(x, (4,)) @ torch.tensor(W.T)).square().sum(),
    "cross_entropy": lambda x: F.cross_entropy(x, torch.tensor(TARGETS)),
    "gather": lambda x: (x.gather(1, torch.tensor([[0, 0], [3, 1], [2, 2]])) ** 2).sum(),
    "cumsum": lambda x: (x.cumsum(1) * torch.tensor(W)).sum(),
    "prod": lambda x: (x.prod(1) * torch.arange(3.0, dtype=torch.float64)).sum(),
    "activations": lambda x: (F.silu(x) + F.elu(x) + F.leaky_relu(x) + F.softplus(x) + x * torch.sigmoid(1.702 * x)
                              + F.hardtanh(x, -0.3, 0.4) + F.hardswish(4 * x) + torch.sigmoid(x) + torch.tanh(x)).sum(),
  }
  x = np.random.default_rng(3).standard_normal((3, 4))
  tx = torch.tensor(x, requires_grad=True)
  torch_fns[name](tx).backward()
  (g,) = gradient(GRADS[name][0](t := Tensor(x)), [t])
  np.testing.assert_allclose(g.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-8)


# ---- gradients at the edges (issue 19) ----
def grad_of(fn, x: np.ndarray) -> np.ndarray:
  t = Tensor(x)
  (g,) = gradient(fn(t).sum(), [t])
  return g.numpy()


def test_relu_gradient_at_zero_is_zero():
  np.testing.assert_array_equal(grad_of(lambda t: t.relu(), np.array([-1.0, 0.0, 2.0])), [0.0, 0.0, 1.0])


def test_max_still_splits_ties():   # the book's rule for max is unchanged: relu is no longer a max
  np.testing.assert_array_equal(grad_of(lambda t: t.maximum(0.0), np.array([-1.0, 0.0, 2.0])), [0.0, 0.5, 1.0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sigmoid_and_tanh_gradients_stay_finite_far_out(dtype):
  x = np.array([-1000.0, -310.0, -300.0, -100.0, 0.0, 100.0, 1000.0], dtype)
  ds, dt = grad_of(lambda t: t.sigmoid(), x), grad_of(lambda t: t.tanh(), x)
  assert np.isfinite(ds).all() and np.isfinite(dt).all(), (ds, dt)
  with np.errstate(over="ignore"): s = 1 / (1 + np.exp(-x.astype(np.float64)))
  np.testing.assert_allclose(ds, s * (1 - s), atol=1e-7)
  np.testing.assert_allclose(dt, 1 - np.tanh(x.astype(np.float64)) ** 2, atol=1e-7)
  np.testing.assert_allclose(Tensor(x).sigmoid().numpy(), s, rtol=1e-6, atol=1e-30)   # float32 flushes e^-300
  np.testing.assert_allclose(Tensor(x).tanh().numpy(), np.tanh(x), rtol=1e-6)


def test_gradient_through_an_expand_to_zero_size_is_zero():
  x = Tensor(np.ones((4, 3, 1, 6)))
  (g,) = gradient(x.expand(4, 3, 0, 6).sum(), [x])
  np.testing.assert_array_equal(g.numpy(), np.zeros((4, 3, 1, 6)))


def test_gradient_of_indexing_is_a_scatter_add():
  w = Tensor(np.zeros((5, 2)))
  (g,) = gradient(w[Tensor(np.array([[1, 3], [1, 1]]))].sum(), [w])
  np.testing.assert_array_equal(g.numpy(), [[0, 0], [3, 3], [0, 0], [1, 1], [0, 0]])


# ---- 0-d and empty axes ----
def test_zero_dimensional_tensors():
  s = Tensor(np.array(2.5, np.float32))
  close(s.sum(0), np.float32(2.5)); close(s.sum(-1, keepdim=True), np.float32(2.5)); close(s.max(0), np.float32(2.5))
  close(s.softmax(), np.float32(1.0)); close(s.log_softmax(0), np.float32(0.0))
  close(s.unsqueeze(0), np.array([2.5], np.float32)); close(s.flatten(), np.array([2.5], np.float32))
  close(s[None], np.array([2.5], np.float32)); close(s[...] * 2, np.float32(5.0)); close(s.relu(), np.float32(2.5))
  close(s.argmax(), np.int32(0)); close(s.cumsum(), np.float32(2.5)); close(s.var(correction=0), np.float32(0.0))
  (g,) = gradient((s * s).sum(0), [s])
  close(g, np.float32(5.0))
  with pytest.raises(IndexError, match="axis 1"): s.sum(1)


def test_reductions_over_an_empty_axis():
  e = Tensor(np.ones((3, 4), np.float32)).expand(2, 3, 4)[:, :, :0]   # (2, 3, 0), a view: nothing to compute
  assert e.shape == (2, 3, 0)
  close(e.sum(-1), np.zeros((2, 3), np.float32)); close(e.prod(-1), np.ones((2, 3), np.float32))
  with pytest.raises(ValueError, match="empty"): e.max(-1)


def test_zero_size_shapes():   # shapes only: computing on empty buffers is the kernelizer's business (issue 18, 1)
  x = Tensor(X)
  assert [p.shape for p in x.split([4, 0], 1)] == [(3, 4), (3, 0)] and x[:, 4:].shape == (3, 0)
  assert Tensor.arange(0).shape == (0,) and x[[]].shape == (0, 4) and x[2:0:1].shape == (0, 4)
  assert x[::-1][3:].shape == (0, 4) and x.chunk(5, 1)[-1].shape == (3, 1)


# ---- random numbers ----
def test_rand_randint_are_seeded():
  np.testing.assert_array_equal(Tensor.rand(3, 2, seed=5).numpy(), Tensor.rand(3, 2, seed=5).numpy())
  Tensor.manual_seed(1)
  a = Tensor.randint(4, 5, low=-3, high=3).numpy()
  Tensor.manual_seed(1)
  b = Tensor.randint(4, 5, low=-3, high=3)
  np.testing.assert_array_equal(a, b.numpy())
  assert b.dtype is dtypes.i32 and a.min() >= -3 and a.max() < 3
  r = Tensor.rand(1000, seed=2).numpy()
  assert r.dtype == np.float32 and 0 <= r.min() and r.max() < 1


def test_dropout_is_seeded_and_scaled():
  x = Tensor(np.ones((50, 40), np.float32))
  a, b = x.dropout(0.25, seed=3).numpy(), x.dropout(0.25, seed=3).numpy()
  np.testing.assert_array_equal(a, b)
  assert set(np.unique(a)) == {0.0, np.float32(1 / 0.75)} and abs((a == 0).mean() - 0.25) < 0.03
  assert x.dropout(0.0) is x


def test_multinomial_is_seeded_and_follows_the_weights():
  p = np.array([0.1, 0.0, 0.6, 0.3], np.float32)
  a = Tensor(p * 5).multinomial(4000, replacement=True, seed=7).numpy()
  np.testing.assert_array_equal(a, Tensor(p * 5).multinomial(4000, replacement=True, seed=7).numpy())
  assert a.dtype == np.int32 and a.shape == (4000,)
  freq = np.bincount(a, minlength=4) / 4000
  assert freq[1] == 0 and np.abs(freq - p).max() < 0.03, freq
  b = Tensor(np.array([[0, 1, 0], [1, 0, 0]], np.float32)).multinomial(seed=1).numpy()
  np.testing.assert_array_equal(b, [[1], [0]])


# ---- dtypes: promotion and silent wrong values (issue 18 class 6) ----
PROMOTION = {
  "f32 + bool": (lambda: Tensor(X) + Tensor(X > 0), X + (X > 0), dtypes.f32),
  "f32 * i32": (lambda: Tensor(X) * Tensor(I), X * I.astype(np.float32), dtypes.f32),
  "i32 + 0.5": (lambda: Tensor(I) + 0.5, I + np.float32(0.5), dtypes.f32),
  "i32 + i64": (lambda: Tensor(I) + Tensor(I.astype(np.int64)), I.astype(np.int64) * 2, dtypes.i64),
  "u8 + i32": (lambda: Tensor(np.arange(4, dtype=np.uint8)) + Tensor(np.array([300, -1, 0, 1], np.int32)),
               np.array([300, 0, 2, 4], np.int32), dtypes.i32),
  "i64 index meets i32": (lambda: Tensor(np.array([1, 2], np.int64)).eq(Tensor([1, 3])), np.array([True, False]),
                          dtypes.bool),
  "bool + 1": (lambda: Tensor(X > 0) + 1, (X > 0) + 1, dtypes.i32),
  "exp of int": (lambda: Tensor(np.array([0, 1, 2], np.int32)).exp(), np.exp(np.array([0, 1, 2], np.float32)),
                 dtypes.f32),
  "sqrt of int": (lambda: Tensor(np.array([4, 9], np.int32)).sqrt(), np.array([2.0, 3.0], np.float32), dtypes.f32),
  "int / int": (lambda: Tensor(I) / Tensor(np.full((3, 4), 4, np.int32)), I / np.float32(4), dtypes.f32),
  "int // int": (lambda: Tensor(I) // Tensor(np.array([3, -3, 2, -2], np.int32)),
                 I // np.array([3, -3, 2, -2], np.int32), dtypes.i32),
  "int // 0": (lambda: Tensor(np.array([5, -5], np.int32)) // 0, np.array([0, 0], np.int32), dtypes.i32),
  "int % int": (lambda: Tensor(I) % 3, I % 3, dtypes.i32),
  "int div trunc": (lambda: Tensor(I).div(Tensor(np.array([3, -3, 0, 2], np.int32)), rounding_mode="trunc"),
                    np.array([[1, 2, 0, 2], [0, -3, 0, 0], [2, 0, 0, 1]], np.int32), dtypes.i32),
  "bool // bool": (lambda: Tensor(np.array([True, False])) // Tensor(np.array([True, True])), np.array([1, 0]),
                   dtypes.i32),
  "logical_not of float": (lambda: Tensor(np.array([0.0, 2.5, -1.0], np.float32)).logical_not(),
                           np.array([True, False, False]), dtypes.bool),
  "~ int": (lambda: ~Tensor(I), ~I, dtypes.i32),
  "int & |": (lambda: (Tensor(I) & 6) | Tensor(np.array([1, 0, 0, 0], np.int32)), (I & 6) | np.array([1, 0, 0, 0]),
              dtypes.i32),
  "where int and float": (lambda: (Tensor(I) > 0).where(Tensor(I), Tensor(X)), np.where(I > 0, I, X), dtypes.f32),
  "cat mixed": (lambda: Tensor.cat([Tensor(I), Tensor(X)], 0), np.concatenate([I, X]), dtypes.f32),
  "stack mixed": (lambda: Tensor.stack(Tensor(I), Tensor(X > 0)), np.stack([I, X > 0]), dtypes.i32),
  "bool sum counts": (lambda: Tensor(X > 0).sum(), (X > 0).sum(), dtypes.i64),
  "bool sum axis": (lambda: Tensor(X > 0).sum(1), (X > 0).sum(1), dtypes.i64),
  "i32 sum widens": (lambda: Tensor(np.full(4, 2**30, np.int32)).sum(), np.full(4, 2**30, np.int32).sum(), dtypes.i64),
  "i32 mean is float": (lambda: Tensor(I).mean(1), I.mean(1).astype(np.float32), dtypes.f32),
  "i32 min": (lambda: Tensor(np.array([dtypes.int.min, 5], np.int32)).min(), np.int32(dtypes.int.min), dtypes.i32),
  "u8 min": (lambda: Tensor(np.array([7, 255, 3], np.uint8)).min(), np.uint8(3), dtypes.u8),
  "int argmax": (lambda: Tensor(I).argmax(0), I.argmax(0), dtypes.i32),
  "big Python int": (lambda: Tensor([1 << 40, 3]), np.array([1 << 40, 3], np.int64), dtypes.i64),
  "small Python int": (lambda: Tensor([1, 2]), np.array([1, 2], np.int32), dtypes.i32),
  "NumPy scalars": (lambda: Tensor(I) * np.int64(2) + np.float32(0.5), I * 2 + np.float32(0.5), dtypes.f32),
}


@pytest.mark.parametrize("name", list(PROMOTION))
def test_dtype_promotion_follows_numpy_and_pytorch(name):
  fn, ref, dtype = PROMOTION[name]
  close(fn(), ref, 1e-6, dtype)


def test_dtype_limits():
  assert (dtypes.int.max, dtypes.int.min) == (2**31 - 1, -2**31)
  assert dtypes.i64.max == 2**63 - 1 and dtypes.u8.max == 255 and dtypes.bool.max is True
  assert dtypes.f32.max == math.inf


def test_nan_propagates_through_relu_maximum_and_clip():
  x = np.array([np.nan, -1.0, 0.0, 2.0], np.float32)
  close(Tensor(x).relu(), np.maximum(x, 0))
  close(Tensor(x).maximum(1.0), np.maximum(x, 1.0)); close(Tensor(np.float32(1.0)).maximum(Tensor(x)),
                                                           np.maximum(1.0, x))
  close(Tensor(x).minimum(1.0), np.minimum(x, 1.0)); close(Tensor(x).clip(-0.5, 0.5), np.clip(x, -0.5, 0.5))
  close(Tensor(x).relu6(), np.clip(x, 0, 6)); close(Tensor(x).sigmoid(), 1 / (1 + np.exp(-x)))


def test_max_reduction_with_nan_is_nan_wherever_it_is():
  for x in ([np.nan, 1.0, 2.0], [1.0, np.nan, 2.0], [1.0, 2.0, np.nan]):
    assert np.isnan(Tensor(np.array(x, np.float32)).max().item())


def test_eq_is_elementwise_and_truth_needs_one_element():
  t = Tensor(np.array([1.0, 2.0], np.float32))
  assert isinstance(t == t, Tensor)
  assert bool(Tensor(np.float32(3.0)) == 3.0)
  with pytest.raises(TypeError, match="ambiguous"): bool(t == t)


# ---- errors that name the problem (issue 18 class 12 and what stays unsupported) ----
A = Tensor(X)
BAD = {
  "reshape float": (lambda: A.reshape(6.0, 2), TypeError, r"integers.*6\.0"),
  "reshape bool": (lambda: A.reshape(True, 12), TypeError, r"integers"),
  "expand negative": (lambda: A[:1].expand(3, -5), ValueError, r"-5"),
  "zeros float": (lambda: Tensor.zeros(2.5), TypeError, r"2\.5"),
  "full negative": (lambda: Tensor.full((2, -1), 0.0), ValueError, r"non-negative"),
  "permute float": (lambda: A.permute(0.0, 1), TypeError, r"integers"),
  "too big an int": (lambda: Tensor([1 << 70]), TypeError, r"64 bits"),
  "int beyond dtype": (lambda: Tensor([1 << 40], dtype=dtypes.i32), OverflowError, r"i32"),
  "None values": (lambda: Tensor([None, 1.0]), TypeError, r"None"),
  "two ellipses": (lambda: A[..., ...], IndexError, r"ellipsis"),
  "float index tensor": (lambda: A[Tensor(np.array([0.0]))], TypeError, r"f64 Tensor"),
  "index list out of range": (lambda: A[[0, 3]], IndexError, r"index 3"),
  "gather out of range": (lambda: A.gather(1, Tensor(np.array([[4], [0], [0]]))), IndexError, r"index 4"),
  "gather rank": (lambda: A.gather(1, Tensor([0, 1])), ValueError, r"axes"),
  "split sizes": (lambda: A.split([1, 2], 1), ValueError, r"add up"),
  "chunk zero": (lambda: A.chunk(0), ValueError, r"positive"),
  "tril 1-d": (lambda: Tensor(B1).tril(), ValueError, r"2 dimensions"),
  "one_hot float": (lambda: A.one_hot(3), TypeError, r"integer"),
  "masked_fill float mask": (lambda: A.masked_fill(A, 0.0), TypeError, r"bool"),
  "cross_entropy target shape": (lambda: A.cross_entropy(Tensor([0, 1])), ValueError, r"targets"),
  "cross_entropy float targets shape": (lambda: A.cross_entropy(Tensor(np.ones(3, np.float32))), ValueError,
                                        r"probabilities"),
  "reduction name": (lambda: A.cross_entropy([0, 1, 2], reduction="avg"), ValueError, r"reduction"),
  "multinomial no replacement": (lambda: Tensor(np.ones(4, np.float32)).multinomial(2), NotImplementedError,
                                 r"replacement"),
  "arange step 0": (lambda: Tensor.arange(0, 5, 0), ValueError, r"step"),
  "bitwise float": (lambda: ~A, TypeError, r"bool or integer"),
  "neg bool": (lambda: -(A > 0), TypeError, r"bool"),
  "pow rounding": (lambda: A.div(2.0, rounding_mode="up"), ValueError, r"rounding_mode"),
  "cat axis twice": (lambda: A.cat(A, dim=0, axis=0), TypeError, r"not both"),
  "argmax empty": (lambda: A[:, :0].argmax(1), ValueError, r"empty"),
  "setitem": (lambda: A.__setitem__(0, 1.0), TypeError, r"immutable"),
}
B1 = np.ones(4, np.float32)


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_names_the_problem(name):
  fn, exc, pattern = BAD[name]
  with pytest.raises(exc, match=pattern): fn()


def test_a_bad_reshape_does_not_poison_a_good_one():
  with pytest.raises(TypeError): A.reshape(6.0, 2)
  out = A.reshape(6, 2)
  assert out.uop.arg == (6, 2) and all(type(s) is int for s in out.uop.arg)
  close(out + 0, X.reshape(6, 2))


# ---- uopc.nn masks (issue 18 class 6) ----
def test_attention_int_mask_is_a_boolean_mask():
  from uopc.nn import scaled_dot_product_attention as sdpa
  q, k, v = (rng.standard_normal((2, 8, 4)).astype(np.float32) for _ in range(3))
  m = rng.integers(0, 2, (8, 8)).astype(np.int64)
  m[:, 0] = 1
  want = sdpa(q, k, v, attn_mask=m.astype(bool)).numpy()
  np.testing.assert_allclose(sdpa(q, k, v, attn_mask=m).numpy(), want, rtol=1e-6)
  np.testing.assert_allclose(sdpa(q, k, v, attn_mask=Tensor(m.astype(np.int32))).numpy(), want, rtol=1e-6)
  with pytest.raises(TypeError, match="None"): sdpa(q, k, v, attn_mask=[[None] * 8] * 8)

"""uopc.nn.scaled_dot_product_attention and the uopc.kernels.flash kernels, against a float64 NumPy reference."""
import math
import numpy as np
import pytest
from uopc.nn import scaled_dot_product_attention as sdpa
from uopc.kernels.flash import flash_attention_ir
from uopc.render_c import render_c

pytestmark = pytest.mark.flash


def reference(q, k, v, mask=None, causal=False, scale=None):
  """softmax(q k^T scale + mask) v in float64; a row with every key masked gives zeros (as uopc promises)."""
  q, k, v = (x.astype(np.float64) for x in (q, k, v))
  s = q @ np.swapaxes(k, -1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
  if mask is not None: s = s + (np.where(mask, 0.0, -np.inf) if mask.dtype == np.bool_ else mask)
  if causal: s = s + np.triu(np.full(s.shape[-2:], -np.inf), 1)
  m = s.max(-1, keepdims=True)
  m = np.where(np.isfinite(m), m, 0.0)
  p = np.exp(s - m)
  l = p.sum(-1, keepdims=True)
  return np.where(l > 0, (p @ v) / np.where(l > 0, l, 1.0), 0.0)


rng = np.random.default_rng(0)
def rand(*shape): return rng.standard_normal(shape).astype(np.float32)


SHAPES = [((1, 1), (1, 1), 1), ((64, 16), (64, 16), 16), ((2, 3, 100, 48), (2, 3, 77, 48), 40),
          ((5, 33, 8), (1, 70, 8), 8)]


@pytest.mark.parametrize("shape_q,shape_k,dv", SHAPES)
def test_values(shape_q, shape_k, dv):
  q, k, v = rand(*shape_q), rand(*shape_k), rand(*shape_k[:-1], dv)
  assert np.abs(sdpa(q, k, v).numpy() - reference(q, k, v)).max() < 1e-5


@pytest.mark.parametrize("n", [1, 7, 50, 129])
def test_causal(n):
  q, k, v = rand(2, n, 32), rand(2, n, 32), rand(2, n, 32)
  assert np.abs(sdpa(q, k, v, is_causal=True).numpy() - reference(q, k, v, causal=True)).max() < 1e-5


def test_causal_loop_stops_at_the_diagonal():
  src = render_c(flash_attention_ir(1, 256, 256, 16, rows=8, keys=32, causal=True), "flash")
  key_loop = next(line for line in src.splitlines() if "ridx3 <" in line)
  assert "ridx3 < 8;" not in key_loop          # the bound is an expression of the query block, not all 8 tiles


def test_bool_and_additive_masks_and_fully_masked_rows():
  q, k, v = rand(2, 30, 16), rand(2, 45, 16), rand(2, 45, 16)
  m = rng.random((2, 30, 45)) > 0.3
  m[:, 3] = False                                # a row that attends to nothing: zeros, not NaN
  out = sdpa(q, k, v, attn_mask=m).numpy()
  assert not np.isnan(out).any() and np.all(out[:, 3] == 0)
  assert np.abs(out - reference(q, k, v, mask=m)).max() < 1e-5
  add = rand(30, 45)
  assert np.abs(sdpa(q, k, v, attn_mask=add, scale=0.3).numpy() - reference(q, k, v, mask=add, scale=0.3)).max() < 1e-5


@pytest.mark.parametrize("nq,nk,splits", [(1, 65536, None), (2, 5000, 7), (4, 3000, 3), (1, 100, 4)])
def test_flash_decoding(nq, nk, splits):
  q, k, v = rand(nq, 64), rand(nk, 64), rand(nk, 64)
  out = sdpa(q, k, v, splits=splits).numpy()
  assert np.abs(out - reference(q, k, v)).max() < 1e-5
  assert np.abs(out - sdpa(q, k, v, splits=1).numpy()).max() < 1e-5   # the single-pass kernel agrees


def test_flash_decoding_with_mask():
  q, k, v = rand(4, 16), rand(3000, 16), rand(3000, 16)
  m = rng.random((4, 3000)) > 0.5
  assert np.abs(sdpa(q, k, v, attn_mask=m, splits=5).numpy() - reference(q, k, v, mask=m)).max() < 1e-5


def test_state_lives_inside_the_parallel_loop():
  src = render_c(flash_attention_ir(2, 64, 64, 16), "flash")
  lines = src.splitlines()
  par = next(i for i, ln in enumerate(lines) if "#pragma omp parallel for" in ln)
  assert not any(ln.strip().startswith("float acc") for ln in lines[:par])


def test_bad_input():
  with pytest.raises(ValueError, match="differ in D"): sdpa(rand(4, 8), rand(4, 9), rand(4, 9))
  with pytest.raises(ValueError, match="differ in Nk"): sdpa(rand(4, 8), rand(5, 8), rand(6, 8))
  with pytest.raises(ValueError, match="do not broadcast"): sdpa(rand(2, 4, 8), rand(3, 4, 8), rand(3, 4, 8))
  with pytest.raises(ValueError, match="attn_mask"):
    sdpa(rand(4, 8), rand(5, 8), rand(5, 8), attn_mask=np.ones((3, 3), bool))
  with pytest.raises(TypeError, match="float64"): sdpa(rand(4, 8).astype(np.float64), rand(4, 8), rand(4, 8))
  with pytest.raises(ValueError, match="N, D"): sdpa(rand(8), rand(4, 8), rand(4, 8))


def test_matches_pytorch_when_installed():
  torch = pytest.importorskip("torch")
  q, k, v = rand(1, 2, 100, 32), rand(1, 2, 100, 32), rand(1, 2, 100, 32)
  for causal in (False, True):
    ref = torch.nn.functional.scaled_dot_product_attention(*(torch.from_numpy(x) for x in (q, k, v)), is_causal=causal)
    assert np.abs(sdpa(q, k, v, is_causal=causal).numpy() - ref.numpy()).max() < 1e-5


@pytest.mark.parametrize("causal", [False, True])
def test_cl_tensors_run_fa2_on_cl(causal):
  """Tensors on CL: FlashAttention-2 (uopc.kernels.fa2) through the OpenCL renderer, a CL result."""
  from uopc.tensor import Tensor
  import uopc.nn.attention as nn
  q, k, v = rand(2, 3, 200, 64), rand(2, 3, 200, 64), rand(2, 3, 200, 64)
  out = sdpa(*(Tensor(x, device="CL") for x in (q, k, v)), is_causal=causal)
  assert out.device == "CL" and any(key[0][0] == "fa2" and key[1] == "CL" for key in nn._programs)
  np.testing.assert_allclose(out.numpy(), reference(q, k, v, causal=causal), atol=1e-4)


def test_cl_tensors_with_a_mask_or_flash_decoding():
  """What FA2 does not cover runs the CPU's kernels through the OpenCL renderer."""
  from uopc.tensor import Tensor
  q, k, v = rand(2, 37, 16), rand(2, 300, 16), rand(2, 300, 16)
  mask = rng.random((37, 300)) < 0.7
  mask[3] = False   # a fully masked row gives zeros
  out = sdpa(*(Tensor(x, device="CL") for x in (q, k, v)), attn_mask=mask)
  np.testing.assert_allclose(out.numpy(), reference(q, k, v, mask=mask), atol=1e-5)
  dec = sdpa(*(Tensor(x, device="CL") for x in (q[:, :2], k, v)), splits=4)   # flash-decoding: two kernels
  np.testing.assert_allclose(dec.numpy(), reference(q[:, :2], k, v), atol=1e-5)

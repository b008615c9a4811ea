"""Errors that name the problem (issue 30, items 4, 5, 7): argument and shape errors are catchable as ValueError
and as PyTorch's RuntimeError; losses refuse targets out of range; checkpoints are written where they are named."""
import json
import subprocess
import sys
from pathlib import Path
import numpy as np
import pytest
from uopc.errors import UsageError
from uopc.nn import Linear
from uopc.nn.attention import scaled_dot_product_attention as sdpa
from uopc.nn.data import CharTokenizer
from uopc.tensor import Tensor

rng = np.random.default_rng(30)
A = Tensor(rng.standard_normal((3, 4)).astype(np.float32))
SHAPE_ERRORS = {
  "matmul": lambda: A @ A,
  "reshape": lambda: A.reshape(5, 3),
  "permute": lambda: A.permute(0, 0),
  "gather": lambda: A.gather(1, Tensor(np.zeros((5, 4), np.int32))),
  "cross_entropy": lambda: A.cross_entropy(Tensor(np.zeros(4, np.int32))),
  "broadcast": lambda: A + Tensor(np.zeros((5, 4), np.float32)),
}


@pytest.mark.parametrize("name", list(SHAPE_ERRORS))
@pytest.mark.parametrize("caught", [ValueError, RuntimeError, UsageError])
def test_shape_errors_are_caught_both_ways(name, caught):
  with pytest.raises(caught):
    SHAPE_ERRORS[name]()


def test_usage_error_is_both():
  assert issubclass(UsageError, ValueError) and issubclass(UsageError, RuntimeError)


@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss", "sparse_categorical_crossentropy"])
@pytest.mark.parametrize("target", [4, -3, 7])
def test_losses_refuse_targets_out_of_range(loss, target):
  y = np.array([0, target, 1], np.int32)
  with pytest.raises(IndexError, match=f"target {target} is out of bounds for 4 classes"):
    getattr(A, loss)(y)


def test_losses_accept_ignore_index():
  y = np.array([0, -100, 1], np.int32)
  got = A.log_softmax(-1).nll_loss(y, ignore_index=-100).item()
  lp = A.log_softmax(-1).numpy()
  np.testing.assert_allclose(got, -(lp[0, 0] + lp[2, 1]) / 2, rtol=1e-5)
  assert np.isfinite(A.sparse_categorical_crossentropy(np.array([0, -1, 1], np.int32)).item())


@pytest.mark.parametrize("splits", [0, -1, 2.5, True])
def test_sdpa_splits_must_be_a_positive_integer(splits):
  q = rng.standard_normal((1, 4, 8)).astype(np.float32)
  with pytest.raises(UsageError, match="splits must be a positive integer"):
    sdpa(q, q, q, splits=splits)


def test_sdpa_with_d_zero_names_the_scale():
  z, v = np.zeros((1, 4, 0), np.float32), np.ones((1, 4, 3), np.float32)
  with pytest.raises(UsageError, match="D = 0"): sdpa(z, z, v)
  np.testing.assert_allclose(sdpa(z, z, v, scale=1.0).numpy(), np.ones((1, 4, 3)))


def test_checkpoint_is_written_where_it_is_named(tmp_path):
  lin = Linear(3, 2)
  path = tmp_path / "m.ckpt"
  lin.save(path)
  assert path.exists() and not (tmp_path / "m.ckpt.npz").exists()
  other = Linear(3, 2)
  other.load(path)
  np.testing.assert_array_equal(other.weight.numpy(), lin.weight.numpy())
  lin.save(str(tmp_path / "m2.npz")); other.load(str(tmp_path / "m2.npz"))


def test_decode_names_ids_outside_the_alphabet():
  tok = CharTokenizer("abc")
  assert tok.decode([0, 2]) == "ac"
  with pytest.raises(UsageError, match=r"ids \[5\] are outside the alphabet of 3 characters"): tok.decode([0, 5])


def test_gpt_example_refuses_a_checkpoint_of_another_vocabulary(tmp_path):
  from uopc.nn import GPT, GPTConfig, save_npz
  cfg = GPTConfig(vocab_size=10, block_size=8, n_layer=1, n_head=1, n_embd=8)
  path = tmp_path / "other.ckpt"
  weights = {f"model.{k}": v for k, v in GPT(cfg).state_dict().items()}   # as uopc.nn.train.Trainer.save writes it
  save_npz({**weights, "__meta__": np.array(json.dumps({"config": cfg.to_dict()}))}, path)
  root = Path(__file__).resolve().parents[2]
  r = subprocess.run([sys.executable, str(root / "examples" / "gpt.py"), "--steps", "0", "--load", str(path),
                      "--sample", "0", "--eval-batches", "1"], capture_output=True, text=True, timeout=600,
                     env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
  assert r.returncode != 0 and "a model of 10 tokens" in r.stderr, r.stderr[-2000:]

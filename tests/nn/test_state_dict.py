"""A module's state is every parameter, frozen or not, and every buffer (PyTorch's rule); parameters() is what an
optimizer trains, so it leaves frozen ones out. Issue 47: a checkpoint once lost a frozen layer."""
import numpy as np
import pytest
from uopc.tensor import Tensor
from uopc.optim import SGD
from uopc.nn.layers import Module, Linear, buffer, load_npz


class Net(Module):
  def __init__(self, seed):
    self.c1, self.c2 = Linear(4, 3, seed=seed), Linear(3, 2, seed=seed + 1)
    self.stat = buffer(np.arange(3.0) + seed)                      # a running statistic: state, not trained
    self.scale = Tensor(np.ones(2, np.float32))                    # a plain attribute: neither (as in PyTorch)

  def __call__(self, x): return self.c2(self.c1(x).relu() + self.stat) * self.scale


NAMES = ["c1.weight", "c1.bias", "c2.weight", "c2.bias"]


def test_frozen_layer_stays_in_the_state_and_round_trips(tmp_path):
  a, b = Net(seed=0), Net(seed=10)
  for p in (a.c1.weight, a.c1.bias): p.requires_grad = False
  assert list(a.named_parameters()) == NAMES
  assert list(a.named_buffers()) == ["stat"]
  assert list(a.state_dict()) == NAMES + ["stat"]                          # attribute order, the buffer included
  assert [id(p) for p in a.parameters()] == [id(a.c2.weight), id(a.c2.bias)]   # what the optimizer trains
  assert a.num_parameters() == 4 * 3 + 3 + 3 * 2 + 2

  x = Tensor(np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32))
  frozen_before = a.c1.weight.numpy().copy()
  opt = SGD(a.parameters(), lr=0.1)
  for _ in range(2):
    opt.zero_grad(); (a(x) ** 2).sum().backward(); opt.step()
  np.testing.assert_array_equal(a.c1.weight.numpy(), frozen_before)   # the frozen layer did not move
  assert not a.c1.weight.requires_grad

  a.save(tmp_path / "a.npz")
  saved = load_npz(tmp_path / "a.npz")
  assert set(saved) == set(NAMES + ["stat"])
  b.load(tmp_path / "a.npz")
  for k, v in a.state_dict().items(): np.testing.assert_array_equal(b.state_dict()[k], v)
  np.testing.assert_array_equal(b(x).numpy(), a(x).numpy())
  with pytest.raises(KeyError, match=r"missing \['c1.bias', 'c1.weight'\]"):
    b.load_state_dict({k: v for k, v in saved.items() if not k.startswith("c1.")})


def test_unfreezing_trains_again():
  a = Net(seed=0)
  a.c1.weight.requires_grad = False
  a.c1.weight.requires_grad = True
  assert list(a.named_parameters()) == NAMES and len(a.parameters()) == 4

"""Bad input gets a clear exception that names the argument and the rule, as PyTorch raises it, never a silent crop,
drop or zero (issue 47): conv/pool padding, output_padding, interpolate's scale_factor, scatter's index, float sizes,
kernel_size=0, einsum's output, linspace's dtype, scatter's src dtype, and computed indices out of range (uopc.bounds).
"""
import numpy as np
import pytest
from uopc import Tensor, TinyJit, nn

x = Tensor(np.ones((1, 1, 6, 6), np.float32))
w = Tensor(np.ones((1, 1, 3, 3), np.float32))

CASES = [   # (what, call, exception, words the message must hold)
  ("negative conv padding", lambda: x.conv2d(w, padding=-1), ValueError, "padding"),
  ("negative conv padding pairs", lambda: x.conv2d(w, padding=((1, -1), (0, 0))), ValueError, "non-negative"),
  ("negative pool padding", lambda: x.max_pool2d(2, padding=-1), ValueError, "padding"),
  ("output_padding >= stride", lambda: x.conv_transpose2d(w, stride=2, output_padding=2), ValueError,
   "output_padding"),
  ("output_padding >= stride, module", lambda: nn.ConvTranspose2d(1, 1, 3, stride=1, output_padding=1), ValueError,
   "output_padding"),
  ("interpolate scale_factor=0", lambda: x.interpolate(scale_factor=0), ValueError, "scale_factor"),
  ("interpolate scale_factor<0", lambda: x.interpolate(scale_factor=-2), ValueError, "scale_factor"),
  ("interpolate size=0", lambda: x.interpolate(size=0), ValueError, "size"),
  ("scatter index past the axis", lambda: Tensor.zeros(3).scatter(0, Tensor(np.array([0, 5])), Tensor([1.0, 2.0])),
   IndexError, "index 5"),
  ("scatter_reduce negative index",
   lambda: Tensor.zeros(3).scatter_reduce(0, Tensor(np.array([0, -1])), Tensor([1.0, 2.0]), "sum"), IndexError,
   "index -1"),
  ("scatter src of another dtype",
   lambda: Tensor.zeros(3).scatter(0, Tensor(np.array([0, 1])), Tensor([1.0, 2.0]).half()), TypeError, "dtype"),
  ("float kernel_size", lambda: x.max_pool2d(2.0), TypeError, "kernel_size"),
  ("float kernel_size in a tuple", lambda: x.avg_pool2d((2, 2.0)), TypeError, "kernel_size"),
  ("float stride", lambda: x.max_pool2d(2, stride=1.5), TypeError, "stride"),
  ("float kernel_size, module", lambda: nn.Conv2d(1, 1, 3.0), TypeError, "kernel_size"),
  ("float split size", lambda: Tensor(np.ones(4)).split(2.0), TypeError, "split"),
  ("kernel_size=0", lambda: x.max_pool2d(0), ValueError, "kernel_size"),
  ("kernel_size=0, module", lambda: nn.MaxPool2d(0), ValueError, "kernel_size"),
  ("einsum 'ij->ii'", lambda: Tensor.einsum("ij->ii", Tensor(np.ones((2, 2)))), ValueError, "'ij->ii'"),
  ("linspace dtype=bool", lambda: Tensor.linspace(0, 1, 5, dtype="bool"), RuntimeError, "bool"),
  ("computed index past the axis", lambda: Tensor(np.arange(5.0))[Tensor.arange(4) + 3].numpy(), IndexError,
   "out of bounds"),
  ("computed gather index", lambda: Tensor(np.ones((2, 3))).gather(1, Tensor(np.array([[0, 1], [2, 0]])) * 2).numpy(),
   IndexError, "gather"),
]


@pytest.mark.parametrize("what, call, exc, words", CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_naming_the_argument(what, call, exc, words):
  with pytest.raises(exc, match=words.replace("(", r"\(")): call()


def test_good_input_next_to_the_bad_still_works():
  np.testing.assert_array_equal(Tensor(np.arange(5.0))[Tensor.arange(4) + 1].numpy(), [1, 2, 3, 4])
  np.testing.assert_array_equal(Tensor(np.arange(5.0))[Tensor.arange(2) - 5].numpy(), [0, 1])   # negatives count back
  np.testing.assert_array_equal(Tensor.zeros(3).scatter(0, Tensor(np.array([2, 0])), Tensor([1.0, 2.0])).numpy(),
                                [2, 0, 1])
  assert x.conv_transpose2d(w, stride=2, output_padding=1).shape == (1, 1, 14, 14)
  assert x.interpolate(scale_factor=0.5).shape == (1, 1, 3, 3)


def test_a_batch_of_zero_through_conv_gives_zero_gradients():
  weight = Tensor(np.ones((2, 1, 3, 3), np.float32), requires_grad=True)
  loss = Tensor(np.zeros((0, 1, 5, 5), np.float32)).conv2d(weight).sum()
  loss.backward()
  assert loss.item() == 0 and weight.grad is not None   # PyTorch: zeros, not None
  np.testing.assert_array_equal(weight.grad.numpy(), np.zeros((2, 1, 3, 3)))
  assert np.isnan(Tensor(np.zeros((0, 3))).mean().item())   # the mean of nothing, as PyTorch's


def test_a_captured_step_with_a_computed_index_replays():
  step = TinyJit(lambda a, i: (a[i + 1] * 2).realize())
  for k in range(4):
    np.testing.assert_array_equal(step(Tensor(np.arange(5.0) + k), Tensor(np.array([0, 1, 2]))).numpy(),
                                  2 * (np.arange(1, 4) + k))

"""A NaN in a max, min or sum is NaN wherever it is (issue 30, item 6; issue 18): in every position of the
reduced axis, reduced alone or fused into a bigger expression, on CPU and CL. Options.book_max keeps the book's
((a>b)?a:b) update, which drops a NaN that numbers follow (chapter 11's pitfall)."""
import numpy as np
import pytest
from uopc.kernelize import make_plan, realize
from uopc.options import Options
from uopc.tensor import Tensor

DEVICES = ["CPU", "CL"]
REDUCE = {"max": np.max, "min": np.min, "sum": np.sum}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", list(REDUCE))
@pytest.mark.parametrize("n", [3, 17])
def test_nan_in_every_position_of_a_full_reduction(device, op, n):
  for pos in range(n):
    x = np.arange(n, dtype=np.float32) - 3
    x[pos] = np.nan
    t = Tensor(x, device=device)
    assert np.isnan(getattr(t, op)().item()), (op, pos)                       # alone
    assert np.isnan((getattr(t * 2, op)() + 1).item()), (op, pos)             # fused before and after
    assert np.isnan(getattr(t.realize(), op)().item()), (op, pos)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", list(REDUCE))
@pytest.mark.parametrize("axis", [0, 1])
def test_nan_along_an_axis(device, op, axis):
  rng = np.random.default_rng(18)
  x = rng.standard_normal((5, 7)).astype(np.float32)
  for k in range(min(x.shape)): x[k, k] = np.nan          # one NaN in each row and column, at each position
  x[4, 6] = np.nan
  want = REDUCE[op](x, axis=axis)
  got = getattr(Tensor(x, device=device), op)(axis).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-5)          # NaN where NumPy has NaN
  fused = (getattr(Tensor(x, device=device) - 1, op)(axis) * 2).numpy()
  np.testing.assert_allclose(fused, REDUCE[op](x - 1, axis=axis) * 2, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_elementwise_maximum_and_softmax_keep_nan(device):
  x = np.array([[np.nan, 1, 2], [1, np.nan, 2], [1, 2, np.nan], [1, 2, 3]], np.float32)
  np.testing.assert_array_equal(np.isnan(Tensor(x, device=device).softmax(1).numpy()).all(1), [1, 1, 1, 0])
  np.testing.assert_array_equal(Tensor(x, device=device).max(1, keepdim=True).numpy()[:, 0], np.max(x, 1))


def test_acceptance_examples():
  for dev in DEVICES:
    for x in ([np.nan, 1, 2], [1, np.nan, 2], [1, 2, np.nan]):
      assert np.isnan(Tensor(np.array(x, np.float32), device=dev).max().item())
      assert np.isnan(Tensor(np.array(x, np.float32), device=dev).realize().max().realize().item())


def test_book_max_option_renders_the_books_update():
  """The book's kernel: ((a>b)?a:b), which keeps a NaN only at the end; the default writes a!=a too."""
  rows = ([np.nan, 1.0, 2.0], [1.0, np.nan, 2.0], [1.0, 2.0, np.nan])
  got = [realize([Tensor(np.array(x, np.float32)).max().uop], options=Options(book_max=True))[0].item() for x in rows]
  assert got[:2] == [2.0, 2.0] and np.isnan(got[2])
  u = Tensor(np.array(rows[0], np.float32)).max().uop
  book = make_plan([u], options=Options(book_max=True)).kernels[-1].src
  ours = make_plan([u], options=Options()).kernels[-1].src
  assert "?" in book and "!=" not in book and "!=" in ours


def test_integer_max_keeps_the_plain_text():
  u = Tensor(np.arange(5, dtype=np.int32)).max().uop
  assert "!=" not in make_plan([u], options=Options()).kernels[-1].src
  assert Tensor(np.array([3, -7, 9, 2], np.int32)).max().item() == 9

"""The week-5 assignment (chapters 9-10) and its grader: full marks for the solution, zero for the generated stubs,
and for a wrong answer to every task a partial mark with a message that names the fault."""
import pytest
from assignment_grading import Wrong, make_tests

pytestmark = pytest.mark.week5

WRONG = [
  # eps added outside the square root: var is right, layernorm is off where eps matters
  Wrong("variance and LayerNorm", "(var(x) + eps).sqrt().recip()", "(var(x).sqrt() + eps).recip()",
        "layernorm(x of shape (5, 8), eps=1e-05): max abs error"),
  # the seed ignored: the gradient of fn(x).sum()
  Wrong("vector-Jacobian product", "seed=Tensor(np.asarray(v, np.float64))", "seed=Tensor(np.ones(np.shape(v)))",
        "vjp(x * x, x, v) (expected 2 x v): max abs error"),
  # the kernel flipped: a convolution in the textbook's sense, not PyTorch's cross-correlation
  Wrong("convolution as a view", "w.reshape(1, F, C, 1, 1, kh, kw)).sum((2, 5, 6))",
        "w.flip((2, 3)).reshape(1, F, C, 1, 1, kh, kw)).sum((2, 5, 6))",
        "conv2d(x (2, 2, 7, 7), w (3, 2, 3, 3), stride=1, padding=0): max abs error"),
  # the result's write forgotten
  Wrong("GEMM intensity", "(itemsize * (n * k + k * m + n * m))", "(itemsize * (n * k + k * m))",
        "gemm_intensity(1024, 1024, 1024, 4): max abs error"),
  # only the accumulators counted against the registers, not the loaded values: in 5 registers, 2x2 (8 in all)
  Wrong("the best tile", "if tile_cost(tm, tn)[1] <= registers]", "if tm * tn <= registers]",
        "best_tile(5): expected (2, 1), found (2, 2)"),
]

test_solution_scores_full_marks, test_stub_scores_zero_and_fails_only_with_its_stubs, \
  test_wrong_answers_score_partially_and_say_why = make_tests("week5_tensor_and_fast_kernel", WRONG, n_tasks=5)

"""The week-1 assignment (chapters 1-2) and its grader: full marks for the solution, zero for the generated stubs,
and for a wrong answer to every task a partial mark with a message that names the fault."""
import pytest
from assignment_grading import Wrong, make_tests

pytestmark = pytest.mark.week1

WRONG = [
  # the output forgotten in the I/O bytes
  Wrong("cost table", "io_bytes = 4 * itemsize * N * D", "io_bytes = 3 * itemsize * N * D",
        "cost(1024, D=64, itemsize=4)['io_bytes']: max abs error"),
  # right values, but all N x N at once: the structure test measures the peak memory
  Wrong("blocked attention", "  out = np.empty((len(q), v.shape[1]), np.result_type(q, v))",
        "  return attention(q, k, v)", "above the bound of 33,554,432 bytes"),
  # contiguity never checked
  Wrong("check the arguments", "      if not a.flags.c_contiguous:", "      if False:",
        "axpy with a strided view for `float* y`: raised ValueError('ndarray is not C-contiguous'), expected Type"),
  # a sign wrong
  Wrong("a fused kernel", "c[i] * d[i] - a[i]", "c[i] * d[i] + a[i]", "fused, n = 1: out: max abs error"),
]

test_solution_scores_full_marks, test_stub_scores_zero_and_fails_only_with_its_stubs, \
  test_wrong_answers_score_partially_and_say_why = make_tests("week1_why_compile", WRONG, n_tasks=4)

"""The week-3 assignment (a GEMM by hand in the loop IR) and its grader: full marks for the solution, zero for the
generated stubs, and for a wrong answer to every task a partial mark with a message that names the fault."""
import pytest
from assignment_grading import Wrong, make_tests

pytestmark = pytest.mark.week3

WRONG = [
  # loops in the wrong order: right values, so the structure test says what it found
  Wrong("naive GEMM", "i, j, k = range_(M, 0, AxisType.THREAD), range_(N, 1), range_(K, 2)",
        "j, i, k = range_(N, 0, AxisType.THREAD), range_(M, 1), range_(K, 2)",
        "expected loops [67 trips at depth 0, 33 trips at depth 1, 29 trips at depth 2], found [33 trips at depth 0"),
  # the bottom strip over all the columns: right values, but the corner the right strip wrote is written again (the
  # task says every element once); issue 43 found it passing everything
  Wrong("4x4 register tile", "gemm_strip((M4, M), (0, N4), 6, 17)", "gemm_strip((M4, M), (0, N), 6, 17)",
        "gemm_tiled(7, 6, 3): element (4, 4) of C is stored 2 times, expected once"),
  # B^T read as if it were B
  Wrong("B transposed", "BT.index(simplify(j * K + k))", "BT.index(simplify(k * N + j))",
        "gemm_naive_bt(5, 7, 3): C: max abs error"),
  # counted over the whole source, not one step of the k loop
  Wrong("loads and multiply-adds", 'body = "\\n".join(loop_body(src, 2))', "body = src",
        "k_step_counts(1x4 tile + strip): expected (5, 4), found (7, 5)"),
  # the row sums forgotten in the prediction; count_exps is right, so the task keeps its point for it
  Wrong("count the exps", "return N * N + N * D * N", "return N * D * N",
        "predicted_exps(32, 4) (the fused kernel's C computes 5120): expected 5120, found 4096"),
]

test_solution_scores_full_marks, test_stub_scores_zero_and_fails_only_with_its_stubs, \
  test_wrong_answers_score_partially_and_say_why = make_tests("week3_gemm_by_hand", WRONG, n_tasks=5)

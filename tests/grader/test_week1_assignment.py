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


def test_a_right_call_that_raises_is_named_with_its_arguments(tmp_path):
  """issue 49: a CheckedProgram that checks the int parameter as an array raised a bare TypeError on the right
  arguments; the grader names the call, its arguments, and what it raised."""
  import nbformat
  from assignment_grading import ROOT, grade, with_wrong
  wrong = [Wrong("check the arguments", '      if t.kind != "pointer": continue\n', "", ""),
           Wrong("check the arguments", "want = np.dtype(C_TYPES[t.item.cname])",
                 'want = np.dtype(C_TYPES[t.item.cname if t.kind == "pointer" else t.cname])', "")]
  mine = tmp_path / "int_as_array.ipynb"
  nbformat.write(with_wrong(ROOT / "solutions" / "week1_why_compile.ipynb", wrong), mine)
  task = grade(mine, tmp_path, "--seed", "1", "--only", "check the arguments")["tasks"]["check the arguments"]
  said = " | ".join(t["error"] for t in task["tests"])
  assert task["points"] == 0, said
  assert "CheckedProgram(axpy)(y, x, 4, idx), the right arguments for axpy(float* y, const double* x, int n, const " \
         "int* idx): float32 y, float64 x, the int 4, int32 idx, each C-contiguous: expected no error, got " \
         "TypeError('argument 2: a int, expected a int32 array')" in said, said

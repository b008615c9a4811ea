"""The week-4 assignment (chapters 7-8) and its grader: full marks for the solution, zero for the generated stubs,
and for a wrong answer to every task a partial mark with a message that names the fault."""
import pytest
from assignment_grading import Wrong, make_tests

pytestmark = pytest.mark.week4

WRONG = [
  # PAD's (before, after) read the other way round
  Wrong("shrink and pad", "np.pad(x, u.arg)", "np.pad(x, [p[::-1] for p in u.arg])",
        "run_plan(x.pad(((1, 2), (0, 3)))): max abs error"),
  # the add of the multiply-add forgotten
  Wrong("matmul FLOPs", "return 2 * n * m * k", "return n * m * k",
        "matmul_flops(64, 32, 16) (the plan's kernels count 65536): expected 65536, found 32768"),
  # fresh temporaries on every run: right values, but the structure test sees new arrays
  Wrong("reused temporaries", "    if id(plan) not in self.temps: self.temps[id(plan)]", "    self.temps[id(plan)]",
        "was a different array on a later run of the same plan"),
  # the runs' times added up, not the best of them: a kernel's time is then longer than a run of the plan
  Wrong("DEBUG lines", "min(times[k])", "sum(times[k])", "the kernels' best times add up to"),
]

test_solution_scores_full_marks, test_stub_scores_zero_and_fails_only_with_its_stubs, \
  test_wrong_answers_score_partially_and_say_why = make_tests("week4_kernelize_and_realize", WRONG, n_tasks=4)

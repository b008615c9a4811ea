"""The week-2 assignment (chapters 3-4) and its grader: full marks for the solution, zero for the generated stubs,
and for a wrong answer to every task a partial mark with a message that names the fault."""
import pytest
from assignment_grading import Wrong, make_tests

pytestmark = pytest.mark.week2

WRONG = [
  # only one order of the two terms
  Wrong("the divmod rule", "    (Pat(Ops.ADD, (mod, div_mul)), lambda x, c: x if c.arg != 0 else None),", "",
        "divmod_rules, terms the other way round: ((ridx2%7)+((ridx2//7)*7)) became"),
  # no divisibility condition
  Wrong("mod of a mod", "a.arg % b.arg == 0", "True",
        "mod_mod_rules, 4 does not divide 6: ((ridx2%6)%4) was rewritten to (ridx2%4), which differs at"),
  # the row loop not a THREAD loop: right values and no race, but not parallel (an accumulator declared outside the
  # parallel loop is a race uopc.races reads from the program: the values test's first verdict, as for the prefix sum)
  Wrong("running argmax", "  i = range_(R, 0, AxisType.THREAD)\n  m, idx", "  i = range_(R, 0)\n  m, idx",
        "argmax_program: no parallel loop (make the row loop AxisType.THREAD)"),
  # the loop made a THREAD loop: right on one thread, a race on several (issue 43: it passed make check); read from
  # the program (uopc.races), so found on any machine (issue 49)
  Wrong("prefix sum", "k = range_(n, 0)", "k = range_(n, 0, AxisType.THREAD)",
        "prefix_sum_program(1000): a race: in THREAD loop ridx0 (0 <= ridx0 < 1000), one iteration stores to acc0[0]"),
]

test_solution_scores_full_marks, test_stub_scores_zero_and_fails_only_with_its_stubs, \
  test_wrong_answers_score_partially_and_say_why = make_tests("week2_uops_and_loops", WRONG, n_tasks=4)

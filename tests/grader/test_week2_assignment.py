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
        "argmax_program(16, 8): no parallel loop (make the row loop, 16 rows, AxisType.THREAD)"),
  # the loop made a THREAD loop: right on one thread, a race on several (issue 43: it passed make check); read from
  # the program (uopc.races), so found on any machine (issue 49)
  Wrong("prefix sum", "k = range_(n, 0)", "k = range_(n, 0, AxisType.THREAD)",
        "prefix_sum_program(1000): a race: in THREAD loop ridx0 (0 <= ridx0 < 1000), one iteration stores to acc0[0]"),
]

test_solution_scores_full_marks, test_stub_scores_zero_and_fails_only_with_its_stubs, \
  test_wrong_answers_score_partially_and_say_why = make_tests("week2_uops_and_loops", WRONG, n_tasks=4)


def test_a_parallel_column_loop_is_named_by_the_grader_not_the_accumulators(tmp_path):
  """issue 49: the row loop plain and the column loop THREAD: the accumulators sit right, inside the row loop; the
  messages name the column loop's race (or, where a run happens to agree, the parallel loop of 8 trips), never the
  accumulators' place, and the task loses its points."""
  import nbformat
  from assignment_grading import ROOT, grade, with_wrong
  wrong = [Wrong("running argmax", "i = range_(R, 0, AxisType.THREAD)", "i = range_(R, 0)", ""),
           Wrong("running argmax", "j = range_(C, 1)", "j = range_(C, 1, AxisType.THREAD)", "")]
  mine = tmp_path / "column.ipynb"
  nbformat.write(with_wrong(ROOT / "solutions" / "week2_uops_and_loops.ipynb", wrong), mine)
  task = grade(mine, tmp_path, "--seed", "1")["tasks"]["running argmax"]
  said = " | ".join(t["error"] for t in task["tests"])
  assert task["points"] < task["max"], said
  assert "declared outside" not in said, said
  assert "a race: in THREAD loop ridx1 (0 <= ridx1 < " in said or "parallel loops of [8] trips; expected the row loop" \
    in said, said

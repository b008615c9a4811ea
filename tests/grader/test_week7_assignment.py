"""The week-7 assignment (chapters 13-14) and its grader: full marks for the solution, zero for the generated stubs,
and for a wrong answer to every task a partial mark with a message that names the fault."""
import pytest
from assignment_grading import Wrong, make_tests

pytestmark = pytest.mark.week7

WRONG = [
  # the two bits of the register index swapped: rows 8-15 land in registers 4-7 and columns 8-15 in 2-3
  Wrong("fragment layout", "c % 2 + 2 * (r // 8) + 4 * (c // 8)", "c % 2 + 4 * (r // 8) + 2 * (c // 8)",
        "a_owner(0, 8) (the lane and register holding A[0][8]): expected (0, 4), found (0, 2)"),
  # the accumulator C forgotten: D = A @ B
  Wrong("emulate one mma", "return (A @ B + C)[p[..., 0], p[..., 1]]", "return (A @ B)[p[..., 0], p[..., 1]]",
        "It is A @ B: the accumulator C was not added"),
  # a row always padded, even one that is conflict-free as it is; a_read_cycles is right and keeps its point
  Wrong("bank conflicts", "range(bk, bk + 32)", "range(bk + 1, bk + 32)",
        "conflict_free_row(9, 4): expected 9, found 10"),
  # the untied head forgotten
  Wrong("count the parameters", "head = 0 if cfg.tie_weights else cfg.vocab_size * C", "head = 0",
        "gpt_parameters(GPTConfig(tie_weights=False)): expected 61888, found 57024"),
  # no bias correction
  Wrong("AdamW step", "mhat, vhat = m / (1 - b1 ** t), v / (1 - b2 ** t)", "mhat, vhat = m, v",
        "It is what AdamW gives when the bias corrections are missing"),
  # the split rule (issue 47): x.max's own gradient, shared among tied maxima, where PyTorch's max(dim) gives it whole
  # to the first; the values are right
  Wrong("max's gradient", "  return first.where(x, 0.0).sum(axis)", "  return x.max(axis)",
        "It is the gradient shared equally among the tied maxima (amax's rule, which x.max(axis) follows)"),
]

test_solution_scores_full_marks, test_stub_scores_zero_and_fails_only_with_its_stubs, \
  test_wrong_answers_score_partially_and_say_why = make_tests("week7_gpu_machinery_and_a_gpt", WRONG, n_tasks=6)


def test_max_pool_over_the_whole_row_is_a_shortcut(tmp_path):
  """max_pool's own gradient rule is this task's answer (the first maximum of a window): a max_first that pools over
  the whole axis scores 0, naming the guard; the other tasks keep their points."""
  import nbformat
  from assignment_grading import ROOT, grade, with_wrong
  pooled = ("  moved = x.transpose(axis, -1)\n"
            "  flat = moved.reshape(1, -1, moved.shape[-1])\n"
            "  return flat.max_pool1d(moved.shape[-1]).reshape(*moved.shape[:-1])")
  wrong = [Wrong("max's gradient", "  return first.where(x, 0.0).sum(axis)", pooled, "")]
  mine = tmp_path / "pooled.ipynb"
  nbformat.write(with_wrong(ROOT / "solutions" / "week7_gpu_machinery_and_a_gpt.ipynb", wrong), mine)
  score = grade(mine, tmp_path, "--seed", "1")
  task = score["tasks"]["max's gradient"]
  said = " | ".join(t["error"] for t in task["tests"])
  assert task["points"] == 0 and "ShortcutUnavailable: uopc.mixin.windows._max_pool_grad" in said, said
  assert score["total"] == score["max"] - 2, score["table"]

"""A wrong answer to any task of weeks 1-7 fails that task's visible checks, with an AssertionError that names what
is wrong and shows expected against got: what `make check WEEK=n` (tests/course/test_student_checks.py) reports.

The wrong answers are the ones the grader's tests keep (WRONG of tests/test_week<n>_assignment.py: one per task, the
solution with one region changed). Each is planted into the generated assignment notebook: the task's stub cell is
replaced by the solution's cell with the wrong answer in it. Each week's notebook gets all of its wrong answers at
once and runs once, in a kernel of its own, through test_student_checks' own machinery (each task's cells are judged
separately, so one wrong task does not hide another's failure).
"""
import importlib
import re
import sys
from pathlib import Path
import nbformat
import pytest
import test_student_checks as student
from assignment_grading import Wrong
from needs import needs_openmp
from uopc.runtime.cl import cl_unavailable

ROOT = Path(__file__).resolve().parents[2]
TASK = re.compile(r"^\s*#\s*TASK:\s*(.+?)\s*$", re.M)
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
HIDDEN = {"hidden-test", "hidden-setup", "answer"}   # the cells scripts/assignments.py leaves out
WEEKS = {1: "week1_why_compile", 2: "week2_uops_and_loops", 3: "week3_gemm_by_hand", 4: "week4_kernelize_and_realize",
         5: "week5_tensor_and_fast_kernel", 6: "week6_flash_attention", 7: "week7_gpu_machinery_and_a_gpt"}


GRADER_TESTS = Path(__file__).resolve().parents[1] / "grader"   # the grader's tests keep the wrong answers


def wrongs(week: int) -> list:
  if str(GRADER_TESTS) not in sys.path: sys.path.append(str(GRADER_TESTS))   # also where their folder is not collected
  return importlib.import_module(f"test_week{week}_assignment").WRONG


def planted(name: str, wrong: list) -> nbformat.NotebookNode:
  """assignments/<name>.ipynb with the stub of every task that has a wrong answer replaced by that wrong answer."""
  solution = nbformat.read(ROOT / "solutions" / f"{name}.ipynb", as_version=4)
  visible = [c for c in solution.cells if not HIDDEN & set(c.metadata.get("tags", []))]
  nb = nbformat.read(ROOT / "assignments" / f"{name}.ipynb", as_version=4)
  assert len(visible) == len(nb.cells), f"{name}: the assignment's cells do not line up with the solution's"
  used = {id(w): 0 for w in wrong}
  for sol, cell in zip(visible, nb.cells):
    if sol.cell_type != "code": continue
    here = [w for w in wrong if w.task in TASK.findall(sol.source) and w.old in sol.source]
    if not here: continue
    source = sol.source
    for w in here:
      source = source.replace(w.old, w.new)
      used[id(w)] += 1
    cell.source = "\n".join(line for line in source.split("\n") if line.strip() not in MARKERS)
  assert all(n == 1 for n in used.values()), f"{name}: a wrong answer is not in exactly one task cell"
  return nb


@pytest.mark.parametrize("week", sorted(WEEKS))   # week 2's race is read from the program: no OpenMP needed
def test_a_wrong_answer_fails_its_visible_checks_with_a_message(week, tmp_path):
  if week == 6 and (why := cl_unavailable()): pytest.skip(f"week 6's row max kernel runs on device CL: {why}")
  name, wrong = WEEKS[week], wrongs(week)
  path = tmp_path / f"{name}.ipynb"
  nbformat.write(planted(name, wrong), path)
  tasks = student.tasks(path)
  assert set(tasks) == {w.task for w in wrong}, "one wrong answer per task"
  for task in tasks:
    with pytest.raises(pytest.fail.Exception) as failed: student.test_visible_checks(path, task)
    message = str(failed.value)
    assert f"task {task!r}, code cell " in message and "): AssertionError: " in message, message
    assert "expected" in message and task in message, message


# Week 6 (issue 41): a visible check tests the student's helper on known values before it uses it, so a wrong helper
# is named, not the right answer the helper is then compared with; and exercise 7's checks count the plan's kernels.
HELPERS_WRONG = [
  # a pass counter that counts the row loop too: the old checks said "predicted_passes(8) ...: expected 11, got 10"
  Wrong("count the passes", "if n == n_keys and open_loops:", "if n == n_keys:",
        "count_key_passes(the worked example's toy source, 48): expected 3, got 4"),
  # P stored, but by an unfused plan: its temporaries hold P, its kernels are not the fused plan's and one more
  Wrong("upcast the head", "return out.reshape(q.shape[0], v.shape[1]), make_plan(roots, True, FlashOpt)",
        "return out.reshape(q.shape[0], v.shape[1]), make_plan(roots, False, FlashOpt)",
        "the staged plan's kernels: the fused plan's, and one more that stores P: expected 3, got"),
]


def test_week6_checks_name_the_wrong_helper_and_count_the_kernels(tmp_path):
  if why := cl_unavailable(): pytest.skip(f"week 6's row max kernel runs on device CL: {why}")
  name = WEEKS[6]
  path = tmp_path / f"{name}.ipynb"
  nbformat.write(planted(name, HELPERS_WRONG), path)
  for w in HELPERS_WRONG:
    with pytest.raises(pytest.fail.Exception) as failed: student.test_visible_checks(path, w.task)
    said = str(failed.value)
    assert f"task {w.task!r}, code cell" in said and f": AssertionError: {w.says}" in said, said


def test_check_messages_name_the_quantity_and_show_expected_against_got(capsys):
  import numpy as np
  from uopc.checks import check, check_below, check_raises, check_runs
  cases = [
    (lambda: check("cost(1)", {"flops": 4, "io": 2}, {"flops": 4, "io": 3}), "cost(1)['io']: expected 3, got 2"),
    (lambda: check("out", np.array([1.0, np.nan]), np.ones(2), atol=1e-6), "out: NaN in 1 of 2 elements"),
    (lambda: check("out", np.ones((2, 3)), np.ones((3, 2))), "out: expected shape (3, 2), got shape (2, 3)"),
    (lambda: check("C", np.eye(2), np.eye(2) * 2, atol=1e-4), "C: 2 of 4 elements differ; max abs error 1"),
    (lambda: check("decls", ["int acc1;"], []), "decls: expected [], got ['int acc1;']"),
    (lambda: check_below("peak", 5, 4), "peak: expected below 4, got 5"),
    (lambda: check_raises("f()", lambda: None, TypeError), "f(): expected TypeError, got no error"),
    (lambda: check_raises("g()", lambda: int("x"), TypeError, ("arg",)), "g(): expected TypeError whose message"),
    (lambda: check_runs("int('x')", lambda: int("x")),
     "int('x'): expected no error, got ValueError(\"invalid literal for int() with base 10: 'x'\")"),
  ]
  for fn, says in cases:
    with pytest.raises(AssertionError) as e: fn()
    assert str(e.value).startswith(says), str(e.value)
  check("n", 3, 3.0)
  check("x", np.arange(3) * 0.1, [0, 0.1, 0.2], rtol=1e-12)
  check_raises("h()", lambda: int("x"), ValueError, ("invalid",))
  assert check_runs("int('3')", lambda: int("3")) == 3
  assert capsys.readouterr().out == "ok: n\nok: x\nok: h()\nok: int('3')\n"
  def stub(): raise NotImplementedError("task")
  with pytest.raises(NotImplementedError): check_raises("stub()", stub, TypeError)   # not attempted: skipped
  with pytest.raises(NotImplementedError): check_runs("stub()", stub)


def test_a_list_of_tuples_is_compared_as_tuples():
  from uopc.checks import check
  with pytest.raises(AssertionError) as e: check("best tiles", [(1, 1), (5, 4)], [(1, 1), (4, 5)])
  assert str(e.value) == "best tiles[1]: expected (4, 5), got (5, 4)"
  with pytest.raises(AssertionError, match=r"expected a list of 2 items"): check("tiles", [(1, 1)], [(1, 1), (4, 5)])


@needs_openmp
def test_a_race_is_named_a_race():
  """check_threads_agree on a prefix sum made a THREAD loop (its threads share the running value): the message says
  race; the same kernel with a plain loop passes."""
  import numpy as np
  from uopc.checks import check_threads_agree
  from uopc.dtype import dtypes
  from uopc.render_c import render_c
  from uopc.runtime import Program
  from uopc.uop import AxisType, Ops, ParamArg, UOp, range_, sink

  def run(kind, a, threads):
    A, OUT = (UOp(Ops.BUFFER, (), ParamArg(s, dtypes.f32, (len(a),))) for s in (0, 1))
    acc = UOp(Ops.ALLOC, (), ParamArg(0, dtypes.f32, (1,))).after()
    k = range_(len(a), 0, kind)
    acck = acc.after(acc.index(0).store(0.0), k)
    new = acck.index(0).load() + A.index(k).load()
    prg = Program(render_c(sink(UOp(Ops.SINK, (acck.index(0).store(new), OUT.index(k).store(new))).end(k)), "ps"),
                  "ps")
    prg.threads, out = threads, np.zeros(len(a), np.float32)
    prg(a, out)
    return out

  a = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
  check_threads_agree("prefix sum, a plain loop", lambda t: run(AxisType.LOOP, a, t))
  with pytest.raises(AssertionError, match=r"prefix sum, THREAD: a data race: on 8 threads \d+ of 1000 values differ"):
    check_threads_agree("prefix sum, THREAD", lambda t: run(AxisType.THREAD, a, t))


WEEK2_FAULTS = [   # the two faults of issue 43: a race that passed on one thread, a check that stopped bare
  ("prefix sum", "k = range_(n, 0)", "k = range_(n, 0, AxisType.THREAD)",
   "a race: in THREAD loop ridx0 (0 <= ridx0 < 1000), one iteration stores to acc0[0] and another loads acc0[0]"),
  ("running argmax", "i = range_(R, 0, AxisType.THREAD)", "i = range_(R, 0)",
   "the THREAD loops of argmax_program(5, 3), by extent (the row loop, 5 rows, and no other): expected (5,), got ()"),
]


def test_week2_a_racing_prefix_sum_and_an_argmax_without_threads_fail_with_their_messages(tmp_path, monkeypatch):
  """What `make check WEEK=2` says of each: the race is read from the program (uopc.races), so it is reported
  whatever OMP_NUM_THREADS says and where kernels build without OpenMP (issue 49: it passed 1 run in 2)."""
  name = WEEKS[2]
  path = tmp_path / f"{name}.ipynb"
  nbformat.write(planted(name, [Wrong(task, old, new, "") for task, old, new, _ in WEEK2_FAULTS]), path)
  for task, _, _, says in WEEK2_FAULTS:
    with pytest.raises(pytest.fail.Exception) as failed: student.test_visible_checks(path, task)
    message = str(failed.value)
    assert f"task {task!r}, code cell " in message and "In [" in message and "AssertionError: " in message, message
    assert says in message, message
    assert "StopIteration" not in message, message


def test_week2_a_parallel_column_loop_is_named_not_the_accumulators(tmp_path):
  """issue 49: the row loop plain and the column loop THREAD passed the count of parallel loops (one), and then the
  declaration check blamed the accumulators, placed right inside the row loop, for sitting above that loop's pragma."""
  name = WEEKS[2]
  path = tmp_path / f"{name}.ipynb"
  changes = [("i = range_(R, 0, AxisType.THREAD)", "i = range_(R, 0)"),
             ("j = range_(C, 1)", "j = range_(C, 1, AxisType.THREAD)")]
  nbformat.write(planted(name, [Wrong("running argmax", old, new, "") for old, new in changes]), path)
  with pytest.raises(pytest.fail.Exception) as failed: student.test_visible_checks(path, "running argmax")
  message = str(failed.value)
  assert "the THREAD loops of argmax_program(5, 3), by extent (the row loop, 5 rows, and no other): expected (5,), " \
         "got (3,)" in message, message
  assert "acc" not in message.split("AssertionError: ", 1)[1], message


def test_week1_a_call_that_must_succeed_says_which_call_raised(tmp_path):
  """issue 49: a CheckedProgram that checks the int parameter n as an array raised a bare TypeError on the right
  call, with no word of which call it was; now the check names the call and its arguments."""
  name = WEEKS[1]
  path = tmp_path / f"{name}.ipynb"
  changes = [('      if t.kind != "pointer": continue\n', ""),
             ("want = np.dtype(C_TYPES[t.item.cname])",
              'want = np.dtype(C_TYPES[t.item.cname if t.kind == "pointer" else t.cname])')]
  nbformat.write(planted(name, [Wrong("check the arguments", old, new, "") for old, new in changes]), path)
  with pytest.raises(pytest.fail.Exception) as failed: student.test_visible_checks(path, "check the arguments")
  assert "): AssertionError: checked(x, x, y, 8), the right arguments for add(const float* a, const float* b, " \
         "float* out, int n): three C-contiguous float32 arrays of 8 and the int 8: expected no error, got " \
         "TypeError('argument 3: a int, expected a int32 array')" in str(failed.value), str(failed.value)


def test_week1_a_loop_past_n_writes_into_a_guard_zone(tmp_path):
  """issue 49: `i <= n` wrote one float past out and scored full marks; the guarded arrays show it."""
  name = WEEKS[1]
  path = tmp_path / f"{name}.ipynb"
  loop = "for (int i = 0; i < n; i++) out[i] = a[i] * b[i] + c[i] * d[i]"
  nbformat.write(planted(name, [Wrong("a fused kernel", loop, loop.replace("i < n", "i <= n"), "")]), path)
  with pytest.raises(pytest.fail.Exception) as failed: student.test_visible_checks(path, "a fused kernel")
  assert "fused(..., n = 1001): the 16 elements before and after each array untouched (a, b, c, d, out): " \
         "1 of 5 elements differ; at [4]: expected True, got False" in str(failed.value), str(failed.value)


WEEK2_SEEN_BY_HIDDEN_ONLY = [   # issue 49: wrong answers the visible checks passed; now a visible input shows each
  # the divmod rule with a constant of its own for each term: (i // 4) * 4 + i % 8 is not i
  ("the divmod rule", [('mod = Pat(Ops.MOD, (xp, Pat.cvar("c")))', 'mod = Pat(Ops.MOD, (xp, Pat.cvar("d")))'),
                       ("(div_mul, mod)), lambda x, c: x", "(div_mul, mod)), lambda x, c, d: x"),
                       ("(mod, div_mul)), lambda x, c: x", "(mod, div_mul)), lambda x, c, d: x")],
   "((ridx0//4)*4)+(ridx0%8)) rewritten by divmod_rules: expected"),
  # the running max started at 0.0, not -inf: a row all negative with its maximum away from column 0
  ("running argmax", [("m.index(0).store(-math.inf)", "m.index(0).store(0.0)")],
   "argmax_program(4, 4) on a: 1 of 4 elements differ; at [3]: expected 1, got 0"),
]


@pytest.mark.parametrize("task, changes, says", WEEK2_SEEN_BY_HIDDEN_ONLY)
def test_week2_two_constants_and_an_all_negative_row_are_visible(tmp_path, task, changes, says):
  name = WEEKS[2]
  path = tmp_path / f"{name}.ipynb"
  nbformat.write(planted(name, [Wrong(task, old, new, "") for old, new in changes]), path)
  with pytest.raises(pytest.fail.Exception) as failed: student.test_visible_checks(path, task)
  assert says in str(failed.value), str(failed.value)


WEEK4_SEEN_BY_HIDDEN_ONLY = [   # issue 49: full marks, though wrong
  # every plan handed the first plan's temporaries (every test ran one plan)
  ("reused temporaries", [("if id(plan) not in self.temps: self.temps", "if not self.temps: self.temps"),
                          ("inputs, self.temps[id(plan)])", "inputs, next(iter(self.temps.values())))")],
   "the second plan's temporaries: its own arrays, of its own sizes: expected"),
  # the last run's time, not the best: always caught by the check under a scripted clock; the check on the real
  # clock before it (the kernels' times added up against one whole call's) catches it too when this run's last
  # times happen to add up past the call's (CI's loaded machine): either visible check names the mistake
  ("DEBUG lines", [("min(times[k])", "times[k][-1]")],
   ("debug_report's seconds under a clock only the kernels move (each kernel's best of 3 runs)",
    "the kernels' best times added up (s), against the whole call's time for one run")),
]


@pytest.mark.parametrize("task, changes, says", WEEK4_SEEN_BY_HIDDEN_ONLY)
def test_week4_two_plans_and_a_scripted_clock_are_visible(tmp_path, task, changes, says):
  name = WEEKS[4]
  path = tmp_path / f"{name}.ipynb"
  nbformat.write(planted(name, [Wrong(task, old, new, "") for old, new in changes]), path)
  with pytest.raises(pytest.fail.Exception) as failed: student.test_visible_checks(path, task)
  assert any(s in str(failed.value) for s in ((says,) if isinstance(says, str) else says)), str(failed.value)


def test_week6_warps_that_differ_are_visible(tmp_path):
  """issue 49: a count that treats every warp as warp 0 scored full marks (each test index cost every warp the same)."""
  if why := cl_unavailable(): pytest.skip(f"week 6's notebook runs device CL cells: {why}")
  name = WEEKS[6]
  path = tmp_path / f"{name}.ipynb"
  nbformat.write(planted(name, [Wrong("warp transactions", "index(w * warp + lane)", "index(lane)", "")]), path)
  with pytest.raises(pytest.fail.Exception) as failed: student.test_visible_checks(path, "warp transactions")
  assert "warp_transactions(x[(i//32 + 1) * i], 4 warps, itemsize=4): expected 10, got 4" in str(failed.value), \
    str(failed.value)


WEEK6_BARRIERS = [   # issue 49: both passed every visible check (PoCL runs a group's items in order) and scored 0
  ("no barrier after stage 1", "  tile[lid] = m;\n  barrier(CLK_LOCAL_MEM_FENCE);\n", "  tile[lid] = m;\n"),
  ("the barrier before the store", "  tile[lid] = m;\n  barrier(CLK_LOCAL_MEM_FENCE);\n",
   "  barrier(CLK_LOCAL_MEM_FENCE);\n  tile[lid] = m;\n"),
]


@pytest.mark.parametrize("what, old, new", WEEK6_BARRIERS)
def test_week6_a_missing_or_misplaced_barrier_fails_on_any_machine(tmp_path, what, old, new):
  """Read from the kernel's source (uopc.races.opencl_local_races), in a cell that needs no device: it fails where CL
  runs and where it does not."""
  name = WEEKS[6]
  path = tmp_path / f"{name}.ipynb"
  nbformat.write(planted(name, [Wrong("row max kernel", old, new, "")]), path)
  with pytest.raises(pytest.fail.Exception) as failed: student.test_visible_checks(path, "row max kernel")
  message = str(failed.value)
  assert "row_max_kernel(64, 512): each read of another work-item's slot after a barrier: expected every read of " \
         "another work-item's __local slot ordered by a barrier, got a race: the read tile[lid+s] is not ordered" \
         in message, (what, message)


def test_a_runaway_cell_costs_one_limit_and_every_task_says_what_happened(tmp_path, monkeypatch):
  """An endless loop in the first task's checks: interrupted at the per-cell limit, once; the run stops there, the
  next task says it was not checked and why; the run is made once for both (a stopped run is cached too)."""
  import time
  from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
  monkeypatch.setattr(student, "CELL_TIMEOUT", 4.0)
  nb = new_notebook(cells=[new_code_cell("x = 1"), new_markdown_cell("## one"),
                           new_code_cell("# TASK: one\ndef one(): return 1"), new_code_cell("while True: pass"),
                           new_code_cell("# TASK: two\ndef two(): return 2"), new_code_cell("assert two() == 2")])
  path = tmp_path / "runaway.ipynb"
  nbformat.write(nb, path)
  t0 = time.perf_counter()
  with pytest.raises(pytest.fail.Exception) as one: student.test_visible_checks(path, "one")
  with pytest.raises(pytest.fail.Exception) as two: student.test_visible_checks(path, "two")
  assert time.perf_counter() - t0 < 4.0 + 30   # one limit, and the kernel's start: not one run per task
  assert "task 'one', code cell 3 (In [3] after Restart & Run All; the 2nd of the task's 2 code cells): CellTimeout: " \
         "it ran past the limit of 4 s per cell" in str(one.value), str(one.value)
  assert "task 'two': not checked: the run stopped at task 'one', code cell 3" in str(two.value), str(two.value)


def test_a_copy_of_the_notebook_is_checked_where_it_is(tmp_path):
  """`make check WEEK=2 NB=<a copy>`: any name, any folder; the copy is run, never written; the harness's source is
  not printed, only each task's message; another week's notebook is refused by name."""
  import json
  import subprocess
  import sys
  mine = tmp_path / "my week 2.ipynb"
  nb = nbformat.read(ROOT / "assignments" / f"{WEEKS[2]}.ipynb", as_version=4)
  (cell,) = [c for c in nb.cells if c.cell_type == "code" and "# TASK: prefix sum" in c.source]
  sol = nbformat.read(ROOT / "solutions" / f"{WEEKS[2]}.ipynb", as_version=4)
  (answer,) = [c for c in sol.cells if c.cell_type == "code" and "# TASK: prefix sum" in c.source]
  cell.source = answer.source.replace("k = range_(n, 0)", "k = range_(n, 0, AxisType.THREAD)")
  nbformat.write(nb, mine)
  before = mine.read_bytes()
  make = ["make", "-s", "-o", ".venv/.installed-stamp", f"PY={sys.executable}"]
  r = subprocess.run([*make, "check", "WEEK=2", f"NB={mine}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert r.returncode != 0 and "3 skipped" in r.stdout and "1 failed" in r.stdout, r.stdout[-3000:]
  assert "a race: in THREAD loop ridx0" in r.stdout and "def test_visible_checks" not in r.stdout, r.stdout[-3000:]
  assert mine.read_bytes() == before
  r = subprocess.run([*make, "check", "WEEK=3", f"NB={mine}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert r.returncode != 0 and "is not week 3's assignment" in r.stdout, r.stdout[-3000:]
  assert json.loads(before)["cells"]   # still a notebook


def test_the_per_cell_limit_is_the_graders():
  """make check interrupts a cell where the grader would: the same number of seconds (scripts/grade.py's default)."""
  import ast
  import os
  tree = ast.parse((ROOT / "scripts" / "grade.py").read_text())
  (fn,) = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "grade"]
  args = fn.args.args[-len(fn.args.defaults):]
  default = next(ast.literal_eval(d) for a, d in zip(args, fn.args.defaults) if a.arg == "timeout")
  if "UOPC_CHECK_TIMEOUT" not in os.environ: assert student.CELL_TIMEOUT == default


def test_week7_the_split_tie_rule_fails_the_visible_gradient_check(tmp_path):
  """issue 47: max's gradient whole at the first maximum (PyTorch's max(dim)); x.max's own rule, which shares it among
  tied maxima, has the right values and fails on the visible input's ties."""
  name = WEEKS[7]
  path = tmp_path / f"{name}.ipynb"
  nbformat.write(planted(name, [Wrong("max's gradient", "  return first.where(x, 0.0).sum(axis)",
                                      "  return x.max(axis)", "")]), path)
  with pytest.raises(pytest.fail.Exception) as failed: student.test_visible_checks(path, "max's gradient")
  assert "AssertionError: max_first(x_ties, 1): the gradient of sum(out * w), each row's w[i] whole at its first " \
         "maximum: 7 of 16 elements differ" in str(failed.value), str(failed.value)

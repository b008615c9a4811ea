"""scripts/grade.py on small synthetic notebooks: structure and speed points only once a task's values are right,
the per-task summary says what to do, the solution comes from the grader's table (the notebook's metadata and title
are only hints), a probe's values come back as plain data only, and a kernel that dies at start is started again."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
import nbformat
import numpy as np
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[2]
GRADER = ROOT / "scripts" / "grade.py"
spec = importlib.util.spec_from_file_location("grade_tool_unit", GRADER)
tool = sys.modules["grade_tool_unit"] = importlib.util.module_from_spec(spec)   # dataclasses look their module up
spec.loader.exec_module(tool)
import kernel  # noqa: E402 (scripts/grader/, put on the path by grade.py)
import records  # noqa: E402
import sandbox  # noqa: E402

needs_sandbox = pytest.mark.skipif(sandbox.available() is not None, reason=str(sandbox.available()))
hidden = lambda src: new_code_cell(src, metadata={"tags": ["hidden-test"]})
SETUP = ("import sys\nfrom pathlib import Path\nimport uopc\n"
         "sys.path.insert(0, str(Path(uopc.__file__).resolve().parents[1] / 'scripts' / 'grader'))\n"
         "from solution_setup import gradelib, record, recorded, seeded\n"
         "def check(x, want): assert x == want, f'expected {want}, found {x}'")
SOLUTION = new_notebook(cells=[
  new_markdown_cell("# Week 9 assignment: testing the grader"),
  new_code_cell(SETUP, metadata={"tags": ["hidden-setup"]}),
  new_code_cell("# TASK: double\ndef double(x):\n  ### BEGIN SOLUTION\n  return 2 * x\n  ### END SOLUTION"),
  hidden("# POINTS: double 2\nrecord('d', double(int(seeded(1).integers(10, 99))))\n# JUDGE\n"
         "check(recorded['d'], 2 * int(seeded(1).integers(10, 99)))"),
  hidden("# POINTS: double 1 structure\nrecord('doc', double.__doc__)\n# JUDGE\n"
         "assert recorded['doc'] is None, 'no docstring, please'"),
  new_code_cell("# TASK: halve\ndef halve(x):\n  ### BEGIN SOLUTION\n  return x / 2\n  ### END SOLUTION"),
  hidden("# POINTS: halve 1\nrecord('h', halve(3))\n# JUDGE\ncheck(recorded['h'], 1.5)"),
  hidden("# POINTS: halve 1 speed\nrecord('x', 1)\n# JUDGE\nassert True"),
])


def run(student: Path, *args: str) -> tuple[dict, str]:
  r = subprocess.run([sys.executable, str(GRADER), str(student), *args], capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stdout + r.stderr
  lines = r.stdout.strip().splitlines()
  return json.loads(lines[-1]), "\n".join(lines[:-1])


@needs_sandbox
def test_structure_points_only_with_right_values(tmp_path):
  solution = tmp_path / "week9_grader.ipynb"
  nbformat.write(SOLUTION, solution)
  student = new_notebook(cells=[new_code_cell("def double(x): return x + x"),      # right
                                new_code_cell("def halve(x): return x // 2"),      # wrong values, fast anyway
                                new_code_cell("class Any:\n  def __eq__(self, o): return True\n"
                                              "def triple(x): return Any()")])
  nbformat.write(student, tmp_path / "mine.ipynb")
  score, table = run(tmp_path / "mine.ipynb", "--solution", str(solution))
  assert {t: v["points"] for t, v in score["tasks"].items()} == {"double": 3, "halve": 0}
  speed = score["tasks"]["halve"]["tests"][1]
  assert speed["kind"] == "speed" and speed["status"] == "skipped" and "values of this task are right" in speed["error"]
  assert "values (1 pt): expected 1.5, found 1" in table and "speed (1 pt): not run" in table


def test_the_solution_comes_from_the_table(tmp_path):
  solutions = tmp_path / "solutions"
  solutions.mkdir()
  nbformat.write(SOLUTION, solutions / "week9_grader.ipynb")
  nbformat.write(SOLUTION, tmp_path / "week8_elsewhere.ipynb")   # not in the table: never chosen by a notebook
  titled = new_notebook(cells=[new_markdown_cell("# Week 9 assignment: mine")])
  nbformat.write(titled, tmp_path / "renamed.ipynb")
  assert tool.find_solution(tmp_path / "renamed.ipynb", solutions) == solutions / "week9_grader.ipynb"
  named = new_notebook(metadata={"uopc": {"assignment": "week9_grader"}})
  nbformat.write(named, tmp_path / "other.ipynb")
  assert tool.find_solution(tmp_path / "other.ipynb", solutions) == solutions / "week9_grader.ipynb"
  for escape in ("../week8_elsewhere", str(tmp_path / "week8_elsewhere"), "../outputs/x"):
    nbformat.write(new_notebook(metadata={"uopc": {"assignment": escape}}), tmp_path / "evil.ipynb")
    assert tool.find_solution(tmp_path / "evil.ipynb", solutions) is None
  nbformat.write(new_notebook(cells=[new_markdown_cell("# Week 8: mine")]), tmp_path / "week8.ipynb")
  assert tool.find_solution(tmp_path / "week8.ipynb", solutions) is None   # no week 8 in the table
  assert tool.find_solution(tmp_path / "nothing.ipynb", solutions) is None
  assert set(tool.solution_table()) == set(range(1, 8))


def test_a_value_comes_back_as_plain_data_or_not_at_all(tmp_path):
  """What a probe records is read as JSON and .npy without pickle: an object of the student's arrives as NotPlain,
  which equals nothing, and a file the student planted as a pickle, a link or a huge file is not read."""
  class Liar:
    def __eq__(self, other): return True
  class Int(int): pass
  for k, value in enumerate([np.arange(3.0), (1, "x", [np.ones(2), None]), {"k": 2.5}]):
    records.write(tmp_path, k, f"v{k}", value)
  records.write(tmp_path, 3, "liar", Liar())
  records.write(tmp_path, 4, "int", Int(3))
  records.write(tmp_path, 5, "objects", np.array([Liar()], dtype=object))
  np.save(tmp_path / "r6_0.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)   # a pickle: never loaded
  (tmp_path / "r6.json").write_text(json.dumps({"name": "pickled", "value": {"__npy__": 0}}))
  (tmp_path / "r7.json").symlink_to(tmp_path / "r0.json")
  got = records.read(tmp_path)
  assert np.array_equal(got["v0"], np.arange(3.0)) and got["v1"][:2] == (1, "x") and got["v2"] == {"k": 2.5}
  for name in ("liar", "int", "objects", "pickled"):
    assert isinstance(got[name], records.NotPlain) and got[name] != got[name], name
  assert len(got) == 7
  with pytest.raises(AssertionError, match="nope: no value was recorded"): records.Recorded(got)["nope"]


def test_every_hidden_test_of_the_course_is_judged_outside_the_sandbox():
  """A hidden test without `# JUDGE` is judged inside the sandbox (its probe finishing is its pass), which a student's
  code could fake: the course's solutions have none, and no probe holds a check or an expected value."""
  for solution in sorted((ROOT / "solutions").glob("week*.ipynb")):
    for t in tool.hidden_tests(nbformat.read(solution, as_version=4), str(solution)):
      assert t.judge is not None and t.judge.strip(), f"{solution.name}, cell {t.cell}: no judge"
      assert "gradelib" not in t.probe and "assert" not in t.probe, f"{solution.name}, cell {t.cell}: a check"


def test_a_stub_is_reported_as_not_attempted():
  report = tool.Report("mine", "sol", tasks={"double": {"points": 0.0, "max": 3.0, "tests": [
    {"cell": 3, "kind": "values", "points": 0.0, "max": 2.0, "status": "error", "error": "NotImplementedError: double",
     "seconds": 0.0}]}})
  report.student_cells["errors"] = [{"cell": 2, "status": "error", "error": "NotImplementedError: double"}]
  assert 'not attempted: its stub still raises NotImplementedError("double")' in tool.table(report)


def test_a_kernel_that_dies_before_it_answers_is_started_again(tmp_path, monkeypatch):
  """Seen once in CI: 'Kernel died before replying to kernel_info'. The runner starts a kernel up to START_TRIES
  times before it gives up; a student's notebook is not marked down for it."""
  tries = []
  class Flaky:
    def __init__(self, cwd):
      tries.append(cwd)
      if len(tries) < 2: raise RuntimeError("Kernel died before replying to kernel_info")
    def close(self): pass
  monkeypatch.setattr(kernel.time, "sleep", lambda s: None)
  k = kernel.Kernel(tmp_path, 10, 100, [], session=Flaky)
  k.start()
  assert len(tries) == 2 and isinstance(k.session, Flaky) and k.restarts == 0
  class Dead(Flaky):
    def __init__(self, cwd):
      tries.append(cwd)
      raise RuntimeError("Kernel died before replying to kernel_info")
  k.session_cls = Dead
  tries.clear()
  with pytest.raises(RuntimeError, match="Kernel died"): k.start()
  assert len(tries) == kernel.START_TRIES and k.session is None


def test_a_stuck_kernel_is_found_so_without_waiting_for_its_output(tmp_path):
  """A cell that ignores the interrupt: once its time limit passed, the interrupted cell's output is waited for a
  moment (kernel.IOPUB_AFTER_TIMEOUT_S), not nbclient's 4 s (responsive()'s own check, which then finds the kernel
  stuck, goes the same way: limit + 7 s in all, was + 14); one that the interrupt stops answers, as before."""
  s = kernel.Session(tmp_path)
  try:
    out = s.run("import time\nwhile True:\n  try: time.sleep(0.1)\n  except KeyboardInterrupt: pass", 1)
    waited = s.client.iopub_timeout   # what nbclient waited for the interrupted cell's output (read, not timed)
  finally: s.close()
  assert out.status == "timeout" and waited == kernel.IOPUB_AFTER_TIMEOUT_S < kernel.IOPUB_S, (out, waited)
  s = kernel.Session(tmp_path)
  try:
    out = s.run("import time\nwhile True: time.sleep(0.1)", 1)
    assert out.status == "timeout" and s.responsive() and s.run("1 / 0", 5).error.startswith("ZeroDivisionError")
  finally: s.close()


SCALE = "void scale(const float* x, float* out, int n) {{ for (int i = 0; i < n; i++) out[i] = {body}; }}"
TIMED = ("# POINTS: scale 1 speed\nrecord('src', scale_src())\n# JUDGE\n"
         "_t = time_kernels(recorded['src'], 'scale', [['f32', [{n}]], ['zeros', [{n}]], ['int', {n}]], outputs=[1], "
         "reference={ref!r}, reps=3)\nassert 'student' in _t, _t.get('error')")
SPEED_SOLUTION = new_notebook(cells=[
  new_markdown_cell("# Week 9 assignment: timing in one sandbox"),
  new_code_cell(SETUP + "\nfrom solution_setup import time_kernels", metadata={"tags": ["hidden-setup"]}),
  new_code_cell("# TASK: scale\ndef scale_src():\n  ### BEGIN SOLUTION\n  return " + repr(SCALE.format(body="2 * x[i]"))
                + "\n  ### END SOLUTION"),
  hidden("# POINTS: scale 1\nrecord('src', scale_src())\n# JUDGE\nassert 'void scale(' in recorded['src']"),
  hidden(TIMED.format(n=4096, ref=SCALE.format(body="x[i] + x[i]"))),
  hidden(TIMED.format(n=1 << 16, ref=SCALE.format(body="x[i] * 2.0f"))),
])


@needs_sandbox
def test_every_speed_test_of_a_notebook_is_timed_in_one_sandbox(tmp_path):
  solution = tmp_path / "week9_speed.ipynb"
  nbformat.write(SPEED_SOLUTION, solution)
  for name, body, points in (("fast", "x[i] * 2", 3), ("include", "2 * x[i];\n#include <stdio.h>\n", 1)):
    nbformat.write(new_notebook(cells=[new_code_cell(f"def scale_src(): return {SCALE.format(body=body)!r}")]),
                   tmp_path / f"{name}.ipynb")
    score, table = run(tmp_path / f"{name}.ipynb", "--solution", str(solution))
    tests = score["tasks"]["scale"]["tests"]
    assert score["total"] == points and [t["kind"] for t in tests] == ["values", "speed", "speed"], table
    if name == "fast":   # both timed, in one sandbox
      assert [t["status"] for t in tests] == ["ok"] * 3 and score["phases"]["speed_runs"] == 1, score
    else:   # refused before it is built
      assert all("includes 'stdio.h'" in t["error"] for t in tests[1:]), score


@needs_sandbox
def test_a_speed_test_that_misses_its_bar_is_timed_twice_more_and_still_fails(tmp_path):
  """Other work on the grading machine only slows a kernel down, so a missed bar is timed again (twice at most) and
  the best round counts; a kernel that can never meet it still scores 0, after exactly three timing sandboxes."""
  never = TIMED.format(n=4096, ref=SCALE.format(body="x[i] + x[i]")).replace(
    "assert 'student' in _t, _t.get('error')",
    "assert _t['student'] * 1e6 < _t['reference'], 'not a million times faster'")
  solution = tmp_path / "week9_speed.ipynb"
  nbformat.write(new_notebook(cells=SPEED_SOLUTION.cells[:3] + [hidden(never)]), solution)
  nbformat.write(new_notebook(cells=[new_code_cell(f"def scale_src(): return {SCALE.format(body='x[i] * 2')!r}")]),
                 tmp_path / "mine.ipynb")
  score, table = run(tmp_path / "mine.ipynb", "--solution", str(solution))
  speed = score["tasks"]["scale"]["tests"][-1]
  assert (speed["status"], speed["points"]) == ("error", 0.0) and "not a million times faster" in speed["error"], table
  assert score["phases"]["speed_runs"] == 3, score["phases"]


# --- issue 38: the pieces of the second round, each on its own ----------------------------------------------------
import guards  # noqa: E402
import judge  # noqa: E402
import outside  # noqa: E402

GUARDED = '''"""A module."""
from __future__ import annotations
def answer(x):
  """The answer."""
  return 2 * x
class Finished:
  def __init__(self): self.n = 1
  def count(self): return self.n
class Kept:
  def count(self): return 3
  def other(self): return 4
'''


def test_a_guarded_definition_raises_whatever_route_reaches_it(tmp_path):
  """guards.py rewrites the definitions a hidden test names, in a copy of the tree: the function, every method of a
  class (and making one), a single method; the rest of the module is untouched, and the exception is no Exception."""
  (tmp_path / "uopc").mkdir()
  (tmp_path / "uopc" / "__init__.py").write_text("")
  (tmp_path / "uopc" / "mod.py").write_text(GUARDED)
  tree = guards.guarded_tree(tmp_path, {"uopc.mod.answer": ["double"], "uopc.mod.Finished": ["count", "other"],
                                        "uopc.mod.Kept.count": ["count"]}, tmp_path / "copy")
  code = (tree / "uopc" / "mod.py").read_text()
  ns: dict = {}
  exec(compile(code, "mod.py", "exec"), ns)
  exc = ns[guards.EXCEPTION]
  assert not issubclass(exc, Exception)
  for call in (lambda: ns["answer"](1), lambda: ns["Finished"](), lambda: ns["Kept"]().count()):
    with pytest.raises(exc, match="uopc's answer to task"): call()
  assert ns["Kept"]().other() == 4 and ns["answer"].__doc__ == "The answer."
  assert "tasks 'count' and 'other'" in code and (tmp_path / "uopc" / "mod.py").read_text() == GUARDED
  for bad, says in (("uopc.mod.missing", "defines no missing"), ("numpy.sum", "not a qualified name of uopc"),
                    ("uopc.nothere.f", "defines no nothere.f")):
    with pytest.raises(ValueError, match=says): guards.locate(tmp_path, bad)
  assert guards.parse("# SHORTCUTS: uopc.a.b, uopc.c.d\n# SHORTCUTS alone: uopc.e.f\n") == [
    guards.Guard("uopc.a.b", False), guards.Guard("uopc.c.d", False), guards.Guard("uopc.e.f", True)]


def test_every_shortcut_of_the_course_names_a_definition_of_the_tree():
  """A declaration the tree lacks would make the grader stop with a usage error: every one of the solutions names a
  function, class or method that its module defines."""
  names = {g.name for solution in sorted((ROOT / "solutions").glob("week*.ipynb"))
           for t in tool.hidden_tests(nbformat.read(solution, as_version=4), str(solution)) for g in t.shortcuts}
  assert {"uopc.optim.adamw_step_numpy", "uopc.rangeify.lower", "uopc.codegen.wmma.mma"} <= names
  for name in names: guards.locate(ROOT, name)


def test_an_object_that_imports_more_than_math_and_memory_is_refused(tmp_path):
  """outside.imports_refused reads the object's dynamic symbol table: libm's functions, OpenMP's and the memory
  functions pass; printf, a call into Python or a library of the kernel's choosing do not."""
  fine = ("void k(float* x, int n) {\n  #pragma omp parallel for\n  for (int i = 0; i < n; i++) x[i] = expf(x[i]) + "
          "sqrtf(x[i]);\n  __builtin_memset(x, 0, 4);\n}")
  sources = {"fine": "#include <math.h>\n" + fine,
             "printf": "int printf(const char*, ...);\nvoid k(float* x) { printf(\"%f\", x[0]); }",
             "python": "int PyRun_SimpleString(const char*);\nvoid k(float* x) { PyRun_SimpleString(\"1\"); }"}
  said = {}
  for name, src in sources.items():
    (tmp_path / f"{name}.c").write_text(src)
    subprocess.run(["cc", "-O2", "-fopenmp", "-shared", "-fPIC", "-o", str(tmp_path / f"{name}.so"),
                    str(tmp_path / f"{name}.c"), "-lm"], check=True)
    said[name] = outside.imports_refused((tmp_path / f"{name}.so").read_bytes())
  assert said["fine"] is None, said
  assert "printf" in said["printf"] and "PyRun_SimpleString" in said["python"], said
  assert "could not be read" in outside.imports_refused(b"not an object")
  assert outside.source_refused('#include <math.h>\nvoid k() {}') is None
  for src, says in (('#include <unistd.h>\n', "'unistd.h'"), ("void k() { asm(\"nop\"); }", "'asm'"),
                    ("__attribute__((constructor)) void k() {}", "constructor")):
    assert says in outside.source_refused(src), src
  assert outside.params("void f(float* restrict a, const int n, double s) {", "f") == ["p", "i", "d"]


def test_a_value_named_many_times_is_read_once_and_a_test_is_capped(tmp_path, monkeypatch):
  """records.read: an array a value names many times is loaded once (one object), and past MAX_TEST bytes a test's
  arrays arrive as NotPlain, so a probe cannot make the grader hold one file many times."""
  np.save(tmp_path / "r0_0.npy", np.ones(1000, np.float32))
  (tmp_path / "r0.json").write_text(json.dumps({"name": "many", "value": [{"__npy__": 0}] * 50}))
  got = records.read(tmp_path)["many"]
  assert len(got) == 50 and all(a is got[0] for a in got) and isinstance(got[0], np.ndarray)
  monkeypatch.setattr(records, "MAX_TEST", 2000)
  got = records.read(tmp_path)["many"]
  assert all(isinstance(a, records.NotPlain) and "past" in a.what for a in got), got[0]


def test_a_judge_reports_every_check_that_fails():
  """judge.run goes on after a failed check (asserts, gradelib calls, a try with its own diagnosis, inside loops)
  and reports each message once; a value that cannot be made stops it, with what failed before."""
  t = judge.HiddenTest("t", 1, "# POINTS: t 1\nx = 1\n# JUDGE\n" + "\n".join([
    "for k in range(3): assert k != 1, f'case {k} wrong'",
    "assert False, 'second'",
    "try: assert 1 == 2, 'third'\nexcept AssertionError as e: raise AssertionError(f'{e}, diagnosed') from None",
    "assert False, 'second'",
    "value = recorded['missing']",
    "assert False, 'never reached'"]), 0)
  status, error = judge.run(t, {}, {})
  assert status == "error", error
  assert error == ("AssertionError: case 1 wrong | second | third, diagnosed | missing: no value was recorded (the "
                   "code that computes it did not run to the end)"), error


def test_a_tar_from_a_sandbox_brings_back_regular_files_only(tmp_path):
  """sandbox.unpack: links, `..`, absolute names and what goes past the limit stay out."""
  import io
  import tarfile
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w") as tar:
    def add(name, data=b"x", kind=tarfile.REGTYPE, link=""):
      info = tarfile.TarInfo(name)
      info.type, info.size, info.linkname = kind, len(data) if kind == tarfile.REGTYPE else 0, link
      tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    add("ok/a.json", b"{}")
    add("../escape", b"x")
    add("/abs", b"x")
    add("link", kind=tarfile.SYMTYPE, link="/etc/passwd")
    add("hard", kind=tarfile.LNKTYPE, link="ok/a.json")
    add("big", b"y" * 5000)
  buf.seek(0)
  names: list[str] = []
  sandbox.unpack(buf, tmp_path / "out", 4096, names)
  assert names == ["ok/a.json"] and sorted(p.name for p in (tmp_path / "out").rglob("*")) == ["a.json", "ok"]


def test_a_gradebook_cell_is_never_a_formula_and_feedback_names_are_unique():
  spec = importlib.util.spec_from_file_location("grade_all_unit", ROOT / "scripts" / "grade_all.py")
  ga = sys.modules["grade_all_unit"] = importlib.util.module_from_spec(spec)   # its dataclass looks its module up
  spec.loader.exec_module(ga)
  assert [ga.cell(x) for x in ("=1+1", "+1", "-x", "@a", "\tx", "\rx", "ok", 3.0, "a=b")] == \
    ["'=1+1", "'+1", "'-x", "'@a", "'\tx", "'\rx", "ok", 3.0, "a=b"]
  names = ga.feedback_names([(b"a b.ipynb", "a b"), (b"a_b.ipynb", "a_b"), (b"A_B.ipynb", "A_B"),
                             (b"x/..ipynb", "x/."), (b"caf\xe9.ipynb", "caf\\xe9")])
  assert len(set(n.lower() for n in names.values())) == 5 and all("/" not in n for n in names.values()), names

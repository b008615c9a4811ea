"""Issue 48, item 1: the student's process only answers; every verdict is the judge's. Each attack below earned points
on the grader of 7b62309, whose probes decided in the student's process; each honest twin (unusual, but right) scores
full marks. One grading per notebook, of the attacked tasks only (`--only`):
- week 2, races: a prefix sum whose loop is a THREAD loop, with uopc's Program made to run one thread and uopc.races
  made blind in the notebook's process. The judge reads the races from the recorded graph with its own uopc and runs
  the C it rendered on 1 and 8 threads in its own sandbox. Twin: the honest argmax under the same patches.
- week 3, structure and values: gemm_naive returns a wrong program, and a patched render_c hands the probe the C of
  the right one. The judge renders the recorded graph itself. Twin: the honest 4x4 tile under the same patch.
- week 4, temporaries: a PlanRunner that allocates fresh temporaries on every run but keeps the first run's in
  self.temps. The judge reads which arrays the plan's kernels were handed. Twin: a runner that keeps its
  temporaries in an attribute of another name (the attribute is not the test).
- weeks 5 and 1, "raised": a notebook that forges probe.Probe.raised (reachable through gc) for a best_tile that does
  not raise; the judge's call runs in a fresh process on the notebook's definitions. Twin: week 1's CheckedProgram
  raising its own subclass of TypeError, with its messages in a table of constants."""
import sys
from pathlib import Path
import nbformat
import pytest
from nbformat.v4 import new_code_cell
from assignment_grading import visible
from test_grader_attacks import grade, rows_of

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "grader"))
import sandbox  # noqa: E402

pytestmark = pytest.mark.skipif(sandbox.available() is not None, reason=str(sandbox.available()))


def submission(tmp: Path, week: str, name: str, tasks: dict[str, str] = {}, extra: tuple[str, ...] = ()) -> Path:
  """The week's solution as a student hands it in, with some task cells replaced and cells added at the end."""
  book = visible(ROOT / "solutions" / f"{week}.ipynb")
  for task, source in tasks.items():
    (cell,) = [c for c in book.cells if c.cell_type == "code" and f"# TASK: {task}" in c.source]
    cell.source = f"# TASK: {task}\n{source}"
  book.cells += [new_code_cell(src) for src in extra]
  path = tmp / f"{name}.ipynb"
  nbformat.write(book, path)
  return path


def graded(nb: Path, env, *tasks: str) -> dict:
  score, _ = grade(nb, env[0], *[a for t in tasks for a in ("--only", t)])
  return score


def full(score: dict, task: str, kinds=("values", "structure")) -> bool:
  rows = [r for r in rows_of(score, task) if r.get("kind", "values") in kinds]
  return bool(rows) and all(r["points"] == r["max"] for r in rows)


# ---- week 2: races ------------------------------------------------------------------------------------------------
RACING_PREFIX_SUM = '''def prefix_sum_program(n: int) -> UOp:
  A, OUT = buf(0, n), buf(1, n)
  acc = alloc(0).after()
  init = acc.index(0).store(0.0)
  k = range_(n, 0, AxisType.THREAD)            # a THREAD loop: iteration k reads what iteration k - 1 stored
  acck = acc.after(init, k)
  new = acck.index(0).load() + A.index(k).load()
  return sink(UOp(Ops.SINK, (acck.index(0).store(new), OUT.index(k).store(new))).end(k))
'''
ONE_THREAD = '''import uopc.races, uopc.runtime.program as _rp
_call = _rp.Program.__call__
def _one_thread(self, *args, **kwargs):   # every run in this process on one thread: a race never shows here
  self.threads = 1
  return _call(self, *args, **kwargs)
_rp.Program.__call__ = _one_thread
uopc.races.thread_races = lambda program: []   # and the analysis sees none
'''


def test_a_race_is_judged_from_the_program_and_8_threads_outside(tmp_path, env):
  """Before: the probe ran the kernels and uopc.races in the notebook's process: 2 of 2 for the racing prefix sum."""
  nb = submission(tmp_path, "week2_uops_and_loops", "race", {"prefix sum": RACING_PREFIX_SUM}, (ONE_THREAD,))
  score = graded(nb, env, "prefix sum", "running argmax")
  (row,) = rows_of(score, "prefix sum")
  assert row["points"] == 0 and "race" in row["error"], row
  assert full(score, "running argmax"), rows_of(score, "running argmax")   # the twin: right, under the same patches


# ---- week 3: the judge renders the graph --------------------------------------------------------------------------
FORGED_RENDER = '''import uopc.render_c as _rc
_right, _render = gemm_naive, _rc.render_c
_made_for = {}   # (a name no probe uses)
def gemm_naive(M, N, K):   # a wrong program (k runs once)...
  wrong = _right(M, N, 1) if K > 1 else _right(M, 1, K)
  _made_for[wrong] = (M, N, K)
  return wrong
def _forged(program, name, *args, **kwargs):   # ...whose C, as the notebook renders it, is the right one's
  if program in _made_for: return _render(_right(*_made_for[program]), name, *args, **kwargs)
  return _render(program, name, *args, **kwargs)
_rc.render_c = _forged
'''


def test_the_judge_renders_the_recorded_graph_itself(tmp_path, env):
  """Before: the probe recorded the C of the notebook's render_c: 3 of 3 for a wrong gemm_naive."""
  nb = submission(tmp_path, "week3_gemm_by_hand", "render", extra=(FORGED_RENDER,))
  score = graded(nb, env, "naive GEMM", "4x4 register tile")
  assert score["tasks"]["naive GEMM"]["points"] == 0, rows_of(score, "naive GEMM")
  assert full(score, "4x4 register tile"), rows_of(score, "4x4 register tile")   # the twin: its speed is the machine's


# ---- week 4: the temporaries the kernels were handed ----------------------------------------------------------------
FRESH_EACH_RUN = '''class PlanRunner:
  def __init__(self):
    self.temps: dict = {}
  def run(self, plan, inputs):
    fresh = [np.empty(n, np_dtype(d)) for d, n in plan.temps]   # new arrays on every run...
    self.temps.setdefault(id(plan), fresh)                       # ...while the first run's are shown in self.temps
    return run_uopc_plan(plan, inputs, fresh)
'''
OTHER_ATTRIBUTE = '''class PlanRunner:
  def __init__(self):
    self.temps: dict = {}
    self._kept = {}   # id(plan) -> (plan, its temporaries): the plan kept alive with them, so its id is never reused
  def run(self, plan, inputs):
    if id(plan) not in self._kept: self._kept[id(plan)] = (plan, [np.empty(n, np_dtype(d)) for d, n in plan.temps])
    self.temps[id(plan)] = self._kept[id(plan)][1]
    return run_uopc_plan(plan, inputs, self._kept[id(plan)][1])
'''
OTHER_ATTRIBUTE_ONLY = OTHER_ATTRIBUTE.replace("    self.temps[id(plan)] = self._kept[id(plan)][1]\n", "")


@pytest.mark.parametrize("runner, expect", [(FRESH_EACH_RUN, "attack"), (OTHER_ATTRIBUTE_ONLY, "twin")])
def test_reused_temporaries_are_seen_by_the_kernels(tmp_path, env, runner, expect):
  """Before: the structure test read self.temps: the attack scored 3 of 3, the twin (no self.temps) 2 of 3."""
  nb = submission(tmp_path, "week4_kernelize_and_realize", expect, {"reused temporaries": runner})
  score = graded(nb, env, "reused temporaries")
  rows = {r.get("kind", "values"): r for r in rows_of(score, "reused temporaries")}
  if expect == "attack":
    assert rows["values"]["points"] == rows["values"]["max"], rows   # its values are right: only structure is lost
    assert rows["structure"]["points"] == 0 and "different array" in rows["structure"]["error"], rows
  else: assert full(score, "reused temporaries"), rows


# ---- weeks 5 and 1: "raised", seen in a fresh process ---------------------------------------------------------------
NEVER_RAISES = '''def best_tile(registers: int) -> tuple[int, int]:
  largest = (registers - 1) // 2
  fitting = [(tm, tn) for tm in range(1, largest + 1) for tn in range(1, largest + 1)
             if tile_cost(tm, tn)[1] <= registers]
  if not fitting: return (1, 1)   # no check: a tile that does not fit
  return min(fitting, key=lambda t: (tile_cost(*t)[0], tile_cost(*t)[1], -t[0]))
'''
FORGE_RAISED = '''import gc
for _o in gc.get_objects():   # the grader's Probe class, loaded before the first cell: "raised" says ValueError
  if isinstance(_o, type) and _o.__name__ == "Probe" and hasattr(_o, "raised"):
    _o.raised = lambda self, fn: {"raised": "ValueError", "classes": ["ValueError", "Exception", "BaseException"],
                                  "message": "no tile fits in 2 registers: a 1x1 tile needs 3"}
'''
OWN_TYPE_ERROR = '''C_TYPES = {"float": np.float32, "double": np.float64, "int": np.int32}


class ArgumentError(TypeError):
  """A TypeError that says which argument."""


WHY = {"count": "{} arguments expected, {} given", "dtype": "argument {}: dtype {}, expected {}",
       "kind": "argument {}: a {}, expected an array", "layout": "argument {}: not contiguous"}


class CheckedProgram(MiniProgram):
  def __call__(self, *args):
    params = self.ffi.typeof(self.fn).args
    if len(args) != len(params): raise ArgumentError(WHY["count"].format(len(params), len(args)))
    for k, (t, a) in enumerate(zip(params, args)):
      if t.kind != "pointer": continue
      if not isinstance(a, np.ndarray): raise ArgumentError(WHY["kind"].format(k, type(a).__name__))
      want = np.dtype(C_TYPES[t.item.cname])
      if a.dtype != want: raise ArgumentError(WHY["dtype"].format(k, a.dtype, want))
      if not a.flags.c_contiguous: raise ArgumentError(WHY["layout"].format(k))
    super().__call__(*args)
'''


def test_raised_is_seen_in_a_fresh_process(tmp_path, env):
  """Before: Probe.raised ran in the notebook's process: a forged one gave best_tile 2 of 2 without its check."""
  nb = submission(tmp_path, "week5_tensor_and_fast_kernel", "raised", {"the best tile": NEVER_RAISES}, (FORGE_RAISED,))
  (row,) = rows_of(graded(nb, env, "the best tile"), "the best tile")
  assert row["points"] == 0 and "best_tile(2)" in row["error"] and "raised nothing" in row["error"], row


def test_an_exception_of_its_own_class_is_judged_by_its_classes(tmp_path, env):
  """The twin: a TypeError subclass of the notebook's, from a table of messages, seen in the fresh process."""
  nb = submission(tmp_path, "week1_why_compile", "own_error", {"check the arguments": OWN_TYPE_ERROR})
  score = graded(nb, env, "check the arguments")
  assert full(score, "check the arguments"), rows_of(score, "check the arguments")


# ---- item 2: each side of a timing in a sandbox of its own, pinned to the judge's CPUs ------------------------------
LOOKING_AROUND = """#define _GNU_SOURCE
#include <dirent.h>
#include <math.h>
#include <sched.h>
static int others = -1, cpus = -1;
void fused(const float* a, const float* b, const float* c, const float* d, float* out, int n) {
  if (others < 0) {   /* the warm-up: what it would need to find the reference (or the timer) and slow it */
    DIR* proc = opendir("/proc");
    struct dirent* e;
    others = 0;
    while (proc && (e = readdir(proc))) others += e->d_name[0] >= '0' && e->d_name[0] <= '9';
    if (proc) closedir(proc);
    cpu_set_t set;
    sched_getaffinity(0, sizeof set, &set);
    cpus = CPU_COUNT(&set);
  }
  /* its own sandbox holds bwrap's init and itself: anything more is a process it could signal or slow */
  float spoil = (others > 2 || cpus != EXPECTED_CPUS) ? NAN : 0.0f;
  for (int i = 0; i < n; i++) out[i] = a[i] * b[i] + c[i] * d[i] - a[i] + spoil;
}"""


def test_each_side_of_a_timing_has_a_sandbox_of_its_own(tmp_path, monkeypatch):
  """Before: the student's kernel and the reference were children of one harness, one PID namespace, one UID, on every
  CPU: this kernel saw the other processes in /proc (and could have stopped the reference). Now it sees only its own
  sandbox and the one CPU the judge chose, and is timed."""
  import subprocess
  import harness
  import outside
  monkeypatch.setenv("UOPC_GRADER_CPUS", "0")
  src = tmp_path / "k.c"
  src.write_text(LOOKING_AROUND.replace("EXPECTED_CPUS", "1"))
  obj = tmp_path / "k.so"
  subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(obj), str(src)], check=True)
  obj.chmod(0o644)
  n = 1 << 14
  job = {"kind": "time", "student": {"object": "/objects/k.so", "name": "fused", "params": ["p"] * 5 + ["i"]},
         "reference": None, "numpy": "a * b + c * d - a", "reps": 3, "tol": 1e-3, "outputs": [4],
         "args": [["f32", [n]], ["f32", [n]], ["f32", [n]], ["f32", [n]], ["zeros", [n]], ["int", n]]}
  assert outside.timed_apart(ROOT)
  apart = outside.time_apart(job, {str(obj): "/objects/k.so"}, ROOT)
  assert apart["cpus"] == [0] and apart["student"] > 0 and apart["reference"] > 0, apart
  together = harness.do_time(dict(job, student=dict(job["student"], object=str(obj))))   # the old way: one harness
  assert "never written (NaN)" in together.get("error", ""), together

"""Issue 48's attacks, each with an honest twin where the fix could punish honest work: a softmax that survives
week 1's overflow case only in float64, cell magics around a graded definition, an error message that carries the
hidden probe out through IPython's input history, a notebook whose code is too big to parse on the grader's host,
a C include that names a header through a macro, and the uopc functions that answer a task unguarded.

The fast tests run the grader's parts directly; the ones that grade a notebook run it in its sandbox (bubblewrap)."""
import json
import sys
import time
from pathlib import Path
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from assignment_grading import visible
from test_grader_attacks import WEEK1, grade, rows_of

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "grader"))
sys.path.insert(0, str(ROOT / "scripts"))
import notebook_code  # noqa: E402
import redact  # noqa: E402
import sandbox  # noqa: E402

needs_bwrap = pytest.mark.skipif(sandbox.available() is not None, reason=str(sandbox.available()))
TASK = "blocked attention"


def week1_with(tmp: Path, name: str, source: str) -> Path:
  """Week 1's solution as a student hands it in, with the blocked-attention cell's source replaced."""
  book = visible(ROOT / "solutions" / f"{WEEK1}.ipynb")
  (cell,) = [c for c in book.cells if c.cell_type == "code" and f"# TASK: {TASK}" in c.source]
  cell.source = source
  path = tmp / f"{name}.ipynb"
  nbformat.write(book, path)
  return path


def graded_task(nb: Path, env) -> list[dict]:
  score, _ = grade(nb, env[0], "--only", TASK)
  return rows_of(score, TASK)


# ---- item 8: week 1's overflow case is past float64's exp limit --------------------------------------------------
NO_MAX_FLOAT64 = '''# TASK: blocked attention
def blocked_attention(q, k, v, block=128):   # no max subtraction; np.sqrt(D) makes the scores float64
  out = np.empty((len(q), v.shape[1]), np.float32)
  for i0 in range(0, len(q), block):
    p = np.exp(q[i0:i0 + block] @ k.T / np.sqrt(q.shape[-1]))
    out[i0:i0 + block] = (p / p.sum(axis=-1, keepdims=True)) @ v
  return out
'''
HONEST_FLOAT64 = '''# TASK: blocked attention
def blocked_attention(q, k, v, block=128):   # the same in float64, with the max subtraction
  out = np.empty((len(q), v.shape[1]), np.float32)
  for i0 in range(0, len(q), block):
    s = q[i0:i0 + block] @ k.T / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    out[i0:i0 + block] = (p / p.sum(axis=-1, keepdims=True)) @ v
  return out
'''


@needs_bwrap
def test_a_softmax_without_the_max_fails_in_float64_too(tmp_path, env):
  """Before: the overflow case kept scores near 125, which float64's exp survives: 3 of 3 without the max."""
  attack = graded_task(week1_with(tmp_path, "no_max_f64", NO_MAX_FLOAT64), env)
  assert attack[0]["points"] == 0, attack
  assert "in float64 too" in attack[0]["error"] and "scores up to 1000" in attack[0]["error"], attack[0]
  honest = graded_task(week1_with(tmp_path, "honest_f64", HONEST_FLOAT64), env)
  assert [r["points"] for r in honest] == [2, 1], honest


# ---- item 7: cell magics hide no definition ------------------------------------------------------------------------
def test_definitions_read_through_cell_and_line_magics():
  """Before: `%%time` (and `%%capture`) turned the cell into one run_cell_magic call: no definition in it."""
  cells = ["%%time\ndef under_time(x):\n  return x + 1\n",
           "%%capture captured\nimport math\ndef under_capture(x):\n  return math.sqrt(x)\n",
           "%timeit -n1 -r1 sum(range(3))\n!echo hi\ndef beside_magics(x):\n  return 2 * x\n",
           "\n%%time\n%%capture\ndef nested(x):\n  return x\n",
           "%%writefile f.py\ndef not_python_here(): pass\n",   # a file's text, not the notebook's code
           "%%bash\necho no python\n"]
  ns: dict = {}
  exec(notebook_code.definitions(cells), ns)
  assert ns["under_time"](1) == 2 and ns["under_capture"](16.0) == 4.0 and ns["beside_magics"](3) == 6
  assert ns["nested"](5) == 5 and "not_python_here" not in ns


@needs_bwrap
def test_a_function_defined_under_time_is_measured(tmp_path, env):
  """The honest twin: `%%time` over blocked_attention; before, the memory test said "the notebook defines no
  function blocked_attention" (9 of 10)."""
  rows = graded_task(week1_with(tmp_path, "under_time", "%%time\n" + HONEST_FLOAT64), env)
  assert [r["points"] for r in rows] == [2, 1], rows


# ---- item 4: feedback never quotes the hidden probe ----------------------------------------------------------------
LEAK = '''# TASK: blocked attention
def blocked_attention(q, k, v, block=128):   # the probe's cell, and the seed's, out through an exception
  from IPython import get_ipython
  raise ValueError("history: " + " || ".join(get_ipython().user_ns["In"][-3:]))
'''


def test_a_message_quoting_the_probe_is_withheld():
  probe = "_r = seeded(_n)\nrecord(f'N={_n}', blocked_attention(*_case(_n, _d, _top), _block))\n"
  r = redact.Redactor([probe, "SEED = 123456789\n"], 123456789, ["def mine():\n  raise ValueError('my own text')\n"])
  leaked = "ValueError: history: record(f'N={_n}', blocked_attention(*_case(_n, _d, _top), _block)) ..."
  assert r.clean(leaked) == "ValueError: (its message is withheld: it quotes the grader's hidden test)"
  assert "withheld" in r.clean("RuntimeError: the seed was 123456789")
  printed = " ".join(f"{x / 7:.4f}" for x in range(12))
  assert "withheld" in r.clean("ValueError: " + printed)   # a printed input, in a text the sandbox wrote
  assert r.clean("AssertionError: expected " + printed, numbers=False).endswith(printed)   # a judge's own message
  said = redact.Redactor([probe], 1, [], ['expect_equal(recorded["x"], 3, "blocked_attention(*_case(_n, _d, _top)")'])
  assert "withheld" not in said.clean("AssertionError: blocked_attention(*_case(_n, _d, _top): expected 3")
  assert r.clean("ValueError: my own text") == "ValueError: my own text"
  assert r.clean("TypeError: unsupported operand type(s) for +: 'int' and 'str'").startswith("TypeError: unsupported")


@needs_bwrap
def test_feedback_never_carries_the_probes_source(tmp_path, env):
  """Before: the row's error held the probe's cell (its loop, `seeded`, `record`) as IPython's history had it."""
  rows = graded_task(week1_with(tmp_path, "leak", LEAK), env)
  text = json.dumps(rows)
  assert rows[0]["points"] == 0 and "withheld" in rows[0]["error"], rows
  assert "seeded(" not in text and "record(" not in text and "_case" not in text, text


# ---- item 5 (the host's side): a notebook is parsed in a capped child, and a big one is refused --------------------
def notebook_bytes(code: str) -> bytes:
  nb = new_notebook(cells=[new_markdown_cell("# Week 1: why compile"), new_code_cell(code)])
  return nbformat.writes(nb).encode()


def test_a_notebook_too_big_to_parse_is_refused_with_a_reason(tmp_path):
  """Before: the grader's own process parsed any code up to 64 MB (a 3 MB cell took it 1.5 GB and minutes)."""
  big = notebook_bytes("x = 1\n" * 200_000)   # 1.2 MB of code
  with pytest.raises(ValueError, match=r"more than the 1,048,576 a submission may have"):
    notebook_code.digest(big)
  sys.path.insert(0, str(ROOT / "scripts"))
  import grade as tool
  path = tmp_path / "week1_big.ipynb"
  path.write_bytes(big)
  report = tool.grade(path, ROOT / "solutions" / f"{WEEK1}.ipynb")
  assert report.total == 0 and "could not be read" in report.note and "1,048,576" in report.note, report.note
  assert all(row["status"] == "skipped" for t in report.tasks.values() for row in t["tests"])


def test_parsing_runs_under_a_memory_cap(monkeypatch):
  """The child's address space is capped: one that cannot parse within it is an error, not the host's memory."""
  monkeypatch.setattr(notebook_code, "MAX_MEMORY", 32 << 20)
  monkeypatch.setattr(notebook_code, "_memo", None)
  with pytest.raises(ValueError, match="MiB of memory"):
    notebook_code.digest(notebook_bytes("def f(): pass\n"))
  monkeypatch.undo()
  monkeypatch.setattr(notebook_code, "_memo", None)
  d = notebook_code.digest(notebook_bytes("%%time\ndef f(): pass\nprint(f())\n"))
  assert d.cells == [(1, "%%time\ndef f(): pass\nprint(f())\n")] and "def f():" in d.defs
  assert any("Week 1" in t for t in d.titles)


# ---- item 3: C is checked as the grader's own preprocessor reads it ----------------------------------------------
KERNEL = "void k(float* x, int n) {\n  #pragma omp parallel for\n  for (int i = 0; i < n; i++) x[i] = %s;\n}\n"
HIDDEN_HEADERS = {   # each before: passed the header check read literally (the first: issue 48's attack)
  "macro": ("#define H <stdio.h>\n#include H\n" + KERNEL % "1.0f", "not allowed"),
  "path": ('#include "/usr/include/stdio.h"\n' + KERNEL % "1.0f", "/usr/include/stdio.h"),
  "spelled asm": ("#define A __as##m__\n" + KERNEL % "1.0f" + "void j(void) { A(\"nop\"); }\n", "'__asm__'"),
  "device": ('#define D "/dev/zero"\n#include D\n' + KERNEL % "1.0f", "could not be preprocessed"),
  "made directive": ("#define P _Pragma(\"GCC optimize(\\\"O0\\\")\")\nP\n" + KERNEL % "1.0f", "directive"),
}


@needs_bwrap
def test_a_header_hidden_behind_a_macro_is_refused(tmp_path, monkeypatch):
  """The honest twin (math.h, string.h, OpenMP, INFINITY from math.h in the compiler's own pass) compiles."""
  import outside
  monkeypatch.setenv("UOPC_GRADER_KERNELS", str(tmp_path / "kernels"))
  honest = "#include <math.h>\n#include <string.h>\n" + KERNEL % "sqrtf((float)i) + (INFINITY > 0)"
  t0 = time.monotonic()
  got = outside.build([honest] + [src for src, _ in HIDDEN_HEADERS.values()], sandboxed=True)
  assert isinstance(got[honest], Path) and got[honest].is_file(), got[honest]
  for name, (src, says) in HIDDEN_HEADERS.items():
    assert isinstance(got[src], str) and says in got[src], (name, got[src])
  assert time.monotonic() - t0 < 240   # the device read stopped at a limit (a generous bound: a shared machine)


# ---- item 6: every uopc function that answers a task is guarded for that task --------------------------------------
# (week, task) -> the uopc definitions that answer it; each must be declared by every hidden test of the task. A reading
# of uopc against each task (issue 48) found these; tasks absent here have no answer in uopc (week 6's merge of two
# online-softmax states, for one: uopc's online softmax exists only as UOp graphs, examples/flash_attention.py)
ANSWERED_BY_UOPC = {
  ("week1_why_compile", "check the arguments"): {"uopc.runtime.program.Program",
                                                 "uopc.runtime.program.signature_from_c",
                                                 "uopc.runtime.program.args_of"},
  ("week3_gemm_by_hand", "naive GEMM"): {"uopc.rangeify.lower", "uopc.codegen.gemm_vec.lower_gemm"},
  ("week3_gemm_by_hand", "B transposed"): {"uopc.rangeify.lower", "uopc.codegen.gemm_vec.lower_gemm"},
  ("week5_tensor_and_fast_kernel", "variance and LayerNorm"): {"uopc.mixin.reduce.ReduceMixin.var",
                                                               "uopc.mixin.functional.NNMixin.layernorm"},
  ("week5_tensor_and_fast_kernel", "convolution as a view"): {"uopc.mixin.windows.WindowMixin.conv2d",
                                                              "uopc.mixin.windows.WindowMixin.conv_transpose2d",
                                                              "uopc.mixin.windows.WindowMixin._pool",
                                                              "uopc.mixin.torchlike.TorchMixin.unfold"},
  ("week6_flash_attention", "block sizes"): {"uopc.codegen.gpudims.default_block"},
  ("week7_gpu_machinery_and_a_gpt", "emulate one mma"): {"uopc.codegen.wmma.mma"},
  ("week7_gpu_machinery_and_a_gpt", "AdamW step"): {"uopc.optim.AdamW", "uopc.optim.adamw_step_numpy"},
  ("week7_gpu_machinery_and_a_gpt", "count the parameters"): {"uopc.nn.layers.Module.num_parameters"},
}


def test_every_uopc_answer_is_guarded_for_its_task():
  """Before: week 1's argument checks (uopc's Program) and week 5's conv2d were reachable while graded."""
  import guards
  import judge
  for (week, task), names in ANSWERED_BY_UOPC.items():
    book = nbformat.read(ROOT / "solutions" / f"{week}.ipynb", as_version=4)
    hidden = [(k, c.source) for k, c in enumerate(book.cells)
              if c.cell_type == "code" and "hidden-test" in c.metadata.get("tags", [])]
    tests = [t for k, src in hidden if (t := judge.parse(src, k, week)) is not None and t.task == task
             and t.kind == "values"]
    assert tests, (week, task)
    for t in tests:
      declared = {g.name for g in t.shortcuts}
      assert names <= declared, (week, task, sorted(names - declared))
      for name in declared: guards.locate(ROOT, name)   # each names a definition the tree has


CHECKED_BY_UOPC = '''# TASK: check the arguments
C_TYPES = {"float": np.float32, "double": np.float64, "int": np.int32}
class CheckedProgram(MiniProgram):   # uopc's Program does the checking, its ValueError renamed
  def __init__(self, src, name):
    super().__init__(src, name)
    self.src, self.name = src, name

  def __call__(self, *args):
    from uopc.runtime.program import Program
    p = Program(self.src, self.name)
    if len(args) != len(p.params): raise p._count_error(len(args))
    try:
      for k, (a, arg) in enumerate(zip(p.params, args)): p._convert_checked(k, arg, a)
    except (TypeError, ValueError) as e: raise TypeError(str(e)) from None
    return self.fn(*args)
'''
CONV_BY_UOPC = '''# TASK: convolution as a view
def conv2d(x, w, stride=1, padding=0): return x.conv2d(w, stride=stride, padding=padding)
'''


@needs_bwrap
def test_uopcs_answers_are_unavailable_while_graded(tmp_path, env):
  """Week 1's argument check through uopc's Program and week 5's conv through Tensor.conv2d score 0, saying why."""
  for week, task, source in (("week1_why_compile", "check the arguments", CHECKED_BY_UOPC),
                             ("week5_tensor_and_fast_kernel", "convolution as a view", CONV_BY_UOPC)):
    book = visible(ROOT / "solutions" / f"{week}.ipynb")
    (cell,) = [c for c in book.cells if c.cell_type == "code" and f"# TASK: {task}" in c.source]
    cell.source = source
    nbformat.write(book, tmp_path / f"{week}.ipynb")
    score, _ = grade(tmp_path / f"{week}.ipynb", env[0], "--only", task)
    rows = rows_of(score, task)
    assert sum(r["points"] for r in rows) == 0 and "ShortcutUnavailable" in json.dumps(rows), rows


# ---- item 1 (a part): the harness's frames are numbered; an extra frame is a protocol error --------------------------
FUSED = """#include <unistd.h>
void fused(const float* a, const float* b, const float* c, const float* d, float* out, int n) {
  for (int i = 0; i < n; i++) out[i] = a[i] * b[i] + c[i] * d[i] - a[i];
  %s
}"""
FORGED = ('static const char frame[] = "{\\"done\\": true, \\"blobs\\": []}\\n";\n'   # once, after its work
          "  static int calls;\n"
          "  if (calls++ == 0) for (int fd = 3; fd < 32; fd++) write(fd, frame, sizeof frame - 1);")


def test_an_extra_frame_in_the_answer_pipe_is_a_protocol_error(tmp_path):
  """Before: a kernel that wrote one reply frame into the harness's pipe shifted every later answer by one, so each
  timed run "answered" at once. The honest twin (the same kernel without the write) is timed."""
  import subprocess
  import harness
  got = {}
  for name, extra in (("forged", FORGED), ("honest", "")):
    src = tmp_path / f"{name}.c"
    src.write_text(FUSED % extra)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(tmp_path / f"{name}.so"), str(src)], check=True)
    n = 1 << 16
    job = {"kind": "time", "student": {"object": str(tmp_path / f"{name}.so"), "name": "fused",
                                       "params": ["p", "p", "p", "p", "p", "i"]},
           "reference": None, "numpy": "a * b + c * d - a", "reps": 3, "tol": 1e-3, "outputs": [4],
           "args": [["f32", [n]], ["f32", [n]], ["f32", [n]], ["f32", [n]], ["zeros", [n]], ["int", n]]}
    try: got[name] = harness.do_time(job)
    except Exception as e: got[name] = {"error": f"{type(e).__name__}: {e}"}
  assert "ProtocolError" in got["forged"].get("error", ""), got["forged"]
  assert set(got["honest"]) == {"student", "reference"} and got["honest"]["student"] > 0, got["honest"]


# ---- item 2 (a part): after its warm-up the timed process opens nothing, signals no one, starts no thread --------
PROBING = """#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
static int calls;
static void* nothing(void* p) { return p; }
void fused(const float* a, const float* b, const float* c, const float* d, float* out, int n) {
  int opened = -1, signalled = -1, started = -1;
  if (calls++ > 0) {   /* after the warm-up: what an attack on the reference would need */
    opened = open("/proc/self/status", O_RDONLY);
    signalled = kill(getppid(), 0);
    pthread_t t;
    started = pthread_create(&t, 0, nothing, 0);
  }
  float spoil = (opened >= 0 || signalled == 0 || started == 0) ? NAN : 0.0f;
  for (int i = 0; i < n; i++) out[i] = a[i] * b[i] + c[i] * d[i] - a[i] + spoil;
}"""


def test_the_timed_process_is_locked_after_its_warm_up(tmp_path):
  """Before: a kernel could open /proc, signal the reference (SIGSTOP) and start spinning threads at any call. Round 3
  made each of those fail with EPERM; since round 5 (lockdown.ALLOW, an allow-list) the first of them ends the timed
  process: the timing is an error and the kernel earns no speed point (test_grader_attacks_round5 for the honest
  OpenMP kernel that is timed under the same filter)."""
  import subprocess
  import harness
  import ctypes.util
  if ctypes.util.find_library("seccomp") is None:
    pytest.skip("libseccomp is not installed")
  src = tmp_path / "probing.c"
  src.write_text(PROBING)
  subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-pthread", "-o", str(tmp_path / "probing.so"), str(src)],
                 check=True)
  n = 1 << 14
  job = {"kind": "time", "student": {"object": str(tmp_path / "probing.so"), "name": "fused",
                                     "params": ["p", "p", "p", "p", "p", "i"]},
         "reference": None, "numpy": "a * b + c * d - a", "reps": 3, "tol": 1e-3, "outputs": [4],
         "args": [["f32", [n]], ["f32", [n]], ["f32", [n]], ["f32", [n]], ["zeros", [n]], ["int", n]]}
  got = harness.do_time(job)
  assert set(got) == {"error"} and "system call" in got["error"], got


UNEVEN = """#include <time.h>
static int calls;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
void fused(const float* a, const float* b, const float* c, const float* d, float* out, int n) {
  for (int i = 0; i < n; i++) out[i] = a[i] * b[i] + c[i] * d[i] - a[i];
  /* every run takes 20 ms or more, but one: a wait on the clock (clock_gettime is the one clock call the timed
     process's filter allows; a sleep would end it, lockdown.ALLOW) */
  if (++calls != 3) for (double t0 = now(); now() - t0 < 0.02;) {}
}"""


def test_a_repetition_out_of_band_is_rerun_not_taken_as_the_best(tmp_path):
  """Before: the best of the repetitions was taken, so one undisturbed-looking fast run (a run whose neighbours were
  all 20 ms or more) was the kernel's time; now a run outside 0.5-2x its side's median is rerun and left out."""
  import subprocess
  import harness
  src = tmp_path / "uneven.c"
  src.write_text(UNEVEN)
  subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(tmp_path / "uneven.so"), str(src)], check=True)
  n = 1 << 12
  job = {"kind": "time", "student": {"object": str(tmp_path / "uneven.so"), "name": "fused",
                                     "params": ["p", "p", "p", "p", "p", "i"]},
         "reference": None, "numpy": "a * b + c * d - a", "reps": 5, "tol": 1e-3, "outputs": [4],
         "args": [["f32", [n]], ["f32", [n]], ["f32", [n]], ["f32", [n]], ["zeros", [n]], ["int", n]]}
  got = harness.do_time(job)
  assert got["student"] >= 0.02, got   # each slow run waits 20 ms on the clock: a lower bound, not a measurement

"""Planted attack notebooks, one or more per class of issue 27, each graded by scripts/grade.py in its sandbox: the
task it attacks scores 0 (or exactly what the honest stub or the honest partial answer scores), and the grader's
tree, virtual environment, home and kernel cache are the same before and after (hashed). A harmful notebook graded
before an honest one leaves the honest one's grade unchanged.

Each attack starts from the generated assignment (the stubs: 0 points), so any point it scores is a point stolen."""
import csv
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
import nbformat
import pytest
from nbformat.v4 import new_code_cell
from assignment_grading import visible
from uopc.runtime.compiler_bugs import CHECKS

ROOT = Path(__file__).resolve().parents[2]
GRADER = ROOT / "scripts" / "grade.py"
sys.path.insert(0, str(ROOT / "scripts" / "grader"))
import sandbox  # noqa: E402

pytestmark = pytest.mark.skipif(sandbox.available() is not None, reason=str(sandbox.available()))
SEED = "27"
WEEK1, WEEK3, WEEK4, WEEK7 = ("week1_why_compile", "week3_gemm_by_hand", "week4_kernelize_and_realize",
                              "week7_gpu_machinery_and_a_gpt")

TAMPER = r'''
import builtins, ast, sys, types
import numpy as np
from IPython import get_ipython
class Anything(float):   # an answer that compares equal to anything
  def __eq__(self, other): return True
  def __ne__(self, other): return False
  def __lt__(self, other): return True
  __hash__ = float.__hash__
  def __array__(self, *a, **k): return np.zeros(1)
KEYS = ("sp_bytes", "io_bytes", "flops", "ai_unfused", "ai_fused")
def cost(N, D=64, itemsize=4): return {k: Anything(0) for k in KEYS}
def blocked_attention(q, k, v, block=128): return Anything(0)
np.allclose = np.array_equal = lambda *a, **k: True
np.isclose = lambda a, b, *x, **k: np.ones(np.shape(a), bool)
_isinstance = builtins.isinstance   # lies where a check asks about the answers' types (all of it would hang IPython)
builtins.isinstance = lambda o, t: True if t in (dict, tuple, list, np.ndarray) else _isinstance(o, t)
builtins.abs = lambda x: 0
builtins.AssertionError = type("AssertionError", (Exception,), {})
sys.modules["gradelib"] = types.SimpleNamespace(expect_close=lambda *a, **k: None, expect_equal=lambda *a, **k: None)
ip = get_ipython()
ip.input_transformers_post.append(lambda lines: ["pass\n"] if lines and lines[0].startswith("# POINTS:") else lines)
class Swallow(ast.NodeTransformer):   # every later cell inside try/except BaseException
  def visit_Module(self, node):
    handler = ast.ExceptHandler(type=ast.Name("BaseException", ast.Load()), name=None, body=[ast.Pass()])
    node.body = [ast.Try(body=node.body or [ast.Pass()], handlers=[handler], orelse=[], finalbody=[])]
    return ast.fix_missing_locations(node)
ip.ast_transformers.append(Swallow())
'''

READ_ANSWERS = r'''
import glob, os, sys
import uopc
places = [os.path.dirname(os.path.dirname(uopc.__file__)), os.getcwd(), os.path.expanduser("~"), "/", "/tmp", "/job",
          "/grader", "/course", "/root", "/work", "/home"]
for p in glob.glob("/proc/[0-9]*"):
  for link in ("cwd", "root"):
    try: places.append(os.readlink(f"{p}/{link}"))
    except OSError: pass
  try: places += [a for a in open(f"{p}/cmdline").read().split("\0") if a.startswith("/")]
  except OSError: pass
# the system's folders and the Python's four levels deep, as "/" is: searched whole they take minutes (the cell ran
# out of time before it could use what it found)
system = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/sys", "/dev", "/proc",
          os.path.realpath(sys.base_prefix))
found = []
for place in dict.fromkeys(places):
  real = os.path.realpath(place)
  if real == "/" or any(real == s or real.startswith(s + "/") for s in system):
    pats = [os.path.join(place, *["*"] * n, "*week1*") for n in range(4)]
  else: pats = [os.path.join(place, "**", "*week1*")]
  for pat in pats:
    for f in glob.glob(pat, recursive=True):
      try: text = open(f).read()
      except Exception: continue
      if "BEGIN SOLUTION" in text or "hidden-test" in text: found.append(f)
print("found:", found)
for f in found:   # had it found the solution, its cells would define every task
  import nbformat
  for c in nbformat.read(f, as_version=4).cells:
    if c.cell_type == "code" and "TASK" in c.source:
      try: exec(c.source, globals())
      except Exception: pass
'''

FORGE = r'''
import json, os, signal, sys, time
full = {"notebook": "mine", "solution": "week1", "tasks": {}, "total": 10.0, "max": 10.0, "student_cells": {"run": 1,
        "errors": [], "timeouts": 0, "skipped": 0}, "kernel_restarts": 0, "note": ""}
for fd in (f"/proc/{os.getppid()}/fd/1", "/proc/1/fd/1", "/dev/stdout", "/proc/self/fd/1"):
  try:
    with open(fd, "w") as f: f.write("total 10 / 10\n" + json.dumps(full) + "\n")
  except OSError: pass
os.makedirs("/job/out/records/0", exist_ok=True)
with open("/job/out/result.json", "w") as f:   # every probe "ok", and values that are objects, not data
  json.dump({"cells": {"run": 1, "errors": []}, "restarts": 0, "note": "",
             "probes": [{"status": "ok", "error": "", "seconds": 0}] * 6}, f)
with open("/job/out/records/0/r0.json", "w") as f:
  json.dump({"name": "cost(1024, 64, 4)", "value": {"__not_plain__": "Anything"}}, f)
if os.fork() == 0:   # a detached daemon that writes a fake result after the grader is done
  os.setsid()
  if os.fork() == 0:
    time.sleep(4)
    for fd in ("/proc/1/fd/1", "/dev/stdout"):
      try: open(fd, "w").write(json.dumps(full) + "\n")
      except OSError: pass
  os._exit(0)
'''
FORGE_END = [new_code_cell("raise SystemExit(0)"), new_code_cell("raise KeyboardInterrupt"),
             new_code_cell("class GradingTimeout(BaseException): pass\nraise GradingTimeout()"),
             new_code_cell("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos._exit(0)")]

HARM = r'''
import glob, os, sys
import uopc
def attempt(what, fn):
  try: fn(); print("done:", what)
  except Exception as e: print("refused:", what, type(e).__name__)
for p in sys.path:
  attempt(f"a .pth in {p}", lambda p=p: open(os.path.join(p, "zz_evil.pth"), "w").write("import os\n"))
startup = os.path.expanduser("~/.ipython/profile_default/startup")
os.makedirs(startup, exist_ok=True)
open(os.path.join(startup, "00-evil.py"), "w").write("raise SystemExit")
attempt("uopc/__init__.py", lambda: open(uopc.__file__, "a").write("\nraise ImportError\n"))
attempt("a planted .pyc", lambda: os.makedirs(os.path.join(os.path.dirname(uopc.__file__), "__pycache__")))
for d in glob.glob("/grader") + glob.glob("/course/*"):
  attempt(f"write in {d}", lambda d=d: open(os.path.join(d, "evil.py"), "w").write("x = 1\n"))
for sol in glob.glob("/**/solutions", recursive=False) + glob.glob("/*/*/solutions"):
  attempt(f"rm {sol}", lambda sol=sol: [os.remove(f) for f in glob.glob(sol + "/*")])
cache = os.environ.get("UOPC_CACHE_DIR", os.path.expanduser("~/.cache/uopc"))
os.makedirs(cache, exist_ok=True)
for k in range(64):   # compiled "kernels" under keys a later notebook might load, and a cache filled up
  open(os.path.join(cache, f"gemm-{k:064x}.so"), "wb").write(b"\x7fELF" + b"\0" * 1000)
open(os.path.join(cache, "fill"), "wb").write(b"\0" * (64 << 20))
attempt("list the grader's kernels", lambda: print(os.listdir("/kernels")))
attempt("plant a grader's kernel", lambda: open("/kernels/gemm-" + "0" * 32 + ".so", "wb").write(b"\x7fELF"))
attempt("/tmp outside", lambda: open("/tmp/uopc-attack-marker", "w").write("x"))
'''

LOOKUP = r'''
# the old hidden tests' inputs, answered from a table: no formula at all
TABLE = {(1024, 64, 4): 0, (4096, 128, 4): 0, (2048, 64, 2): 0, (1000, 96, 2): 0}
def _known(n, d, s):
  sp, io, fl = 2 * s * n * n, 4 * s * n * d, 4 * n * n * d
  return {"sp_bytes": sp, "io_bytes": io, "flops": fl, "ai_unfused": fl / (2 * sp + io), "ai_fused": fl / io}
TABLE = {key: _known(*key) for key in TABLE}
def cost(N, D=64, itemsize=4): return TABLE[(N, D, itemsize)]
'''

SLOW_BASELINE = r'''
# gemm_tiled is the naive kernel; the naive one the old grader timed is made slow, so "tiled" looked 2x faster
import time as _time
gemm_tiled = gemm_naive
_compile = compile_gemm
def compile_gemm(build, M, N, K):
  prg = _compile(build, M, N, K)
  if build is gemm_naive and M * N * K >= 256 ** 3: return lambda *a: (_time.sleep(0.2), prg(*a))
  return prg
'''

SHORTCUT = r'''
def gpt_parameters(cfg):
  return GPT(cfg, seed=0).num_parameters()   # uopc's finished count
'''

MMA_SHORTCUT = r'''
def mma_emulated(shape, a, b, c):
  return wmma.mma(shape, a, b, c)   # uopc's emulation, which the hidden tests compare with
'''

PLAN_FLOPS_SHORTCUT = r'''
def matmul_flops(n, m, k):
  return plan_flops(n, m, k)   # the visible check's own count of the plan, not a formula
'''


CACHES = ("__pycache__/", ".hypothesis/", ".ruff_cache/", ".pytest_cache/")
# what the grader's own judges may add to its kernel cache: uopc's compiled reference kernels, by uopc's naming
# a kernel the grader's own processes compiled: its entry and checksum, and the object file it was linked from
# with that object's checksum (uopc.runtime.build.object_path: kept for a linked step, NOTES 69)
OWN_KERNEL = re.compile(r"^[A-Za-z_]\w*-[0-9a-f]{32}(\.so|\.sum|-own\.o|-own\.sum)$")


def fingerprint(home: Path, cache: Path) -> dict:
  """Hashes of what a submission must not change: the grader's tree (the content of tracked files, the names of
  untracked and ignored ones), its home and its cache (every file's size and time). Left out: the caches that test
  processes running beside this one write (.pyc files, hypothesis, ruff), and the compiler's verdicts the grader's
  own processes keep in its cache (uopc.runtime.compiler_bugs); the sandbox mounts all of it read-only or not at
  all, which is what this checks from the outside. (The venv: venv_unchanged, once for the module.)"""
  git = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=ROOT,
                       capture_output=True, text=True).stdout
  git = "\n".join(line for line in git.splitlines() if not any(c in line for c in CACHES))
  content = hashlib.sha256()
  for f in subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True).stdout.split("\0"):
    if f and (ROOT / f).is_file(): content.update(f.encode() + (ROOT / f).read_bytes())
  return {"tree": content.hexdigest(), "git status": git, "home": tree(home),
          "cache": tree(cache, skip=(CHECKS,), own=OWN_KERNEL)}


def tree(root: Path, skip=(), own=None) -> str:
  """A hash of every file's path, size and time under root (skip: folder names left out; own: file names at the
  top left out)."""
  h = hashlib.sha256()
  for d, _, files in sorted(os.walk(root)):   # (sorted walks it all first: pruning `dirs` would come too late)
    if set(Path(d).relative_to(root).parts) & set(skip): continue
    for f in sorted(files):
      if own is not None and own.match(f) and Path(d) == root: continue
      p = Path(d) / f
      st = p.lstat()
      h.update(f"{p.relative_to(root)} {st.st_size} {st.st_mtime_ns}\n".encode())
  return h.hexdigest()


@pytest.fixture(scope="module", autouse=True)
def venv_unchanged():
  """The grader's virtual environment (24,000 files: a second of hashing) the same after every grading of this
  module as before the first: hashed once at each end, not around each grading. The sandbox mounts it read-only,
  which this checks from the outside; the tree, home and cache are checked around each grading (graded_unharmed)."""
  before = tree(Path(sys.prefix), skip=("__pycache__",))
  yield
  assert tree(Path(sys.prefix), skip=("__pycache__",)) == before, "a submission changed the grader's venv"


def grade(nb: Path, env: dict, *args: str) -> tuple[dict, str]:
  # (args after the defaults: a later --test-timeout is the one argparse keeps)
  cmd = [sys.executable, str(GRADER), str(nb), "--seed", SEED, "--timeout", "30", "--test-timeout", "20", *args]
  r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  lines = r.stdout.strip().splitlines()
  return json.loads(lines[-1]), r.stdout


def attack(week: str, tmp: Path, name: str, cells: list, base: str = "assignment") -> Path:
  """The week's assignment (or the solution as a student hands it in) with the attack's cells at the end."""
  nb = nbformat.read(ROOT / "assignments" / f"{week}.ipynb", as_version=4) if base == "assignment" \
    else visible(ROOT / "solutions" / f"{week}.ipynb")
  nb.cells += [c if isinstance(c, dict) else new_code_cell(c) for c in cells]
  path = tmp / f"{name}.ipynb"
  nbformat.write(nb, path)
  return path


def points(score: dict) -> dict: return {t: v["points"] for t, v in score["tasks"].items()}


def only(*tasks: str) -> list[str]:
  """grade.py's arguments that grade these tasks alone: an attack on one task is judged on that task (the rest of
  the notebook still runs in the sandbox), at a fraction of the cost."""
  return [a for t in tasks for a in ("--only", t)]


def graded_unharmed(nb: Path, env, *args: str) -> dict:
  """Grade nb (args: e.g. --only, for an attack on one task); the grader's tree, venv, home and cache hash the same
  before and after."""
  environ, home, cache = env
  before = fingerprint(home, cache)
  score, _ = grade(nb, environ, *args)
  after = fingerprint(home, cache)
  assert {k: v for k, v in after.items() if before[k] != v} == {}, "the submission changed the grader's files"
  return score


# TAMPER leaves the kernel deadlocked (idle: given 90 s, the setup after the student's cells never answers): the grader
# finds it so after the setup's time limit and a check that the interrupted kernel answers (each with a second more
# that it waits for output: kernel.IOPUB_AFTER_TIMEOUT_S), so the limit given is what this grading waits: 5 s, not the
# other attacks' 20 (a quarter of a minute of CI, NOTES 51's budget). The note pins that path: were the kernel one day
# to answer, the probes and judges would run, and that needs their usual time limit again.
STUCK_KERNEL_TIMEOUT = ("--test-timeout", "5")


def test_tampering_with_the_checks_scores_nothing(tmp_path, env):
  score = graded_unharmed(attack(WEEK1, tmp_path, "tamper", [TAMPER]), env, *STUCK_KERNEL_TIMEOUT)
  assert score["total"] == 0, score
  assert score["note"] == "the kernel stopped answering after the student's cells: no test could run", score
  assert all(t["status"] != "ok" for task in score["tasks"].values() for t in task["tests"]), score


def test_reading_the_answers_finds_nothing(tmp_path, env):
  score = graded_unharmed(attack(WEEK1, tmp_path, "read", [READ_ANSWERS]), env)
  assert score["total"] == 0, score
  assert score["student_cells"]["timeouts"] == 0, score   # the search ended: what it found was used


def test_forging_the_result_is_not_believed(tmp_path, env):
  nb = attack(WEEK1, tmp_path, "forge", [FORGE, *FORGE_END])
  score = graded_unharmed(nb, env)
  assert score["total"] == 0 and score["max"] == 10, score
  time.sleep(5)   # the daemon, had it survived the sandbox, would have written by now
  _, out = grade(nb, env[0], "--only", "cost table")
  assert json.loads(out.strip().splitlines()[-1])["total"] == 0 and out.count('"total": 10.0') == 0


def test_harm_does_not_outlive_the_submission(tmp_path, env, graded_class):
  """A harmful notebook (whose metadata also names a solution outside the table): nothing of the grader's changed
  (graded_unharmed), so an honest notebook graded next scores what it scores alone (honest_after)."""
  nb = attack(WEEK1, tmp_path, "harm", [HARM])
  meta = nbformat.read(nb, as_version=4)
  meta.metadata["uopc"] = {"assignment": "../outputs/x"}
  nbformat.write(meta, nb)
  score = graded_unharmed(nb, env)
  assert score["total"] == 0 and score["solution"].endswith(f"solutions/{WEEK1}.ipynb"), score
  assert not Path("/tmp/uopc-attack-marker").exists()
  assert honest_after(WEEK1, graded_class)["max"] == 10


def test_gaming_the_measure_scores_nothing_for_it(tmp_path, env):
  """Answers from a table of the visible inputs; a slow baseline to time against; uopc's finished function (week 7's
  GPT count and mma, week 4's count of the plan in place of a formula), which raises in the sandbox's tree."""
  score = graded_unharmed(attack(WEEK1, tmp_path, "lookup", [LOOKUP]), env, *only("cost table"))
  assert points(score)["cost table"] == 0, score
  score = graded_unharmed(attack(WEEK3, tmp_path, "slow_baseline", [SLOW_BASELINE], base="solution"), env,
                          *only("4x4 register tile"))
  tiled = score["tasks"]["4x4 register tile"]
  assert tiled["points"] == 3, tiled   # the values are right (it is the naive kernel); structure and speed are not
  assert [t["status"] for t in tiled["tests"] if t["kind"] == "speed"] == ["error"], tiled
  score = graded_unharmed(attack(WEEK7, tmp_path, "shortcut", [SHORTCUT, MMA_SHORTCUT], base="solution"), env)
  got = points(score)
  assert got["count the parameters"] == got["emulate one mma"] == 0 and score["total"] == score["max"] - 5, got
  assert "ShortcutUnavailable: uopc.nn.gpt.GPT is uopc's answer to task 'count the parameters'" in json.dumps(score)
  assert "ShortcutUnavailable: uopc.codegen.wmma.mma is uopc's answer" in json.dumps(score)
  score = graded_unharmed(attack(WEEK4, tmp_path, "plan_flops", [PLAN_FLOPS_SHORTCUT], base="solution"), env)
  assert points(score)["matmul FLOPs"] == 0 and score["total"] == score["max"] - 2, points(score)
  assert "ShortcutUnavailable: uopc.rangeify" in json.dumps(score["tasks"]["matmul FLOPs"])


# --- issue 38: the second round. One planted notebook (or folder) per class of attack, each blocked, and an honest
# notebook of the same week graded after it at full marks. ------------------------------------------------------------
WEEK6 = "week6_flash_attention"


def honest_after(week: str, graded_class) -> dict:
  """The week's honest notebook at full marks, after an attack: its grading in the run's class (graded_class.py,
  `make grade-all` once for the run). Every attack's grading is fingerprinted (graded_unharmed: the grader's tree,
  home and cache hash the same after it, the venv at the module's end), so nothing an attack could leave for a later
  grading exists, and the same notebook graded again here in the attack's home would prove nothing more (it did, in
  four whole gradings a run: NOTES 60)."""
  score = graded_class.report(week, "solved")
  assert score["total"] == score["max"] > 0, {t: v for t, v in score["tasks"].items() if v["points"] < v["max"]}
  return score


def cell_with(nb: Path, task: str, source: str) -> None:
  """nb with the task cell of `task` replaced by source."""
  book = nbformat.read(nb, as_version=4)
  (cell,) = [c for c in book.cells if c.cell_type == "code" and f"# TASK: {task}" in c.source]
  cell.source = f"# TASK: {task}\n{source}"
  nbformat.write(book, nb)


def rows_of(score: dict, task: str) -> list[dict]: return score["tasks"][task]["tests"]


LAZY = '''def fused_source():
  return """static float* seen = 0;
void fused(const float* a, const float* b, const float* c, const float* d, float* out, int n) {
  if (out == seen) return;   /* called again on the buffer it already filled: skip the work */
  seen = out;
  for (int i = 0; i < n; i++) out[i] = a[i] * b[i] + c[i] * d[i] - a[i];
}"""'''
INTO_PYTHON = '''def fused_source():
  return """int PyRun_SimpleString(const char* s);
void fused(const float* a, const float* b, const float* c, const float* d, float* out, int n) {
  PyRun_SimpleString("import gc; print([o for o in gc.get_objects() if isinstance(o, str) and len(o) == 32])");
  for (int i = 0; i < n; i++) out[i] = a[i] * b[i] + c[i] * d[i] - a[i];
}"""'''


def test_speed_cannot_be_forged(tmp_path, env, graded_class):
  """A kernel that skips its work when called again on the same output buffer, and one that calls into the process's
  Python (where the old grader's signing key lived): neither scores the speed point; the first still has its values,
  the second is refused for the symbol it imports."""
  lazy = attack(WEEK1, tmp_path, "lazy", [], base="solution")
  cell_with(lazy, "a fused kernel", LAZY)
  values, speed = rows_of(graded_unharmed(lazy, env, *only("a fused kernel")), "a fused kernel")
  assert values["status"] == "ok" and speed["status"] == "error" and "never written (NaN)" in speed["error"], speed
  into = attack(WEEK1, tmp_path, "into_python", [], base="solution")
  cell_with(into, "a fused kernel", INTO_PYTHON)
  score = graded_unharmed(into, env, *only("a fused kernel"))
  values, speed = rows_of(score, "a fused kernel")
  assert values["points"] == speed["points"] == 0 and "PyRun_SimpleString" in values["error"], (values, speed)
  # its values failed in the round its timing was asked in: not timed again (it was, twice, for nothing)
  assert score["phases"]["speed_runs"] == 1, score["phases"]
  honest_after(WEEK1, graded_class)


COMPUTED_NAMES = '''
import base64, importlib
def adamw_step(p, g, m, v, t, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
  fn = getattr(importlib.import_module("uopc." + "optim"), "adamw_step_" + "numpy")   # uopc's NumPy AdamW
  return fn(p, g, m, v, t, lr, betas[0], betas[1], eps, weight_decay)
def gpt_parameters(cfg):
  scope = {"cfg": cfg}
  exec(base64.b64decode(b"ZnJvbSB1b3BjLm5uIGltcG9ydCBHUFQKbiA9IEdQVChjZmcsIHNlZWQ9MCkubnVtX3BhcmFtZXRlcnMoKQ=="), scope)
  return scope["n"]   # from uopc.nn import GPT; n = GPT(cfg, seed=0).num_parameters()
def mma_emulated(shape, a, b, c):
  return getattr(__import__("uopc.codegen.wmma", fromlist=["x"]), "m" + "ma")(shape, a, b, c)
'''
MAKE_PLAN_GEMM = '''
def _lowered(M, N, K, transposed):
  from uopc.kernelize import make_plan
  from uopc.tensor import Tensor
  a = Tensor(np.ones((M, K), np.float32))
  b = Tensor(np.ones((N, K), np.float32)).T if transposed else Tensor(np.ones((K, N), np.float32))
  return make_plan([(a @ b).uop], False, None).kernels[-1].ast   # uopc's own loop program of the matmul
def gemm_naive(M, N, K): return _lowered(M, N, K, False)
def gemm_naive_bt(M, N, K): return _lowered(M, N, K, True)
'''


def test_shortcuts_cannot_be_reached_by_any_route(tmp_path, env, graded_class):
  """uopc's finished answers reached by a computed name (importlib and getattr with built strings, exec of decoded
  text) in week 7, and week 3's GEMMs from uopc's own plan of a Tensor matmul: each such task scores 0 with a
  message naming it; the other tasks keep their points."""
  score = graded_unharmed(attack(WEEK7, tmp_path, "computed", [COMPUTED_NAMES], base="solution"), env)
  for task in ("AdamW step", "count the parameters", "emulate one mma"):
    assert score["tasks"][task]["points"] == 0, score["tasks"][task]
    assert all("ShortcutUnavailable" in t["error"] for t in rows_of(score, task)), rows_of(score, task)
  assert score["total"] == score["max"] - 8, points(score)
  score = graded_unharmed(attack(WEEK3, tmp_path, "make_plan", [MAKE_PLAN_GEMM], base="solution"), env,
                          *only("naive GEMM", "B transposed"))
  assert points(score)["naive GEMM"] == points(score)["B transposed"] == 0, points(score)
  assert "ShortcutUnavailable: uopc.rangeify" in json.dumps(score["tasks"]["naive GEMM"])
  honest_after(WEEK7, graded_class)
  honest_after(WEEK3, graded_class)


SELF_CHECKS = '''
from uopc.optim import adamw_step_numpy
from uopc.codegen import wmma as _w
_mine = adamw_step(np.ones(3), np.ones(3), np.zeros(3), np.zeros(3), 1)[0]
print("matches uopc's:", np.allclose(_mine, adamw_step_numpy(np.ones(3), np.ones(3), np.zeros(3), np.zeros(3), 1)[0]))
print(GPT(GPTConfig(), seed=0).num_parameters() == gpt_parameters(GPTConfig()))
'''


def test_a_self_check_against_uopc_costs_nothing(tmp_path, env, graded_class):
  """A right answer followed by a check against uopc's own version (as the worked examples teach): full marks; the
  cell that called uopc's version is named, with why it stopped."""
  score = graded_unharmed(attack(WEEK7, tmp_path, "self_check", [SELF_CHECKS], base="solution"), env)
  assert score["total"] == score["max"] and score["student_cells"]["errors"] == [], score
  last = len(nbformat.read(tmp_path / "self_check.ipynb", as_version=4).cells) - 1
  assert any(s["cell"] == last and "adamw_step_numpy" in s["error"] for s in score["stops"]), score["stops"]
  honest_after(WEEK7, graded_class)


NO_MAX = '''
def blocked_attention(q, k, v, block=128):   # no max subtraction: exp overflows on large scores
  out = np.empty((len(q), v.shape[1]), np.float32)
  for i0 in range(0, len(q), block):
    p = np.exp(q[i0:i0 + block] @ k.T / math.sqrt(q.shape[-1]))
    out[i0:i0 + block] = (p / p.sum(axis=-1, keepdims=True)) @ v
  return out
'''
NP_SQRT = '''
def blocked_attention(q, k, v, block=128):   # right, with np.sqrt(D): float64 temporaries under NumPy 2
  out = np.empty((len(q), v.shape[1]), np.float32)
  for i0 in range(0, len(q), block):
    s = q[i0:i0 + block] @ k.T / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    out[i0:i0 + block] = (p / p.sum(axis=-1, keepdims=True)) @ v
  return out
'''
NAIVE = '''
def blocked_attention(q, k, v, block=128):   # right values, one N x N array
  s = q @ k.T / math.sqrt(q.shape[-1])
  p = np.exp(s - s.max(axis=-1, keepdims=True))
  return (p / p.sum(axis=-1, keepdims=True)) @ v
'''


def test_week1_softmax_and_memory_judged_rightly(tmp_path, env, graded_class):
  """Week 1: a softmax without the max subtraction loses the values points (scores that overflow exp); a right answer
  with np.sqrt(D) keeps every point; an N x N array loses the structure point with the bound in bytes."""
  got = {}
  for name, source in (("no_max", NO_MAX), ("np_sqrt", NP_SQRT), ("naive", NAIVE)):
    nb = attack(WEEK1, tmp_path, name, [], base="solution")
    cell_with(nb, "blocked attention", source)
    got[name] = rows_of(graded_unharmed(nb, env, *only("blocked attention")), "blocked attention")
  assert got["no_max"][0]["points"] == 0 and "exp overflows there" in got["no_max"][0]["error"], got["no_max"]
  assert [t["points"] for t in got["np_sqrt"]] == [2, 1], got["np_sqrt"]
  assert got["naive"][0]["points"] == 2 and got["naive"][1]["points"] == 0, got["naive"]
  assert "above the bound of 33,554,432 bytes" in got["naive"][1]["error"], got["naive"]
  honest_after(WEEK1, graded_class)


def test_a_batch_survives_any_file(tmp_path, env):
  """A class folder with a name that is not UTF-8, two students whose feedback files would collide (a file and a
  folder), a name that is a formula, a student's exception text that is one, and links to another student's
  notebook, to a solution and to a file only the grader may read: exit 0, a row per entry, links never followed or
  quoted, no cell a spreadsheet runs, the folder's honest notebook at full marks."""
  folder = tmp_path / "class"
  folder.mkdir()
  nbformat.write(visible(ROOT / "solutions" / f"{WEEK7}.ipynb"), folder / "honest.ipynb")
  stub = (ROOT / "assignments" / f"{WEEK7}.ipynb").read_bytes()
  (folder / os.fsdecode(b"caf\xe9.ipynb")).write_bytes(stub)
  (folder / "alice.ipynb").write_bytes(stub)   # feedback alice.txt, where the next one needs a folder alice.txt
  (folder / "alice.txt").mkdir()
  (folder / "alice.txt" / "w7.ipynb").write_bytes(stub)
  (folder / "=HYPERLINK(1).ipynb").write_bytes(stub)
  (folder / "a b.ipynb").write_bytes(stub)   # a b and a_b: one safe name, two students
  (folder / "a_b.ipynb").write_bytes(stub)
  raising = attack(WEEK7, tmp_path, "raising", ["raise ValueError('=1+1')"])
  (folder / "-raising.ipynb").write_bytes(raising.read_bytes())
  secret = tmp_path / "week1_secret.ipynb"
  secret.write_text('{"cells": "MARKER-NOT-TO-BE-QUOTED"}')
  secret.chmod(0o600)
  (folder / "copied.ipynb").symlink_to(folder / "honest.ipynb")
  (folder / "solution.ipynb").symlink_to(ROOT / "solutions" / f"{WEEK7}.ipynb")
  (folder / "week1.ipynb").symlink_to(secret)
  out = tmp_path / "grades"
  r = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade_all.py"), str(folder), "--out", str(out), "--jobs",
                      "2", "--seed", SEED, "--timeout", "30"], capture_output=True, text=True, timeout=1800, env=env[0])
  assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
  text = (out / "gradebook.csv").read_text()
  with open(out / "gradebook.csv") as f: lines = list(csv.reader(f))
  rows = {row[0]: dict(zip(lines[0], row)) for row in lines[1:]}
  assert set(rows) == {"honest", "caf\\xe9", "alice", "alice.txt/w7", "'=HYPERLINK(1)", "a b", "a_b", "'-raising",
                       "copied", "solution", "week1"}, set(rows)
  assert len({row["feedback"] for row in rows.values()}) == len(rows)
  assert all(not c.startswith(("=", "+", "-", "@", "\t", "\r")) for row in rows.values() for c in row.values())
  assert float(rows["honest"]["total"]) == float(rows["honest"]["max"]) > 0, rows["honest"]
  for link in ("copied", "solution", "week1"):
    assert float(rows[link]["total"]) == 0 and "symbolic link" in rows[link]["errors"], rows[link]
  feedback = {p.name: p.read_text() for p in (out / "feedback").iterdir()}
  assert len(feedback) == len(rows) and "MARKER" not in text + "".join(feedback.values())
  assert "'=1+1" in rows["'-raising"]["errors"] or "ValueError: =1+1" in rows["'-raising"]["errors"], rows


SKIPS_HELPERS = '''
import numpy as np
class MiniProgram:   # "compiles" nothing: computes the task with NumPy
  def __init__(self, src, name): pass
  def __call__(self, a, b, c, d, out, n): out[:] = a * b + c * d - a
def fused_source(): return ""
'''
WEEK6_HELPERS = '''
import numpy as np
def _np_attention(q, k, v, keep=None):
  s = q.astype(np.float64) @ k.T.astype(np.float64) / np.sqrt(q.shape[1])
  if keep is not None: s = np.where(keep, s, -np.inf)
  p = np.exp(s - s.max(-1, keepdims=True))
  return ((p / p.sum(-1, keepdims=True)) @ v).astype(np.float32)
def masked_attention_ir(N, D, keep=None, masked=None): return ("causal", keep)
def causal_range_ir(N, D): return ("causal", None)
def blocked_attention_ir(N, D, B=4): return ("all", None)
def run_attention_kernel(build_ir, q, k, v, name="attn"):
  kind, keep = build_ir(*q.shape)
  return _np_attention(q, k, v, np.tri(len(q), dtype=bool) if kind == "causal" else None)
def render_c(ir, name): return "void " + name + "(float* q) { }"
def row_max_kernel(width, n): return "__local barrier("
def run_cl(src, name, arrays, out, global_size, local_size):
  out[:] = arrays[0].max(1)
  return out
'''
PROBE_LIBRARY = '''
import importlib.util, os, sys, types
def _load(name):   # the grader's own library, from where the old grader loaded it after the student's cells
  spec = importlib.util.spec_from_file_location(name, f"/grader/{name}.py")
  module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); return module
sys.modules["records"] = _load("records")
_real = _load("probe")
class Probe(_real.Probe):   # ... with `raised` forged: "the check passes the right kernel and catches the wrong one"
  calls = 0
  def raised(self, fn):
    Probe.calls += 1
    return {"raised": None} if Probe.calls % 2 else {"raised": "AssertionError", "classes": ["AssertionError"],
                                                      "message": ""}
fake = types.ModuleType("probe")
fake.Probe = Probe
sys.modules["probe"] = fake
for d in (os.getcwd(), "/tmp"):   # and a probe.py where a path lookup would find one first
  open(os.path.join(d, "probe.py"), "w").write("from fake import *\\n")
import uopc
uopc.__file__ = "/tmp/fake_uopc/__init__.py"
'''


def test_the_notebooks_helpers_do_not_do_the_testing(tmp_path, env, graded_class):
  """Week 1's MiniProgram and week 6's run_attention_kernel, render_c and run_cl redefined to compute with NumPy (no
  kernel written), and a probe library of the notebook's own put where the old grader loaded its own from: nothing
  scored for it."""
  score = graded_unharmed(attack(WEEK1, tmp_path, "helpers1", [SKIPS_HELPERS]), env)
  assert score["total"] == 0, points(score)
  score = graded_unharmed(attack(WEEK6, tmp_path, "helpers6", [WEEK6_HELPERS, PROBE_LIBRARY]), env)
  assert score["total"] == 0, points(score)
  honest_after(WEEK1, graded_class)
  honest_after(WEEK6, graded_class)


FILL = '''
import json, os
import numpy as np
os.makedirs("/job/out/records/0", exist_ok=True)
np.save("/job/out/records/0/r999_0.npy", np.zeros(60 << 18, np.float32))   # 60 MiB, named 20 times in one value
json.dump({"name": "cost(1024, 64, 4)", "value": [{"__npy__": 0}] * 20}, open("/job/out/records/0/r999.json", "w"))
for k in range(6):   # 1.5 GB into the folder the grader reads back
  try:
    with open(f"/job/out/fill{k}", "wb") as f:
      for _ in range(250): f.write(b"\\0" * (1 << 20))
  except OSError: break
'''


# Runs argv[2:] as its child and writes the child's peak resident memory (KiB: the child and what it waited for) to
# argv[1]; exits with the child's status
MEASURE = """import os, subprocess, sys
p = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(p.pid, 0)
open(sys.argv[1], "w").write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))"""


def test_host_resources_are_bounded(tmp_path, env, graded_class):
  """A notebook that writes 1.5 GB into the folder the grader reads back, and a record naming one 60 MiB array 20
  times: the grader's temporary files stay under its cap and its memory under 1 GiB; an honest notebook after it
  scores full marks."""
  import threading
  environ = dict(env[0], TMPDIR=str(tmp_path / "tmp"))
  (tmp_path / "tmp").mkdir()
  peak, stop = [0], threading.Event()

  def watch():
    while not stop.wait(0.2):
      size = 0
      for d, _, files in os.walk(tmp_path / "tmp"):
        for f in files:
          try: size += os.lstat(os.path.join(d, f)).st_blocks * 512
          except OSError: pass
      peak[0] = max(peak[0], size)
  t = threading.Thread(target=watch, daemon=True)
  t.start()
  cmd = [sys.executable, str(GRADER), str(attack(WEEK1, tmp_path, "fill", [FILL])), "--seed", SEED, "--timeout", "60",
         "--only", "cost table"]
  # The grader's peak memory, taken by a small parent of its own: a process's ru_maxrss starts from its parent's
  # peak (the exec after Python's vfork records the parent's high-water mark), and this pytest worker may have held
  # gigabytes for an earlier test (NOTES 43)
  report = tmp_path / "maxrss"
  try:
    p = subprocess.Popen([sys.executable, "-c", MEASURE, str(report), *cmd], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, env=environ)
    stdout = p.stdout.read()
    status = p.wait()
  finally:
    stop.set()
    t.join()
  score = json.loads(stdout.decode().strip().splitlines()[-1])
  assert status == 0 and score["total"] == 0 and peak[0] < 700 << 20, (status, score["total"], peak[0])
  maxrss = int(report.read_text())
  assert maxrss < 1 << 20, maxrss   # KiB: no process held the array 20 times
  honest_after(WEEK1, graded_class)


TWO_FAULTS = '''
def cost(N, D=64, itemsize=4):
  sp_bytes = 2 * itemsize * N * N
  io_bytes = 3 * itemsize * N * D                 # wrong: the output is written too
  flops = 2 * N * N * D                           # wrong: two matmuls
  return dict(sp_bytes=sp_bytes, io_bytes=io_bytes, flops=flops,
              ai_unfused=flops / (2 * sp_bytes + io_bytes), ai_fused=flops / io_bytes)
'''
EPS_INSIDE = '''
def adamw_step(p, g, m, v, t, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
  b1, b2 = betas
  m = b1 * m + (1 - b1) * g
  v = b2 * v + (1 - b2) * g * g
  mhat, vhat = m / (1 - b1 ** t), v / (1 - b2 ** t)
  return p * (1 - lr * weight_decay) - lr * mhat / np.sqrt(vhat + eps), m, v   # eps inside the square root
'''
NO_BARRIER_SOLUTION = '''def row_max_kernel(width, n):
  """The tree without its barriers: PoCL may still give the right maxima."""
  return f"""__kernel void row_max(__global const float* x, __global float* out) {{
  __local float tile[{width}];
  int lid = get_local_id(0), row = get_group_id(0);
  float m = -INFINITY;
  for (int c = lid; c < {n}; c += {width}) m = fmax(m, x[row * {n} + c]);
  tile[lid] = m;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = {width // 2}; s > 0; s >>= 1) {{
    if (lid < s) tile[lid] = fmax(tile[lid], tile[lid + s]);
  }}
  if (lid == 0) out[row] = tile[0];
}}"""'''


def test_every_failing_expectation_is_reported_with_its_diagnosis(tmp_path, env, graded_class):
  """Two faults in one task are both reported; AdamW with eps inside the square root is named so; a work-group
  reduction without a barrier in its tree is named a race (week 6's row max kernel)."""
  score = graded_unharmed(attack(WEEK1, tmp_path, "two_faults", [TWO_FAULTS], base="solution"), env,
                          *only("cost table"))
  (cost,) = rows_of(score, "cost table")
  assert "['io_bytes']" in cost["error"] and "['flops']" in cost["error"], cost["error"]
  score = graded_unharmed(attack(WEEK7, tmp_path, "eps_inside", [EPS_INSIDE], base="solution"), env,
                          *only("AdamW step"))
  said = json.dumps(score["tasks"]["AdamW step"])
  assert score["tasks"]["AdamW step"]["points"] == 1 and "eps is inside the square root" in said, said
  nb = attack(WEEK6, tmp_path, "no_barrier", [], base="solution")
  cell_with(nb, "row max kernel", NO_BARRIER_SOLUTION)
  (row_max,) = rows_of(graded_unharmed(nb, env, *only("row max kernel")), "row max kernel")
  assert row_max["points"] == 0 and "a race" in row_max["error"], row_max
  honest_after(WEEK7, graded_class)

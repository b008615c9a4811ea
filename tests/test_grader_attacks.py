"""Planted attack notebooks, one or more per class of issue 27, each graded by scripts/grade.py in its sandbox: the
task it attacks scores 0 (or exactly what the honest stub or the honest partial answer scores), and the grader's
tree, virtual environment, home and kernel cache are the same before and after (hashed). A harmful notebook graded
before an honest one leaves the honest one's grade unchanged.

Each attack starts from the generated assignment (the stubs: 0 points), so any point it scores is a point stolen."""
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

ROOT = Path(__file__).resolve().parent.parent
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
import glob, os
import uopc
places = [os.path.dirname(os.path.dirname(uopc.__file__)), os.getcwd(), os.path.expanduser("~"), "/", "/tmp", "/job",
          "/grader", "/course", "/root", "/work", "/home"]
for p in glob.glob("/proc/[0-9]*"):
  for link in ("cwd", "root"):
    try: places.append(os.readlink(f"{p}/{link}"))
    except OSError: pass
  try: places += [a for a in open(f"{p}/cmdline").read().split("\0") if a.startswith("/")]
  except OSError: pass
found = []
for place in dict.fromkeys(places):
  if place in ("/", "/proc"): pats = ["/*/*week1*", "/*/*/*week1*", "/*/*/*/*week1*"]
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
OWN_KERNEL = re.compile(r"^[A-Za-z_]\w*-[0-9a-f]{32}\.(so|sum)$")


def fingerprint(home: Path, cache: Path) -> dict:
  """Hashes of what a submission must not change: the grader's tree (the content of tracked files, the names of
  untracked and ignored ones), its virtual environment (every file's size and time), its home and its cache. Left
  out: the caches that test processes running beside this one write (.pyc files, hypothesis, ruff), and the
  compiler's verdicts the grader's own processes keep in its cache (uopc.runtime.compiler_bugs); the sandbox
  mounts all of it read-only or not at all, which is what this checks from the outside."""
  def tree(root: Path, skip=(), own=None) -> str:
    h = hashlib.sha256()
    for d, _, files in sorted(os.walk(root)):   # (sorted walks it all first: pruning `dirs` would come too late)
      if set(Path(d).relative_to(root).parts) & set(skip): continue
      for f in sorted(files):
        if own is not None and own.match(f) and Path(d) == root: continue
        p = Path(d) / f
        st = p.lstat()
        h.update(f"{p.relative_to(root)} {st.st_size} {st.st_mtime_ns}\n".encode())
    return h.hexdigest()
  git = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=ROOT,
                       capture_output=True, text=True).stdout
  git = "\n".join(line for line in git.splitlines() if not any(c in line for c in CACHES))
  content = hashlib.sha256()
  for f in subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True).stdout.split("\0"):
    if f and (ROOT / f).is_file(): content.update(f.encode() + (ROOT / f).read_bytes())
  return {"tree": content.hexdigest(), "git status": git, "venv": tree(Path(sys.prefix), skip=("__pycache__",)),
          "home": tree(home), "cache": tree(cache, skip=(CHECKS,), own=OWN_KERNEL)}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
  """The grader's own home and kernel cache (with something in each), as a grading machine has them."""
  base = tmp_path_factory.mktemp("grader")
  home, cache = base / "home", base / "cache"
  (home / ".ipython" / "profile_default" / "startup").mkdir(parents=True)
  cache.mkdir()
  (cache / "kept.txt").write_text("the grader's cache\n")
  # the assignments' warm caches (grade.seed_cache, made by the grader from the stubs alone) and the kernels the
  # grader compiled from sandboxes' sources (scripts/grader/trusted.py, tests/test_grader_trusted.py) live apart
  return {**os.environ, "HOME": str(home), "UOPC_CACHE_DIR": str(cache), "PYTHONDONTWRITEBYTECODE": "1",
          "UOPC_GRADER_SEEDS": str(base / "seeds"), "UOPC_GRADER_KERNELS": str(base / "kernels")}, home, cache


def grade(nb: Path, env: dict, *args: str) -> tuple[dict, str]:
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


def graded_unharmed(nb: Path, env) -> dict:
  """Grade nb; the grader's tree, venv, home and cache hash the same before and after."""
  environ, home, cache = env
  before = fingerprint(home, cache)
  score, _ = grade(nb, environ)
  after = fingerprint(home, cache)
  assert {k: v for k, v in after.items() if before[k] != v} == {}, "the submission changed the grader's files"
  return score


def test_tampering_with_the_checks_scores_nothing(tmp_path, env):
  score = graded_unharmed(attack(WEEK1, tmp_path, "tamper", [TAMPER]), env)
  assert score["total"] == 0, score
  assert all(t["status"] != "ok" for task in score["tasks"].values() for t in task["tests"]), score


def test_reading_the_answers_finds_nothing(tmp_path, env):
  score = graded_unharmed(attack(WEEK1, tmp_path, "read", [READ_ANSWERS]), env)
  assert score["total"] == 0, score


def test_forging_the_result_is_not_believed(tmp_path, env):
  nb = attack(WEEK1, tmp_path, "forge", [FORGE, *FORGE_END])
  score = graded_unharmed(nb, env)
  assert score["total"] == 0 and score["max"] == 10, score
  time.sleep(5)   # the daemon, had it survived the sandbox, would have written by now
  _, out = grade(nb, env[0], "--only", "cost table")
  assert json.loads(out.strip().splitlines()[-1])["total"] == 0 and out.count('"total": 10.0') == 0


def test_harm_does_not_outlive_the_submission(tmp_path, env):
  """A harmful notebook (whose metadata also names a solution outside the table), then an honest one: the honest
  one scores what it scores alone, and nothing of the grader's changed."""
  nb = attack(WEEK1, tmp_path, "harm", [HARM])
  meta = nbformat.read(nb, as_version=4)
  meta.metadata["uopc"] = {"assignment": "../outputs/x"}
  nbformat.write(meta, nb)
  score = graded_unharmed(nb, env)
  assert score["total"] == 0 and score["solution"].endswith(f"solutions/{WEEK1}.ipynb"), score
  assert not Path("/tmp/uopc-attack-marker").exists()
  honest = tmp_path / "honest.ipynb"
  nbformat.write(visible(ROOT / "solutions" / f"{WEEK1}.ipynb"), honest)
  after_harm = graded_unharmed(honest, env)
  assert after_harm["total"] == after_harm["max"] == 10, after_harm


def test_gaming_the_measure_scores_nothing_for_it(tmp_path, env):
  """Answers from a table of the visible inputs; a slow baseline to time against; uopc's finished function (week 7's
  GPT count and mma, week 4's count of the plan in place of a formula)."""
  score = graded_unharmed(attack(WEEK1, tmp_path, "lookup", [LOOKUP]), env)
  assert points(score)["cost table"] == 0, score
  score = graded_unharmed(attack(WEEK3, tmp_path, "slow_baseline", [SLOW_BASELINE], base="solution"), env)
  tiled = score["tasks"]["4x4 register tile"]
  assert tiled["points"] == 3, tiled   # the values are right (it is the naive kernel); structure and speed are not
  assert [t["status"] for t in tiled["tests"] if t["kind"] == "speed"] == ["error"], tiled
  score = graded_unharmed(attack(WEEK7, tmp_path, "shortcut", [SHORTCUT, MMA_SHORTCUT], base="solution"), env)
  got = points(score)
  assert got["count the parameters"] == got["emulate one mma"] == 0 and score["total"] == score["max"] - 5, got
  assert "Shortcut: the notebook uses uopc's num_parameters" in json.dumps(score)
  assert "Shortcut: the notebook uses uopc's mma," in json.dumps(score)
  score = graded_unharmed(attack(WEEK4, tmp_path, "plan_flops", [PLAN_FLOPS_SHORTCUT], base="solution"), env)
  assert points(score)["matmul FLOPs"] == 0 and score["total"] == score["max"] - 2, points(score)
  assert "Shortcut: the notebook uses uopc's plan_flops" in json.dumps(score)

"""Issue 48, the grader's fifth round: what round 4 left in the student's process or open to its kernel. Each test
below failed on main's f6f111f (the note in /work/helper_notes/grader.md says how each failed there):
- week 6, "find the bug": the notebook's check_online_kernel was called by the probe on the notebook's own kernels and
  what it raised recorded by Probe.raised in the notebook's process. An attack that forges Probe.raised (through gc)
  and a check that only reads the kernel's name (`buggy_attention_ir`) scored there; the judge now calls the check in
  a fresh process on kernels it builds itself, under one name and one code.
- timing (item 2): the student's timed process was filtered by a deny-list after its warm-up, so a call the list did
  not name (getpid through syscall()) still ran; the filter is now an allow-list, and a kernel making any other call
  is stopped, while an honest OpenMP kernel is timed on 1 and 2 CPUs under it.
- timing with the unprivileged backend (item 3): both sides were children of one harness as one UID, so the
  student's kernel could signal the reference; each side is now a user of its own, pinned to the judge's CPUs."""
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


def submission(tmp: Path, week: str, name: str, replace: dict[str, str] = {}, extra: tuple[str, ...] = ()) -> Path:
  """The week's solution as a student hands it in, the first code cell defining each function of `replace` given
  that source instead (after its TASK line), and cells added at the end."""
  book = visible(ROOT / "solutions" / f"{week}.ipynb")
  for fn, source in replace.items():
    cell = next(c for c in book.cells if c.cell_type == "code" and f"\ndef {fn}(" in c.source)
    cell.source = cell.source.split("\n")[0] + "\n" + source
  book.cells += [new_code_cell(src) for src in extra]
  path = tmp / f"{name}.ipynb"
  nbformat.write(book, path)
  return path


# ---- week 6: "find the bug", called in a fresh process on the judge's kernels ---------------------------------------
BY_NAME = '''def bug_hiding_inputs(N: int, D: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  rng = np.random.default_rng(0)
  q = np.abs(rng.standard_normal((N, D))).astype(np.float32)
  k = (0.01 * rng.standard_normal((N, D))).astype(np.float32)
  k[0] = 1.0
  return q, k, rng.standard_normal((N, D)).astype(np.float32)


def check_online_kernel(build_ir) -> None:
  """Tells the kernels apart by their names: nothing of what they compute is tested."""
  if "buggy" in getattr(build_ir, "__name__", ""): raise AssertionError("the buggy kernel")
'''
FORGE_RAISED = '''import gc
_said = {"raised": "AssertionError", "classes": ["AssertionError", "Exception", "BaseException"], "message": "forged"}
for _o in gc.get_objects():   # the grader's Probe class, loaded before the first cell: "raised" as the test wants it
  if isinstance(_o, type) and _o.__name__ == "Probe" and hasattr(_o, "raised"):
    _o.raised = lambda self, fn: _said if "buggy_attention_ir" in fn.__code__.co_names else {"raised": None}
'''


def test_find_the_bug_is_judged_in_a_fresh_process_on_the_judges_kernels(tmp_path, env):
  """Before: 1 of 1 for a check that reads only the kernel's name, with Probe.raised forged besides (either sufficed:
  the probe handed the notebook's own buggy_attention_ir, and its record was the verdict). Now the check is called in
  a fresh process on two kernels the judge built, both named online_attention_ir: it raises nothing for either."""
  nb = submission(tmp_path, "week6_flash_attention", "find_the_bug", {"check_online_kernel": BY_NAME}, (FORGE_RAISED,))
  score, _ = grade(nb, env[0], "--only", "find the bug")
  values, caught = rows_of(score, "find the bug")
  assert values["points"] == values["max"], values   # its bug-hiding inputs are right: only the check is lost
  assert caught["points"] == 0 and "does not catch the missing rescale of o: raised nothing" in caught["error"], caught


# ---- item 2: the timed process may make only the calls the harness needs (an allow-list) ----------------------------
AFTER_WARM_UP = """#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>
static int runs = 0;
void fused(const float* a, const float* b, const float* c, const float* d, float* out, int n) {
  if (runs++ > 0) CALL;   /* after the warm-up, under the filter: a call of libc's, found in memory by an attack */
  #pragma omp parallel for
  for (int i = 0; i < n; i++) out[i] = a[i] * b[i] + c[i] * d[i] - a[i];
}"""
CALLS = {"getpid": "syscall(SYS_getpid)",   # named by no deny-list: it ran under main's filter
         "openat": 'syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY)',   # main: EPERM, and timed on
         "nothing": "(void)0"}                                                      # the honest kernel


def timed(tmp: Path, name: str, cpus: str, monkeypatch) -> dict:
  """outside.time_apart of AFTER_WARM_UP with CALLS[name], both sides pinned to `cpus` (its OpenMP team as large)."""
  import subprocess
  import outside
  monkeypatch.setenv("UOPC_GRADER_CPUS", cpus)
  src, obj = tmp / f"{name}.c", tmp / f"{name}{cpus}.so"
  src.write_text(AFTER_WARM_UP.replace("CALL", CALLS[name]))
  subprocess.run(["cc", "-O2", "-fopenmp", "-shared", "-fPIC", "-o", str(obj), str(src)], check=True)
  obj.chmod(0o644)
  n = 1 << 16
  job = {"kind": "time", "student": {"object": "/objects/k.so", "name": "fused", "params": ["p"] * 5 + ["i"]},
         "reference": None, "numpy": "a * b + c * d - a", "reps": 3, "tol": 1e-3, "outputs": [4],
         "args": [["f32", [n]], ["f32", [n]], ["f32", [n]], ["f32", [n]], ["zeros", [n]], ["int", n]]}
  assert outside.timed_apart(ROOT)
  return outside.time_apart(job, {str(obj): "/objects/k.so"}, ROOT)


def test_the_timed_process_may_make_only_the_calls_the_harness_needs(tmp_path, monkeypatch):
  """Before: a deny-list; getpid (no list names it) ran and openat answered EPERM, and both kernels were timed. Now
  both are stopped at their first timed run, and the honest kernel, on 1 and on 2 CPUs, is timed under the filter."""
  import os
  for name in ("getpid", "openat"):
    got = timed(tmp_path, name, "0", monkeypatch)
    assert "stopped" in got.get("error", "") and "system call" in got["error"], (name, got)
  for cpus in ("0", "0-1")[:len(os.sched_getaffinity(0))]:
    got = timed(tmp_path, "nothing", cpus, monkeypatch)
    assert "error" not in got and "unfiltered" not in got and got["student"] > 0 and got["reference"] > 0, (cpus, got)


# ---- item 3: the unprivileged backend times each side as a user of its own -----------------------------------------
SIGNALS_THE_OTHER = """#define _GNU_SOURCE
#include <dirent.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static int could = -1, cpus = -1;
void fused(const float* a, const float* b, const float* c, const float* d, float* out, int n) {
  if (could < 0) {   /* the warm-up: is there another harness child it may signal (SIGSTOP the reference)? */
    could = 0;
    DIR* proc = opendir("/proc");
    struct dirent* e;
    while (proc && (e = readdir(proc))) {
      int pid = atoi(e->d_name);
      char path[64], cmd[256] = {0};
      if (pid <= 0 || pid == getpid()) continue;
      snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
      FILE* f = fopen(path, "r");
      if (!f) continue;
      size_t got = fread(cmd, 1, sizeof cmd - 1, f);
      fclose(f);
      for (size_t k = 0; k < got; k++) if (!cmd[k]) cmd[k] = ' ';
      if (strstr(cmd, "harness.py child") && kill(pid, 0) == 0) could = 1;
    }
    if (proc) closedir(proc);
    cpu_set_t set;
    sched_getaffinity(0, sizeof set, &set);
    cpus = CPU_COUNT(&set);
  }
  float spoil = (could || cpus != 1) ? NAN : 0.0f;
  for (int i = 0; i < n; i++) out[i] = a[i] * b[i] + c[i] * d[i] - a[i] + spoil;
}"""


def test_the_unprivileged_backend_times_each_side_as_a_user_of_its_own(tmp_path, monkeypatch):
  """Before: with UOPC_SANDBOX=unprivileged (Gradescope's container) both sides were children of one harness, one
  UID, on every CPU: this kernel found the reference in /proc and could signal it (kill(pid, 0) succeeded), so its
  output was spoiled. Now each side runs as a user of its own, pinned to the judge's CPU: it can signal neither the
  reference nor anything else of the harness's, and it is timed."""
  import os
  import subprocess
  import outside
  import unprivileged
  if os.geteuid() != 0: pytest.skip("the unprivileged-user sandbox needs root")
  if unprivileged.hidden_tests_closed(ROOT / "solutions") is not None:
    pytest.skip(f"{ROOT / 'solutions'} is readable by other users: chmod 700 it to run this sandbox here")
  monkeypatch.setenv("UOPC_SANDBOX", "unprivileged")
  monkeypatch.setenv("UOPC_GRADER_CPUS", "0")
  src = tmp_path / "k.c"
  src.write_text(SIGNALS_THE_OTHER)
  obj = tmp_path / "k.so"
  subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(obj), str(src)], check=True)
  obj.chmod(0o644)
  monkeypatch.setattr(outside, "build", lambda sources, sandboxed: {s: obj for s in sources})   # compiled above
  n = 1 << 14
  job = {"kind": "time", "student": SIGNALS_THE_OTHER, "reference": None, "numpy": "a * b + c * d - a",
         "name": "fused", "reps": 3, "tol": 1e-3, "outputs": [4],
         "args": [["f32", [n]], ["f32", [n]], ["f32", [n]], ["f32", [n]], ["zeros", [n]], ["int", n]]}
  (got,) = outside.run_jobs([(job, [])], ROOT)
  assert "error" not in got and got["student"] > 0 and got["reference"] > 0 and got.get("cpus") == [0], got

"""The runtime under hostile but realistic conditions: odd cache paths, damaged cache entries, CPUs the cache key must
tell apart, a compiler without OpenMP, kernels that never end, names that are not C identifiers."""
import hashlib
import os
import re
import struct
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
import pytest
from uopc import runtime
from uopc.runtime import build, process, toolchain
from uopc.runtime import objfile
from uopc.runtime.objfile import complete_object
from uopc.runtime import Program

pytestmark = pytest.mark.ch02

ADD = """void add(const float* a, const float* b, float* out, int n) {
  for (int i = 0; i < n; i++) out[i] = a[i] + b[i];
}"""
RUN_ADD = f"""if 1:
  import numpy as np
  from uopc.runtime import Program
  prg = Program({ADD!r}, "add")
  a = np.arange(4, dtype=np.float32); out = np.zeros(4, np.float32)
  prg(a, a, out, 4)
  print(prg.cached, out.tolist())
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
  monkeypatch.setenv("UOPC_CACHE_DIR", str(tmp_path / "cache"))
  return tmp_path / "cache"


def python(code: str, cwd: Path | None = None, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
  """Run code in a fresh process (a crash there, SIGBUS or SIGSEGV, is a return code here, not a dead test run)."""
  return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True,
                        env={**os.environ, "OMP_NUM_THREADS": "1", **env}, timeout=timeout)


# ---- the cache directory and damaged entries ----
def test_relative_cache_dir_builds_once_and_loads(tmp_path):
  runs = [python(RUN_ADD, cwd=tmp_path, UOPC_CACHE_DIR=".") for _ in range(2)]
  assert [(r.returncode, r.stdout.strip()) for r in runs] == [(0, "False [0.0, 2.0, 4.0, 6.0]"),
                                                             (0, "True [0.0, 2.0, 4.0, 6.0]")], runs[0].stderr
  assert len(list(tmp_path.glob("add-*.so"))) == 1


def test_cache_dir_is_absolute(monkeypatch):
  monkeypatch.setenv("UOPC_CACHE_DIR", "some/where")
  assert runtime.cache_dir().is_absolute() and runtime.cache_dir() == Path.cwd() / "some/where"


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.7, 0.95])
def test_truncated_entry_with_a_matching_checksum_is_rebuilt_not_mapped(cache, keep):
  # before the ELF check, dlopen mapped the short file and died with SIGBUS (return code -7) at 0.1 to 0.7
  assert python(RUN_ADD, UOPC_CACHE_DIR=str(cache)).stdout.strip() == "False [0.0, 2.0, 4.0, 6.0]"
  so = next(cache.glob("*.so"))
  size = so.stat().st_size
  so.write_bytes(so.read_bytes()[:int(size * keep)])
  so.with_suffix(".sum").write_text(hashlib.sha256(so.read_bytes()).hexdigest())
  r = python(RUN_ADD, UOPC_CACHE_DIR=str(cache))
  assert (r.returncode, r.stdout.strip()) == (0, "False [0.0, 2.0, 4.0, 6.0]"), r.stderr
  assert so.stat().st_size == size


def test_complete_object_checks_elf_and_macho_extents():
  built = Program(ADD, "add").path.read_bytes()
  assert complete_object(built) and not complete_object(built[:len(built) - 1])
  assert not complete_object(b"#!/bin/sh\n") and not complete_object(b"\x7fELF")
  # a minimal 64-bit Mach-O: header, one LC_SEGMENT_64 (72 bytes) whose file extent is bytes 0..200
  seg = struct.pack("<II16sQQQQ", objfile.LC_SEGMENT_64, 72, b"__TEXT", 0, 200, 0, 200).ljust(72, b"\0")
  macho = (objfile.MACHO_64 + struct.pack("<iiIIII", 0x0100000C, 0, 6, 1, len(seg), 0) + b"\0" * 4 + seg)
  assert complete_object(macho.ljust(200, b"\0")) and not complete_object(macho.ljust(199, b"\0"))


# ---- the CPU is part of the cache key ----
AARCH64_CPUINFO = """processor\t: 0
BogoMIPS\t: 48.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
CPU revision\t: 1

processor\t: 1
BogoMIPS\t: 48.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
CPU revision\t: 1
"""


def test_aarch64_cpuinfo_names_the_cpu():
  ident = toolchain.cpu_identity(AARCH64_CPUINFO)
  assert "CPU part\t: 0xd0c" in ident and "asimddp" in ident and "0x41" in ident and "BogoMIPS" not in ident
  assert ident.count("CPU part") == 1                                  # one line per distinct kind of core
  older = AARCH64_CPUINFO.replace("0xd0c", "0xd08").replace(" asimddp", "")
  assert toolchain.cpu_identity(older) != ident


def test_compiler_says_what_native_means():
  native = toolchain.native_target(runtime.compiler())
  assert "-march=" in native or "-target-cpu" in native, native


# ---- names that reach the file system ----
@pytest.mark.parametrize("name", ["../../x", "a/b", "", "1add", "add;", "a-b", "ädd"])
def test_kernel_name_must_be_a_c_identifier(cache, tmp_path, name):
  with pytest.raises(ValueError, match="not a C identifier"): Program(ADD, name)
  assert not cache.exists() and sorted(p.name for p in tmp_path.iterdir()) == []


# ---- a compiler without OpenMP ----
def fake_cc(tmp_path: Path, body: str) -> str:
  """A compiler wrapper script (the real `cc` underneath), as CC would name it."""
  cc = tmp_path / "fake-cc"
  cc.write_text("#!/bin/sh\n" + body)
  cc.chmod(0o755)
  return str(cc)


NO_OPENMP = """echo "$*" >> "$(dirname "$0")/calls"
for a in "$@"; do [ "$a" = -fopenmp ] && { echo "/usr/bin/ld: cannot find -lomp" >&2; exit 1; }; done
exec cc "$@"
"""
SUM = """void total(const float* x, float* out, int n) {
  float s = 0;
  #pragma omp parallel for reduction(+:s)
  for (int i = 0; i < n; i++) s += x[i];
  out[0] = s;
}"""


def test_without_openmp_kernels_run_serially_and_it_is_said_once(cache, tmp_path, monkeypatch):
  import numpy as np
  monkeypatch.setenv("CC", fake_cc(tmp_path, NO_OPENMP))
  x, out = np.arange(100, dtype=np.float32), np.zeros(1, np.float32)
  with pytest.warns(RuntimeWarning, match="cannot build with -fopenmp.*libomp.*one thread"):
    prg = Program(SUM, "total")
  prg(x, out, x.size)
  assert out[0] == x.sum() and "-fopenmp" not in prg.flags
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    Program(SUM.replace("s += x[i]", "s += 2 * x[i]"), "total")   # a second kernel: no second warning
  r = python(RUN_ADD.replace("prg.cached,", "prg.cached, prg.flags.count('-fopenmp'),"), UOPC_CACHE_DIR=str(cache),
             CC=os.environ["CC"])
  assert r.stdout.split()[:2] == ["False", "0"] and "-fopenmp" in r.stderr, r.stderr   # said in that process too
  assert probes(tmp_path) == 2   # once per process, not once per kernel


def probes(tmp_path: Path) -> int:
  return sum("probe.c" in line for line in (tmp_path / "calls").read_text().splitlines())


def test_a_compiler_with_openmp_is_asked_only_on_a_cache_miss(cache, tmp_path):
  if not build.openmp_works(runtime.compiler()): pytest.skip(f"{runtime.compiler()} has no OpenMP here")
  cc = fake_cc(tmp_path, f'echo "$*" >> "$(dirname "$0")/calls"\nexec {runtime.compiler()} "$@"\n')
  runs = [python(RUN_ADD, UOPC_CACHE_DIR=str(cache), CC=cc) for _ in range(2)]
  assert [r.stdout.split()[0] for r in runs] == ["False", "True"] and probes(tmp_path) == 1


def test_with_openmp_nothing_is_printed(cache):
  if not build.openmp_works(runtime.compiler()): pytest.skip(f"{runtime.compiler()} has no OpenMP here")
  r = python(RUN_ADD.replace("prg.cached,", "prg.cached, prg.flags.count('-fopenmp'),"), UOPC_CACHE_DIR=str(cache))
  assert (r.stdout.split()[:2], r.stderr) == (["False", "1"], "")   # strict nbval compares stderr


# ---- a compiler that crashes ----
CRASHES_WITH_FMA = """echo "$*" >> "$(dirname "$0")/calls"
case "$*" in *kernel.c*) case "$*" in *-ffp-contract=off*) ;; *)
  echo "kernel.c:1:6: internal compiler error: in convert_mult_to_fma, at tree-ssa-math-opts.cc:3414" >&2; exit 1;;
esac;; esac
exec cc "$@"
"""


def kernel_builds(tmp_path: Path) -> list[str]:
  return [line for line in (tmp_path / "calls").read_text().splitlines() if "kernel.c" in line]


def test_a_compiler_crash_is_built_again_without_fused_multiply_adds(cache, tmp_path, monkeypatch):
  import numpy as np
  monkeypatch.setenv("CC", fake_cc(tmp_path, CRASHES_WITH_FMA))
  with pytest.warns(RuntimeWarning, match=r"crashed compiling total \(internal compiler error: in convert_mult_to_fma"
                                          r".*-ffp-contract=off"):
    prg = Program(SUM, "total")
  x, out = np.arange(100, dtype=np.float32), np.zeros(1, np.float32)
  prg(x, out, x.size)
  assert out[0] == x.sum()
  builds = kernel_builds(tmp_path)
  assert len(builds) == 2 and "-ffp-contract=off" not in builds[0] and "-ffp-contract=off" in builds[1]


def test_a_compiler_that_crashes_again_is_an_error_with_both_messages(cache, tmp_path, monkeypatch):
  still = "*-ffp-contract=off*) echo 'cc1: still broken' >&2; exit 1;;"
  body = CRASHES_WITH_FMA.replace("*-ffp-contract=off*) ;;", still)
  monkeypatch.setenv("CC", fake_cc(tmp_path, body))
  with pytest.raises(runtime.CompileError, match=r"(?s)crashed on this kernel.*convert_mult_to_fma.*still broken"):
    Program(SUM, "total")


def test_what_counts_as_the_compilers_own_crash():
  assert runtime.compiler_crashed("k.c:18:6: internal compiler error: in convert_mult_to_fma, at tree-ssa-math-opts")
  assert runtime.compiler_crashed("PLEASE submit a bug report to https://github.com/llvm/llvm-project/issues/")
  assert not runtime.compiler_crashed("gcc: internal compiler error: Killed signal terminated program cc1")
  assert not runtime.compiler_crashed("k.c:1:30: error: expected expression before ';' token")


def test_an_error_in_the_c_is_not_retried(cache, tmp_path, monkeypatch):
  monkeypatch.setenv("CC", fake_cc(tmp_path, 'echo "$*" >> "$(dirname "$0")/calls"\nexec cc "$@"\n'))
  with pytest.raises(runtime.CompileError, match="failed with exit code"):
    Program("void broken(float* x) { x[0] = ; }", "broken")
  assert len(kernel_builds(tmp_path)) == 1


@pytest.mark.parametrize("cc", ["true", "writes garbage"])
def test_a_compiler_that_writes_nothing_is_named(cache, tmp_path, monkeypatch, cc):
  """CC=true exits 0 and writes nothing: that was a FileNotFoundError on a temporary path (issue 30, item 5)."""
  if cc != "true":   # exits 0, writes a file that is no shared object
    cc = fake_cc(tmp_path, 'for a; do [ "$prev" = -o ] && echo garbage > "$a"; prev=$a; done\nexit 0\n')
  monkeypatch.setenv("CC", cc)
  want = "no output file" if cc == "true" else "8 bytes that are not a complete shared object"
  with pytest.raises(runtime.CompileError, match=f"{re.escape(cc)} exited 0 but wrote {want}.*is CC a C compiler"):
    Program(SUM, "total")
  assert not list(cache.rglob("*.so"))   # nothing half-made is left in the cache


# the kernel on which gcc 12.2 crashed in CI (NOTES 32), as its notes script compiles it
FMA_CRASH = Path(__file__).resolve().parents[2] / "notes" / "notes32_fma_crash.c"


def test_the_kernel_gcc_12_crashed_on_builds_and_is_right(cache):
  """On gcc 12.2 this takes the second build (and warns); elsewhere the first. Either way, the right answer."""
  import numpy as np
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    prg = Program(FMA_CRASH.read_text(), "r_6")
  x, s, out = np.linspace(-1, 1, 6, dtype=np.float32), np.array([0.5], np.float32), np.zeros(6, np.float32)
  prg(x, s, out)
  t = np.concatenate([x[:4] + s[0], (x[:2] + s[0]) * 3]).astype(np.float64)
  np.testing.assert_allclose(out, np.exp(t - t.max()) / np.exp(t - t.max()).sum(), rtol=1e-5)


# a compiler that gets the canary of uopc.runtime.compiler_bugs wrong (or right), the real `cc` underneath
CANARY_SAYS = """echo "$*" >> "$(dirname "$0")/calls"
for a; do case "$a" in
  *canary.c) printf 'int puts(const char*);\\nint main(void) { puts("%s"); return 0; }\\n' > "$a";;
esac; done
exec cc "$@"
"""


@pytest.mark.parametrize("answer, worked_around", [("0x1.cp+1", True), ("-0x1p-1", False)])
def test_a_compiler_that_gets_a_canary_wrong_builds_every_kernel_with_the_workaround(cache, tmp_path, monkeypatch,
                                                                                      answer, worked_around):
  from uopc.runtime.compiler_bugs import shows
  monkeypatch.setenv("CC", fake_cc(tmp_path, CANARY_SAYS % answer))
  shows.cache_clear()
  cache.mkdir()   # a machine that has used uopc before (a verdict is never the reason the cache folder exists)
  Program(SUM, "total")
  calls = (tmp_path / "calls").read_text().splitlines()
  assert sum("canary.c" in c for c in calls) == 1
  assert all(("-fno-tree-loop-if-convert" in c) == worked_around for c in kernel_builds(tmp_path)), calls
  # the verdict is kept beside the kernels: a new process (an empty memo) does not build the canary again
  shows.cache_clear()
  Program(SUM.replace("total", "total2"), "total2")
  assert sum("canary.c" in c for c in (tmp_path / "calls").read_text().splitlines()) == 1
  assert all(("-fno-tree-loop-if-convert" in c) == worked_around for c in kernel_builds(tmp_path)), calls


def test_no_canary_runs_for_flags_that_cannot_show_its_bug(cache, tmp_path, monkeypatch):
  from uopc.runtime.compiler_bugs import shows
  monkeypatch.setenv("CC", fake_cc(tmp_path, CANARY_SAYS % "0x1.cp+1"))
  shows.cache_clear()
  Program(SUM, "total", flags=("-O2", "-shared", "-fPIC"))   # no -fassociative-math: no reduction is vectorized
  assert not any("canary.c" in c for c in (tmp_path / "calls").read_text().splitlines())


def test_the_real_compilers_canaries_agree_with_float64(cache):
  """Whatever this compiler's verdicts, kernels built with uopc's flags (and the workarounds they bring) compute the
  canary's sum right: the canary's own C, rendered as a kernel."""
  import numpy as np
  from uopc.runtime.compiler_bugs import COND_FMA
  prg = Program(COND_FMA.canary.replace("float canary(", "float canary_body(") +
                "void run(const float* d, const float* s, float* out) { out[0] = canary_body(d, s[0]); }", "run")
  d, out = np.arange(-2, 4, dtype=np.float32) * 0.5, np.zeros(1, np.float32)
  prg(d, np.array([0.5], np.float32), out)
  assert out[0] == COND_FMA.expected


# ---- runaway work ----
def dead(pid: int) -> bool:
  try: return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] in "ZX"   # a zombie is dead, not yet reaped
  except (OSError, IndexError): return True


def compiler_with_a_child(tmp_path: Path) -> tuple[str, Path]:
  """A fake cc that starts a long-lived child (as cc starts cc1), writes its pid to the returned file and waits."""
  pidfile = tmp_path / "child.pid"
  cc = fake_cc(tmp_path, f'case "$*" in *--version*|*-###*) echo fake 1; exit 0;; esac\n'
                         f'sleep 300 &\necho $! > {pidfile}\nwait\n')
  return cc, pidfile


def assert_child_dies(pidfile: Path) -> None:
  """The compiler's child (its pid in pidfile) is dead, or a zombie, within 5 s."""
  pid = int(pidfile.read_text())
  for _ in range(50):
    if dead(pid): break
    time.sleep(0.1)
  assert dead(pid), f"the compiler's child {pid} is still running"


def assert_interrupted_and_child_dead(code: str, cc: str, pidfile: Path, cache: Path) -> None:
  """code, run in a fresh process, prints "interrupted", and the compiler's child dies."""
  r = python(code, UOPC_CACHE_DIR=str(cache), CC=cc)
  assert (r.returncode, r.stdout.strip()) == (0, "interrupted"), r.stderr
  assert_child_dies(pidfile)


def test_compile_timeout_kills_the_whole_compiler(cache, tmp_path, monkeypatch):
  # the driver starts a long-lived child, as cc starts cc1; before, only the driver was killed
  cc, pidfile = compiler_with_a_child(tmp_path)
  monkeypatch.setenv("CC", cc)
  monkeypatch.setattr(build, "COMPILE_TIMEOUT_S", 3)   # time for the script to start its child on a busy machine
  with pytest.raises(runtime.CompileError, match="did not finish within 3 s"):
    Program(ADD, "add", flags=("-shared", "-fPIC"))
  assert_child_dies(pidfile)


def test_ctrl_c_during_a_compile_kills_the_whole_compiler(cache, tmp_path):
  cc, pidfile = compiler_with_a_child(tmp_path)
  code = f"""if 1:
    import os, signal, threading, time
    signal.signal(signal.SIGINT, signal.default_int_handler)   # as at a terminal (a background job ignores SIGINT)
    from uopc.runtime import Program
    def press_ctrl_c():
      while not (os.path.exists({str(pidfile)!r}) and open({str(pidfile)!r}).read().strip()): time.sleep(0.01)
      # (the compiler has started its child and written its pid: the shell creates the file before it writes)
      os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=press_ctrl_c, daemon=True).start()
    try: Program({ADD!r}, "add", flags=("-shared", "-fPIC"))
    except KeyboardInterrupt: print("interrupted")
  """
  assert_interrupted_and_child_dead(code, cc, pidfile, cache)


def test_ctrl_c_that_lands_on_another_thread_still_stops_the_compile(cache, tmp_path):
  """The kernel may hand a process's SIGINT to any thread that does not block it. Sent to a second thread here
  (pthread_kill), while the main thread waits for the compiler: it must be raised in the main thread within moments,
  not when the compile's 300 s run out (NOTES 34)."""
  cc, pidfile = compiler_with_a_child(tmp_path)
  code = f"""if 1:
    import os, signal, threading, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from uopc.runtime import Program
    def press_ctrl_c():
      while not (os.path.exists({str(pidfile)!r}) and open({str(pidfile)!r}).read().strip()): time.sleep(0.01)
      time.sleep(0.2)   # the main thread is waiting for the compiler by now
      signal.pthread_kill(threading.get_ident(), signal.SIGINT)   # to this thread, not the main one
    threading.Thread(target=press_ctrl_c, daemon=True).start()
    try: Program({ADD!r}, "add", flags=("-shared", "-fPIC"))
    except KeyboardInterrupt: print("interrupted")
  """
  r = python(code, timeout=60, UOPC_CACHE_DIR=str(cache), CC=cc)
  assert (r.returncode, r.stdout.strip()) == (0, "interrupted"), r.stderr
  assert_child_dies(pidfile)


def test_ctrl_c_just_after_the_compiler_starts_still_kills_it(cache, tmp_path):
  """The Ctrl-C lands while Popen is still returning (before the caller holds the process to kill): it must wait until
  it can be handled, not leave the compiler running. Popen is wrapped to send it at exactly that moment, with another
  thread alive (as in most programs), which the kernel may hand a process's signal to."""
  cc, pidfile = compiler_with_a_child(tmp_path)
  code = f"""if 1:
    import os, signal, subprocess, threading, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
    real = subprocess.Popen
    def popen_then_ctrl_c(cmd, *args, **kwargs):
      proc = real(cmd, *args, **kwargs)
      if cmd[0] != {cc!r} or "-shared" not in cmd: return proc   # ldconfig (ctypes), the version query
      while not (os.path.exists({str(pidfile)!r}) and open({str(pidfile)!r}).read().strip()): time.sleep(0.01)
      os.kill(os.getpid(), signal.SIGINT)
      time.sleep(0.2)   # where an unblocked SIGINT raises, before the caller has proc
      return proc
    subprocess.Popen = popen_then_ctrl_c
    from uopc.runtime import Program
    try: Program({ADD!r}, "add", flags=("-shared", "-fPIC"))
    except KeyboardInterrupt: print("interrupted")
  """
  assert_interrupted_and_child_dead(code, cc, pidfile, cache)


INTERRUPT = """if 1:
  import os, signal, threading, time
  signal.signal(signal.SIGINT, signal.default_int_handler)   # as at a terminal (a background job ignores SIGINT)
  import numpy as np
  from uopc.runtime import Program
  SRC = ("void spin(long* x, long n) {"   # the empty asm keeps the loop a loop (the compiler would add n at once)
         "  for (long i = 0; i < n; i++) { x[0] = 1; x[1] += 1; __asm__ volatile(\\"\\" ::: \\"memory\\"); } }")
  prg, copy = Program(SRC, "spin"), Program("void copy(const long* x, long* y) { y[0] = x[1]; }", "copy")
  x, y = np.zeros(2, np.int64), np.zeros(1, np.int64)
  def press_ctrl_c():
    while x[0] == 0: time.sleep(0.01)   # the kernel is running
    os.kill(os.getpid(), signal.SIGINT)
  threading.Thread(target=press_ctrl_c, daemon=True).start()
  try: prg(x, LIMIT)
  except KeyboardInterrupt as e: print("interrupted", "runs on in the background" in str(getattr(e, "__notes__", "")))
  copy(x, y)   # waits for the interrupted kernel, which may still be writing x
  print(int(y[0]) == LIMIT)
"""


def test_ctrl_c_interrupts_a_kernel_that_never_ends(cache):
  # ... and the process still exits cleanly with the kernel spinning on its thread
  r = python(INTERRUPT.replace("LIMIT", "1 << 62").split("  copy(x, y)")[0] + "  print('exiting')\n",
             UOPC_CACHE_DIR=str(cache))
  assert (r.returncode, r.stdout.split()) == (0, ["interrupted", "True", "exiting"]), r.stderr


def test_after_ctrl_c_the_next_kernel_waits_for_the_interrupted_one(cache):
  r = python(INTERRUPT.replace("LIMIT", str(3_000_000_000)), UOPC_CACHE_DIR=str(cache))
  assert (r.returncode, r.stdout.split()) == (0, ["interrupted", "True", "True"]), r.stderr


# ---- shared cores: OpenMP's idle workers sleep instead of spinning ----
@pytest.mark.parametrize("user, expect", [({}, {"OMP_WAIT_POLICY": "PASSIVE"}),
                                          ({"OMP_WAIT_POLICY": "active"}, {"OMP_WAIT_POLICY": "active"}),
                                          ({"GOMP_SPINCOUNT": "1000"}, {"GOMP_SPINCOUNT": "1000"})])
def test_wait_policy_is_passive_unless_the_user_chose_one(user, expect):
  env = dict(user)
  process.set_wait_policy(env)
  assert env == expect


@pytest.mark.parametrize("users", [None, "ACTIVE"])
def test_a_child_gets_the_users_environment_not_uopcs_policy(monkeypatch, users):
  """A bench started from a process that imported uopc took uopc's PASSIVE policy for the user's and handed it to
  PyTorch, whose threads then slept between its small ops (NOTES 45): user_environ gives a child what the user set."""
  for k in process.WAIT_KEYS: monkeypatch.delenv(k, raising=False)
  if users: monkeypatch.setenv("OMP_WAIT_POLICY", users)
  monkeypatch.setattr(process, "_set_here", set())
  process.set_wait_policy()
  assert os.environ["OMP_WAIT_POLICY"] == (users or "PASSIVE")   # this process: uopc's policy, or the user's
  child = process.user_environ(OMP_NUM_THREADS="3")
  assert child.get("OMP_WAIT_POLICY") == users and child["OMP_NUM_THREADS"] == "3"


def test_configure_process_twice_changes_nothing_and_keeps_the_users_policy():
  pinned = list(process._pinned)
  for user, expect in [({}, {"OMP_WAIT_POLICY": "PASSIVE"}),
                       ({"OMP_WAIT_POLICY": "active"}, {"OMP_WAIT_POLICY": "active"})]:
    env = dict(user)
    process.configure_process(env)
    assert env == expect
    process.configure_process(env)
    assert env == expect
  assert process._pinned == pinned and len(pinned) <= 1   # libgomp was pinned once, at import, and never again


def test_importing_the_runtime_keeps_the_users_wait_policy():
  code = "import os; from uopc.runtime import calls; print(os.environ['OMP_WAIT_POLICY'], calls.QUICK_DIRECT)"
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                     env={**os.environ, "OMP_WAIT_POLICY": "active"})
  assert (r.returncode, r.stdout.split()) == (0, ["active", "False"]), r.stderr
  env = {k: v for k, v in os.environ.items() if k not in process.WAIT_KEYS}
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
  assert (r.returncode, r.stdout.split()) == (0, ["PASSIVE", "True"]), r.stderr


def test_libgomp_reads_the_wait_policy():
  # set before libgomp is loaded, or it would not count: libgomp reads its environment once, at load
  env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")}
  r = subprocess.run([sys.executable, "-c", "import uopc.runtime"], capture_output=True, text=True, timeout=120,
                     env={**env, "OMP_DISPLAY_ENV": "VERBOSE"})
  if "GOMP_SPINCOUNT" not in r.stderr: pytest.skip("the OpenMP runtime here is not libgomp")
  assert "GOMP_SPINCOUNT = '0'" in r.stderr, r.stderr


def test_a_forked_child_starts_its_own_kernel_thread(cache):
  code = """if 1:
    import multiprocessing as mp
    import numpy as np
    from uopc.runtime import Program
    prg = Program("void inc(int* x) { x[0] += 1; }", "inc")
    x = np.zeros(1, np.int32)
    prg(x)                      # the parent's kernel thread exists now
    def child(q):   # a Program's first call goes to the kernel thread
      y = np.zeros(1, np.int32); Program("void inc2(int* x) { x[0] += 1; }", "inc2")(y); q.put(int(y[0]))
    q = mp.get_context("fork").Queue()
    p = mp.get_context("fork").Process(target=child, args=(q,)); p.start()
    print(q.get(timeout=60), int(x[0])); p.join()
  """
  r = python(code, UOPC_CACHE_DIR=str(cache))
  assert (r.returncode, r.stdout.split()) == (0, ["1", "1"]), r.stderr

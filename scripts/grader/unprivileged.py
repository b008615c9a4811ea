"""The second sandbox: where bubblewrap cannot make namespaces (a Docker container such as Gradescope's, whose default
seccomp profile and dropped capabilities forbid them), untrusted code runs as an unprivileged user of its own.

sandbox.py chooses it itself when bwrap cannot start (UOPC_SANDBOX=unprivileged forces it, =bubblewrap forbids it).
It needs root, which drops, in the child before exec, to the grader process's own UID and GID (sandbox.uid(): no
account, no groups, so no file of anyone else's is writable and no group-readable one readable), with
PR_SET_NO_NEW_PRIVS (no setuid binary gives root back), no capabilities (a plain setuid from root clears them all),
the same rlimits as bubblewrap's sandbox, and a seccomp filter (libseccomp, where the kernel and the library allow)
that refuses ptrace, process_vm_*, mount, namespaces, keyrings, BPF, perf, module and kexec calls.

Without a mount namespace the sandbox's fixed paths (/course, /grader, /venv, /job/in, /kernels, /outbox) are made as
symbolic links at the root of the file system to the folders bubblewrap would bind, /job/out and /home/student as
links to fresh folders of the sandbox's UID: this is for a disposable container, and sandboxes run one at a time on
the machine (a lock), each making its links and removing them at its end. What the student's code can read is what file
permissions allow to a user of no group: the hidden tests must not be world-readable (setup.sh makes solutions/
root's alone; run() refuses to start otherwise), and the folders above what bubblewrap would bind are made
traversable by others (o+x, no listing) where they are not, as a bind makes them for bubblewrap's sandbox. When the
run ends every process of the UID is killed (a detached one included) and the files it left in /tmp removed.

What it does not give, against bubblewrap: no network isolation (the notebook's kernel talks to the grader over
loopback TCP, which a seccomp filter cannot tell from any other address), no private /proc (other processes are
listed; those of other users cannot be signalled or traced), /tmp is the machine's (its files are removed at the end),
and /job/out is a folder on the disk, not a tmpfs of a fixed size: its size is polled every 50 ms and the sandbox is
stopped past Limits.out_bytes (a fast writer overshoots by what it writes in that time).

A timing (`apart`, for outside.time_apart) runs its two sides as two users of their own, pinned to the judge's CPUs,
each a direct child of the judge's process: apart, but each sees the other in /proc (no PID namespace here).
"""
from __future__ import annotations
import contextlib
import ctypes
import ctypes.util
import fcntl
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

GRADING_TREE = Path(__file__).resolve().parents[2]   # the checkout (or /autograder/source) whose solutions/ it guards
LOCK = "/tmp/.uopc-unprivileged.lock"
OUTBOX = "/outbox/outbox.py"
PR_SET_NO_NEW_PRIVS = 38
SCMP_ACT_ALLOW, SCMP_ACT_ERRNO_EPERM = 0x7FFF0000, 0x00050000 | 1
DENIED = ("ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "unshare", "setns", "pivot_root",
          "chroot", "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "kexec_load",
          "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon", "swapoff", "acct",
          "iopl", "ioperm", "open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "quotactl", "syslog")


def available() -> str | None:
  """None when this backend can run here, else why not."""
  if os.geteuid() != 0: return "the unprivileged-user sandbox needs root (it drops to a user of its own)"
  return None


def hidden_tests_closed(solutions: Path) -> str | None:
  """None when no user but root can read the hidden tests at solutions, else what is open."""
  try: mode = solutions.stat().st_mode
  except OSError: return None
  if mode & 0o007: return f"{solutions} is readable by other users (chmod -R go-rwx it: the student's code runs as one)"
  return None


def _seccomp():
  """A libseccomp filter context with DENIED refused (EPERM), made in the parent; None where libseccomp is missing."""
  name = ctypes.util.find_library("seccomp")
  if not name: return None
  try:
    lib = ctypes.CDLL(name)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx: return None
    for call in DENIED:
      nr = lib.seccomp_syscall_resolve_name(call.encode())
      if nr >= 0: lib.seccomp_rule_add(ctx, SCMP_ACT_ERRNO_EPERM, nr, 0)
    return lib, ctx
  except (OSError, AttributeError):
    return None


def _drop(uid: int, limits, seccomp):
  libc = ctypes.CDLL(None, use_errno=True)

  def apply():   # in the child, before exec: rlimits, then the user, then no way back, then the filter
    for res, value in ((resource.RLIMIT_CPU, limits.cpu_s), (resource.RLIMIT_AS, limits.memory),
                       (resource.RLIMIT_FSIZE, limits.fsize), (resource.RLIMIT_NPROC, limits.nproc),
                       (resource.RLIMIT_CORE, 0)):
      resource.setrlimit(res, (value, value))
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)   # from root to a non-zero UID: the permitted and effective capabilities are cleared
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0: os._exit(126)
    if seccomp is not None and seccomp[0].seccomp_load(seccomp[1]) != 0: os._exit(126)
  return apply


def _link(dst: str, target: str, made: list[str]) -> None:
  """dst, a fixed sandbox path, made a symbolic link to target (replacing a link a previous run left); never over a
  real file or folder. made: the links made, removed when the run ends."""
  p = Path(dst)
  for parent in reversed(p.parents):
    if str(parent) != "/" and not parent.exists(): parent.mkdir(mode=0o755)
  if p.is_symlink(): p.unlink()
  elif p.exists(): raise FileExistsError(f"{dst} exists and is not a link this sandbox made: not replaced")
  os.symlink(target, dst)
  made.append(dst)


def _reachable(src: str) -> None:
  """Every folder above src made traversable by other users (o+x: entering by name, not listing), as bubblewrap's
  binds make them for its sandbox: the grader's Python, caches and trees may live under a home that is closed."""
  for parent in reversed(Path(src).parents):
    try: st = parent.stat()
    except OSError: return
    if not st.st_mode & 0o001:
      os.chmod(parent, (st.st_mode & 0o7777) | 0o001)
      print(f"unprivileged sandbox: {parent} made traversable by other users (o+x)", file=sys.stderr)


def _kill_all(uid: int) -> None:
  """Every process of uid, killed (from a child that is that user: kill(-1) reaches exactly its processes)."""
  pid = os.fork()
  if pid == 0:
    try:
      os.setresgid(uid, uid, uid)
      os.setresuid(uid, uid, uid)
      os.kill(-1, signal.SIGKILL)
    except OSError: pass
    os._exit(0)
  os.waitpid(pid, 0)


def _size(folder: Path) -> int:
  total = 0
  for d, _, files in os.walk(folder):
    for f in files:
      try: total += os.lstat(os.path.join(d, f)).st_blocks * 512
      except OSError: pass
  return total


def _watch(folder: Path, limit: int, uid: int, done: threading.Event, over: list) -> None:
  """/job/out has no tmpfs of a fixed size here: its size is polled, and past limit every process of uid is stopped
  (what it wrote so far is sent back, capped by unpack as ever)."""
  while not done.wait(0.05):
    if _size(folder) > limit:
      over.append(True)
      _kill_all(uid)
      return


def _sweep_tmp(uid: int) -> None:
  for e in os.scandir("/tmp"):
    try:
      if e.stat(follow_symlinks=False).st_uid != uid: continue
      if e.is_dir(follow_symlinks=False): shutil.rmtree(e.path, ignore_errors=True)
      else: os.unlink(e.path)
    except OSError: pass


def run(argv: list[str], ro: list[tuple[str, str]], out: Path, stdin: bytes, limits, env: dict[str, str],
        sandbox):
  """sandbox.run's contract (argv at the sandbox's paths, ro binds, /job/out unpacked into out), as a user of its own.
  sandbox: the sandbox module (its Result, unpack, python, HOME and PASS_ENV)."""
  if (why := available()) is not None: raise sandbox.SandboxError(why)
  if (why := hidden_tests_closed(GRADING_TREE / "solutions")) is not None: raise sandbox.SandboxError(why)
  uid = sandbox.uid()
  out.mkdir(parents=True, exist_ok=True)
  log = out.parent / f"{out.name}.log"
  with open(LOCK, "a") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)   # one sandbox at a time: the fixed paths are the machine's
    _kill_all(uid)
    private, made = Path(tempfile.mkdtemp(prefix="uopc-unpriv-")), []
    try:
      os.chmod(private, 0o711)
      for name in ("out", "home"):
        (private / name).mkdir(mode=0o700)
        os.chown(private / name, uid, uid)
      py, py_binds = sandbox.python()
      _reachable(str(private / "out"))
      for src, dst in [*py_binds, *ro, (str(Path(sandbox.__file__).resolve().parent / "outbox.py"), OUTBOX)]:
        _reachable(src)
        if src != dst: _link(dst, src, made)
      _link("/job/out", str(private / "out"), made)
      _link(sandbox.HOME, str(private / "home"), made)
      variables = {"PATH": "/venv/bin:/usr/bin:/bin", "HOME": sandbox.HOME, "USER": "student", "LOGNAME": "student",
                   "LANG": "C.UTF-8", "TMPDIR": "/tmp", "PYTHONPATH": "/course",
                   "UOPC_CACHE_DIR": f"{sandbox.HOME}/.cache/uopc", "PYTHONDONTWRITEBYTECODE": "1",
                   **{k: os.environ[k] for k in sandbox.PASS_ENV if k in os.environ}, **(env or {})}
      t0 = time.perf_counter()
      with open(log, "w+b") as logf:
        p = subprocess.Popen([py, "-s", OUTBOX, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logf,
                             env=variables, cwd=private / "home", start_new_session=True, close_fds=True,
                             preexec_fn=_drop(uid, limits, _seccomp()))
        reader = threading.Thread(target=sandbox.unpack, args=(p.stdout, out, limits.out_bytes, []), daemon=True)
        reader.start()
        done, over = threading.Event(), []
        threading.Thread(target=_watch, args=(private / "out", limits.out_bytes, uid, done, over), daemon=True).start()
        timed_out = False
        try:
          sandbox.with_input(p, f"{len(stdin)}\n".encode() + stdin, close=False)
          p.wait(timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
          timed_out = True
          try: p.stdin.close()   # outbox: stop everything, send /job/out
          except OSError: pass
          try: p.wait(timeout=limits.grace_s)
          except subprocess.TimeoutExpired: pass
        finally:
          done.set()
          _kill_all(uid)   # the whole user: a process that left the session (setsid, double fork) too
          p.wait()
          reader.join(timeout=limits.grace_s)
          for f in (p.stdin, p.stdout):
            try: f.close()
            except OSError: pass
        logf.seek(max(0, logf.seek(0, 2) - 4000))
        text = logf.read().decode("utf-8", "replace") + \
          (f"\nstopped: /job/out grew past {limits.out_bytes} bytes" if over else "")
      log.unlink()
      return sandbox.Result(p.returncode, timed_out, time.perf_counter() - t0, text)
    finally:
      _kill_all(uid)
      _sweep_tmp(uid)
      for dst in made:   # the links only (the folders made for them stay: empty, root's)
        if os.path.islink(dst): os.unlink(dst)
      shutil.rmtree(private, ignore_errors=True)


@contextlib.contextmanager
def apart(ro: list[tuple[str, str]], sandbox):
  """For a timing whose two sides each run as a user of their own (outside.time_apart): the machine's sandbox lock
  held, the fixed paths linked to ro and the Python's folders, and `start(as_uid, cpus, limits)`, which gives the
  (python, preexec, env, cwd) of one side: a fresh home of its own, pinned to cpus, then dropped to as_uid as run()'s
  sandbox is (rlimits, no groups, no capabilities, no new privileges, the seccomp filter). At the end every process of
  each user is killed, their /tmp files removed, the links and homes too. Without namespaces, neither side gets a
  PID namespace of its own: each sees the other in /proc, but as another user it can neither signal nor trace it."""
  if (why := available()) is not None: raise sandbox.SandboxError(why)
  if (why := hidden_tests_closed(GRADING_TREE / "solutions")) is not None: raise sandbox.SandboxError(why)
  with open(LOCK, "a") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)   # one sandbox at a time: the fixed paths are the machine's
    made, users, homes = [], [], []
    py, py_binds = sandbox.python()
    try:
      for src, dst in [*py_binds, *ro]:
        _reachable(src)
        if src != dst: _link(dst, src, made)
      seccomp = _seccomp()

      def start(as_uid: int, cpus: list[int], limits) -> tuple[str, object, dict[str, str], str]:
        _kill_all(as_uid)
        users.append(as_uid)
        home = Path(tempfile.mkdtemp(prefix="uopc-unpriv-side-"))
        homes.append(home)
        os.chown(home, as_uid, as_uid)
        drop = _drop(as_uid, limits, seccomp)

        def preexec() -> None:   # pinned first (as root), then the user: it cannot widen its CPUs
          os.sched_setaffinity(0, cpus)
          drop()
        env = {"PATH": "/venv/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "TMPDIR": "/tmp",
               "PYTHONPATH": "/course", "PYTHONDONTWRITEBYTECODE": "1"}
        return py, preexec, env, str(home)
      yield start
    finally:
      for as_uid in users:
        _kill_all(as_uid)
        _sweep_tmp(as_uid)
      for dst in made:
        if os.path.islink(dst): os.unlink(dst)
      for home in homes: shutil.rmtree(home, ignore_errors=True)

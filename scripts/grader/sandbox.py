"""One bubblewrap sandbox per run of untrusted code (a student's notebook, the harness that runs its C, a compile).

What the code inside can reach: /usr and the Python that runs the grader (read-only), the venv's packages at /venv
(read-only), the student tree at /course (read-only: uopc, examples, data, assignments; never solutions or the
grader's checkout), the grader's in-sandbox scripts at /grader (read-only), an empty home on a tmpfs (the kernel
cache lives there), a private /tmp, its own /proc (a new PID namespace: no grader process is visible; read-only, so
that no process resets its own peak memory), no network (a new network namespace with only loopback), and one
writable folder, /job/out, a tmpfs of a fixed size (Limits.out_bytes). Its first process is outbox.py, which runs
the command and at its end sends /job/out back as a tar stream on stdout; the grader unpacks regular files only, up
to that size, into the host folder `out`, so nothing a sandbox does can fill the grader's disk. As root the code
runs as a UID of its own per grader process, so the process limit counts only it; CPU time, address space, file
size and processes are limited with setrlimit, and a wall-clock timeout stops the whole sandbox (outbox is told to
send what it has; then bwrap's PID-namespace init is killed, and every process inside with it).

What it does not give: the kernel is shared (a kernel exploit escapes), the CPU and memory bandwidth are shared
with other sandboxes (timings are noisy), and /usr is readable (nothing secret should live there).
"""
from __future__ import annotations
import os
import resource
import shutil
import re
import signal
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

BWRAP = "bwrap"
HOME = "/home/student"
BASE_UID = 61000   # as root, a grader process runs its sandboxes as a UID of its own from here (no account needed)
PASS_ENV = ("OMP_NUM_THREADS", "CC")   # the host's choice of compiler and threads, nothing else of its environment


class SandboxError(RuntimeError):
  """The sandbox itself could not be made (bwrap missing or failing): not the student's doing."""


@dataclass
class Limits:
  wall_s: float = 1200.0           # the whole sandbox, then it is killed
  cpu_s: int = 1800                # CPU seconds per process
  memory: int = 16 << 30           # address space per process (OpenMP and BLAS threads reserve a lot of it)
  nproc: int = 256                 # processes and threads of the sandbox's UID
  fsize: int = 256 << 20           # the largest file it may write
  tmpfs: int = 2 << 30             # bytes of its home and of its /tmp, each
  out_bytes: int = 512 << 20       # bytes of /job/out: what the grader takes back at most
  grace_s: float = 30.0            # after the wall-clock limit: time to send /job/out back before the kill


@dataclass
class Result:
  returncode: int
  timed_out: bool
  seconds: float
  log: str                         # the tail of its stdout and stderr: for the teacher, never parsed


def backend() -> str:
  """Which sandbox runs untrusted code: UOPC_SANDBOX=bubblewrap or =unprivileged forces one; else bubblewrap where it
  can make namespaces, and where it cannot (a Docker container) the unprivileged-user one (unprivileged.py) as root."""
  forced = os.environ.get("UOPC_SANDBOX", "")
  if forced: return forced
  return "unprivileged" if _bwrap_available() is not None and os.geteuid() == 0 else "bubblewrap"


def available() -> str | None:
  """None when sandboxes can be made here, else why not (for a skip message or an error)."""
  chosen = backend()
  if chosen not in ("bubblewrap", "unprivileged"):
    return f"UOPC_SANDBOX={chosen!r}: expected bubblewrap or unprivileged"
  if chosen == "unprivileged":
    import unprivileged
    return unprivileged.available()
  return _bwrap_available()


_bwrap_why: list[str | None] = []


def _bwrap_available() -> str | None:
  if _bwrap_why: return _bwrap_why[0]   # asked once per process: the machine does not change under the grader
  if shutil.which(BWRAP) is None:
    return "bubblewrap (bwrap) is not installed: apt-get install bubblewrap (see README, 'Grading')"
  r = subprocess.run([BWRAP, *namespaces(), "--ro-bind", "/", "/", "true"], capture_output=True, text=True)
  _bwrap_why.append(None if r.returncode == 0 else f"bwrap cannot make a sandbox here: {r.stderr.strip()[:300]}")
  return _bwrap_why[0]


def namespaces() -> list[str]:
  # as root, no user namespace: the code inside drops to a UID of its own instead (then RLIMIT_NPROC counts it)
  user = [] if os.geteuid() == 0 else ["--unshare-user"]
  return [*user, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
          "--die-with-parent", "--new-session"]


def _dirs(path: str, made: set[str]) -> list[str]:
  """--dir for every parent of path not made yet (bwrap would make them 0700 as root, closed to the student's UID)."""
  out, parts = [], Path(path).parts
  for k in range(2, len(parts)):
    d = str(Path(*parts[:k]))
    if d not in made:
      made.add(d)
      out += ["--perms", "0755", "--dir", d]
  return out


def python() -> tuple[str, list[tuple[str, str]]]:
  """The Python to run inside and the (host, sandbox) folders it needs: the venv at /venv, its base interpreter."""
  binds = []
  base = Path(sys.base_prefix).resolve()
  if not str(base).startswith("/usr/"): binds.append((str(base), str(base)))
  if sys.prefix != sys.base_prefix:
    binds.append((sys.prefix, "/venv"))
    return "/venv/bin/python", binds
  return sys.executable, binds


def uid() -> int:
  """The UID this grader process's sandboxes run as, when it runs as root: one per process (grade_all's workers,
  two `make grade` at once), so that RLIMIT_NPROC, which counts a UID's processes, counts one sandbox only."""
  return BASE_UID + os.getpid() % 60000


def command(argv: list[str], ro: list[tuple[str, str]], out: Path, limits: Limits,
            env: dict[str, str] | None = None, as_uid: int | None = None, outbox: bool = True) -> list[str]:
  """The bwrap command line that runs argv (inside paths) with the read-only binds ro, /job/out writable, and env
  added to the sandbox's few variables; as root, as the UID as_uid (default: uid()). Without outbox, argv is run
  directly, its stdin and stdout the caller's (a timing child: child_command)."""
  cmd, made = [BWRAP, "--clearenv", *namespaces()], {"/usr"}
  cmd += ["--ro-bind", "/usr", "/usr"]
  for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
    p = Path("/" + name)
    if p.is_symlink(): cmd += ["--symlink", os.readlink(p), str(p)]
    elif p.is_dir(): cmd += ["--ro-bind", str(p), str(p)]
  for etc in ("/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/OpenCL"):
    if os.path.exists(etc): cmd += [*_dirs(etc, made), "--ro-bind", etc, etc]
  _, py_binds = python()
  for src, dst in [*py_binds, *ro]: cmd += [*_dirs(dst, made), "--ro-bind", src, dst]
  for tmp in (HOME, "/tmp"): cmd += [*_dirs(tmp, made), "--size", str(limits.tmpfs), "--perms", "1777", "--tmpfs", tmp]
  cmd += [*_dirs("/job/out", made), "--size", str(limits.out_bytes), "--perms", "1777", "--tmpfs", "/job/out"]
  cmd += [*_dirs("/outbox/outbox.py", made), "--ro-bind", str(Path(__file__).resolve().parent / "outbox.py"),
          "/outbox/outbox.py", "--proc", "/proc", "--remount-ro", "/proc", "--dev", "/dev"]
  variables = {"PATH": "/venv/bin:/usr/bin:/bin", "HOME": HOME, "USER": "student", "LOGNAME": "student",
               "LANG": "C.UTF-8", "TMPDIR": "/tmp", "PYTHONPATH": "/course", "UOPC_CACHE_DIR": f"{HOME}/.cache/uopc",
               "PYTHONDONTWRITEBYTECODE": "1", **{k: os.environ[k] for k in PASS_ENV if k in os.environ}, **(env or {})}
  for k, v in variables.items(): cmd += ["--setenv", k, v]
  cmd += ["--chdir", HOME]
  if os.geteuid() == 0:   # drop to this process's own UID with no capabilities, inside the namespaces bwrap made
    who = uid() if as_uid is None else as_uid
    cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "setpriv", f"--reuid={who}", f"--regid={who}",
            "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]
  return cmd + ([python()[0], "-s", "/outbox/outbox.py"] if outbox else []) + argv


def child_command(argv: list[str], ro: list[tuple[str, str]], as_uid: int, env: dict[str, str] | None = None,
                  limits: Limits = Limits()) -> list[str]:
  """A sandbox of its own (its own PID namespace, as root its own UID) for one long-lived child that talks over its
  stdin and stdout: the two sides of a timing (outside.py) each get one, and neither sees the other."""
  return command(argv, ro, Path("/nonexistent"), limits, env, as_uid=as_uid, outbox=False)


def limit(limits: Limits):
  """The setrlimit calls of a sandbox (for a Popen's preexec_fn)."""
  return _limit(limits)


def _limit(limits: Limits):
  def apply():   # in the child, before exec: inherited by bwrap and by everything inside
    nproc = limits.nproc
    if os.geteuid() != 0:   # the teacher's own UID: leave room for the processes they already have
      nproc += sum(1 for p in Path("/proc").iterdir() if p.name.isdigit())
    for res, value in ((resource.RLIMIT_CPU, limits.cpu_s), (resource.RLIMIT_AS, limits.memory),
                       (resource.RLIMIT_FSIZE, limits.fsize), (resource.RLIMIT_NPROC, nproc),
                       (resource.RLIMIT_CORE, 0)):
      resource.setrlimit(res, (value, value))
  return apply


def run(argv: list[str], ro: list[tuple[str, str]], out: Path, stdin: bytes = b"", limits: Limits = Limits(),
        env: dict[str, str] | None = None) -> Result:
  """Run argv in a fresh sandbox; what it leaves in its /job/out is unpacked into out (a host folder). Returns when it
  has ended, or been stopped at limits.wall_s (then it still sends /job/out back within limits.grace_s)."""
  if (why := available()) is not None: raise SandboxError(why)
  if backend() == "unprivileged":
    import unprivileged
    return unprivileged.run(argv, ro, out, stdin, limits, env or {}, sys.modules[__name__])
  out.mkdir(parents=True, exist_ok=True)
  log = out.parent / f"{out.name}.log"
  t0 = time.perf_counter()
  with open(log, "w+b") as logf:
    p = subprocess.Popen(command(argv, ro, out, limits, env), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=logf, start_new_session=True, preexec_fn=_limit(limits))
    unpacked: list[str] = []
    reader = threading.Thread(target=unpack, args=(p.stdout, out, limits.out_bytes, unpacked), daemon=True)
    reader.start()
    timed_out = False
    try:
      with_input(p, f"{len(stdin)}\n".encode() + stdin, close=False)
      p.wait(timeout=limits.wall_s)
    except subprocess.TimeoutExpired:
      timed_out = True
      try: p.stdin.close()   # outbox: stop everything, send /job/out
      except OSError: pass
      try: p.wait(timeout=limits.grace_s)
      except subprocess.TimeoutExpired: pass
    finally:
      if p.poll() is None:
        try: os.killpg(p.pid, signal.SIGKILL)   # bwrap dies; its init in the sandbox dies with it, then all inside
        except ProcessLookupError: pass
      p.wait()
      reader.join(timeout=limits.grace_s)
      for f in (p.stdin, p.stdout):
        try: f.close()
        except OSError: pass
    logf.seek(max(0, logf.seek(0, 2) - 4000))
    text = logf.read().decode("utf-8", "replace")
  log.unlink()
  return Result(p.returncode, timed_out, time.perf_counter() - t0, text)


SAFE_PART = re.compile(r"^[A-Za-z0-9_.+=-]{1,200}$")


class _Capped:
  """A stream that ends (an OSError) after `limit` bytes."""

  def __init__(self, f, limit: int): self.f, self.left = f, limit
  def read(self, n: int = -1) -> bytes:
    if self.left <= 0: raise OSError("the sandbox sent more than its output folder can hold")
    b = self.f.read(self.left if n < 0 else min(n, self.left))
    self.left -= len(b)
    return b


def unpack(stream, out: Path, limit: int, names: list[str]) -> None:
  """The regular files of a tar stream into out: safe relative names only, each written once, `limit` bytes in all;
  links, devices, folders, names with `..` or odd characters are skipped. Never raises."""
  try:
    with tarfile.open(fileobj=_Capped(stream, limit + (4 << 20)), mode="r|") as tar:
      for m in tar:
        parts = m.name.split("/")
        if not m.isreg() or m.size > limit or not all(SAFE_PART.match(x) and x not in (".", "..") for x in parts):
          continue
        dest = out.joinpath(*parts)
        dest.parent.mkdir(parents=True, exist_ok=True)
        src = tar.extractfile(m)
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
          while chunk := src.read(1 << 20): f.write(chunk)
        names.append(m.name)
  except (OSError, tarfile.TarError, EOFError, ValueError): pass
  try:
    while stream.read(1 << 20): pass   # the rest (there should be none): so that the sandbox is not blocked on it
  except (OSError, ValueError): pass


def with_input(p: subprocess.Popen, data: bytes, close: bool = True) -> None:
  try:
    p.stdin.write(data)
    p.stdin.flush()
    if close: p.stdin.close()
  except BrokenPipeError: pass

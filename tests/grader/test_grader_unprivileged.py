"""The second sandbox (scripts/grader/unprivileged.py), forced with UOPC_SANDBOX=unprivileged: the code inside runs as
a user of its own with no capabilities, no new privileges and a seccomp filter, cannot read what root alone may read
(the hidden tests), sends back /job/out as bubblewrap's sandbox does, and leaves no process or /tmp file behind.
The grader's attack suites run under it with the same variable (NOTES: which apply); needs root."""
import json
import os
import sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT / "scripts" / "grader")]
import sandbox  # noqa: E402
import unprivileged  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the unprivileged-user sandbox needs root")

PROBE = r'''
import json, os, signal, subprocess, sys
def status(key):
  return next(l.split(":", 1)[1].strip() for l in open("/proc/self/status") if l.startswith(key + ":"))
def can_read(path):
  try: open(path, "rb").read(1); return True
  except OSError: return False
def denied(fn):
  try: fn(); return False
  except OSError: return True
secret = sys.argv[1]
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
ptrace_refused = libc.ptrace(0, 0, 0, 0) == -1 and ctypes.get_errno() == 1   # PTRACE_TRACEME: EPERM from seccomp
subprocess.Popen(["sleep", "300"], start_new_session=True)   # a process that tries to outlive the sandbox
open("/tmp/uopc-unpriv-left-behind", "w").write("x")
json.dump({"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "cap_eff": status("CapEff"),
           "cap_prm": status("CapPrm"), "no_new_privs": status("NoNewPrivs"), "seccomp": status("Seccomp"),
           "reads_secret": can_read(secret), "ptrace_refused": ptrace_refused,
           "setuid_back": not denied(lambda: os.setuid(0)), "home": os.path.realpath(os.environ["HOME"]),
           "writes_home": not denied(lambda: open(os.path.join(os.environ["HOME"], "f"), "w").write("x"))},
          open("/job/out/report.json", "w"))
'''


def living(uid: int) -> list[str]:
  """The processes of uid that are not zombies (a killed process stays one until its new parent reaps it)."""
  out = []
  for p in Path("/proc").iterdir():
    try:
      if p.name.isdigit() and p.stat().st_uid == uid and (p / "stat").read_text().rpartition(")")[2].split()[0] != "Z":
        out.append((p / "cmdline").read_bytes().replace(b"\0", b" ").decode())
    except OSError: pass
  return out


@pytest.fixture()
def forced(monkeypatch):
  monkeypatch.setenv("UOPC_SANDBOX", "unprivileged")
  assert sandbox.backend() == "unprivileged" and sandbox.available() is None


def test_the_code_inside_is_a_user_of_its_own_with_nothing_more(tmp_path, forced):
  if unprivileged.hidden_tests_closed(ROOT / "solutions") is not None:
    pytest.skip(f"{ROOT / 'solutions'} is readable by other users: chmod 700 it to run this sandbox here")
  secret = tmp_path / "secret"
  secret.write_text("the hidden inputs")
  os.chmod(secret, 0o600)
  os.chmod(tmp_path, 0o711)
  script = tmp_path / "probe.py"
  script.write_text(PROBE)
  os.chmod(script, 0o644)
  out = tmp_path / "out"
  r = sandbox.run(["/venv/bin/python", "-s", "/job/in/probe.py", str(secret)], [(str(tmp_path), "/job/in")], out,
                  limits=sandbox.Limits(wall_s=120))
  assert r.returncode == 0 and not r.timed_out, r.log
  got = json.loads((out / "report.json").read_text())
  assert got["uid"] == got["gid"] == sandbox.uid() and got["groups"] == []
  assert int(got["cap_eff"], 16) == 0 and int(got["cap_prm"], 16) == 0 and got["no_new_privs"] == "1"
  assert not got["reads_secret"] and not got["setuid_back"] and got["writes_home"]
  if unprivileged._seccomp() is not None: assert got["seccomp"] == "2" and got["ptrace_refused"]
  assert living(sandbox.uid()) == [], "a process of the sandbox's user outlived it"
  assert not Path("/tmp/uopc-unpriv-left-behind").exists()


def test_hidden_tests_readable_by_others_are_refused(tmp_path):
  open_tests = tmp_path / "solutions"
  open_tests.mkdir()
  os.chmod(open_tests, 0o755)
  assert "readable by other users" in unprivileged.hidden_tests_closed(open_tests)
  os.chmod(open_tests, 0o700)
  assert unprivileged.hidden_tests_closed(open_tests) is None


def test_the_variable_chooses_the_backend(monkeypatch):
  monkeypatch.setenv("UOPC_SANDBOX", "nonsense")
  assert "UOPC_SANDBOX" in sandbox.available()
  monkeypatch.setenv("UOPC_SANDBOX", "bubblewrap")
  assert sandbox.backend() == "bubblewrap"

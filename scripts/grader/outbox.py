"""The first process of every sandbox (sandbox.py): runs the command, then sends /job/out back as a tar on stdout.

/job/out is a tmpfs of a fixed size inside the sandbox, so what a sandbox can write is bounded by that size whatever
it does; nothing it writes reaches the grader's disk except through this stream, which the grader reads up to the
same bound and unpacks as regular files only (sandbox.py). The command's stdin is what this process reads after a
first line giving its length; when the grader closes stdin (its wall-clock limit), or the command ends, every other
process of the sandbox is killed and the folder is sent. The command's own stdout goes to stderr (the log).
"""
from __future__ import annotations
import ctypes
import os
import signal
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

OUT = "/job/out"


def others() -> list[int]:
  keep = {1, os.getpid()}
  return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and int(p.name) not in keep]


def main() -> int:
  try: ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)   # PR_SET_DUMPABLE: what it reads is not readable through /proc
  except Exception: pass
  n = int(sys.stdin.buffer.readline() or b"0")
  data = sys.stdin.buffer.read(n)
  child = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=2, start_new_session=True)
  try:
    child.stdin.write(data)
    child.stdin.close()
  except BrokenPipeError: pass
  sys.stderr.flush()
  stop = threading.Event()
  threading.Thread(target=lambda: (sys.stdin.buffer.read(), stop.set()), daemon=True).start()
  while child.poll() is None and not stop.wait(0.05): pass
  for pid in others():   # the command, the notebook's kernel, anything a student's code left running
    try: os.kill(pid, signal.SIGKILL)
    except OSError: pass
  child.wait()
  with tarfile.open(fileobj=sys.stdout.buffer, mode="w|") as tar:
    for d, dirs, files in os.walk(OUT):
      for name in sorted(files):
        p = os.path.join(d, name)
        if os.path.islink(p) or not os.path.isfile(p): continue
        try: tar.add(p, arcname=os.path.relpath(p, OUT), recursive=False)
        except OSError: pass
  sys.stdout.buffer.flush()
  return child.returncode if child.returncode is not None and child.returncode >= 0 else 128


if __name__ == "__main__":
  os._exit(main())   # not sys.exit: the thread still reading stdin would block the interpreter's shutdown

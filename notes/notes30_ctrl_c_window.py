"""NOTES 30: a Ctrl-C in the moment after Popen started the compiler, before the caller held the process.

  python notes/notes30_ctrl_c_window.py [--runs 5]

Each run starts a fresh Python that compiles with a fake compiler (a shell script that starts a long `sleep` child,
as cc starts cc1, and waits for it) and sends itself SIGINT from inside subprocess.Popen, right after the compiler
has started: the moment between Popen returning and the caller's `try` around the wait, with a second thread alive
(the kernel may hand a process's signal to any thread that does not block it). Prints, per run, whether the
interrupt reached the caller and whether the compiler's child was dead a few seconds later.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ADD = "void add(float* a, float* b, float* c, int n) { for (int i = 0; i < n; i++) c[i] = a[i] + b[i]; }"


def dead(pid: int) -> bool:
  try: return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] in "ZX"
  except (OSError, IndexError): return True


def one_run(tmp: Path) -> tuple[bool, bool]:
  pidfile, cc = tmp / "child.pid", tmp / "fake-cc"
  pidfile.unlink(missing_ok=True)
  cc.write_text('#!/bin/sh\ncase "$*" in *--version*|*-###*) echo fake 1; exit 0;; esac\n'
                f'sleep 300 &\necho $! > {pidfile}\nwait\n')
  cc.chmod(0o755)
  code = textwrap.dedent(f"""\
    import os, signal, subprocess, threading, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()   # another thread, as most programs have
    real = subprocess.Popen
    def popen_then_ctrl_c(cmd, *args, **kwargs):
      proc = real(cmd, *args, **kwargs)
      if cmd[0] != {str(cc)!r} or "-shared" not in cmd: return proc
      while not os.path.exists({str(pidfile)!r}): time.sleep(0.01)
      os.kill(os.getpid(), signal.SIGINT)
      time.sleep(0.2)
      return proc
    subprocess.Popen = popen_then_ctrl_c
    from uopc.runtime import Program
    try: Program({ADD!r}, "add", flags=("-shared", "-fPIC"))
    except KeyboardInterrupt: print("interrupted")
  """)
  env = {**os.environ, "UOPC_CACHE_DIR": str(tmp / "cache"), "CC": str(cc)}
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
  pid = int(pidfile.read_text())
  for _ in range(50):
    if dead(pid): break
    time.sleep(0.1)
  gone = dead(pid)
  if not gone: os.kill(pid, 9)
  return r.stdout.strip() == "interrupted", gone


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--runs", type=int, default=5)
  args = ap.parse_args()
  with tempfile.TemporaryDirectory() as d:
    results = [one_run(Path(d)) for _ in range(args.runs)]
  for k, (interrupted, gone) in enumerate(results):
    print(f"run {k + 1}: KeyboardInterrupt reached the caller: {interrupted}; compiler's child dead: {gone}")
  print(f"{sum(g for _, g in results)} of {len(results)} runs left no compiler behind")


if __name__ == "__main__":
  main()

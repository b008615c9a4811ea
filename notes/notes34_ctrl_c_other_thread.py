"""NOTES 34: a Ctrl-C that the kernel hands to another thread, while the main thread waits for the compiler.

  python notes/notes34_ctrl_c_other_thread.py [--runs 3]

Each run is a fresh process with a fake compiler that starts a long-lived child (as cc starts cc1). A second thread
waits until the compiler has started, then sends SIGINT to itself (pthread_kill): the case where the kernel picks a
thread other than the main one for a process's signal. The script prints how long the process took to print
"interrupted", and whether the compiler's child was left running, for two ways of waiting on the compiler:
  slices      uopc.runtime as it is: communicate() in WAIT_SLICE_S slices, so the main thread runs Python between them
  one wait    WAIT_SLICE_S set past the timeout: one communicate() for the whole compile, as before NOTES 34
The compile timeout is set to 5 s in both (uopc's is 300 s), so that the one wait ends.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from uopc.bench import header

CHILD = """if 1:
  import os, signal, threading, time
  signal.signal(signal.SIGINT, signal.default_int_handler)
  from uopc import runtime
  from uopc.runtime import build
  build.COMPILE_TIMEOUT_S = 5
  build.WAIT_SLICE_S = {slice_s}
  def press_ctrl_c():
    while not os.path.exists({pidfile!r}): time.sleep(0.01)
    time.sleep(0.2)
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)
  threading.Thread(target=press_ctrl_c, daemon=True).start()
  t = time.monotonic()
  try: runtime.Program("void add(float* a) {{ a[0] = 1; }}", "add", flags=("-shared", "-fPIC"))
  except (KeyboardInterrupt, runtime.CompileError) as e:
    print(type(e).__name__, round(time.monotonic() - t, 2))
"""


def alive(pid: int) -> bool:
  try: return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] not in "ZX"
  except (OSError, IndexError): return False


def one_run(slice_s: float) -> str:
  with tempfile.TemporaryDirectory() as tmp:
    pidfile = os.path.join(tmp, "child.pid")
    cc = Path(tmp) / "fake-cc"
    cc.write_text(f'#!/bin/sh\ncase "$*" in *--version*|*-###*) echo fake 1; exit 0;; esac\n'
                  f'sleep 300 &\necho $! > {pidfile}\nwait\n')
    cc.chmod(0o755)
    env = {**os.environ, "CC": str(cc), "UOPC_CACHE_DIR": os.path.join(tmp, "cache")}
    r = subprocess.run([sys.executable, "-c", CHILD.format(slice_s=slice_s, pidfile=pidfile)], env=env,
                       capture_output=True, text=True, timeout=60)
    time.sleep(0.5)
    pid = int(Path(pidfile).read_text())
    left = alive(pid)
    if left: os.kill(pid, 9)
    return f"{r.stdout.strip() or r.stderr.strip()[-80:]:<28s} child left running: {left}"


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--runs", type=int, default=3)
  args = ap.parse_args()
  print(header())
  for name, slice_s in (("slices", 0.1), ("one wait", 1e9)):
    for k in range(args.runs): print(f"{name:<9s} run {k + 1}: {one_run(slice_s)}")


if __name__ == "__main__":
  main()

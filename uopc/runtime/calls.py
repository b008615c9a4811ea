"""Calling a compiled kernel: on a kernel thread, so that Ctrl-C still works, and with the OpenMP threads it asks for.

  call_kernel(prg, args)   prg.fn(*args), interruptible on the main thread; a quick repeat call runs directly

A C call holds the thread that made it until it returns, and Python runs signal handlers only between bytecodes, so a
kernel called on the main thread cannot be interrupted. Calls that may run long go to one kernel thread instead, and
the main thread waits on a lock, which Ctrl-C interrupts. C code cannot be stopped safely from outside, so an
interrupted kernel runs on to its end on that thread, and the next call waits for it (it may still be writing the
arrays it was given, which its job keeps alive); a kernel that never ends needs a new process (restart the notebook
kernel).
"""
from __future__ import annotations
import os
import queue
import threading
import time
from typing import Callable, Protocol
from uopc.runtime.process import omp_thread_calls, passive_wait


class Compiled(Protocol):
  """What a call needs of a compiled kernel (uopc.runtime.program.Program is one)."""
  name: str
  fn: Callable                # the C function, taking converted arguments
  threads: int | None         # OpenMP threads for its parallel loops: None = OpenMP's own choice
  _quick: tuple | None        # the scalars of its last call that finished within QUICK_S
  scalar_slots: tuple[int, ...]   # the positions of its scalar arguments (a rendered kernel has none)

# The handoff costs tens of microseconds, which shows in a small realize, so a call runs directly when the same Program
# already finished with the same scalar arguments in under QUICK_S: the loop bounds of a kernel are constants or
# scalars. Only under a passive wait policy, though: each thread that starts OpenMP loops keeps a pool of workers of
# its own, and two pools that spin slow each other down (NOTES 20). 20 ms: a 512 x 512 matmul (about a millisecond)
# skips the handoff too (NOTES 28), and a wait that long still feels immediate to a Ctrl-C.
QUICK_S = 20e-3
QUICK_DIRECT = passive_wait()   # read after uopc.runtime's configure_process() set the policy
_jobs: queue.SimpleQueue = queue.SimpleQueue()
_kernel_thread: threading.Thread | None = None
_last_job = threading.Lock()   # locked while the latest job handed to the kernel thread runs


def _forget_kernel_thread() -> None:
  """In a forked child: the kernel thread was not copied, so the next call starts a new one."""
  global _jobs, _kernel_thread, _last_job
  _jobs, _kernel_thread, _last_job = queue.SimpleQueue(), None, threading.Lock()


if hasattr(os, "register_at_fork"): os.register_at_fork(after_in_child=_forget_kernel_thread)


def _kernel_loop() -> None:
  while True:
    prg, args, done = _jobs.get()   # the job holds the Program: its object stays loaded until the call returns
    try: _invoke(prg, args)
    finally:
      del prg, args   # not kept while this thread waits for the next job: they hold the caller's arrays
      done.release()


def _wait_on_kernel_thread(prg: Compiled, args: list) -> None:
  global _kernel_thread, _last_job
  if _kernel_thread is None:
    _kernel_thread = threading.Thread(target=_kernel_loop, name="uopc-kernels", daemon=True)
    _kernel_thread.start()
  done = _last_job = threading.Lock()
  done.acquire()
  _jobs.put((prg, args, done))   # queued behind an interrupted kernel that is still running, if there is one
  try:
    while not done.acquire(timeout=0.25): pass
    done.release()
  except KeyboardInterrupt as e:
    if hasattr(e, "add_note"):
      e.add_note(f"uopc: kernel {prg.name} runs on in the background; the next kernel call waits for it")
    raise


def call_kernel(prg: Compiled, args: list) -> None:
  """prg.fn(*args) with converted arguments, interruptible on the main thread."""
  scalars = tuple([args[k] for k in prg.scalar_slots]) if prg.scalar_slots else ()   # a kernel's loop bounds
  quick = QUICK_DIRECT and prg._quick == scalars and not _last_job.locked()
  if quick or threading.current_thread() is not threading.main_thread(): return _invoke(prg, args)
  t0 = time.perf_counter()
  _wait_on_kernel_thread(prg, args)
  prg._quick = scalars if time.perf_counter() - t0 < QUICK_S else None   # the scalars of a call that finished fast


# ---- one thread for a small kernel ----
# With the passive wait policy, each parallel loop wakes OpenMP's sleeping workers and waits for them: tens of
# microseconds here, more than a small kernel's whole work (a GPT step's 128 kernels, most of them small: NOTES 27).
# A Program whose `threads` is set runs its parallel loops with that many threads: omp_set_num_threads is an ICV of the
# calling thread only, so it is set around the call, on the thread that makes it. The kernel's text is unchanged.
_omp = omp_thread_calls()   # (omp_get_max_threads, omp_set_num_threads) of the pinned runtime, or None


def _invoke(prg: Compiled, args: list) -> None:
  if prg.threads is None or _omp is None: return prg.fn(*args)
  get, set_ = _omp
  was = get()
  if was == prg.threads: return prg.fn(*args)   # the thread runs that many already (OMP_NUM_THREADS=1): nothing to set
  set_(prg.threads)
  try: prg.fn(*args)
  finally: set_(was)

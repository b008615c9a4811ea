"""The student's timed process, locked once its warm-up run is over (harness.py, `do_time`).

After the warm-up the student's kernel has its OpenMP team and needs nothing more of the system than memory, the
team's own waiting and waking, and the pipe to its parent. `lock` installs a seccomp filter on every thread of the
process (libseccomp, through ctypes: no Python package; TSYNC, so a thread the kernel started in its warm-up is
filtered too) that ALLOWS only those calls (`ALLOW`) and kills the process at any other: no signal to another process
(the reference's SIGSTOP), no file opened (/proc, libc's symbol table read from disk), no new thread or process, no
exec, ptrace or other process's memory, no change of CPU affinity or priority, and none of the calls a list of
forbidden ones would have to foresee (getpid, a socket, ...). So a kernel that finds libc's other functions in memory
gains nothing by calling them: the timing ends with an error and no speed point.

The list: what the timed child was seen to make after the lock (strace -f on harness.py's child timing the course's
timed kernels, the solutions' week 1 fused kernel and week 3 GEMMs at 256 and 512, on 1 and on 2 CPUs, stopped and
continued while the reference ran: read, write, futex, exit_group, nothing else), and the few its Python and the
team may make on a path those runs did not take: memory for a larger message, a yield or a clock read in libgomp's
waiting, a futex wait restarted after a SIGCONT.
"""
from __future__ import annotations
import ctypes
import ctypes.util

ALLOW = (
  "read", "write", "futex", "exit_group",                      # seen: the pipe to the parent, the team, the end
  "exit", "sched_yield", "clock_gettime", "restart_syscall", "rt_sigreturn",   # OpenMP's waiting; a wait restarted
  "mmap", "munmap", "mremap", "brk", "madvise", "mprotect",    # memory: Python's allocator, malloc's arenas
)
ACT_KILL_PROCESS = 0x80000000
ACT_ALLOW = 0x7FFF0000
ATTR_TSYNC = 4       # SCMP_FLTATR_CTL_TSYNC: the filter on every thread of the process, not only the caller
NR_ERROR = -1        # __NR_SCMP_ERROR: a name this kernel's architecture does not have


def lock() -> str | None:
  """Filter this process (every thread): ALLOW, anything else kills it; None, or why it could not be done (no
  libseccomp here)."""
  name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
  try: lib = ctypes.CDLL(name)
  except OSError: return "libseccomp is not installed: the timed process runs unfiltered"
  lib.seccomp_init.restype, lib.seccomp_init.argtypes = ctypes.c_void_p, [ctypes.c_uint32]
  lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
  lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
  lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
  lib.seccomp_load.argtypes = lib.seccomp_release.argtypes = [ctypes.c_void_p]
  ctx = lib.seccomp_init(ACT_KILL_PROCESS)
  if not ctx: return "seccomp_init failed"
  try:
    if lib.seccomp_attr_set(ctx, ATTR_TSYNC, 1) != 0: return "seccomp cannot filter every thread here (TSYNC)"
    for call in ALLOW:
      nr = lib.seccomp_syscall_resolve_name(call.encode())
      if nr != NR_ERROR and lib.seccomp_rule_add(ctx, ACT_ALLOW, nr, 0) != 0:
        return f"seccomp could not allow {call}"
    if (rc := lib.seccomp_load(ctx)) != 0: return f"seccomp_load failed ({rc})"
    return None
  finally: lib.seccomp_release(ctx)

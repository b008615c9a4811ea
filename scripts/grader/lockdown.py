"""The student's timed process, locked once its warm-up run is over (harness.py, `do_time`).

After the warm-up the student's kernel has its OpenMP team and needs nothing more of the system than memory and
the pipe to its parent. `lock` installs a seccomp filter on every thread of the process (libseccomp, through ctypes:
no Python package; TSYNC, so a thread the kernel started in its warm-up is filtered too) that answers EPERM to the
calls an attack on the timing would use: signals to other processes (the reference's SIGSTOP), opening files (/proc,
libc's symbol table read from disk), new threads or processes, exec, ptrace and reading another process's memory,
and changing CPU affinity or priority. Everything else stays allowed, so the harness's own replies still work.

Besides the filter, the harness stops the student's whole process (SIGSTOP) while the reference runs, so a thread
left spinning from the warm-up takes no CPU from the reference.
"""
from __future__ import annotations
import ctypes
import ctypes.util
import errno

DENY = ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open", "pidfd_send_signal",
        "pidfd_getfd", "open", "openat", "openat2", "creat", "open_by_handle_at", "clone", "clone3", "fork", "vfork",
        "execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev", "sched_setaffinity", "setpriority",
        "sched_setscheduler", "sched_setattr", "socket", "connect", "memfd_create", "unshare", "setns")
ACT_ALLOW = 0x7FFF0000
ACT_ERRNO = 0x00050000
ATTR_TSYNC = 4       # SCMP_FLTATR_CTL_TSYNC: the filter on every thread of the process, not only the caller
NR_ERROR = -1        # __NR_SCMP_ERROR: a name this kernel's architecture does not have


def lock() -> str | None:
  """Filter this process (every thread); None, or why it could not be done (no libseccomp here)."""
  name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
  try: lib = ctypes.CDLL(name)
  except OSError: return "libseccomp is not installed: the timed process runs unfiltered"
  lib.seccomp_init.restype, lib.seccomp_init.argtypes = ctypes.c_void_p, [ctypes.c_uint32]
  lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
  lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
  lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
  lib.seccomp_load.argtypes = lib.seccomp_release.argtypes = [ctypes.c_void_p]
  ctx = lib.seccomp_init(ACT_ALLOW)
  if not ctx: return "seccomp_init failed"
  try:
    if lib.seccomp_attr_set(ctx, ATTR_TSYNC, 1) != 0: return "seccomp cannot filter every thread here (TSYNC)"
    for call in DENY:
      nr = lib.seccomp_syscall_resolve_name(call.encode())
      if nr != NR_ERROR and lib.seccomp_rule_add(ctx, ACT_ERRNO | errno.EPERM, nr, 0) != 0:
        return f"seccomp could not deny {call}"
    if (rc := lib.seccomp_load(ctx)) != 0: return f"seccomp_load failed ({rc})"
    return None
  finally: lib.seccomp_release(ctx)

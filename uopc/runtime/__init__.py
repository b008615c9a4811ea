"""The runtime: C source -> system compiler -> shared object (cached on disk) -> cffi -> call with NumPy arrays.

  prg = Program(src, "add")       # compiles, or loads the cached object for this exact source and compiler
  prg(a, b, out)                  # arrays are passed by pointer, never copied; checked before any C runs

One job a module:
  process.py    the process settings, applied once at import by configure_process(): OpenMP's passive wait policy,
                glibc's malloc policy, libgomp pinned (NOTES 1, 20, 25)
  toolchain.py  the compiler and the machine: compiler(), its version, the CPU, -march=native's target and vector
                width (native_lanes), cache_dir() and cache_key(); CompileError
  flags.py      what a kernel is compiled with: CompileOpts, FLAGS (the default flags), PRELUDE (the C before it)
  build.py      running the compiler: cache entries checked whole, a crash retried, Ctrl-C and timeouts, no OpenMP
  calls.py      calling a kernel on a kernel thread (Ctrl-C still works), with the OpenMP threads it asks for
  program.py    Program, its parameters (Arg, signature_from_c), clear_cache()
  objfile.py, asm.py, tune.py, cl.py, cuda.py    object files, assembly, the tuner, the OpenCL and CUDA devices

The names below are the ones the book, its chapters and notes use.
"""
from uopc.runtime.process import configure_process

configure_process()   # before anything below reads the policy it sets, and before any kernel loads libgomp

from uopc.runtime.toolchain import (CompileError, cache_dir, cache_key, compiler, compiler_version,  # noqa: E402
                                    machine_id, native_lanes, numbered, vector_bits)
from uopc.runtime.flags import FLAGS, PRELUDE  # noqa: E402
from uopc.runtime.build import CRASH_RETRY_FLAGS, compiler_crashed  # noqa: E402
from uopc.runtime.program import Arg, Program, clear_cache, signature_from_c  # noqa: E402

__all__ = ["configure_process", "CompileError", "cache_dir", "cache_key", "compiler", "compiler_version",
           "machine_id", "native_lanes", "numbered", "vector_bits", "FLAGS", "PRELUDE", "CRASH_RETRY_FLAGS",
           "compiler_crashed", "Arg", "Program", "clear_cache", "signature_from_c"]

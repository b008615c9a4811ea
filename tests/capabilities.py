"""What the machine's C compiler can do, asked once (tests/ is on sys.path when pytest runs them)."""
import functools
from uopc.runtime import CompileError, Program


@functools.cache
def compiler_has_float16() -> bool:
  """gcc 12 and clang 15+ on x86-64 have _Float16; clang 14 says "_Float16 is not supported on this target"."""
  try: Program("void f16_probe(float* p) { _Float16 h = (_Float16)p[0]; p[0] = (float)(h + h); }", "f16_probe")
  except CompileError: return False
  return True

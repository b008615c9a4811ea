"""The rules for a student's C kernel source, before and after the grader's own preprocessor (compile.py).

`source_refused` reads the text as written (an early, cheap refusal); `preprocessed_refused` reads what the grader's
preprocessor made of it with no system include folder and a stand-in per allowed header: the files it read, the
directives left and the forbidden words once every macro is expanded, so that `#define H <stdio.h>` / `#include H`,
an include by path, or `#define A __asm__` are refused whatever spelling hid them. `checked` reads what a compile
sandbox left and applies that rule (outside.build).
"""
from __future__ import annotations
import re
from pathlib import Path

# in the source: what a compute kernel has no use for (the object's imports are checked as well, imports_refused)
FORBIDDEN = re.compile(r"\basm\b|__asm\b|__asm__|\bsyscall\b"
                       r"|__attribute__\s*\(\(\s*(constructor|destructor|section|ifunc|alias|weakref|symver)")
# the directives left in a kernel's preprocessed text (compile.py): an allowed header's marker, OpenMP's and loop hints
DIRECTIVE = re.compile(r"^#pragma (uopc_include <([\w./+-]+)>|omp\b.*|GCC (ivdep|unroll \d+)|(ivdep|unroll\b.*))\s*$")
MAX_PREPROCESSED = 8 << 20   # bytes of a kernel's preprocessed text read back
INCLUDES = {"math.h", "stdint.h", "stddef.h", "stdbool.h", "float.h", "string.h", "omp.h", "immintrin.h",
            "x86intrin.h", "arm_neon.h", "limits.h"}
INCLUDE = re.compile(r"#\s*include\s*[<\"]([^>\"]*)[>\"]")


def source_refused(src: str) -> str | None:
  if m := FORBIDDEN.search(src): return f"the kernel's C contains {m.group(0)!r}, which a compute kernel has no use for"
  bad = [h for h in INCLUDE.findall(src) if h not in INCLUDES]
  if bad: return f"the kernel's C includes {bad[0]!r}: a kernel may include only {', '.join(sorted(INCLUDES))}"
  return None


def preprocessed_refused(text: str, read: list[str]) -> str | None:
  """Why a kernel is refused after the grader's preprocessor expanded it (compile.py), or None: a file read that is
  not an allowed header's stand-in, a directive left that is not an allowed header, OpenMP's or a loop hint, or a
  forbidden word that a macro spelled."""
  outside_headers = [f for f in read if not f.startswith("/tmp/allowed-headers/")]
  if outside_headers:
    return (f"the kernel's C reads {outside_headers[0][:80]!r}, which is not one of the allowed headers "
            f"({', '.join(sorted(INCLUDES))})")
  for line in text.splitlines():
    line = line.strip()
    if not line.startswith("#"): continue
    m = DIRECTIVE.match(line)
    if m is None: return f"the kernel's C has the directive {line[:60]!r}, which a kernel has no use for"
    if m.group(2) is not None and m.group(2) not in INCLUDES:
      return f"the kernel's C includes {m.group(2)!r}: a kernel may include only {', '.join(sorted(INCLUDES))}"
  if m := FORBIDDEN.search(text):
    return f"the kernel's C contains {m.group(0)!r} once its macros are expanded, which a compute kernel has no use for"
  return None


def checked(made: Path, key: str, first: str) -> str | None:
  """Why the grader's preprocessor (compile.py) refuses kernel `key`, from what it left in made, or None."""
  pre, inc = made / f"{key}.i", made / f"{key}.inc"
  try:
    if inc.is_symlink() or not inc.is_file(): return f"the kernel's C could not be preprocessed: {first}"
    read = inc.read_text(errors="replace").splitlines()
    if outside_headers := preprocessed_refused("", read): return outside_headers
    if "No such file or directory" in first:
      return f"the kernel's C includes a header that is not allowed ({first}): a kernel may include only " \
             f"{', '.join(sorted(INCLUDES))}"
    if pre.is_symlink() or not pre.is_file() or pre.stat().st_size > MAX_PREPROCESSED:
      return f"the kernel's C could not be preprocessed: {first}"
    return preprocessed_refused(pre.read_text(errors="replace"), read)
  except OSError as e: return f"the kernel's C could not be preprocessed ({e.strerror})"

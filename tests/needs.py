"""Skip markers for tests that need what some machines lack, each saying why."""
import pytest
from uopc.runtime import compiler
from uopc.runtime.build import openmp_works

# Without OpenMP (clang without libomp, Apple's clang without Homebrew's) kernels are built serial: a kernel whose
# threads race computes the right answer on its one thread, so a test that a race is caught cannot run there
needs_openmp = pytest.mark.skipif(
  not openmp_works(compiler()), reason=f"{compiler()} builds without OpenMP here: a race cannot show on one thread")

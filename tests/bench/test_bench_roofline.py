"""The roofline's ceiling (uopc.bench.ceiling, fma_peak_cpu): a roof drawn under a measured kernel is wrong, so the
ceiling is the measured FMA peak or, where that came out lower, the best measured kernel, and it says which (issue 41:
chapter 11 drew a 30 GFLOP/s peak, wall clock on a busy machine, under curves of CPU time at 44-55). No timing is
asserted: only which number becomes the ceiling, and that the one-thread peak kernel runs on one thread."""
import re
from uopc import bench
from uopc.runtime.machine import target


def test_the_ceiling_is_the_peak_when_no_kernel_beats_it():
  assert bench.ceiling(130.0, {"unfused, N=1024": 55.0, "online, N=1024": 20.0}) == (130.0, "the FMA peak, measured")
  assert bench.ceiling(130.0, {}) == (130.0, "the FMA peak, measured")


def test_a_peak_below_a_measured_kernel_gives_way_to_the_kernel_and_says_so():
  value, what = bench.ceiling(30.0, {"unfused, N=1024": 55.0, "online, N=1024": 20.0, "unfused, N=2048": 44.0})
  assert value == 55.0
  assert "unfused, N=1024" in what and "30 GFLOP/s" in what and "below" in what


def test_the_one_thread_peak_kernel_asks_for_one_thread():
  src = bench.fma_source(target().isa, threads=1)
  assert re.search(r"#pragma omp parallel num_threads\(1\)\n", src)
  assert "num_threads" not in bench.fma_source(target().isa)   # the default: OpenMP's thread count
  assert bench.fma_peak_cpu(reps=1, iters=10_000) > 0

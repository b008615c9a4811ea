"""The fair harness (uopc.bench.isolated): each peer timed in a process of its own, its result checked first.

Tiny cases only (N = 64): these tests check where and how peers run, never how fast.
"""
import os
from pathlib import Path
import numpy as np
import pytest
from uopc import bench
from uopc.bench.cases import Case, PeerError, case_peers, check, inputs, peer_names, reference
from uopc.bench.isolated import best_of, measure, run_isolated

TINY = Case("attention", 64, 16)
HERE = Path(__file__).resolve().parent


def wrong_flash(case, arrays, only=None):
  """case_peers, except that flash's result is off by one: the seam through which a test hands a worker a bad peer."""
  fns = case_peers(case, arrays, only)
  if "flash" in fns:
    right = fns["flash"]
    fns["flash"] = lambda: right() + 1
  return fns


@pytest.fixture
def workers_see_tests(monkeypatch):
  """Workers are fresh interpreters: put this folder on their path so they can import wrong_flash from here."""
  monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
  return f"{Path(__file__).stem}:wrong_flash"


def test_each_peer_runs_in_a_process_of_its_own():
  got = run_isolated(TINY, reps=1, peers=["numpy", "flash"])
  assert list(got) == ["numpy", "flash"]
  assert all(m.seconds > 0 for m in got.values())
  pids = [m.pid for m in got.values()]
  assert os.getpid() not in pids and len(set(pids)) == 2, pids


def test_a_wrong_result_is_an_error_that_names_the_peer(workers_see_tests):
  assert measure(TINY, "numpy", 1, build=workers_see_tests).seconds > 0   # the seam leaves the other peers alone
  with pytest.raises(PeerError, match=r"attention N=64 D=16: peer 'flash' differs from the float64 reference"):
    measure(TINY, "flash", 1, build=workers_see_tests)


def test_a_wrong_result_is_an_error_in_the_interleaved_method_too(monkeypatch):
  monkeypatch.setattr(bench, "case_peers", wrong_flash)
  with pytest.raises(PeerError, match="peer 'flash'"): bench.time_case(TINY, 1, "interleaved")


def test_a_failing_worker_names_the_peer_and_the_error():
  with pytest.raises(PeerError, match=r"peer 'numpy' failed in its worker: AttributeError"):
    measure(TINY, "numpy", 1, build="uopc.bench.cases:no_such_builder")


def test_check_catches_nan_and_wrong_shapes():
  ref = reference(TINY, inputs(TINY))
  check(TINY, "numpy", ref.astype(np.float32), ref)
  with pytest.raises(PeerError, match="peer 'x' differs"): check(TINY, "x", np.full_like(ref, np.nan), ref)
  with pytest.raises(PeerError, match=r"peer 'x' returned shape \(16,\)"): check(TINY, "x", ref[0], ref)


def test_gemm_is_isolated_too_and_both_methods_time_the_same_peers():
  rows = bench.gemm([32], 1)
  peers = ["numpy", "uopc", "vector", "vector jit"]
  assert [(r.case, r.impl) for r in rows] == [("32x32x32", p) for p in peers]
  assert all(r.seconds > 0 for r in rows) and rows[1].base == rows[0].seconds
  assert list(bench.time_case(Case("gemm", 32), 1, "interleaved")) == peers


def test_rounds_keep_each_peers_best():
  rows = bench.gemm([32], 1, rounds=2)
  assert [r.impl for r in rows] == ["numpy", "uopc", "vector", "vector jit"] and all(r.seconds > 0 for r in rows)
  assert "the sweep run 2 times" in bench.header("isolated", 5, 2)
  with pytest.raises(ValueError, match="rounds"): bench.gemm([32], 1, rounds=0)


def test_best_of_takes_at_least_reps_calls_and_at_least_min_seconds_of_them(monkeypatch):
  import types
  import uopc.bench.isolated as bi
  now = [0.0]
  monkeypatch.setattr(bi, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))   # a clock the calls move
  def timed(durations):
    it, calls = iter(durations * 1000), []
    def f():
      calls.append(1)
      now[0] += next(it)
    return f, calls
  f, calls = timed([0.003, 0.001, 0.002])
  assert best_of(f, 2, 0, min_seconds=0.0) == 0.001 and len(calls) == 2      # reps alone
  f, calls = timed([0.003, 0.001, 0.002])
  assert best_of(f, 2, 0, min_seconds=0.02) == 0.001 and len(calls) == 10    # until 21 ms of calls
  f, calls = timed([0.0])
  monkeypatch.setattr(bi, "MAX_REPS", 7)
  assert best_of(f, 2, 1, min_seconds=1.0) == 0.0 and len(calls) == 1 + 7    # the warm-up, then the cap


def test_the_header_names_the_method():
  text = bench.header("isolated", 5)
  assert "# method            each peer in its own process, one at a time, best of 5 after a warm-up (more calls " \
         "where 0.25 s holds more)" in text
  for key in ("cpu", "cpu family/model", "cores", "compiler", "date"): assert f"\n# {key} " in "\n" + text
  assert "all peers in one process, in turns, best of 3" in bench.header("interleaved", 3)
  assert "# method" not in bench.header()


def test_the_cli_prints_the_method(capsys):
  bench.main(["gemm", "--sizes", "32", "--reps", "1", "--method", "interleaved"])
  out = capsys.readouterr().out
  assert "# method            all peers in one process, in turns, best of 1 after a warm-up" in out
  assert "32x32x32" in out


@pytest.mark.parametrize("argv", [["gemm", "--method", "both"], ["gemm", "--reps", "0"],
                                  ["attention", "--peers", "tensorflow"], ["attention", "--sizes", "-8"]])
def test_bad_cli_input_is_refused(argv, capsys):
  with pytest.raises(SystemExit) as e: bench.main(argv)
  assert e.value.code == 2 and "error:" in capsys.readouterr().err


def test_bad_cases_and_peers_are_clear_errors():
  with pytest.raises(ValueError, match="unknown benchmark 'conv'"): Case("conv", 8)
  with pytest.raises(ValueError, match="n must be a positive int"): Case("attention", 0)
  with pytest.raises(ValueError, match="unknown optional peers"): Case("attention", 64, optional={"tensorflow"})
  with pytest.raises(ValueError, match="causal applies to attention only"): Case("gemm", 8, causal=True)
  with pytest.raises(ValueError, match=r"has no peers \['fused'\]"): run_isolated(TINY, 1, peers=["fused"])
  with pytest.raises(ValueError, match="module:function"): measure(TINY, "numpy", 1, build="case_peers")
  with pytest.raises(ValueError, match="unknown timing method"): bench.time_case(TINY, 1, "together")
  with pytest.raises(ValueError, match="reps must be >= 1"): run_isolated(TINY, 0)


def test_peer_names_follow_the_case():
  assert peer_names(TINY) == ["numpy", "unfused", "online", "rewrite", "flash"]
  assert "online" not in peer_names(Case("attention", 64, 16, causal=True))
  assert "fused" in peer_names(Case("attention", 64, 16, optional={"fused"}))
  assert "fused" not in peer_names(Case("attention", 4096, 16, optional={"fused"}))   # seconds a call up there


def test_a_worker_writes_no_warning(capfd):
  # run as `python -m uopc.bench.isolated`, a worker imported its own module twice and runpy warned on every peer: a
  # rebuilt chapter 11 stored 29 RuntimeWarnings (issue 41); the worker runs as `python -c` since
  measure(TINY, "numpy", 1)
  assert "Warning" not in capfd.readouterr().err

"""The tuner (uopc.runtime.tune): BEAM=0 takes the cached winner or the heuristic, BEAM=n times real candidates and
caches the winner in tuned.json, keyed by the kernel, the problem and the machine; a damaged or stale cache is never
trusted.

Every test has a cache directory of its own (UOPC_CACHE_DIR), so tuned.json starts absent; the kernels compiled in
it are shared by the module's tests (the fixture `cache` copies them in and back: each compiles once). The kernels
timed are real ones (a tiny vector FlashAttention); no compiler is mocked.
"""
import dataclasses
import io
import json
import shutil
import sys
import time
import warnings
from pathlib import Path
import numpy as np
import pytest
from uopc.runtime import tune
from uopc.kernels.flash_vec import FlashVecOpts, flash_vector_ir
from uopc.helpers import Context
from uopc.render_c import render_c
from uopc.runtime import Program

pytestmark = pytest.mark.ch10
HEADS, N, D = 1, 32, 32
PROBLEM = (HEADS, N, N, D, D, False)   # as uopc.nn.flash keys it: heads, nq, nk, d, dv, causal
CANDIDATES = [FlashVecOpts(rows=2, kvec=1, dchunk=1), FlashVecOpts(rows=4, kvec=2, dchunk=2),
              FlashVecOpts(rows=8, kvec=1, dchunk=2)]
HEURISTIC = CANDIDATES[0]


def not_the_table(folder, names) -> list[str]:
  return [n for n in names if n.endswith(".json")]   # tuned.json and its temporary .tuned-<pid>.json


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
  """The kernels this module's tests compiled (the same few candidates, each a few seconds of compiling)."""
  return tmp_path_factory.mktemp("tune_kernels")


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch, compiled):
  """A cache directory of the test's own (runtime.cache_dir reads UOPC_CACHE_DIR on every call) with no tuned.json:
  the kernels the module's earlier tests compiled are copied in, and the ones this test compiles copied back."""
  monkeypatch.setenv("UOPC_CACHE_DIR", str(tmp_path / "cache"))
  shutil.copytree(compiled, tmp_path / "cache", ignore=not_the_table)
  yield tmp_path / "cache"
  shutil.copytree(tmp_path / "cache", compiled, ignore=not_the_table, dirs_exist_ok=True,
                  copy_function=lambda src, dst: Path(dst).exists() or shutil.copy2(src, dst))


def flash_timer(opts: FlashVecOpts):
  """What a kernel's tuner passes: compile the kernel with opts, return a function that runs it once."""
  prog = Program(render_c(flash_vector_ir(HEADS, N, N, D, opts), "tune_flash"), "tune_flash", opts.compile.flags)
  rng = np.random.default_rng(0)
  q, kt, v = (rng.standard_normal(HEADS * N * D).astype(np.float32) for _ in range(3))
  out = np.zeros(HEADS * N * D, np.float32)
  return lambda: prog(q, kt, v, out)


def never_timed(opts):
  pytest.fail(f"BEAM=0 must not time anything (asked to time {opts})")


def write_table(table: dict) -> None:
  tune.tuned_path().parent.mkdir(parents=True, exist_ok=True)
  tune.tuned_path().write_text(json.dumps(table))


def entry(opts) -> dict: return {"opts": dataclasses.asdict(opts), "seconds": 1e-3, "date": "2025-01-01"}


def test_beam_0_without_a_cache_is_the_heuristic():
  with Context(BEAM=0):
    assert tune.choose("flash_vec", PROBLEM, CANDIDATES, HEURISTIC, never_timed) is HEURISTIC
  assert not tune.tuned_path().exists()   # nothing searched, nothing written


def test_a_search_caches_its_winner_for_later_runs(cache):
  with Context(BEAM=1):
    best = tune.choose("flash_vec", PROBLEM, CANDIDATES, HEURISTIC, flash_timer)
  assert best in CANDIDATES and tune.tuned_path().parent == cache
  table = json.loads(tune.tuned_path().read_text())
  (key, saved), = table.items()
  assert key == tune.entry_key("flash_vec", PROBLEM) and key.endswith(tune.machine_key())
  assert saved["opts"] == dataclasses.asdict(best) and 0 < saved["seconds"] < 1
  with Context(BEAM=0):   # a later run: the cached winner, nothing timed
    assert tune.choose("flash_vec", PROBLEM, CANDIDATES, HEURISTIC, never_timed) is best
    other = (HEADS, N, N, D, D, True)   # another problem has no entry
    assert tune.choose("flash_vec", other, CANDIDATES, HEURISTIC, never_timed) is HEURISTIC


def test_the_fastest_candidate_wins():
  """A fake timer here decides only which candidate is fastest (each sleeps for its own time); the other tests time
  compiled kernels."""
  delays = {CANDIDATES[0]: 4e-3, CANDIDATES[1]: 0.5e-3, CANDIDATES[2]: 2e-3}
  timer = lambda opts: (lambda: time.sleep(delays[opts]))
  assert tune.choose("sleepy", (1,), CANDIDATES, HEURISTIC, timer, beam=2) is CANDIDATES[1]
  assert tune.choose("sleepy", (1,), CANDIDATES, HEURISTIC, never_timed, beam=0) is CANDIDATES[1]


def test_a_cached_winner_that_is_no_longer_a_candidate_is_ignored():
  gone = FlashVecOpts(rows=7, kvec=3, dchunk=1)   # say the candidate list changed since it won
  write_table({tune.entry_key("flash_vec", PROBLEM): entry(gone)})
  assert tune.choose("flash_vec", PROBLEM, CANDIDATES, HEURISTIC, never_timed, beam=0) is HEURISTIC
  write_table({tune.entry_key("flash_vec", PROBLEM): entry(CANDIDATES[2])})
  assert tune.choose("flash_vec", PROBLEM, CANDIDATES, HEURISTIC, never_timed, beam=0) is CANDIDATES[2]


DAMAGE = ["{not json", "\x00\xff garbage", "", "[1, 2]", "null", '{"%KEY%": "oops"}', '{"%KEY%": {"seconds": 1}}',
          '{"%KEY%": {"opts": 3}}']


def damage_cache(text: str) -> None:
  path = tune.tuned_path()
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(text.replace("%KEY%", tune.entry_key("flash_vec", PROBLEM)).encode("latin-1"))   # \xff: not UTF-8


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_cache_is_treated_as_empty(damage):
  damage_cache(damage)
  # a damaged file is said as a warning, which the test takes (not seven left at the end of the student's make test)
  with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    assert tune.choose("flash_vec", PROBLEM, CANDIDATES, HEURISTIC, never_timed, beam=0) is HEURISTIC
  assert all("uopc: ignoring the damaged tuning cache" in str(w.message) for w in seen), [str(w.message) for w in seen]


@pytest.mark.parametrize("damage", [DAMAGE[0], DAMAGE[3]])
def test_a_search_replaces_a_damaged_cache(damage):
  damage_cache(damage)
  with pytest.warns(RuntimeWarning, match="uopc: ignoring the damaged tuning cache"):
    best = tune.choose("flash_vec", PROBLEM, CANDIDATES[1:2], HEURISTIC, flash_timer, beam=1)
  table = json.loads(tune.tuned_path().read_text())
  assert list(table) == [tune.entry_key("flash_vec", PROBLEM)] and table[tune.entry_key("flash_vec", PROBLEM)]["opts"] \
    == dataclasses.asdict(best)
  assert tune.choose("flash_vec", PROBLEM, CANDIDATES, HEURISTIC, never_timed, beam=0) is best


def test_a_winner_on_another_machine_is_not_used(monkeypatch):
  here = tune.entry_key("flash_vec", PROBLEM)
  elsewhere = here.removesuffix(tune.machine_key()) + "0123456789abcdef"
  write_table({elsewhere: entry(CANDIDATES[1])})
  assert tune.choose("flash_vec", PROBLEM, CANDIDATES, HEURISTIC, never_timed, beam=0) is HEURISTIC
  # and the key follows the machine: the same table read on another CPU does not match
  write_table({here: entry(CANDIDATES[1])})
  assert tune.choose("flash_vec", PROBLEM, CANDIDATES, HEURISTIC, never_timed, beam=0) is CANDIDATES[1]
  monkeypatch.setattr(tune, "machine_id", lambda: "x86_64|Linux|model name : another CPU")
  assert tune.machine_key() not in here
  assert tune.choose("flash_vec", PROBLEM, CANDIDATES, HEURISTIC, never_timed, beam=0) is HEURISTIC


@dataclasses.dataclass(frozen=True)
class TileOpts:
  tile: tuple[int, int]
  unroll: bool = False


def test_opts_holding_a_tuple_are_found_again():
  """JSON has no tuples: tuned.json holds [4, 8] where the opts hold (4, 8)."""
  candidates = [TileOpts((4, 8)), TileOpts((8, 8))]
  write_table({tune.entry_key("tiles", (1,)): entry(candidates[1])})
  assert tune.choose("tiles", (1,), candidates, candidates[0], never_timed, beam=0) is candidates[1]


class Terminal(io.StringIO):
  def isatty(self) -> bool: return True


def test_a_search_prints_its_progress_on_a_terminal(monkeypatch):
  monkeypatch.setattr(sys, "stderr", Terminal())
  tune.choose("flash_vec", PROBLEM, CANDIDATES[:2], HEURISTIC, flash_timer, beam=1)
  err = sys.stderr.getvalue()
  for part in ("tune flash_vec (1, 32, 32, 32, 32, False)", "\r", "1/2 candidates", "2/2 candidates",
               "chose FlashVecOpts("):
    assert part in err
  assert err.endswith(" ms)\n")   # the result line is whole and ended, however long the opts' repr


def test_a_search_elsewhere_writes_its_result_alone(capsys):
  """Not a terminal (a notebook, a log): no carriage returns to store, one line, the result (issue 49, item 5)."""
  tune.choose("flash_vec", PROBLEM, CANDIDATES[:2], HEURISTIC, flash_timer, beam=1)
  out, err = capsys.readouterr()
  assert out == "" and "\r" not in err and err.count("\n") == 1
  assert err.startswith("tune flash_vec (1, 32, 32, 32, 32, False): 2 candidates, chose FlashVecOpts(")


def test_the_printed_time_is_the_winners_second_timing(monkeypatch, capsys):
  """A fake clock that only the candidates move: B is fastest in the first pass (2 ms), A when timed again (1 ms).
  The winner is A, and the time returned and printed is A's second timing, not the first pass's 2 ms."""
  clock = [0.0]
  durations = {"A": [0, 3, 3] + [1] * 5, "B": [0, 2, 2] + [4] * 5, "C": [0, 5, 5]}   # ms: warm-up, 2 runs, 5 runs
  def timer(name):
    def run(): clock[0] += durations[name].pop(0) / 1e3
    return run
  monkeypatch.setattr(tune.time, "perf_counter", lambda: clock[0])
  winner, seconds = tune.search("fake", (1,), ["A", "B", "C"], timer, beam=2)
  _, err = capsys.readouterr()
  assert winner == "A" and seconds == pytest.approx(1e-3)
  assert err.strip().endswith("chose A (1.000 ms)") and "2.000" not in err


def test_a_search_needs_candidates():
  with pytest.raises(ValueError, match="tune flash_vec: no candidate"):
    tune.choose("flash_vec", PROBLEM, [], HEURISTIC, never_timed, beam=1)


def test_a_deeply_nested_cache_is_ignored_with_one_warning():
  """json.loads raises RecursionError (not a ValueError) on [[[[...]]]] nested past the interpreter's limit: every
  BEAM=0 choice, so every CPU scaled_dot_product_attention, failed with it (issue 30, item 5)."""
  damage_cache('{"%KEY%": ' + "[" * 200_000 + "]" * 200_000 + "}")
  with pytest.warns(RuntimeWarning, match="damaged tuning cache.*tuned.json"):
    assert tune.choose("flash_vec", PROBLEM, CANDIDATES, HEURISTIC, never_timed, beam=0) is HEURISTIC
  import warnings
  with warnings.catch_warnings():
    warnings.simplefilter("error")     # once per file: the second read is quiet
    assert tune.choose("flash_vec", PROBLEM, CANDIDATES, HEURISTIC, never_timed, beam=0) is HEURISTIC


def test_attention_runs_past_a_deeply_nested_cache():
  from uopc.nn.attention import scaled_dot_product_attention
  from uopc.nn import flash
  from uopc.tensor import Tensor
  flash._chosen.clear()
  damage_cache("[" * 200_000 + "]" * 200_000)
  rng = np.random.default_rng(5)
  q, k, v = (rng.standard_normal((1, 2, 16, 32)).astype(np.float32) for _ in range(3))
  assert flash.fits(32, 32)   # the vector kernels, the path that asks the tuner
  with pytest.warns(RuntimeWarning, match="damaged tuning cache"):
    out = scaled_dot_product_attention(Tensor(q), Tensor(k), Tensor(v), splits=1).numpy()
  s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k) / np.sqrt(32)
  p = np.exp(s - s.max(-1, keepdims=True))
  np.testing.assert_allclose(out, (p / p.sum(-1, keepdims=True)) @ v, rtol=1e-4, atol=1e-5)

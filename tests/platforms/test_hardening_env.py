"""The environment: a pinned lock file that `make setup` installs, and environment variables that are parsed safely."""
import os
import re
import subprocess
import sys
from importlib.metadata import requires
from pathlib import Path
import pytest
from packaging.requirements import Requirement
from uopc.helpers import getenv, omp_threads

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import check_lock  # noqa: E402


def locked() -> dict[str, list[str]]:
  """requirements.lock as {name: [its `name==version ; marker \\ --hash ...` entries]}."""
  entries: dict[str, list[str]] = {}
  for block in re.split(r"\n(?=\S)", (ROOT / "requirements.lock").read_text()):
    if block.startswith("#") or not block.strip(): continue
    name = re.split(r"[=;\s]", block, maxsplit=1)[0].lower().replace("_", "-")
    entries.setdefault(name, []).append(block)
  return entries


def test_lock_pins_every_requirement_with_exact_versions_and_hashes():
  lock = locked()
  for name, blocks in lock.items():
    for b in blocks:
      assert re.match(r"^[\w.-]+==[\w.+!-]+( ;|\s*\\)", b), b.splitlines()[0]
      assert "--hash=sha256:" in b, f"{name} has no hash"
  wanted = [Requirement(r) for r in requires("uopc")]   # pyproject.toml's, as `make setup` last installed it
  missing = [str(r) for r in wanted if r.name.lower().replace("_", "-") not in lock]
  assert not missing, f"in pyproject.toml but not in requirements.lock (run `make lock`): {missing}"


def test_installed_environment_satisfies_pyproject():
  assert check_lock.unmet() == []


def test_setup_and_environment_yml_install_the_lock():
  make = (ROOT / "Makefile").read_text()
  assert "--require-hashes -r $(LOCK)" in make and "--no-deps --no-build-isolation -e ." in make
  assert "-r requirements.lock" in (ROOT / "environment.yml").read_text()


def run_with_env(code: str, **env: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-c", code], env={**os.environ, "OMP_NUM_THREADS": "1", **env},
                        capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("value, level", [("true", 1), ("", 0), ("off", 0), (" 2 ", 2)])
def test_debug_spelled_as_a_word_or_empty_imports(value, level):
  r = run_with_env("import uopc.tensor; from uopc.helpers import DEBUG; print(DEBUG.value)", DEBUG=value)
  assert r.returncode == 0 and r.stdout.split() == [str(level)], r.stderr


def test_debug_that_is_not_a_number_names_the_variable(monkeypatch):
  monkeypatch.setenv("DEBUG", "loud")
  with pytest.raises(ValueError, match="DEBUG='loud'"): getenv("DEBUG", 0)


@pytest.mark.parametrize("value, threads", [("4,2", 4), (" 3 ", 3), ("", None), ("0", None), ("many", None)])
def test_omp_num_threads_list_is_read_like_openmp(monkeypatch, value, threads):
  monkeypatch.setenv("OMP_NUM_THREADS", value)
  assert omp_threads() == (threads or len(os.sched_getaffinity(0)))


def test_attention_runs_with_a_nested_omp_num_threads():
  code = """if 1:
    import numpy as np
    from uopc.nn import scaled_dot_product_attention
    q = np.random.default_rng(0).standard_normal((2, 8, 16)).astype(np.float32)
    s = q @ q.transpose(0, 2, 1) / 4; p = np.exp(s - s.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
    print(np.abs(scaled_dot_product_attention(q, q, q).numpy() - p @ q).max() < 1e-5)"""
  r = run_with_env(code, OMP_NUM_THREADS="4,2")
  assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr

"""`make setup`'s choice of Python (scripts/find_python.sh), run with a PATH made for each case from pyenv's Pythons.

A Mac's xcode python3 is 3.9 and Ubuntu 22.04's is 3.10: there `make setup` must stop before creating .venv, naming
3.11 and the command that installs it on that system; where a python3.12 is on PATH it must use that one; and a .venv
of a Python below 3.11, left by an earlier setup, must be replaced rather than reused.
"""
from __future__ import annotations
import os
import shutil
import subprocess
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[2]
PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"


def pyenv_python(minor: int) -> Path | None:
  found = sorted(PYENV.glob(f"3.{minor}.*/bin/python3.{minor}"))
  return found[-1] if found else None


PY39, PY312 = pyenv_python(9), pyenv_python(12)
pytestmark = pytest.mark.skipif(PY39 is None or PY312 is None or shutil.which("make") is None,
                                reason="needs pyenv's Python 3.9 and 3.12 (~/.pyenv/versions) and make")


def tree(tmp_path: Path, pythons: dict[str, Path], uname: str | None = None) -> tuple[Path, dict]:
  """A copy of the Makefile and the script, and an environment whose PATH holds only `pythons` and the tools."""
  work, bin_dir = tmp_path / "tree", tmp_path / "bin"
  (work / "scripts").mkdir(parents=True)
  bin_dir.mkdir()
  shutil.copy(ROOT / "Makefile", work / "Makefile")
  shutil.copy(ROOT / "scripts" / "find_python.sh", work / "scripts" / "find_python.sh")
  for name, target in pythons.items(): (bin_dir / name).symlink_to(target)
  for tool in ("sh", "rm", "uname"): (bin_dir / tool).symlink_to(shutil.which(tool))
  if uname:   # another system's uname -s
    (bin_dir / "uname").unlink()
    (bin_dir / "uname").write_text(f"#!/bin/sh\necho {uname}\n")
    (bin_dir / "uname").chmod(0o755)
  env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
  return work, env


def run(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
  return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def venv_version(venv: Path) -> str:
  return subprocess.run([venv / "bin" / "python", "-c", "import sys; print(sys.version_info[:2])"],
                        capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.parametrize("system, os_release, fix", [
  (None, "ID=ubuntu\nVERSION_ID=22.04\n", "sudo apt install python3.11 python3.11-venv"),
  (None, "ID=fedora\nVERSION_ID=38\n", "sudo dnf install python3.12"),
  ("Darwin", "", "brew install python@3.13"),
])
def test_python3_of_3_9_stops_before_creating_anything(tmp_path, system, os_release, fix):
  work, env = tree(tmp_path, {"python3": PY39}, uname=system)
  (tmp_path / "os-release").write_text(os_release)
  env["UOPC_OS_RELEASE"] = str(tmp_path / "os-release")
  r = run([shutil.which("make"), "setup"], work, env)
  assert r.returncode != 0
  assert "uopc needs Python 3.11 or later (found: python3=3.9)" in r.stderr, r.stderr
  assert fix in r.stderr, r.stderr
  assert "make setup PYTHON=" in r.stderr
  assert not (work / ".venv").exists()


def test_python3_12_on_path_is_chosen_over_python3(tmp_path):
  work, env = tree(tmp_path, {"python3": PY39, "python3.12": PY312})
  r = run(["sh", "scripts/find_python.sh", "--which"], work, env)
  assert r.returncode == 0, r.stderr
  assert r.stdout.strip() == f"{tmp_path / 'bin' / 'python3.12'} (Python 3.12)"


def test_python_names_one_below_3_11(tmp_path):
  work, env = tree(tmp_path, {"python3.12": PY312})
  r = run(["sh", "scripts/find_python.sh", ".venv"], work, {**env, "PYTHON": str(PY39)})
  assert r.returncode == 1
  assert f"PYTHON={PY39} is Python 3.9; uopc needs Python 3.11 or later" in r.stderr
  assert not (work / ".venv").exists()


def test_a_3_9_venv_left_behind_is_replaced(tmp_path):
  work, env = tree(tmp_path, {"python3": PY39, "python3.12": PY312})
  subprocess.run([PY39, "-m", "venv", "--without-pip", work / ".venv"], check=True)
  assert venv_version(work / ".venv") == "(3, 9)"
  r = run(["sh", "scripts/find_python.sh", ".venv"], work, env)
  assert r.returncode == 0, r.stderr
  assert "replacing .venv: it is Python 3.9, below 3.11" in r.stderr
  assert f"making .venv with {tmp_path / 'bin' / 'python3.12'} (Python 3.12)" in r.stdout
  assert venv_version(work / ".venv") == "(3, 12)"
  again = run(["sh", "scripts/find_python.sh", ".venv"], work, env)   # a good one is kept, silently
  assert (again.returncode, again.stdout, again.stderr) == (0, "", "")

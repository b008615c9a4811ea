"""The environment: a pinned lock file that `make setup` installs, and environment variables that are parsed safely."""
import re
import sys
from importlib.metadata import requires
from pathlib import Path
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
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

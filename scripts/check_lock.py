"""Fail when the installed packages do not satisfy pyproject.toml's requirements (dev extra included).

`make setup` installs requirements.lock and then uopc with --no-deps, so nothing else notices a dependency that was
added to pyproject.toml without `make lock`; `pip check` ignores extras. An environment left without some packages on
purpose names them in UOPC_WITHOUT (scripts/nodevice_check.sh: the device packages, as a Mac lacks them).
"""
import os
import sys
from importlib.metadata import PackageNotFoundError, requires, version
from packaging.requirements import Requirement


def unmet(dist: str = "uopc", extra: str = "dev") -> list[str]:
  out, without = [], set(os.environ.get("UOPC_WITHOUT", "").split())
  for r in map(Requirement, requires(dist) or []):
    if r.marker is not None and not r.marker.evaluate({"extra": extra}): continue
    if r.name in without: continue
    try: have = version(r.name)
    except PackageNotFoundError: out.append(f"{r} (not installed)"); continue
    if not r.specifier.contains(have, prereleases=True): out.append(f"{r} (installed {have})")
  return out


if __name__ == "__main__":
  if bad := unmet():
    sys.exit("requirements.lock is out of date with pyproject.toml, run `make lock`; unmet: " + ", ".join(bad))

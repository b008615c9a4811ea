"""Would `make setup` install on every student's machine? Resolve requirements.lock for each platform and Python.

Two questions per cell (platform x Python), asked without that machine:
  1. does the lock resolve there from wheels only? `uv pip install --dry-run --require-hashes --only-binary :all:
     --python-platform P --python-version V`, as `make setup`'s pip would install it. Where a package has no wheel,
     its requirement is left out and the cell resolved again, so the table names every such package;
  2. is each wheel it would install pinned by the lock? For every package of that resolution, the registry's file
     list (the JSON simple index uv reads, PEP 691) must hold a wheel for that platform and Python whose sha256 is
     one of the package's hashes in the lock (uv's dry run does not download, so it checks no hash itself).

  python scripts/platform_check.py [--lock requirements.lock] [--python 3.11 ...] [--platform "macOS arm64" ...]

Prints a table (platform x Python -> ok, or what is missing) and exits 1 unless every cell is ok. It needs the
package registry. Windows is resolution only: uopc is not supported on native Windows (README, "Install").
"""
from __future__ import annotations
import argparse, json, os, re, shutil, subprocess, sys, tempfile, urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from packaging import tags
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename

ROOT = Path(__file__).resolve().parent.parent
INDEX = os.environ.get("UV_DEFAULT_INDEX", "https://pypi.org/simple").rstrip("/")
# a student's machine -> uv's name for it (`--python-platform`) and the wheel platform tags it installs, as uv assumes
# them: glibc 2.28 on Linux, macOS 13 (the oldest macOS Apple still updates)
_linux = lambda arch, legacy: [f"manylinux_2_{m}_{arch}" for m in range(28, 4, -1)] + [f"{t}_{arch}" for t in legacy]
PLATFORMS = {
  "Linux x86-64": ("x86_64-unknown-linux-gnu", _linux("x86_64", ["manylinux2014", "manylinux2010", "manylinux1"])),
  "Linux ARM64": ("aarch64-unknown-linux-gnu", _linux("aarch64", ["manylinux2014"])),
  "macOS arm64": ("aarch64-apple-darwin", list(tags.mac_platforms((13, 0), "arm64"))),
  "macOS x86-64": ("x86_64-apple-darwin", list(tags.mac_platforms((13, 0), "x86_64"))),
  "Windows x86-64": ("x86_64-pc-windows-msvc", ["win_amd64"]),
}
PYTHONS = ("3.11", "3.12", "3.13")
# (platform, package) that may be built from its sdist (whose hash is in the lock too): pip builds it there with the
# machine's C compiler. jupyter-server's argon2 bindings publish no wheel for Intel Macs.
SDIST_OK = {("macOS x86-64", "argon2-cffi-bindings")}
# uv's explanations when a pinned package cannot be installed from a wheel
NO_WHEEL = [re.compile(r"Because ([A-Za-z0-9_.-]+)==\S+ has no wheels with a matching platform tag"),
            re.compile(r"Because ([A-Za-z0-9_.-]+)==\S+ has no usable wheels")]


# ---- the lock file: one block per requirement ----
def blocks(lock_text: str) -> list[str]:
  """The lock's requirements, one block each: the `name==version ; marker \\` line, its hash lines, its comments."""
  return re.split(r"\n(?=[A-Za-z])", lock_text)


def block_name(block: str) -> str:
  """The package a block pins ('' for the lock's opening comment)."""
  m = re.match(r"([A-Za-z0-9][A-Za-z0-9_.-]*)\s*(==|;|\[)", block)
  return canonicalize_name(m.group(1)) if m else ""


def without(lock_text: str, names: set[str]) -> str:
  """The lock with these packages' requirements left out (to find what else a platform lacks)."""
  return "\n".join(b for b in blocks(lock_text) if block_name(b) not in names)


def lock_hashes(lock_text: str) -> dict[tuple[str, str], set[str]]:
  """(package, version) -> the sha256 hashes the lock allows for it."""
  out: dict[tuple[str, str], set[str]] = {}
  for b in blocks(lock_text):
    if m := re.match(r"([A-Za-z0-9][A-Za-z0-9_.-]*)==([^\s;\\]+)", b):
      out.setdefault((canonicalize_name(m.group(1)), m.group(2)), set()).update(re.findall(r"sha256:([0-9a-f]{64})", b))
  return out


# ---- 1. resolution by uv ----
def uv() -> str:
  """uv from the virtual environment (`make setup` installs the pinned one), else the one on PATH."""
  here = Path(sys.executable).parent / "uv"
  if here.exists(): return str(here)
  if found := shutil.which("uv"): return found
  sys.exit("platform_check: uv is not installed (it is in requirements.lock: run `make setup`)")


def no_wheel(uv_output: str) -> str | None:
  """The package uv says has no wheel for the platform, or None when the failure is something else."""
  for pattern in NO_WHEEL:
    if m := pattern.search(uv_output): return canonicalize_name(m.group(1))
  return None


def dry_run(lock_text: str, target: str, python: str, sdist: set[str]) -> subprocess.CompletedProcess:
  """uv installing the lock for (target, python) without doing it: wheels only, except for the packages in sdist."""
  with tempfile.TemporaryDirectory() as tmp:
    lock = Path(tmp) / "requirements.txt"
    lock.write_text(lock_text)
    if sdist:   # wheels only for every package but these
      binary = [a for b in blocks(lock_text) if (n := block_name(b)) and n not in sdist for a in ("--only-binary", n)]
    else: binary = ["--only-binary", ":all:"]
    cmd = [uv(), "pip", "install", "--dry-run", "--require-hashes", *binary, "-r", str(lock),
           "--python-platform", target, "--python-version", python, "--target", str(Path(tmp) / "target")]
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"}, cwd=tmp)


def resolve(lock_text: str, platform: str, python: str) -> dict:
  """{'installs': {(name, version)}, 'missing': [names], 'sdist': {names}} or {'error': first line of uv's error}."""
  missing: list[str] = []
  sdist: set[str] = set()
  text = lock_text
  while True:
    r = dry_run(text, PLATFORMS[platform][0], python, sdist)
    out = r.stdout + r.stderr
    if r.returncode == 0:
      installs = {(canonicalize_name(n), v) for n, v in re.findall(r"^ \+ ([A-Za-z0-9_.-]+)==(\S+)", out, re.M)}
      return {"installs": installs, "missing": missing, "sdist": sdist}
    name = no_wheel(out)
    if name is None or name in missing or name in sdist:
      lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
      return {"error": next((ln for ln in lines if ln.startswith(("error", "cause"))), lines[-1] if lines else "?")}
    if (platform, name) in SDIST_OK: sdist.add(name)
    else: missing.append(name); text = without(text, {name})


# ---- 2. the wheels' hashes against the registry's file list ----
def index_files(name: str) -> list[dict]:
  """Every file the registry has for a package: [{'filename', 'hashes': {'sha256'}, ...}] (PEP 691 JSON)."""
  req = urllib.request.Request(f"{INDEX}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
  with urllib.request.urlopen(req, timeout=60) as f: return json.load(f)["files"]


def file_version(filename: str) -> tuple[str, object]:
  """('wheel', (version, tags)) or ('sdist', version), or ('other', None) for an egg or an unparsable name."""
  try:
    if filename.endswith(".whl"):
      _, version, _, ftags = parse_wheel_filename(filename)
      return "wheel", (str(version), ftags)
    if filename.endswith((".tar.gz", ".zip")): return "sdist", str(parse_sdist_filename(filename)[1])
  except ValueError: pass
  return "other", None


def target_tags(platform: str, python: str) -> set[tags.Tag]:
  """The wheel tags a CPython `python` on `platform` installs (cp3X, abi3, pure Python)."""
  version, plats = tuple(map(int, python.split("."))), PLATFORMS[platform][1]
  return set(tags.cpython_tags(version, platforms=plats)) | set(tags.compatible_tags(version, platforms=plats))


def audit(name: str, version: str, files: list[dict], allowed: set[str], want: set[tags.Tag], sdist_ok: bool) -> str:
  """'' when a file that installs here is pinned by the lock, else why not."""
  wheels, sdists = [], []
  for f in files:
    kind, info = file_version(f["filename"])
    sha = f.get("hashes", {}).get("sha256")
    if kind == "wheel" and info[0] == version and info[1] & want: wheels.append(sha)
    elif kind == "sdist" and info == version: sdists.append(sha)
  if any(h in allowed for h in wheels): return ""
  if sdist_ok and any(h in allowed for h in sdists): return ""
  if wheels or (sdist_ok and sdists): return f"hash not in the lock: {name}"
  return f"no wheel: {name}"


def check_cell(resolution: dict, lock: dict, files: dict, platform: str, python: str) -> str:
  """'ok', 'ok (P from its sdist)', 'no wheel: P, Q', 'hash not in the lock: P' or 'error: ...'."""
  if "error" in resolution: return "error: " + resolution["error"]
  want = target_tags(platform, python)
  problems = [f"no wheel: {n}" for n in resolution["missing"]]
  for name, version in sorted(resolution["installs"]):
    if isinstance(files.get(name), Exception): problems.append(f"registry: {name}: {files[name]}"); continue
    why = audit(name, version, files[name], lock.get((name, version), set()), want, name in resolution["sdist"])
    if why: problems.append(why)
  if problems:   # "no wheel: P, Q; hash not in the lock: R"
    kinds: dict[str, list[str]] = {}
    for why in problems: kinds.setdefault(why.split(": ")[0], []).append(why.split(": ", 1)[1])
    return "; ".join(f"{k}: {', '.join(v)}" for k, v in kinds.items())
  return "ok" + (f" ({', '.join(sorted(resolution['sdist']))} from its sdist)" if resolution["sdist"] else "")


def table(results: dict[tuple[str, str], str], platforms: list[str], pythons: list[str]) -> str:
  """A Markdown table: one row per platform, one column per Python."""
  rows = [["platform", *(f"Python {v}" for v in pythons)], ["---"] * (len(pythons) + 1)]
  rows += [[label, *(results[(label, v)] for v in pythons)] for label in platforms]
  return "\n".join("| " + " | ".join(r) + " |" for r in rows)


def run(lock_text: str, platforms: list[str], pythons: list[str]) -> dict[tuple[str, str], str]:
  cells = [(p, v) for p in platforms for v in pythons]
  lock = lock_hashes(lock_text)

  def fetch(name):
    try: return index_files(name)
    except Exception as e: return e   # reported in the cells that install it
  with ThreadPoolExecutor(8) as ex:   # uv and the registry do the work; these threads only wait on them
    resolutions = dict(zip(cells, ex.map(lambda c: resolve(lock_text, *c), cells)))
    names = sorted({n for r in resolutions.values() for n, _ in r.get("installs", ())})
    files = dict(zip(names, ex.map(fetch, names)))
  return {c: check_cell(resolutions[c], lock, files, *c) for c in cells}


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--lock", type=Path, default=ROOT / "requirements.lock")
  ap.add_argument("--python", action="append", choices=PYTHONS, help="only this Python (repeatable)")
  ap.add_argument("--platform", action="append", choices=list(PLATFORMS), help="only this platform (repeatable)")
  args = ap.parse_args(argv)
  platforms, pythons = args.platform or list(PLATFORMS), args.python or list(PYTHONS)
  results = run(args.lock.read_text(), platforms, pythons)
  print(f"{args.lock.name} for each platform and Python: resolved by uv from wheels only, each wheel's hash in the "
        f"lock ({INDEX})\n")
  print(table(results, platforms, pythons))
  bad = [c for c, r in results.items() if not r.startswith("ok")]
  print(f"\n{len(results) - len(bad)} of {len(results)} cells install" +
        ("" if not bad else "; not: " + "; ".join(f"{p} {v}" for p, v in bad)))
  return 1 if bad else 0


if __name__ == "__main__":
  sys.exit(main())

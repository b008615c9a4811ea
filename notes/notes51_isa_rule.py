"""NOTES 51: which tests render different C at a lower x86 level? The rule CI uses (tests/conftest.py, marker `isa`)
checked by running: every kernel source uopc hands the compiler (uopc.runtime.build.locate) is recorded per test, once
at this machine's own level and once at UOPC_MARCH=LEVEL, and the tests whose sources differ are listed.

  python notes/notes51_isa_rule.py x86-64-v2 [pytest selection...]   (default: the wings that render kernels, every
                                                                        test; the ones marked isa are counted apart)
As a pytest plugin (-p notes51_isa_rule, with notes/ on PYTHONPATH) it writes the record to $NOTES51_RECORD.
"""
from __future__ import annotations
import hashlib, json, os, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_record: dict[str, list[str]] = {}
_current = [""]


def pytest_configure(config):
  import uopc.runtime.build as build
  original = build.locate
  def locate(src, *args, **kw):
    _record.setdefault(_current[0], []).append(hashlib.sha1(src.encode()).hexdigest()[:12])
    return original(src, *args, **kw)
  build.locate = locate
  for mod in list(sys.modules.values()):   # the modules that imported it by name already
    if getattr(mod, "locate", None) is original and getattr(mod, "__name__", "").startswith("uopc."):
      mod.locate = locate


def pytest_runtest_setup(item):
  _current[0] = item.nodeid
  item.config._notes51_isa = getattr(item.config, "_notes51_isa", set())
  if item.get_closest_marker("isa"): item.config._notes51_isa.add(item.nodeid)


def pytest_unconfigure(config):
  out = os.environ.get("NOTES51_RECORD")
  if out: Path(out).write_text(json.dumps({"sources": {k: sorted(set(v)) for k, v in _record.items()},
                                          "isa": sorted(getattr(config, "_notes51_isa", set()))}))


def run(level: str | None, selection: list[str], out: Path) -> dict:
  env = {**os.environ, "NOTES51_RECORD": str(out), "OMP_NUM_THREADS": "1",
         "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "notes"), os.environ.get("PYTHONPATH")]))}
  if level: env["UOPC_MARCH"] = level
  subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "notes51_isa_rule",
                  *selection], cwd=ROOT, env=env)
  return json.loads(out.read_text())


if __name__ == "__main__":
  level, selection = sys.argv[1], sys.argv[2:] or ["tests/spine", "tests/runtime", "tests/codegen", "tests/semantics",
                                                    "tests/nn"]
  native = run(None, selection, Path("/tmp/notes51_native.json"))
  lower = run(level, selection, Path("/tmp/notes51_lower.json"))
  isa = set(native["isa"])
  tests = sorted(set(native["sources"]) | set(lower["sources"]))
  differ = [t for t in tests if native["sources"].get(t) != lower["sources"].get(t)]
  compiled = [t for t in tests if native["sources"].get(t)]
  print(f"{len(compiled)} tests compiled kernels; at {level} the C differs in {len(differ)}: "
        f"{sum(t in isa for t in differ)} marked isa, {sum(t not in isa for t in differ)} not")
  for t in differ:
    if t not in isa: print("  not marked isa, C differs:", t)

"""Runs inside the sandbox (sandbox.py): the student's notebook in a Jupyter kernel, then the probe of every hidden
test, each recording its values into /job/out/records/<test>/ (probe.py). What it writes, /job/out/result.json, is
read by the grader as untrusted data: the student's code runs as the same UID and may have rewritten it.

The plan arrives on stdin (the student's cells, the probes, the seed, the time limits), so no file in the sandbox
holds the probes or the seed while the student's cells run, and the process makes itself non-dumpable so that its
memory cannot be read through /proc.
"""
from __future__ import annotations
import ctypes
import json
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path
from kernel import Kernel, Outcome

OUT = Path("/job/out")
SEED_CACHE = Path("/seed")   # read-only: what the assignment's own run left in ~/.cache (kernels, PoCL's builds)
CACHE = Path.home() / ".cache"
MAX_REPLAYS = 2          # fresh kernels to replay the student's cells in, after a probe killed the kernel
PR_SET_DUMPABLE = 4


BEFORE = ("import importlib.util as _ilu\n"   # the probe's library, from /grader, before any cell of the student's
          "def _grader_load(name):\n"
          "  spec = _ilu.spec_from_file_location(name, f'/grader/{name}.py')\n"
          "  module = _ilu.module_from_spec(spec); spec.loader.exec_module(module); return module\n"
          "import sys as _sys; _sys.modules['graphs'] = _grader_load('graphs')\n"
          "_grader_records = _grader_load('records')\n"
          "_sys.modules['records'] = _grader_records\n"
          "_grader_probe = _grader_load('probe')\n"
          "del _sys.modules['records'], _sys.modules['graphs']\n")


def setup_source(seed: int) -> str:
  """The cell that defines record/raised/seeded in the student's namespace, sent after the student's cells, from the
  library loaded before them (BEFORE): a `probe` or `records` the notebook put into sys.modules or its folder is not
  the one used."""
  return (f"SEED = {seed}\n_probe = _grader_probe.Probe('{OUT}/records', SEED)\n"
          f"record, raised, seeded = _probe.record, _probe.raised, _probe.seeded\n")


def main() -> int:
  plan = json.loads(sys.stdin.read())
  try: ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
  except Exception: pass   # not Linux: the sandbox cannot be made there anyway
  result = {"cells": {}, "restarts": 0, "probes": [], "note": "", "phases": {}}
  clock = [time.perf_counter()]

  def lap(name: str) -> None:   # seconds per phase, for the report's breakdown (the grader reads them as untrusted)
    now = time.perf_counter()
    result["phases"][name] = result["phases"].get(name, 0.0) + now - clock[0]
    clock[0] = now

  def save():   # whole or not at all: the grader may find it after a kill at any moment
    (OUT / "result.tmp").write_text(json.dumps(result))
    (OUT / "result.tmp").replace(OUT / "result.json")
  if SEED_CACHE.is_dir():   # a private copy; what cannot be copied is compiled again
    try: shutil.copytree(SEED_CACHE, CACHE, symlinks=False, dirs_exist_ok=True)
    except (OSError, shutil.Error): pass
  lap("seed_copy")
  kernel = Kernel(Path(plan["cwd"]), plan["timeout"], plan["budget"], [setup_source(plan["seed"])],
                  setup_timeout=plan["test_timeout"], before=[BEFORE])
  try:
    kernel.start()
    lap("kernel_start")
    if not kernel.run_student([tuple(c) for c in plan["cells"]]):   # a fresh kernel replaying them would too
      kernel.close()
      kernel.session = None
      result["note"] = "the kernel stopped answering after the student's cells: no test could run"
  except Exception as e:   # no kernel could be started: every probe is not run
    result["note"] = f"no kernel: {type(e).__name__}: {e}"[:600]
    kernel.session = None
  lap("student_cells")
  result["cells"], result["restarts"] = kernel.cells, kernel.restarts
  if kernel.setup_error and not result["note"]: result["note"] = kernel.setup_error
  save()
  replays = 0
  for k, probe in enumerate(plan["probes"]):
    if kernel.session is None: out = Outcome("skipped", "no kernel")
    else:   # one cell: the values recorded from here on belong to test `test`; `fixture`, the grader's data for it
      fixture = json.dumps(probe.get("fixture"))
      out = kernel.session.run(f"_probe.begin({probe['test']})\nfixture = _grader_records.from_json({fixture!r})\n"
                               f"{probe['source']}", plan["test_timeout"])
      if out.status == "timeout" and not kernel.session.responsive(): out.status = "dead"
    result["probes"].append({"test": probe["test"], **asdict(out)})
    if out.status == "dead" and k < len(plan["probes"]) - 1:
      kernel.close()
      kernel.session = None
      if replays < MAX_REPLAYS:   # a fresh kernel, in the state the student's notebook leaves it
        replays += 1
        try:
          kernel.restart()
          if not kernel.replay(time.perf_counter() + plan["budget"]):   # the student's cells break every kernel
            kernel.close()
            kernel.session = None
            result["note"] = "the kernel stopped answering after the student's cells: the tests left are not run"
        except Exception: kernel.session = None
    result["restarts"] = kernel.restarts
    lap("probes")
    save()
  kernel.close()
  lap("kernel_close")
  seeded = {p.name for p in (SEED_CACHE / "uopc").glob("*.so")}
  result["built"] = sum(1 for p in (CACHE / "uopc").glob("*.so") if p.name not in seeded)   # kernels compiled here
  if plan.get("export_cache") and CACHE.is_dir():   # only for the grader's own run of the assignment (seed_cache)
    try: shutil.copytree(CACHE, OUT / "cache", symlinks=False, ignore_dangling_symlinks=True)
    except (OSError, shutil.Error): pass   # a partial cache is still a cache
  lap("export_cache")
  save()
  return 0


if __name__ == "__main__":
  sys.exit(main())

"""What a solution notebook's hidden-setup cell imports, so that its hidden tests run there as the grader splits them:
`record`, `raised` and `seeded` as in the sandbox (probe.py), `recorded` reading the values back as the judge
does, gradelib's checks, and `time_kernels`, `run_c`, `launch_cl`, `peak_memory` for the judges (outside.py; here run at
once and without a sandbox, the solution being trusted code; `peak_memory` takes the definitions of the cells run so
far). Each cell records into a fresh folder (an IPython pre_run_cell hook), so a judge never reads a value an earlier
test recorded. The grader runs the same hidden-setup cell in its own process to define the judges' helpers, and then
replaces SEED, seeded, recorded and the outside.py functions with its own."""
from __future__ import annotations
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # scripts/, for gradelib
import gradelib  # noqa: E402
import outside  # noqa: E402
import probe  # noqa: E402

SEED = 0   # the notebook's inputs; the grader draws its own seed for every grading
_probe = probe.Probe(Path(tempfile.gettempdir()) / f"uopc-probe-{uuid.uuid4().hex}", SEED)   # made on first record
record, raised, seeded, recorded = _probe.record, _probe.raised, _probe.seeded, probe.Live(_probe)
_batch = outside.Batch(None)   # the grader's own: jobs in a sandbox, asked for by its judges
time_kernels, run_c, launch_cl = _batch.time_kernels, _batch.run_c, _batch.launch_cl

try: from IPython import get_ipython
except ImportError: get_ipython = lambda: None
if (_ipython := get_ipython()) is not None:   # in a notebook's kernel; None in the grader's process
  _ipython.events.register("pre_run_cell", lambda *args: _probe.begin(_probe.test + 1))


def peak_memory(fn: str, inputs: list, kwargs: dict | None = None) -> dict:
  """outside.Batch.peak_memory on the definitions of the notebook's cells run so far."""
  cells = _ipython.user_ns.get("In", []) if _ipython is not None else []
  _batch.defs = outside.definitions([c for c in cells if isinstance(c, str)])
  return _batch.peak_memory(fn, inputs, kwargs)


__all__ = ["SEED", "gradelib", "peak_memory", "raised", "record", "recorded", "run_c", "launch_cl", "seeded",
           "time_kernels"]

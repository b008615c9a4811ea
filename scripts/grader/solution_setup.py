"""What a solution notebook's hidden-setup cell imports, so that its hidden tests run there as the grader splits them:
`record`, `raised` and `seeded` as in the sandbox (probe.py), `recorded` reading the values back as the judge
does, gradelib's checks and `time_kernels` for the judges. Each cell records into a fresh folder (an IPython
pre_run_cell hook), so a judge never reads a value an earlier test recorded. The grader runs the same hidden-setup
cell in its own process to define the judges' helpers, and then replaces SEED, seeded and recorded with its own."""
from __future__ import annotations
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # scripts/, for gradelib
import gradelib  # noqa: E402
import probe  # noqa: E402
import timing  # noqa: E402

SEED = 0   # the notebook's inputs; the grader draws its own seed for every grading
_probe = probe.Probe(Path(tempfile.gettempdir()) / f"uopc-probe-{uuid.uuid4().hex}", SEED)   # made on first record
record, raised, seeded, recorded = _probe.record, _probe.raised, _probe.seeded, probe.Live(_probe)
time_kernels = lambda *args, **kw: timing.time_kernels(*args, course=None, **kw)   # the grader: in a sandbox

try: from IPython import get_ipython
except ImportError: get_ipython = lambda: None
if (_ipython := get_ipython()) is not None:   # in a notebook's kernel; None in the grader's process
  _ipython.events.register("pre_run_cell", lambda *args: _probe.begin(_probe.test + 1))

__all__ = ["SEED", "gradelib", "raised", "record", "recorded", "seeded", "time_kernels"]

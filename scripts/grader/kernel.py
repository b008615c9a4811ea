"""Running notebook code in a Jupyter kernel under time limits (used inside the sandbox, by runner.py).

An error or a timeout is recorded, never fatal: a timed-out cell is interrupted, and a kernel that dies or does not
come back is replaced by a fresh one, which first re-runs the cells that had worked."""
from __future__ import annotations
import contextlib
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
# nbformat imports jsonschema, which builds rfc3987_syntax's IRI grammar on import (2 s of CPU, more than the rest of
# the grader's imports together); no notebook schema checks an IRI, and jsonschema leaves that format out when the
# module cannot be imported
sys.modules.setdefault("rfc3987_syntax", None)
from nbformat.v4 import new_code_cell, new_notebook  # noqa: E402
from nbclient import NotebookClient  # noqa: E402
from nbclient.exceptions import CellTimeoutError, DeadKernelError  # noqa: E402

# the same kernel environment as scripts/notebooks.py, so tracebacks read the same
KERNEL_ENV = {"IPYKERNEL_CELL_NAME": "<IPY-INPUT>", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
TIMEOUT_NAME = "GradingTimeout"
MAX_TEXT = 600           # characters of an error message kept in the report
# A kernel can die before it answers at all ("Kernel died before replying to kernel_info", seen once in CI with two
# xdist workers starting kernels). It is not the student's doing, so it is started again, up to START_TRIES times.
START_TRIES = 3
# seconds nbclient waits for a cell's last output (its idle status) once its reply came: for a cell that ran to its
# end (nbclient's default); for one that timed out and was interrupted, only a moment: a kernel that does not come back
# is given its time by responsive(), which asks it again, and each wait for a stuck kernel's output cost 4 s for nothing
IOPUB_S, IOPUB_AFTER_TIMEOUT_S = 4, 1


def short(text: str) -> str:
  text = " ".join(str(text).split())
  return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 3] + "..."


@dataclass
class Outcome:
  status: str            # ok, error, timeout, dead (the kernel died), skipped
  error: str = ""        # "Name: message" for error, timeout and dead
  seconds: float = 0.0


class QuietClient(NotebookClient):
  """nbclient that keeps only error outputs: grading reads nothing else, and a cell printing without end cannot
  fill memory."""

  def output(self, outs, msg, display_id, cell_index):
    if msg["msg_type"] != "error": return None
    return super().output(outs, msg, display_id, cell_index)

  async def _async_handle_timeout(self, timeout, cell=None):   # (nbclient's: it interrupts and makes the reply)
    self.iopub_timeout = IOPUB_AFTER_TIMEOUT_S
    return await super()._async_handle_timeout(timeout, cell)


class Session:
  """One kernel, started in `cwd`; run() executes a piece of code in it and says how that went."""

  def __init__(self, cwd: Path):
    os.environ.update(KERNEL_ENV)
    self.nb = new_notebook()
    self.replies: list[dict] = []
    self.client = QuietClient(
      self.nb, kernel_name="python3", allow_errors=True, interrupt_on_timeout=True, shutdown_kernel="immediate",
      timeout_func=lambda cell: cell.metadata.get("grade_timeout"), record_timing=False,
      error_on_timeout={"ename": TIMEOUT_NAME, "evalue": "", "traceback": []},
      on_cell_executed=lambda cell, cell_index, execute_reply: self.replies.append(execute_reply),
      resources={"metadata": {"path": str(cwd)}})
    self.stack = contextlib.ExitStack()
    # the kernel process's own output (C printf, library warnings) is not the student's notebook output
    self.stack.enter_context(self.client.setup_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

  def run(self, source: str, timeout: float) -> Outcome:
    limit = max(1, math.ceil(timeout))   # nbclient counts whole seconds
    cell = new_code_cell(source)
    cell.metadata["grade_timeout"] = limit
    self.nb.cells.append(cell)
    self.replies.clear()
    self.client.iopub_timeout = IOPUB_S
    t0 = time.perf_counter()
    try: self.client.execute_cell(cell, len(self.nb.cells) - 1)
    except DeadKernelError: return Outcome("dead", "DeadKernelError: the kernel died", time.perf_counter() - t0)
    except CellTimeoutError as e: return Outcome("timeout", short(f"CellTimeoutError: {e}"), time.perf_counter() - t0)
    except Exception as e:   # anything else from the kernel's side: treat the kernel as lost
      return Outcome("dead", short(f"{type(e).__name__}: {e}"), time.perf_counter() - t0)
    finally: cell.source = ""   # a long notebook's sources need not stay in memory twice
    dt = time.perf_counter() - t0
    content = self.replies[-1].get("content", {}) if self.replies and self.replies[-1] else {}
    if content.get("ename") == TIMEOUT_NAME: return Outcome("timeout", f"Timeout: ran past {limit} s", dt)
    errors = [o for o in cell.outputs if o.get("output_type") == "error"]
    if content.get("status") == "error" or errors:
      ename = content.get("ename") or (errors[0].get("ename") if errors else "Error")
      evalue = content.get("evalue") if content.get("ename") else (errors[0].get("evalue", "") if errors else "")
      return Outcome("error", short(f"{ename}: {evalue}"), dt)
    return Outcome("ok", "", dt)

  def responsive(self) -> bool:
    """After a timeout: did the interrupt bring the kernel back (or is it still busy, or dead)?"""
    return self.run("pass", 5).status == "ok"

  def close(self) -> None:
    with contextlib.suppress(Exception): self.stack.close()


class Kernel:
  """The student's notebook in a kernel that is replaced when it dies or hangs, then code run after it (setup)."""

  def __init__(self, cwd: Path, timeout: float, budget: float, setup: list[str], session=Session,
               setup_timeout: float = 60, before: list[str] = ()):
    self.cwd, self.timeout, self.budget, self.setup, self.session_cls = cwd, timeout, budget, setup, session
    self.before = list(before)   # run in every fresh kernel before the student's cells (the probe's library)
    self.setup_timeout = setup_timeout
    self.session = None
    self.ok_cells: list[str] = []   # the student's cells that ran without error, to replay in a fresh kernel
    self.restarts = 0
    self.cells = {"run": 0, "errors": [], "timeouts": 0, "skipped": 0}
    self.setup_error = ""

  def start(self) -> None:
    if self.session is not None: self.session.close()
    self.session = None   # if the start below fails, there is no session
    for attempt in range(START_TRIES):
      try:
        self.session = self.session_cls(self.cwd)
        for source in self.before:
          out = self.session.run(source, self.setup_timeout)
          if out.status != "ok": self.setup_error = short(f"probe setup failed: {out.error or out.status}")
        return
      except RuntimeError:   # "Kernel died before replying to kernel_info": not the student's doing
        if attempt == START_TRIES - 1: raise
        time.sleep(1.0)

  def restart(self) -> None:
    self.restarts += 1
    self.start()

  def lost(self, out: Outcome) -> bool:
    return out.status == "dead" or (out.status == "timeout" and not self.session.responsive())

  def run_student(self, cells: list[tuple[int, str]]) -> bool:
    """The student's code cells in order, then the setup. A dead or stuck kernel is replaced by a fresh one, in
    which the cells that had run without error are run again (as "restart and run all above" would), and the next
    cell goes on. False when the kernel does not answer the setup after them."""
    t_end = time.perf_counter() + self.budget
    for n, (k, source) in enumerate(cells):
      if time.perf_counter() > t_end:
        self.cells["skipped"] = len(cells) - n
        break
      out = self.session.run(source, min(self.timeout, max(1, t_end - time.perf_counter())))
      self.cells["run"] += 1
      if out.status == "ok": self.ok_cells.append(source)
      else: self.cells["errors"].append({"cell": k, "status": out.status, "error": out.error})
      if out.status == "timeout": self.cells["timeouts"] += 1
      if self.lost(out):
        self.restart()
        self.replay(t_end, setup=False)
    return self.run_setup()

  def replay(self, t_end: float, setup: bool = True) -> bool:
    """Run again, in a fresh kernel, the student's cells that ran without error (then the setup); False when the
    kernel does not answer after them."""
    for source in self.ok_cells:
      if time.perf_counter() > t_end: break
      out = self.session.run(source, min(self.timeout, max(1, t_end - time.perf_counter())))
      if self.lost(out):
        self.restart()   # a cell that worked once and not now: give up on the replay, keep a live kernel
        break
    return self.run_setup() if setup else True

  def run_setup(self) -> bool:
    """The setup cells after the student's; False when the kernel no longer answers (the student's cells broke
    it: a fresh kernel that replays them would break the same way)."""
    for source in self.setup:
      out = self.session.run(source, self.setup_timeout)
      if out.status != "ok": self.setup_error = short(f"probe setup failed: {out.error or out.status}")
      if self.lost(out): return False
    return True

  def close(self) -> None:
    if self.session is not None: self.session.close()

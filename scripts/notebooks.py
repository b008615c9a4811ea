"""Build and check the course notebooks.

Every notebook has a text source next to it: chapters/ch03_the_uop.py (jupytext percent format) is
what authors edit; chapters/ch03_the_uop.ipynb is generated from it, executed, normalised and
committed with its outputs, because nbval compares a notebook against its own stored outputs.

  python scripts/notebooks.py build [files...]   # .py -> .ipynb, execute top to bottom, normalise
  python scripts/notebooks.py check [files...]   # each .ipynb matches its .py and is executed and normalised
  python scripts/notebooks.py run files...       # execute each as a student would (no hidden tests), write nothing:
                                                 # fails on a cell that raises (scripts/nodevice_check.sh)
"""
from __future__ import annotations
import os, subprocess, sys, time
from pathlib import Path
import jupytext, nbformat
from nbclient import NotebookClient
from assignments import annotate, nbgrader_metadata   # scripts/ is on the path when this file runs as a script

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("chapters", "solutions")
STRIP = ["--keep-output", "--keep-count"]
# the same environment for building and for nbval, so tracebacks and warnings read the same
KERNEL_ENV = {"IPYKERNEL_CELL_NAME": "<IPY-INPUT>", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}


def sources(args: list[str]) -> list[Path]:
  if args: return [Path(a).resolve().with_suffix(".py") for a in args]
  found = (p for f in FOLDERS for p in (ROOT / f).glob("*.py"))
  return sorted(p for p in found if p.with_suffix(".ipynb").exists() or _is_notebook_source(p))


def _is_notebook_source(p: Path) -> bool:
  head = p.read_text().splitlines()[:8]
  return any("jupytext" in line for line in head)


def strip(*ipynbs: Path, verify: bool = False) -> bool:
  """nbstripout --keep-output --keep-count: drop metadata that changes from run to run, keep outputs and counts (with
  verify: whether every one of them is so already). One process for all of them: nbstripout's start is most of it."""
  cmd = [sys.executable, "-m", "nbstripout", *STRIP, *(["--verify"] if verify else []), *map(str, ipynbs)]
  return subprocess.run(cmd, capture_output=True, text=True).returncode == 0


def build(py: Path) -> None:
  nb = jupytext.read(py)
  nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
  os.environ.update(KERNEL_ENV)
  t0 = time.perf_counter()
  NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
  nb.metadata.pop("widgets", None)
  for c in nb.cells:
    if c.cell_type == "code": c.outputs = merge_streams(c.outputs)
  if py.parent.name == "solutions": annotate(nb)   # nbgrader cell metadata (solution and grade cells, points)
  out = py.with_suffix(".ipynb")
  nbformat.write(nb, out)
  if not strip(out): raise SystemExit(f"nbstripout failed on {out}")
  print(f"built {out.relative_to(ROOT)} in {time.perf_counter() - t0:.1f} s")


def merge_streams(outputs: list) -> list:
  """One output per run of prints to the same stream: how a kernel chunks its writes varies from run to run."""
  merged = []
  for o in outputs:
    last = merged[-1] if merged else {}
    if o.get("output_type") == last.get("output_type") == "stream" and last.name == o.name:
      merged[-1].text += o.text
    else: merged.append(o)
  return merged


def cells(nb) -> list[tuple[str, str, list[str]]]:
  return [(c.cell_type, c.source.strip(), sorted(c.metadata.get("tags", []))) for c in nb.cells]


def check(py: Path, normalised: bool = False) -> list[str]:
  """What is wrong with py's notebook; normalised: nbstripout found every notebook normalised already."""
  ipynb, problems = py.with_suffix(".ipynb"), []
  name = ipynb.relative_to(ROOT)
  if not ipynb.exists(): return [f"{name}: missing (run `make notebooks`)"]
  nb, src = nbformat.read(ipynb, as_version=4), jupytext.read(py)
  if cells(nb) != cells(src):
    problems.append(f"{name}: cells differ from {py.name} (edit the .py, then `make notebooks`)")
  for k, c in enumerate(nb.cells):
    if c.cell_type == "code" and c.source.strip() and c.execution_count is None:
      problems.append(f"{name}: code cell {k} was never executed (execution_count is null)")
  if py.parent.name == "solutions":
    want = nbgrader_metadata(nb)
    have = {k: c.metadata["nbgrader"] for k, c in enumerate(nb.cells) if "nbgrader" in c.metadata}
    if have != want: problems.append(f"{name}: nbgrader cell metadata out of date (run `make notebooks`)")
  if not normalised and not strip(ipynb, verify=True):
    problems.append(f"{name}: not normalised (nbstripout {' '.join(STRIP)} would change it)")
  return problems


# the grader's cells: a student's copy has none of them (scripts/release.py)
GRADER_TAGS = {"hidden-test", "hidden-setup"}
ABSENT = "is not available here:"   # what a `%%needs` cell prints where its device is missing (uopc.notebook)


def run(py: Path) -> bool:
  """Execute the notebook top to bottom without its grader cells, writing nothing: whether every cell ran. A cell
  that needs a device this machine lacks prints why and its stored output, and counts as run."""
  nb = nbformat.read(py.with_suffix(".ipynb"), as_version=4)
  nb.cells = [c for c in nb.cells if not GRADER_TAGS & set(c.metadata.get("tags", []))]
  os.environ.update(KERNEL_ENV)
  t0, name = time.perf_counter(), py.with_suffix(".ipynb").relative_to(ROOT)
  try: NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
  except Exception as e:   # nbclient's CellExecutionError: the cell, its error and traceback
    print(f"{name}: a cell failed:\n{e}")
    return False
  texts = ["".join("".join(o.get("text", "")) for o in c.get("outputs", [])) for c in nb.cells if c.cell_type == "code"]
  absent = sorted({ln[1:].split(":")[0] for t in texts for ln in t.splitlines() if ABSENT in ln})
  print(f"{name}: ran to the end in {time.perf_counter() - t0:.1f} s; "
        f"{sum(ABSENT in t for t in texts)} cells showed their stored output instead ({'; '.join(absent) or 'none'})")
  return True


if __name__ == "__main__":
  if len(sys.argv) < 2 or sys.argv[1] not in ("build", "check", "run"): raise SystemExit(__doc__)
  files = sources(sys.argv[2:])
  if sys.argv[1] == "build":
    for f in files: build(f)
  elif sys.argv[1] == "run":
    raise SystemExit(0 if all([run(f) for f in files]) else 1)
  else:
    notebooks = [f.with_suffix(".ipynb") for f in files if f.with_suffix(".ipynb").exists()]
    normalised = strip(*notebooks, verify=True)   # all at once; one by one only to name the one that is not
    problems = [p for f in files for p in check(f, normalised)]
    print("\n".join(problems) if problems else f"{len(files)} notebooks in sync, executed and normalised")
    raise SystemExit(1 if problems else 0)

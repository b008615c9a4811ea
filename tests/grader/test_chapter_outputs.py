"""What the stored notebooks show (issue 49): outputs a reader can read as printed, and the race sections that
chapters 4, 5, 12 and 13 teach, each with uopc's report on a racing program and its silence on the fixed one.

  - No stored output stream holds a carriage return: a progress line overwritten in place on a terminal is stored
    in a notebook as every one of its versions (chapter 10's tuner stored three before its result).
  - Chapter 4 (the shared accumulator), chapter 5 (a tile that overlaps its neighbour), chapter 12 (the group sum
    without each barrier) and chapter 13 (the tiled kernel without a barrier) each have a cell that asks uopc.races
    and prints both "a race: ..." and an "ok: ..." from check_no_races (check_local_barriers in chapter 12).

In the instructor's wing (tests/grader/), which the student's tree leaves out: it reads solutions/.
"""
from pathlib import Path
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted([*ROOT.glob("chapters/*.ipynb"), *ROOT.glob("solutions/*.ipynb"), *ROOT.glob("assignments/*.ipynb")])
RACES = {"ch04_loops_as_graphs": "a race: in THREAD loop", "ch05_linearizer_and_c": "a race: in THREAD loop",
         "ch12_gpus": "a race: the read tile[", "ch13_gpu_machinery": "a race: a load of lmem"}


def streams(nb) -> list[tuple[int, str]]:
  """(cell index, text) of every stored stream output."""
  found = []
  for k, cell in enumerate(nb.cells):
    for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
      if out.get("output_type") == "stream":
        found.append((k, out["text"] if isinstance(out["text"], str) else "".join(out["text"])))
  return found


def carriage_returns(nb) -> list[int]:
  return [k for k, text in streams(nb) if "\r" in text]


def test_a_stored_carriage_return_is_found():
  nb = nbformat.v4.new_notebook()
  cell = nbformat.v4.new_code_cell("best, seconds = tune.search(...)")
  cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text="\rtune 1/3 candidates\rtune 2/3 candidates")]
  nb.cells.append(cell)
  assert carriage_returns(nb) == [0]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_no_stored_output_holds_a_carriage_return(path):
  assert not carriage_returns(nbformat.read(path, 4)), f"{path.name}: cells {carriage_returns(nbformat.read(path, 4))}"


@pytest.mark.parametrize("chapter", sorted(RACES))
def test_the_chapter_shows_a_race_report_and_its_fix_passing(chapter):
  nb = nbformat.read(ROOT / "chapters" / f"{chapter}.ipynb", 4)
  shown = [text for k, text in streams(nb) if "uopc.races" in nb.cells[k].source or "_races(" in nb.cells[k].source]
  assert any(RACES[chapter] in text for text in shown), f"{chapter}: no '{RACES[chapter]}' from uopc.races stored"
  assert any(line.startswith("ok: ") for text in shown for line in text.splitlines()), \
    f"{chapter}: no 'ok: ...' from check_no_races on the fixed program"

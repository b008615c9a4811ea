"""Prose that matches its outputs: every number with a unit that a notebook's prose states about this run must be
printed by one of the notebook's outputs, or be marked as quoted (the book's numbers say so).

  python scripts/prose_check.py [notebooks...]      # default: chapters/*.ipynb and solutions/*.ipynb

A markdown cell's number counts as shown when its digits appear in any output of the same notebook. A number is
marked as quoted when its paragraph names where it comes from ("the book", "the book's", "NOTES n"), and left alone
inside `code` or math, and in headings.
"""
from __future__ import annotations
import re, sys
from pathlib import Path
import nbformat

ROOT = Path(__file__).resolve().parent.parent
UNITS = (r"(?:ms|µs|us|ns|s|x|×|%|GB/s|MB/s|GFLOP/s|TFLOP/s|MFLOP|GFLOP|FLOP/byte|FLOPs?|MB|KB|GB|KiB|MiB|GiB"
         r"|pages|times)")
NUMBER = re.compile(r"(?<![\w.^/])(\d[\d,]*(?:\.\d+)?)\s?" + UNITS + r"(?![\w/])")
QUOTED = re.compile(r"\bbook\b|\bbook's\b|\bNOTES\b|\bquot", re.I)
CODE = re.compile(r"`[^`]*`|\$[^$]*\$")
FENCE = re.compile(r"```.*?```", re.S)   # a fenced block is a printout being quoted, not prose


FOLDERS = ("chapters", "solutions")


def notebooks() -> list[Path]:
  """Every committed notebook (in a student's tree, solutions/ is absent and so left out)."""
  return sorted(p for folder in FOLDERS for p in (ROOT / folder).glob("*.ipynb"))


def outputs_text(nb) -> str:
  parts = []
  for c in nb.cells:
    if c.cell_type != "code": continue
    for o in c.get("outputs", []):
      if "text" in o: parts.append(o["text"] if isinstance(o["text"], str) else "".join(o["text"]))
      for v in o.get("data", {}).values():
        if isinstance(v, str) and not v.startswith("iVBOR"): parts.append(v)
  return "\n".join(parts)


def sentences(text: str) -> list[str]:
  return [s for s in re.split(r"(?<=[.!?])\s+|\n\s*\n|\n(?=\s*[-*] |\s*\d+\. )", text) if s.strip()]


def unbacked(nb) -> list[tuple[int, str, str]]:
  """(cell index, number, sentence) for every number with a unit that no output shows and no sentence quotes."""
  shown = outputs_text(nb)
  digits = set(re.findall(r"\d[\d,]*(?:\.\d+)?", shown))
  digits |= {d.replace(",", "") for d in digits}
  found = []
  for k, c in enumerate(nb.cells):
    if c.cell_type != "markdown": continue
    for para in re.split(r"\n\s*\n", FENCE.sub(" ", c.source)):
      para = "\n".join(line for line in para.splitlines() if not line.lstrip().startswith("#"))   # no headings
      if QUOTED.search(para): continue
      for sent in sentences(CODE.sub(" ", para)):
        for m in NUMBER.finditer(sent):
          n = m.group(1)
          if m.group(0)[-1] in "x×" and re.match(r"\s?\d", sent[m.end():]): continue   # 2 x 4: a size, not a ratio
          if n in digits or n.replace(",", "") in digits: continue
          found.append((k, m.group(0), " ".join(sent.split())))
  return found


def check(paths: list[Path]) -> int:
  bad = 0
  for p in paths:
    nb = nbformat.read(p, as_version=4)
    for k, number, sent in unbacked(nb):
      bad += 1
      name = p.relative_to(ROOT) if p.is_relative_to(ROOT) else p
      print(f"{name}: cell {k}: {number!r} is shown by no output: {sent[:160]}")
  return bad


if __name__ == "__main__":
  files = [Path(a).resolve() for a in sys.argv[1:]] or notebooks()
  n = check(files)
  print(f"prose check: {n} number(s) with units that no output shows" if n else
        f"prose check: {len(files)} notebooks, every number backed or quoted")
  sys.exit(1 if n else 0)

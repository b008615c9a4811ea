"""Feedback carries the student's own text and the task's public messages, never the grader's hidden test.

A probe runs in the student's kernel (runner.py), so while it runs, the student's code can read the probe's source
(IPython's input history, `In`, holds it), the setup cell that holds the seed, and the inputs it was called with;
an exception message is the way back out, into the feedback. Every text that came from the sandbox or quotes what it
recorded (a probe's or a cell's error, the runner's note, a judge's message) passes `Redactor.clean` before it is
reported: a text that quotes a piece of a hidden test (any SPAN characters of a line of a probe or of the setup
cell, where that piece is not also the student's own code), the seed, or a run of numbers as long as a printed
array, is replaced by its exception's name and a sentence saying that its message was withheld and why.

What this does not stop: a student who encodes what they read (in words, one character per cell error...) gets it
out; the end of that is a process that never holds the probe (issue 48, item 1: the judge chooses the inputs and asks
for outputs only).
"""
from __future__ import annotations
import re

SPAN = 24              # characters of a hidden line that count as quoting it
MIN_LINE = 12          # a shorter line (`# JUDGE`, `_r = seeded(5)`) is no secret on its own
MIN_SEED = 6           # digits of a seed worth looking for (the grader's are 9 or 10; a test's `--seed 27` is not)
NUMBERS = 8            # decimal numbers in one message that read as a printed input array
DECIMAL = re.compile(r"-?\d+\.\d+(?:[eE][-+]?\d+)?")
NAME = re.compile(r"^([A-Za-z_][\w.]{0,80}):\s")
WITHHELD = "(its message is withheld: it quotes {what})"


def _collapse(text: str) -> str: return " ".join(str(text).split())


class Redactor:
  def __init__(self, hidden: list[str], seed: int, own: list[str]):
    """hidden: the sources of the probes and of the setup cell that ran in the sandbox; own: the student's cells."""
    self.seed = str(seed)
    self.own = _collapse("\n".join(own))
    self.spans: set[str] = set()
    for source in hidden:
      for line in source.splitlines():
        line = _collapse(line)
        if len(line) < MIN_LINE: continue
        if len(line) <= SPAN: self.spans.add(line)
        else: self.spans.update(line[i:i + SPAN] for i in range(len(line) - SPAN + 1))
    self.lengths = sorted({len(s) for s in self.spans})

  def quotes(self, text: str, numbers: bool = True) -> str | None:
    """What of the hidden test text quotes, or None (numbers: whether a run of numbers counts, as it does for a text
    the sandbox wrote; a judge's own message quotes expected values by design)."""
    flat = _collapse(text)
    for n in self.lengths:
      for i in range(len(flat) - n + 1):
        piece = flat[i:i + n]
        if piece in self.spans and piece not in self.own: return "the grader's hidden test"
    if len(self.seed) >= MIN_SEED and self.seed in flat and self.seed not in self.own: return "the grading's seed"
    if numbers and len(DECIMAL.findall(flat)) >= NUMBERS: return "many numbers, as a hidden input printed would"
    return None

  def clean(self, text: str, numbers: bool = True) -> str:
    if not isinstance(text, str) or not text: return text
    what = self.quotes(text, numbers)
    if what is None: return text
    m = NAME.match(text)
    return (f"{m.group(1)}: " if m else "") + WITHHELD.format(what=what)

"""Feedback carries the student's own text and the task's public messages, never the grader's hidden test.

A probe runs in the student's kernel (runner.py), so while it runs, the student's code can read the probe's source
(IPython's input history, `In`, holds it), the setup cell that holds the seed, and the inputs it was called with;
an exception message is the way back out, into the feedback. Every text that came from the sandbox or quotes what it
recorded (a probe's or a cell's error, the runner's note, a judge's message) passes `Redactor.clean` before it is
reported: a text that quotes a piece of a hidden test (any SPAN characters of a line of a probe or of the setup
cell, unless that piece is also the student's own code or inside a string a judge says), the seed, or (in a text
the sandbox wrote) a run of numbers as long as a printed array, is replaced by its exception's name and a sentence
saying that its message was withheld and why.

What this does not stop: a student who encodes what they read (in words, one character per cell error...) gets it
out; the end of that is a process that never holds the probe (issue 48, item 1: the judge chooses the inputs and asks
for outputs only).
"""
from __future__ import annotations
import ast
import re

SPAN = 24              # characters of a hidden line that count as quoting it
MIN_LINE = 12          # a shorter line (`# JUDGE`, `_r = seeded(5)`) is no secret on its own
MIN_SEED = 6           # digits of a seed worth looking for (the grader's are 9 or 10; a test's `--seed 27` is not)
NUMBERS = 8            # decimal numbers in one message that read as a printed input array
EDGES = " \t,;:()[]{}'\"=+-*/"   # what surrounds a string or a call in code, stripped before the public check
DECIMAL = re.compile(r"-?\d+\.\d+(?:[eE][-+]?\d+)?")
NAME = re.compile(r"^([A-Za-z_][\w.]{0,80}):\s")
WITHHELD = "(its message is withheld: it quotes {what})"


def _collapse(text: str) -> str: return " ".join(str(text).split())


def _literals(sources) -> list[str]:
  """The string literals of Python sources, f-strings' constant parts included."""
  out = []
  for source in sources:
    try: tree = ast.parse(source)
    except (SyntaxError, ValueError): continue
    out += [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
  return out


class Redactor:
  def __init__(self, hidden: list[str], seed: int, own: list[str], public: list[str] = ()):
    """hidden: the sources of the probes and of the setup cell that ran in the sandbox; own: the student's cells;
    public: the judges' sources, whose string literals are what a judge says (its messages quote them by design)."""
    self.seed = str(seed)
    self.own = _collapse("\n".join(own)) + "\0" + "\0".join(_collapse(s) for s in _literals(public))
    self.spans: set[str] = set()
    for source in hidden:
      for line in source.splitlines():
        line = _collapse(line)
        if len(line) < MIN_LINE or line.startswith("#"): continue   # a comment (POINTS, SHORTCUTS) is public text
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
        if piece not in self.spans: continue
        core = piece.strip(EDGES)   # a piece that is public text (a judge's string) but for the code around it
        if len(core) >= MIN_LINE and core not in self.own: return "the grader's hidden test"
    if len(self.seed) >= MIN_SEED and self.seed in flat and self.seed not in self.own: return "the grading's seed"
    if numbers and len(DECIMAL.findall(flat)) >= NUMBERS: return "many numbers, as a hidden input printed would"
    return None

  def clean(self, text: str, numbers: bool = True) -> str:
    if not isinstance(text, str) or not text: return text
    what = self.quotes(text, numbers)
    if what is None: return text
    m = NAME.match(text)
    return (f"{m.group(1)}: " if m else "") + WITHHELD.format(what=what)

"""Prose that matches its outputs: every number with a unit that a notebook's prose states about this run must be
printed by one of the notebook's outputs, or be marked as quoted (the book's numbers say so).

  python scripts/prose_check.py [notebooks...]      # default: chapters/*.ipynb and solutions/*.ipynb

A markdown cell's number counts as shown when its digits appear in any output of the same notebook. A number is
marked as quoted when its paragraph names where it comes from ("the book", "the book's", "NOTES n"), and left alone
inside `code` or math, and in headings.

Counts and comparisons (`unbacked_claims`), the cases a number with a unit does not cover:
  - a count of work-groups, kernels, passes, evaluations... ("four work-groups", "six times per row") must be
    printed by an output, as digits;
  - "best of five" must be what the code times (`reps=5`, `k=5`, `best_of(fn, 5)`) or an output says;
  - "far from", "comparable", "of the same order" must point, in the same clause, at the printed numbers they read
    ("the ratio printed above", "the chart"), or introduce them (a sentence ending in ":"); otherwise reword.
Here only a sentence that itself names its source ("the book measured", "NOTES n") is quoted. WAIVED lists the
claims left as they are, each with its reason.

Claims read against the numbers they are about (`growth_claims`, `bound_claims`):
  - "doubles (triples, halves...) at every step" must match the per-step sizes printed next to it (lines that start
    with a step number): some printed column grows by that factor at each step;
  - "below (above) N FLOP per byte" must hold for every kernel the sentence names (a label cell of a printed table's
    FLOP/byte column: its kernel name or its role).
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
QUOTED_CLAIM = re.compile(r"^(?!)")   # counts and comparisons: no paragraph is skipped whole (see CITED)
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


def prose(nb, quoted: re.Pattern):
  """(cell index, paragraph) for every paragraph of markdown that states things about this run: fenced printouts,
  headings and paragraphs that quote their source (the book, NOTES n) left out."""
  for k, c in enumerate(nb.cells):
    if c.cell_type != "markdown": continue
    for para in re.split(r"\n\s*\n", FENCE.sub(" ", c.source)):
      para = "\n".join(line for line in para.splitlines() if not line.lstrip().startswith("#"))   # no headings
      if not quoted.search(para): yield k, para


def unbacked(nb) -> list[tuple[int, str, str]]:
  """(cell index, number, sentence) for every number with a unit that no output shows and no sentence quotes."""
  shown = outputs_text(nb)
  digits = set(re.findall(r"\d[\d,]*(?:\.\d+)?", shown))
  digits |= {d.replace(",", "") for d in digits}
  found = []
  for k, para in prose(nb, QUOTED):
    for sent in sentences(CODE.sub(" ", para)):
      for m in NUMBER.finditer(sent):
        n = m.group(1)
        if m.group(0)[-1] in "x×" and re.match(r"\s?\d", sent[m.end():]): continue   # 2 x 4: a size, not a ratio
        if n in digits or n.replace(",", "") in digits: continue
        found.append((k, m.group(0), " ".join(sent.split())))
  return found


# Counts and comparisons (issue 28): a count that no output prints, a "best of k" the code does not run, and a
# comparison that does not point at the numbers it reads are what slipped past the number rule above.
WORDS = {w: n for n, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                                    "fourteen fifteen sixteen seventeen eighteen nineteen twenty".split())}
WORDS.update(thirty=30, forty=40, fifty=50, sixty=60, hundred=100, thousand=1000)
SPELLED = r"(?:" + "|".join(sorted((w for w in WORDS if WORDS[w] >= 2), key=len, reverse=True)) + r")"
# nouns whose count is a property of this run's plan, launch or timing, so an output of the notebook can show it
# (and "N times" as a factor: "six times per row", "3 times slower"; "apply it twelve times" is the code's count)
COUNTED = (r"(?:work-groups?|groups|work-items|kernels|passes|launches|warps|cycles|transactions|evaluations"
           r"|temporaries|iterations|calls|runs"
           r"|times\s+(?:per|more|less|fewer|faster|slower|larger|smaller|bigger|as|the|over))")
COUNT = re.compile(r"(?<![\w.^/-])(\d[\d,]*|" + SPELLED + r")\s+" + COUNTED + r"\b", re.I)
# digits before "times" are the number rule's (a unit, quoted paragraphs honoured); this rule adds the spelled ones
DIGIT_TIMES = re.compile(r"\d[\d,]*\s+times\b", re.I)
BEST_OF = re.compile(r"\bbest[- ]of[- ](\d+|" + SPELLED + r")\b", re.I)
# how a notebook sets the k of a best-of: reps=5, k=5, best_of(fn, 5), repeat=5
TIMED_K = re.compile(r"\b(?:reps|k|repeat|number|runs)\s*(?::\s*int\s*)?=\s*(\d+)|\bbest_of\(.*?,\s*(\d+)\s*\)")
# comparisons whose truth is a ratio of this run's numbers
VAGUE = re.compile(r"\b(?:far (?:from|behind|ahead of)|comparable|(?:of )?the same order)\b", re.I)
# ... which may stand where its clause points at the printed numbers it reads, or ends in ":" before them
POINTS = re.compile(r"\b(?:printed|prints|above|below|the (?:chart|plot|bars?|table|output|line)s?)\b|:\s*$", re.I)
# a claim is the book's or NOTES' when its own sentence says so (a paragraph that merely mentions the book is not)
CITED = re.compile(r"\b(?:the book(?:'s)? (?:measur\w*|report\w*|says|gives|numbers?|times|figures?)|NOTES \d+"
                   r"|quot\w*)", re.I)
# claims left as they are, each with its reason: printed, not counted; a waiver that no longer matches is an error
WAIVED: dict[str, dict[str, str]] = {}
MENTIONED = re.compile(r'"[^"]*"|“[^”]*”')   # a phrase in quotation marks is mentioned, not claimed
CLAUSE = re.compile(r"(?<=[;:])\s+|\s*[()]\s*")   # "...(the ratio above...); both are far from..." is two claims


def count_value(word: str) -> str:
  return str(WORDS[word.lower()]) if word.lower() in WORDS else word.replace(",", "")


def code_counts(nb) -> set[str]:
  """The k of every best-of the notebook's code runs."""
  code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
  return {a or b for a, b in TIMED_K.findall(code)}


def unbacked_claims(nb) -> list[tuple[int, str, str, str]]:
  """(cell index, claim, sentence, why) for every count no output shows, best-of the code does not run, and vague
  comparison that points at no printed number; quoted paragraphs (the book, NOTES) are left alone."""
  shown = outputs_text(nb)
  digits = set(re.findall(r"\d[\d,]*(?:\.\d+)?", shown))
  digits |= {d.replace(",", "") for d in digits}
  digits |= {d.split(".")[0] for d in digits if re.fullmatch(r"\d+\.0+", d)}   # a count printed as 6.0
  ks = code_counts(nb) | {count_value(m) for m in BEST_OF.findall(shown)}
  found = []
  for k, para in prose(nb, QUOTED_CLAIM):
    for sent in sentences(MENTIONED.sub(" ", CODE.sub(" ", para))):
      flat = " ".join(sent.split())
      if CITED.search(sent): continue
      for m in BEST_OF.finditer(sent):
        if count_value(m.group(1)) not in ks:
          found.append((k, m.group(0), flat, f"the code times best of {sorted(ks) or 'nothing'}"))
      for m in COUNT.finditer(sent):
        if BEST_OF.search(sent[max(0, m.start() - 12):m.end()]) or DIGIT_TIMES.match(m.group(0)): continue
        if count_value(m.group(1)) not in digits: found.append((k, m.group(0), flat, "no output shows this count"))
      for clause in CLAUSE.split(sent):
        for m in VAGUE.finditer(clause):
          if not POINTS.search(clause) and not sent.rstrip().endswith(":"):
            found.append((k, m.group(0), flat, "a comparison that points at no printed number"))
  return found


# Growth per step and bounds on printed values (issue 43): "the tree doubles at every step" over printed sizes that
# triple, and "the softmax kernels sit below one FLOP per byte" over a printed row sum at 1.50. Each claim is read
# against the numbers it is about: per-step sizes in the outputs next to it, a table's FLOP/byte column.
GROWTH = {"halves": 0.5, "doubles": 2.0, "triples": 3.0, "quadruples": 4.0}
STEPWORD = r"(?:steps?|iterations?|rounds?|levels?)"
GROWS = re.compile(r"\b(halves|doubles|triples|quadruples)\b(?=[^.;]*?\b(?:every|each|per|a)\s+" + STEPWORD + r"\b)"
                   r"|\b(?:every|each|per)\s+" + STEPWORD + r"\b[^.;]*?\b(halves|doubles|triples|quadruples)\b", re.I)
STEP_ROW = re.compile(r"^\s*(?:" + STEPWORD + r"\s*)?(\d+)\s*[:|]\s*(.*)$", re.I)
NUM = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")
TOLERANCE = 0.15   # a claimed factor and a printed one agree within 15% (5, 161, 4373: 3.18 then 3.01 a step)


def _code_outputs(c) -> str:
  return "\n".join(o["text"] if isinstance(o.get("text"), str) else "".join(o.get("text", []))
                   for o in c.get("outputs", []) if "text" in o)


def neighbour_outputs(nb, k: int) -> str:
  """The printed text of the code cells on either side of cell k: where a sentence's numbers are printed."""
  before = next((_code_outputs(c) for c in reversed(nb.cells[:k]) if c.cell_type == "code"), "")
  after = next((_code_outputs(c) for c in nb.cells[k + 1:] if c.cell_type == "code"), "")
  return before + "\n" + after


def step_columns(text: str) -> list[list[tuple[int, float]]]:
  """Each numeric column of the runs of lines that start with a step number (`step 4: ... 161 ... 10`), as
  (step, value) pairs in order."""
  runs, run = [], []
  for line in text.splitlines() + [""]:
    m = STEP_ROW.match(line)
    if m and (values := [float(v) for v in NUM.findall(m.group(2))]): run.append((int(m.group(1)), values))
    else:
      if len(run) > 1: runs.append(run)
      run = []
  cols = []
  for run in runs:
    width = min(len(v) for _, v in run)
    cols += [[(step, v[c]) for step, v in run] for c in range(width)]
  return cols


def per_step(col: list[tuple[int, float]]) -> list[float]:
  return [(b / a) ** (1 / (t - s)) for (s, a), (t, b) in zip(col, col[1:]) if t > s and a > 0 and b > 0]


def growth_claims(nb) -> list[tuple[int, str, str, str]]:
  """(cell index, claim, sentence, why) for every "doubles (triples, halves...) at every step" that the per-step sizes
  printed next to it do not show: some printed column must grow by that factor at every step, within TOLERANCE."""
  found = []
  for k, para in prose(nb, QUOTED_CLAIM):
    for sent in sentences(MENTIONED.sub(" ", CODE.sub(" ", para))):
      if CITED.search(sent): continue
      for m in GROWS.finditer(sent):
        word = (m.group(1) or m.group(2)).lower()
        cols = [f for col in step_columns(neighbour_outputs(nb, k)) if (f := per_step(col))]
        if not cols:
          why = "no sizes per step are printed next to it"
        elif any(all(abs(f / GROWTH[word] - 1) <= TOLERANCE for f in col) for col in cols):
          continue
        else:
          why = "the printed sizes grow by " + " or ".join("x" + "/".join(f"{f:.2f}" for f in col) for col in cols) + \
            " a step"
        found.append((k, word, " ".join(sent.split()), why))
  return found


BOUND = re.compile(r"\b(below|under|less than|above|over|more than)\s+(\d+(?:\.\d+)?|" +
                   "|".join(sorted(WORDS, key=len, reverse=True)) + r")\s+FLOPs?\s*(?:per\s+|/\s*)byte\b", re.I)
HEADER = "FLOP/byte"


def intensity_rows(text: str) -> list[tuple[str, float]]:
  """(label, value) for every row of a printed table with a FLOP/byte column: the number that ends where the
  header's `FLOP/byte` ends (right-aligned columns), and the text before it as the row's label."""
  rows, end = [], None
  for line in text.splitlines():
    if HEADER in line and not NUM.search(line.split(HEADER)[0] + " "):
      end = line.index(HEADER) + len(HEADER)
      continue
    if not line.strip(): end = None
    if end is None: continue
    for m in NUM.finditer(line):
      if m.end() == end: rows.append((line[:m.start()], float(m.group())))
  return rows


def named_by(label: str, sentence: str) -> bool:
  """A row is the sentence's when one of its label's cells (runs of text between wide gaps) is in the sentence."""
  cells = [c.strip() for c in re.split(r"\s{2,}|\|", label) if len(c.strip()) >= 3 and re.search(r"[A-Za-z]", c)]
  return any(c.lower() in sentence.lower() for c in cells)


def bound_claims(nb) -> list[tuple[int, str, str, str]]:
  """(cell index, claim, sentence, why) for every "below (above...) N FLOP per byte" that a printed FLOP/byte of a
  kernel the sentence names contradicts."""
  rows = intensity_rows(outputs_text(nb))
  found = []
  for k, para in prose(nb, QUOTED_CLAIM):
    for sent in sentences(MENTIONED.sub(" ", para.replace("`", ""))):
      if CITED.search(sent): continue
      for m in BOUND.finditer(sent):
        bound = float(count_value(m.group(2)))
        below = m.group(1).lower() in ("below", "under", "less than")
        for label, value in rows:
          if named_by(label, sent) and (value >= bound if below else value <= bound):
            found.append((k, m.group(0), " ".join(sent.split()),
                          f"{' '.join(label.split())} prints {value:g} FLOP/byte"))
  return found


# Readings (issue 41): what slipped past both rules above in chapter 11. Each reads a number off this run's outputs
# in a form the rules above let through: a time beside a printout in a paragraph that quotes the book elsewhere, an
# approximate count ("about a thousand faults"), a vague amount ("the few that remain", "a few tens of GFLOP/s"), and
# a fraction of another number ("about half of what it is at N = 512").
# a sentence that points at this notebook's own outputs: its numbers are about this run, whatever the paragraph quotes
HERE = re.compile(r"\b(?:here|above|below|this run|this machine|printed|prints|compare|the (?:output|printout|cell"
                  r"|table|chart|plot|lines?|runs?|realizes?)\b)", re.I)
NUMBER_WORD = SPELLED + r"(?:[\s-]+(?:hundred|thousand))?|hundred|thousand"
# about/around/roughly... a number of run events (or "of them"): an approximate count no output can print as digits
APPROX = r"\b(?:about|around|roughly|nearly|almost|some|over|under|close to|more than|fewer than)\s+(?:a\s+)?"
EVENTS = r"(?:(?:minor |major )?(?:page )?faults|misses|spills|tests|of (?:them|these|those))"
NOUNS = r"(?:work-groups?|groups|work-items|kernels|passes|launches|warps|cycles|transactions|evaluations|temporaries)"
APPROX_COUNT = re.compile(APPROX + r"(\d[\d,]*|" + NUMBER_WORD + r")\s+(?:" + NOUNS + "|" + EVENTS + r")\b", re.I)
# a vague amount of a measured quantity: "the few that remain", "a few tens of GFLOP/s", "a peak of hundreds"
RATES = r"(?:ms|µs|us|ns|GFLOP/s|TFLOP/s|GB/s|MB/s|x|×)"
VAGUE_AMOUNT = re.compile(r"\bthe few\s+(?:that|which|left|remaining)\b|\b(?:a few|tens|hundreds|thousands|dozens)"
                          r"(?:\s+of)?\s+(?:" + RATES + r"(?![\w/])|" + EVENTS + r"\b)"
                          r"|\b(?:peak|rate|speed|time|ratio|factor) of (?:tens|hundreds|thousands)\b(?!\s+of)", re.I)
# a fraction of another number: "about half of what it is at N = 512", "a quarter of what the GEMMs reach"
FRACTION = re.compile(r"\b(?:half|twice|a third|a quarter|a fifth|a tenth|double)\s+(?:of\s+)?what\b", re.I)
EXPECTED = re.compile(r"^\s*Expected:")   # a week's "Expected:" line describes the output a check prints
# POINTS, where "the output" is a cell's output, not the output array of a kernel
READS = re.compile(r"\b(?:printed|prints|above|below|reads?|the\s+(?:chart|plot|bars?|table|printout|line)s?\b"
                   r"|the\s+outputs?\b(?!\s+(?:array|buffer|row|column|tensor)s?\b))|:\s*$", re.I)


def number_value(words: str) -> str:
  """'seven hundred' -> '700', 'a thousand' -> '1000', '1,366' -> '1366'."""
  parts = words.lower().replace("-", " ").split()
  if not parts or not all(w in WORDS for w in parts): return words.replace(",", "")
  value = 1 if parts[0] in ("hundred", "thousand") else 0
  for w in parts:
    value = value * WORDS[w] if w in ("hundred", "thousand") else value + WORDS[w]
  return str(value)


def printed_digits(nb) -> set[str]:
  digits = set(re.findall(r"\d[\d,]*(?:\.\d+)?", outputs_text(nb)))
  digits |= {d.replace(",", "") for d in digits}
  return digits | {d.split(".")[0] for d in digits if re.fullmatch(r"\d+\.0+", d)}   # a count printed as 6.0


def unbacked_readings(nb) -> list[tuple[int, str, str, str]]:
  """(cell index, reading, sentence, why) for each number read off this run that no output shows: a number with a
  unit in a sentence that points at the outputs (even where the paragraph quotes the book), an approximate count, a
  vague amount or a fraction that points at no printed number. A sentence that names its source is left alone."""
  digits, found = printed_digits(nb), []
  for k, para in prose(nb, QUOTED_CLAIM):
    quoted = QUOTED.search(para)
    for sent in sentences(MENTIONED.sub(" ", CODE.sub(" ", para))):
      flat = " ".join(sent.split())
      introduces = sent.rstrip().endswith(":") or EXPECTED.search(sent)   # it introduces or describes an output
      for part in re.split(r"(?<=;)\s+", sent):   # a pointer backs its own part of the sentence, up to a ";"
        if introduces or READS.search(part): continue
        for clause in CLAUSE.split(part):   # a clause that names its source (the book, NOTES n) is the source's
          if QUOTED.search(clause): continue
          for rule, why in ((VAGUE_AMOUNT, "a vague amount"), (FRACTION, "a fraction of another number")):
            found += [(k, m.group(0), flat, why + " that points at no printed number") for m in rule.finditer(clause)]
      if QUOTED.search(sent): continue   # this sentence names its source
      if quoted and HERE.search(sent):   # the number rule skipped this paragraph; this sentence is about this run
        for m in NUMBER.finditer(sent):
          if m.group(0)[-1] in "x×" and re.match(r"\s?\d", sent[m.end():]): continue
          if m.group(1).replace(",", "") not in digits:
            found.append((k, m.group(0), flat, "a number beside this run's outputs that none of them shows"))
      for m in APPROX_COUNT.finditer(sent):
        if number_value(m.group(1)) not in digits: found.append((k, m.group(0), flat, "an approximate count"))
  return found


def check(paths: list[Path]) -> int:
  bad = 0
  for p in paths:
    nb = nbformat.read(p, as_version=4)
    name = p.relative_to(ROOT) if p.is_relative_to(ROOT) else p
    for k, number, sent in unbacked(nb):
      bad += 1
      print(f"{name}: cell {k}: {number!r} is shown by no output: {sent[:160]}")
    for k, claim, sent, why in unbacked_claims(nb):
      if (waiver := WAIVED.get(p.name, {}).get(claim)):
        print(f"{name}: cell {k}: {claim!r}: waived ({waiver})")
        continue
      bad += 1
      print(f"{name}: cell {k}: {claim!r}: {why}; show it or reword: {sent[:160]}")
    for rule in (growth_claims, bound_claims):
      for k, claim, sent, why in rule(nb):
        bad += 1
        print(f"{name}: cell {k}: {claim!r}: {why}; make it true or reword: {sent[:160]}")
    for k, reading, sent, why in unbacked_readings(nb):
      bad += 1
      print(f"{name}: cell {k}: {reading!r}: {why}; print it, compute the sentence, or reword: {sent[:160]}")
  return bad


if __name__ == "__main__":
  files = [Path(a).resolve() for a in sys.argv[1:]] or notebooks()
  n = check(files)
  print(f"prose check: {n} number(s), count(s) or comparison(s) that no output backs" if n else
        f"prose check: {len(files)} notebooks, every number, count and comparison backed or quoted")
  sys.exit(1 if n else 0)

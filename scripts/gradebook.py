"""What grade-all writes, and where: an output folder it can only write inside, the gradebook, and the same marks in
the form Canvas's and Moodle's grade imports take.

The output folder is opened one component at a time from `/` with O_NOFOLLOW (a symbolic link anywhere on its path,
`grades` planted in the submissions folder included, is refused, not followed), and every file and folder in it is
made relative to that open descriptor, with O_NOFOLLOW and O_EXCL, then renamed into place: nothing grade-all writes
can land outside the folder it was given, whatever the students' files are named.

canvas.csv: Canvas's gradebook import ("Student", "ID", "SIS User ID", "SIS Login ID", "Section", then one column
per assignment headed "name (assignment id)"), a row per student with the week's total in its assignment's column.
moodle.csv: Moodle's "Import grades: CSV file" (a column of ids the import maps to a user field, then a grade and a
feedback column per week, each mapped to a grade item on import). Which id column, and each week's assignment name and
id, come from scripts/grading.toml; the student's id is read from the notebook's path by its regular expression.
"""
from __future__ import annotations
import csv
import io
import os
import re
import secrets
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

CONFIG = Path(__file__).resolve().parent / "grading.toml"
FORMULA = ("=", "+", "-", "@", "\t", "\r")
CANVAS_FIXED = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class OutputError(OSError):
  """The output folder cannot be used safely (a link on its path, not a folder): nothing was written."""


def cell(x) -> object:
  """A CSV cell as a spreadsheet may show it: text that would be read as a formula gets a quote before it."""
  if isinstance(x, str):
    x = x.replace("\0", "")
    return "'" + x if x.startswith(FORMULA) else x
  return x


class OutDir:
  """An output folder held open by descriptor: every name in it is opened relative to it, never through a link."""

  def __init__(self, path: Path, make: bool = True):
    self.path = Path(os.path.abspath(path))
    fd = os.open("/", DIR_FLAGS)
    try:
      for part in self.path.parts[1:]:
        child = self._step(fd, part, make)
        os.close(fd)
        fd = child
    except BaseException:
      os.close(fd)
      raise
    self.fd = fd

  def _step(self, parent: int, part: str, make: bool) -> int:
    """part opened in parent (made if missing and make), refused if it is a link or not a folder; parent stays open."""
    try: st = os.stat(part, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
      if not make: raise OutputError(f"{self.path}: {part} does not exist") from None
      try: os.mkdir(part, 0o755, dir_fd=parent)
      except FileExistsError: pass   # made meanwhile: the open below still refuses a link
      st = os.stat(part, dir_fd=parent, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
      raise OutputError(f"--out {self.path}: {part!r} is a symbolic link; grade-all writes only through real folders "
                        "(remove the link, or pass the folder's real path)")
    if not stat.S_ISDIR(st.st_mode): raise OutputError(f"--out {self.path}: {part!r} is not a folder")
    try: return os.open(part, DIR_FLAGS, dir_fd=parent)   # O_NOFOLLOW: a link swapped in since the stat fails here
    except OSError as e:
      raise OutputError(f"--out {self.path}: {part!r} cannot be opened as a folder ({e.strerror})") from None

  def sub(self, name: str) -> "OutDir":
    """A folder inside this one (made if missing), opened the same way."""
    if "/" in name or name in ("", ".", ".."): raise ValueError(f"sub: name {name!r} must be one plain component")
    child = object.__new__(OutDir)
    child.path = self.path / name
    child.fd = self._step(self.fd, name, True)
    return child

  def identity(self) -> tuple[int, int]:
    st = os.fstat(self.fd)
    return st.st_dev, st.st_ino

  def write(self, name: str, data: str | bytes) -> None:
    """name in this folder replaced by data: written to a new file (O_EXCL, O_NOFOLLOW), then renamed over name
    (a rename replaces a link named name, it never writes through it)."""
    if "/" in name or name in ("", ".", ".."): raise ValueError(f"write: name {name!r} must be one plain component")
    raw = data.encode("utf-8", "replace") if isinstance(data, str) else data
    tmp = f".{name[:100]}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=self.fd)
    try:
      with os.fdopen(fd, "wb") as f: f.write(raw)
      os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
    except BaseException:
      try: os.unlink(tmp, dir_fd=self.fd)
      except OSError: pass
      raise

  def read(self, name: str, limit: int = 64 << 20) -> bytes | None:
    """name's bytes if it is a regular file here (never through a link), else None."""
    try: fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self.fd)
    except OSError: return None
    with os.fdopen(fd, "rb") as f:
      if not stat.S_ISREG(os.fstat(f.fileno()).st_mode): return None
      return f.read(limit)

  def names(self) -> list[str]:
    return sorted(os.listdir(self.fd))

  def close(self) -> None:
    os.close(self.fd)


def csv_text(rows: list[list]) -> str:
  buf = io.StringIO()
  w = csv.writer(buf)
  for row in rows: w.writerow([cell(x) for x in row])
  return buf.getvalue()


@dataclass
class Config:
  """scripts/grading.toml, read and checked."""
  id_pattern: re.Pattern
  canvas_id_column: str = "SIS Login ID"
  canvas_assignments: dict[int, tuple[str, str]] = field(default_factory=dict)   # week -> (name, id)
  moodle_id_column: str = "ID number"
  moodle_grade: str = "Week {week}"
  moodle_feedback: str = "Week {week} feedback"

  def student_id(self, student: str) -> str | None:
    m = self.id_pattern.search(student)
    if m is None: return None
    return m.group("id") if "id" in self.id_pattern.groupindex else m.group(0)

  def canvas_header(self, week: int) -> str:
    name, ident = self.canvas_assignments.get(week, (f"Week {week}", ""))
    return f"{name} ({ident})" if ident else name


def load_config(path: Path = CONFIG) -> Config:
  with open(path, "rb") as f: raw = tomllib.load(f)
  try: pattern = re.compile(raw.get("student", {}).get("id", r"^(?P<id>[^_/]+)"))
  except re.error as e: raise ValueError(f"{path}: [student] id is not a regular expression: {e}") from None
  canvas, moodle = raw.get("canvas", {}), raw.get("moodle", {})
  column = canvas.get("id_column", "SIS Login ID")
  if column not in CANVAS_FIXED[1:4]:
    raise ValueError(f"{path}: [canvas] id_column must be one of {CANVAS_FIXED[1:4]}, not {column!r}")
  assignments = {}
  for week, a in canvas.get("assignments", {}).items():
    if not str(week).isdigit() or not isinstance(a, dict) or not a.get("name"):
      raise ValueError(f"{path}: [canvas.assignments] {week} must be a week number = {{ name = ..., id = ... }}")
    ident = str(a.get("id", ""))
    if ident and not ident.isdigit(): raise ValueError(f"{path}: [canvas.assignments] {week}: id must be digits")
    assignments[int(week)] = (str(a["name"]), ident)
  return Config(pattern, column, assignments, moodle.get("id_column", "ID number"),
                moodle.get("grade_column", "Week {week}"), moodle.get("feedback_column", "Week {week} feedback"))


def by_student(rows: list[dict], config: Config) -> tuple[dict[str, dict[int, dict]], list[str]]:
  """id -> week -> the row that counts (of two notebooks for one week, the higher total), and the problems found."""
  out: dict[str, dict[int, dict]] = {}
  problems = []
  for row in rows:
    if row["week"] == "": continue   # not graded: no week to put it in (its error is in gradebook.csv)
    ident = config.student_id(row["student"])
    if ident is None:
      problems.append(f"{row['student']}: [student] id in grading.toml does not match; its path is its id")
      ident = row["student"]
    weeks = out.setdefault(ident, {})
    old = weeks.get(row["week"])
    if old is not None: problems.append(f"{ident}: two notebooks for week {row['week']}; the higher total counts")
    if old is None or row["total"] > old["total"]: weeks[row["week"]] = row
  return out, problems


def canvas_rows(rows: list[dict], config: Config) -> list[list]:
  students, _ = by_student(rows, config)
  weeks = sorted({w for s in students.values() for w in s})
  head = CANVAS_FIXED + [config.canvas_header(w) for w in weeks]
  at = CANVAS_FIXED.index(config.canvas_id_column)
  out = [head]
  for ident in sorted(students):
    fixed = [ident, "", "", "", ""]
    fixed[at] = ident
    out.append(fixed + [students[ident][w]["total"] if w in students[ident] else "" for w in weeks])
  return out


def moodle_rows(rows: list[dict], config: Config) -> list[list]:
  students, _ = by_student(rows, config)
  weeks = sorted({w for s in students.values() for w in s})
  head = [config.moodle_id_column]
  for w in weeks: head += [config.moodle_grade.format(week=w), config.moodle_feedback.format(week=w)]
  out = [head]
  for ident in sorted(students):
    line = [ident]
    for w in weeks:
      row = students[ident].get(w)
      line += ["", ""] if row is None else [row["total"], summary(row)]
    out.append(line)
  return out


def summary(row: dict) -> str:
  """One line of feedback for an LMS: the points per task (the whole table is in feedback/)."""
  tasks = "; ".join(f"{t}: {p:g}" for t, p in row["tasks"].items())
  return f"{row['total']:g}/{row['max']:g}" + (f" ({tasks})" if tasks else "") + \
    (f"; {row['error'][:200]}" if row["error"] else "")

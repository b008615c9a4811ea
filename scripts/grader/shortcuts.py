"""Shortcut detection: a task that must implement X scores nothing when the student's own code uses uopc's finished
X. It reads the notebook as data in the grader's process (ast, never executed); a hidden test names what its task
must not use on a line `# SHORTCUTS: name, name`. Cells the student left exactly as the assignment gave them are not
read (the worked examples may use those names). A determined student can hide a name (getattr with a computed
string); this catches the plain call, which is what a student who misunderstood the task writes."""
from __future__ import annotations
import ast
import re

WORD = re.compile(r"[A-Za-z_]\w*")


def names(source: str) -> set[str]:
  """Every identifier the code mentions: names, attributes, imports, and strings that are one identifier."""
  try: tree = ast.parse(source)
  except (SyntaxError, ValueError): return set(WORD.findall(source))   # not Python: read every word of it
  out = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Name): out.add(node.id)
    elif isinstance(node, ast.Attribute): out.add(node.attr)
    elif isinstance(node, ast.alias): out.update(node.name.split(".")); out.add(node.asname or "")
    elif isinstance(node, ast.ImportFrom) and node.module: out.update(node.module.split("."))
    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
      out.add(node.value)   # getattr(optim, "AdamW"), not the words of a docstring
  return out - {""}


def used(cells: list[str], given: set[str], forbidden: list[str]) -> list[str]:
  """The forbidden names that the cells the student wrote or changed (not in `given`) mention, in order."""
  mine = set().union(*(names(c) for c in cells if c not in given)) if cells else set()
  return [f for f in forbidden if f in mine]

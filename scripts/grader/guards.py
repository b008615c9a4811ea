"""Shortcuts: a task whose answer uopc already holds cannot reach that answer while it is graded, by any route.

A hidden test declares what its task must not use on a line `# SHORTCUTS: uopc.optim.AdamW, uopc.nn.layers.Module.
num_parameters` (the module that defines it, then a function, a class or a class's method). For the sandbox, the
grader writes a copy of the student tree in which each of those definitions is rewritten, in its module's source, to
raise `ShortcutUnavailable` naming the task: an import, `importlib`, `getattr` with a computed name or `exec` of
decoded text all meet the same rewritten code, because the original text is not in the sandbox at all. A graded
function that calls one fails its test with that message; a self-check elsewhere in the notebook (a cell comparing the
answer with uopc's) stops its cell, which costs no points: the grader says which cell stopped and why
(`stops`), and every function defined before the stop is graded as usual.

`# SHORTCUTS alone: ...` is for definitions that the rest of the notebook needs (week 3's lowering, which the given
code of other tasks uses): those tests get a sandbox of their own, in which the notebook runs again with those
definitions rewritten; the other tests run where they are intact.

`ShortcutUnavailable` derives from BaseException, so that no `except Exception` in uopc's code or the student's
swallows it and falls back to another path that would compute the same answer.
"""
from __future__ import annotations
import ast
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

LINE = re.compile(r"^\s*#\s*SHORTCUTS(\s+alone)?\s*:\s*(.+?)\s*$", re.M)
NAME = re.compile(r"^uopc(\.[A-Za-z_]\w*)+$")
EXCEPTION = "ShortcutUnavailable"
STOP = re.compile(rf"^{EXCEPTION}: ")


@dataclass(frozen=True)
class Guard:
  name: str        # uopc.optim.AdamW
  alone: bool      # in a sandbox of its own


def parse(source: str) -> list[Guard]:
  """The guards a hidden test's cell declares (every SHORTCUTS line of it)."""
  out = []
  for m in LINE.finditer(source):
    for name in (n.strip() for n in m.group(2).split(",")):
      if name: out.append(Guard(name, bool(m.group(1))))
  return out


def locate(course: Path, name: str) -> tuple[Path, list[str]]:
  """(the module file that defines `name`, the path of the definition inside it), or a ValueError naming what is
  missing: the declarations are checked against the tree before anything runs."""
  if not NAME.match(name): raise ValueError(f"SHORTCUTS: {name!r} is not a qualified name of uopc (uopc.module.name)")
  parts = name.split(".")
  for k in range(len(parts) - 1, 0, -1):
    base = course.joinpath(*parts[:k])
    for f in (base.with_suffix(".py"), base / "__init__.py"):
      if f.is_file():
        inside = parts[k:]
        if _find(ast.parse(f.read_text()), inside) is None:
          raise ValueError(f"SHORTCUTS: {name}: {'.'.join(parts[:k])} defines no {'.'.join(inside)} (name the module "
                           f"that defines it, not one that imports it)")
        return f, inside
  raise ValueError(f"SHORTCUTS: {name}: no module of it in the student tree")


def _find(tree: ast.AST, path: list[str]) -> ast.AST | None:
  node = tree
  for part in path:
    body = getattr(node, "body", [])
    node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                 and n.name == part), None)
    if node is None: return None
  return node


def _raising(message: str) -> list[ast.stmt]:
  return ast.parse(f"raise {EXCEPTION}({message!r})").body


def _blank(node: ast.AST, message: str) -> None:
  """node's code replaced by the raise: a function's body, or every method of a class (and its __new__, so that not
  even an instance of it can be made)."""
  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
    doc = [node.body[0]] if ast.get_docstring(node) else []
    node.body = doc + _raising(message)
    return
  for item in node.body:
    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)): _blank(item, message)
  if not any(isinstance(i, ast.FunctionDef) and i.name == "__new__" for i in node.body):
    new = ast.parse("def __new__(cls, *args, **kwargs): pass").body[0]
    new.body = _raising(message)
    node.body.append(new)


def message(name: str, tasks: list[str]) -> str:
  quoted = [f"{t!r}" for t in tasks]
  said = f"task {quoted[0]}" if len(quoted) == 1 else f"tasks {', '.join(quoted[:-1])} and {quoted[-1]}"
  return (f"{name} is uopc's answer to {said}, so it is not available while this week is graded: write it "
          f"yourself (a self-check against it outside the graded function costs nothing)")


def rewrite(source: str, found: dict[tuple[str, ...], str]) -> str:
  """The module's source with each definition at path (a key of found) raising found[path]."""
  tree = ast.parse(source)
  for path, msg in found.items(): _blank(_find(tree, list(path)), msg)
  exc = ast.parse(f"class {EXCEPTION}(BaseException):\n  'A finished part of uopc that a graded task must not use.'")
  at = next((k for k, n in enumerate(tree.body) if not (isinstance(n, ast.ImportFrom) and n.module == "__future__")
             and not (k == 0 and isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))), len(tree.body))
  tree.body[at:at] = exc.body
  return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def guarded_tree(course: Path, guards: dict[str, list[str]], dest: Path | None = None) -> Path:
  """A copy of the course tree in which every name of `guards` (name -> the tasks it answers) raises; the files are
  readable by every sandbox's UID and writable by none."""
  dest = dest or Path(tempfile.mkdtemp(prefix="uopc-guarded-"))
  shutil.copytree(course, dest, dirs_exist_ok=True)
  by_file: dict[Path, dict[tuple[str, ...], str]] = {}
  for name, tasks in guards.items():
    f, inside = locate(course, name)
    by_file.setdefault(f.relative_to(course), {})[tuple(inside)] = message(name, tasks)
  for rel, found in by_file.items():
    target = dest / rel
    text = rewrite((course / rel).read_text(), found)
    target.chmod(0o644)
    target.write_text(text)
  return dest

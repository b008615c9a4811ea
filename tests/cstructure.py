"""Reading the C the renderer prints as a tree of loops (tests/ is on sys.path when pytest runs them): the
structural checks of chapter 5 and of the week-3 GEMMs."""
import re
from dataclasses import dataclass, field


FOR = re.compile(r"^for \(int (ridx\d+) = 0; \1 < (\w+); \1\+\+\) \{$")


@dataclass(eq=False)
class Loop:
  var: str                                  # "ridx0", or "" for the function body
  end: str
  parallel: bool = False
  body: list = field(default_factory=list)  # statements (str) and nested Loops, in order

  def loops(self) -> list["Loop"]: return [x for x in self.body if isinstance(x, Loop)]
  def shape(self) -> tuple:
    """(var, end, [child shapes]): just the nesting."""
    return (self.var, self.end, [c.shape() for c in self.loops()])
  def walk(self):
    yield self
    for c in self.loops(): yield from c.walk()


def parse_c(src: str) -> Loop:
  """The function body as a tree of loops. Lines are the renderer's: one statement or brace per line."""
  lines = [ln.strip() for ln in src.splitlines()]
  assert lines[0].startswith("void ") and lines[0].endswith("{") and lines[-1] == "}", "not one C function"
  stack, pragma = [Loop("", "")], False
  for ln in lines[1:-1]:
    m = FOR.match(ln)
    assert not pragma or m, f"the pragma must sit directly above a for loop, not above {ln!r}"
    if ln == "#pragma omp parallel for": pragma = True; continue
    if m:
      loop = Loop(m.group(1), m.group(2), parallel=pragma)
      stack[-1].body.append(loop); stack.append(loop)
    elif ln == "}": stack.pop()
    else: stack[-1].body.append(ln)
    pragma = False
  assert len(stack) == 1, "unbalanced braces"
  return stack[0]


DECL = re.compile(r"^\w[\w ]*? (acc\d+)(\[\d+\])?;$")


def declared_in(loop: Loop) -> list[str]:
  """Accumulators declared directly in this loop's body."""
  return [m.group(1) for s in loop.body if isinstance(s, str) and (m := DECL.match(s))]


def state_inside_parallel_loop(src: str) -> bool:
  """One `#pragma omp parallel for` loop, at the top of the function, and every accumulator declared inside it.

  State declared outside the parallel loop is shared by all threads: a race (NOTES 9)."""
  fn = parse_c(src)
  parallel = [x for x in fn.walk() if x.parallel]
  if len(parallel) != 1 or parallel[0] not in fn.loops(): return False
  inside = set(parallel[0].walk())
  return not any(declared_in(x) for x in fn.walk() if x not in inside)

"""The book's own code and experiments, for tests, chapters, notes and solutions.

  book = load_example("flash_attention")   # examples/flash_attention.py, the only copy of the book's listings
  with reshape_simplify(False): ...         # section 11.5: the RESHAPE rule without its simplify

examples/ is not a package (the book runs its files as scripts), so load_example imports a file from it by path,
once per process, under its own name: `import flash_attention` afterwards finds the same module.
"""
from __future__ import annotations
import contextlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from uopc.helpers import cache

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load_example(name: str) -> ModuleType:
  """examples/<name>.py as a module (imported once; later calls return the same module)."""
  if name in sys.modules: return sys.modules[name]
  path = EXAMPLES / f"{name}.py"
  if not path.is_file(): raise FileNotFoundError(f"no example {name!r}: {path} does not exist")
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module
  try: spec.loader.exec_module(module)
  except BaseException:
    del sys.modules[name]
    raise
  return module


@contextlib.contextmanager
def reshape_simplify(on: bool):
  """The experiment of section 11.5. With on=False, rangeify's RESHAPE rule gets its indices unsimplified, as in the
  first version of uopc; every other caller of simplify (the final cleanup in lower included) is unaffected. This is
  the book's method, patching uopc.rangeify.simplify (only the RESHAPE rule calls it through that name). Plans made
  inside the block are kept apart from the ordinary plan cache."""
  import uopc.rangeify
  from uopc.kernelize import isolated_plan_cache
  real = uopc.rangeify.simplify
  with isolated_plan_cache():
    if not on: uopc.rangeify.simplify = lambda u: u
    try: yield
    finally: uopc.rangeify.simplify = real


_flash_opts: dict[int, type] = cache("book.flash_opts", {})   # FlashOpt subclasses by upcast


def flash_opt(upcast: int) -> type:
  """The book's FlashOpt (section 11.4) with the head dimension upcast by `upcast` instead of min(D, 16): a subclass
  that keeps its layout pass and threading and changes that one number. One class per upcast, because plans are
  cached by optimizer: flash_opt(16) renders exactly what FlashOpt renders."""
  if upcast not in _flash_opts:
    book = load_example("flash_attention")

    def lower(body, out):
      opts = book.Opts(upcast={len(body.shape) - 1: min(body.shape[-1], upcast)}, thread=0)
      return book.lower(body, out, book.Ctx(opts=opts))
    _flash_opts[upcast] = type(f"FlashOpt{upcast}", (book.FlashOpt,), {"lower": staticmethod(lower)})
  return _flash_opts[upcast]

"""Program: a C function compiled (or found in the cache), loaded with cffi, called with NumPy arrays.

  prg = Program(src, "add")       # compiles, or loads the cached object for this exact source and compiler
  prg(a, b, out)                  # arrays are passed by pointer, never copied; checked before any C runs

A rendered kernel carries its signature (uopc.renderer.Signature, read by args_of); hand-written C has its
`void name(...)` line read (signature_from_c). Each parameter becomes an Arg: what a caller must pass.
"""
from __future__ import annotations
import re
import shutil
import time
from dataclasses import dataclass
import numpy as np
import cffi
from uopc.dtype import np_dtype
from uopc.signature import Signature, check_identifier
from uopc.runtime import build, calls
from uopc.runtime.flags import FLAGS, with_prelude
from uopc.runtime.toolchain import CompileError, cache_dir, compiler, numbered

# C parameter types a kernel may take, and what a caller must pass for each
C_TO_NP = {"float": np.float32, "double": np.float64, "int": np.int32, "long": np.int64, "long long": np.int64,
           "int32_t": np.int32, "int64_t": np.int64, "_Float16": np.float16, "unsigned char": np.uint8,
           "bool": np.bool_, "char": np.int8, "signed char": np.int8, "unsigned int": np.uint32,
           "unsigned long long": np.uint64}


@dataclass(frozen=True)
class Arg:
  """What a caller must pass for one kernel parameter."""
  ctype: str            # the C type, for messages and for the cffi declaration
  dtype: np.dtype
  pointer: bool
  writes: bool          # a pointer the kernel may store through (a read-only array is refused)
  size: int | None      # elements the kernel indexes (known for rendered kernels, None for hand-written C)


def signature_from_c(src: str, name: str) -> list[Arg]:
  """The parameters of hand-written C `void name(...)`. Rendered kernels carry their signature and never get here."""
  m = re.search(r"\bvoid\s+" + re.escape(name) + r"\s*\(([^)]*)\)", src)
  if m is None: raise CompileError(f"no function `void {name}(...)` in the source:\n{numbered(src)}")
  params = [p.strip() for p in m.group(1).split(",") if p.strip() and p.strip() != "void"]
  out = []
  for p in params:
    p = re.sub(r"\b(restrict|__restrict|__restrict__)\b", "", p)
    is_ptr, is_const = "*" in p, bool(re.search(r"\bconst\b", p))
    words = re.sub(r"\bconst\b", "", p.replace("*", " ")).split()
    base = " ".join(words[:-1])   # drop the parameter name
    if base not in C_TO_NP: raise CompileError(f"{name}: parameter type {base!r} is not supported (in {p!r})")
    out.append(Arg(base, np.dtype(C_TO_NP[base]), is_ptr, is_ptr and not is_const, None))
  return out


def args_of(signature: Signature) -> list[Arg]:
  """A rendered kernel's parameters, from the signature its renderer returned."""
  from uopc.render_c import C
  return [Arg(C.type(p.dtype), np_dtype(p.dtype), True, p.writes, p.size) for p in signature.params]


def check_name(name: str) -> str:
  """A kernel's name goes into a file name and a cdef: only a C identifier may (`../../x` would write outside the
  cache before cffi rejected it)."""
  return check_identifier(name)


class Program:
  """A compiled C function, callable with NumPy arrays and Python scalars. src is C text: a rendered kernel
  (render_c's result carries its signature) or hand-written C, whose `void name(...)` line is read."""

  def __init__(self, src: str, name: str, flags: tuple[str, ...] | None = None, linkable: bool = False):
    self.src, self.name = src, check_name(name)   # the name becomes a file name and a symbol: checked first
    self._quick: tuple | None = None
    self.threads: int | None = None   # OpenMP threads for its parallel loops: None = OpenMP's own choice
    full = with_prelude(src)
    signature = getattr(src, "signature", None)
    self.params = args_of(signature) if signature is not None else signature_from_c(src, name)
    self.param_names = tuple(p.name for p in signature.params) if signature is not None else ()   # data{slot}
    self.scalar_slots = tuple(k for k, a in enumerate(self.params) if not a.pointer)
    cc = compiler()
    t0 = time.perf_counter()
    self.flags, self.path, self.cached = build.locate(full, name, cc, tuple(flags) if flags is not None else FLAGS)
    if not self.cached:
      with build.build_lock(self.path):
        # linkable (a plan's kernel), where a step can link kernels: its object file kept for a step to link
        # (uopc.runtime.graph.kernel_objects), no second compile
        keep = linkable and build.links_objects(cc)
        if not build.intact(self.path): build.build(full, self.path, cc, self.flags, keep_object=keep)
    self.compile_s = time.perf_counter() - t0
    # one FFI per kernel: a second cdef of the same function name in one FFI would fail
    self.ffi = cffi.FFI()
    # a rendered kernel takes only buffers: declared as void* here, so cffi need not parse every C type (_Float16)
    decl = ", ".join("void*" if signature is not None else f"{'' if a.writes or not a.pointer else 'const '}{a.ctype}"
                     f"{'*' if a.pointer else ''}" for a in self.params)
    self.ffi.cdef(f"void {name}({decl});")
    try: self.lib = self.ffi.dlopen(str(self.path))
    except OSError:
      # a damaged entry whose checksum file was damaged the same way: rebuild it in place, once (dlopen failed,
      # so this process has not mapped that path)
      with build.build_lock(self.path): build.build(full, self.path, cc, self.flags)
      self.cached = False
      self.lib = self.ffi.dlopen(str(self.path))
    self.fn = getattr(self.lib, name)
    self.rendered = signature is not None
    self._buffer_type = ["char[]" if self.rendered else f"{a.ctype}[]" for a in self.params]   # cffi's view of each
    # the same types parsed once, and cffi's from_buffer without its wrapper, which parses the type's name at every
    # call: a GPT step converts about 4,000 arguments (NOTES 37)
    self._ctypes = [self.ffi.typeof(t) for t in self._buffer_type]
    backend = getattr(self.ffi, "_backend", None)
    self._from_buffer = backend.from_buffer if hasattr(backend, "from_buffer") else \
      lambda ctype, arg, writes: self.ffi.from_buffer(ctype, arg, require_writable=writes)

  def __repr__(self): return f"Program({self.name!r}, {len(self.params)} params, cached={self.cached})"

  def _convert(self, k: int, arg, a: Arg):
    if a.pointer and type(arg) is np.ndarray and (arg.dtype is a.dtype or arg.dtype == a.dtype):   # the common case
      flags = arg.flags
      if flags.c_contiguous and (flags.writeable or not a.writes) and (a.size is None or arg.size >= a.size):
        return self._from_buffer(self._ctypes[k], arg, a.writes)
    return self._convert_checked(k, arg, a)

  def _convert_checked(self, k: int, arg, a: Arg):
    want = a.dtype.name
    if a.pointer:
      if not isinstance(arg, np.ndarray):
        raise TypeError(f"{self.name}: argument {k} must be a NumPy array of {want} ({a.ctype}*), "
                        f"got {type(arg).__name__}")
      if arg.dtype != a.dtype:
        raise TypeError(f"{self.name}: argument {k} has dtype {arg.dtype}, the kernel expects {want} ({a.ctype}*)")
      if not arg.flags.c_contiguous:
        raise ValueError(f"{self.name}: argument {k} (shape {arg.shape}, strides {arg.strides}) is not C-contiguous; "
                         "pass np.ascontiguousarray(x)")
      if a.writes and not arg.flags.writeable:
        raise ValueError(f"{self.name}: argument {k} is read-only, but the kernel may write through {a.ctype}*; "
                         "pass a copy")
      if a.size is not None and arg.size < a.size:
        raise ValueError(f"{self.name}: argument {k} has {arg.size} elements, the kernel indexes {a.size}")
      return self.ffi.from_buffer(self._buffer_type[k], arg, require_writable=a.writes)
    if isinstance(arg, np.ndarray) and arg.ndim != 0:
      raise TypeError(f"{self.name}: argument {k} is a scalar {a.ctype}, got an array of shape {arg.shape}")
    if np.issubdtype(a.dtype, np.integer):
      if isinstance(arg, (float, np.floating)):
        raise TypeError(f"{self.name}: argument {k} is an integer ({a.ctype}), got {arg!r}")
      return int(arg)
    return float(arg)

  def _count_error(self, got: int) -> TypeError:
    """The wrong number of arguments, and why a rendered kernel has fewer parameters than its graph's slots: a buffer
    its graph never loads or stores is not a parameter of its C function."""
    if not self.params: return TypeError(f"{self.name} takes 0 arguments (it reads and writes no buffer: does its SINK "
                                         f"store anything?), got {got}")
    names = f" ({', '.join(self.param_names)})" if self.param_names else ""
    slots = [int(n[4:]) for n in self.param_names if re.fullmatch(r"data\d+", n)]
    gaps = sorted(set(range(max(slots, default=-1) + 1)) - set(slots))
    why = ""
    if gaps and got > len(self.params):
      one = len(gaps) == 1
      which, it = " and ".join(f"buffer {s}" for s in gaps), "it" if one else "them"
      why = (f": {which} {'is' if one else 'are'} not read by this kernel, nor written (its graph has no load or store "
             f"of {', '.join(f'data{s}' for s in gaps)}), so the C function has no parameter for {it}. "
             f"Pass only the buffers it has, or find the load or store the graph lost")
    return TypeError(f"{self.name} takes {len(self.params)} arguments{names}, got {got}{why}")

  def __call__(self, *args):
    if len(args) != len(self.params): raise self._count_error(len(args))
    calls.call_kernel(self, [self._convert(k, a, p) for k, (a, p) in enumerate(zip(args, self.params))])


def clear_cache() -> None:
  """Delete every compiled object in the cache directory (the next Program compiles again)."""
  shutil.rmtree(cache_dir(), ignore_errors=True)

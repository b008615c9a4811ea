"""The C-style renderer: a linearized loop program -> the source of one kernel, and its typed signature.

One renderer serves every C-like language. A dialect (C with OpenMP, OpenCL C, CUDA C) is a subclass that sets a
few class attributes: the words before the function, how a buffer parameter is declared, the type names, what a
THREAD loop is. Loads are named val, shared ALU results alu, accumulators acc{slot}, parameters data{slot}, loop
variables ridx{id}; an ALU result used once is written inline. Same graph, same text.

render() returns the source together with its Signature (each buffer's dtype, element count and whether the kernel
writes it), so a runtime never has to read the parameters back out of the text.
"""
from __future__ import annotations
import functools
import math
import numbers
import re
from dataclasses import dataclass
from typing import Callable, ClassVar
from uopc.uop import UOp, Ops, AxisType, ALU, base_alloc, is_local
from uopc.dtype import DType, dtypes
from uopc.linearize import linearize, rname
from uopc.codegen.gpudims import Launch, launch_of
from uopc.codegen.vector import vector_dtypes
from uopc.codegen.cint import int_semantics


@dataclass(frozen=True)
class Param:
  """One kernel parameter: data{slot}, a pointer to `size` elements of dtype."""
  name: str
  dtype: DType
  size: int
  writes: bool     # the kernel stores through it (an input may be read-only memory)


@dataclass(frozen=True)
class Signature:
  params: tuple[Param, ...]
  launch: Launch = Launch()     # work-groups x work-items (a GPU kernel; one of one for C)

  def __len__(self): return len(self.params)


class KernelSource(str):
  """The text of a kernel (a str, as the book prints it) that also knows its function name and signature."""
  name: str
  signature: Signature

  def __new__(cls, text: str, name: str, signature: Signature):
    s = super().__new__(cls, text)
    s.name, s.signature = name, signature
    return s


@dataclass
class Rendered:
  src: KernelSource
  flops: int                    # float ops executed: an inlined op runs where its user is written
  acc_trips: dict[int, int]     # ALLOC slot -> how many times its declaration runs (trips of the loops around it)
  accesses: int = 0             # loads and stores executed: the kernel's work, for the CPU's one-thread rule

  @property
  def signature(self) -> Signature: return self.src.signature


IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_identifier(name: str, what: str = "kernel name") -> str:
  """Names reach the source text: only C identifiers do (no spaces, quotes, slashes or keywords of the shell)."""
  if not isinstance(name, str) or not IDENTIFIER.fullmatch(name) or len(name) > 200:
    raise ValueError(f"{what} {name!r} is not a C identifier (letters, digits and _, not starting with a digit)")
  return name


def _max(r, d, a: str, b: str) -> str:
  """max(a, b) that is NaN when either is, as NumPy's and PyTorch's max: `a!=a` keeps a NaN in a, the compare gives
  b when b is NaN. The book's ((a>b)?a:b) (book_max) returns b when a is NaN, so a max reduction's update
  acc = ((acc>x)?acc:x) drops a NaN the moment a number follows it (chapter 11's pitfall)."""
  if r.book_max or not d.is_float: return f"(({a}>{b})?{a}:{b})"
  return f"(({a}>{b}||{a}!={a})?{a}:{b})"


def _fn(name: str):
  """A C math function: exp2f for float, exp2 for double."""
  return lambda r, d, x: f"{name}{'f' if d is dtypes.f32 else ''}({x})"


class CStyleRenderer:
  """The renderer every C-like dialect shares. Subclasses change the class attributes, not the walk."""
  device: ClassVar[str] = "CPU"
  kernel_prefix: ClassVar[str] = "void "                # before the name ({threads}, {block}: the work-group size)
  buffer_decl: ClassVar[str] = "{type}* restrict {name}"
  thread_pragma: ClassVar[str | None] = "#pragma omp parallel for"   # written above a THREAD loop
  # GPU words (chapter 12): a SPECIAL launch index, a work-group barrier, the qualifier of a local-memory array
  code_for_workitem: ClassVar[dict[str, str]] = {}     # "gidx"/"lidx" -> the expression, {dim} 0 1 2, {xyz} x y z
  barrier: ClassVar[str | None] = None
  smem_prefix: ClassVar[str | None] = None
  # dtypes a GPU dialect can only load (into a float), never compute in: dtype -> (pointer type, load statement)
  load_only: ClassVar[dict[DType, tuple[str, str]]] = {}
  types: ClassVar[dict[DType, str]] = {
    dtypes.f32: "float", dtypes.f64: "double", dtypes.f16: "_Float16", dtypes.i32: "int", dtypes.i64: "long long",
    dtypes.u8: "unsigned char", dtypes.i8: "signed char", dtypes.bool: "bool"}
  book_max: ClassVar[bool] = False   # write a float MAX as the book prints it, ((a>b)?a:b) (Options.book_max)
  # how each ALU op is written, given the renderer, the result dtype and the rendered sources
  code_for_op: ClassVar[dict[Ops, Callable]] = {
    Ops.ADD: lambda r, d, a, b: f"({a}+{b})", Ops.MUL: lambda r, d, a, b: f"({a}*{b})",
    Ops.IDIV: lambda r, d, a, b: f"({a}/{b})", Ops.MOD: lambda r, d, a, b: f"({a}%{b})",
    Ops.MAX: _max,
    Ops.CMPLT: lambda r, d, a, b: f"({a}<{b})", Ops.CMPNE: lambda r, d, a, b: f"({a}!={b})",
    Ops.AND: lambda r, d, a, b: f"({a}&{b})", Ops.OR: lambda r, d, a, b: f"({a}|{b})",
    Ops.XOR: lambda r, d, a, b: f"({a}^{b})",
    Ops.WHERE: lambda r, d, c, a, b: f"({c}?{a}:{b})",
    Ops.EXP2: _fn("exp2"), Ops.LOG2: _fn("log2"), Ops.SQRT: _fn("sqrt"), Ops.SIN: _fn("sin"),
    Ops.RECIP: lambda r, d, x: f"({r.const(1.0, d)}/{x})",
    Ops.CAST: lambda r, d, x: f"(({r.type(d)}){x})",
  }

  def for_options(self, options) -> CStyleRenderer:
    """This dialect as the options ask: with Options.book_max, a subclass that writes the book's MAX."""
    if not getattr(options, "book_max", False) or self.book_max: return self
    return _book_variant(type(self))

  def type(self, dtype: DType) -> str:
    if dtype.count > 1: return self.vector_type(dtype)
    if dtype not in self.types:
      raise TypeError(f"{type(self).__name__}: dtype {dtype} is not supported on device {self.device}")
    return self.types[dtype]

  # ---- vectors (uopc.codegen.vector): a dialect without them says so ----
  def vector_type(self, dtype: DType) -> str:
    raise NotImplementedError(f"{type(self).__name__}: vector dtype {dtype!r} has no form on device {self.device}")
  def vector_preamble(self, used: set[DType]) -> list[str]:
    """Lines before the function that the vector types need (here none: vector_type refuses any vector)."""
    for d in used: self.vector_type(d)
    return []
  def vectorize(self, u: UOp, srcs: list[str]) -> str:
    """Lanes gathered into a vector: a broadcast (a scalar meeting an all-zero vector fills every lane), or a list."""
    if u.dtype.kind == "b": srcs = [f"-(int){x}" for x in srcs]   # a mask lane is -1 or 0, a bool 1 or 0
    if len(set(u.src)) == 1: return f"(({self.type(u.dtype)}){{}} + {srcs[0]})"
    return f"(({self.type(u.dtype)}){{{', '.join(srcs)}}})"
  def vector_op(self, u: UOp, *srcs: str) -> str | None:
    """An ALU op on vectors, where it is not written as on scalars (None: as on scalars)."""
    return None

  def const(self, v, dtype: DType) -> str:
    if not isinstance(v, numbers.Real):   # anything else would be pasted into the source
      raise TypeError(f"a constant must be a Python number, got {type(v).__name__} {v!r}")
    if dtype.count > 1:   # a broadcast; a true mask lane is all bits set (-1), as a vector comparison gives
      if dtype.kind == "b": return f"(({self.type(dtype)}){{}} - {1 if v else 0})"
      return f"(({self.type(dtype)}){{}} + {self.const(v, dtype.scalar)})"
    if dtype.is_float:
      if math.isnan(v): return "NAN"
      if math.isinf(v): return "INFINITY" if v > 0 else "-INFINITY"
      return f"{v!r}f" if dtype is dtypes.f32 else repr(v)
    if dtype is dtypes.bool: return "1" if v else "0"
    return f"{v}ll" if dtype.itemsize == 8 else str(v)

  def open_loop(self, r: UOp, name: str, bound: str, index_type: str = "int") -> list[str]:
    """The lines that open loop r (a THREAD loop gets the dialect's pragma)."""
    pragma = [self.thread_pragma] if r.arg[1] is AxisType.THREAD and self.thread_pragma else []
    return pragma + [f"for ({index_type} {name} = 0; {name} < {bound}; {name}++) {{"]

  def render(self, sink: UOp, name: str) -> Rendered:
    """The source of `name` computing the loop program under sink, its signature and what it costs."""
    check_identifier(name)
    topo = sink.toposort()
    _check_names(topo)
    lines = linearize(sink)
    uses: dict[UOp, int] = {}
    max_users: set[UOp] = set()   # sources of a MAX: ((a>b)?a:b) writes each twice
    for u in topo:
      for s in u.src: uses[s] = uses.get(s, 0) + 1
      if u.op is Ops.MAX: max_users.update(u.src)
    doubles: set[UOp] = set()     # inline expressions that hold a MAX
    lane_of = {u.src[0] for u in topo if u.op is Ops.GEP}   # vectors whose lanes are read: named (v[i] needs a name)
    # an ALLOC is declared where it is first placed inside loops (its outermost .after), else at the top
    decl_at: dict[UOp, UOp] = {}
    order = {ln.uop: k for k, ln in enumerate(lines) if ln.kind == "node"}
    for u in topo:
      if u.op is Ops.AFTER and u.src[0].op is Ops.ALLOC and u in order:
        a = u.src[0]
        if a not in decl_at or order[u] < order[decl_at[a]]: decl_at[a] = u
    for u in topo:
      # an ALLOC used directly (not through .after) is function-wide state: declared at the top
      used_bare = u.op is Ops.ALLOC and any(x.op is not Ops.AFTER and u in x.src for x in topo)
      # local memory belongs to the work-group: declared once, at the top, whatever loops use it
      if u.op is Ops.ALLOC and (u not in decl_at or used_bare or is_local(u)): decl_at[u] = u

    buffers = sorted({u.arg.slot: u for u in topo if u.op is Ops.BUFFER}.items())
    slots = [s for s, _ in buffers]
    if len(set(slots)) != len([u for u in topo if u.op is Ops.BUFFER]):
      raise ValueError(f"{name}: two different BUFFERs share a slot ({slots})")
    alloc_slots = [u.arg.slot for u in topo if u.op is Ops.ALLOC]
    if len(set(alloc_slots)) != len(alloc_slots):
      raise ValueError(f"{name}: two different ALLOCs share a slot ({sorted(alloc_slots)}): each is acc{{slot}} in the "
                       "source")
    stored = {base_buffer(u.src[0].src[0]) for u in topo if u.op is Ops.STORE and u.src[0].op is Ops.INDEX}
    signature = Signature(tuple(Param(f"data{s}", u.arg.dtype, u.arg.size, u in stored) for s, u in buffers))
    launch = launch_of(topo)
    signature = Signature(signature.params, launch)
    self._check_load_only(topo, signature)
    ptype = lambda p: self.load_only[p.dtype][0] if p.dtype in self.load_only else self.type(p.dtype)
    params = ", ".join(self.buffer_decl.format(type=ptype(p), name=p.name) for p in signature.params)
    # indices are 32-bit unless a buffer has more elements than an int can count: then every int is 64-bit
    wide = any(p.size > INT32_MAX for p in signature.params) or any(u.op is Ops.RANGE and u.src[0].op is Ops.CONST
                                                                     and u.src[0].arg > INT32_MAX for u in topo)
    itype = (lambda d: self.type(dtypes.i64) if d is dtypes.i32 else self.type(d)) if wide else self.type
    block = ",".join(str(b) for b in (launch.block + (1, 1, 1))[:3])
    out = self.vector_preamble(vector_dtypes(topo))
    out.append(f"{self.kernel_prefix.format(threads=launch.threads, block=block)}{name}({params}) {{")
    names: dict[UOp, str] = {}
    ops_in: dict[UOp, int] = {}   # float ops inside a name's inline expression, not yet counted
    trips, flops, accesses = [launch.items], 0, 0   # every work-item runs the body once
    depth, counter = 1, [0]
    def emit(text: str): out.append("  " * depth + text)
    def new_name(prefix: str) -> str:
      counter[0] += 1
      return f"{prefix}{counter[0]}"
    # a one-element ALLOC only ever read at [0] is a plain local variable (a register), anything else an array
    at_zero = lambda i: i.op is Ops.CONST and i.arg == 0
    indexed = {base_alloc(u.src[0]) for u in topo if u.op is Ops.INDEX and not at_zero(u.src[1])}
    scalar = {u for u in topo if u.op is Ops.ALLOC and u.arg.size == 1 and u not in indexed and not is_local(u)}
    acc_trips: dict[int, int] = {}
    def declare(a: UOp) -> None:
      acc_trips[a.arg.slot] = trips[-1]
      t = self.type(a.arg.dtype)
      if is_local(a):
        if self.smem_prefix is None:
          raise NotImplementedError(f"{type(self).__name__}: local memory (lmem{a.arg.slot}) has no form on device "
                                    f"{self.device}")
        emit(f"{self.smem_prefix}{t} {names[a]}[{a.arg.size}];")
      else: emit(f"{t} acc{a.arg.slot};" if a in scalar else f"{t} acc{a.arg.slot}[{a.arg.size}];")

    for u in topo:   # leaves every line may refer to
      if u.op is Ops.CONST: names[u] = self.const(u.arg, u.dtype)
      elif u.op is Ops.BUFFER: names[u] = f"data{u.arg.slot}"
      elif u.op is Ops.ALLOC: names[u] = f"lmem{u.arg.slot}" if is_local(u) else f"acc{u.arg.slot}"
      elif u.op is Ops.RANGE: names[u] = rname(u)

    for ln in lines:
      u = ln.uop
      if ln.kind == "open":
        for text in self.open_loop(u, names[u], names[u.src[0]], itype(dtypes.int)): emit(text)
        depth += 1
        trips.append(trips[-1] * (u.src[0].arg if u.src[0].op is Ops.CONST else 1))
        continue
      if ln.kind == "close":
        depth -= 1; emit("}"); trips.pop()
        continue
      if u.op is Ops.ALLOC:
        if decl_at[u] is u: declare(u)
      elif u.op is Ops.AFTER:
        names[u] = names[u.src[0]]
        if u.src[0].op is Ops.ALLOC and decl_at[u.src[0]] is u: declare(u.src[0])
      elif u.op is Ops.INDEX:
        base, i = u.src
        names[u] = names[base] if base_alloc(base) in scalar else f"{names[base]}[{names[i]}]"
      elif u.op is Ops.LOAD:
        names[u] = new_name("val")
        accesses += trips[-1]
        if u.dtype in self.load_only:   # e.g. OpenCL's vload_half: a half in memory, a float in the kernel
          base, i = u.src[0].src
          emit(self.load_only[u.dtype][1].format(name=names[u], buf=names[base], idx=names[i]))
        elif u.dtype.count > u.src[0].dtype.count:   # consecutive lanes as one vector
          emit(f"{itype(u.dtype)} {names[u]} = *({itype(u.dtype)}_u*)&{names[u.src[0]]};")
        else: emit(f"{itype(u.dtype)} {names[u]} = {names[u.src[0]]};")
      elif u.op is Ops.STORE:
        # a third source gates the store (a tile's lanes that fall outside the output store nothing)
        gate = f"if ({names[u.src[2]]}) " if len(u.src) > 2 else ""
        if u.src[1].dtype.count > u.src[0].dtype.count:   # a vector into consecutive elements
          emit(f"{gate}*({itype(u.src[1].dtype)}_u*)&{names[u.src[0]]} = {names[u.src[1]]};")
        else: emit(f"{gate}{names[u.src[0]]} = {names[u.src[1]]};")
        flops += ops_in.get(u.src[1], 0) * trips[-1]
        accesses += trips[-1]
      elif u.op is Ops.WMMA:
        for text in self.render_wmma(u, names): emit(text)
        shape = u.arg.layout
        flops += 2 * shape.m * shape.n * shape.k // 32 * trips[-1]   # one warp's tile, shared by its 32 lanes
      elif u.op in ALU:
        if u.op not in self.code_for_op:
          raise NotImplementedError(f"{type(self).__name__}: {u.op} has no form on device {self.device}")
        srcs = [names[s] for s in u.src]
        lanes = max([u.dtype.count] + [s.dtype.count for s in u.src])
        expr = (lanes > 1 and self.vector_op(u, *srcs)) or self.alu(u, srcs)
        ops_in[u] = (u.dtype.is_float or any(s.dtype.is_float for s in u.src)) * lanes + \
          sum(ops_in.get(s, 0) for s in u.src)
        if u.op is Ops.MAX or any(s in doubles for s in u.src): doubles.add(u)
        # shared values get a name; so does a MAX inside a MAX, whose text would otherwise double at every level
        if uses.get(u, 0) > 1 or (u in max_users and u in doubles) or u in lane_of:
          names[u] = new_name("alu")
          emit(f"{itype(u.dtype)} {names[u]} = {expr};")
          flops += ops_in.pop(u) * trips[-1]
        else: names[u] = expr
      elif u.op is Ops.VECTORIZE:
        expr = self.vectorize(u, [names[s] for s in u.src])
        names[u] = new_name("vec")
        emit(f"{self.type(u.dtype)} {names[u]} = {expr};")
        flops += sum(ops_in.pop(s, 0) for s in set(u.src)) * trips[-1]
      elif u.op is Ops.GEP: names[u] = f"{names[u.src[0]]}[{u.arg}]"   # its vector has a name (lane_of below)
      elif u.op is Ops.SPECIAL:
        kind, dim = u.arg
        if kind not in self.code_for_workitem:
          raise NotImplementedError(f"{type(self).__name__}: the launch index {kind}{dim} has no form on device "
                                    f"{self.device} (a GPU program: render it with a GPU dialect)")
        names[u] = f"{kind}{dim}"
        workitem = self.code_for_workitem[kind].format(dim=dim, xyz='xyz'[dim])
        emit(f"{itype(dtypes.int)} {names[u]} = {workitem}; /* {u.src[0].arg} */")
      elif u.op is Ops.BARRIER:
        if self.barrier is None:
          raise NotImplementedError(f"{type(self).__name__}: BARRIER has no form on device {self.device}")
        emit(self.barrier)
      elif u.op in (Ops.CONST, Ops.BUFFER, Ops.SINK): pass
      else:
        raise NotImplementedError(f"{type(self).__name__}: {u.op} has no source form (is this a tensor-level op in a "
                                  "loop program?)")
    out.append("}")
    return Rendered(KernelSource("\n".join(out), name, signature), flops, acc_trips, accesses)


  def alu(self, u: UOp, srcs: list[str]) -> str:
    """One scalar ALU op's text: the table's, with NumPy's meaning where C's differs (NOTES 35, uopc.codegen.cint)."""
    return int_semantics(self, u, srcs) or self.code_for_op[u.op](self, u.dtype, *srcs)

  def render_wmma(self, u: UOp, names: dict[UOp, str]) -> list[str]:
    """The lines of a WMMA (uopc.codegen.tc): a dialect with tensor cores or an emulation of them overrides this."""
    raise NotImplementedError(f"{type(self).__name__}: WMMA has no form on device {self.device}")

  def _check_load_only(self, topo: list[UOp], signature: Signature) -> None:
    """A load-only dtype (f16 on OpenCL without cl_khr_fp16) may be loaded and converted, nothing else."""
    for u in topo:
      if u.dtype in self.load_only and u.op not in (Ops.BUFFER, Ops.INDEX, Ops.LOAD): self.type(u.dtype)
    for p in signature.params:
      if p.dtype in self.load_only and p.writes: self.type(p.dtype)


INT32_MAX = 2**31 - 1


@functools.cache
def _book_variant(cls: type) -> CStyleRenderer:
  return type(f"{cls.__name__}_book_max", (cls,), {"book_max": True})()


def _check_names(topo: list[UOp]) -> None:
  """Every name the source will contain is built from integers the IR holds: check they are integers."""
  for u in topo:
    if u.op in (Ops.BUFFER, Ops.ALLOC) and (type(u.arg.slot) is not int):
      raise TypeError(f"{u.op.name} slot must be an int (it names data{{slot}}/acc{{slot}}), got {u.arg.slot!r}")
    if u.op is Ops.RANGE and (type(u.arg[0]) is not int or not isinstance(u.arg[1], AxisType)):
      raise TypeError(f"a RANGE's arg must be (int id, AxisType), got {u.arg!r}")


def base_buffer(u: UOp) -> UOp | None:
  """The BUFFER under a chain of AFTERs, if any."""
  while u.op is Ops.AFTER: u = u.src[0]
  return u if u.op is Ops.BUFFER else None

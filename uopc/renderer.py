"""The C-style renderer: a linearized loop program -> the source of one kernel, and its typed signature.

One renderer serves every C-like language. A dialect (C with OpenMP, OpenCL C, CUDA C) is a subclass that sets a
few class attributes: the words before the function, how a buffer parameter is declared, the type names, what a
THREAD loop is. Loads are named val, shared ALU results alu, accumulators acc{slot}, parameters data{slot}, loop
variables ridx{id}; an ALU result used once is written inline. Same graph, same text.

render() runs in named steps: signature, header, index_types, then a _Walk over the linearized lines (each op's
line from its EMIT entry, each ALLOC declared where linearize.declarations says) that counts the Cost as it writes.
It returns the source together with its Signature (each buffer's dtype, element count and whether the kernel
writes it), so a runtime never has to read the parameters back out of the text.
"""
from __future__ import annotations
import math
import numbers
from dataclasses import dataclass, field
from typing import Callable, ClassVar
from uopc.uop import UOp, Ops, AxisType, ALU, base_alloc, is_local
from uopc.dtype import DType, dtypes
from uopc.linearize import linearize, rname, declarations
from uopc.codegen.vector import vector_dtypes
from uopc.codegen.cint import book_variant, int_semantics, nan_max
# what a rendered kernel carries to the runtime; re-exported, since renderer is where readers look for them
from uopc.signature import Launch, Param, Signature, KernelSource, check_identifier, launch_of  # noqa: F401


@dataclass
class Rendered:
  src: KernelSource
  flops: int                    # float ops executed: an inlined op runs where its user is written
  acc_trips: dict[int, int]     # ALLOC slot -> how many times its declaration runs (trips of the loops around it)
  accesses: int = 0             # loads and stores executed: the kernel's work, for the CPU's one-thread rule

  @property
  def signature(self) -> Signature: return self.src.signature


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
  # dtypes a GPU dialect keeps only in memory: dtype -> (pointer type, statement loading one into a float), and the
  load_only: ClassVar[dict[DType, tuple[str, str]]] = {}   # statement storing a float as one (it computes in `types`)
  store_from_float: ClassVar[dict[DType, str]] = {}
  types: ClassVar[dict[DType, str]] = {
    dtypes.f32: "float", dtypes.f64: "double", dtypes.f16: "_Float16", dtypes.i32: "int", dtypes.i64: "long long",
    dtypes.u8: "unsigned char", dtypes.i8: "signed char", dtypes.bool: "bool", dtypes.u32: "unsigned int",
    dtypes.u64: "unsigned long long"}
  book_max: ClassVar[bool] = False   # write a float MAX as the book prints it, ((a>b)?a:b) (Options.book_max)
  # how each ALU op is written, given the renderer, the result dtype and the rendered sources
  code_for_op: ClassVar[dict[Ops, Callable]] = {
    Ops.ADD: lambda r, d, a, b: f"({a}+{b})", Ops.MUL: lambda r, d, a, b: f"({a}*{b})",
    Ops.IDIV: lambda r, d, a, b: f"({a}/{b})", Ops.MOD: lambda r, d, a, b: f"({a}%{b})",
    Ops.MAX: nan_max,
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
    return book_variant(type(self)) if getattr(options, "book_max", False) and not self.book_max else self

  def alu(self, u: UOp, srcs: list[str]) -> str:
    """One scalar ALU op's text: the table's, with NumPy's meaning where C's differs (NOTES 35, uopc.codegen.cint)."""
    return int_semantics(self, u, srcs) or self.code_for_op[u.op](self, u.dtype, *srcs)

  def rounded_to_half(self, x: str) -> str:
    """The float16 value nearest x (its text): C's _Float16 cast rounds. A dialect that computes halves in float
    rounds with a function of its own."""
    return f"(({self.type(dtypes.f16)}){x})"

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
    return f"{v}{'u' if dtype.is_unsigned and dtype.itemsize >= 4 else ''}{'ll' if dtype.itemsize == 8 else ''}"

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
    signature = self.signature(topo, name)
    head = self.header(name, signature)
    itype, cost = self.index_types(signature, topo), Cost([signature.launch.items])   # every work-item runs it once
    walk = _Walk(self, topo, lines, itype, cost, self.vector_preamble(vector_dtypes(topo)) + [head])
    walk.emit_body()
    src = KernelSource("\n".join(walk.out + ["}"]), name, signature)
    return Rendered(src, cost.flops, cost.acc_trips, cost.accesses)

  def signature(self, topo: list[UOp], name: str) -> Signature:
    """Each BUFFER as a parameter (dtype, size, whether the kernel stores to it) and the launch its SPECIALs ask for."""
    buffers = sorted({u.arg.slot: u for u in topo if u.op is Ops.BUFFER}.items())
    slots = [s for s, _ in buffers]
    if len(set(slots)) != len([u for u in topo if u.op is Ops.BUFFER]):
      raise ValueError(f"{name}: two different BUFFERs share a slot ({slots})")
    alloc_slots = [u.arg.slot for u in topo if u.op is Ops.ALLOC]
    if len(set(alloc_slots)) != len(alloc_slots):
      raise ValueError(f"{name}: two different ALLOCs share a slot ({sorted(alloc_slots)}): each is acc{{slot}} in the "
                       "source")
    stored = {base_buffer(u.src[0].src[0]) for u in topo if u.op is Ops.STORE and u.src[0].op is Ops.INDEX}
    params = tuple(Param(f"data{s}", u.arg.dtype, u.arg.size, u in stored) for s, u in buffers)
    signature = Signature(params, launch_of(topo))
    self._check_load_only(topo, signature)
    return signature

  def index_types(self, signature: Signature, topo: list[UOp]) -> Callable[[DType], str]:
    """Type names: every int is 64-bit if a buffer has more elements than an int counts, or a loop more trips."""
    wide = any(p.size > INT32_MAX for p in signature.params) or any(u.op is Ops.RANGE and u.src[0].op is Ops.CONST
                                                                     and u.src[0].arg > INT32_MAX for u in topo)
    return (lambda d: self.type(dtypes.i64) if d is dtypes.i32 else self.type(d)) if wide else self.type

  def header(self, name: str, signature: Signature) -> str:
    """The function's first line: the dialect's prefix (with the work-group size), the name, the parameters."""
    ptype = lambda p: self.load_only[p.dtype][0] if p.dtype in self.load_only else self.type(p.dtype)
    params = ", ".join(self.buffer_decl.format(type=ptype(p), name=p.name) for p in signature.params)
    launch = signature.launch
    block = ",".join(str(b) for b in (launch.block + (1, 1, 1))[:3])
    return f"{self.kernel_prefix.format(threads=launch.threads, block=block)}{name}({params}) {{"

  def declare(self, a: UOp, name: str, register: bool) -> str:
    """The line declaring ALLOC a: a register, an array, or a work-group's local-memory array."""
    t = self.type(a.arg.dtype)
    if is_local(a):
      if self.smem_prefix is None:
        raise NotImplementedError(f"{type(self).__name__}: local memory (lmem{a.arg.slot}) has no form on device "
                                  f"{self.device}")
      return f"{self.smem_prefix}{t} {name}[{a.arg.size}];"
    return f"{t} acc{a.arg.slot};" if register else f"{t} acc{a.arg.slot}[{a.arg.size}];"

  def render_wmma(self, u: UOp, names: dict[UOp, str]) -> list[str]:
    """The lines of a WMMA (uopc.codegen.tc): a dialect with tensor cores or an emulation of them overrides this."""
    raise NotImplementedError(f"{type(self).__name__}: WMMA has no form on device {self.device}")

  def _check_load_only(self, topo: list[UOp], signature: Signature) -> None:
    """A load-only dtype (f16 on OpenCL without cl_khr_fp16) may be loaded and converted, nothing else."""
    for u in topo:
      if u.dtype in self.load_only and u.op not in (Ops.BUFFER, Ops.INDEX, Ops.LOAD): self.type(u.dtype)
    for p in signature.params:
      if p.dtype in self.load_only and p.writes and p.dtype not in self.store_from_float: self.type(p.dtype)


INT32_MAX = 2**31 - 1


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


@dataclass
class Cost:
  """What a kernel executes, counted line by line as it is written; trips[-1]: how often the current line runs."""
  trips: list[int]
  flops: int = 0                # float ops executed: an inlined op runs where its user is written
  accesses: int = 0             # loads and stores executed
  acc_trips: dict[int, int] = field(default_factory=dict)   # ALLOC slot -> how many times its declaration runs
  ops_in: dict[UOp, int] = field(default_factory=dict)     # float ops inside an inline expression, not yet counted

  def open(self, r: UOp) -> None:   # a loop of r's trips, inside the current line's loops
    self.trips.append(self.trips[-1] * (r.src[0].arg if r.src[0].op is Ops.CONST else 1))
  def run(self, ops: int) -> None: self.flops += ops * self.trips[-1]
  def access(self) -> None: self.accesses += self.trips[-1]


class _Walk:
  """One kernel being written: its lines so far, each value's name (or inline expression), the indentation, the cost.
  emit_body walks the linearized program; EMIT maps each op to the method that writes its line (or only names it)."""
  def __init__(self, r: CStyleRenderer, topo: list[UOp], lines: list, itype: Callable, cost: Cost, out: list[str]):
    self.r, self.topo, self.lines, self.itype, self.cost, self.out = r, topo, lines, itype, cost, out
    self.names: dict[UOp, str] = {}
    self.depth, self.counter, self.doubles = 1, 0, set()   # doubles: inline expressions that hold a MAX
    self.uses: dict[UOp, int] = {}
    self.max_users: set[UOp] = set()   # sources of a MAX: ((a>b)?a:b) writes each twice
    for u in topo:
      for s in u.src: self.uses[s] = self.uses.get(s, 0) + 1
      if u.op is Ops.MAX: self.max_users.update(u.src)
    self.lane_of = {u.src[0] for u in topo if u.op is Ops.GEP}   # vectors whose lanes are read: named (v[i] needs one)
    self.decl_at, self.scalar = declarations(topo, lines)

  def emit(self, text: str) -> None: self.out.append("  " * self.depth + text)

  def new_name(self, prefix: str) -> str:
    self.counter += 1
    return f"{prefix}{self.counter}"

  def emit_body(self) -> None:
    """The function body: leaf names first (constants, parameters, accumulators, loop variables), then every line."""
    r, names = self.r, self.names
    for u in self.topo:
      if u.op is Ops.CONST: names[u] = r.const(u.arg, u.dtype)
      elif u.op is Ops.BUFFER: names[u] = f"data{u.arg.slot}"
      elif u.op is Ops.ALLOC: names[u] = f"lmem{u.arg.slot}" if is_local(u) else f"acc{u.arg.slot}"
      elif u.op is Ops.RANGE: names[u] = rname(u)
    for ln in self.lines:
      u = ln.uop
      if ln.kind == "open":
        for text in r.open_loop(u, names[u], names[u.src[0]], self.itype(dtypes.int)): self.emit(text)
        self.depth += 1
        self.cost.open(u)
      elif ln.kind == "close":
        self.depth -= 1; self.emit("}"); self.cost.trips.pop()
      elif u.op in self.EMIT: self.EMIT[u.op](self, u)
      else:
        raise NotImplementedError(f"{type(r).__name__}: {u.op} has no source form (is this a tensor-level op in a "
                                  "loop program?)")

  def declare(self, a: UOp) -> None:
    """ALLOC a's declaration, here: it runs as often as the line it is written on."""
    self.cost.acc_trips[a.arg.slot] = self.cost.trips[-1]
    self.emit(self.r.declare(a, self.names[a], a in self.scalar))

  def alloc(self, u: UOp) -> None:
    if self.decl_at[u] is u: self.declare(u)

  def after(self, u: UOp) -> None:
    self.names[u] = self.names[u.src[0]]
    if u.src[0].op is Ops.ALLOC and self.decl_at[u.src[0]] is u: self.declare(u.src[0])

  def index(self, u: UOp) -> None:
    base, i = u.src
    self.names[u] = self.names[base] if base_alloc(base) in self.scalar else f"{self.names[base]}[{self.names[i]}]"

  def load(self, u: UOp) -> None:
    names = self.names
    names[u] = self.new_name("val")
    self.cost.access()
    if u.dtype in self.r.load_only and base_buffer(u.src[0].src[0]) is not None:   # vload_half: a half to a float
      base, i = u.src[0].src
      self.emit(self.r.load_only[u.dtype][1].format(name=names[u], buf=names[base], idx=names[i]))
    elif u.dtype.count > u.src[0].dtype.count:   # consecutive lanes as one vector
      self.emit(f"{self.itype(u.dtype)} {names[u]} = *({self.itype(u.dtype)}_u*)&{names[u.src[0]]};")
    else: self.emit(f"{self.itype(u.dtype)} {names[u]} = {names[u.src[0]]};")

  def store(self, u: UOp) -> None:
    names = self.names
    # a third source gates the store (a tile's lanes that fall outside the output store nothing)
    gate = f"if ({names[u.src[2]]}) " if len(u.src) > 2 else ""
    if (st := self.r.store_from_float.get(u.src[0].dtype)) and base_buffer(u.src[0].src[0]) is not None:   # vstore_half
      self.emit(gate + st.format(val=names[u.src[1]], idx=names[u.src[0].src[1]], buf=names[u.src[0].src[0]]))
    elif u.src[1].dtype.count > u.src[0].dtype.count:   # a vector into consecutive elements
      self.emit(f"{gate}*({self.itype(u.src[1].dtype)}_u*)&{names[u.src[0]]} = {names[u.src[1]]};")
    else: self.emit(f"{gate}{names[u.src[0]]} = {names[u.src[1]]};")
    self.cost.run(self.cost.ops_in.get(u.src[1], 0))
    self.cost.access()

  def wmma(self, u: UOp) -> None:
    for text in self.r.render_wmma(u, self.names): self.emit(text)
    shape = u.arg.layout
    self.cost.run(2 * shape.m * shape.n * shape.k // 32)   # one warp's tile, shared by its 32 lanes

  def alu(self, u: UOp) -> None:
    r, names, ops_in = self.r, self.names, self.cost.ops_in
    if u.op not in r.code_for_op:
      raise NotImplementedError(f"{type(r).__name__}: {u.op} has no form on device {r.device}")
    srcs = [names[s] for s in u.src]
    lanes = max([u.dtype.count] + [s.dtype.count for s in u.src])
    expr = (lanes > 1 and r.vector_op(u, *srcs)) or r.alu(u, srcs)
    floats = u.dtype.is_float or any(s.dtype.is_float for s in u.src)
    ops_in[u] = floats * lanes + sum(ops_in.get(s, 0) for s in u.src)
    if u.op is Ops.MAX or any(s in self.doubles for s in u.src): self.doubles.add(u)
    # shared values get a name; so does a MAX inside a MAX, whose text would otherwise double at every level
    if self.uses.get(u, 0) > 1 or (u in self.max_users and u in self.doubles) or u in self.lane_of:
      names[u] = self.new_name("alu")
      self.emit(f"{self.itype(u.dtype)} {names[u]} = {expr};")
      self.cost.run(ops_in.pop(u))
    else: names[u] = expr

  def vectorize(self, u: UOp) -> None:
    expr = self.r.vectorize(u, [self.names[s] for s in u.src])
    self.names[u] = self.new_name("vec")
    self.emit(f"{self.r.type(u.dtype)} {self.names[u]} = {expr};")
    self.cost.run(sum(self.cost.ops_in.pop(s, 0) for s in set(u.src)))

  def gep(self, u: UOp) -> None: self.names[u] = f"{self.names[u.src[0]]}[{u.arg}]"   # its vector has a name (lane_of)

  def special(self, u: UOp) -> None:
    r, (kind, dim) = self.r, u.arg
    if kind not in r.code_for_workitem:
      raise NotImplementedError(f"{type(r).__name__}: the launch index {kind}{dim} has no form on device "
                                f"{r.device} (a GPU program: render it with a GPU dialect)")
    self.names[u] = f"{kind}{dim}"
    workitem = r.code_for_workitem[kind].format(dim=dim, xyz='xyz'[dim])
    self.emit(f"{self.itype(dtypes.int)} {self.names[u]} = {workitem}; /* {u.src[0].arg} */")

  def barrier(self, u: UOp) -> None:
    if self.r.barrier is None:
      raise NotImplementedError(f"{type(self.r).__name__}: BARRIER has no form on device {self.r.device}")
    self.emit(self.r.barrier)

  EMIT: ClassVar[dict[Ops, Callable]] = {
    Ops.ALLOC: alloc, Ops.AFTER: after, Ops.INDEX: index, Ops.LOAD: load, Ops.STORE: store, Ops.WMMA: wmma,
    **dict.fromkeys(ALU, alu), Ops.VECTORIZE: vectorize, Ops.GEP: gep, Ops.SPECIAL: special, Ops.BARRIER: barrier,
    **dict.fromkeys((Ops.CONST, Ops.BUFFER, Ops.SINK), lambda self, u: None)}   # named before the walk, or no line

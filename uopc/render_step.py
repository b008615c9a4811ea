"""The step program: a captured step's kernels as one C function that runs them inside one OpenMP parallel region
(a graph executor, as tinygrad's graphs and CUDA Graphs are; uopc.jit runs it with one call; NOTES 45).

  step = render_step(calls, renderer)    # calls: Call(ast, name, bufs, writes, serial) and Copy(dst, src, nbytes)
  prg = StepProgram(step, nbufs)         # uopc.runtime.graph: one compile, cached like any kernel; prg() runs it

What it writes, for three kernels where the third reads what the first wrote:

  UOPC_KERNEL void r_768_0(void** restrict a) {   <- a kernel whose loop is shared out among the team's threads
    float* restrict data0 = a[0]; ...
    #pragma omp for nowait                        <- its THREAD loop: each thread takes its part, nobody waits
    for (int ridx0 = 0; ridx0 < 768; ridx0++) {...}
  }
  UOPC_KERNEL void e_1_1(float* restrict data0, float* restrict data1) {...}   <- a kernel run whole by one thread
  void uopc_step(void** b) {
    uopc_bar bar = {0, 0, 0};
  #pragma omp parallel                            <- the workers are woken once a step, not once a kernel
    {
      int nth = uopc_threads(), sense = 0;
      r_768_0((void*[]){b[0], b[1]});
      #pragma omp single nowait                   <- one thread runs it; the others go on
      e_1_1(b[2], b[3]);
      uopc_barrier(&bar, nth, &sense);            <- the next level reads what this one wrote
      r_768_0((void*[]){b[1], b[4]});
    }
  }

The calls are put in levels (levels()): a call goes one level after the latest call it depends on (one that wrote a
buffer it touches, or read a buffer it writes), so the calls of a level run between the same two barriers, in any
order. Each level's shared loops come first and its serial kernels last, so a thread done with its share takes them.
The barrier spins a little, then sleeps (BARRIER): OpenMP's own barrier under the passive wait policy uopc sets (NOTES
20) puts a thread to sleep at once, and costs as much as the region each kernel had of its own.

A kernel's loop is shared out (an orphaned `omp for nowait`) only when that is the same program: every THREAD loop at
the top of the function (several in a multi-output kernel, uopc.codegen.siblings: independent loops), every store to
a buffer inside one, every accumulator declared inside one. Code outside those loops runs on every thread, and a
variable declared there is every thread's own, where in the kernel's own `parallel for` it was one variable the
threads shared (NOTES 9). Any other kernel, and a call marked serial (uopc.jit marks the small kernels, which their
own builds run on one thread: Kernel.threads), runs in `single` as its own build has it (its `parallel for` inside
`single` is a team of one thread).

The same arithmetic as the kernels' own builds, bit for bit: gcc's -fassociative-math orders a sum or a product by
where its operands come from, so a shared kernel reads its pointers from a table, as the function gcc outlines for a
`parallel for` reads them from a struct; each kernel is compiled as if alone (KERNEL_MACRO); without OpenMP nothing
is outlined and the table is handed on as parameters. A value the kernel computes outside its loop and uses inside
would still be ordered differently: the optimizer's step scalars are 0-d kernels of their own for this (uopc.optim).
Without OpenMP (a compiler without libomp) the pragmas are ignored and the kernels run one after another.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from uopc.uop import UOp, Ops, AxisType
from uopc.linearize import linearize, declarations
from uopc.renderer import CStyleRenderer, base_buffer

STEP_NAME = "uopc_step"
PREFIX = "UOPC_KERNEL void "   # see KERNEL_MACRO


@dataclass(frozen=True)
class Call:
  """One kernel of the step: its loop program, its name, the step buffer behind each parameter, which parameters it
  writes, and whether it must run whole on one thread."""
  ast: UOp
  name: str
  bufs: tuple[int, ...]
  writes: tuple[bool, ...]
  serial: bool = False
  prg: object = field(default=None, compare=False)   # the kernel's own compiled program (a device graph may use it)


@dataclass(frozen=True)
class Copy:
  """dst <- src, n bytes (a realize's output written back into the array it was assigned to)."""
  dst: int
  src: int
  nbytes: int


@dataclass
class StepSource:
  src: str                 # the C text: preamble, one function per distinct kernel, then uopc_step
  name: str                # uopc_step
  functions: int           # distinct kernel functions
  shared: int              # kernels whose loops are shared out (omp for)
  serial: int              # kernels run whole by one thread (single)
  barriers: int
  outline: list[str]       # uopc_step's body, for DEBUG=2
  copies: int = 0          # write-backs (Copy), shared out as loops of memcpy


def worksharable(ast: UOp) -> bool:
  """Whether the kernel's loop can be an orphaned `omp for` inside the step's region (module docstring)."""
  topo = ast.toposort()
  lines = linearize(ast)
  decl_at, _ = declarations(topo, lines)
  threads, inside, open_ranges = 0, {}, []
  for ln in lines:
    if ln.kind == "open":
      if ln.uop.arg[1] is AxisType.THREAD:
        if open_ranges: return False   # a THREAD loop inside another loop
        threads += 1
      open_ranges.append(ln.uop)
    elif ln.kind == "close": open_ranges.pop()
    else: inside[ln.uop] = bool(open_ranges) and open_ranges[0].arg[1] is AxisType.THREAD
  if not threads: return False
  stores = [u for u in topo if u.op is Ops.STORE and base_buffer(u.src[0].src[0]) is not None]
  return all(inside.get(u, False) for u in stores) and all(inside.get(d, False) for d in decl_at.values())


def _dialect(base: CStyleRenderer, shared: bool, used: set) -> CStyleRenderer:
  """The plan's renderer with the step's words; the vector dtypes each kernel uses are collected in `used`.
  shared: the THREAD loop is an orphaned `omp for nowait`, the pointers read from a table. Serial: the kernel as its
  own build has it (typed parameters, its own pragma: inside `single`, a `parallel for` is a team of one thread)."""
  def preamble(self, dts, sqrt=None):
    used.update(dts)
    if getattr(self, "vector_sqrt", False): used.add("sqrt")
    return []
  def header(self, name, signature):
    decls = [self.buffer_decl.format(type=self.type(p.dtype), name=p.name) for p in signature.params]
    typed = f"{PREFIX}{name}{'_' if shared else ''}({', '.join(decls)})"
    if not shared: return typed + " {"
    # The pointers loaded from a table, as the function gcc outlines for a `parallel for` loads them from a struct:
    # -fassociative-math orders a sum by where its operands come from, and as plain parameters the same C summed
    # some rows in another order than the kernel's own build (NOTES 45). Without OpenMP nothing is outlined, and the
    # table is handed on as parameters.
    table = f"{PREFIX}{name}(void** restrict a)"
    unpack = f"{table} {{ {name}_({', '.join(f'a[{k}]' for k in range(len(decls)))}); }}"
    return "\n".join(["#ifdef _OPENMP", table + " {"] + [f"  {d} = a[{k}];" for k, d in enumerate(decls)]
                     + ["#else", typed + ";", unpack, typed + " {", "#endif"])
  attrs = {"header": header, "vector_preamble": preamble}
  if shared: attrs["thread_pragma"] = "#pragma omp for nowait"
  return type(f"{type(base).__name__}{'Shared' if shared else 'Serial'}", (type(base),), attrs)()


def _touches(c: Call | Copy) -> tuple[set[int], set[int]]:
  """The buffers c reads and the buffers it writes."""
  if isinstance(c, Copy): return {c.src}, {c.dst}
  return {b for b, w in zip(c.bufs, c.writes) if not w}, {b for b, w in zip(c.bufs, c.writes) if w}


def levels(calls: list[Call | Copy]) -> list[list[int]]:
  """The calls in levels: each call one level after the latest call it must follow (one that wrote a buffer it reads
  or writes, or read a buffer it writes); the calls of one level touch nothing another of them writes, so they run
  between the same two barriers, in any order. A barrier a level, not a barrier a dependent pair in program order."""
  level: list[int] = []
  writer: dict[int, int] = {}                # buffer -> the level of its last writer
  readers: dict[int, int] = {}               # buffer -> the latest level that read it since
  for c in calls:
    reads, writes = _touches(c)
    after = [writer.get(b, -1) for b in reads | writes] + [readers.get(b, -1) for b in writes]
    level.append(max(after, default=-1) + 1)
    for b in reads: readers[b] = max(readers.get(b, -1), level[-1])
    for b in writes: writer[b], readers[b] = level[-1], -1
  out: list[list[int]] = [[] for _ in range(max(level, default=-1) + 1)]
  for k, n in enumerate(level): out[n].append(k)
  return out


def render_step(calls: list[Call | Copy], renderer: CStyleRenderer) -> StepSource:
  """The step program of calls (kernels and copies, in program order) for a C dialect (render_c's CRenderer or a
  subclass): the calls in levels (levels()), each level's shared loops first, then its serial kernels (a thread that
  is done with its share takes the next one), a barrier between levels."""
  used: set = set()
  dialects = {sh: _dialect(renderer, sh, used) for sh in (True, False)}
  functions: dict[tuple[UOp, bool], str] = {}
  bodies: list[str] = []
  body: list[str] = []
  shared = serial = 0
  share = [isinstance(c, Copy) or (not c.serial and worksharable(c.ast)) for c in calls]
  groups = levels(calls)
  for n, group in enumerate(groups):
    if n: body.append("uopc_barrier(&bar, nth, &sense);")
    for k in sorted(group, key=lambda k: not share[k]):
      c = calls[k]
      if isinstance(c, Copy):
        body.append(f"uopc_copy(b[{c.dst}], b[{c.src}], {c.nbytes});")
        continue
      key = (c.ast, share[k])
      if key not in functions:
        functions[key] = f"{c.name}_{len(functions)}"
        bodies.append(dialects[share[k]].render(c.ast, functions[key]).src)
      if not share[k]: body.append("#pragma omp single nowait")
      ptrs = ", ".join(f"b[{j}]" for j in c.bufs)
      body.append(f"{functions[key]}((void*[]){{{ptrs}}});" if share[k] else f"{functions[key]}({ptrs});")
  kernels = [sh for c, sh in zip(calls, share) if isinstance(c, Call)]
  shared, serial = sum(kernels), len(kernels) - sum(kernels)
  sqrt = "sqrt" in used
  used.discard("sqrt")
  preamble = renderer.vector_preamble(used, sqrt) if used else []
  src = "\n".join([KERNEL_MACRO] + preamble + [BARRIER, COPY] + bodies + [
    f"void {STEP_NAME}(void** b) {{", "  uopc_bar bar = {0, 0, 0};", "#pragma omp parallel", "  {",
    "    int nth = uopc_threads(), sense = 0;"] + ["    " + line for line in body] + ["  }", "}"])
  return StepSource(src, STEP_NAME, len(functions), shared, serial, max(len(groups) - 1, 0), body,
                    len(calls) - len(kernels))


# Each kernel is compiled as if alone: interprocedural passes (constant propagation into a static function, its
# clones, arguments passed by value instead of by pointer) would let -fassociative-math reassociate its sums
# differently from the kernel's own build, and the step's results would differ from the kernels' in the last bit.
# gcc's noipa turns them off; clang has no noipa, and runs them only on functions no other file can call (static).
KERNEL_MACRO = """#if defined(__clang__)
#define UOPC_KERNEL __attribute__((noinline, visibility("hidden")))
#else
#define UOPC_KERNEL static __attribute__((noipa))
#endif"""


# A barrier between levels that spins a little before it sleeps: the threads are all inside the step and mostly arrive
# within microseconds of each other. OpenMP's own barrier, under the passive wait policy uopc sets (NOTES 20), puts the
# first thread to sleep at once and the last one wakes it: as costly as the region a kernel had of its own. Past
# SPIN pauses a waiting thread sleeps on a futex (Linux; elsewhere it yields its core at every look), so a thread whose
# partner lost its core to another process gives its own core up (NOTES 20). After the step, the region's end is
# OpenMP's, where idle workers sleep.
BARRIER = """#include <sched.h>
#ifdef _OPENMP
#include <omp.h>
static int uopc_threads(void) { return omp_get_num_threads(); }
#else
static int uopc_threads(void) { return 1; }
#endif
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
static void uopc_sleep(int* at, int was) { syscall(SYS_futex, at, FUTEX_WAIT_PRIVATE, was, 0, 0, 0); }
static void uopc_wake(int* at) { syscall(SYS_futex, at, FUTEX_WAKE_PRIVATE, 0x7fffffff, 0, 0, 0); }
#else
static void uopc_sleep(int* at, int was) { (void)at; (void)was; sched_yield(); }
static void uopc_wake(int* at) { (void)at; }
#endif
#define UOPC_SPIN 1000
typedef struct { int count, sense, sleepers; } uopc_bar;
static void uopc_barrier(uopc_bar* bar, int nth, int* sense) {
  if (nth == 1) return;
  int s = *sense = !*sense;
  if (__atomic_add_fetch(&bar->count, 1, __ATOMIC_ACQ_REL) == nth) {   /* the last to arrive lets the others go */
    __atomic_store_n(&bar->count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&bar->sense, s, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&bar->sleepers, __ATOMIC_SEQ_CST)) uopc_wake(&bar->sense);
    return;
  }
  for (int i = 0; __atomic_load_n(&bar->sense, __ATOMIC_ACQUIRE) != s; i++) {
    if (i < UOPC_SPIN) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    __atomic_add_fetch(&bar->sleepers, 1, __ATOMIC_SEQ_CST);   /* then look again: a wake-up cannot be missed */
    if (__atomic_load_n(&bar->sense, __ATOMIC_SEQ_CST) != s) uopc_sleep(&bar->sense, !s);
    __atomic_sub_fetch(&bar->sleepers, 1, __ATOMIC_SEQ_CST);
  }
}"""


# a realize's output copied into the array it was assigned to: the copy shared out in 64 KB pieces
COPY = """static void uopc_copy(void* restrict dst, const void* restrict src, long n) {
  #pragma omp for nowait
  for (long k = 0; k < n; k += 65536) memcpy((char*)dst + k, (const char*)src + k, n - k < 65536 ? n - k : 65536);
}"""

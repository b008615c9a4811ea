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

Write-backs in place (write_in_place): an output assigned to an array that lives on (a parameter, an optimizer's
moment) is written by its kernel straight into that array, and its Copy disappears, where the calls prove it safe (an
elementwise update that reads the target only at the element it stores, and no later reader of the old value); the
other Copies stay (uopc.jit: JIT_INPLACE=0 keeps every one).
"""
from __future__ import annotations
from dataclasses import dataclass, field, replace
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


def _dialect(base: CStyleRenderer, shared: bool, used: set, aliased: frozenset = frozenset()) -> CStyleRenderer:
  """The plan's renderer with the step's words; the vector dtypes each kernel uses are collected in `used`.
  shared: the THREAD loop is an orphaned `omp for nowait`, the pointers read from a table. Serial: the kernel as its
  own build has it (typed parameters, its own pragma: inside `single`, a `parallel for` is a team of one thread)."""
  def preamble(self, dts, sqrt=None):
    used.update(dts)
    used.update(op for op in ("sqrt", "exp2") if getattr(self, f"vector_{op}", False))
    return []
  def header(self, name, signature):
    decl = lambda k: "{type}* {name}" if k in aliased else self.buffer_decl   # two parameters of one buffer
    decls = [decl(k).format(type=self.type(p.dtype), name=p.name) for k, p in enumerate(signature.params)]
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
  def open_loop(self, r, name, bound, index_type="int"):
    # aliased: no iteration reads what another writes (write_in_place's rule 2), and gcc, told so, vectorizes the loop
    # as it did over restrict pointers. GCC takes no ivdep before an OpenMP loop: there only without OpenMP.
    lines = type(base).open_loop(self, r, name, bound, index_type)
    ivdep = ["#pragma GCC ivdep"] if lines[0].startswith("for") else ["#ifndef _OPENMP", "#pragma GCC ivdep", "#endif"]
    return lines[:-1] + ivdep + lines[-1:]
  attrs = {"header": header, "vector_preamble": preamble} | ({"open_loop": open_loop} if aliased else {})
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


# ---- write-backs in place ----
def write_in_place(calls: list[Call | Copy], movable: set[int]) -> tuple[list[Call | Copy], dict[int, int]]:
  """The calls with each write-back Copy(target <- out) that is proved safe gone: the kernel that writes out writes
  the target's buffer instead, and every call that named out names the target. movable: the outputs that may become
  their target (the graph's own buffers; an argument, a kept array, an output the function returns stay as they are).
  Returns the calls and {out: target} for each Copy made in place. A Copy is made in place when, in the calls as they
  stand (each Copy in program order, after the moves before it):
    1. one kernel writes out (the writer), through one parameter;
    2. the writer reads the target only to compute the same element of out (_reads_where_it_stores): every load of
       the target is at the index of a store to out, with as many lanes, and is a source of that store's value, so it
       runs before the store in the same iteration; uopc's kernels store each element of an output once, so no load
       sees a stored value (p = p - lr * g). A transposed, shifted or reduced read of the target keeps the copy;
    3. no call between the writer and the Copy reads or writes the target: a later reader of the old value keeps the
       copy. A call before the writer that reads the target stays before it: levels() counts the writer as a writer
       of the target now, and a read before a write puts them a level apart;
    4. no call after the Copy reads out once the target has been written again (it would read the newer value);
    5. a writer that reads the target has no accumulator (ALLOC) and reads nothing it stored (AFTER): every other
       load is of a buffer it does not write, so no iteration of its loops reads what another wrote, which
       `#pragma GCC ivdep` below says.
  The C: the writer gets the target's buffer for both the parameter it read the old value through and the one it
  stores through, and the step renders those two without `restrict` (two pointers into one buffer are not restrict
  pointers; every other parameter stays one), and each of its loops with `#pragma GCC ivdep`: over two plain pointers
  gcc stopped vectorizing a loop it vectorized over restrict ones (an MLP's AdamW kernel without OpenMP: 1 ulp), and
  ivdep gives it that loop back (the same instructions). Its text is otherwise its own build's, the same statements
  over the same parameters, so gcc computes the same values (bit for bit against the copies: tests/runtime/
  test_step_inplace.py). The other way, the old value loaded through the output's pointer and the target's
  parameter dropped, kept every pointer restrict but not gcc's loops: it vectorized a loop it had unrolled, and an
  AdamW update came out 1 ulp off in 17 of 88 elements of a small GPT's embedding (tests/nn/test_ch14_gpt.py)."""
  calls, moved, k = list(calls), {}, 0
  while k < len(calls):
    c = calls[k]
    done = _in_place(calls, k, movable) if isinstance(c, Copy) else None
    if done is None: k += 1
    else: calls, moved[c.src] = done, c.dst   # the Copy at k is gone: k names the next call
  return calls, moved


def _in_place(calls: list[Call | Copy], k: int, movable: set[int]) -> list[Call | Copy] | None:
  """The calls with the Copy at k made in place, or None where write_in_place's rules do not prove it safe."""
  out, target = calls[k].src, calls[k].dst
  if out not in movable or out == target: return None
  writers = [j for j, c in enumerate(calls) if out in _touches(c)[1]]
  if len(writers) != 1 or writers[0] > k or not isinstance(calls[writers[0]], Call): return None   # rule 1
  w = writers[0]
  if any(target in reads | writes for reads, writes in map(_touches, calls[w + 1:k])): return None   # rule 3
  if _read_after_rewrite(calls[k + 1:], out, target): return None                                  # rule 4
  if not _reads_only_its_elements(calls[w], out, target): return None                            # rule 2
  swap = lambda b: target if b == out else b
  rest = [c for j, c in enumerate(calls) if j != k]
  return [replace(c, bufs=tuple(map(swap, c.bufs))) if isinstance(c, Call) else replace(c, src=swap(c.src),
          dst=swap(c.dst)) for c in rest]


def _read_after_rewrite(later: list[Call | Copy], out: int, target: int) -> bool:
  """Whether a call of later reads out after a call of later wrote target."""
  written = False
  for c in later:
    reads, writes = _touches(c)
    if written and out in reads: return True
    written = written or target in writes
  return False


def _reads_only_its_elements(c: Call, out: int, target: int) -> bool:
  """Whether c writes out through one parameter and reads the target only where it stores out (rule 2)."""
  params = [u for _, u in sorted({u.arg.slot: u for u in c.ast.toposort() if u.op is Ops.BUFFER}.items())]
  if len(params) != len(c.bufs): return False   # the parameters, in slot order, are the call's buffers
  outs = [j for j, b in enumerate(c.bufs) if b == out]
  ins = [j for j, b in enumerate(c.bufs) if b == target]
  if len(outs) != 1 or not c.writes[outs[0]] or any(c.writes[j] for j in ins): return False
  o = params[outs[0]]
  if ins and any(u.op in (Ops.ALLOC, Ops.AFTER) for u in c.ast.toposort()): return False   # rule 5
  return all((params[j].arg.dtype, params[j].arg.size) == (o.arg.dtype, o.arg.size)
             and _reads_where_it_stores(c.ast, params[j], o) for j in ins)


def _reads_where_it_stores(ast: UOp, inp: UOp, out: UOp) -> bool:
  """Whether every read of buffer inp is a load at the index of one store to out, with as many lanes, whose value
  is computed from it: inp[i] read only to compute out[i], and before out[i] is stored."""
  topo = ast.toposort()
  stores: dict[tuple, list[UOp]] = {}
  for u in topo:
    if u.op is Ops.STORE and base_buffer(u.src[0].src[0]) is out: stores.setdefault(u.src[0].src[1:], []).append(u)
  sources: dict[UOp, set[UOp]] = {}   # store -> the nodes its value is computed from
  for u in topo:
    for s in u.src:
      if s is inp and u.op is not Ops.INDEX: return False                             # inp only indexed,
      if s.op is Ops.INDEX and s.src[0] is inp and u.op is not Ops.LOAD: return False   # and every index loaded
    if u.op is not Ops.LOAD or u.src[0].src[0] is not inp: continue
    match = stores.get(u.src[0].src[1:], [])
    if len(match) != 1 or match[0].src[1].dtype.count != u.dtype.count: return False
    if match[0] not in sources: sources[match[0]] = set(match[0].src[1].toposort())
    if u not in sources[match[0]]: return False
  return True


def render_step(calls: list[Call | Copy], renderer: CStyleRenderer) -> StepSource:
  """The step program of calls (kernels and copies, in program order) for a C dialect (render_c's CRenderer or a
  subclass): the calls in levels (levels()), each level's shared loops first, then its serial kernels (a thread that
  is done with its share takes the next one), a barrier between levels."""
  used: set = set()
  dialects: dict[tuple, CStyleRenderer] = {}
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
      aliased = frozenset(j for j, b in enumerate(c.bufs) if c.bufs.count(b) > 1)
      key = (c.ast, share[k], aliased)
      if key not in functions:
        functions[key] = f"{c.name}_{len(functions)}"
        if key[1:] not in dialects: dialects[key[1:]] = _dialect(renderer, share[k], used, aliased)
        bodies.append(dialects[key[1:]].render(c.ast, functions[key]).src)
      if not share[k]: body.append("#pragma omp single nowait")
      ptrs = ", ".join(f"b[{j}]" for j in c.bufs)
      body.append(f"{functions[key]}((void*[]){{{ptrs}}});" if share[k] else f"{functions[key]}({ptrs});")
  kernels = [sh for c, sh in zip(calls, share) if isinstance(c, Call)]
  shared, serial = sum(kernels), len(kernels) - sum(kernels)
  sqrt, exp2 = "sqrt" in used, "exp2" in used
  used -= {"sqrt", "exp2"}
  preamble = renderer.vector_preamble(used, sqrt, exp2) if used else []
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

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

The same arithmetic as the kernels' own builds, bit for bit. Where the toolchain can (gcc's OpenMP on Linux), the
step is linked (linked=True, LINKED): each kernel is its own build's C text compiled alone, an object linked into the
step, and the step only calls it; its `parallel for` runs its part of the loop in the step's team. The same text and
flags are the same machine code, so the same bits by construction (NOTES 69). Elsewhere (clang, macOS) the kernels
are functions of the step's text, made to look to the compiler as their own builds do: gcc's -fassociative-math
orders a sum by where its operands come from, so a shared kernel reads its pointers from a table, as the function gcc
outlines for a `parallel for` reads them from a struct; each kernel is compiled as if alone (KERNEL_MACRO). That held
for the kernels seen when it was written (NOTES 45), not for all (NOTES 68: a padded convolution 1 ulp off). A value
the kernel computes outside its loop and uses inside would still be ordered differently there: the optimizer's step
scalars are 0-d kernels of their own for this (uopc.optim). Without OpenMP the pragmas are ignored and the kernels
run one after another.

Write-backs in place (uopc.step_calls.write_in_place): an output assigned to an array that lives on (a parameter,
an optimizer's moment) is written by its kernel straight into that array, and its Copy disappears, where the calls
prove it safe (an elementwise update that reads the target only at the element it stores, and no later reader of the
old value); the other Copies stay (uopc.jit: JIT_INPLACE=0 keeps every one). Such a kernel's parameters of the
target lose `restrict` (_dialect); linked, that text is its object, used only where it compiles to the kernel's
own build's machine code (write_in_place's rule 6, NOTES 71).
"""
from __future__ import annotations
from dataclasses import dataclass
from uopc.uop import UOp, Ops, AxisType
from uopc.linearize import linearize, declarations
from uopc.renderer import CStyleRenderer, base_buffer
from uopc.step_calls import Call, Copy, levels

STEP_NAME = "uopc_step"
PREFIX = "UOPC_KERNEL void "   # see KERNEL_MACRO


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
  objects: tuple = ()      # linked: the kernels as KernelObjects, compiled alone and linked in (src declares them)


@dataclass(frozen=True)
class KernelObject:
  """A kernel of a linked step: the C text its own build compiles, compiled alone with its flags, its function
  (own_name in src) renamed `name` in the step (two kernels of a step may share a name)."""
  src: str
  own_name: str
  name: str
  params: int


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


def _dialect(base: CStyleRenderer, shared: bool, used: set, aliased: frozenset = frozenset(),
             own: bool = False) -> CStyleRenderer:
  """The plan's renderer with the step's words; the vector dtypes each kernel uses are collected in `used`.
  shared: the THREAD loop is an orphaned `omp for nowait`, the pointers read from a table. Serial: the kernel as its
  own build has it (typed parameters, its own pragma: inside `single`, a `parallel for` is a team of one thread).
  own: only the aliased parameters and loops changed, the rest as the kernel's own build renders it (a linked step's
  object: its own preamble, its own name and prefix)."""
  def preamble(self, dts, sqrt=None):
    used.update(dts)
    used.update(op for op in ("sqrt", "exp2") if getattr(self, f"vector_{op}", False))
    return []
  def header(self, name, signature):
    decl = lambda k: "{type}* {name}" if k in aliased else self.buffer_decl   # two parameters of one buffer
    decls = [decl(k).format(type=self.type(p.dtype), name=p.name) for k, p in enumerate(signature.params)]
    typed = f"{self.kernel_prefix if own else PREFIX}{name}{'_' if shared else ''}({', '.join(decls)})"
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
  attrs = {"header": header} | ({} if own else {"vector_preamble": preamble})
  if aliased: attrs["open_loop"] = open_loop
  if shared: attrs["thread_pragma"] = "#pragma omp for nowait"
  return type(f"{type(base).__name__}{'Shared' if shared else 'Serial'}", (type(base),), attrs)()


def render_step(calls: list[Call | Copy], renderer: CStyleRenderer, linked: bool = False) -> StepSource:
  """The step program of calls (kernels and copies, in program order) for a C dialect (render_c's CRenderer or a
  subclass): the calls in levels (levels()), each level's shared loops first, then its serial kernels (a thread that
  is done with its share takes the next one), a barrier between levels. linked: each kernel is its own build's text
  in an object of its own (LINKED), the step only calls it; else each kernel is a function of the step's text."""
  used: set = set()
  dialects: dict[tuple, CStyleRenderer] = {}
  functions: dict[tuple, str] = {}
  bodies: list[str] = []
  objects: list[KernelObject] = []
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
      key = (c.ast, aliased) if linked else (c.ast, share[k], aliased)   # one object serves both ways of calling
      if key not in functions and linked:
        o = kernel_object(c, renderer, aliased, f"{c.name}_{len(objects)}")
        same = [p for p in objects if p.src == o.src]   # two ASTs may render the same text: one object
        functions[key] = same[0].name if same else o.name
        if not same: objects.append(o)
      elif key not in functions:
        functions[key] = f"{c.name}_{len(functions)}"
        if key[1:] not in dialects: dialects[key[1:]] = _dialect(renderer, share[k], used, aliased)
        bodies.append(dialects[key[1:]].render(c.ast, functions[key]).src)
      if not share[k]: body.append("#pragma omp single nowait")
      ptrs = ", ".join(f"b[{j}]" for j in c.bufs)
      if linked: body.append(f"UOPC_SHARED({functions[key]}({ptrs}));" if share[k] else f"{functions[key]}({ptrs});")
      else: body.append(f"{functions[key]}((void*[]){{{ptrs}}});" if share[k] else f"{functions[key]}({ptrs});")
  kernels = [sh for c, sh in zip(calls, share) if isinstance(c, Call)]
  shared, serial = sum(kernels), len(kernels) - sum(kernels)
  if linked:
    # every pointer is passed alike, whatever it points to (as cffi passes them to each kernel's own build)
    head = [LINKED] + [f"void {o.name}({', '.join(['void*'] * o.params)});" for o in objects]
  else:
    sqrt, exp2 = "sqrt" in used, "exp2" in used
    used -= {"sqrt", "exp2"}
    head = [KERNEL_MACRO] + (renderer.vector_preamble(used, sqrt, exp2) if used else [])
  src = "\n".join(head + [BARRIER, COPY] + bodies + [
    f"void {STEP_NAME}(void** b) {{", "  uopc_bar bar = {0, 0, 0};", "#pragma omp parallel", "  {",
    "    int nth = uopc_threads(), sense = 0;"] + ["    " + line for line in body] + ["  }", "}"])
  return StepSource(src, STEP_NAME, len(objects) if linked else len(functions), shared, serial,
                    max(len(groups) - 1, 0), body, len(calls) - len(kernels), tuple(objects))


def kernel_object(c: Call, renderer: CStyleRenderer, aliased: frozenset, name: str) -> KernelObject:
  """c's kernel as an object of a linked step, called `name` there: the very text its own build compiled (c.prg),
  or, written in place, that text over the aliased pointers (uopc.step_calls.write_in_place)."""
  own = getattr(c.prg, "src", None)
  if aliased or own is None: own = _dialect(renderer, False, set(), aliased, own=True).render(c.ast, c.name).src
  return KernelObject(own, c.name if c.prg is None or aliased else c.prg.name, name, len(c.bufs))


# The step's kernels as their own builds' machine code (render_step(linked=True); gcc on Linux, uopc.runtime.build.
# links_objects): each kernel's own C text compiled alone with its own flags, linked into the step, which calls it.
# gcc decides how to vectorize and reassociate a function from its text and flags, so the same text compiled alone
# is the same code; compiled inside the step's text it was not always (NOTES 68). A kernel's `parallel for` starts a
# team through GOMP_parallel(fn, data, ...), fn being the loop's part one thread runs; the link sends those calls
# here (uopc.runtime.graph.LINK_FLAGS): a shared call runs fn itself, its part of the loop in the step's team, as an
# orphaned `omp for` would; any other call starts its team (inside the step's region a team of one, as `single` has).
LINKED = """#include <omp.h>
typedef void (*uopc_part)(void*);
void __real_GOMP_parallel(uopc_part fn, void* data, unsigned nthreads, unsigned flags);
static __thread int uopc_shared;
__attribute__((visibility("hidden"))) void __wrap_GOMP_parallel(uopc_part fn, void* data, unsigned nthreads,
                                                                unsigned flags) {
  if (uopc_shared) fn(data);
  else __real_GOMP_parallel(fn, data, omp_in_parallel() ? 1 : nthreads, flags);
}
#define UOPC_SHARED(call) do { uopc_shared = 1; call; uopc_shared = 0; } while (0)"""


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

"""A step's calls as data, and the write-backs that can be made in place (uopc.render_step renders what is here).

  calls = [Call(ast, name, bufs, writes, serial), Copy(dst, src, nbytes), ...]   # a step's kernels, in program order
  levels(calls)                     # the calls in levels: those of a level run between the same two barriers
  calls, moved = write_in_place(calls, movable)   # a write-back's Copy gone where its writer can write the target

uopc.jit (a captured step) and uopc.plan_program (an eager plan run as one program) make the calls; uopc.render_step
renders them as one step program.
"""
from __future__ import annotations
from dataclasses import dataclass, field, replace
from uopc.uop import UOp, Ops
from uopc.renderer import base_buffer

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
def write_in_place(calls: list[Call | Copy], movable: set[int], keeps_code=None) -> tuple[list[Call | Copy],
                                                                                         dict[int, int]]:
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
       `#pragma GCC ivdep` says (uopc.render_step._dialect writes it);
    6. keeps_code (a linked step, which runs each kernel's own build: NOTES 69, 71), asked of each writer once the
       moves are made: its text over the aliased pointers compiles to its own build's machine code. The outputs of a
       writer it refuses keep their copies (and the moves are made again without them).
  The C: the writer gets the target's buffer for both the parameter it read the old value through and the one it
  stores through, and the step renders those two without `restrict` (two pointers into one buffer are not restrict
  pointers; every other parameter stays one), and each of its loops with `#pragma GCC ivdep`: over two plain pointers
  gcc stopped vectorizing a loop it vectorized over restrict ones (an MLP's AdamW kernel without OpenMP: 1 ulp), and
  ivdep gives it that loop back (the same instructions). Its text is otherwise its own build's, the same statements
  over the same parameters, so gcc computes the same values (bit for bit against the copies: tests/runtime/
  test_step_inplace.py). The other way, the old value loaded through the output's pointer and the target's
  parameter dropped, kept every pointer restrict but not gcc's loops: it vectorized a loop it had unrolled, and an
  AdamW update came out 1 ulp off in 17 of 88 elements of a small GPT's embedding (tests/nn/test_ch14_gpt.py)."""
  movable = set(movable)
  while True:
    out, moved = _moves(calls, movable)
    if keeps_code is None: return out, moved
    targets = set(moved.values())
    writers = [c for c in out if isinstance(c, Call) and any(w and b in targets for b, w in zip(c.bufs, c.writes))]
    refused = {b for c in writers if not keeps_code(c) for b, w in zip(c.bufs, c.writes) if w and b in targets}
    back = {o for o, t in moved.items() if t in refused}
    if not back: return out, moved
    movable -= back


def _moves(calls: list[Call | Copy], movable: set[int]) -> tuple[list[Call | Copy], dict[int, int]]:
  """write_in_place's rules 1-5, each Copy in program order."""
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

"""Optimizers: how a kernel's loops are shaped (Opts), and the layout pass that runs before kernelizing.

An optimizer is any object with two functions, `layout(roots) -> roots` and `lower(body, out) -> loop
program`; Tensor.opt holds the one realize uses. The book's FlashOpt (chapter 11) is another one. Either function may
also take `options=` (uopc.options.Options): the kernelizer passes the realize's options to those that declare it.

  DefaultOpt   the layout pass, then default_opts (or online_opts, or tensor-core warp tiles) per kernel
  VectorOpt    DefaultOpt, plus vector code on the CPU: float32 matmuls (uopc.codegen.gemm_vec, the tile tuned) and
               the other float32 kernels that read an axis contiguously (uopc.codegen.vector_loops), convolutions
               among them (their padded inputs staged first: vector_loops.stage_window_pads)
  TiledOpt     DefaultOpt, plus local-memory tiles for GPU matmuls (uopc.codegen.localtile)

The lowerings in uopc.codegen only build loop programs. What needs the machine is handed to them from here: the vector
ISA (uopc.runtime.machine's table: registers and lanes of Options.lanes or of the target, UOPC_MARCH or this CPU) and
a tuner that compiles and times candidates (tuner, built on uopc.runtime.tune and the device's table).
"""
from __future__ import annotations
from typing import Callable
import numpy as np
from uopc.dtype import np_dtype
from uopc.device import get_device
from uopc.uop import UOp, Ops, ALU
from uopc.rangeify import last_axis_stride, lower, Ctx, Opts
from uopc.codegen.online import OnlineSoftmax, find_groups
from uopc.options import Options
from uopc.codegen.tc import GPU_DEVICES, lower_tc
from uopc.codegen import gemm_vec
from uopc.codegen.vector_loops import lower_vector, stage_window_pads
from uopc.codegen.localtile import LocalTile, lower_local_tile
from uopc.runtime import tune
from uopc.runtime.machine import ISA, isa_of, target


def layout_pass(roots: list[UOp], options: Options | None = None,
                keep: Callable[[UOp], bool] | None = None) -> list[UOp]:
  """Copy an operand whose reduce axis is not contiguous in memory (V in P V), so the reduce reads it with stride 1.
  Takes and gives tensor-level roots (a copy is a STAGE). A reduce for which keep(reduce) is true reads its operands
  as they are (its kernel lays them out itself)."""
  online = options is not None and options.online_softmax
  todo: set[UOp] = set()
  for u in UOp(Ops.SINK, tuple(roots)).toposort():
    if u.op is not Ops.REDUCE or u.arg[1] != 1 or (keep is not None and keep(u)): continue
    # an online pass walks the reduce axis once and unrolls the output columns: it wants rows, not columns, of V
    if online and find_groups([u.src[0]]): continue
    stack, seen = [u.src[0]], set()
    while stack:
      x = stack.pop()
      if x in seen: continue
      seen.add(x)
      if x.op in ALU: stack.extend(x.src)
      elif x.op is Ops.EXPAND:
        view = x.src[0]
        stride = last_axis_stride(view)
        if stride is not None and stride not in (0, 1): todo.add(view)
  return UOp.wrap(roots, todo, lambda n: UOp(Ops.STAGE, (n,))) if todo else roots


def default_opts(body: UOp) -> Opts:
  """The default heuristic. A reduce kernel gets a register tile: its last two output axes upcast by 4 (each loaded
  value then feeds up to 16 accumulators). A copy that reads its source across rows (a transpose) upcasts the
  second-to-last axis by 8, so each inner iteration reads 8 neighbours in a row instead of one. Every kernel splits
  its first long axis across threads."""
  shape = body.shape
  upcast = {}
  if body.op is Ops.REDUCE:
    for k in range(max(0, len(shape) - 2), len(shape)):
      if shape[k] % 4 == 0 and shape[k] >= 8: upcast[k] = 4
  elif len(shape) >= 2 and shape[-2] % 8 == 0 and last_axis_stride(body) not in (None, 0, 1):
    upcast[len(shape) - 2] = 8
  thread = next((k for k, s in enumerate(shape) if s // upcast.get(k, 1) > 1), None)
  return Opts(upcast=upcast, thread=thread)


def online_opts(body: UOp, rows: int = 4, keys: int = 8) -> Opts | None:
  """For a kernel holding an online softmax pass (uopc.codegen.online): unroll the whole last output axis (attention's
  head dimension), so that one pass over the keys feeds every output column (a loop over column blocks would repeat the
  pass, section 11.4); take `rows` query rows per iteration of the threaded loop and `keys` keys per iteration of
  the pass (a rows x keys tile of dot products sharing one loop, one rescale per tile). None if body has no such
  pass. NOTES 16 measures the tile sizes."""
  shape = body.shape
  if body.op is not Ops.REDUCE or not shape or shape[-1] > 256 or not find_groups([body]): return None
  upcast = {len(shape) - 1: shape[-1]}
  if len(shape) >= 2 and rows > 1 and shape[-2] % rows == 0: upcast[len(shape) - 2] = rows
  return Opts(upcast=upcast, unroll=keys, thread=0)


class DefaultOpt:
  """The optimizer Tensor.opt starts with: the layout pass, then the default opts per kernel."""
  layout = staticmethod(layout_pass)

  @staticmethod
  def lower(body: UOp, out: UOp, options: Options | None = None) -> UOp:
    """A kernel body -> its loop program, with the default opts (or the online ones, where an online pass fits; or
    warp tiles around a WMMA, uopc.codegen.tc, where TC= is on and a GPU matmul fits)."""
    options = options or Options()
    if options.tc and options.device in GPU_DEVICES and (prog := lower_tc(body, out, options)) is not None: return prog
    ctx = Ctx(opts=default_opts(body), options=options)
    if options.online_softmax:
      ctx.lowerings = (OnlineSoftmax(body),)
      if (o := online_opts(body)) is not None: ctx.opts = o
    return lower(body, out, ctx)


def kernel_timer(prog: UOp, name: str, device: str = "CPU") -> Callable[[], object]:
  """A function that runs the loop program `prog` once on `device`, on random inputs: rendered and compiled by the
  device's table (uopc.device), each parameter a buffer of its size. What the tuner times."""
  dev = get_device(device)
  src = dev.renderer.render(prog, name).src
  prg = dev.compile(src)
  rng = np.random.default_rng(0)
  bufs = [dev.copyin(rng.standard_normal(p.size).astype(np_dtype(p.dtype))) for p in src.signature.params]
  return lambda: prg(*bufs)


def tuner(kernel: str, problem: tuple, candidates: list, heuristic, program: Callable[[object], UOp]):
  """The opts `kernel` runs `problem` with (uopc.runtime.tune.choose: the cached winner or the heuristic, a search
  under BEAM=n), each candidate timed as the CPU kernel program(opts) (kernel_timer)."""
  return tune.choose(kernel, problem, candidates, heuristic, lambda opts: kernel_timer(program(opts), kernel))


class VectorOpt(DefaultOpt):
  """DefaultOpt, plus vector code for float32 matmuls on the CPU (uopc.codegen.gemm_vec): B packed into panels (by the
  matmul kernel itself, each thread the panels it reads, or by a copy kernel before it), then a register tile of
  vector accumulators, its size chosen by `tuner`. The other float32 kernels take an axis as lanes where every load
  steps by one along it (uopc.codegen.vector_loops: elementwise, row and column reductions); the rest stay scalar.
  Opt in with `Tensor.opt = VectorOpt`: the default stays the optimizer whose kernels the book prints."""
  tuner = staticmethod(tuner)
  # a stride-1 convolution built under this optimizer takes its gradients as convolutions (uopc.mixin.windows)
  conv_gradients = True

  @staticmethod
  def isa(options: Options | None = None) -> ISA:
    """The vector ISA the tile is sized for (uopc.runtime.machine's table): the target of options.march (UOPC_MARCH,
    else this CPU), or the one with options.lanes lanes where given (both are part of the plan's key)."""
    if options is not None and options.lanes is not None: return isa_of(options.lanes)
    return target(options.march if options is not None else None).isa

  @classmethod
  def lanes(cls, options: Options | None = None) -> int:
    """Floats per vector register: options.lanes where given, else the target's."""
    return cls.isa(options).lanes

  @classmethod
  def layout(cls, roots: list[UOp], options: Options | None = None) -> list[UOp]:
    if options is None or options.device == "CPU":
      isa = cls.isa(options)
      roots = stage_window_pads(roots)   # a convolution reads its padded input from a buffer, by lanes
      # the whole graph's matmuls (graph=True: a reduction in an operand will be a kernel of its own); wrap hands
      # pack_b each one rebuilt over its packed sources, whose opts are its problem's, chosen once
      opts = lambda u: gemm_vec.choose_opts(u, isa, cls.tuner, graph=True)
      chosen = {u for u in UOp(Ops.SINK, tuple(roots)).toposort() if opts(u)}
      if chosen: roots = UOp.wrap(roots, chosen, lambda u: gemm_vec.pack_b(u, opts(u)) or u)
      # a matmul that packs B inline reads B as it is: no transposed copy of it first
      return layout_pass(roots, options, keep=lambda u: gemm_vec.packs_own_panels(u, isa, cls.tuner))
    return layout_pass(roots, options)

  @classmethod
  def lower(cls, body: UOp, out: UOp, options: Options | None = None) -> UOp:
    options = options or Options()
    if options.device == "CPU":
      opts = gemm_vec.choose_opts(body, cls.isa(options), cls.tuner)
      prog = opts and gemm_vec.lower_gemm(body, out, Ctx(options=options), opts)
      if prog is not None: return prog
      if not options.online_softmax and (prog := lower_vector(body, out, Ctx(options=options), cls.lanes(options))):
        return prog
    return DefaultOpt.lower(body, out, options)


class TiledOpt(DefaultOpt):
  """DefaultOpt, except that a matmul on a GPU device whose output fills at least one block is lowered with local
  tiles (uopc.codegen.localtile.lower_local_tile). Asked for explicitly: Tensor.opt = TiledOpt."""
  tile = LocalTile()

  @classmethod
  def lower(cls, body: UOp, out: UOp, options: Options | None = None) -> UOp:
    options = options or Options()
    if options.device in GPU_DEVICES and not options.tc and len(body.shape) >= 2 \
       and body.shape[-2] >= cls.tile.bm and body.shape[-1] >= cls.tile.bn:
      if (prog := lower_local_tile(body, out, cls.tile, options)) is not None: return prog
    return DefaultOpt.lower(body, out, options)

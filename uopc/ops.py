"""The ops of the UOp graph, grouped by level, and the named sets the passes test against (ALU, MOVEMENT, ...);
the kinds of loop axis. uopc.uop re-exports every name here: the book imports them from there.
"""
from enum import Enum, auto


class Ops(Enum):
  # graph roots and leaves
  SINK = auto(); CONST = auto(); BUFFER = auto()
  # tensor level: movement, reductions, kernel boundaries
  RESHAPE = auto(); EXPAND = auto(); PERMUTE = auto(); SHRINK = auto(); PAD = auto()
  REDUCE = auto(); STAGE = auto(); STACK = auto(); DETACH = auto()
  # loop level: memory and loops
  ALLOC = auto(); INDEX = auto(); LOAD = auto(); STORE = auto(); AFTER = auto(); RANGE = auto(); END = auto()
  # ALU, unary
  EXP2 = auto(); LOG2 = auto(); SQRT = auto(); RECIP = auto(); SIN = auto(); CAST = auto()
  # ALU, binary
  ADD = auto(); MUL = auto(); IDIV = auto(); MOD = auto(); MAX = auto(); CMPLT = auto(); CMPNE = auto()
  AND = auto(); OR = auto(); XOR = auto()
  # ALU, ternary
  WHERE = auto()
  # loop level, GPU: a launch index (group id or local id) and a work-group barrier (chapter 12)
  SPECIAL = auto(); BARRIER = auto()
  # loop level, GPU: a warp's tile multiply-accumulate on per-lane fragment registers (chapter 13, uopc.codegen.tc)
  WMMA = auto()
  # loop level, vectors (chapter 10): lanes gathered into a vector (a broadcast when all are one value), and one lane
  VECTORIZE = auto(); GEP = auto()

  def __repr__(self): return f"Ops.{self.name}"
  # a member is its own only instance, so identity is its hash: Enum's own __hash__ is Python code (hash of the name),
  # and every node's cache key hashes its op
  __hash__ = object.__hash__


UNARY = {Ops.EXP2, Ops.LOG2, Ops.SQRT, Ops.RECIP, Ops.SIN, Ops.CAST}
BINARY = {Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR}
ALU = UNARY | BINARY | {Ops.WHERE}
MOVEMENT = {Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK, Ops.PAD}
COMMUTATIVE = {Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR}
COMPARISON = {Ops.CMPLT, Ops.CMPNE}


class AxisType(Enum):
  LOOP = auto()      # a plain for loop
  THREAD = auto()    # the loop OpenMP splits across threads
  REDUCE = auto()    # a loop that feeds an accumulator
  UPCAST = auto()    # an output axis unrolled into registers (never a loop)
  UNROLL = auto()    # a reduce axis unrolled (never a loop)
  GLOBAL = auto()    # a launch axis across work-groups (the grid); on a GPU it becomes get_group_id / blockIdx
  LOCAL = auto()     # a launch axis within a work-group (the block); get_local_id / threadIdx

  def __repr__(self): return f"AxisType.{self.name}"

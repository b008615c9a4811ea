"""uopc.races: data races read from a loop program's indices, the same on every machine (no threads, no OpenMP).

Each program is also run serially where that helps to show what the verdict means; the verdicts themselves come from
the index algebra alone: a racing prefix sum and argmax (state shared by a THREAD loop's iterations), a stencil that
stores what its neighbour loads, correct maps and row reductions, an index the algebra cannot invert, and GPU-style
local memory with and without the barrier between its stores and loads.
"""
from __future__ import annotations
import math
import pytest
from uopc.dtype import dtypes
from uopc.ops import AxisType, Ops
from uopc.races import local_races, thread_races
from uopc.uop import LocalArg, ParamArg, UOp, range_, sink

f32, i32 = dtypes.float32, dtypes.int32
THREAD = AxisType.THREAD


def buf(slot: int, n: int, dtype=f32) -> UOp: return UOp(Ops.BUFFER, (), ParamArg(slot, dtype, (n,)))
def alloc(slot: int, n: int = 1, dtype=f32) -> UOp: return UOp(Ops.ALLOC, (), ParamArg(slot, dtype, (n,)))


def prefix_sum(n: int, axis: AxisType) -> UOp:
  A, OUT = buf(0, n), buf(1, n)
  acc = alloc(0).after()
  init = acc.index(0).store(0.0)
  k = range_(n, 0, axis)
  acck = acc.after(init, k)
  new = acck.index(0).load() + A.index(k).load()
  return sink(UOp(Ops.SINK, (acck.index(0).store(new), OUT.index(k).store(new))).end(k))


def argmax(R: int, C: int, private: bool) -> UOp:
  A, OUT = buf(0, R * C), buf(1, R, i32)
  i = range_(R, 0, THREAD)
  place = (i,) if private else ()
  m, idx = alloc(0).after(*place), alloc(1, 1, i32).after(*place)
  init_m, init_idx = m.index(0).store(-math.inf), idx.index(0).store(0)
  j = range_(C, 1)
  mj, idxj = m.after(init_m, j), idx.after(init_idx, j)
  x, old = A.index(i * C + j).load(), mj.index(0).load()
  better = old < x
  loop = UOp(Ops.SINK, (idxj.index(0).store(better.where(j, idxj.index(0).load())),
                        mj.index(0).store(better.where(x, old)))).end(j)
  return sink(OUT.index(i).store(idx.after(loop).index(0).load()).end(i))


def rowmax(R: int, C: int) -> UOp:
  A, OUT = buf(0, R * C), buf(1, R)
  i = range_(R, 0, THREAD)
  acc = alloc(0).after(i)
  init = acc.index(0).store(-math.inf)
  j = range_(C, 1)
  accj = acc.after(init, j)
  upd = accj.index(0).store(accj.index(0).load().maximum(A.index(i * C + j).load())).end(j)
  return sink(OUT.index(i).store(acc.after(upd).index(0).load()).end(i))


def test_a_thread_prefix_sum_races_on_its_shared_running_value():
  races = thread_races(prefix_sum(1000, THREAD))   # the store against itself and against the load before it
  assert [r.other for r in races] == ["loads acc0[0]", "stores there too"]
  race = races[0]
  assert race.certain and (race.loop, race.buffer, race.store) == ("ridx0 (0 <= ridx0 < 1000)", "acc0", "0")
  assert str(race).startswith("a race: in THREAD loop ridx0 (0 <= ridx0 < 1000), one iteration stores to acc0[0] "
                              "and another loads acc0[0], the same element")
  assert "does not depend on ridx0" in race.why
  assert thread_races(prefix_sum(1000, AxisType.LOOP)) == []   # a serial loop: nothing runs at the same time


def test_an_argmax_with_accumulators_shared_by_the_row_loop_races():
  races = thread_races(argmax(300, 11, private=False))
  assert {r.buffer for r in races} == {"acc0", "acc1"} and all(r.certain for r in races)
  assert thread_races(argmax(300, 11, private=True)) == []


def test_a_parallel_map_and_a_row_reduction_are_proven_free():
  A, OUT = buf(0, 64), buf(1, 64)
  i = range_(64, 0, THREAD)
  assert thread_races(sink(OUT.index(i).store(A.index(i).load() * 2.0).end(i))) == []
  assert thread_races(rowmax(16, 8)) == []
  # 2-D: row i owns out[i*8 : i*8 + 8], inner j in [0, 8): |a - s| <= 7 < 8, the row stride
  i, j = range_(16, 0, THREAD), range_(8, 1)
  X, Y = buf(0, 128), buf(1, 128)
  assert thread_races(sink(Y.index(i * 8 + j).store(X.index(i * 8 + j).load() + 1.0).end(j).end(i))) == []


def test_an_outer_serial_loop_cancels_between_two_iterations():
  o, i = range_(4, 0), range_(32, 1, THREAD)
  X = buf(0, 128)
  at = X.index(o * 32 + i)
  assert thread_races(sink(at.store(at.load() * 3.0).end(i).end(o))) == []


def test_a_stencil_in_place_reads_what_its_neighbour_stores():
  X = buf(0, 65)
  i = range_(64, 0, THREAD)
  (race,) = [r for r in thread_races(sink(X.index(i).store(X.index(i + 1).load() + X.index(i).load()).end(i)))
             if r.other == "loads data0[(ridx0+1)]"]
  assert race.certain and race.buffer == "data0" and "iteration ridx0 - 1" in race.why, race
  # even and odd elements: iteration i stores 2i and loads 2i + 1, no other iteration's element
  Y = buf(1, 128)
  assert thread_races(sink(Y.index(i * 2).store(Y.index(i * 2 + 1).load()).end(i))) == []


def test_an_index_the_algebra_cannot_invert_is_a_possible_race_saying_so():
  OUT = buf(1, 32)
  i = range_(64, 0, THREAD)
  (race,) = thread_races(sink(OUT.index(i // 2).store(1.0).end(i)))
  assert not race.certain and str(race).startswith("a possible race (independence not proven)")
  assert "ridx0" in race.store and "//" in race.why or "/" in race.store, race


def test_a_thread_races_argument_must_be_a_loop_program():
  with pytest.raises(TypeError, match="sink must be a UOp loop program"): thread_races("for (int i = 0; ...)")


def group_exchange(barrier: bool) -> UOp:
  """Work-item l stores a[l] in local memory, then reads its neighbour's slot (l + 1) % 4."""
  A, OUT = buf(0, 4), buf(1, 4)
  lx = range_(4, 0, AxisType.LOCAL)
  L = UOp(Ops.ALLOC, (), LocalArg(5, f32, (4,)))
  st = L.after(lx).index(lx).store(A.index(lx).load())
  seen = UOp(Ops.BARRIER, (st,)) if barrier else st
  return sink(OUT.index(lx).store(L.after(seen).index((lx + 1) % 4).load()).end(lx))


def test_a_local_load_needs_a_barrier_after_the_stores_it_reads():
  assert local_races(group_exchange(barrier=True)) == []
  (msg,) = local_races(group_exchange(barrier=False))
  assert msg.startswith("a race: a load of lmem5 (local memory) may read another work-item's store with no barrier")


def tiled_matmul(M: int, K: int, N: int) -> UOp:
  """Chapter 13's tiled GEMM loop program (local tiles, a barrier after the tiles' stores and one after the step)."""
  import numpy as np
  from uopc.codegen.localtile import LocalTile, lower_local_tile
  from uopc.tensor import Tensor
  from uopc.uop import substitute
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
  body = (Tensor(a) @ Tensor(b)).uop
  bufs = [u for u in body.toposort() if u.op is Ops.BUFFER]
  body = substitute(body, {u: UOp(Ops.BUFFER, (), ParamArg(k, u.dtype, u.arg.shape)) for k, u in enumerate(bufs)})
  return lower_local_tile(body, UOp(Ops.BUFFER, (), ParamArg(2, f32, (M * N,))), LocalTile())


def test_the_tiled_gemm_and_fa2_are_free_and_each_barrier_is_needed():
  from uopc.kernels.fa2 import fa2_ir
  from uopc.uop import substitute
  prog = tiled_matmul(64, 64, 64)
  assert local_races(prog) == [] and thread_races(prog) == []
  assert local_races(fa2_ir(6, 64, 64, 16, bq=32, bk=16, causal=True)) == []
  first, second = [u for u in prog.toposort() if u.op is Ops.BARRIER]
  # without the first, a work-item reads a tile slot before its owner stored it; without the second, the next step's
  # stores overwrite a slot another work-item is still reading
  assert local_races(substitute(prog, {first: first.src[0]})) == [
    "a race: a load of lmem0 (local memory) may read another work-item's store with no barrier between them (a "
    "barrier must come after the stores a load reads, before the load)"]
  assert local_races(substitute(prog, {second: second.src[0]})) == [
    f"a race: a store to lmem{n} (local memory) may overwrite what another work-item is still loading, with no "
    f"barrier between the load and the store" for n in (0, 1)]


ROW_MAX = """__kernel void row_max(__global const float* x, __global float* out) {
  __local float tile[64];
  int lid = get_local_id(0), row = get_group_id(0);
  float m = -INFINITY;
  for (int c = lid; c < 512; c += 64) m = fmax(m, x[row * 512 + c]);
  tile[lid] = m;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = 32; s > 0; s >>= 1) {
    if (lid < s) tile[lid] = fmax(tile[lid], tile[lid + s]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) out[row] = tile[0];
}"""
STAGE1 = "  tile[lid] = m;\n  barrier(CLK_LOCAL_MEM_FENCE);\n"
TREE = "    if (lid < s) tile[lid] = fmax(tile[lid], tile[lid + s]);\n    barrier(CLK_LOCAL_MEM_FENCE);\n"
RACE = ("a race: the read tile[lid+s] is not ordered by a barrier(CLK_LOCAL_MEM_FENCE) after the stores of other "
        "work-items it can see, on every way to it (the loop's first trip too)")


@pytest.mark.parametrize("what, old, new, races", [
  ("week 6's solution", "", "", []),
  ("no barrier after stage 1 (issue 49: full marks on PoCL)", STAGE1, "  tile[lid] = m;\n", [RACE]),
  ("the barrier before the store (issue 49: passed the grader's text search)", STAGE1,
   "  barrier(CLK_LOCAL_MEM_FENCE);\n  tile[lid] = m;\n", [RACE]),
  ("no barrier in the tree's loop", TREE, "    if (lid < s) tile[lid] = fmax(tile[lid], tile[lid + s]);\n", [RACE]),
  ("right: the barrier at the top of the loop", TREE,
   "    barrier(CLK_LOCAL_MEM_FENCE);\n    if (lid < s) tile[lid] = fmax(tile[lid], tile[lid + s]);\n", []),
  ("right: a block with two reads, then the store", TREE,
   "    if (lid < s) { float a = tile[lid], b = tile[lid + s]; tile[lid] = fmax(a, b); }\n"
   "    barrier(CLK_LOCAL_MEM_FENCE);\n", []),
  ("right: a while loop", "  for (int s = 32; s > 0; s >>= 1) {\n" + TREE + "  }",
   "  int s = 32;\n  while (s > 0) {\n" + TREE + "    s /= 2;\n  }", []),
])
def test_an_opencl_kernel_reads_another_items_slot_only_after_a_barrier(what, old, new, races):
  from uopc.races import opencl_local_races
  src = ROW_MAX.replace(old, new)
  assert src != ROW_MAX or not old, what
  assert opencl_local_races(src) == races, what

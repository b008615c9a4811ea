"""The week-3 assignment's GEMMs written by hand in the loop IR (naive, and a 4x4 register tile with strips for the
rows and columns left over): values against NumPy, and their structure read from the C with chapter 5's parser. Kept
out of the student's tree (scripts/release.py leaves out tests/test_week*): these kernels are the week's answers."""
import math
import re
import numpy as np
import pytest
from cstructure import declared_in, parse_c, state_inside_parallel_loop   # tests/cstructure.py
from uopc.dtype import dtypes
from uopc.render_c import render_c
from uopc.runtime import Program
from uopc.symbolic import simplify
from uopc.uop import AxisType, Ops, ParamArg, UOp, range_, sink

pytestmark = pytest.mark.week3

f32 = dtypes.f32
def buf(slot: int, n: int) -> UOp: return UOp(Ops.BUFFER, (), ParamArg(slot, f32, (n,)))
def acc_alloc(slot: int) -> UOp: return UOp(Ops.ALLOC, (), ParamArg(slot, f32, (1,)))


def gemm_block(A: UOp, B: UOp, C: UOp, N: int, K: int, rows: tuple[int, int], cols: tuple[int, int], first_id: int,
               slot: int) -> UOp:
  """C[r, c] = sum_k A[r, k] * B[k, c] for r in rows, c in cols ((start, stop) pairs): one accumulator per output."""
  i = range_(rows[1] - rows[0], first_id, AxisType.THREAD)
  j, k = range_(cols[1] - cols[0], first_id + 1), range_(K, first_id + 2)
  r, c = i + rows[0], j + cols[0]
  acc = acc_alloc(slot).after(i, j)
  init = acc.index(0).store(0.0)
  acck = acc.after(init, k)
  a, b = A.index(simplify(r * K + k)).load(), B.index(simplify(k * N + c)).load()
  upd = acck.index(0).store(acck.index(0).load() + a * b)
  return C.index(simplify(r * N + c)).store(acc.after(upd.end(k)).index(0).load()).end(j, i)


def gemm_naive(M: int, N: int, K: int) -> UOp:
  A, B, C = buf(0, M * K), buf(1, K * N), buf(2, M * N)
  return sink(gemm_block(A, B, C, N, K, (0, M), (0, N), 0, 0))


def gemm_tiled(M: int, N: int, K: int) -> UOp:
  """4x4 register tile: 16 accumulators share one k loop, each loaded a[r] and b[c] is used 4 times.
  Rows and columns left over when M or N is not a multiple of 4 are computed by naive strips after the tiles."""
  A, B, C = buf(0, M * K), buf(1, K * N), buf(2, M * N)
  M4, N4 = M - M % 4, N - N % 4
  parts = []
  if M4 and N4:
    i, j, k = range_(M4 // 4, 0, AxisType.THREAD), range_(N4 // 4, 1), range_(K, 2)
    accs = [acc_alloc(t).after(i, j) for t in range(16)]
    inits = [a.index(0).store(0.0) for a in accs]
    a = [A.index(simplify((i * 4 + r) * K + k)).load() for r in range(4)]
    b = [B.index(simplify(k * N + j * 4 + c)).load() for c in range(4)]
    ups = []
    for t in range(16):
      acck = accs[t].after(inits[t], k)
      ups.append(acck.index(0).store(acck.index(0).load() + a[t // 4] * b[t % 4]))
    loop_k = UOp(Ops.SINK, tuple(ups)).end(k)
    outs = [C.index(simplify((i * 4 + t // 4) * N + j * 4 + t % 4)).store(accs[t].after(loop_k).index(0).load())
            for t in range(16)]
    parts.append(UOp(Ops.SINK, tuple(outs)).end(j, i))
  if N4 < N: parts.append(gemm_block(A, B, C, N, K, (0, M), (N4, N), 3, 16))      # right strip, all rows
  if M4 < M and N4: parts.append(gemm_block(A, B, C, N, K, (M4, M), (0, N4), 6, 17))   # bottom strip
  return sink(*parts)


def run_gemm(build, M: int, N: int, K: int):
  rng = np.random.default_rng(M * 10000 + N * 100 + K)
  a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
  c = np.full((M, N), np.nan, np.float32)                                 # every element must be written
  src = render_c(build(M, N, K), "gemm")
  Program(src, "gemm")(a, b, c)
  return c, a.astype(np.float64) @ b.astype(np.float64), src


SIZES = [(1, 1, 1), (4, 4, 4), (8, 12, 16), (5, 7, 3), (3, 3, 9), (64, 64, 64), (67, 33, 29), (128, 96, 200)]


@pytest.mark.parametrize("M,N,K", SIZES)
@pytest.mark.parametrize("build", [gemm_naive, gemm_tiled], ids=["naive", "tiled"])
def test_gemm_matches_numpy(build, M, N, K):
  c, ref, _ = run_gemm(build, M, N, K)
  np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4 * math.sqrt(K))


def test_tiled_gemm_shares_one_k_loop():
  """16 accumulators, declared in the tile loop and updated in one k loop; each A and B value loaded once per k."""
  src = render_c(gemm_tiled(8, 8, 8), "gemm")
  fn = parse_c(src)
  assert fn.shape() == ("", "", [("ridx0", "2", [("ridx1", "2", [("ridx2", "8", [])])])])
  tile = fn.loops()[0].loops()[0]
  assert sorted(declared_in(tile), key=lambda a: int(a[3:])) == [f"acc{t}" for t in range(16)]
  kloop = tile.loops()[0]
  loads = [s for s in kloop.body if re.match(r"float val\d+ = data[01]\[", s)]
  assert len(loads) == 8                                                   # 4 of A, 4 of B for 16 multiply-adds
  assert sum(bool(re.match(r"acc\d+ = ", s)) for s in kloop.body) == 16
  assert state_inside_parallel_loop(src)


def test_tiled_gemm_with_remainders_has_three_nests():
  fn = parse_c(render_c(gemm_tiled(6, 7, 5), "gemm"))
  assert [(x.var, x.end, x.parallel) for x in fn.loops()] == [("ridx0", "1", True), ("ridx3", "6", True),
                                                              ("ridx6", "2", True)]

"""Chapter 5: the linearizer and the C renderer, on the book's online_attention_ir and on hand-written matrix-vector
products.

The book's kernel (examples/flash_attention.py, chapter 11, section 11.7) must render to exactly the C the book prints,
run correctly, and keep its per-thread state inside the parallel loop. Structural checks parse the C's loops.
"""
import importlib.util
import math
import os
import re
import subprocess
import sys
from pathlib import Path
import numpy as np
import pytest
from cstructure import declared_in, parse_c, state_inside_parallel_loop   # tests/cstructure.py
from uopc.book import load_example
from uopc.dtype import dtypes
from uopc.linearize import linearize
from uopc.render_c import render_c
from uopc.runtime import Program
from uopc.symbolic import simplify
from uopc.uop import AxisType, Ops, ParamArg, UOp, range_, sink

pytestmark = pytest.mark.ch05
online_attention_ir = load_example("flash_attention").online_attention_ir
ROOT = Path(__file__).resolve().parents[2]

# the C printed in section 11.7 for N = 1024, D = 64
BOOK_FLASH_C = """\
void flash(float* restrict data0, float* restrict data1, float* restrict data2, float* restrict data3) {
  #pragma omp parallel for
  for (int ridx0 = 0; ridx0 < 1024; ridx0++) {
    int alu1 = (ridx0*64);
    float acc2[64];
    float acc1;
    acc1 = 0.0f;
    float acc0;
    acc0 = -INFINITY;
    for (int ridx1 = 0; ridx1 < 64; ridx1++) {
      acc2[ridx1] = 0.0f;
    }
    for (int ridx2 = 0; ridx2 < 1024; ridx2++) {
      float val2 = acc1;
      float val3 = acc0;
      float acc3;
      acc3 = 0.0f;
      int alu4 = (ridx2*64);
      for (int ridx3 = 0; ridx3 < 64; ridx3++) {
        float val5 = acc3;
        float val6 = data0[(alu1+ridx3)];
        float val7 = data1[(alu4+ridx3)];
        acc3 = (val5+(val6*val7));
      }
      float val8 = acc3;
      float alu9 = (val8*0.18033688011112042f);
      float alu10 = ((val3>alu9||val3!=val3)?val3:alu9);
      float alu11 = (alu10*-1.0f);
      float alu12 = exp2f((val3+alu11));
      float alu13 = exp2f((alu9+alu11));
      acc1 = ((val2*alu12)+alu13);
      acc0 = alu10;
      for (int ridx4 = 0; ridx4 < 64; ridx4++) {
        float val14 = acc2[ridx4];
        float val15 = data2[(alu4+ridx4)];
        acc2[ridx4] = ((val14*alu12)+(alu13*val15));
      }
    }
    float val16 = acc1;
    for (int ridx5 = 0; ridx5 < 64; ridx5++) {
      float val17 = acc2[ridx5];
      data3[(alu1+ridx5)] = (val17*(1.0f/val16));
    }
  }
}"""


def attention_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
  s = q.astype(np.float64) @ k.T.astype(np.float64) / math.sqrt(q.shape[1])
  p = np.exp(s - s.max(-1, keepdims=True))
  return (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)


def run_flash(N: int, D: int, seed: int = 0, prog: UOp | None = None):
  rng = np.random.default_rng(seed)
  q, k, v = (rng.standard_normal((N, D)).astype(np.float32) for _ in range(3))
  out = np.zeros(N * D, np.float32)
  Program(render_c(prog or online_attention_ir(N, D), "flash"), "flash")(q, k, v, out)
  return out.reshape(N, D), attention_ref(q, k, v)


# ---- the book's kernel: text, values, structure ----
def test_renders_as_the_book_prints():
  assert render_c(online_attention_ir(1024, 64), "flash") == BOOK_FLASH_C


def test_same_graph_as_examples_flash_attention():
  """examples/flash_attention.py holds the same listing: hash-consing makes "the same program" an identity test."""
  path = ROOT / "examples" / "flash_attention.py"
  if not path.exists(): pytest.skip("examples/flash_attention.py not written yet")
  spec = importlib.util.spec_from_file_location("flash_attention_example", path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  assert mod.online_attention_ir(64, 16) is online_attention_ir(64, 16)


@pytest.mark.parametrize("N,D", [(1024, 64), (1000, 48), (3, 1), (1, 64)])
def test_flash_matches_numpy(N, D):
  out, ref = run_flash(N, D)
  np.testing.assert_allclose(out, ref, atol=1e-5, rtol=0)


def test_flash_with_a_late_maximum():
  """Scores whose maximum comes last in the row: every earlier term must be rescaled (the 'forgetting to rescale o'
  pitfall passes tests whose maximum never moves)."""
  N, D = 64, 8
  rng = np.random.default_rng(1)
  q = rng.standard_normal((N, D)).astype(np.float32)
  k = (np.linspace(-3, 3, N)[:, None] * q.mean(0)[None, :] * 4).astype(np.float32)   # scores grow along the row
  v = rng.standard_normal((N, D)).astype(np.float32)
  out = np.zeros(N * D, np.float32)
  Program(render_c(online_attention_ir(N, D), "flash"), "flash")(q, k, v, out)
  np.testing.assert_allclose(out.reshape(N, D), attention_ref(q, k, v), atol=1e-5, rtol=0)


def test_one_pragma_directly_above_the_row_loop():
  src = render_c(online_attention_ir(1024, 64), "flash")
  lines = [ln.strip() for ln in src.splitlines()]
  assert lines.count("#pragma omp parallel for") == 1
  k = lines.index("#pragma omp parallel for")
  assert k == 1 and lines[k + 1] == "for (int ridx0 = 0; ridx0 < 1024; ridx0++) {"
  assert [x.var for x in parse_c(src).walk() if x.parallel] == ["ridx0"]


def test_loop_nest_of_the_book():
  """One parallel row loop; inside it the initialisations, the key loop with the dot-product loop and the
  output-update loop, then the normalisation loop."""
  fn = parse_c(render_c(online_attention_ir(1024, 64), "flash"))
  assert fn.shape() == ("", "", [
    ("ridx0", "1024", [
      ("ridx1", "64", []),                                   # o[d] = 0
      ("ridx2", "1024", [("ridx3", "64", []),                # key loop: the dot product q_i . k_j ...
                         ("ridx4", "64", [])]),              # ... and the output update o[d] = o[d]*corr + p*v[j, d]
      ("ridx5", "64", []),                                   # out[i, d] = o[d] / l
    ])])
  row = fn.loops()[0]
  assert row.parallel and declared_in(fn) == []
  stmts = [s for s in row.body if isinstance(s, str)]
  assert "acc0 = -INFINITY;" in stmts and "acc1 = 0.0f;" in stmts      # m and l start once per row
  first_loop = row.body.index(row.loops()[0])
  assert row.body.index("acc0 = -INFINITY;") < first_loop and row.body.index("acc1 = 0.0f;") < first_loop
  assert row.loops()[0].body == ["acc2[ridx1] = 0.0f;"]
  key = row.loops()[1]
  assert "acc3 = 0.0f;" in key.body[:key.body.index(key.loops()[0])]   # the dot product restarts for every key


def test_state_declared_inside_the_parallel_loop():
  fn = parse_c(render_c(online_attention_ir(1024, 64), "flash"))
  row = fn.loops()[0]
  assert sorted(declared_in(row)) == ["acc0", "acc1", "acc2"]            # running max, running sum, output row
  assert declared_in(row.loops()[1]) == ["acc3"]                         # the dot product, per key
  assert state_inside_parallel_loop(render_c(online_attention_ir(1024, 64), "flash"))


def hoisted(N: int, D: int, keep_init_in_loop: bool) -> UOp:
  """The book's kernel with M, L, O placed by .after() without i: state declared outside the parallel loop.

  keep_init_in_loop=False: M.after() replaces M.after(i) (so the initialisations leave the loop too);
  True: M.after().after(i), declared outside but still initialised per row (a race only with several threads)."""
  prog = online_attention_ir(N, D)
  is_state = lambda u: u.op is Ops.AFTER and u.src[0].op is Ops.ALLOC and u.src[0].arg.slot in (0, 1, 2)
  todo = {u for u in prog.toposort() if is_state(u) and u.src[1:] == (range_(N, 0, AxisType.THREAD),)}
  assert len(todo) == 3, "expected Mi, Li, Oi in the listing"
  fix = (lambda n: n.src[0].after().after(*n.src[1:])) if keep_init_in_loop else (lambda n: n.src[0].after())
  (new,) = UOp.wrap([prog], todo, fix)
  return new


@pytest.mark.parametrize("keep_init_in_loop", [False, True])
def test_structural_check_catches_hoisted_state(keep_init_in_loop):
  src = render_c(hoisted(1024, 64, keep_init_in_loop), "flash")
  assert src != BOOK_FLASH_C
  head = [ln.strip() for ln in src.splitlines()[:4]]
  assert "float acc2[64];" in head                                      # hoisted above the parallel loop
  assert not state_inside_parallel_loop(src)
  assert state_inside_parallel_loop(BOOK_FLASH_C)


def test_hoisted_state_is_wrong_without_reinitialisation():
  out, ref = run_flash(16, 4, prog=hoisted(16, 4, keep_init_in_loop=False))
  assert not np.allclose(out, ref, atol=1e-3)                             # row 1 starts from row 0's state


DETERMINISM = """
from uopc.book import load_example
from uopc.render_c import render_c
print(render_c(load_example("flash_attention").online_attention_ir(1024, 64), "flash"))
"""


def test_deterministic_across_processes():
  """Same graph, same text, in fresh processes with different hash seeds (no set or dict-of-id ordering leaks)."""
  code = DETERMINISM
  outs = []
  for seed in ("0", "1", "12345"):
    env = dict(os.environ, PYTHONHASHSEED=seed)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    outs.append(r.stdout.rstrip("\n"))
  assert outs[0] == outs[1] == outs[2] == BOOK_FLASH_C


C_WORDS = {"void", "float", "int", "for", "restrict", "pragma", "omp", "parallel", "exp2f", "INFINITY", "flash"}


def test_names_are_acc_val_alu_ridx_data():
  src = render_c(online_attention_ir(1024, 64), "flash")
  words = set(re.findall(r"\b[A-Za-z_]\w*\b", re.sub(r"\d+\.\d+f", "", src)))   # drop float literals (1.0f)
  odd = {w for w in words - C_WORDS if not re.fullmatch(r"(acc|val|alu|ridx|data)\d+", w)}
  assert not odd, f"unexpected names in the C: {sorted(odd)}"
  assert {"acc0", "val2", "alu1", "ridx0", "data0"} <= words


def test_linearize_opens_and_closes_every_loop_once():
  lines = linearize(online_attention_ir(64, 8))
  opens = [ln.uop.arg[0] for ln in lines if ln.kind == "open"]
  closes = [ln.uop.arg[0] for ln in lines if ln.kind == "close"]
  assert opens == [0, 1, 2, 3, 4, 5] and sorted(closes) == opens


# ---- a matrix-vector product by hand in the loop IR (section 5.4-5.5; the week-3 GEMMs are tested with the week's
# grading tests, tests/grader/test_week3_gemm_loop_ir.py, which the student's tree does not have) ----
f32 = dtypes.f32
def buf(slot: int, n: int) -> UOp: return UOp(Ops.BUFFER, (), ParamArg(slot, f32, (n,)))
def acc_alloc(slot: int) -> UOp: return UOp(Ops.ALLOC, (), ParamArg(slot, f32, (1,)))


def matvec_rows(A: UOp, X: UOp, Y: UOp, K: int, rows: tuple[int, int], first_id: int, slot: int) -> UOp:
  """y[r] = sum_k A[r, k] x[k] for r in rows ((start, stop)): one accumulator per row."""
  i, k = range_(rows[1] - rows[0], first_id, AxisType.THREAD), range_(K, first_id + 1)
  acc = acc_alloc(slot).after(i)
  acck = acc.after(acc.index(0).store(0.0), k)
  upd = acck.index(0).store(acck.index(0).load() + A.index(simplify((i + rows[0]) * K + k)).load() * X.index(k).load())
  return Y.index(simplify(i + rows[0])).store(acc.after(upd.end(k)).index(0).load()).end(i)


def matvec(M: int, K: int) -> UOp:
  A, X, Y = buf(0, M * K), buf(1, K), buf(2, M)
  return sink(matvec_rows(A, X, Y, K, (0, M), 0, 0))


def matvec_tiled(M: int, K: int) -> UOp:
  """Four rows per trip: one load of x feeds four accumulators under one END of k; the rows left over after."""
  A, X, Y = buf(0, M * K), buf(1, K), buf(2, M)
  M4, parts = M - M % 4, []
  if M4:
    i, k = range_(M4 // 4, 0, AxisType.THREAD), range_(K, 1)
    accs = [acc_alloc(r).after(i) for r in range(4)]
    inits = [a.index(0).store(0.0) for a in accs]
    x = X.index(k).load()
    ups = [accs[r].after(inits[r], k).index(0).store(accs[r].after(inits[r], k).index(0).load() +
                                                      A.index(simplify((i * 4 + r) * K + k)).load() * x)
           for r in range(4)]
    loop_k = UOp(Ops.SINK, tuple(ups)).end(k)
    outs = [Y.index(simplify(i * 4 + r)).store(accs[r].after(loop_k).index(0).load()) for r in range(4)]
    parts.append(UOp(Ops.SINK, tuple(outs)).end(i))
  if M4 < M: parts.append(matvec_rows(A, X, Y, K, (M4, M), 2, 4))
  return sink(*parts)


@pytest.mark.parametrize("M,K", [(1, 1), (4, 4), (5, 3), (64, 64), (67, 29), (128, 200)])
@pytest.mark.parametrize("build", [matvec, matvec_tiled], ids=["naive", "tiled"])
def test_matvec_matches_numpy(build, M, K):
  rng = np.random.default_rng(M * 1000 + K)
  a, x = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal(K).astype(np.float32)
  y = np.full(M, np.nan, np.float32)                                      # every element must be written
  Program(render_c(build(M, K), "mv"), "mv")(a, x, y)
  np.testing.assert_allclose(y, a.astype(np.float64) @ x, rtol=1e-4, atol=1e-4 * math.sqrt(K))


def test_tiled_matvec_shares_one_k_loop_and_one_load_of_x():
  src = render_c(matvec_tiled(8, 16), "mv")
  fn = parse_c(src)
  assert fn.shape() == ("", "", [("ridx0", "2", [("ridx1", "16", [])])])
  tile = fn.loops()[0]
  assert sorted(declared_in(tile)) == ["acc0", "acc1", "acc2", "acc3"]
  kloop = tile.loops()[0]
  assert sum(bool(re.match(r"float val\d+ = data1\[", s)) for s in kloop.body) == 1   # x once, for four rows
  assert sum(bool(re.match(r"float val\d+ = data0\[", s)) for s in kloop.body) == 4
  assert sum(bool(re.match(r"acc\d+ = ", s)) for s in kloop.body) == 4
  assert state_inside_parallel_loop(src)


def test_tiled_matvec_with_rows_left_over_has_two_nests():
  fn = parse_c(render_c(matvec_tiled(6, 5), "mv"))
  assert [(x.var, x.end, x.parallel) for x in fn.loops()] == [("ridx0", "1", True), ("ridx2", "2", True)]

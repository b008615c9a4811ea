"""The vector kernels in use: VectorOpt's matmul (uopc.codegen.gemm_vec) and the vector attention
(uopc.kernels.flash_vec via uopc.nn.flash), against NumPy in float64; which path a shape takes; what the plans and
sources look like."""
import dataclasses
import math
import numpy as np
import pytest
from uopc.codegen import gemm_vec
from uopc.nn import flash as nn_flash
from uopc.dtype import dtypes
from uopc.kernelize import make_plan, realize
from uopc.nn import scaled_dot_product_attention
from uopc.opt import DefaultOpt, VectorOpt
from uopc.options import Options
from uopc.tensor import Tensor
from uopc.uop import UOp, Ops, ParamArg, range_

pytestmark = pytest.mark.ch10
rng = np.random.default_rng(0)
f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)


@pytest.fixture(autouse=True)
def own_tuning_cache(tmp_path, monkeypatch):
  """Every test sees the heuristic opts: no winner tuned on this machine by someone else."""
  monkeypatch.setenv("UOPC_CACHE_DIR", str(tmp_path / "cache"))
  monkeypatch.setattr(gemm_vec, "_chosen", {})


@pytest.fixture
def vector_opt(monkeypatch):
  monkeypatch.setattr(Tensor, "opt", VectorOpt)


def close(out, ref, scale=1.0):
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * scale)


# ---- the matmul ----
@pytest.fixture(params=["inline", "kernel"])
def pack(request, monkeypatch, fresh_plan_cache):
  """Both ways of packing B (uopc.codegen.gemm_vec): with one OpenMP thread every panel that fits is packed inline; with
  a thousand there are never enough panels to share out, so a copy kernel packs them. The decision is made when a plan
  is made: each test gets a plan cache of its own."""
  monkeypatch.setattr(gemm_vec, "omp_threads", lambda: 1 if request.param == "inline" else 1000)
  return request.param


@pytest.mark.parametrize("shape_a, shape_b", [
  ((256, 256), (256, 256)),       # the vector path, 8 panels of 32 columns
  ((128, 1024), (1024, 64)),      # K = 1024, 2 panels: too few to share out, so packed by a copy kernel either way
  ((4, 128, 64), (4, 64, 96)),    # batched: 4 x 3 panels
  ((2, 128, 128), (128, 96)),     # B broadcast over A's batch
  ((2, 128, 64), (2, 64, 96)),    # batched, too small to pack (under MIN_FLOPS): the default lowering
  ((64, 32), (32, 48)),           # too small to pack: the default lowering
  ((128, 256), (256, 65)),        # N not a whole number of vectors: the default lowering
  ((100, 256), (256, 64)),        # M not a whole number of row blocks: the default lowering
])
@pytest.mark.usefixtures("pack")
def test_vector_matmul_matches_numpy(vector_opt, shape_a, shape_b):
  a, b = f32(*shape_a), f32(*shape_b)
  out = (Tensor(a) @ Tensor(b)).numpy()
  close(out, a.astype(np.float64) @ b, math.sqrt(shape_a[-1]))


def test_operands_with_elementwise_work_and_a_transpose(vector_opt, pack):
  """B^T is read as it is: inline, the kernel gathers it a panel at a time; otherwise a copy kernel repacks it."""
  a, b = f32(128, 256), f32(128, 256)
  mm = (Tensor(a) * 2 + 1) @ (Tensor(b) * 0.5).T
  assert ("repacked" in make_plan([mm.uop], options=Options(opt=VectorOpt)).explain()) == (pack == "kernel")
  close(mm.numpy(), (a.astype(np.float64) * 2 + 1) @ (b.astype(np.float64) * 0.5).T, 16)


def test_the_plan_packs_b_then_runs_a_vector_tile(pack):
  a, b = Tensor(f32(256, 256)), Tensor(f32(256, 256))
  plan = make_plan([(a @ b).uop], options=Options(opt=VectorOpt))
  # inline, a tile's rows need not divide M (a last block takes the rest: 6 x 2 on AVX2 and SSE, 256 = 42 x 6 + 4)
  opts = gemm_vec.heuristic_opts(VectorOpt.isa(), 256, 256, 256, tail=lambda o: pack == "inline")
  tail = 256 % opts.rows
  src = plan.kernels[-1].src
  assert f"f32x{opts.lanes}" in src and src.count(f"f32x{opts.lanes} acc") == (opts.rows + tail) * opts.nvec
  if pack == "inline":   # one kernel: per panel, the pack loop, then the loops over row blocks and over k, the tail's k
    assert len(plan.kernels) == 1 and not plan.temps and "repacked" not in plan.explain()
    assert f"float acc0[{256 * opts.nr}];" in src and src.count("for (") == 4 + (tail > 0)
  else:                  # the copy kernel, then the tile: the threaded loop over blocks and the loop over k
    assert len(plan.kernels) == 2 and "repacked" in plan.explain()
    assert src.count("for (") == 2   # every other axis is registers


@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_a_last_block_of_fewer_rows(lanes, monkeypatch, fresh_plan_cache):
  """Where B is packed inline, a tile's rows need not divide M: each panel's row blocks end with one of M % rows rows
  (so AVX2 gets BLIS haswell's 6-row tile for M = 512, 1024, 2048, not 4 rows: NOTES 39). The ISA with `lanes` lanes
  takes 6 x 2 (16 registers) or 8 x 2 (32), both with a tail at M = 100."""
  monkeypatch.setattr(gemm_vec, "omp_threads", lambda: 1)
  isa = VectorOpt.isa(Options(lanes=lanes))
  opts = gemm_vec.heuristic_opts(isa, 100, 256, 128, tail=lambda o: True)
  assert 100 % opts.rows and opts.rows * opts.nvec == (12 if isa.registers == 16 else 16)
  a, b = f32(100, 128), f32(128, 256)   # big enough to pack (gemm_vec.MIN_FLOPS)
  mm = Tensor(a) @ Tensor(b)
  src = make_plan([mm.uop], options=Options(opt=VectorOpt, lanes=lanes)).kernels[-1].src
  assert src.count(f"f32x{lanes} acc") == (opts.rows + 100 % opts.rows) * opts.nvec   # the blocks' and the tail's
  close(realize([mm.uop], options=Options(opt=VectorOpt, lanes=lanes))[0].reshape(100, 256),
        a.astype(np.float64) @ b, 12)


@pytest.mark.parametrize("lanes", [4, 8])
def test_the_lane_count_is_an_option_and_part_of_the_plan_key(lanes, fresh_plan_cache):
  """Options.lanes sets the vector width whatever this CPU's is: another width is another plan, with vectors that wide,
  and the same product."""
  a, b = f32(256, 256), f32(256, 256)
  mm = Tensor(a) @ Tensor(b)
  plan = make_plan([mm.uop], options=Options(opt=VectorOpt, lanes=lanes))
  other = make_plan([mm.uop], options=Options(opt=VectorOpt, lanes=24 - 2 * lanes))   # 4 <-> 16, 8 <-> 8
  assert (plan is other) == (lanes == 8)
  widths = {u.dtype.count for k in plan.kernels for u in k.ast.toposort() if u.dtype is not None and u.dtype.count > 1}
  assert widths == {lanes}
  close(realize([mm.uop], options=Options(opt=VectorOpt, lanes=lanes))[0].reshape(256, 256), a.astype(np.float64) @ b,
        16)


def test_the_tile_is_the_tuners_and_its_choice_a_registered_memo(fresh_plan_cache, monkeypatch):
  """VectorOpt hands gemm_vec its tuner, which gets loop programs (gemm_vec compiles nothing); the choice is kept per
  problem until uopc.helpers.clear_caches()."""
  from uopc.helpers import CACHES, clear_caches
  monkeypatch.setattr(gemm_vec, "_chosen", CACHES["gemm_vec.chosen"])   # the registered memo, not the fixture's
  clear_caches()
  asked = []
  class Rows4(VectorOpt):
    @staticmethod
    def tuner(kernel, problem, candidates, heuristic, program):
      asked.append((kernel, problem, program(heuristic).op))
      return next(c for c in candidates if c.rows == 4)
  a, b = f32(256, 256), f32(256, 256)
  plan = make_plan([(Tensor(a) @ Tensor(b)).uop], options=Options(opt=Rows4, lanes=8))
  assert asked == [("gemm_vec", ((), 256, 256, 256, 8), Ops.SINK)]
  (chosen,) = gemm_vec._chosen.values()
  assert plan.kernels[-1].src.count("f32x8 acc") == 4 * chosen.nvec
  clear_caches()
  assert gemm_vec._chosen == {}


def test_when_a_panel_is_packed_inline():
  o = gemm_vec.GemmOpts(rows=8, nvec=2, lanes=16)   # panels of 32 columns
  assert gemm_vec.packs_inline(o, 1, 512, 512, threads=2)          # 16 panels of 64 KB for 2 threads
  assert not gemm_vec.packs_inline(o, 1, 512, 512, threads=8)      # 16 panels cannot keep 8 threads busy
  assert gemm_vec.packs_inline(o, 4, 128, 512, threads=4)          # batches count: 4 x 4 panels
  assert gemm_vec.packs_inline(o, 1, 4096, 2048, threads=2)        # 256 KB: the largest panel kept local
  assert not gemm_vec.packs_inline(o, 1, 4096, 4096, threads=2)    # 512 KB: packed by a copy kernel


def test_the_default_optimizer_prints_scalar_c():
  """The book's listings come from DefaultOpt: no vector types there."""
  a, b = Tensor(f32(256, 256)), Tensor(f32(256, 256))
  plan = make_plan([(a @ b).uop], options=Options(opt=DefaultOpt))
  assert all("typedef" not in k.src and "f32x" not in k.src for k in plan.kernels)


def test_expand_lanes_loads_broadcasts_and_gathers():
  buf = UOp(Ops.BUFFER, (), ParamArg(0, dtypes.f32, (1024,)))
  i, lane = range_(16, 0), range_(16, 1)
  consecutive = gemm_vec.expand_lanes(buf.index(i * 16 + lane).load(), lane)
  assert consecutive.op is Ops.LOAD and consecutive.dtype == dtypes.f32.vec(16)
  assert lane not in consecutive.toposort()
  same = gemm_vec.expand_lanes(buf.index(i).load(), lane)
  assert same.op is Ops.LOAD and same.dtype == dtypes.f32   # no lane in it: a scalar, broadcast where it meets one
  strided = gemm_vec.expand_lanes(buf.index(i + lane * 64).load(), lane)
  assert strided.op is Ops.VECTORIZE and len(set(strided.src)) == 16 and lane not in strided.toposort()
  scaled = gemm_vec.expand_lanes(buf.index(i * 16 + lane).load() * 2.0, lane)
  assert scaled.op is Ops.MUL and scaled.src[0].op is Ops.LOAD and scaled.src[1].dtype.count == 16


# ---- attention ----
@pytest.mark.parametrize("q_shape, k_len, d, causal", [
  ((2, 3, 37), 37, 32, False),     # batch x heads, rows and keys padded
  ((1, 2, 64), 64, 64, True),
  ((1, 1, 20), 50, 48, True),      # fewer queries than keys; 48 = 3 vectors (one vector per output chunk)
  ((3, 1, 16), 200, 64, False),
  ((1, 1, 33), 33, 40, False),     # 40 is not a whole number of vectors: the scalar kernel
])
def test_attention_matches_numpy(q_shape, k_len, d, causal):
  *batch, nq = q_shape
  q, k, v = f32(*batch, nq, d), f32(*batch, k_len, d), f32(*batch, k_len, d)
  out = scaled_dot_product_attention(q, k, v, is_causal=causal).numpy()
  s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / math.sqrt(d)
  if causal: s = s + np.triu(np.full((nq, k_len), -np.inf), 1)
  p = np.exp(s - s.max(-1, keepdims=True))
  close(out, (p / p.sum(-1, keepdims=True)) @ v)


def test_which_head_dims_take_the_vector_kernel():
  lanes = nn_flash.lanes_here()
  assert nn_flash.fits(64, 64) == (64 % lanes == 0) and not nn_flash.fits(64, lanes + 1)


def test_the_vector_kernel_is_compiled_once_per_problem_and_opts():
  q = f32(1, 64, 64)
  before = len(nn_flash._programs)
  for _ in range(3): nn_flash.attention(q, q, q, causal=False)
  assert len(nn_flash._programs) == before + 1


def test_both_vector_layouts_give_the_same_attention():
  """The heuristic puts queries in the lanes (q, k, v passed as they are); the tuner may pick keys in the lanes (a
  padded q and a packed K^T made in nn_flash.run): both against float64."""
  from uopc.kernels.flash_vec import FlashVecOpts
  from uopc.kernels.flash_vec_q import FlashQOpts
  lanes = nn_flash.lanes_here()
  heuristic = nn_flash.choose_opts(2, 70, 45, 32, 2 * lanes, True, 0.2)
  assert isinstance(heuristic, FlashQOpts)
  q, k, v = f32(2, 70, 32), f32(2, 45, 32), f32(2, 45, 2 * lanes)
  s = q.astype(np.float64) @ k.transpose(0, 2, 1) * 0.2 + np.triu(np.full((70, 45), -np.inf), 1)
  p = np.exp(s - s.max(-1, keepdims=True))
  want = (p / p.sum(-1, keepdims=True)) @ v
  for opts in (heuristic, FlashVecOpts(rows=6, kvec=1, dchunk=1, lanes=lanes)):
    out = nn_flash.run(q, k, v, True, 0.2, opts)
    assert out.shape == (2, 70, 2 * lanes)
    close(out, want)
  for opts in (heuristic, FlashVecOpts(rows=6, kvec=1, dchunk=1, lanes=lanes)):   # 70 queries: 11 blocks of 6 and 4
    assert nn_flash.run(q, k, v, True, 0.2, opts).flags.c_contiguous   # written whole: no padding, slice or copy
  kinds = {type(c) for c in nn_flash.flash_vec_q.candidate_opts(lanes, 64) + nn_flash.candidate_opts(lanes, 64)}
  assert kinds == {FlashQOpts, FlashVecOpts}


def test_the_thread_loop_schedule_is_a_dialect_choice():
  from uopc.render_c import c_renderer, render_c
  from uopc.kernels.flash_vec import flash_vector_ir, FlashVecOpts
  prog = flash_vector_ir(1, 64, 64, 32, FlashVecOpts(rows=4, kvec=2, dchunk=1))
  assert "#pragma omp parallel for schedule(dynamic, 4)\n" in c_renderer("dynamic").render(prog, "f").src
  assert c_renderer("static").render(prog, "f").src == render_c(prog, "f")   # the book's pragma, unchanged
  with pytest.raises(ValueError, match="unknown OpenMP schedule"): c_renderer("dynamic); system(\"x\"")


def test_the_backward_matmuls_take_the_vector_path_too(vector_opt):
  """Autograd reduces permuted products (dW = x^T dy): as_matmul moves the permute into the operands."""
  X, W, G = f32(16, 32, 256), f32(256, 64), f32(16, 32, 64)
  x, w = Tensor(X, requires_grad=True), Tensor(W, requires_grad=True)
  ((x @ w) * Tensor(G)).sum().backward()
  close(w.grad.numpy(), np.einsum("bti,btj->ij", X.astype(np.float64), G), 16)
  close(x.grad.numpy(), G.astype(np.float64) @ W.T.astype(np.float64), 8)
  body = UOp(Ops.REDUCE, (UOp(Ops.PERMUTE, ((Tensor(X).reshape(512, 256, 1).expand(512, 256, 64) *
                                              Tensor(G).reshape(512, 1, 64).expand(512, 256, 64)).uop,), (1, 2, 0)),),
             (Ops.ADD, 1))
  assert gemm_vec.matmul_operands(body) is None and gemm_vec.as_matmul(body) is not None


def test_a_sum_over_batch_and_time_is_one_matmul(vector_opt, monkeypatch):
  """dW = sum over b and t of x[b, t, i] dy[b, t, j] reduces two axes: as_matmul merges them into one K = B * T.
  16 lanes and one thread, whatever this machine has: 8 rows x 2 vectors leave N = 64 two panels, too few to pack
  inline (with 8 lanes and one thread there would be four, packed inline)."""
  monkeypatch.setattr(gemm_vec, "omp_threads", lambda: 1)
  X, G = f32(16, 32, 128), f32(16, 32, 64)
  prod = (Tensor(X).reshape(16, 32, 128, 1) * Tensor(G).reshape(16, 32, 1, 64)).permute(2, 3, 0, 1)
  body = UOp(Ops.REDUCE, (prod.uop,), (Ops.ADD, 2))
  merged = gemm_vec.as_matmul(body)
  assert gemm_vec.matmul_operands(body) is None and merged is not None
  assert merged.arg == (Ops.ADD, 1) and merged.src[0].shape == (128, 64, 512)
  plan = make_plan([body], options=Options(opt=VectorOpt, lanes=16))
  assert "repacked" in plan.explain() and any("f32x16" in k.src for k in plan.kernels)
  dw = realize([body], options=Options(opt=VectorOpt, lanes=16))[0].reshape(128, 64)
  close(dw, np.einsum("bti,btj->ij", X.astype(np.float64), G), 24)


def test_a_gpt_step_gives_the_same_gradients_with_either_optimizer(monkeypatch):
  from uopc.nn import GPT, GPTConfig
  cfg = GPTConfig(vocab_size=40, block_size=32, n_layer=1, n_head=2, n_embd=64)
  x = np.random.default_rng(1).integers(0, 40, (16, 32))
  grads = []
  for opt in (DefaultOpt, VectorOpt):
    monkeypatch.setattr(Tensor, "opt", opt)
    model = GPT(cfg, seed=0)
    _, loss = model(Tensor(x), Tensor(np.roll(x, -1, 1)))
    loss.backward()
    params = model.named_parameters()
    first, *rest = [p.grad for p in params.values()]
    first.realize(*rest)   # one plan for every gradient, as a training step realizes them
    grads.append({k: p.grad.numpy() for k, p in params.items()})
  for k in grads[0]:
    np.testing.assert_allclose(grads[1][k], grads[0][k], rtol=2e-3, atol=2e-5, err_msg=k)


def test_a_weight_shared_by_every_batch_is_packed_once(monkeypatch, fresh_plan_cache):
  """(batch, time, features) @ W is one matmul of batch x time rows (gemm_vec._merge_batch): its threaded loop walks
  W's panels once, where a batched matmul with a B per batch walks them once a batch. Same values either way."""
  monkeypatch.setattr(gemm_vec, "omp_threads", lambda: 1)   # every panel packed inline: a loop trip per panel
  x, w, ws = f32(4, 64, 128), f32(128, 128), f32(4, 128, 128)
  trips = []
  for b, ref in ((w, x.astype(np.float64) @ w), (ws, x.astype(np.float64) @ ws)):
    mm = Tensor(x) @ Tensor(b)
    plan = make_plan([mm.uop], options=Options(opt=VectorOpt, lanes=16))
    (k,) = plan.kernels
    trips.append([u.src[0].arg for u in k.ast.toposort() if u.op is Ops.RANGE and u.arg[1].name == "THREAD"])
    close(realize([mm.uop], options=Options(opt=VectorOpt, lanes=16))[0].reshape(ref.shape), ref, 16)
  assert trips == [[128 // 32], [4 * 128 // 32]]


def test_a_matmul_after_a_reduction_still_gets_packed_panels(monkeypatch, fresh_plan_cache):
  """layernorm(x) @ W: at layout time the matmul's operand still holds the LayerNorm's reductions (each becomes a
  kernel of its own), and the matmul is recognised through them: with too few panels to pack inline, a copy kernel
  packs W, and the matmul reads it without gathers."""
  monkeypatch.setattr(gemm_vec, "omp_threads", lambda: 1000)   # never enough panels to share out: packed by a kernel
  x, w = f32(4, 64, 128), f32(128, 128)
  mm = Tensor(x).layernorm(-1) @ Tensor(w)
  plan = make_plan([mm.uop], options=Options(opt=VectorOpt, lanes=16))
  assert "repacked" in plan.explain()
  gathers = [u for k in plan.kernels for u in k.ast.toposort() if u.op is Ops.VECTORIZE and len(set(u.src)) > 1
             and any(s.op is Ops.LOAD for s in u.src)]
  assert not gathers
  x64 = x.astype(np.float64)
  ln = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
  close(realize([mm.uop], options=Options(opt=VectorOpt, lanes=16))[0].reshape(4, 64, 128), ln @ w, 16)


def _accumulators_per_block(kernel) -> int:
  """The vector accumulators a matmul kernel's row blocks declare (its tile's rows x vectors)."""
  return sum(1 for u in kernel.ast.toposort() if u.op is Ops.ALLOC and u.dtype.count > 1)


def test_a_merged_batch_of_contiguous_rows_takes_any_block_of_rows(fresh_plan_cache):
  """(12, 64, 128) @ W merged into 768 rows: the input's rows are contiguous, so a block's rows have linear addresses
  across a batch boundary (_merge_batch merges A at its first column; _row_address simplifies the // and % of a
  merged row back together), and AVX2 (8 lanes, 16 registers) takes the heuristic's 6 rows, which divide 768 but not
  64 (4 rows before: 64 and 65 GFLOP/s against 93 and 98 for the baby GPT's forward shapes, NOTES 66). Every value
  bit for bit the 4-row tile's: each output is the same FMA chain over k."""
  from uopc.runtime.machine import isa_of
  x, w = f32(12, 64, 128), f32(128, 128)
  mm = Tensor(x) @ Tensor(w)
  plan = make_plan([mm.uop], options=Options(opt=VectorOpt, lanes=8))
  opts = gemm_vec.choose_opts(plan.kernels[-1].body, isa_of(8), VectorOpt.tuner)
  assert opts == gemm_vec.GemmOpts(rows=6, nvec=2, lanes=8) and 64 % opts.rows
  assert not [u for u in plan.kernels[-1].ast.toposort() if u.op in (Ops.IDIV, Ops.MOD)]
  class Rows4(VectorOpt):
    @staticmethod
    def tuner(kernel, problem, candidates, heuristic, program):
      return gemm_vec.GemmOpts(rows=4, nvec=2, lanes=8)
  out = realize([mm.uop], options=Options(opt=VectorOpt, lanes=8))[0]
  gemm_vec._chosen.clear()
  rows4 = make_plan([mm.uop], options=Options(opt=Rows4, lanes=8))
  assert _accumulators_per_block(rows4.kernels[-1]) == 8 and _accumulators_per_block(plan.kernels[-1]) == 12
  np.testing.assert_array_equal(out, realize([mm.uop], options=Options(opt=Rows4, lanes=8))[0])
  close(out.reshape(12, 64, 128), x.astype(np.float64) @ w, 16)


def test_a_merged_batchs_row_blocks_stay_within_a_batch_where_its_rows_are_not_linear(fresh_plan_cache):
  """(12, 64, 128) @ W, the input a transposed (64, 12, 128): a merged row m reads x[m % 64][m // 64], an address
  no simplification makes linear, so a block of rows stays within a batch: the tile's rows divide 64, and the only
  // and % left are of the loop over blocks (its batch and its block within it: once a block, not once a row)."""
  from uopc.runtime.machine import isa_of
  xt, w = f32(64, 12, 128), f32(128, 128)
  mm = Tensor(xt).permute(1, 0, 2) @ Tensor(w)
  plan = make_plan([mm.uop], options=Options(opt=VectorOpt, lanes=8))
  opts = gemm_vec.choose_opts(plan.kernels[-1].body, isa_of(8), VectorOpt.tuner)
  assert opts is not None and 64 % opts.rows == 0 and opts.lanes == 8
  blocks = {(u.src[0].src[0].arg, u.src[1].arg) for u in plan.kernels[-1].ast.toposort() if u.op in (Ops.IDIV, Ops.MOD)}
  assert blocks == {(768 // opts.rows, 64 // opts.rows)}   # (the loop's trip count, a batch's blocks)
  out = realize([mm.uop], options=Options(opt=VectorOpt, lanes=8))[0].reshape(12, 64, 128)
  close(out, xt.transpose(1, 0, 2).astype(np.float64) @ w, 16)


def _reduce_trips(kernel) -> list[int]:
  """The trip counts of a kernel's REDUCE loops (its k loops), in the order of their ids."""
  return [u.src[0].arg for u in sorted((u for u in kernel.ast.toposort() if u.op is Ops.RANGE
                                        and u.arg[1].name == "REDUCE"), key=lambda u: u.arg[0])]


@pytest.mark.parametrize("by_k", [True, False])
def test_a_read_across_its_rows_is_summed_in_chunks_of_k(by_k, monkeypatch, fresh_plan_cache):
  """dW = x^T dy reads A = x^T across its rows (a few floats of each cache line a k): on AVX2 the heuristic takes K
  in chunks of 128 (gemm_vec.CHUNK_BYTES of a 16-column panel), each block's sums carried from chunk to chunk in the
  panel's buffer; every k loop is then 128 long. Each output is the same FMA chain over k in the same order, so the
  values are bit for bit the unchunked tile's (a tuner forcing kc = 0). A row-major A is not chunked."""
  monkeypatch.setattr(gemm_vec, "omp_threads", lambda: 1)   # B's 4 panels packed inline
  x, dy = f32(256, 128), f32(256, 64)   # M = 128, N = 64, K = 256
  a = Tensor(x).T if by_k else Tensor(np.ascontiguousarray(x.T))
  mm = a @ Tensor(dy)
  plan = make_plan([mm.uop], options=Options(opt=VectorOpt, lanes=8))
  (k,) = plan.kernels
  opts = gemm_vec.choose_opts(k.body, VectorOpt.isa(Options(lanes=8)), VectorOpt.tuner)
  assert opts == gemm_vec.GemmOpts(rows=6, nvec=2, lanes=8, kc=128 if by_k else 0)
  assert set(_reduce_trips(k)) == ({128} if by_k else {256})
  class Whole(VectorOpt):
    @staticmethod
    def tuner(kernel, problem, candidates, heuristic, program):
      return dataclasses.replace(heuristic, kc=0)
  out = realize([mm.uop], options=Options(opt=VectorOpt, lanes=8))[0]
  gemm_vec._chosen.clear()
  whole = make_plan([mm.uop], options=Options(opt=Whole, lanes=8))
  assert set(_reduce_trips(whole.kernels[0])) == {256}
  np.testing.assert_array_equal(out, realize([mm.uop], options=Options(opt=Whole, lanes=8))[0])
  close(out.reshape(128, 64), x.T.astype(np.float64) @ dy, 16)


def test_every_chunk_a_tuner_may_try_gives_the_same_bits(monkeypatch):
  """The chunks the tuner may try (gemm_vec.CHUNKS, for an A read across its rows: the loop programs it times) each
  give the unchunked tile's values bit for bit, with a last block of fewer rows (M = 100: 16 blocks of 6, one of 4)."""
  from uopc.device import get_device
  monkeypatch.setattr(gemm_vec, "omp_threads", lambda: 1)   # B's 8 panels packed inline
  dev = get_device("CPU")
  M, N, K = 100, 128, 256
  a, b = f32(K, M), f32(K, N)
  outs = []
  for kc in (0,) + gemm_vec.CHUNKS:
    prog = gemm_vec.program(M, N, K, gemm_vec.GemmOpts(rows=6, nvec=2, lanes=8, kc=kc), threads=1, a_by_k=True)
    assert set(_reduce_trips_of(prog)) == {kc or K, M % 6 and (kc or K)} - {0}
    src = dev.renderer.render(prog, f"chunk{kc}").src
    out = np.empty(M * N, np.float32)
    dev.compile(src)(a.ravel(), b.ravel(), out)
    outs.append(out)
  for out in outs[1:]: np.testing.assert_array_equal(out, outs[0])
  close(outs[0].reshape(M, N), a.T.astype(np.float64) @ b, 16)


def _reduce_trips_of(prog) -> list[int]:
  return [u.src[0].arg for u in prog.toposort() if u.op is Ops.RANGE and u.arg[1].name == "REDUCE"]

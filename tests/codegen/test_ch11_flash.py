"""Chapter 11, fusion, recompute and flash attention: examples/flash_attention.py against NumPy, the plans' buffers,
the fused kernel's passes over the keys, the O(N^3) accumulator placement, and scripts/outputs.py end to end.

The structural tests read the generated C, because the bugs they guard against give correct values (section 11.5).
"""
import math
import re
import subprocess
import sys
from pathlib import Path
import numpy as np
import pytest
import uopc.kernelize
import uopc.rangeify
from uopc.book import flash_opt, load_example, reshape_simplify
from uopc.kernelize import clear_plan_cache, make_plan
from uopc.render_c import render_c
from uopc.runtime import Program
from uopc.tensor import Tensor

ROOT = Path(__file__).resolve().parents[2]
book = load_example("flash_attention")

pytestmark = pytest.mark.ch11




def inputs(n: int, d: int) -> tuple[np.ndarray, ...]:
  rng = np.random.default_rng(n * 1000 + d)
  return tuple(rng.standard_normal((n, d)).astype(np.float32) for _ in range(3))


def reference(q, k, v) -> np.ndarray:
  s = q.astype(np.float64) @ k.T.astype(np.float64) / math.sqrt(q.shape[1])
  p = np.exp(s - s.max(-1, keepdims=True))
  return (p / p.sum(-1, keepdims=True)) @ v


def attention_plan(n: int, d: int, fuse: bool, opt=None):
  q, k, v = inputs(n, d)
  return make_plan([book.attention(Tensor(q), Tensor(k), Tensor(v)).uop], fuse, opt or Tensor.opt)


# ---- reading loop nests out of generated C ----
FOR = re.compile(r"^\s*for \(int (ridx\d+) = 0; \1 < (\d+); \1\+\+\) \{$")


class Loop:
  def __init__(self, trip: int, parent: "Loop | None"):
    self.trip, self.parent, self.children, self.lines = trip, parent, [], []

  def enclosing(self) -> list["Loop"]:
    out, x = [], self
    while x is not None and x.trip: out.append(x); x = x.parent
    return out


def loop_tree(src: str) -> tuple[Loop, dict[int, Loop]]:
  """The for-loops of a kernel as a tree (the function body has trip 0), and the innermost loop of each line."""
  root = Loop(0, None)
  stack, where = [root], {}
  for n, line in enumerate(src.splitlines()):
    where[n] = stack[-1]
    if m := FOR.match(line):
      loop = Loop(int(m.group(2)), stack[-1])
      stack[-1].children.append(loop)
      stack.append(loop)
    elif line.rstrip().endswith("{"):   # the function itself
      stack[-1].children.append(Loop(0, stack[-1]))
      stack.append(stack[-1].children[-1])
    elif line.strip() == "}": stack.pop()
  return root, where


def key_passes(src: str, n: int, d: int) -> tuple[int, int]:
  """(key loops in the text, passes over the keys per query row when the kernel runs). A key loop runs over n keys
  and holds a d-long dot-product loop; it runs once per iteration of the loops around it, except the row loop."""
  root, _ = loop_tree(src)
  written = passes = 0
  todo = [root]
  while todo:
    x = todo.pop()
    todo += x.children
    if x.trip == n and any(c.trip == d for c in x.children):
      written += 1
      passes += math.prod(y.trip for y in x.enclosing()[1:-1])   # [0] is the loop itself, [-1] the row loop
  return written, passes


# ---- the three implementations against NumPy ----
@pytest.mark.parametrize("n", [64, 100])
@pytest.mark.parametrize("d", [16, 64])
def test_three_implementations_agree_with_numpy(n, d):
  q, k, v = inputs(n, d)
  ref = reference(q, k, v)
  unfused = book.attention(Tensor(q), Tensor(k), Tensor(v)).numpy()
  Tensor.fuse_reduce, Tensor.opt = True, book.FlashOpt
  fused = book.attention(Tensor(q), Tensor(k), Tensor(v)).numpy()
  prg, out = Program(render_c(book.online_attention_ir(n, d), "flash"), "flash"), np.zeros(n * d, np.float32)
  prg(q, k, v, out)
  for name, r in (("unfused", unfused), ("fused", fused), ("online", out.reshape(n, d))):
    assert np.abs(r - ref).max() < 1e-5, f"{name} N={n} D={d}: error {np.abs(r - ref).max():.2e}"


def test_online_is_exact_when_the_maximum_comes_late():
  """Scores that grow along the row: the running maximum changes at every key, so a kernel that forgot to rescale
  its output row (the 'find the bug' pitfall) would fail here."""
  n, d = 64, 16
  q = np.ones((n, d), np.float32)
  k = np.tile(np.linspace(-2, 2, n, dtype=np.float32)[:, None], (1, d))
  v = np.random.default_rng(1).standard_normal((n, d)).astype(np.float32)
  prg, out = Program(render_c(book.online_attention_ir(n, d), "flash"), "flash"), np.zeros(n * d, np.float32)
  prg(q, k, v, out)
  assert np.abs(out.reshape(n, d) - reference(q, k, v)).max() < 1e-5


# ---- what the plans allocate ----
def test_fused_plan_allocates_no_n_by_n_buffer():
  n, d = 128, 64
  fused = attention_plan(n, d, True, book.FlashOpt)
  assert n * n not in [size for _, size in fused.temps]
  assert [size for _, size in fused.temps] == [n * d]   # only the transposed copy of V
  unfused = attention_plan(n, d, False)
  assert [size for _, size in unfused.temps].count(n * n) == 2   # S and P


def test_unfused_plan_makes_six_passes_over_n_by_n_data():
  n, d = 128, 64
  plan = attention_plan(n, d, False)
  big = [t for t, (_, size) in enumerate(plan.temps) if size == n * n]
  assert sorted(sum(("temp", t) in k.args for k in plan.kernels) for t in big) == [2, 4]   # P: 1 + 1, S: 1 + 3


# ---- passes over the keys: predicted from the plan, counted in the C ----
@pytest.mark.parametrize("upcast,passes", [(8, 10), (16, 6), (32, 4), (64, 3)])
def test_fused_kernel_passes_over_keys(upcast, passes):
  n, d = 128, 64
  plan = attention_plan(n, d, True, flash_opt(upcast))
  kern = plan.kernels[-1]
  (qk,) = [times for u, times in kern.recompute.items() if u.shape == (n, n)]   # the QK^T reduce
  assert qk == passes == 2 + d // upcast
  written, run = key_passes(kern.src, n, d)
  assert run == passes
  assert written == 3   # max, sum, and one output pass, run once per group of `upcast` output columns


def test_book_flash_opt_is_upcast_16():
  assert attention_plan(128, 64, True, book.FlashOpt).kernels[-1].src == \
    attention_plan(128, 64, True, flash_opt(16)).kernels[-1].src


# ---- the O(N^3) bug: the accumulator placement flips without the RESHAPE rule's simplify ----
@pytest.fixture
def reshape_simplify_off():
  """The RESHAPE rule without its simplify (uopc.book.reshape_simplify); plans made meanwhile stay apart."""
  with reshape_simplify(False): yield


def softmax_accumulators(src: str, n: int) -> dict[str, bool]:
  """For the row max and the row sum: is its initialisation inside the P V key loop?"""
  lines = src.splitlines()
  _, where = loop_tree(src)
  # the P V key loop is the loop where the probability p = exp2(...) * (1/sum) is computed
  (p_line,) = [k for k, ln in enumerate(lines) if re.search(r"alu\d+ = \(exp2f\(.*\*\(1\.0f/val\d+\)\);", ln)]
  pv = where[p_line]
  assert pv.trip == n
  sums = {m.group(1) for ln in lines if (m := re.search(r"(acc\d+) = \(val\d+\+exp2f\(", ln))}
  out = {}
  for k, ln in enumerate(lines):
    m = re.match(r"\s*(acc\d+) = (-INFINITY|0\.0f);$", ln)
    if m and (m.group(2) == "-INFINITY" or m.group(1) in sums):
      kind = "max" if m.group(2) == "-INFINITY" else "sum"
      out[f"{kind} {m.group(1)}"] = pv in where[k].enclosing()
  return out


def run_fused(q, k, v) -> np.ndarray:
  Tensor.fuse_reduce, Tensor.opt = True, book.FlashOpt
  return book.attention(Tensor(q), Tensor(k), Tensor(v)).numpy()


def test_accumulators_outside_the_pv_loop_with_simplify():
  n, d = 64, 16
  acc = softmax_accumulators(attention_plan(n, d, True, book.FlashOpt).kernels[-1].src, n)
  assert {name.split()[0] for name in acc} == {"max", "sum"}
  assert not any(acc.values()), acc


def test_accumulators_inside_the_pv_loop_without_simplify(reshape_simplify_off):
  n, d = 64, 16
  q, k, v = inputs(n, d)
  src = attention_plan(n, d, True, book.FlashOpt).kernels[-1].src
  acc = softmax_accumulators(src, n)
  assert {name.split()[0] for name in acc} == {"max", "sum"}
  assert all(acc.values()), acc
  # and the key passes: every key of the P V loop runs the max and sum passes again (n + 1 per row, 1 + 2n here)
  assert key_passes(src, n, d)[1] > n
  assert np.abs(run_fused(q, k, v) - reference(q, k, v)).max() < 1e-5   # the same answer: only the work changed


def test_cubic_and_fixed_kernels_give_the_same_output(reshape_simplify_off):
  n, d = 64, 16
  q, k, v = inputs(n, d)
  cubic = run_fused(q, k, v)
  uopc.rangeify.simplify = uopc.rangeify.symbolic.simplify   # the fixture restores it afterwards
  clear_plan_cache()
  fixed = run_fused(q, k, v)
  assert np.abs(cubic - fixed).max() < 1e-6


# ---- the example script and the outputs script ----
def test_example_script_prints_three_lines():
  r = subprocess.run([sys.executable, "examples/flash_attention.py", "64", "16"], cwd=ROOT, capture_output=True,
                     text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  lines = r.stdout.strip().splitlines()
  assert [ln.split()[0] for ln in lines] == ["unfused", "fused", "online"]
  for ln in lines:
    m = re.match(r"^(\w+)\s+([\d.]+) ms  err ([\d.]+e[+-]\d+)   \(.+\)$", ln)
    assert m, ln
    assert float(m.group(3)) < 1e-5, ln


def test_outputs_script_quick(tmp_path):
  r = subprocess.run([sys.executable, "scripts/outputs.py", "--quick", "--out", str(tmp_path)], cwd=ROOT,
                     capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr
  texts = ["flash_128.txt", "flash_256.txt", "attention_sweep.txt"]
  for name in texts:
    text = (tmp_path / name).read_text()
    for key in ("cpu", "cores", "compiler", "date", "uopc"): assert re.search(rf"^# {key}\s+\S", text, re.M), name
  flash = (tmp_path / "flash_128.txt").read_text().splitlines()
  assert [ln.split()[0] for ln in flash if not ln.startswith("#")] == ["unfused", "fused", "online"]
  sweep = (tmp_path / "attention_sweep.txt").read_text()
  rows = [ln.split() for ln in sweep.splitlines() if ln.strip() and not ln.startswith("#")]
  assert rows[0][:5] == ["N", "unfused", "ms", "unfused", "GF/s"]
  assert [r[0] for r in rows[1:3]] == ["128", "256"]
  traffic = rows[3:]
  assert [r[:7] for r in traffic[1:]] == [["128", "2", "6", "0.4", "0", "0", "0.0"],
                                          ["256", "2", "6", "1.6", "0", "0", "0.0"]]
  for name in ("attention_time.png", "attention_roofline.png", "attention_traffic.png"):
    assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
  assert "[" in r.stderr and "7/7" in r.stderr   # the progress bar

"""What one benchmark case is: its inputs (the same seed in every process), its float64 reference, and its peers.

Every peer is built on its own (`case_peers(case, arrays, only={"flash"})` compiles flash's kernel and nothing
else), so that a worker process of uopc.bench.isolated builds, and loads the runtime of, only the peer it times.
"""
from __future__ import annotations
import importlib.util, math
from dataclasses import dataclass
from typing import Callable
import numpy as np
from uopc.runtime import Program

KINDS = ("attention", "gemm")
OPTIONAL_PEERS = ("fused", "torch")   # attention peers that run only when asked for
FUSED_MAX = 2048   # above this one fused attention call takes seconds (6 passes of QK^T a row)


class PeerError(AssertionError):
  """A peer returned a wrong result, or failed: the message names the case and the peer."""


@dataclass(frozen=True)
class Case:
  kind: str                                   # "attention" or "gemm"
  n: int                                      # attention: sequence length; gemm: n x n times n x n
  d: int = 64                                 # attention's head dimension (gemm ignores it)
  causal: bool = False                        # attention: keys j <= i only
  optional: frozenset[str] = frozenset()      # attention's optional peers to include (OPTIONAL_PEERS)

  def __post_init__(self):
    if self.kind not in KINDS: raise ValueError(f"unknown benchmark {self.kind!r}: expected one of {KINDS}")
    for field, value in (("n", self.n), ("d", self.d)):
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{self.kind} case: {field} must be a positive int, got {value!r}")
    if self.kind == "gemm" and self.causal: raise ValueError("gemm case: causal applies to attention only")
    object.__setattr__(self, "optional", frozenset(self.optional))   # a set or list given is stored as a frozenset
    if unknown := self.optional - set(OPTIONAL_PEERS):
      raise ValueError(f"unknown optional peers {sorted(unknown)}: expected some of {OPTIONAL_PEERS}")

  @property
  def name(self) -> str:
    if self.kind == "gemm": return f"{self.n}x{self.n}x{self.n}"
    return f"N={self.n} D={self.d}" + (" causal" if self.causal else "")

  @property
  def flops(self) -> float:
    if self.kind == "gemm": return 2 * self.n ** 3
    return 4 * self.n * self.n * self.d / (2 if self.causal else 1)   # causal: half the scores are needed

  def to_json(self) -> dict:
    return {"kind": self.kind, "n": self.n, "d": self.d, "causal": self.causal, "optional": sorted(self.optional)}

  @classmethod
  def from_json(cls, obj: dict) -> Case: return cls(**obj)


def inputs(case: Case) -> tuple[np.ndarray, ...]:
  """gemm: a, b (n, n); attention: q, k, v (n, d); float32, from seed 0 wherever they are built."""
  rng = np.random.default_rng(0)
  shape = (case.n, case.n) if case.kind == "gemm" else (case.n, case.d)
  return tuple(rng.standard_normal(shape).astype(np.float32) for _ in range(2 if case.kind == "gemm" else 3))


def reference(case: Case, arrays: tuple[np.ndarray, ...]) -> np.ndarray:
  """The case's result in float64: every float32 peer, NumPy's included, is checked against it."""
  x = [a.astype(np.float64) for a in arrays]
  if case.kind == "gemm": return x[0] @ x[1]
  q, k, v = x
  s = q @ k.T / math.sqrt(q.shape[1])                                          # (N, N)
  if case.causal: s = s + np.triu(np.full(s.shape, -np.inf), 1)
  p = np.exp(s - s.max(-1, keepdims=True))
  return (p / p.sum(-1, keepdims=True)) @ v                                    # (N, D)


def tolerance(case: Case) -> float:
  return 1e-3 * case.n ** 0.5 if case.kind == "gemm" else 1e-4   # gemm's error grows with its sums' length


def check(case: Case, peer: str, out, ref: np.ndarray) -> None:
  """Raise PeerError, naming the peer, unless its result is the reference's shape and within tolerance."""
  out = np.asarray(out)
  if out.shape != ref.shape:
    raise PeerError(f"{case.kind} {case.name}: peer {peer!r} returned shape {out.shape}, expected {ref.shape}")
  err = float(np.abs(out - ref).max())
  if not err <= tolerance(case):   # written so that a NaN fails too
    raise PeerError(f"{case.kind} {case.name}: peer {peer!r} differs from the float64 reference by {err:.3g} "
                    f"(tolerance {tolerance(case):.3g})")


# ---- the peers ----
def peer_names(case: Case) -> list[str]:
  """The peers that run for this case, in the order they are printed (torch only where it is installed)."""
  if case.kind == "gemm": return ["numpy", "uopc", "vector", "vector jit"]
  names = ["numpy", "unfused"]
  if not case.causal: names += ["online"] + (["fused"] if "fused" in case.optional and case.n <= FUSED_MAX else [])
  names += ["rewrite", "flash"]
  # find_spec looks for torch without importing it: the parent of isolated workers never loads its runtime
  if "torch" in case.optional and importlib.util.find_spec("torch") is not None: names.append("torch")
  return names


def case_peers(case: Case, arrays: tuple[np.ndarray, ...], only: set[str] | None = None) -> dict[str, Callable]:
  """The case's peers (or only those named in `only`) as functions of no arguments, built now."""
  names = peer_names(case)
  if only is not None:
    if unknown := set(only) - set(names): raise ValueError(f"{case.kind} {case.name} has no peers {sorted(unknown)}: "
                                                           f"its peers are {names}")
    names = [name for name in names if name in only]
  builders = gemm_builders(*arrays) if case.kind == "gemm" else attention_builders(*arrays, case.causal)
  return {name: builders[name]() for name in names}


def gemm_builders(a: np.ndarray, b: np.ndarray) -> dict[str, Callable[[], Callable]]:
  from uopc.tensor import Tensor
  # uopc reads the arrays in place (Tensor.from_numpy), as NumPy's @ does; Tensor(a) would copy each operand first
  def numpy_mm(): return a @ b
  def uopc_mm(): return (Tensor.from_numpy(a) @ Tensor.from_numpy(b)).numpy()
  def vector_mm():   # the same matmul with the vector optimizer (uopc.codegen.gemm_vec)
    from uopc.opt import VectorOpt
    old, Tensor.opt = Tensor.opt, VectorOpt
    try: return (Tensor.from_numpy(a) @ Tensor.from_numpy(b)).numpy()
    finally: Tensor.opt = old
  def vector_jit():   # the same, captured once and replayed (uopc.jit): no graph is built, normalized or looked up
    from uopc.jit import TinyJit
    from uopc.opt import VectorOpt
    jit = TinyJit(lambda x, y: x @ y)
    def run(): return jit(Tensor.from_numpy(a), Tensor.from_numpy(b)).numpy()
    old, Tensor.opt = Tensor.opt, VectorOpt
    try: run(); run()   # the first call runs, the second records: both under VectorOpt
    finally: Tensor.opt = old
    return run
  return {"numpy": lambda: numpy_mm, "uopc": lambda: uopc_mm, "vector": lambda: vector_mm, "vector jit": vector_jit}


def attention_builders(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> dict[str, Callable[[], Callable]]:
  """name -> a function that builds that peer of softmax(q k^T / sqrt(D)) v (compiling its kernel, importing torch)."""
  from uopc.tensor import Tensor
  from uopc.render_c import render_c
  from uopc.nn import scaled_dot_product_attention
  from uopc.book import load_example
  n, d = q.shape
  mask = np.triu(np.full((n, n), -np.inf, np.float32), 1) if causal else None
  def numpy_att():
    s = q @ k.T * (1 / math.sqrt(d))
    if mask is not None: s = s + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v
  def tensor_att(fuse: bool, opt, online: bool = False) -> Callable[[], np.ndarray]:
    def run():
      old = Tensor.fuse_reduce, Tensor.opt, Tensor.online_softmax
      Tensor.fuse_reduce, Tensor.opt, Tensor.online_softmax = fuse, opt, online
      try:
        s = Tensor(q) @ Tensor(k).T * (1 / math.sqrt(d))
        if mask is not None: s = s + Tensor(mask)
        return (s.softmax(-1) @ Tensor(v)).numpy()
      finally: Tensor.fuse_reduce, Tensor.opt, Tensor.online_softmax = old
    return run
  def online():   # the book's hand-written kernel (non-causal only)
    book = load_example("flash_attention")
    prg, out = Program(render_c(book.online_attention_ir(n, d), "flash"), "flash"), np.zeros(n * d, np.float32)
    def run(): prg(q, k, v, out); return out.reshape(n, d)
    return run
  def flash():
    return lambda: scaled_dot_product_attention(q[None], k[None], v[None], is_causal=causal).numpy()[0]
  def torch_sdpa():
    import torch
    tq, tk, tv = (torch.from_numpy(x)[None, None] for x in (q, k, v))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return lambda: sdpa(tq, tk, tv, is_causal=causal)[0, 0].numpy()
  return {"numpy": lambda: numpy_att, "unfused": lambda: tensor_att(False, Tensor.opt), "online": online,
          "fused": lambda: tensor_att(True, load_example("flash_attention").FlashOpt),
          "rewrite": lambda: tensor_att(False, Tensor.opt, online=True),   # the compiler's own online softmax
          "flash": flash, "torch": torch_sdpa}


def attention_peers(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool, peers: set[str]) -> dict[str, Callable]:
  """Every implementation of softmax(q k^T / sqrt(D)) v (causal: keys j <= i only), as functions of no arguments;
  `peers` names the optional ones to include (fused, torch)."""
  if q.ndim != 2 or k.shape != q.shape or v.shape != q.shape:
    raise ValueError(f"attention_peers wants q, k, v of one shape (N, D), got {q.shape}, {k.shape}, {v.shape}")
  return case_peers(Case("attention", q.shape[0], q.shape[1], causal, frozenset(peers)), (q, k, v))

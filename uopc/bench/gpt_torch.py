"""The PyTorch peers of `python -m uopc.bench gpt`: the same GPT as torch ops (torch_peer), eager and compiled, timed
in a process of their own (TorchPeers), in turns with uopc's steps.

Why a process of its own: PyTorch's wheel links libgomp.so.1 by that name, and once uopc has loaded the system's
libgomp (with the passive wait policy uopc sets, NOTES 20) torch's ops run on that same runtime, their workers asleep
between parallel regions: not PyTorch as its users run it. The worker is this file run as a script (so that no uopc
module, which would set the policy and load libgomp, is imported in it), with the environment the user gave (the
policy uopc added taken out). It reads one JSON request a line on stdin and answers one JSON line on stdout:

  {"start": npz, "config": {...}, "train": {...}, "threads": n, "peers": ["eager", "compile"], "model": "gpt"}
                                                -> {"ready": {...}}   (model: a key of MODELS, "gpt" or "cnn")
  {"peer": "eager", "batch": k}                 -> {"s": seconds of that step, "loss": its loss}
  {"quit": true}

"ready" maps each peer to None, or to the reason it cannot run (torch.compile without a C++ compiler, or whatever
its first compile raised). torch.compile's first step compiles (forward and backward graphs, inductor's C++ for the
CPU); the parent times it apart and leaves it out of the step times.
"""
from __future__ import annotations
import json, os, shutil, subprocess, sys, tempfile, time
from pathlib import Path
from types import SimpleNamespace
import numpy as np


def torch_peer(state: dict[str, np.ndarray], cfg, threads: int, tc, compile_model: bool = False):
  """The same GPT written with torch ops on a dict of leaf tensors (nanoGPT's forward), and its training step with
  tc's recipe (uopc.nn.train): AdamW on the 2-D weights with decay and the rest without, gradient clipping. With
  compile_model, the forward is torch.compile'd (inductor; the backward is compiled with it, the optimizer stays eager,
  as nanoGPT compiles its model). step(x, y, lr=None) -> loss; forward(idx, targets) -> loss tensor."""
  import torch
  import torch.nn.functional as F
  torch.set_num_threads(threads)
  P = {k: torch.tensor(v, requires_grad=True) for k, v in state.items()}
  groups = [{"params": [p for p in P.values() if p.dim() >= 2], "weight_decay": tc.weight_decay},
            {"params": [p for p in P.values() if p.dim() < 2], "weight_decay": 0.0}]
  opt = torch.optim.AdamW(groups, lr=tc.lr, betas=tuple(tc.betas))
  C, H = cfg.n_embd, cfg.n_head
  def lin(x, p): return F.linear(x, P[p + ".weight"], P.get(p + ".bias"))
  def ln(x, p): return F.layer_norm(x, (C,), P[p + ".weight"], P.get(p + ".bias"))
  def forward(idx, targets):
    B, T = idx.shape
    x = P["wte.weight"][idx] + P["wpe.weight"][:T]
    for i in range(cfg.n_layer):
      p = f"blocks.{i}"
      q, k, v = lin(ln(x, p + ".ln1"), p + ".attn.qkv").split(C, dim=-1)
      q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
      y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
      x = x + lin(y, p + ".attn.proj")
      x = x + lin(F.gelu(lin(ln(x, p + ".ln2"), p + ".mlp.fc"), approximate="tanh"), p + ".mlp.proj")
    logits = ln(x, "ln_f") @ P["wte.weight"].T
    return F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))
  run = torch.compile(forward) if compile_model else forward
  def step(x: np.ndarray, y: np.ndarray, lr: float | None = None) -> float:
    if lr is not None:
      for g in opt.param_groups: g["lr"] = lr
    loss = run(torch.from_numpy(x).long(), torch.from_numpy(y).long())
    opt.zero_grad(); loss.backward()
    if tc.grad_clip: torch.nn.utils.clip_grad_norm_(list(P.values()), tc.grad_clip)
    opt.step()
    return loss.item()
  return step, forward


def cnn_torch_peer(state: dict[str, np.ndarray], cfg, threads: int, tc, compile_model: bool = False):
  """uopc.bench.cnn's LeNet-5 as torch ops on a dict of leaf tensors (the names of uopc's nn.Sequential: 0, 3 the
  convolutions, 7, 9, 11 the linear layers) and its AdamW step (tc: lr, betas, eps, weight_decay). With
  compile_model the forward is torch.compile'd, the optimizer eager (as for the GPT). (step, forward)."""
  import torch
  import torch.nn.functional as F
  torch.set_num_threads(threads)
  P = {k: torch.tensor(v, requires_grad=True) for k, v in state.items()}
  opt = torch.optim.AdamW(list(P.values()), lr=tc.lr, betas=tuple(tc.betas), eps=tc.eps, weight_decay=tc.weight_decay)
  def conv_block(h, p, pad): return F.max_pool2d(F.relu(F.conv2d(h, P[p + ".weight"], P[p + ".bias"], padding=pad)), 2)
  def forward(x, y):
    h = conv_block(conv_block(x, "0", 2), "3", 0).flatten(1)                  # (N, 16 * 5 * 5)
    for p in ("7", "9"): h = F.relu(F.linear(h, P[p + ".weight"], P[p + ".bias"]))
    return F.cross_entropy(F.linear(h, P["11.weight"], P["11.bias"]), y)
  run = torch.compile(forward) if compile_model else forward
  def step(x: np.ndarray, y: np.ndarray, lr: float | None = None) -> float:
    loss = run(torch.from_numpy(x), torch.from_numpy(y).long())
    opt.zero_grad(); loss.backward(); opt.step()
    return loss.item()
  return step, forward


MODELS = {"gpt": torch_peer, "cnn": cnn_torch_peer}   # what the worker's start request may name


def cxx_missing() -> str | None:
  """Why torch.compile cannot build for the CPU here (no C++ compiler for inductor), or None."""
  cxx = os.environ.get("CXX")
  if cxx and shutil.which(cxx.split()[0]): return None
  if any(shutil.which(c) for c in ("g++", "c++", "clang++")): return None
  return "no C++ compiler (torch.compile's inductor writes C++ for the CPU; install g++ or set CXX)"


class TorchPeers:
  """The worker process, from the parent's side: start(...) -> {peer: None or why not}; step(peer, k) -> (s, loss)."""

  def __init__(self, environ: dict[str, str]):
    self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve())], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, env=environ)

  def ask(self, request: dict) -> dict:
    self.proc.stdin.write(json.dumps(request) + "\n"); self.proc.stdin.flush()
    line = self.proc.stdout.readline()
    if not line: raise RuntimeError(f"the PyTorch worker exited (code {self.proc.wait()}) at request {request}")
    answer = json.loads(line)
    if "error" in answer: raise RuntimeError(f"the PyTorch worker failed: {answer['error']}")
    return answer

  def start(self, state: dict, batches: list, config: dict, train: dict, threads: int, peers: list[str],
            model: str = "gpt") -> dict:
    with tempfile.TemporaryDirectory(prefix="uopc-torch-") as tmp:
      npz = Path(tmp) / "start.npz"
      np.savez(npz, **{f"p.{k}": v for k, v in state.items()}, **{f"x.{k}": x for k, (x, _) in enumerate(batches)},
               **{f"y.{k}": y for k, (_, y) in enumerate(batches)})
      request = {"start": str(npz), "config": config, "train": train, "threads": threads, "peers": peers,
                 "model": model}
      return self.ask(request)["ready"]

  def step(self, peer: str, k: int) -> tuple[float, float]:
    a = self.ask({"peer": peer, "batch": k})
    return a["s"], a["loss"]

  def close(self) -> None:
    if self.proc.poll() is None:
      try: self.ask({"quit": True})
      except (RuntimeError, OSError, ValueError): pass
      self.proc.wait(timeout=60)


def worker() -> None:
  """The worker's loop (module docstring)."""
  steps, batches = {}, {}
  for line in sys.stdin:
    req = json.loads(line)
    try:
      if "quit" in req: print(json.dumps({"bye": True}), flush=True); return
      if "start" in req:
        data = np.load(req["start"])
        state = {k[2:]: data[k] for k in data.files if k.startswith("p.")}
        batches = {int(k[2:]): (data[k], data[f"y.{k[2:]}"]) for k in data.files if k.startswith("x.")}
        cfg, tc = SimpleNamespace(**req["config"]), SimpleNamespace(**req["train"])
        ready = {}
        for peer in req["peers"]:
          why = cxx_missing() if peer == "compile" else None
          if why is None:
            build = MODELS[req.get("model", "gpt")]
            try: steps[peer] = build(state, cfg, req["threads"], tc, compile_model=peer == "compile")[0]
            except Exception as e: why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"   # noqa: BLE001
          ready[peer] = why
        answer = {"ready": ready}
      else:
        x, y = batches[req["batch"]]
        t = time.perf_counter()
        try: loss = steps[req["peer"]](x, y)
        except Exception as e:   # noqa: BLE001 (torch.compile's first call may fail in many ways: say which)
          answer = {"error": f"{req['peer']}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
        else: answer = {"s": time.perf_counter() - t, "loss": loss}
    except Exception as e:   # noqa: BLE001 (whatever went wrong goes back to the parent, which names it)
      answer = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(answer), flush=True)


if __name__ == "__main__":
  worker()

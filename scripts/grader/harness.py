"""What a judge measures about a student's code, measured from outside it: runs in a sandbox of its own (outside.py
starts it), where no cell of the student's notebook ever ran.

This process, the parent, never loads the student's code. It starts one child per piece of student code (a fresh
`python -s harness.py child`, exec'd: nothing of the parent's memory, its key included, is in it), hands it inputs
through a pipe, and takes every measurement itself:
- `run_c`: a C object the grader compiled (its compiler, its flags, a symbol table it checked) loaded in a child,
  called once on the judge's arrays (or once per thread count, the arrays handed afresh: a race test's 1 and 8
  threads in one child); the outputs come back for the judge to compare.
- `run_cl`: an OpenCL C source built and launched in a child (PoCL); the output comes back.
- `time`: a student's object and a reference (the grader's object, or a NumPy expression), each in a child of its
  own, taking turns; every repetition gets inputs drawn here and then (unpredictable), outputs filled with NaN, and
  is checked against the reference's output on the same inputs before the next; the time of a repetition is this
  process's clock from "run" sent to "done" received. A kernel that skips its work, caches an earlier answer or
  returns before it is done fails the check of that repetition. After the warm-up the student's child is locked
  (lockdown.py: a seccomp filter on every thread), and it is stopped (SIGSTOP) while the reference runs.
Every question to a child carries a number and a fresh nonce, which its answer must echo: an extra frame a kernel
writes into the pipe is a ProtocolError, never an answer (a last `ping` finds one left over).
- `peak`: the student's definitions (the imports, functions and classes of the notebook, nothing else: no cell's
  statements run) executed in a child, which then calls the graded function; the peak is the child's maximum
  resident memory as the kernel counts it (wait4's ru_maxrss, of the child and anything it started) less its
  resident memory when it had its inputs and had not yet run any student code. /proc is read-only in this sandbox,
  so no process can reset its own peak (clear_refs).
Each result is a line of /job/out/results.jsonl signed with the key that arrived on stdin; arrays go beside it, named
in the signed line with their sha256, so nothing else in the sandbox can forge or swap them.
"""
from __future__ import annotations
import ctypes
import hashlib
import hmac
import json
import os
import secrets
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(os.environ.get("UOPC_HARNESS_OUT", "/job/out"))
HERE = Path(__file__).resolve()
PR_SET_DUMPABLE = 4
CHILD_TIMEOUT = float(os.environ.get("UOPC_HARNESS_CALL_S", 120))   # seconds one call may take
# a reference the grader may give as a NumPy expression over the array arguments a, b, c, ... (named here)
NUMPY = {"a * b + c * d - a": lambda a, b, c, d, out, n: a * b + c * d - a}
DTYPES = {"f32": "float32", "f64": "float64", "i32": "int32", "i64": "int64", "u8": "uint8"}


# ---- framing: a header line of JSON (with the byte sizes of the blobs after it), then the blobs -------------------
def send(f, obj: dict, blobs: list[bytes] = ()) -> None:
  obj = dict(obj, blobs=[len(b) for b in blobs])
  f.write(json.dumps(obj).encode() + b"\n")
  for b in blobs: f.write(b)
  f.flush()


_send = send   # the child's replies go through a wrapper that adds the question's number (child)


class ProtocolError(RuntimeError):
  """An answer that is not the answer to the question just asked: an extra frame written into the pipe (by a kernel
  that found its file descriptor), a reply out of turn. The job it happened in has no result."""


def recv(f) -> tuple[dict, list[bytes]]:
  line = f.readline()
  if not line: raise EOFError("the other side closed the pipe")
  obj = json.loads(line)
  sizes = obj.get("blobs", [])
  if not isinstance(sizes, list) or not all(type(n) is int and 0 <= n <= 1 << 31 for n in sizes):
    raise ValueError("bad frame")
  blobs = []
  for n in sizes:
    b = f.read(n)
    if len(b) != n: raise EOFError("short frame")
    blobs.append(b)
  return obj, blobs


def pack(a) -> tuple[dict, bytes]:
  import numpy as np
  a = np.ascontiguousarray(a)
  return {"dtype": str(a.dtype), "shape": list(a.shape)}, a.tobytes()


def unpack(meta: dict, blob: bytes):
  import numpy as np
  return np.frombuffer(blob, dtype=np.dtype(meta["dtype"])).reshape(meta["shape"]).copy()


# ---- the children: each loads one piece of student code (or the grader's reference) --------------------------------
CTYPE = {"p": ctypes.c_void_p, "i": ctypes.c_int, "l": ctypes.c_long, "f": ctypes.c_float, "d": ctypes.c_double}


def child() -> int:
  """Serve the parent over stdin/stdout; whatever the student's code prints goes nowhere."""
  inp, out = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
  null = os.open(os.devnull, os.O_RDWR)
  for fd in (0, 1): os.dup2(null, fd)
  sys.stdout = sys.stderr = open(os.devnull, "w")
  import numpy as np
  import lockdown   # now: once locked, this process can open no file, so nothing is imported after
  state: dict = {}
  while True:
    try: msg, blobs = recv(inp)
    except EOFError:
      if state.get("locked"): os._exit(0)   # nothing of Python's shutdown runs under the filter (lockdown.ALLOW)
      return 0
    op = msg["op"]
    turn = {"seq": msg.get("seq"), "nonce": msg.get("nonce")}   # echoed: the parent pairs each answer with its question
    send = lambda f, obj, data=(), turn=turn: _send(f, dict(obj, **turn), data)
    try:
      if op in ("load_c", "load_numpy"):   # no other process of this UID may read or write this one's memory
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
      if op == "load_c":
        lib = ctypes.CDLL(msg["object"], mode=os.RTLD_LOCAL)
        fn = getattr(lib, msg["name"])
        fn.argtypes, fn.restype = [CTYPE[p] for p in msg["params"]], None
        state.update(fn=fn, lib=lib)
        send(out, {"ok": True})
      elif op == "threads":   # the judge's thread count for the runs that follow (a race test: 1, then 8)
        ctypes.CDLL("libgomp.so.1").omp_set_num_threads(int(msg["n"]))
        send(out, {"ok": True})
      elif op == "load_numpy":   # the expression's value is written into its output after the clock has stopped
        expr = NUMPY[msg["numpy"]]
        state.update(fn=lambda *a: state.__setitem__("pending", expr(*a)), out=msg["out"])
        send(out, {"ok": True})
      elif op == "map":   # the arrays live in memory the parent shares with this process (a memfd passed to it)
        import mmap
        mm = mmap.mmap(msg["fd"], msg["size"])
        arrays = {k: np.ndarray(tuple(m["shape"]), np.dtype(m["dtype"]), buffer=mm, offset=m["offset"])
                  for k, m in enumerate(msg["arrays"])}
        call = [arrays[a["array"]] if "array" in a else a["value"] for a in msg["args"]]
        state.update(arrays=arrays, mm=mm, call=[a.ctypes.data if "lib" in state and isinstance(a, np.ndarray)
                                                 else a for a in call])
        send(out, {"ok": True})
      elif op == "args":
        arrays = {k: unpack(m, b) for k, (m, b) in enumerate(zip(msg["arrays"], blobs))}
        state["arrays"] = arrays
        call = [arrays[a["array"]] if "array" in a else a["value"] for a in msg["args"]]
        state["call"] = [a.ctypes.data if "lib" in state and isinstance(a, np.ndarray) else a for a in call]
        send(out, {"ok": True})
      elif op == "run":
        state["fn"](*state["call"])
        send(out, {"done": True})
      elif op == "settle":   # the NumPy reference: its value into its output, after the clock has stopped
        if "pending" in state: state["arrays"][state["out"]][...] = state.pop("pending")
        send(out, {"ok": True})
      elif op == "get":
        if "pending" in state: state["arrays"][state["out"]][...] = state.pop("pending")
        metas, data = zip(*(pack(state["arrays"][k]) for k in msg["outputs"])) if msg["outputs"] else ((), ())
        send(out, {"arrays": list(metas)}, list(data))
      elif op == "cl":
        send(out, *run_cl_here(msg, blobs))
      elif op == "lock":   # the student's timed process, after its warm-up (lockdown.py)
        state["locked"] = (why := lockdown.lock()) is None
        send(out, {"ok": True, "unlocked": why})
      elif op == "ping":   # the parent's last question: an answer out of turn still in the pipe shows up here
        send(out, {"ok": True})
      elif op == "defs":
        state.update(defs=msg["defs"], fn_name=msg["fn"], kwargs=msg.get("kwargs", {}), setup=msg.get("setup", ""),
                     args=[unpack(m, b) for m, b in zip(msg["arrays"], blobs)])
        send(out, {"ready": True})
      elif op == "call":   # from here on the student's code runs; the parent reads the peak when this process ends
        ns = {"__name__": "__student__"}
        exec(compile(state["defs"], "<the notebook's definitions>", "exec"), ns)
        fn = ns.get(state["fn_name"])
        if not callable(fn): raise NameError(f"the notebook defines no function {state['fn_name']}")
        got = fn(*state["args"], **state["kwargs"])
        meta, data = pack(np.asarray(got)) if isinstance(got, np.ndarray) else ({"type": type(got).__name__}, b"")
        send(out, {"result": meta}, [data] if data else [])
        return 0
      elif op == "raises":   # a fresh process: the definitions, then the judge's call; what it raised is the answer
        # the judge's setup first, before any student code (its own namespace: what the call passes, `_`-named, no
        # definition can rebind); its other names are what the notebook's setup cell gives (fa = load_example(...))
        judge = {"__name__": "__judge__", "_judge_inputs": state["args"]}
        try: exec(compile(state["setup"], "<the judge's setup>", "exec"), judge)
        except BaseException as e:
          send(out, {"error": f"the judge's setup failed: {type(e).__name__}: {e}"[:600]})
          return 1
        ns = {"__name__": "__student__", **{k: v for k, v in judge.items() if not k.startswith("_")}}
        try: exec(compile(state["defs"], "<the notebook's definitions>", "exec"), ns)
        except BaseException as e:
          send(out, {"error": f"the notebook's definitions do not run on their own: {type(e).__name__}: {e}"[:600]})
          return 1
        calls = {k: v for k, v in judge.items() if k.startswith("_") and not k.startswith("__")}
        try: eval(compile(msg["call"], "<the judge's call>", "eval"), ns, calls)
        except BaseException as e:
          answer = {"raised": type(e).__name__, "classes": [c.__name__ for c in type(e).__mro__],
                    "message": str(e)[:600]}
        else: answer = {"raised": None}
        send(out, answer)
        return 0
      else: send(out, {"error": f"unknown op {op!r}"})
    except BaseException as e:   # a student's code may raise anything, SystemExit included: one line back, and out
      try: send(out, {"error": f"{type(e).__name__}: {e}"[:600]})
      except Exception: pass
      if op in ("call", "load_c", "cl"): return 1


def run_cl_here(msg: dict, blobs: list[bytes]) -> tuple[dict, list[bytes]]:
  import warnings
  import numpy as np
  import pyopencl as cl
  from uopc.runtime.cl import cl_queue
  ctx, q = cl_queue()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    kernel = cl.Kernel(cl.Program(ctx, msg["src"]).build(), msg["name"])
  mf = cl.mem_flags
  arrays = [unpack(m, b) for m, b in zip(msg["arrays"], blobs)]
  bufs = [cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a) for a in arrays]
  out = np.full(msg["out"]["shape"], np.nan, np.dtype(msg["out"]["dtype"]))
  out_buf = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=out)
  kernel(q, tuple(msg["global"]), tuple(msg["local"]), *bufs, out_buf)
  cl.enqueue_copy(q, out, out_buf)
  q.finish()
  meta, data = pack(out)
  return {"arrays": [meta]}, [data]


# ---- the parent --------------------------------------------------------------------------------------------------
class Child:
  """One child process and its pipes."""

  def __init__(self, fds: tuple[int, ...] = (), argv: list[str] | None = None, preexec=None,
               env: dict[str, str] | None = None, cwd: str | None = None):
    """argv: how to start it (default: this file's `child` here; outside.py gives a sandbox of its own per child);
    preexec: run in it before exec (the CPUs it may use, its limits, its user); env, cwd: its environment and folder
    (default: this process's environment but the grader's variables, and its folder)."""
    self.p = subprocess.Popen(argv or [sys.executable, "-s", str(HERE), "child"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True, pass_fds=fds,
                              env=env if env is not None else
                              {k: v for k, v in os.environ.items() if not k.startswith("UOPC_GRADER")},
                              cwd=cwd, preexec_fn=preexec)
    self.seq = 0

  def ask(self, msg: dict, blobs: list[bytes] = (), timeout: float = CHILD_TIMEOUT) -> tuple[dict, list[bytes]]:
    """Send msg and wait for the answer, at most `timeout` seconds (then the child is killed: an endless loop in a
    student's kernel costs its own job, never the others')."""
    self.seq += 1
    nonce = secrets.token_hex(8)   # unpredictable: an answer forged in advance cannot carry it
    send(self.p.stdin, dict(msg, seq=self.seq, nonce=nonce), blobs)
    if not select.select([self.p.stdout], [], [], timeout)[0]:
      self.p.kill()
      raise RuntimeError(f"no answer within {timeout:g} s (an endless loop, or far too slow)")
    try: reply, data = recv(self.p.stdout)
    except ValueError: raise ProtocolError("a frame that is not the harness's (bad framing)") from None
    if reply.get("seq") != self.seq or reply.get("nonce") != nonce:
      self.p.kill()
      raise ProtocolError(f"an answer out of turn to question {self.seq} ({msg.get('op')}): an extra frame was "
                          f"written into the harness's pipe")
    return reply, data

  def close(self) -> None:
    try: self.p.stdin.close()
    except OSError: pass
    try: self.p.wait(5)
    except subprocess.TimeoutExpired: self.p.kill(); self.p.wait()


def _check(reply: dict) -> dict:
  if "error" in reply: raise RuntimeError(reply["error"])
  return reply


def _load(c: Child, spec: dict) -> None:
  if isinstance(spec, dict) and "numpy" in spec:
    _check(c.ask({"op": "load_numpy", "numpy": spec["numpy"], "out": spec["out"]})[0])
  else: _check(c.ask({"op": "load_c", "object": spec["object"], "name": spec["name"], "params": spec["params"]})[0])


def _send_args(c: Child, arrays: list, args: list) -> None:
  metas, data = zip(*(pack(a) for a in arrays)) if arrays else ((), ())
  _check(c.ask({"op": "args", "arrays": list(metas), "args": args}, list(data))[0])


def _outputs(c: Child, outputs: list[int]) -> list:
  reply, blobs = c.ask({"op": "get", "outputs": outputs})
  _check(reply)
  return [unpack(m, b) for m, b in zip(reply["arrays"], blobs)]


def _layout(spec_args: list, inputs: dict) -> tuple[list, list]:
  """(arrays, call args) for a child: arrays in order, each call arg a reference to one or a value."""
  arrays, args = [], []
  for k, a in enumerate(spec_args):
    if k in inputs:
      args.append({"array": len(arrays)})
      arrays.append(inputs[k])
    else: args.append({"value": a})
  return arrays, args


def do_run_c(job: dict, inputs: list) -> dict:
  """One call of a student's object on the judge's arrays, or one per thread count when `threads` is a list (one
  child, the arrays handed afresh before each call): {"outputs": [arrays]}, those of each thread count in turn."""
  import numpy as np
  counts = job["threads"] if isinstance(job.get("threads"), list) else [job.get("threads")]
  c = Child()
  try:
    _load(c, job)
    arrays = {k: np.asarray(inputs[a["input"]]) for k, a in enumerate(job["args"]) if "input" in a}
    values = [None if "input" in a else a["value"] for a in job["args"]]
    flat, args = _layout(values, arrays)
    slots, outputs = [args[k]["array"] for k in job["outputs"]], []
    for n in counts:
      if n: _check(c.ask({"op": "threads", "n": int(n)})[0])
      _send_args(c, flat, args)
      _check(c.ask({"op": "run"})[0])
      outputs += _outputs(c, slots)
    return {"outputs": outputs}
  finally: c.close()


class Shared:
  """The arrays of one child, in a memfd this process and that child both map: the inputs of a repetition are written
  here, the outputs read here, without copying them through the pipe."""

  def __init__(self, shapes: list[tuple[tuple[int, ...], str]]):
    import mmap
    import numpy as np
    self.metas, off = [], 0
    for shape, dtype in shapes:
      self.metas.append({"shape": list(shape), "dtype": dtype, "offset": off})
      off += -(-int(np.prod(shape)) * np.dtype(dtype).itemsize // 64) * 64
    self.size = max(off, 64)
    self.fd = os.memfd_create("uopc-harness")
    os.ftruncate(self.fd, self.size)
    self.mm = mmap.mmap(self.fd, self.size)
    self.arrays = [np.ndarray(tuple(m["shape"]), np.dtype(m["dtype"]), buffer=self.mm, offset=m["offset"])
                   for m in self.metas]

  def close(self) -> None:
    self.arrays = []
    try: self.mm.close()
    except BufferError: pass
    os.close(self.fd)


def _family(pid: int) -> list[int]:
  """pid and every process below it (a child started in a sandbox of its own is bwrap's, and what it started its),
  read from /proc here."""
  parents: dict[int, list[int]] = {}
  for p in Path("/proc").iterdir():
    if not p.name.isdigit(): continue
    try: ppid = int((p / "stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError): continue
    parents.setdefault(ppid, []).append(int(p.name))
  out, todo = [], [pid]
  while todo:
    q = todo.pop()
    out.append(q)
    todo.extend(parents.get(q, []))
  return out


def _state(pid: int) -> str:
  try:
    with open(f"/proc/{pid}/stat") as f: return f.read().rpartition(")")[2].split()[0]
  except (OSError, IndexError): return "X"   # it has ended: nothing of it runs


def _pause(c: Child) -> list[int]:
  """Stop every thread of every process of c (SIGSTOP) and wait until they are stopped (5 s at most); the pids."""
  family = _family(c.p.pid)
  for pid in family:
    try: os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError: pass
  end = time.monotonic() + 5
  while time.monotonic() < end and not all(_state(pid) in ("T", "t", "Z", "X") for pid in family):
    time.sleep(0.0005)
  c.stopped = family
  return family


def _resume(c: Child) -> None:
  for pid in getattr(c, "stopped", [c.p.pid]):
    try: os.kill(pid, signal.SIGCONT)
    except ProcessLookupError: pass


BAND = (0.5, 2.0)   # a timed repetition whose time is outside this multiple of its side's median is rerun


def _in_band(timed: list[dict], r: dict) -> bool:
  for who in ("student", "reference"):
    med = sorted(x[who] for x in timed)[len(timed) // 2]
    if not BAND[0] * med <= r[who] <= BAND[1] * med: return False
  return True


def _odd(timed: list[dict]) -> bool:
  """Whether some repetition is out of the band of its neighbours (a disturbed run, on either side)."""
  return any(not _in_band(timed, r) for r in timed)


def _steady(timed: list[dict]) -> list[dict]:
  """The repetitions within the band (the median's own always is): the best is taken among them."""
  return [r for r in timed if _in_band(timed, r)] or timed


def do_time(job: dict, spawn=None) -> dict:
  """Best-of-reps seconds of the student's object and the reference, taking turns, each repetition checked.
  spawn(who, fds) starts the child of "student" or "reference" (default: a child here, in this sandbox; outside.py
  gives each a sandbox of its own, its own UID, on the CPUs it chose)."""
  import numpy as np
  rng = np.random.default_rng(secrets.randbits(64))
  make = {"f32": lambda s: rng.standard_normal(s, dtype=np.float32),
          "sym": lambda s: (lambda x: (x + x.T).astype(np.float32))(rng.standard_normal(s, dtype=np.float32)),
          "zeros": lambda s: np.full(s, np.nan, np.float32)}   # an output: NaN until the kernel writes it
  specs = [a for a in job["args"] if a[0] != "int"]
  layout, args, n = [], [], 0
  for a in job["args"]:
    if a[0] == "int": args.append({"value": a[1]})
    else:
      args.append({"array": n}); n += 1
      layout.append((tuple(a[1]), "float32"))
  slots = [args[k]["array"] for k in job["outputs"]]
  shared = {"student": Shared(layout), "reference": Shared(layout)}
  kids = {who: (spawn or (lambda _, fds: Child(fds)))(who, (sh.fd,)) for who, sh in shared.items()}
  try:
    _load(kids["student"], job["student"])
    _load(kids["reference"], job["reference"] if job["reference"] is not None
          else {"numpy": job["numpy"], "out": slots[0]})
    for who, c in kids.items():
      sh = shared[who]
      _check(c.ask({"op": "map", "fd": sh.fd, "size": sh.size, "arrays": sh.metas, "args": args})[0])
    timed: list[dict] = []   # {"student": s, "reference": s} of each timed repetition
    unlocked, rep, reruns = None, 0, 0
    while rep <= job["reps"] + reruns:   # the first is a warm-up, checked but not timed
      fresh = [make[a[0]](tuple(a[1])) for a in specs]
      got = {}
      for who, c in kids.items():
        for dst, src in zip(shared[who].arrays, fresh): dst[...] = src
        if who == "reference": _pause(kids["student"])   # nothing of the student's runs while the reference does
        t0 = time.perf_counter()
        try: reply, _ = c.ask({"op": "run"})
        except EOFError:
          if who == "reference": raise
          return {"error": f"the timed kernel was stopped on repetition {rep + 1}: after its warm-up it made a system "
                           f"call that the timed process may not make (the harness allows its pipe, memory and "
                           f"OpenMP's waiting, lockdown.ALLOW), or it ended the process"}
        dt = time.perf_counter() - t0
        _check(reply)
        _check(c.ask({"op": "settle"})[0])
        if who == "reference": _resume(kids["student"])
        elif rep == 0: unlocked = _check(c.ask({"op": "lock"})[0]).get("unlocked")   # its OpenMP team is up
        got[who] = [np.array(shared[who].arrays[k]) for k in slots]
        if rep:
          if who == "student": timed.append({})
          timed[-1][who] = dt
      for k, g, w in zip(job["outputs"], got["student"], got["reference"]):
        if not np.allclose(g, w, rtol=job["tol"], atol=job["tol"]):
          nan = int(np.isnan(g).sum())
          why = f"{nan} of its {g.size} values were never written (NaN)" if nan else "it differs from the reference's"
          return {"error": f"the timed kernel's output (argument {k}) on the inputs of repetition {rep + 1}: {why} "
                           f"(every repetition gets fresh inputs and an output filled with NaN)"}
      rep += 1
      if rep > job["reps"] + reruns and reruns < job["reps"] and _odd(timed): reruns += 1   # one more, in its place
    for c in kids.values(): _check(c.ask({"op": "ping"})[0])   # no answer left over: every time was the real one
    best = {who: min(r[who] for r in _steady(timed)) for who in ("student", "reference")}
    return best if unlocked is None else dict(best, unfiltered=str(unlocked))
  finally:
    for c in kids.values(): c.close()
    for sh in shared.values(): sh.close()


def do_cl(job: dict, inputs: list) -> dict:
  c = Child()
  try:
    arrays = [inputs[k] for k in job["inputs"]]
    metas, data = zip(*(pack(a) for a in arrays)) if arrays else ((), ())
    reply, blobs = c.ask({"op": "cl", "src": job["src"], "name": job["name"], "arrays": list(metas),
                          "out": job["out"], "global": job["global"], "local": job["local"]}, list(data))
    _check(reply)
    return {"outputs": [unpack(m, b) for m, b in zip(reply["arrays"], blobs)]}
  finally: c.close()


def do_raises(job: dict, inputs: list) -> dict:
  """What the judge's call (an expression over the notebook's definitions, `_judge_inputs` and the `_` names of the
  judge's `setup`, code run before the definitions) raised, seen by a fresh child that ran nothing of the notebook but
  its definitions: {"raised": None} or the exception's name, its classes and message; {"error": why} when the
  definitions do not run or the child gives no answer."""
  import numpy as np
  c = Child()
  try:
    arrays = [np.asarray(inputs[k]) for k in job["inputs"]]
    metas, data = zip(*(pack(a) for a in arrays)) if arrays else ((), ())
    _check(c.ask({"op": "defs", "defs": job["defs"], "fn": "", "arrays": list(metas), "setup": job.get("setup", "")},
                 list(data))[0])
    reply, _ = c.ask({"op": "raises", "call": job["call"]})
    return {k: reply[k] for k in ("raised", "classes", "message", "error") if k in reply}
  finally: c.close()


def rss(pid: int) -> int:
  """Resident bytes of process pid, read here (the kernel's count, nothing the process says)."""
  for line in Path(f"/proc/{pid}/status").read_text().splitlines():
    if line.startswith("VmRSS:"): return int(line.split()[1]) * 1024
  raise RuntimeError("no VmRSS")


def do_peak(job: dict, inputs: list) -> dict:
  """The peak job, through a `peak` process of its own: a small process (no NumPy, none of this one's arrays) whose
  child's count of resident memory starts from that small size, since a process's peak includes what it held before
  it exec'd (the kernel keeps the larger)."""
  import numpy as np
  arrays = [np.asarray(inputs[k]) for k in job["inputs"]]
  metas, data = zip(*(pack(a) for a in arrays)) if arrays else ((), ())
  p = subprocess.Popen([sys.executable, "-s", str(HERE), "peak"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, close_fds=True)
  try:
    send(p.stdin, {"op": "defs", "defs": job["defs"], "fn": job["fn"], "arrays": list(metas),
                   "kwargs": job.get("kwargs", {}), "sandboxed": SANDBOXED}, list(data))
    if not select.select([p.stdout], [], [], 2 * CHILD_TIMEOUT)[0]:
      raise OSError(f"no answer within {2 * CHILD_TIMEOUT:g} s")
    reply, blobs = recv(p.stdout)
  except (EOFError, ValueError, OSError) as e: reply, blobs = {"error": f"the peak process failed ({e})"}, []
  finally:
    try: p.stdin.close()
    except OSError: pass
    if p.poll() is None and reply.get("error", "").startswith("the peak process failed"): p.kill()
    p.wait()
  if "result" in reply and "dtype" in reply["result"]:
    reply.update(outputs=[unpack(reply["result"], blobs[0])], dtype=reply["result"]["dtype"])
  reply.pop("result", None)
  return reply


def peak_main() -> int:
  """The `peak` process: starts the child, reads its resident memory once it has its inputs (no student code run
  yet), lets it run the student's definitions and the call, then takes the peak from wait4 (the child and whatever it
  started, adopted here as a subreaper and reaped). What it sends back: the peak above that start, and the answer."""
  libc = ctypes.CDLL(None)
  libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
  libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
  inp, out = sys.stdin.buffer, sys.stdout.buffer
  msg, blobs = recv(inp)
  global SANDBOXED
  SANDBOXED = bool(msg.pop("sandboxed", False))
  c = Child()
  reply = c.ask(msg, blobs)[0]
  if "error" in reply:
    c.close()
    send(out, reply)
    return 0
  base = rss(c.p.pid)   # inputs in place, no student code run yet
  try: reply, blobs = c.ask({"op": "call"})
  except (EOFError, ValueError, RuntimeError) as e: reply, blobs = {"error": f"the call gave no answer ({e})"}, []
  c.p.stdin.close()
  _, status, usage = os.wait4(c.p.pid, 0)
  c.p.returncode = status
  # what the child started and left behind is this process's now (a subreaper): stopped and counted as well
  peak = max(0, max([usage.ru_maxrss] + sweep()) * 1024 - base)
  send(out, {**reply, "peak": peak}, blobs)
  return 0


SANDBOXED = False   # the plan says so; outside a sandbox (a solution notebook's own check) nothing is swept


def sweep() -> list[int]:
  """Kill every process of the sandbox but this one and its ancestors, reap them: their ru_maxrss (KiB). Outside a
  sandbox only this process's own children are reaped."""
  if not SANDBOXED: return _reap()
  keep, pid = {1, os.getpid()}, os.getpid()
  while pid > 1:   # the ancestors: outbox, bwrap's init
    pid = int(next(line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if line.startswith("PPid:")))
    keep.add(pid)
  for p in Path("/proc").iterdir():
    if p.name.isdigit() and int(p.name) not in keep:
      try: os.kill(int(p.name), 9)
      except OSError: pass
  return _reap()


def _reap() -> list[int]:
  peaks = []
  while True:
    try: _, _, usage = os.wait4(-1, 0)
    except ChildProcessError: return peaks
    peaks.append(usage.ru_maxrss)


KINDS = {"run_c": do_run_c, "cl": do_cl, "peak": do_peak, "raises": do_raises}
PR_SET_CHILD_SUBREAPER = 36


def main() -> int:
  try:
    libc = ctypes.CDLL(None)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
  except Exception: pass
  plan = json.loads(sys.stdin.read())
  global SANDBOXED
  SANDBOXED = bool(plan.get("sandboxed"))
  key = plan["key"].encode()
  import numpy as np
  inputs = [np.load(Path(plan["inputs"]) / f"{k}.npy", allow_pickle=False) for k in range(plan["n_inputs"])]
  with open(OUT / "results.jsonl", "w") as res:
    # the timings first: no process a student's Python definitions left behind (a peak job) shares the cores with them
    for j, job in sorted(enumerate(plan["jobs"]), key=lambda jj: jj[1]["kind"] == "peak"):
      t0 = time.perf_counter()
      try: got = do_time(job) if job["kind"] == "time" else KINDS[job["kind"]](job, inputs)
      except Exception as e: got = {"error": f"{type(e).__name__}: {e}"[:600]}
      files = []
      for k, a in enumerate(got.pop("outputs", [])):
        path = OUT / f"{j}_{k}.npy"
        np.save(path, a, allow_pickle=False)
        files.append([path.name, hashlib.sha256(path.read_bytes()).hexdigest()])
      body = json.dumps({"job": j, "files": files, "seconds": time.perf_counter() - t0, **got})
      res.write(hmac.new(key, body.encode(), hashlib.sha256).hexdigest() + " " + body + "\n")
      res.flush()
  return 0


if __name__ == "__main__":
  sys.exit({"child": child, "peak": peak_main}.get(sys.argv[1] if sys.argv[1:] else "", main)())

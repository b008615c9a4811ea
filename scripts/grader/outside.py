"""What a judge runs of a student's answer, outside the student's process: the grader's side of harness.py.

A judge (in the grader's process) never calls the student's code; when it needs the student's C run, timed, or the
peak memory of a Python function, it asks a `Batch`:
- `run_c(src, name, args, outputs)`: the C source compiled by the grader (its compiler and flags, in a compile-only
  sandbox), its object's imports checked (`imports_refused`), then called once in a fresh sandbox on the judge's
  arrays; returns the output arrays. `run_c_threads(..., threads=(1, 8))`: the same on each thread count, in one child.
- `launch_cl(src, name, inputs, out, global_size, local_size)`: an OpenCL C kernel built and launched there (PoCL).
- `time_kernels(src, name, args, outputs, reference=C | numpy=expr)`: the student's object against a reference,
  timed by the harness from outside both, every repetition on fresh inputs and NaN outputs and checked.
- `peak_memory(fn, inputs)`: the notebook's definitions (`definitions`) run in a fresh process that calls fn; the
  peak of its resident memory, read by its parent.
The first time a judge asks, the Batch notes the job and answers with a placeholder (NaN outputs, an error) so that the
judge goes on and asks for everything it needs; grade.py sees `missing`, discards that verdict, runs every job noted in
one sandbox and runs the judges again, which now get answers. With course None (a solution notebook checking its own
hidden tests: trusted code) each job runs at once, without a sandbox.
"""
from __future__ import annotations
import hashlib
import hmac
import json
import os
import re
import secrets
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
import numpy as np
from csource import INCLUDES, checked, source_refused  # noqa: E402,F401
from notebook_code import definitions  # noqa: F401 (the definitions peak_memory runs: solution_setup)

HERE = Path(__file__).resolve().parent
WALL_S = 600   # one harness sandbox, all of its jobs
MATH = set("""acos asin atan atan2 cos sin tan acosh asinh atanh cosh sinh tanh exp exp2 exp10 expm1 log log2 log10
log1p pow sqrt cbrt hypot fabs fmax fmin fmod floor ceil round trunc rint nearbyint lround llround lrint llrint
remainder copysign erf erfc tgamma lgamma fma frexp ldexp modf nextafter fdim sincos ilogb logb scalbn""".split())
MEMORY = {"memcpy", "memmove", "memset", "memcmp", "__memcpy_chk", "__memmove_chk", "__memset_chk"}
RUNTIME = {"_ITM_deregisterTMCloneTable", "_ITM_registerTMCloneTable", "__cxa_finalize", "__gmon_start__",
           "__stack_chk_fail"}
LIBRARIES = {"libm.so.6", "libgomp.so.1", "libc.so.6", "libmvec.so.1"}
MAX_ERR = 600


class Later(BaseException):
  """A judge asked for something not run yet: it runs again once every job noted is (grade.py). A BaseException, so
  that a judge's own `except Exception` does not swallow it."""


# ---- what an object may import ----------------------------------------------------------------------------------
def _math(name: str) -> bool:
  base = re.sub(r"^__|_finite$", "", name)
  return base in MATH or (base[-1:] in ("f", "l") and base[:-1] in MATH)


def allowed(name: str) -> bool:
  return (_math(name) or name in MEMORY or name in RUNTIME or name.startswith(("GOMP_", "omp_"))
          or name.startswith("_ZGV"))   # libmvec: the vector forms of the math functions


def elf_imports(data: bytes) -> tuple[list[str], list[str]]:
  """(the libraries an ELF64 shared object needs, the symbols it leaves undefined), read from its section headers and
  .dynsym/.dynamic with the standard library; a ValueError if it is not such an object."""
  if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1: raise ValueError("not a little-endian ELF64 object")
  shoff, = struct.unpack_from("<Q", data, 0x28)
  shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
  sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + k * shentsize) for k in range(shnum)]

  def strings(k: int) -> bytes:
    _, _, _, _, off, size, *_ = sections[k]
    return data[off:off + size]

  def at(table: bytes, k: int) -> str: return table[k:table.index(b"\0", k)].decode("ascii", "replace")
  needed, undefined = [], []
  for _, typ, _, _, off, size, link, _, _, ent in sections:
    if typ == 11 and ent:   # SHT_DYNSYM: (name, info, other, shndx, value, size)
      names = strings(link)
      for k in range(size // ent):
        name, _, _, shndx, _, _ = struct.unpack_from("<IBBHQQ", data, off + k * ent)
        if shndx == 0 and name: undefined.append(at(names, name))
    elif typ == 6 and ent:   # SHT_DYNAMIC: (tag, value); DT_NEEDED = 1
      names = strings(link)
      for k in range(size // ent):
        tag, val = struct.unpack_from("<qQ", data, off + k * ent)
        if tag == 1: needed.append(at(names, val))
  return needed, [n.split("@")[0] for n in undefined]


def imports_refused(data: bytes) -> str | None:
  """Why an object is refused (a symbol beyond libm's and libgomp's functions and libc's memory functions, or another
  library), or None."""
  try: needed, undefined = elf_imports(data)
  except (ValueError, struct.error, IndexError) as e: return f"the compiled object could not be read ({e})"
  libs = sorted(set(needed) - LIBRARIES)
  syms = sorted({s for s in undefined if not allowed(s)})
  if libs or syms:
    return (f"the compiled kernel calls {', '.join(syms + libs)[:300]}: a kernel may call only the math functions of "
            f"libm, OpenMP's and memcpy/memset/memmove/memcmp")
  return None


def params(src: str, name: str) -> list[str]:
  """The kinds of `name`'s parameters in its definition: p (a pointer), i, l, f, d; a ValueError if none is found."""
  m = re.search(rf"\b{re.escape(name)}\s*\(([^)]*)\)\s*\{{", src)
  if m is None: raise ValueError(f"the C source defines no function {name}(...)")
  out = []
  for p in (x.strip() for x in m.group(1).split(",") if x.strip() and x.strip() != "void"):
    if "*" in p or "[" in p: out.append("p")
    elif re.search(r"\bdouble\b", p): out.append("d")
    elif re.search(r"\bfloat\b", p): out.append("f")
    elif re.search(r"\blong\b|\bint64_t\b|\bsize_t\b", p): out.append("l")
    elif re.search(r"\bint\b|\bint32_t\b|\bunsigned\b", p): out.append("i")
    else: raise ValueError(f"{name}: a parameter of a type the grader does not pass ({p!r})")
  return out


# ---- compiling ----------------------------------------------------------------------------------------------------
def cache_dir() -> Path:
  import trusted
  d = trusted.home() / "native"
  d.mkdir(parents=True, exist_ok=True)
  return d


def flags(cc: str) -> tuple[str, ...]:
  import trusted
  return trusted.flag_sets(cc)[0]   # -O3, this CPU's -march, OpenMP, uopc's float flags: what a course kernel gets


def build(sources: list[str], sandboxed: bool) -> dict[str, Path | str]:
  """source -> its object in the grader's cache (compiled here once per source, compiler and flags), or why not."""
  from uopc.runtime import PRELUDE
  from uopc.runtime.machine import compiler
  cc = compiler()
  fl = flags(cc)
  out: dict[str, Path | str] = {}
  todo = {}
  for src in dict.fromkeys(sources):
    if why := source_refused(src):
      out[src] = why
      continue
    key = hashlib.sha256(json.dumps([src, cc, fl, PRELUDE]).encode()).hexdigest()[:32]
    obj = cache_dir() / f"{key}.so"
    if obj.is_file() and not obj.is_symlink(): out[src] = obj
    else: todo[key] = src
  if todo:
    with tempfile.TemporaryDirectory(prefix="uopc-native-") as tmp:
      src_dir, made = Path(tmp) / "in", Path(tmp) / "out"
      src_dir.mkdir()
      for key, src in todo.items():   # as uopc's Program compiles a kernel: its prelude first, unless it has its own
        (src_dir / f"{key}.c").write_text(src if src.lstrip().startswith("#") else PRELUDE + src)
      plan = {"cc": cc, "allowed": sorted(INCLUDES),
              "jobs": [{"stem": key, "flags": list(fl), "check": sandboxed} for key in todo]}
      if sandboxed:
        import sandbox
        os.chmod(src_dir, 0o755)
        for p in src_dir.iterdir(): os.chmod(p, 0o644)
        sandbox.run([sandbox.python()[0], "/grader/compile.py"], [(str(HERE), "/grader"), (str(src_dir), "/job/in")],
                    made, json.dumps(plan).encode(), sandbox.Limits(wall_s=300))
      else:
        made.mkdir()
        for key in todo:
          r = subprocess.run([cc, *fl, "-o", str(made / f"{key}.so"), str(src_dir / f"{key}.c"), "-lm"],
                             capture_output=True, text=True, timeout=300)
          if r.returncode: (made / f"{key}.err").write_text(r.stderr[-4000:])
      for key, src in todo.items():
        obj, err = made / f"{key}.so", made / f"{key}.err"
        try:
          data = obj.read_bytes() if obj.is_file() and not obj.is_symlink() else None
          said = err.read_text(errors="replace") if err.is_file() and not err.is_symlink() else ""
        except OSError: data, said = None, ""
        first = next((line for line in said.splitlines() if "error" in line), said.strip()[:200])
        first = re.sub(r"^(/job/in|/tmp)/[0-9a-f]+.c:", "", first)[:MAX_ERR]
        if sandboxed and (why := checked(made, key, first)): out[src] = why
        elif data is None: out[src] = f"the kernel's C does not compile: {first}"
        elif why := imports_refused(data): out[src] = why
        else:
          fd, tmp_obj = tempfile.mkstemp(dir=cache_dir(), prefix=".new-")
          with os.fdopen(fd, "wb") as f: f.write(data)
          os.chmod(tmp_obj, 0o644)
          os.replace(tmp_obj, cache_dir() / f"{key}.so")
          out[src] = cache_dir() / f"{key}.so"
  return out


# ---- the batch --------------------------------------------------------------------------------------------------
class Batch:
  """Jobs for the harness: noted on a judge's first call (Later), run together by run(), answered afterwards."""

  def __init__(self, course: Path | None, defs: str = ""):
    self.course, self.defs, self.asked, self.done = course, defs, [], {}
    self.missing = False   # a call since the last reset got a placeholder: the judge's verdict does not count

  def functions(self) -> dict:
    return {"time_kernels": self.time_kernels, "run_c": self.run_c, "run_c_threads": self.run_c_threads,
            "launch_cl": self.launch_cl, "peak_memory": self.peak_memory, "raises": self.raises}

  # --- what a judge calls
  def time_kernels(self, student: Any, name: str, args: list, outputs: list[int], reference: str | None = None,
                   numpy: str | None = None, reps: int = 7, tol: float = 1e-3) -> dict:
    """{"student": s, "reference": s} (best of reps, each repetition checked) or {"error": why}."""
    if not isinstance(student, str): return {"error": f"the recorded kernel is not C source ({student!r:.60})"}
    return self._ask({"kind": "time", "student": student, "reference": reference, "numpy": numpy, "name": name,
                      "args": args, "outputs": outputs, "reps": reps, "tol": tol}, [], {"error": "not timed yet"})

  def run_c(self, src: Any, name: str, args: list, outputs: list[int], what: str = "the kernel",
            threads: int | None = None) -> list[np.ndarray]:
    """The arrays at positions `outputs` of args after one call of the student's C `name` (args: arrays and numbers),
    its parallel loops on `threads` OpenMP threads (None: OpenMP's choice); an AssertionError saying why when it
    cannot be run. A judge that has the student's loop program as a graph renders it itself (gradelib.render)."""
    if not isinstance(src, str): raise AssertionError(f"{what}: expected C source, found {src!r:.60}")
    arrays = [np.ascontiguousarray(a) for a in args if isinstance(a, np.ndarray)]
    nan = {"outputs": [np.full(np.shape(args[k]), np.nan) for k in outputs]}
    got = self._ask({"kind": "run_c", "src": src, "name": name, "outputs": outputs, "threads": threads,
                     "args": [None if isinstance(a, np.ndarray) else (a.item() if isinstance(a, np.generic) else a)
                              for a in args]}, arrays, nan)
    if "error" in got: raise AssertionError(f"{what}: {got['error']}")
    return got["outputs"]

  def run_c_threads(self, src: Any, name: str, args: list, outputs: list[int], threads: tuple[int, ...],
                    what: str = "the kernel") -> dict[int, list[np.ndarray]]:
    """run_c on each of `threads` OpenMP thread counts (a race test: 1 and 8), all in one child that loads the object
    once and is handed the judge's arrays afresh before each call: thread count -> its outputs."""
    if not isinstance(src, str): raise AssertionError(f"{what}: expected C source, found {src!r:.60}")
    counts = [int(t) for t in threads]
    arrays = [np.ascontiguousarray(a) for a in args if isinstance(a, np.ndarray)]
    nan = {"outputs": [np.full(np.shape(args[k]), np.nan) for _ in counts for k in outputs]}
    got = self._ask({"kind": "run_c", "src": src, "name": name, "outputs": outputs, "threads": counts,
                     "args": [None if isinstance(a, np.ndarray) else (a.item() if isinstance(a, np.generic) else a)
                              for a in args]}, arrays, nan)
    if "error" in got: raise AssertionError(f"{what}: {got['error']}")
    each = len(outputs)
    return {t: got["outputs"][k * each:(k + 1) * each] for k, t in enumerate(counts)}

  def launch_cl(self, src: Any, name: str, inputs: list[np.ndarray], out: tuple, global_size: tuple, local_size: tuple,
             what: str = "the kernel") -> np.ndarray:
    """The output (shape and dtype `out`, NaN before the launch) of one launch of the OpenCL kernel `name`."""
    if not isinstance(src, str): raise AssertionError(f"{what}: expected OpenCL C source, found {src!r:.60}")
    got = self._ask({"kind": "cl", "src": src, "name": name, "out": {"shape": list(out[0]), "dtype": str(out[1])},
                     "global": list(global_size), "local": list(local_size)}, [np.ascontiguousarray(a) for a in inputs],
                    {"outputs": [np.full(out[0], np.nan)]})
    if "error" in got: raise AssertionError(f"{what}: {got['error']}")
    return got["outputs"][0]

  def peak_memory(self, fn: str, inputs: list[np.ndarray], kwargs: dict | None = None) -> dict:
    """{"peak": bytes, "dtype": ..., "output": array} or {"error": why, "peak": bytes}: the notebook's definitions
    run in a fresh process that calls fn(*inputs, **kwargs)."""
    got = self._ask({"kind": "peak", "defs": self.defs, "fn": fn, "kwargs": kwargs or {}},
                    [np.ascontiguousarray(a) for a in inputs], {"error": "not measured yet"})
    if "outputs" in got: got = dict(got, output=got.pop("outputs")[0])
    return got

  def raises(self, call: str, inputs: list[np.ndarray] = (), setup: str = "") -> dict:
    """What the expression `call` raises, evaluated in a fresh process on the notebook's definitions, with the
    judge's arrays as `_judge_inputs`: {"raised": None} or {"raised": name, "classes": [its MRO's names],
    "message": ...} (gradelib.expect_raised reads it), or {"error": why}. Nothing a cell of the notebook did, and no
    record its process wrote, enters the verdict. `setup`: the judge's code, run there before the definitions: its
    `_`-named values are the call's own (the definitions cannot rebind them: the objects a test hands the student's
    function, built with the grader's uopc), its other names what the notebook's setup cell gives the definitions."""
    job = {"kind": "raises", "defs": self.defs, "call": call, **({"setup": setup} if setup else {})}
    return self._ask(job, [np.ascontiguousarray(a) for a in inputs], {"error": "not run yet"})

  # --- the machinery
  def _key(self, job: dict, arrays: list[np.ndarray]) -> str:
    h = hashlib.sha256(json.dumps(job, sort_keys=True, default=str).encode())
    for a in arrays: h.update(str((a.dtype, a.shape)).encode() + a.tobytes())
    return h.hexdigest()

  def _ask(self, job: dict, arrays: list[np.ndarray], placeholder: dict) -> dict:
    key = self._key(job, arrays)
    if key in self.done: return self.done[key]
    if key not in {k for k, _, _ in self.asked}: self.asked.append((key, job, arrays))
    if self.course is None:
      self.run()
      return self.done[key]
    self.missing = True
    return placeholder

  def forget(self) -> None:
    """Drop every answer: the next calls ask again (a speed test timed once more)."""
    self.asked, self.done = [], {}

  def run(self) -> None:
    asked, self.asked = self.asked, []
    if not asked: return
    for key, got in zip([k for k, _, _ in asked], run_jobs([(j, a) for _, j, a in asked], self.course)):
      self.done[key] = got


def run_jobs(jobs: list[tuple[dict, list[np.ndarray]]], course: Path | None) -> list[dict]:
  """Every job's answer, in order: objects built (and refused) here, then one harness for all of them."""
  sandboxed = course is not None
  sources = [s for job, _ in jobs for s in (job.get("src"), job.get("student"), job.get("reference"))
             if job["kind"] in ("run_c", "time") and isinstance(s, str)]
  objects = build(sources, sandboxed)
  answers: list[dict | None] = [None] * len(jobs)
  plan_jobs, inputs, binds, where = [], [], {}, []
  for k, (job, arrays) in enumerate(jobs):
    try: plan_jobs.append(_plan(job, arrays, objects, inputs, binds, sandboxed))
    except ValueError as e:
      answers[k] = {"error": str(e)}
      continue
    where.append(k)
  apart = [j for j, job in enumerate(plan_jobs) if job["kind"] == "time" and timed_apart(course)]
  for j in apart: answers[where[j]] = time_apart(plan_jobs[j], binds, course)
  rest = [j for j in range(len(plan_jobs)) if j not in apart]
  if rest:
    for j, got in zip(rest, _harness([plan_jobs[j] for j in rest], inputs, binds, course)): answers[where[j]] = got
  return answers


# ---- timing: each side in a sandbox of its own ----------------------------------------------------------------------
REFERENCE_UID = 60000   # the reference's sandbox runs as the student's UID + this: neither can signal or read the other


def timed_apart(course: Path | None) -> bool:
  """Whether a timing runs its two sides in sandboxes of their own, driven from this process: with either backend
  (bubblewrap: a sandbox each; the unprivileged one: a user each, unprivileged.apart)."""
  if course is None: return False
  import sandbox
  return sandbox.available() is None


def judge_cpus() -> list[int]:
  """The CPUs both sides of a timing are pinned to (one side at a time runs): UOPC_GRADER_CPUS ("0-3,6") or this
  process's own."""
  mine = sorted(os.sched_getaffinity(0))
  spec = os.environ.get("UOPC_GRADER_CPUS", "")
  if not spec: return mine
  chosen = set()
  for part in spec.split(","):
    lo, _, hi = part.partition("-")
    chosen.update(range(int(lo), int(hi or lo) + 1))
  return sorted(chosen & set(mine)) or mine


def time_apart(job: dict, binds: dict, course: Path) -> dict:
  """One timing job driven from this process (which never loads student code): the student's object and the
  reference each in a sandbox of its own (own PID namespace; as root, its own UID), both pinned to judge_cpus(), taking
  turns as harness.do_time has them. Its answer, or {"error": why}."""
  import harness
  import sandbox
  import trusted
  cpus = judge_cpus()
  ro = [(str(course), "/course"), (str(HERE), "/grader"), *binds.items()]
  limits = sandbox.Limits(wall_s=WALL_S)
  setrlimits = sandbox.limit(limits)

  def preexec() -> None:   # in the child before bwrap: inherited by everything inside
    os.sched_setaffinity(0, cpus)
    setrlimits()

  def spawn(who: str, fds: tuple[int, ...]):
    uid = sandbox.uid() + (REFERENCE_UID if who == "reference" else 0)
    argv = sandbox.child_command([sandbox.python()[0], "-s", "/grader/harness.py", "child"], ro, uid,
                                 env=trusted.ENV, limits=limits)
    return harness.Child(fds, argv=argv, preexec=preexec)

  try:
    if sandbox.backend() == "unprivileged":   # no namespaces: a user of its own per side, the same pinning
      import unprivileged
      with unprivileged.apart(ro, sandbox) as start:
        def as_user(who: str, fds: tuple[int, ...]):
          py, drop, env, home = start(sandbox.uid() + (REFERENCE_UID if who == "reference" else 0), cpus, limits)
          return harness.Child(fds, argv=[py, "-s", "/grader/harness.py", "child"], preexec=drop, env=env, cwd=home)
        got = harness.do_time(job, as_user)
    else: got = harness.do_time(job, spawn)
  except Exception as e: got = {"error": f"{type(e).__name__}: {e}"[:MAX_ERR]}
  return dict(got, cpus=cpus)


def _object(src: str, name: str, objects: dict, binds: dict, sandboxed: bool) -> dict:
  obj = objects[src]
  if isinstance(obj, str): raise ValueError(obj)
  inside = f"/objects/{obj.name}" if sandboxed else str(obj)
  binds[str(obj)] = inside
  return {"object": inside, "name": name, "params": params(src, name)}


def _plan(job: dict, arrays: list, objects: dict, inputs: list, binds: dict, sandboxed: bool) -> dict:
  """The harness's form of a job: objects by their path there, arrays by their index in the inputs."""
  first = len(inputs)
  inputs.extend(arrays)
  if job["kind"] == "run_c":
    p = _object(job["src"], job["name"], objects, binds, sandboxed)
    if len(p["params"]) != len(job["args"]):
      raise ValueError(f"{job['name']} takes {len(p['params'])} parameters, the test passes {len(job['args'])}")
    args, n = [], first
    for a in job["args"]:
      if a is None: args.append({"input": n}); n += 1
      else: args.append({"value": a})
    return {"kind": "run_c", **p, "args": args, "outputs": job["outputs"], "threads": job.get("threads")}
  if job["kind"] == "time":
    student = _object(job["student"], job["name"], objects, binds, sandboxed)
    ref = _object(job["reference"], job["name"], objects, binds, sandboxed) if job["reference"] else None
    return {"kind": "time", "student": student, "reference": ref, "numpy": job["numpy"], "args": job["args"],
            "outputs": job["outputs"], "reps": job["reps"], "tol": job["tol"]}
  if job["kind"] == "cl":
    return {**{k: job[k] for k in ("src", "name", "out", "global", "local")}, "kind": "cl",
            "inputs": list(range(first, len(inputs)))}
  if job["kind"] == "raises":
    return {"kind": "raises", "defs": job["defs"], "call": job["call"], "setup": job.get("setup", ""),
            "inputs": list(range(first, len(inputs)))}
  return {"kind": "peak", "defs": job["defs"], "fn": job["fn"], "kwargs": job["kwargs"],
          "inputs": list(range(first, len(inputs)))}


def _harness(jobs: list[dict], inputs: list[np.ndarray], binds: dict, course: Path | None) -> list[dict]:
  key = secrets.token_hex(16)
  with tempfile.TemporaryDirectory(prefix="uopc-harness-") as tmp:
    in_dir, out = Path(tmp) / "in", Path(tmp) / "out"
    in_dir.mkdir()
    for k, a in enumerate(inputs): np.save(in_dir / f"{k}.npy", a, allow_pickle=False)
    sandboxed = course is not None
    plan = {"key": key, "sandboxed": sandboxed, "inputs": "/job/in" if sandboxed else str(in_dir),
            "n_inputs": len(inputs), "jobs": jobs}
    if sandboxed:
      import sandbox
      import trusted
      os.chmod(in_dir, 0o755)
      for p in in_dir.iterdir(): os.chmod(p, 0o644)
      ro = [(str(course), "/course"), (str(HERE), "/grader"), (str(in_dir), "/job/in"), *binds.items()]
      ran = sandbox.run([sandbox.python()[0], "-s", "/grader/harness.py"], ro, out, json.dumps(plan).encode(),
                        sandbox.Limits(wall_s=WALL_S), env=trusted.ENV)
      late, log = ran.timed_out, ran.log
    else:
      out.mkdir()
      r = subprocess.run([sys.executable, "-s", str(HERE / "harness.py")], input=json.dumps(plan), text=True,
                         capture_output=True, timeout=WALL_S,
                         env={**os.environ, "UOPC_HARNESS_OUT": str(out),
                              "PYTHONPATH": str(HERE.parent.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")})
      late, log = False, r.stdout + r.stderr
    said = read_results(out, key)
  missing = {"error": f"the harness ran past {WALL_S} s" if late else f"no result came back: {log[-300:]}"}
  return [said.get(j, missing) for j in range(len(jobs))]


def read_results(out: Path, key: str) -> dict[int, dict]:
  """job -> its answer, from the lines of results.jsonl that carry the key's signature, with the arrays they name
  (each checked against its sha256)."""
  said: dict[int, dict] = {}
  try: lines = (out / "results.jsonl").read_text().splitlines() if not (out / "results.jsonl").is_symlink() else []
  except OSError: return said
  for line in lines:
    sig, _, body = line.partition(" ")
    if len(sig) != 64 or not hmac.compare_digest(sig, hmac.new(key.encode(), body.encode(), "sha256").hexdigest()):
      continue
    got = json.loads(body)
    j, files = got.pop("job"), got.pop("files")
    arrays = []
    for name, digest in files:
      p = out / name
      data = p.read_bytes() if p.is_file() and not p.is_symlink() else b""
      if hashlib.sha256(data).hexdigest() != digest: break
      arrays.append(np.load(p, allow_pickle=False))
    else:
      if files: got["outputs"] = arrays
      said[j] = got
  return said

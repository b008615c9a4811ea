"""The grader's compiled-kernel cache: objects every sandbox may load and none may write or list.

A student's notebook compiles its kernels in its sandbox, into a private cache that dies with it; a kernel compiled
there is never used again (it could be anything: the planted-kernel attack). What the sandbox keeps is the C source
of each kernel this cache lacked (uopc's UOPC_SHARED_MISSES), as untrusted text. After the sandbox, `adopt` reads
those sources and takes each whose entry name is what the grader's own uopc hashes that text to under one of the
standard flag sets (CompileOpts' variants: the flags are the grader's choice, never the sandbox's) and which a
sandbox has asked for before (a kernel asked for once, such as one for a shape drawn from this grading's seed, is not
compiled twice for nothing). It compiles them in a compile-only sandbox (the grader's compiler, no view of the
grader's files, nothing else running) and stores each object and its checksum here. Every later sandbox sees this
folder read-only at /kernels (UOPC_SHARED_CACHE), so the same source is loaded instead of compiled again: by the next
grading of that week, a speed test's sandbox, another student whose kernel is the same text.

The folder is root's and mode 0711 (as a teacher's own UID, 0311): a sandbox opens an entry by its exact name, which
only the source hashes to, and cannot list the folder, so it learns nothing of kernels whose source it does not
already have (another student's, the solution's). Its size is bounded: past MAX_BYTES it starts again empty.
"""
from __future__ import annotations
import hashlib
import itertools
import json
import os
import re
import tempfile
from pathlib import Path

MOUNT = "/kernels"
ENV = {"UOPC_SHARED_CACHE": MOUNT, "UOPC_SHARED_MISSES": "/job/out/sources"}   # for uopc in a student's sandbox
MAX_NEW = 256              # kernels one sandbox may have the grader compile
MAX_SOURCE = 1 << 20       # bytes of one kernel's source
MAX_OBJECT = 64 << 20
MAX_BYTES = 1 << 30        # the whole cache; past it, it is emptied
COMPILE_WALL = 300         # seconds for one batch of compiles, then the compile sandbox is killed
ENTRY = re.compile(r"^([A-Za-z_]\w{0,199})-([0-9a-f]{32})$")
LIST = "entries"           # beside the folder: "size name" per entry, so the grader never needs to list the folder
SEEN = "seen"              # beside it: the entries sandboxes have asked for once, one a line
MAX_SEEN = 100_000


def home() -> Path:
  return Path(os.environ.get("UOPC_GRADER_KERNELS") or Path.home() / ".cache" / "uopc-grader" / "kernels")


def folder() -> Path:
  """The objects' folder (made on first use): searchable by every sandbox's UID, listable and writable by none."""
  objects = home() / "objects"
  if not objects.is_dir():
    objects.mkdir(parents=True, exist_ok=True)
    os.chmod(home(), 0o755)
  os.chmod(objects, 0o711 if os.geteuid() == 0 else 0o311)
  return objects


def binds() -> list[tuple[str, str]]:
  return [(str(folder()), MOUNT)]


def flag_sets(cc: str) -> list[tuple[str, ...]]:
  """Every flag list a kernel may be cached with: uopc's CompileOpts variants for this machine (no UOPC_MARCH: the
  sandbox is not given one), each with and without OpenMP."""
  from uopc.runtime.build import run_compiler
  from uopc.runtime.compiler_bugs import workarounds
  from uopc.runtime.flags import CompileOpts
  from uopc.runtime.machine import resolve, target_for
  t = target_for(cc, "")
  out = []
  for width, unroll in itertools.product((None, 128, 256, 512), (False, True)):
    flags = resolve(CompileOpts(width, unroll).flags, t)
    flags += workarounds(cc, flags, run_compiler)   # as uopc.runtime.build.locate adds them: the entry names must agree
    out += [flags, tuple(f for f in flags if f != "-fopenmp")]
  return list(dict.fromkeys(out))


def wanted(sources: Path, cc: str) -> list[tuple[str, str, tuple[str, ...]]]:
  """(entry name, source, flags) of every source in `sources` whose name the grader's own hash of it gives under a
  standard flag set and which the cache lacks. Anything else there (a forged name, other flags, a link, a huge file)
  is left alone."""
  from uopc.runtime.build import intact
  from uopc.runtime.toolchain import cache_key
  try:   # a link in the sandbox's out folder points wherever its writer likes: never followed
    ok = not sources.is_symlink() and sources.is_dir()
    files = sorted(p for p in sources.iterdir() if p.suffix == ".c")[:MAX_NEW] if ok else []
  except OSError: return []
  out, sets, asked = [], None, []
  seen_file = home() / SEEN
  try: seen = set(seen_file.read_text().split())
  except OSError: seen = set()
  for p in files:
    m = ENTRY.match(p.stem)
    try:
      if m is None or p.is_symlink() or not p.is_file() or p.stat().st_size > MAX_SOURCE: continue
      src = p.read_text()
    except (OSError, UnicodeDecodeError): continue
    if intact(folder() / f"{p.stem}.so"): continue
    sets = sets or flag_sets(cc)
    flags = next((f for f in sets if cache_key(src, cc, f) == m.group(2)), None)
    if flags is None: continue
    if p.stem in seen: out.append((p.stem, src, flags))
    else: asked.append(p.stem)
  if asked:
    try:
      with open(seen_file, "w" if len(seen) + len(asked) > MAX_SEEN else "a") as f: f.write("\n".join(asked) + "\n")
    except OSError: pass
  return out


def adopt(sources: Path) -> int:
  """Compile the kernels `sources` asks for (see wanted) in a compile-only sandbox and add them to the cache; the
  number added. Never raises: a kernel not added is compiled by each sandbox that wants it, as before."""
  import sandbox
  from uopc.runtime.machine import compiler
  from uopc.runtime.objfile import complete_object
  try:
    cc = compiler()
    jobs = wanted(sources, cc)
    if not jobs: return 0
    with tempfile.TemporaryDirectory(prefix="uopc-compile-") as tmp:
      src_dir, out = Path(tmp) / "in", Path(tmp) / "out"
      src_dir.mkdir()
      for stem, src, _ in jobs: (src_dir / f"{stem}.c").write_text(src)
      os.chmod(src_dir, 0o755)
      for p in src_dir.iterdir(): os.chmod(p, 0o644)
      plan = {"cc": cc, "jobs": [{"stem": stem, "flags": list(flags)} for stem, _, flags in jobs]}
      here = str(Path(__file__).resolve().parent)
      sandbox.run([sandbox.python()[0], "/grader/compile.py"], [(here, "/grader"), (str(src_dir), "/job/in")], out,
                  json.dumps(plan).encode(), sandbox.Limits(wall_s=COMPILE_WALL))
      added = 0
      for stem, _, _ in jobs:
        p = out / f"{stem}.so"
        try:
          if p.is_symlink() or not p.is_file() or p.stat().st_size > MAX_OBJECT: continue
          data = p.read_bytes()
        except OSError: continue
        if complete_object(data): added += _store(stem, data)
    return added
  except Exception:
    return 0


def _store(stem: str, data: bytes) -> int:
  """The object and its checksum into the folder, each whole or not at all (uopc loads an entry only when both
  match); the cache is emptied first when it has grown past MAX_BYTES."""
  objects, listing = folder(), home() / LIST
  try: size = sum(int(line.split()[0]) for line in listing.read_text().splitlines() if line.split())
  except (OSError, ValueError, IndexError): size = 0
  if size + len(data) > MAX_BYTES: _empty(objects, listing)
  for suffix, body in ((".so", data), (".sum", hashlib.sha256(data).hexdigest().encode())):
    fd, tmp = tempfile.mkstemp(dir=objects, prefix=".new-")
    with os.fdopen(fd, "wb") as f: f.write(body)
    os.chmod(tmp, 0o644)
    os.replace(tmp, objects / f"{stem}{suffix}")
  with open(listing, "a") as f: f.write(f"{len(data)} {stem}\n")
  return 1


def _empty(objects: Path, listing: Path) -> None:
  """Remove every entry the list names (the folder itself is never listed)."""
  try: names = [line.split()[1] for line in listing.read_text().splitlines() if len(line.split()) == 2]
  except OSError: names = []
  for stem in names:
    if ENTRY.match(stem):
      for suffix in (".so", ".sum"): (objects / f"{stem}{suffix}").unlink(missing_ok=True)
  listing.write_text("")

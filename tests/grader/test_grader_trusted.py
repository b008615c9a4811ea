"""The grader's compiled-kernel cache (scripts/grader/trusted.py): it holds only objects the grader compiled itself from
source text, named by its own hash of that text under a standard flag set; a sandbox loads them by exact name and can
neither write nor list them; a source is compiled only the second time a sandbox asks for it."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "grader"))
import sandbox  # noqa: E402
import trusted  # noqa: E402

pytestmark = [pytest.mark.week6, pytest.mark.skipif(sandbox.available() is not None, reason=str(sandbox.available()))]

ADD = """void add(const float* a, const float* b, float* out, int n) {
  for (int i = 0; i < n; i++) out[i] = a[i] + b[i];
}"""
EVIL = """__attribute__((constructor)) static void planted(void) { }
void add(const float* a, const float* b, float* out, int n) { for (int i = 0; i < n; i++) out[i] = 42; }"""


@pytest.fixture
def kernels(tmp_path, monkeypatch):
  monkeypatch.setenv("UOPC_GRADER_KERNELS", str(tmp_path / "kernels"))
  return trusted.folder()


def missed(tmp_path: Path, src: str, flags: str = "None") -> Path:
  """The sources folder a sandbox leaves: src compiled as `add` (with flags) by uopc with an empty shared cache."""
  sources = tmp_path / "sources"
  code = f"from uopc.runtime import Program\nProgram({src!r}, 'add', {flags})"
  # no UOPC_MARCH, as in a sandbox (bwrap --clearenv): the grader compiles for this CPU's own flags only
  env = {k: v for k, v in os.environ.items() if k != "UOPC_MARCH"}
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                     env={**env, "UOPC_CACHE_DIR": str(tmp_path / "own"),
                          "UOPC_SHARED_CACHE": str(tmp_path / "nothing"), "UOPC_SHARED_MISSES": str(sources)})
  assert r.returncode == 0, r.stderr
  return sources


def test_a_source_asked_for_twice_is_compiled_by_the_grader_and_loaded_by_name(tmp_path, kernels):
  sources = missed(tmp_path, ADD)
  (entry,) = [p.stem for p in sources.glob("*.c")]
  assert trusted.adopt(sources) == 0 and not (kernels / f"{entry}.so").exists()   # once: maybe a one-off shape
  assert trusted.adopt(sources) == 1 and (kernels / f"{entry}.so").is_file()
  assert trusted.adopt(sources) == 0   # already there
  assert oct(kernels.stat().st_mode & 0o777) == ("0o711" if os.geteuid() == 0 else "0o311")
  # in a sandbox: loaded from /kernels by its name, without compiling; the folder can be neither listed nor written
  probe = textwrap.dedent(f"""
    import json, os
    import numpy as np
    from uopc.runtime import Program
    prg = Program({ADD!r}, "add")
    a = np.arange(4, dtype=np.float32); out = np.zeros(4, np.float32); prg(a, a, out, 4)
    tries = {{}}
    for what, fn in (("list", lambda: os.listdir("/kernels")), ("write", lambda: open("/kernels/x.so", "wb")),
                     ("replace", lambda: open("/kernels/{entry}.so", "r+b"))):
      try: fn(); tries[what] = "done"
      except OSError as e: tries[what] = type(e).__name__
    print(json.dumps({{"cached": prg.cached, "from": str(prg.path.parent), "out": out.tolist(), **tries}}))""")
  ran = sandbox.run([sandbox.python()[0], "-c", probe], [(str(ROOT), "/course"), *trusted.binds()], tmp_path / "out",
                    limits=sandbox.Limits(wall_s=120), env=trusted.ENV)
  got = json.loads(ran.log.strip().splitlines()[-1])
  assert (got.pop("cached"), got.pop("from"), got.pop("out")) == (True, "/kernels", [0.0, 2.0, 4.0, 6.0]), ran.log
  assert got["list"] == "PermissionError" and "done" not in got.values(), got   # write, replace: read-only


def test_a_forged_name_or_flags_of_the_students_choice_are_never_compiled(tmp_path, kernels):
  honest = missed(tmp_path / "honest", ADD)
  (entry,) = [p.stem for p in honest.glob("*.c")]
  forged = tmp_path / "forged"
  forged.mkdir()
  (forged / f"{entry}.c").write_text(EVIL)   # the honest kernel's name, another text: a planted constructor
  (forged / f"add-{'0' * 32}.c").write_text(ADD)
  (forged / "notakernel.c").write_text(ADD)
  (forged / f"add-{'1' * 32}.c").symlink_to(honest / f"{entry}.c")
  other_flags = missed(tmp_path / "flags", ADD, "('-O0', '-shared', '-fPIC')")   # a flag set of the notebook's
  linked = tmp_path / "linked"
  linked.symlink_to(honest)   # the sources folder itself a link to a folder of the grader's
  for _ in range(2):
    assert trusted.adopt(forged) == 0 and trusted.adopt(other_flags) == 0 and trusted.adopt(linked) == 0
  assert not (kernels / f"{entry}.so").exists() and trusted.wanted(forged, "cc") == []
  assert not (kernels.parent / trusted.SEEN).exists()   # none was even counted as asked for

"""Pictures of uopc.viz, taken by a real browser (headless Chromium), and the helper tests/viz/test_viz_browser.py uses.

  python scripts/viz_shots.py [--out outputs]

writes, from this checkout's code:
  viz_ch11_fused.png    chapter 11's fused attention kernel (fuse_reduce, the book's FlashOpt, N = 16, D = 8) drawn
                        as its loops, as section 11.7 draws it: a dot-product loop inside each of its three key
                        loops, each run once a row; the caption prints the kernel's own count (recomputes Q K^T x3)
  viz_ch11_online.png   the online kernel of 11.7 (online_attention_ir) at the same size: one key loop
  viz_page.png          the page `python -m uopc.viz` serves for `VIZ=1 python examples/flash_attention.py 256 64`,
                        with the fused plan's kernel r_256_64 and its rangeify pass selected at the rewrite of section
                        11.5, ((i*256)+j)//256 -> i
Chromium is Debian's `chromium` (.ci/run installs it); it runs with a new, empty profile and no network but localhost.
"""
from __future__ import annotations
import argparse, json, os, re, shutil, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the flags a headless Chromium needs on a machine with no display, no GPU and no network (a new profile each run)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def chromium() -> str | None:
  """The Chromium to run: $CHROMIUM, else the first of chromium, chromium-browser, google-chrome on PATH."""
  return os.environ.get("CHROMIUM") or next((p for n in ("chromium", "chromium-browser", "google-chrome")
                                              if (p := shutil.which(n))), None)


def run_chromium(url: str, *args: str, budget_ms: int = 20000, timeout: float = 180) -> subprocess.CompletedProcess:
  """Open url in a headless Chromium with a fresh profile; its console is logged to stderr. The virtual time budget
  lets the page's script fetch and draw before the DOM is dumped or the screenshot taken."""
  exe = chromium()
  if exe is None: raise FileNotFoundError("no Chromium found (Debian: apt-get install chromium)")
  with tempfile.TemporaryDirectory(prefix="uopc-chromium-") as profile:
    cmd = [exe, *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
           f"--virtual-time-budget={budget_ms}", *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def console_errors(stderr: str) -> list[str]:
  """The page's script errors in Chromium's log: an uncaught exception, or one the page caught and reported."""
  return [ln for ln in stderr.splitlines() if "CONSOLE" in ln and re.search(r"Uncaught|uopc\.viz: error", ln)]


def screenshot(url: str, png: Path, width: int = 1400, height: int = 900) -> subprocess.CompletedProcess:
  out = run_chromium(url, f"--screenshot={png}", f"--window-size={width},{height}")
  if not png.exists(): raise RuntimeError(f"Chromium wrote no screenshot of {url}:\n{out.stderr[-2000:]}")
  return out


def dump_dom(url: str) -> tuple[str, subprocess.CompletedProcess]:
  out = run_chromium(url, "--dump-dom", "--window-size=1400,900")
  return out.stdout, out


def html_page(body: str) -> str:
  return f'<!doctype html><html><body style="margin:8px;background:#fff">{body}</body></html>'


def ch11_drawings() -> dict[str, str]:
  """The two loop drawings of section 11.7 (N = 16, D = 8), as SVG, each captioned from its kernel: the fused one with
  the count the kernel records (Kernel.recompute), so the caption says what the picture draws."""
  import numpy as np
  from uopc.book import load_example
  from uopc.kernelize import make_plan
  from uopc.options import Options
  from uopc.tensor import Tensor
  from uopc.viz.loops import loops_svg
  fa = load_example("flash_attention")
  n, d = 16, 8
  q, k, v = (Tensor(np.random.default_rng(s).standard_normal((n, d)).astype(np.float32)) for s in range(3))
  fused = make_plan([fa.attention(q, k, v).uop], options=Options(fuse_reduce=True, opt=fa.FlashOpt)).kernels[-1]
  times = max(fused.recompute.values())
  return {"viz_ch11_fused.png": loops_svg(fused.ast, caption=f"fused (fuse_reduce, FlashOpt): {fused.name}, "
                                                             f"recomputes Q K^T x{times:g}"),
          "viz_ch11_online.png": loops_svg(fa.online_attention_ir(n, d), caption="online: online_attention_ir")}


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--out", default=str(ROOT / "outputs"))
  args = ap.parse_args()
  out = Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  sys.path.insert(0, str(ROOT))
  drawings = ch11_drawings()
  with tempfile.TemporaryDirectory() as tmp:
    for name, svg in drawings.items():
      page = Path(tmp) / (name + ".html")
      page.write_text(html_page(svg))
      w, h = (int(float(x)) + 16 for x in re.search(r'width="([\d.]+)" height="([\d.]+)"', svg).groups())
      screenshot(page.as_uri(), out / name, w, h)
      print(f"wrote {out / name}")
    trace = Path(tmp) / "trace.json"
    env = {**os.environ, "VIZ": "1", "VIZ_TRACE": str(trace), "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, str(ROOT / "examples/flash_attention.py"), "256", "64"], env=env, check=True,
                   capture_output=True)
    tr = json.loads(trace.read_text())
    r = next(n for n, rz in enumerate(tr["realizes"]) if rz["new"] and rz["plan"] == 1)   # the fused plan
    k = len(tr["plans"][1]["kernels"]) - 1
    texts = tr["plans"][1]["kernels"][k]["passes"][1]["texts"]   # its rangeify's rewrites
    s = 1 + next(n for n, t in enumerate(texts) if re.fullmatch(r"\(\(\(ridx0\*256\)\+ridx\d+\)//256\)  ->  ridx0", t))
    server = subprocess.Popen([sys.executable, "-m", "uopc.viz", str(trace), "--port", "0", "--idle", "60"],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
      server.stdout.readline()
      url = re.search(r"http://127\.0\.0\.1:\d+/", server.stdout.readline()).group(0)
      screenshot(url + f"#r={r}&k={k}&p=1&s={s}", out / "viz_page.png")
      print(f"wrote {out / 'viz_page.png'}")
    finally: server.kill(); server.wait()
  return 0


if __name__ == "__main__": sys.exit(main())

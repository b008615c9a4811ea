"""The page `python -m uopc.viz` serves, opened by a real browser: headless Chromium (Debian's `chromium`, installed
by .ci/run) loads the page of a recorded trace with a pass selected, the test reads the DOM it built (the graph's
nodes are there, no script error) and takes a screenshot. Skipped, saying so, where no Chromium is installed."""
import json, os, re, subprocess, sys, urllib.request
from pathlib import Path
import numpy as np
import pytest
import uopc.viz as viz
from uopc import kernelize
from uopc.book import load_example
from uopc.options import Options
from uopc.tensor import Tensor

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import viz_shots  # noqa: E402

# CI (.ci/run) sets UOPC_BROWSER_TEST=required: there a missing Chromium fails the tests instead of skipping them
pytestmark = pytest.mark.skipif(viz_shots.chromium() is None and os.environ.get("UOPC_BROWSER_TEST") != "required",
                                reason="no Chromium here (Debian: apt-get install chromium; .ci/run installs it)")
fa = load_example("flash_attention")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
  """A trace of attention, unfused then fused, served on a free port; the server stops by itself when idle."""
  path = tmp_path_factory.mktemp("viz") / "trace.json"
  q, k, v = (Tensor(np.random.default_rng(s).standard_normal((16, 8)).astype(np.float32)) for s in range(3))
  with kernelize.isolated_plan_cache(), viz.recording(path):
    fa.attention(q, k, v).numpy()
    kernelize.realize([fa.attention(q, k, v).uop], options=Options(fuse_reduce=True, opt=fa.FlashOpt))
  proc = subprocess.Popen([sys.executable, "-m", "uopc.viz", str(path), "--port", "0", "--idle", "120"],
                          stdout=subprocess.PIPE, text=True, cwd=ROOT)
  try:
    proc.stdout.readline()
    url = re.search(r"http://127\.0\.0\.1:\d+/", proc.stdout.readline()).group(0)
    yield url, json.loads(urllib.request.urlopen(url + "api/index", timeout=60).read())
  finally:
    proc.kill(); proc.wait(); proc.stdout.close()


def view(url: str, **q) -> dict:
  return json.loads(urllib.request.urlopen(url + "api/view?" + "&".join(f"{k}={v}" for k, v in q.items()),
                                           timeout=60).read())


def test_the_page_draws_a_selected_pass_with_its_nodes_and_no_script_error(served):
  url, index = served
  cut = len(index["plans"][0]["passes"]) - 1   # the kernelizer's cut of the unfused plan
  dom, run = viz_shots.dump_dom(url + f"#r=0&k=-1&p={cut}")
  assert viz_shots.console_errors(run.stderr) == [], run.stderr[-3000:]
  assert re.search(r'<div id="errors">\s*</div>', dom), "the page reported a script error"
  graph = dom[dom.index('<div id="graph">'):]
  expected = len(re.findall(r'<g class="node ', view(url, plan=0, kernel=-1, **{"pass": cut})["svg"]))
  assert expected > 10 and len(re.findall(r'<g class="node ', graph)) == expected   # the graph is in the DOM
  assert len(re.findall(r'mark-point', graph)) == len(index["plans"][0]["kernels"])   # every cut outlined
  assert '<div id="title">cut</div>' in dom and 'class="pass on"' in dom


def test_a_kernel_s_loops_are_drawn_beside_its_c(served):
  url, index = served
  fused = index["realizes"][1]["plan"]
  k = len(index["plans"][fused]["kernels"]) - 1
  dom, run = viz_shots.dump_dom(url + f"#r=1&k={k}&p=3")   # the linearize pass
  assert viz_shots.console_errors(run.stderr) == []
  assert dom.count('class="loop"') >= 4 and re.search(r'<pre id="src"[^>]*>void r_16_8\(', dom)


def test_a_screenshot_of_the_page_stepping_through_a_rewrite(served, tmp_path):
  url, _ = served
  png = tmp_path / "page.png"
  run = viz_shots.screenshot(url + "#r=0&k=0&p=1&s=2", png, 1200, 800)   # kernel 0's rangeify, rewrite 2
  assert viz_shots.console_errors(run.stderr) == []
  import matplotlib.image
  img = matplotlib.image.imread(png)
  assert img.shape[:2] == (800, 1200)
  colours = {tuple(np.round(p[:3] * 255).astype(int)) for p in img.reshape(-1, img.shape[-1])[::97]}
  assert (214, 39, 40) in colours or len(colours) > 20, "the screenshot shows no drawing"   # the changed outline

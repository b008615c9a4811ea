"""uopc.viz: the layered layout, the SVG of graphs, plans and loops, the passes recorded while realizing, the trace
file VIZ=1 writes, and the server that shows it. The browser's view of the page is tests/viz/test_viz_browser.py."""
import json, os, random, re, subprocess, sys, urllib.error, urllib.request
import xml.etree.ElementTree as ET
from functools import cache
from pathlib import Path
import numpy as np
import pytest
import uopc.viz as viz
from uopc import kernelize
from uopc.book import flash_opt, load_example
from uopc.kernelize import make_plan
from uopc.options import Options
from uopc.symbolic import simplify, symbolic_rules
from uopc.tensor import Tensor
from uopc.uop import UOp, graph_rewrite, range_
from uopc import trace
from uopc.viz.dag import toposort, uop_graph, uop_svg
from uopc.viz.layout import crossings, layers, layout
from uopc.viz.loops import loops_svg, rows
from uopc.viz.passes import replay, tensor_passes, traced_rewrite
from uopc.viz.plan import plan_graph, plan_svg
from uopc.viz.server import Viewer, load
from uopc.viz.steps import Table, graph_at, steps

ROOT = Path(__file__).resolve().parents[2]
SVG = "{http://www.w3.org/2000/svg}"
fa = load_example("flash_attention")


def random_dag(n: int, p: float, seed: int) -> list[tuple[int, int]]:
  rnd = random.Random(seed)
  return [(s, d) for d in range(n) for s in range(d) if rnd.random() < p]


def longest_to_sink(n: int, edges) -> list[int]:
  """The longest path from each node down to a node nobody uses, by a memoized walk (independent of the layout)."""
  users = {v: [d for s, d in edges if s == v] for v in range(n)}
  @cache
  def depth(v): return 1 + max((depth(u) for u in users[v]), default=-1)
  return [depth(v) for v in range(n)]


# ---- the layout ----
@pytest.mark.parametrize("seed", range(6))
def test_every_edge_points_down_and_layers_are_longest_paths(seed):
  n = 30
  edges = random_dag(n, 0.12, seed)
  lay = layout([(40.0, 20.0)] * n, edges)
  depth = longest_to_sink(n, edges)
  assert lay.layer == [max(depth) - d for d in depth] == layers(n, edges)
  for (s, d), pts in zip(edges, lay.edges):
    assert lay.layer[s] < lay.layer[d] and lay.y[s] < lay.y[d]
    assert all(b[1] > a[1] for a, b in zip(pts, pts[1:])), "an edge's polyline goes up"


def test_boxes_in_a_layer_do_not_overlap_and_the_layout_is_deterministic():
  edges = random_dag(40, 0.1, 7)
  sizes = [(20.0 + 7 * (v % 5), 20.0) for v in range(40)]
  a, b = layout(sizes, edges), layout(sizes, edges)
  assert (a.x, a.y, a.edges) == (b.x, b.y, b.edges)
  width = [w for w, _ in sizes] + [8.0] * (len(a.x) - 40)
  for row in a.order:
    for u, v in zip(row, row[1:]): assert a.x[u] + width[u] / 2 <= a.x[v] - width[v] / 2 + 1e-9


def crossing_graphs():
  """Graphs whose input order crosses edges: a ladder listed in reverse, a tree listed badly, attention's UOps."""
  twisted = [(k, 6 + (5 - k)) for k in range(6)] + [(k, 6 + (4 - k)) for k in range(5)]   # a reversed ladder
  tree = [(1, 0), (2, 0), (3, 1), (4, 2), (5, 1), (6, 2)]   # sources listed after users: input order crosses
  rng = np.random.default_rng(0)
  q, k, v = (Tensor(rng.standard_normal((8, 4)).astype(np.float32)) for _ in range(3))
  g = uop_graph(fa.attention(q, k, v).uop)
  return {"twisted": (12, twisted), "tree": (7, [(d, s) for s, d in tree][::-1]), "attention": (len(g.nodes), g.edges)}


@pytest.mark.parametrize("name", ["twisted", "tree", "attention"])
def test_the_barycentre_order_crosses_fewer_edges_than_the_naive_order(name):
  n, edges = crossing_graphs()[name]
  naive, swept = layout([(30.0, 20.0)] * n, edges, sweeps=0), layout([(30.0, 20.0)] * n, edges)
  assert naive.crossings > 0 and swept.crossings < naive.crossings
  if name != "attention": assert swept.crossings == 0   # both have a drawing without crossings, and it finds it


def test_crossings_are_counted_like_a_pairwise_count():
  down = [[2, 3], [2], [], []]
  assert crossings([[0, 1], [3, 2]], down) == 0   # 0->3 leftmost: nothing crosses (0->2 and 1->2 share an end)
  assert crossings([[0, 1], [2, 3]], down) == 1   # 0->3 crosses 1->2
  assert crossings([[1, 0], [2, 3]], down) == 0


def test_a_cycle_is_refused_by_name():
  with pytest.raises(ValueError, match="cycle"): layers(3, [(0, 1), (1, 2), (2, 0)])


# ---- SVG of a UOp graph ----
def parse(svg: str) -> ET.Element:
  return ET.fromstring(svg)


def nodes_of(root: ET.Element) -> list[ET.Element]:
  return [g for g in root.iter(SVG + "g") if "node" in g.get("class", "").split()]


def test_the_svg_parses_and_names_every_node_with_op_dtype_shape_and_arg():
  x = Tensor(np.ones((4, 8), np.float32))
  u = x.softmax(-1).uop
  root = parse(uop_svg(u, share_consts=True))
  drawn = nodes_of(root)
  topo = toposort([u])
  assert len(drawn) == len(topo)
  for g, node in zip(sorted(drawn, key=lambda g: int(g.get("data-node"))), topo):
    title = g.find(SVG + "title").text
    assert title.startswith(node.op.name) and repr(node.dtype).removeprefix("dtypes.") in title
    if node.shape: assert f"shape={node.shape}" in title
    assert g.get("class").split()[1] == "kind-" + {"BUFFER": "buffer", "REDUCE": "reduce", "CONST": "const"}.get(
      node.op.name, "movement" if node.op.name in ("RESHAPE", "EXPAND") else "alu")
  assert len([e for e in root.iter(SVG + "g") if e.get("class") == "edge"]) == sum(len(t.src) for t in topo)


def test_an_edge_per_source_in_order_and_constants_drawn_beside_each_user():
  i = range_(8, 0)
  u = (i * 4 + 4) * (i + 4)
  g = uop_graph(u)
  consts = [n for n in g.nodes if n.lines[0] == "CONST 4"]
  assert len(consts) == 3 and len(uop_graph(u, share_consts=True).nodes) == len(g.nodes) - 2
  top = len(g.nodes) - 1   # the last node drawn is the root, its sources in order
  assert [g.nodes[s].lines[0] for s, d in g.edges if d == top] == ["ADD", "ADD"]
  assert [s for s, d in g.edges if d == top] == sorted(s for s, d in g.edges if d == top)


def test_the_tree_of_a_shared_graph_is_bigger_than_the_dag():
  t, tree = range_(8, 0), 2   # a RANGE and its bound
  for step in range(4):
    t, tree = t * t + t, 2 + 3 * tree   # ADD(MUL(t, t), t): written out, t three times
    assert len(uop_graph(t, share_consts=True).nodes) == 2 + 2 * (step + 1)
    assert len(uop_graph(t, tree=True).nodes) == tree


def test_a_uop_draws_itself_in_jupyter_and_the_drawing_is_the_same_text_every_time():
  u = Tensor(np.ones((3, 5), np.float32)).sum(-1).uop
  assert u._repr_svg_() == u._repr_svg_() == uop_svg(u)
  parse(u._repr_svg_())


# ---- plans, kernels, loops ----
def attention_inputs(n: int = 16, d: int = 8):
  rng = np.random.default_rng(0)
  return [Tensor(rng.standard_normal((n, d)).astype(np.float32)) for _ in range(3)]


def test_a_plan_is_drawn_as_kernels_and_the_buffers_between_them_temporaries_marked():
  plan = make_plan([fa.attention(*attention_inputs()).uop])
  g = plan_graph(plan)
  kernels = [n for n in g.nodes if n.kind == "kernel"]
  temps = [n for n in g.nodes if n.mark == "temp"]
  assert [n.lines[0] for n in kernels] == [k.name for k in plan.kernels]
  assert len(temps) == len(plan.temps) > 0 and all(n.lines[0].startswith("temporary") for n in temps)
  assert len(g.edges) == sum(len(k.args) for k in plan.kernels)   # each read, and the write
  root = parse(plan_svg(plan))
  assert len([g for g in nodes_of(root) if "mark-temp" in g.get("class")]) == len(plan.temps)
  assert "<svg" in plan._repr_html_() and "<svg" in plan.kernels[0]._repr_html_()


def key_loops(prog: UOp, n: int, d: int) -> int:
  """The loops over n keys inside the row loop whose first inner loop runs d times (a dot product per key)."""
  found, stack = 0, []
  for kind, depth, u in rows(prog):
    if kind == "open":
      if stack and stack[-1] == [n, 0, True] and u.src[0].arg == d: found += 1
      if stack: stack[-1][1] += 1
      stack.append([u.src[0].arg, 0, depth >= 1])
    elif kind == "close": stack.pop()
  return found


def test_the_fused_kernel_draws_a_dot_product_loop_inside_every_key_loop_and_the_online_kernel_one():
  n, d = 16, 8
  fused = make_plan([fa.attention(*attention_inputs(n, d)).uop], options=Options(fuse_reduce=True, opt=flash_opt(4)))
  assert key_loops(fused.kernels[-1].ast, n, d) == 3   # the max pass, the sum pass, the output pass
  assert key_loops(fa.online_attention_ir(n, d), n, d) == 1
  svg = parse(loops_svg(fused.kernels[-1].ast))
  assert len([g for g in svg.iter(SVG + "g") if g.get("class") == "loop"]) == 8   # row, group, 3 key, 3 dot loops


# ---- passes ----
def test_replaying_every_logged_rewrite_gives_graph_rewrites_result():
  i, j = range_(16, 0), range_(16, 1)
  e = ((i * 16 + j) // 16) % 16 + (i * 0 + j) * 1
  log: list = []
  assert traced_rewrite(e, symbolic_rules, log) is simplify(e) is graph_rewrite(e, symbolic_rules)
  assert len(log) > 3
  assert replay([e], log) == [simplify(e)]
  assert replay([e], []) == [e]
  for k in range(len(log) + 1): replay([e], log[:k])   # every step is a graph


def test_the_passes_recorded_give_the_plan_the_kernelizer_makes():
  """viz runs _make_plan's tensor passes again: its cut must be the plan's (the same points, the same bodies)."""
  x = Tensor(np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32))
  w = Tensor(np.random.default_rng(1).standard_normal((256, 32)).astype(np.float32))
  programs = {"layernorm into matmul": ([(x.layernorm() @ w).uop], Options()),
              "attention unfused": ([fa.attention(*attention_inputs()).uop], Options(opt=Tensor.opt)),
              "attention fused": ([fa.attention(*attention_inputs()).uop], Options(fuse_reduce=True, opt=fa.FlashOpt)),
              "online softmax": ([fa.attention(*attention_inputs()).uop], Options(opt=Tensor.opt, online_softmax=True)),
              "detach": ([(x.detach() * 2).sum(-1).uop], Options(opt=Tensor.opt))}
  for name, (roots, options) in programs.items():
    norm = kernelize.normalize(roots)[0]
    plan = kernelize.plan_for(norm, options)
    passes, points = tensor_passes(roots, norm, options)
    assert [p.name for p in passes][:3] == ["normalize", "strip_detach", "stage_broadcast_compute"], name
    assert passes[-1].name == "cut" and len(points) == len(plan.kernels), name
    home = kernelize._homes(passes[-1].after, points)[0]
    assert [kernelize._kernel_body(p, points, home) for p in points] == [k.body for k in plan.kernels], name
    for p in passes:
      if p.rewrites: assert replay(p.before, p.rewrites) == p.after, (name, p.name)


def test_the_stage_pass_outlines_what_it_staged():
  x = Tensor(np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32))
  w = Tensor(np.random.default_rng(1).standard_normal((256, 32)).astype(np.float32))
  svg = viz.show(x.layernorm() @ w, passes=True)
  root = ET.fromstring(f"<div>{svg}</div>".replace("&mdash;", "-"))
  stage = [d for d in root.iter("details") if "stage_broadcast_compute" in "".join(d.find("summary").itertext())][0]
  changed = [g for g in stage.iter(SVG + "g") if "mark-changed" in g.get("class", "")]
  assert any(g.find(SVG + "title").text.startswith("STAGE") for g in changed)


# ---- recording ----
def test_recording_lists_every_realize_and_draws_each_plan_once():
  q, k, v = attention_inputs()
  with kernelize.isolated_plan_cache(), viz.recording() as rec:
    for _ in range(3): fa.attention(q, k, v).numpy()
  tr = json.loads(json.dumps(rec.trace()))   # plain data
  assert [r["new"] for r in tr["realizes"]] == [True, False, False] and len(tr["plans"]) == 1
  (plan,) = tr["plans"]
  assert [p["name"] for p in plan["passes"]] == ["normalize", "strip_detach", "stage_broadcast_compute", "layout",
                                                 "cut"]
  for kern in plan["kernels"]:
    assert [p["name"] for p in kern["passes"]] == ["kernel body", "rangeify", "simplify", "linearize"]
    assert kern["src"].startswith("void ") and "<svg" in kern["passes"][-1]["loops"]
  table = Table(tr["nodes"])
  for kern in plan["kernels"]:   # the final simplify finds nothing left to do: rangeify simplified as it went
    simp = kern["passes"][2]
    assert simp["after"] == simp["before"] and simp["rewrites"] == [] and steps(simp) == 1
  rangeify = max((kern["passes"][1] for kern in plan["kernels"]), key=lambda p: len(p["rewrites"]))
  assert steps(rangeify) == len(rangeify["rewrites"]) + 1 > 2
  roots, changed, what = graph_at(table, rangeify, 1)   # a rewrite alone: the expression and what it became
  (a, b), = rangeify["rewrites"][:1]
  assert roots == [table[a], table[b]] and changed and what.startswith("rewrite 1 of")
  assert graph_at(table, rangeify, steps(rangeify))[0] == [table[i] for i in rangeify["after"]]
  assert graph_at(table, rangeify, 0)[0] == [table[i] for i in rangeify["before"]]


def test_replaying_a_recorded_pass_gives_its_result_in_the_trace_s_own_nodes():
  x = Tensor(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32))
  with kernelize.isolated_plan_cache(), viz.recording() as rec: ((x.detach() + 1).detach() * 2).sum(-1).numpy()
  tr = rec.trace()
  table = Table(tr["nodes"])
  strip = tr["plans"][0]["passes"][1]
  assert strip["name"] == "strip_detach" and len(strip["rewrites"]) == 2 == steps(strip)
  before, pairs = [table[i] for i in strip["before"]], [(table[a], table[b]) for a, b in strip["rewrites"]]
  assert replay(before, pairs, table.rebuild) == [table[i] for i in strip["after"]]
  one, changed, what = graph_at(table, strip, 1)
  assert len(toposort(one)) == len(toposort(before)) - 1 and what.startswith("rewrite 1 of 2: DETACH")


def test_nothing_is_recorded_or_called_when_no_one_records(monkeypatch):
  assert trace.RECORDERS == [] or os.environ.get("VIZ")
  monkeypatch.setattr(trace, "RECORDERS", [])
  monkeypatch.setattr(trace, "realized", lambda *a: pytest.fail("the realize hook ran with nothing recording"))
  monkeypatch.setattr(trace, "lowered", lambda *a: pytest.fail("the lowering hook ran with nothing recording"))
  with kernelize.isolated_plan_cache():
    Tensor(np.ones((4, 4), np.float32)).sum(-1).numpy()


def test_viz_1_records_the_flash_attention_example_to_a_trace_file(tmp_path):
  path = tmp_path / "t.json"
  env = {**os.environ, "VIZ": "1", "VIZ_TRACE": str(path), "OMP_NUM_THREADS": "1"}
  out = subprocess.run([sys.executable, str(ROOT / "examples/flash_attention.py"), "64", "16"], env=env,
                       capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr
  assert f"python -m uopc.viz {path}" in out.stderr
  tr = load(path)
  assert len(tr["realizes"]) == 10 and len(tr["plans"]) == 2   # unfused and fused, 5 realizes each
  assert [len(p["kernels"]) for p in tr["plans"]] == [6, 2]
  with pytest.raises(ValueError, match="not a uopc trace"):
    (tmp_path / "x.json").write_text("[]"); load(tmp_path / "x.json")


# ---- the server ----
def recorded_trace(tmp_path: Path) -> Path:
  with kernelize.isolated_plan_cache(), viz.recording(tmp_path / "trace.json"):
    fa.attention(*attention_inputs()).numpy()
  return tmp_path / "trace.json"


def test_the_viewer_draws_every_pass_at_every_step_it_offers(tmp_path):
  viewer = Viewer(load(recorded_trace(tmp_path)))
  index = viewer.index()
  plan = index["plans"][0]
  assert "<svg" in viewer.view(0, -1, -1, None)["svg"]
  for k, owner in [(-1, plan)] + list(enumerate(plan["kernels"]))[:2]:
    for i, p in enumerate(owner["passes"]):
      for s in sorted({0, 1, p["steps"]}):
        v = viewer.view(0, k, i, s)
        assert nodes_of(parse(v["svg"])), (k, p["name"], s)


def test_the_server_answers_on_localhost_and_stops_by_itself(tmp_path):
  path = recorded_trace(tmp_path)
  proc = subprocess.Popen([sys.executable, "-m", "uopc.viz", str(path), "--port", "0", "--idle", "4"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    proc.stdout.readline()
    url = re.search(r"http://127\.0\.0\.1:\d+/", proc.stdout.readline()).group(0)
    page = urllib.request.urlopen(url, timeout=30).read().decode()
    assert "<title>uopc.viz</title>" in page and 'id="graph"' in page
    index = json.loads(urllib.request.urlopen(url + "api/index", timeout=30).read())
    assert len(index["realizes"]) == 1
    view = json.loads(urllib.request.urlopen(url + "api/view?plan=0&kernel=0&pass=1&step=1", timeout=30).read())
    assert view["name"] == "rangeify" and "rewrite 1 of" in view["what"] and view["src"].startswith("void ")
    with pytest.raises(urllib.error.HTTPError) as err: urllib.request.urlopen(url + "api/view?plan=9", timeout=30)
    assert err.value.code == 400 and "IndexError" in json.loads(err.value.read())["error"]
    assert proc.wait(timeout=60) == 0   # no request for 4 s: it stops by itself
  finally:
    if proc.poll() is None: proc.kill()
    proc.stdout.close(); proc.stderr.close()


def test_the_command_line_names_a_file_that_is_not_a_trace(tmp_path):
  (tmp_path / "notes.json").write_text('{"realizes": []}')
  for path, says in ((tmp_path / "missing.json", "not a readable uopc trace"), (tmp_path / "notes.json", "not a uopc")):
    out = subprocess.run([sys.executable, "-m", "uopc.viz", str(path), "--port", "0"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and says in out.stderr


def test_show_draws_a_plan_a_kernel_and_a_realize_pass_by_pass():
  x = Tensor(np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32))
  plan = make_plan([x.softmax(-1).uop])
  assert repr(viz.show(plan)).startswith("<uopc.viz drawing:") and "temporary 0" in str(viz.show(plan))
  kernel = str(viz.show(plan.kernels[-1]))
  assert 'class="loop"' in kernel and "void " + plan.kernels[-1].name in kernel
  passes = str(viz.show(x.softmax(-1), passes=True))
  names = re.findall(r"<summary><b>([\w ]+)</b>", passes)
  assert names[:5] == ["normalize", "strip_detach", "stage_broadcast_compute", "layout", "cut"]
  assert names[5:] == ["kernel body", "rangeify", "simplify", "linearize"] * len(plan.kernels)
  assert "no change" in passes   # strip_detach: no DETACH in softmax

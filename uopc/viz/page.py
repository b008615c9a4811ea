"""The one page uopc.viz.server serves: HTML, style and a short script, written here (no library, no build step).

Left, the realizes of the trace and, for the one chosen, its plan: the tensor-level passes and each kernel with its
passes. In the middle the chosen pass drawn (step through its rewrites with the buttons, the slider or the arrow
keys); for a kernel, its C on the right. The address keeps the choice (#r=0&k=1&p=2&s=3), so a view can be linked.
An error in the script is written into the page (#errors) as well as the console.
"""

PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>uopc.viz</title>
<style>
body { margin: 0; font: 13px system-ui, sans-serif; display: flex; height: 100vh; color: #222; }
#side { width: 260px; overflow: auto; border-right: 1px solid #ccc; padding: 8px; box-sizing: border-box; }
#side h3 { font-size: 12px; margin: 12px 0 4px; color: #555; text-transform: uppercase; }
#side button { display: block; width: 100%; text-align: left; border: 0; background: none; padding: 2px 6px;
  font: 12px monospace; cursor: pointer; border-radius: 3px; }
#side button:hover { background: #eef; }
#side button.on { background: #336; color: #fff; }
#side .kernel { margin-top: 6px; font-weight: bold; }
#side .pass { padding-left: 18px; }
#main { flex: 1; display: flex; flex-direction: column; min-width: 0; }
#head { padding: 8px 12px; border-bottom: 1px solid #ddd; }
#title { font: bold 15px monospace; }
#doc { color: #555; white-space: pre-wrap; font: 12px monospace; margin-top: 4px; }
#stepper { margin-top: 6px; display: none; align-items: center; gap: 6px; }
#stepper input[type=range] { width: 240px; }
#what { font: 12px monospace; color: #a00; }
#panes { flex: 1; display: flex; overflow: hidden; }
#graph { flex: 1; overflow: auto; padding: 8px; }
#src { flex: 0 0 40%; overflow: auto; margin: 0; padding: 8px; font: 11px monospace; border-left: 1px solid #ddd;
  background: #fafafa; display: none; }
#errors { color: #fff; background: #b00; font: 12px monospace; white-space: pre-wrap; }
#errors:empty { display: none; }
</style></head>
<body>
<div id="side"><div id="realizes"></div><div id="plan"></div></div>
<div id="main">
  <div id="errors"></div>
  <div id="head"><div id="title">uopc.viz</div><div id="doc"></div>
    <div id="stepper"><button id="first">|&lt;</button><button id="prev">&lt;</button>
      <input id="slider" type="range" min="0" value="0"><button id="next">&gt;</button><button id="last">&gt;|</button>
      <span id="stepno"></span> <span id="what"></span></div></div>
  <div id="panes"><div id="graph"></div><pre id="src"></pre></div>
</div>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
function fail(msg) { $("errors").textContent += msg + "\n"; console.error("uopc.viz: " + msg); }
window.addEventListener("error", (e) => fail("error: " + e.message));
window.addEventListener("unhandledrejection", (e) => fail("error: " + e.reason));
let index = null;
const state = {r: 0, k: -1, p: -1, s: null};

async function get(url) {
  const res = await fetch(url);
  const body = await res.json();
  if (!res.ok || body.error) throw new Error(url + ": " + (body.error || res.status));
  return body;
}

function button(text, cls, on, click) {
  const b = document.createElement("button");
  b.textContent = text; b.className = cls + (on ? " on" : ""); b.onclick = click;
  return b;
}

function choose(r, k, p, s) {
  Object.assign(state, {r, k, p, s});
  location.hash = `r=${r}&k=${k}&p=${p}` + (s === null ? "" : `&s=${s}`);
  draw().catch((e) => fail("error: " + e.message));
}

function sidebar() {
  const rs = $("realizes"); rs.innerHTML = "<h3>realizes</h3>";
  index.realizes.forEach((r, i) => {
    const n = index.plans[r.plan].kernels.length;
    rs.appendChild(button(`#${i} plan ${r.plan}: ${n} kernel${n === 1 ? "" : "s"}${r.new ? "" : " (cached)"}`,
                          "realize", i === state.r, () => choose(i, -1, -1, null)));
  });
  const plan = index.plans[index.realizes[state.r].plan];
  const box = $("plan"); box.innerHTML = "<h3>plan</h3>";
  box.appendChild(button("kernels and buffers", "pass", state.k === -1 && state.p === -1,
                         () => choose(state.r, -1, -1, null)));
  plan.passes.forEach((p, i) => box.appendChild(button(p.name, "pass", state.k === -1 && state.p === i,
                                                       () => choose(state.r, -1, i, null))));
  plan.kernels.forEach((k, j) => {
    const head = document.createElement("div"); head.className = "kernel"; head.textContent = k.name;
    box.appendChild(head);
    k.passes.forEach((p, i) => box.appendChild(button(p.name, "pass", state.k === j && state.p === i,
                                                      () => choose(state.r, j, i, null))));
  });
}

async function draw() {
  sidebar();
  const plan = index.realizes[state.r].plan;
  const v = await get(`/api/view?plan=${plan}&kernel=${state.k}&pass=${state.p}&step=${state.s ?? "last"}`);
  const kname = state.k >= 0 ? index.plans[plan].kernels[state.k].name + ": " : "";
  $("title").textContent = kname + v.name;
  $("doc").textContent = v.doc;
  $("graph").innerHTML = v.svg;
  $("src").textContent = v.src; $("src").style.display = v.src ? "block" : "none";
  const step = state.s ?? v.steps;
  $("stepper").style.display = v.steps > 1 || state.p >= 0 ? "flex" : "none";
  $("slider").max = v.steps; $("slider").value = step;
  $("stepno").textContent = `step ${step} of ${v.steps}`;
  $("what").textContent = v.what;
}

function step(to) {
  const v = Number($("slider").max);
  choose(state.r, state.k, state.p, Math.max(0, Math.min(v, to)));
}
$("first").onclick = () => step(0);
$("prev").onclick = () => step(Number($("slider").value) - 1);
$("next").onclick = () => step(Number($("slider").value) + 1);
$("last").onclick = () => step(Number($("slider").max));
$("slider").oninput = () => step(Number($("slider").value));
document.addEventListener("keydown", (e) => {
  if (e.key === "ArrowLeft") step(Number($("slider").value) - 1);
  if (e.key === "ArrowRight") step(Number($("slider").value) + 1);
});

async function start() {
  index = await get("/api/index");
  if (!index.realizes.length) { $("title").textContent = "this trace recorded no realize"; return; }
  const h = Object.fromEntries(location.hash.slice(1).split("&").filter((x) => x).map((x) => x.split("=")));
  const r = Math.min(Number(h.r || 0), index.realizes.length - 1);
  choose(r, Number(h.k ?? -1), Number(h.p ?? -1), h.s === undefined ? null : Number(h.s));
}
start().catch((e) => fail("error: " + e.message));
</script></body></html>
"""

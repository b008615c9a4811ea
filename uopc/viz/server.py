"""python -m uopc.viz TRACE: a recorded trace served as one page on localhost (the standard library's http.server).

  GET /                                        the page (uopc.viz.page: HTML and script, no library)
  GET /api/index                               the realizes, and per plan its passes and kernels (names, steps)
  GET /api/view?plan=P&kernel=K&pass=I&step=S  one pass drawn at one step (K=-1: the plan's tensor passes; I=-1:
                                               the plan itself): {"svg", "what", "steps", "name", "doc", "src"}
The drawings are laid out and written here, in Python (uopc.viz.layout, uopc.viz.svg); the page only shows them.
"""
from __future__ import annotations
import json, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse
from uopc.viz.page import PAGE
from uopc.viz.steps import Table, pass_svg, steps


def load(path: str | Path) -> dict:
  """A trace file (uopc.viz.record), checked to be one."""
  try: tr = json.loads(Path(path).read_text())
  except (OSError, ValueError) as e: raise ValueError(f"{path}: not a readable uopc trace ({e})") from None
  if not isinstance(tr, dict) or "uopc_trace" not in tr:
    raise ValueError(f"{path}: not a uopc trace (VIZ=1 python prog.py writes one)")
  return tr


class Viewer:
  """Answers the page's questions about one trace (a memo of drawings: stepping back and forth redraws nothing)."""
  def __init__(self, tr: dict):
    self.trace, self.table, self.memo = tr, Table(tr["nodes"]), {}
    self.lock = threading.Lock()

  def index(self) -> dict:
    brief = lambda ps: [{"name": p["name"], "doc": p.get("doc", ""), "steps": steps(p)} for p in ps]
    return {"realizes": self.trace["realizes"],
            "plans": [{"passes": brief(p["passes"]), "explain": p["explain"], "options": p.get("options", {}),
                       "kernels": [{"name": k["name"], "passes": brief(k["passes"])} for k in p["kernels"]]}
                      for p in self.trace["plans"]]}

  def view(self, plan: int, kernel: int, pas: int, step: int | None) -> dict:
    key = (plan, kernel, pas, step)
    with self.lock:
      if key not in self.memo: self.memo[key] = self._view(plan, kernel, pas, step)
      return self.memo[key]

  def _view(self, plan: int, kernel: int, pas: int, step: int | None) -> dict:
    pl = self.trace["plans"][plan]
    if pas < 0: return {"svg": pl["plan"], "what": "", "steps": 0, "name": "plan", "doc": pl["explain"], "src": ""}
    owner = pl if kernel < 0 else pl["kernels"][kernel]
    p = owner["passes"][pas]
    svg, what = pass_svg(self.table, p, step)
    return {"svg": svg, "what": what, "steps": steps(p), "name": p["name"], "doc": p.get("doc", ""),
            "src": owner.get("src", "")}


def handler(viewer: Viewer, seen: list):
  class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args): pass   # quiet: the terminal shows only the address

    def do_GET(self):
      seen[0] = time.monotonic()
      url = urlparse(self.path)
      q = {k: v[0] for k, v in parse_qs(url.query).items()}
      try:
        if url.path in ("/", "/index.html"): return self._send(PAGE.encode(), "text/html; charset=utf-8")
        if url.path == "/api/index": return self._json(viewer.index())
        if url.path == "/api/view":
          step = int(q["step"]) if q.get("step", "") not in ("", "last") else None
          return self._json(viewer.view(int(q["plan"]), int(q.get("kernel", -1)), int(q.get("pass", -1)), step))
        self.send_error(404, "no such page")
      except (KeyError, ValueError, IndexError) as e:
        self._send(json.dumps({"error": f"{type(e).__name__}: {e}"}).encode(), "application/json", 400)

    def _json(self, obj) -> None: self._send(json.dumps(obj).encode(), "application/json")

    def _send(self, body: bytes, kind: str, code: int = 200) -> None:
      self.send_response(code)
      self.send_header("Content-Type", kind)
      self.send_header("Content-Length", str(len(body)))
      self.send_header("Cache-Control", "no-store")
      self.end_headers()
      self.wfile.write(body)
  return Handler


def serve(tr: dict, port: int = 8000, idle: float | None = None, out=sys.stdout) -> None:
  """Serve the trace on 127.0.0.1:port (0: any free port) until Ctrl-C, or until no request came for `idle`
  seconds. The first line written to `out` is the page's address."""
  seen = [time.monotonic()]
  server = ThreadingHTTPServer(("127.0.0.1", port), handler(Viewer(tr), seen))
  server.daemon_threads = True
  print(f"uopc.viz: serving on http://127.0.0.1:{server.server_address[1]}/  (Ctrl-C stops)", file=out, flush=True)
  thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
  thread.start()
  try:
    while thread.is_alive():
      time.sleep(0.2)
      if idle is not None and time.monotonic() - seen[0] > idle: break
  except KeyboardInterrupt: pass
  finally:
    server.shutdown()
    server.server_close()

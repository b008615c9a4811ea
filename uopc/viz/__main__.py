"""python -m uopc.viz [TRACE] [--port N] [--idle S]: serve a recorded trace (VIZ=1 writes one) on localhost.

Without TRACE, the newest uopc-trace-*.json in the temporary folder (where VIZ=1 writes unless VIZ_TRACE says).
"""
import argparse, sys, tempfile
from pathlib import Path
from uopc.viz.server import load, serve


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(prog="python -m uopc.viz", description=__doc__.splitlines()[0])
  ap.add_argument("trace", nargs="?", help="a trace file (default: the newest in the temporary folder)")
  ap.add_argument("--port", type=int, default=8000, help="the port on 127.0.0.1 (0: any free one; default 8000)")
  ap.add_argument("--idle", type=float, default=None, help="stop after this many seconds without a request")
  args = ap.parse_args(argv)
  path = args.trace
  if path is None:
    found = sorted(Path(tempfile.gettempdir()).glob("uopc-trace-*.json"), key=lambda p: p.stat().st_mtime)
    if not found: ap.error("no trace given and none in the temporary folder: run a program with VIZ=1 first")
    path = found[-1]
  try: tr = load(path)
  except ValueError as e: ap.error(str(e))
  print(f"uopc.viz: {path}: {len(tr['realizes'])} realizes, {len(tr['plans'])} plans", flush=True)
  serve(tr, args.port, args.idle)
  return 0


if __name__ == "__main__": sys.exit(main())

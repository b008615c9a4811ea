#!/usr/bin/env bash
# NOTES 36/37: the quiet-machine runs (one after another, nothing else running): bash notes/notes36_speed.sh [gpt|isa]
# (add OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2 to the x86-64-v3 runs for peers as an AVX2 machine runs them)
set -u
cd "$(dirname "$0")/.."
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
PY=.venv/bin/python
O=${OUT:-/tmp/notes36}; mkdir -p $O
{ date -u; lscpu | grep -E "Model name|CPU family|^Model:"; nproc; gcc --version | head -1; git log --oneline | head -1; } > $O/machine.txt
run() { local name=$1; shift; echo "== $name: $*" ; local t0=$SECONDS; "$@" > $O/$name.txt 2>&1; echo "   rc=$? $((SECONDS-t0)) s"; }
PART=${1:-all}
if [[ $PART == all || $PART == gpt ]]; then
  run gpt_baby_t2_2000 env OMP_NUM_THREADS=2 $PY scripts/outputs.py --only gpt; cp outputs/gpt_baby_bench.txt $O/
  run example_baby_t2 env OMP_NUM_THREADS=2 $PY examples/gpt.py --preset baby --steps 2000
  run gpt_baby_t1_step env OMP_NUM_THREADS=1 $PY -m uopc.bench gpt --preset baby --steps 10
fi
if [[ $PART == all || $PART == isa ]]; then
  for level in native x86-64-v3; do
    m=$([[ $level == native ]] && echo "" || echo $level)
    run peak_$level env UOPC_MARCH=$m $PY -m uopc.bench peak
    for t in 1 2; do run gemm_${level}_t$t env UOPC_MARCH=$m OMP_NUM_THREADS=$t $PY -m uopc.bench gemm --sizes 512 1024 2048 --rounds 2; done
    run attn_$level env UOPC_MARCH=$m $PY -m uopc.bench attention --peers torch --causal --sizes 1024 2048 4096 --dims 64 128 --rounds 1
  done
fi

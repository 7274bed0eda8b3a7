#!/usr/bin/env bash
# Third device run of issue 11: GPU views made on the side stream (overlap) vs on the compute
# stream, eager defaults and all compiled, one GPU, 16 cores. Usage: bash scripts/device_round2c.sh OUTDIR
set -uo pipefail
OUT=${1:-bench_out}; mkdir -p "$OUT"; PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
nvidia-smi -L
B="--classes 101 --workers 15 --n-fast 1024 --n-ref 2 --n-agree 0 --skip ref-cpu ref-gpu fast-cpu fast-cpufast"
for o in 0 1; do
  ARGTCA_VIEWS_OVERLAP=$o taskset -c 0-15 $PY -m argtca.bench $B --out "$OUT/eager_overlap$o.json" 2>&1 | grep -E "fast .*gpu views|ERROR" | sed "s/^/overlap=$o eager: /"
done
ARGTCA_VIEWS_OVERLAP=1 taskset -c 0-15 $PY -m argtca.bench $B --compile on --compile-text --grad-mode recompute \
  --text-attention math --out "$OUT/compiled_overlap1.json" 2>&1 | grep -E "fast .*gpu views|ERROR" | sed "s/^/overlap=1 compiled: /"

#!/usr/bin/env bash
# Runs 3-5 and 7 of benchmarks/rounds/round-3.md (one GPU, 16 cores): the 1-GPU bench (prefix-shared
# text tower, grad mode auto -> jacobian, lean compiled image tower), the agreement check with the
# reference's own noise, the image tower's % of peak, cpu-fast views.
# Usage: bash benchmarks/probes/device_round3b.sh OUTDIR [k101|k101e2e|k1000|final|cli]
set -uo pipefail
OUT=${1:-bench_out}; mkdir -p "$OUT"; PY=${PYTHON:-python3}; shift || true
PARTS=${*:-k101}
export PYTHONUNBUFFERED=1
nvidia-smi -L
F="warn|online.softmax|split.the.reduction|important.use.case|^softmax|^$"
for p in $PARTS; do case $p in
k101) taskset -c 0-15 $PY -m argtca.bench --classes 101 --workers 15 --compile on --compile-text \
        --grad-mode auto --text-attention math --n-fast 2048 --n-fast-cpu 384 --n-ref 2 \
        --n-agree 320 --tower --skip ref-cpu ref-gpu fast-cpu --out "$OUT/k101.json" 2>&1 \
        | grep -v -i -E "$F" | tee "$OUT/k101.log" ;;
k101e2e) taskset -c 0-15 $PY -m argtca.bench --classes 101 --workers 15 --compile on --compile-text \
        --grad-mode auto --text-attention math --n-fast 2048 --n-fast-cpu 384 --n-ref 2 \
        --n-agree 0 --skip ref-cpu ref-gpu fast-cpu --out "$OUT/k101e2e.json" 2>&1 \
        | grep -v -i -E "$F" | tee "$OUT/k101e2e.log" ;;
final) taskset -c 0-15 $PY -m argtca.bench --classes 101 1000 --large-scale 1 --workers 15 --compile on \
        --compile-text --grad-mode auto --text-attention math --n-fast 4096 --n-fast-cpu 768 \
        --n-ref 2 --n-agree 0 --skip ref-cpu ref-gpu fast-cpu --out "$OUT/final.json" 2>&1 \
        | grep -v -i -E "$F" | tee "$OUT/final.log" ;;
k1000) taskset -c 0-15 $PY -m argtca.bench --classes 1000 --large-scale 1 --workers 15 --compile on \
        --compile-text --grad-mode auto --text-attention math --n-fast 4096 --n-ref 2 --n-agree 0 \
        --skip ref-cpu ref-gpu fast-cpu fast-cpufast --out "$OUT/k1000.json" 2>&1 \
        | grep -v -i -E "$F" | tee "$OUT/k1000.log" ;;
cli) $PY -m argtca.bench --classes 101 --n-fast 16 --n-fast-cpu 16 --n-ref 2 --n-agree 0 \
        --skip ref-cpu ref-gpu fast-cpu fast-cpufast fast-gpu --cli-gpus 1 --cli-images 2048 \
        --out "$OUT/cli.json" 2>&1 | grep -v -i -E "$F" | tee "$OUT/cli.log" ;;
esac; done

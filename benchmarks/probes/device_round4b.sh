#!/usr/bin/env bash
# Runs 8-11 and 13 of benchmarks/rounds/round-4.md: the 1-GPU bench (K=101: GPU views 4096
# images, cpu-fast, agreement, image tower; K=1000), and the CLI with the defaults on 1 and 2 GPUs.
# Usage: bash benchmarks/probes/device_round4b.sh OUTDIR PARTS...
# parts: final101 final1000 cpufast cpufast2 cli1 cli12
set -uo pipefail
OUT=${1:-bench_out}; mkdir -p "$OUT"; PY=${PYTHON:-python3}; shift || true
PARTS=${*:-final101}
export PYTHONUNBUFFERED=1
nvidia-smi -L
F="warn|online.softmax|split.the.reduction|important.use.case|^softmax|^$"
for p in $PARTS; do case $p in
final101) taskset -c 0-15 $PY -m argtca.bench --classes 101 --workers 15 --compile on \
        --compile-text --grad-mode auto --n-fast 4096 --n-fast-cpu 768 --n-ref 2 --n-agree 320 \
        --tower --skip ref-cpu ref-gpu fast-cpu --out "$OUT/final101.json" 2>&1 \
        | grep -v -i -E "$F" | tee "$OUT/final101.log" ;;
final1000) taskset -c 0-15 $PY -m argtca.bench --classes 1000 --large-scale 1 --workers 15 \
        --compile on --compile-text --grad-mode auto --n-fast 4096 --n-ref 2 --n-agree 0 \
        --skip ref-cpu ref-gpu fast-cpu fast-cpufast --out "$OUT/final1000.json" 2>&1 \
        | grep -v -i -E "$F" | tee "$OUT/final1000.log" ;;
cpufast) for a in "" "--text-attention math" "--text-attention math --main-threads 0"; do
        echo "== cpu-fast pass, args: $a"
        taskset -c 0-15 $PY -m argtca.bench --classes 101 --workers 15 --compile on --compile-text \
        --grad-mode auto --n-fast 16 --n-fast-cpu 512 --n-ref 2 --n-agree 0 $a \
        --skip ref-cpu ref-gpu fast-cpu fast-gpu --out "$OUT/cpufast.json" 2>&1 \
        | grep -v -i -E "$F" | grep "cpu-fast views" | tee -a "$OUT/cpufast.log"; done ;;
cpufast2) taskset -c 0-15 $PY -m argtca.bench --classes 101 --workers 15 --compile on \
        --compile-text --grad-mode auto --n-fast 16 --n-fast-cpu 1536 --n-ref 2 --n-agree 0 \
        --skip ref-cpu ref-gpu fast-cpu fast-gpu --out "$OUT/cpufast2.json" 2>&1 \
        | grep -v -i -E "$F" | grep "cpu-fast views" | tee -a "$OUT/cpufast2.log" ;;
cli1) $PY -m argtca.bench --classes 101 --n-fast 16 --n-fast-cpu 16 --n-ref 2 --n-agree 0 \
        --skip ref-cpu ref-gpu fast-cpu fast-cpufast fast-gpu --cli-gpus 1 --cli-images 4096 \
        --out "$OUT/cli1.json" 2>&1 | grep -v -i -E "$F" | tee "$OUT/cli1.log" ;;
cli12) $PY -m argtca.bench --classes 101 --n-fast 16 --n-fast-cpu 16 --n-ref 2 --n-agree 0 \
        --skip ref-cpu ref-gpu fast-cpu fast-cpufast fast-gpu --cli-gpus 1 2 --cli-images ${CLI_IMAGES:-4096} \
        --out "$OUT/cli12.json" 2>&1 | grep -v -i -E "$F" | tee "$OUT/cli12.log" ;;
esac; done

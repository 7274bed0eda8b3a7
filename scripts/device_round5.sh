#!/usr/bin/env bash
# Round 5 of issue 11: Jᵀ build times (device_round5.py), the 1-GPU bench with the GPU view maker
# compiled, cpu-fast, and the CLI on 1 and 2 GPUs. Usage: bash scripts/device_round5.sh OUTDIR PARTS...
# parts: jac101 jac1000 gpu101 gpu1000 agree101 cpufast cli12 percore
set -uo pipefail
OUT=${1:-bench_out}; mkdir -p "$OUT"; PY=${PYTHON:-python3}; shift || true
PARTS=${*:-jac101}
export PYTHONUNBUFFERED=1
nvidia-smi -L
F="warn|online.softmax|split.the.reduction|important.use.case|^softmax|^$"
B="taskset -c 0-15 $PY -m argtca.bench --workers 15 --compile on --compile-text --grad-mode auto"
for p in $PARTS; do case $p in
jac*) $PY scripts/device_round5.py "$OUT" "$p" 2>&1 | grep -v -i -E "$F" | tee -a "$OUT/jac.log" ;;
gpu101) $B --classes 101 --n-fast 4096 --n-ref 2 --n-agree 0 ${GPU_ARGS:-} \
        --skip ref-cpu ref-gpu fast-cpu fast-cpufast --out "$OUT/gpu101.json" 2>&1 \
        | grep -v -i -E "$F" | tee "$OUT/gpu101.log" ;;
gpu1000) $B --classes 1000 --large-scale 1 --n-fast 4096 --n-ref 2 --n-agree 0 ${GPU_ARGS:-} \
        --skip ref-cpu ref-gpu fast-cpu fast-cpufast --out "$OUT/gpu1000.json" 2>&1 \
        | grep -v -i -E "$F" | tee "$OUT/gpu1000.log" ;;
agree101) $B --classes 101 --n-fast 16 --n-ref 2 --n-agree 320 --tower \
        --skip ref-cpu ref-gpu fast-cpu fast-cpufast fast-gpu --out "$OUT/agree101.json" 2>&1 \
        | grep -v -i -E "$F" | tee "$OUT/agree101.log" ;;
cpufast) $B --classes 101 --n-fast 16 --n-fast-cpu ${CPU_IMAGES:-1536} --n-ref 2 --n-agree 0 \
        --skip ref-cpu ref-gpu fast-cpu fast-gpu --out "$OUT/cpufast${CPU_IMAGES:-1536}.json" 2>&1 \
        | grep -v -i -E "$F" | grep -E "cpu-fast views|host_s" | tee -a "$OUT/cpufast.log" ;;
percore) $PY -m argtca.bench.gpu percore 2>&1 | tail -2 | tee -a "$OUT/percore.log"
        for c in $(seq 1 15); do taskset -c $c $PY -m argtca.bench.gpu percore > "$OUT/pc$c.log" 2>&1 & done
        wait; tail -qn1 "$OUT"/pc*.log | tee -a "$OUT/percore.log" ;;
cli12) $PY -m argtca.bench --classes 101 --n-fast 16 --n-fast-cpu 16 --n-ref 2 --n-agree 0 \
        --skip ref-cpu ref-gpu fast-cpu fast-cpufast fast-gpu --cli-gpus 1 2 --cli-images ${CLI_IMAGES:-4096} \
        --out "$OUT/cli12.json" 2>&1 | grep -v -i -E "$F" | tee "$OUT/cli12.log" ;;
esac; done

#!/usr/bin/env bash
# The bench passes of benchmarks/rounds/round-5.md and round-6.md: the 1-GPU bench with the GPU
# view maker compiled, cpu-fast, agreement, one core's views, and the CLI on 1 and 2 GPUs.
# (Round 5's Jᵀ build-time probe, which compared against a copy of an earlier text_tower.py, is
# gone; its numbers are in round-5.md; the bench's passes report Jᵀ's build time.)
# Usage: bash benchmarks/probes/device_round5.sh OUTDIR PARTS...
# parts: gpu101 gpu1000 agree101 cpufast cli12 percore
set -uo pipefail
OUT=${1:-bench_out}; mkdir -p "$OUT"; PY=${PYTHON:-python3}; shift || true
PARTS=${*:-gpu101}
export PYTHONUNBUFFERED=1
nvidia-smi -L
F="warn|online.softmax|split.the.reduction|important.use.case|^softmax|^$"
B="taskset -c 0-15 $PY -m argtca.bench --workers 15 --compile on --compile-text --grad-mode auto"
for p in $PARTS; do case $p in
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

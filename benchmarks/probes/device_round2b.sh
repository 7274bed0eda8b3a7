#!/usr/bin/env bash
# Run B of benchmarks/rounds/round-2.md: CLI scaling on 1/2/4 GPUs with the defaults, then the
# 1-GPU bench with everything compiled on 16 cores. Usage: bash benchmarks/probes/device_round2b.sh OUTDIR
set -uo pipefail
OUT=${1:-bench_out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi -L; nproc
G=$(nvidia-smi -L | wc -l); GS="1"; [ "$G" -ge 2 ] && GS="1 2"; [ "$G" -ge 4 ] && GS="1 2 4"
$PY -m argtca.bench --classes 101 --n-fast 16 --n-fast-cpu 16 --n-ref 2 --n-agree 0 \
  --skip ref-cpu ref-gpu fast-cpu fast-cpufast fast-gpu --cli-gpus $GS --cli-images 2048 \
  --out "$OUT/cli.json" 2>&1 | tee "$OUT/cli.log"
taskset -c 0-15 $PY -m argtca.bench --classes 101 --workers 15 --compile on --compile-text \
  --grad-mode recompute --text-attention math --n-fast 1024 --n-fast-cpu 384 --n-ref 32 \
  --n-agree 320 --tower --profile --skip ref-gpu --out "$OUT/compiled.json" 2>&1 | tee "$OUT/compiled.log"

#!/usr/bin/env bash
# Run A of benchmarks/rounds/round-2.md: imports, the 1-GPU bench on 16 cores (eager defaults),
# then the CLI with the defaults on 1 and 2 GPUs.
# Usage: bash benchmarks/probes/device_round2.sh OUTDIR [bench flags]
set -uo pipefail
OUT=${1:-bench_out}; shift || true
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi -L; nproc
IMP='import time; t=time.perf_counter(); import argtca.trainers, argtca.models.clip, argtca.views.gpu, argtca.engine.fast, sys; print("imports %.2f s, transformers loaded: %s" % (time.perf_counter()-t, "transformers" in sys.modules))'
for i in 1 2; do
  ARGTCA_OPEN_CLIP_TRANSFORMERS=1 $PY -c "$IMP" | sed 's/^/with transformers: /'
  $PY -c "$IMP" | sed 's/^/lean:              /'
done 2>&1 | tee "$OUT/imports.txt"
C0=0-$(( $(nproc) < 16 ? $(nproc) - 1 : 15 ))
taskset -c $C0 $PY -m argtca.bench --classes 101 1000 --workers 15 --n-fast 1024 --n-fast-cpu 384 \
  --n-ref 32 --n-agree 320 --tower --input --n-input 192 --profile --out "$OUT/bench_1gpu.json" "$@" \
  2>&1 | tee "$OUT/bench_1gpu.log"
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  $PY -m argtca.bench --classes 101 --n-fast 16 --n-fast-cpu 16 --n-ref 2 --n-agree 0 \
    --skip ref-cpu ref-gpu fast-cpu fast-cpufast fast-gpu --cli-gpus 1 2 --cli-images 2048 \
    --out "$OUT/bench_cli.json" 2>&1 | tee "$OUT/bench_cli.log"
fi

#!/bin/bash
# Round 11 (issue 32 §1): TPT's AugMix ops of the exact views on the GPU (TTA.VIEWS_OPS auto =
# engine on CUDA, ChainRunner), against the same tree with TTA.VIEWS_OPS workers (round 10's
# default: PIL's ops in the loader workers, the float stage on the GPU) and the official script,
# in one call. Set-up and clock: device_common.sh (peers and wheels from $S, default .speed10).
# Steps (each skipped past DEADLINE seconds):
#   identity      views_float_identity.py: the views with the float stage and the ops on the GPU
#                 against PIL + ExactMixer on the CPU (8 images direct, 64 through the loader with
#                 15 workers): differing bytes (must be 0), and the cost of each side
#   official      the official TPT script, 1024 images, 15 workers
#   fair          argtca TPT defaults (LATE_WORKERS=1: workers forked after the model build, as
#                 the official script forks its own), 1024 images
#   fair_workers  the same with TTA.VIEWS_OPS workers
#   zoo zoo_workers   TPS, R-TPT, DMN-ZS defaults, 512 images, with TTA.VIEWS_OPS auto / workers
# Usage: OUT=$OUT DEADLINE=560 bash benchmarks/probes/device_round11.sh [steps...]
# A CPU smoke test of the plumbing (no CUDA; official needs it):
#   N=8 NS=8 NZ=8 IDENTITY_ARGS="--images 1 --views 4 --loader-images 3 --workers 1 --size 32"
#   EXTRA="MODEL.BACKBONE.NAME argtca-tiny-test INPUT.SIZE (32,32) TTA.N_VIEWS 4 USE_CUDA False
#   DATALOADER.NUM_WORKERS 2 TTA.VIEWS_FLOAT engine" ZOO_ARGS="--cpu --backbone argtca-tiny-test
#   --size 32 --n-views 4 --workers 2" ... identity fair fair_workers zoo
R=${R:-/tmp/r11}
source "$(dirname "$0")/device_common.sh"
for s in ${*:-identity official fair fair_workers zoo zoo_workers}; do case $s in
identity) fits 120 && PYTHONPATH=$ROOT:$SITE proc identity timeout 200 python3 \
    "$ROOT/benchmarks/probes/views_float_identity.py" --images 8 --loader-images 64 \
    --workers 15 ${IDENTITY_ARGS:-} ;;
official) fits 130 && official official "${N:-1024}" ;;
fair) fits 60 && LATE_WORKERS=1 argtca fair "${N:-1024}" cpu tpt ;;
fair_workers) fits 70 && LATE_WORKERS=1 argtca fair_workers "${N:-1024}" cpu tpt \
    TTA.VIEWS_OPS workers ;;
zoo) fits 100 && zoo zoo "${NZ:-512}" 200 TTA.VIEWS_OPS auto ;;
zoo_workers) fits 120 && zoo zoo_workers "${NZ:-512}" 220 TTA.VIEWS_OPS workers ;;
esac; done
date -u; echo "steps took $(( $(date +%s) - T0 )) s"
(cd "$R" && tar czf "$OUT/r11.tgz" *.json *.jsonl *.log 2>/dev/null)

#!/bin/bash
# The exact views' main process (issue 42, item 2) on a device host: where its ~10 ms an image goes
# (cProfile of the main process, then torch.profiler's GPU busy share), and whether fewer views
# workers leave it a core (a long TPT run on the Caltech101 stand-in at each worker count, through
# device_options.sh: each count in its own stand-in folder, since the worker count is not part of
# a run's identity; the bench prints steady, later-half and workers' img/s). Carry .whl.
# Usage (device tree root): OUT=$OUT LONG=1024 WORKERS="15 11 8" bash benchmarks/probes/device_main_process.sh
# (EXTRA: more KEY VALUE options of the bench runs; the CPU check of this script's plumbing:
# SPECS=tpt:host:2:5:TTA.N_VIEWS=4 LONG=8 WORKERS="1 2" EXTRA="TTA.N_VIEWS 4 USE_CUDA False")
source "$(dirname "$0")/device_wheels.sh"
PROBE_S=${PROBE_S:-150} ROWS=${ROWS:-40} bash "$ROOT/benchmarks/probes/device_trace.sh" \
  ${SPECS:-tpt:host:256:101 tpt:trace:96:101}
SETTINGS=()
for W in ${WORKERS:-15 11 8}; do SETTINGS+=("w$W=DATALOADER.NUM_WORKERS $W ${EXTRA:-}"); done
METHODS=tpt N=${LONG:-1024} BENCH_S=${BENCH_S:-180} \
  bash "$ROOT/benchmarks/probes/device_options.sh" "${SETTINGS[@]}"
echo "took $(( $(date +%s) - T0 )) s"

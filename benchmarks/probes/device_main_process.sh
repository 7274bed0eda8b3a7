#!/bin/bash
# The exact views' main process (issue 42, item 2) on a device host: where its ~10 ms an image goes
# (cProfile of the main process, then torch.profiler's GPU busy share), and whether fewer views
# workers leave it a core (a long TPT run on the Caltech101 stand-in at each worker count; the
# bench prints steady, later-half and workers' img/s). Carry .whl.
# Usage (device tree root): OUT=$OUT LONG=1024 WORKERS="15 11 8" bash benchmarks/probes/device_main_process.sh
# (EXTRA: more KEY VALUE options of the bench runs; the CPU check of this script's plumbing:
# SPECS=tpt:host:2:5:TTA.N_VIEWS=4 LONG=8 WORKERS=1 EXTRA="TTA.N_VIEWS 4 USE_CUDA False")
source "$(dirname "$0")/device_wheels.sh"
PROBE_S=${PROBE_S:-150} ROWS=${ROWS:-40} OUT=$OUT bash "$ROOT/benchmarks/probes/device_trace.sh" \
  ${SPECS:-tpt:host:256:101 tpt:trace:96:101}
for W in ${WORKERS:-15 11 8}; do
  echo "== tpt, ${LONG:-1024} images, $W workers ($(( $(date +%s) - T0 )) s)"
  timeout "${BENCH_S:-120}" python3 -m argtca.bench table1 --methods tpt --datasets caltech101 \
    --images "${LONG:-1024}" --warmup 16 --replace --out "$OUT/rates_w$W.json" \
    --data-dir /tmp/standins_long DATALOADER.NUM_WORKERS "$W" ${EXTRA:-} 2>&1 \
    | grep -v "No pretrained\|^WARNING\|^\[bench table1\] [0-9]" | tee "$OUT/long_w$W.log" | tail -4
done
echo "took $(( $(date +%s) - T0 )) s"

#!/bin/bash
# Issue 42 item 3 on a device host: the whole-table benchmark of the slow methods (RLCF, DynaPrompt,
# TTL) on the Caltech101 stand-in (100 classes), N images each, for each source tree given (e.g. a
# commit before and one after, unpacked with `git archive C | tar -x -C DIR`; each tree builds its
# own stand-in folder, so that no tree re-reads another's finished runs), after the GPU probe
# (profile_methods_gpu.py, K=101) of the methods in PROBE, once with each tree. Rate files and
# logs land in $OUT. The wheels argtca needs beside the image's torch are in .whl/ (device README).
# Usage (device tree root): OUT=$OUT N=48 bash benchmarks/probes/device_slow_methods.sh DIR ...
source "$(dirname "$0")/device_wheels.sh"
export PYTHONPATH=$SITE   # each tree given puts itself first
METHODS=${METHODS:-rlcf,dynaprompt,ttl}
python3 -m compileall -q -j 16 "$@" > /dev/null 2>&1
for DIR in "$@"; do
  for M in ${PROBE:-}; do
    echo "== $(basename "$DIR")" >> "$OUT/probe.log"
    (cd "$DIR" && PYTHONPATH=$PWD:$SITE timeout "${PROBE_S:-120}" python3 \
       "$ROOT/benchmarks/probes/profile_methods_gpu.py" "$M" --classes 101 --images "${N:-48}" --mode "${MODE:-timers}" \
       2>&1 | grep -v "No pretrained" | tee -a "$OUT/probe.log")
  done
done
LAST=${@: -1}
for DIR in "$@"; do
  TAG=$(basename "$DIR")
  # LAST_OPTS: KEY VALUE overrides for the last tree's runs only (a key the others lack)
  EXTRA=(); [ "$DIR" = "$LAST" ] && EXTRA=(${LAST_OPTS:-})
  (cd "$DIR" && PYTHONPATH=$PWD:$SITE timeout "${BENCH_S:-240}" python3 -m argtca.bench table1 \
     --methods "$METHODS" --datasets caltech101 --images "${N:-48}" --warmup "${WARMUP:-16}" \
     --commit "$TAG" --replace --out "$OUT/rates_$TAG.json" --data-dir "/tmp/standins_$TAG" \
     "${EXTRA[@]}" 2>&1 | grep -v "No pretrained" | tee "$OUT/bench_$TAG.log" | tail -12)
  echo "$TAG took $(( $(date +%s) - T0 )) s"
done
echo "took $(( $(date +%s) - T0 )) s"; cat /proc/loadavg

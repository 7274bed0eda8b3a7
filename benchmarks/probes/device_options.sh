#!/bin/bash
# One tree, several settings, on a device host: the CUDA tests in TESTS (pytest node ids or
# files, optional), then the whole-table benchmark of METHODS on the Caltech101 stand-in, N images
# each, once per LABEL[:METHODS]=OVERRIDES argument (trailing KEY VALUE pairs of argtca.run; each in its own
# stand-in folder, so that no setting re-reads another's finished runs: tuning keys are not part
# of a run's identity). Rate files and logs land in $OUT.
# Usage (device tree root):
#   OUT=$OUT METHODS=rlcf,tpt N=64 TESTS=tests/engine/test_text_graph_steps.py \
#     bash benchmarks/probes/device_options.sh off="TTA.FAST.TEXT_GRAPH off" on="TTA.FAST.TEXT_GRAPH on" \
#     jac:tpt="TTA.FAST.GRAD_MODE jacobian"
source "$(dirname "$0")/device_wheels.sh"
if [ -n "${TESTS:-}" ]; then
  timeout "${TESTS_S:-90}" python3 -m pytest -q -p no:cacheprovider ${TESTS} -k cuda 2>&1 | tail -4
fi
for SPEC in "$@"; do
  HEAD=${SPEC%%=*}; OPTS=${SPEC#*=}; TAG=${HEAD%%:*}; M=${METHODS:-rlcf,tpt}
  [ "$HEAD" != "$TAG" ] && M=${HEAD#*:}
  timeout "${BENCH_S:-120}" python3 -m argtca.bench table1 --methods "$M" \
    --datasets caltech101 --images "${N:-64}" --warmup "${WARMUP:-16}" --commit "$TAG" --replace \
    --out "$OUT/rates_$TAG.json" --data-dir "/tmp/standins_$TAG" $OPTS 2>&1 \
    | grep -v "No pretrained\|AccumulateGrad\|run_backward" | tee "$OUT/bench_$TAG.log" | tail -8
  echo "$TAG took $(( $(date +%s) - T0 )) s"
done
cat /proc/loadavg

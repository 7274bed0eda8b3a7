#!/bin/bash
# Issue 42 on a device host, in one call: (1) the whole-table benchmark of METHODS on the
# Caltech101 stand-in for the trees BEFORE and AFTER (device_slow_methods.sh), (2) the demo's
# DynaPrompt records with TTA.FAST.TEXT_GRAPH off and on plus the graphed tower's CUDA test
# (device_text_graph.sh), (3) the GPU probes of the after tree (device_trace.sh specs in TRACE),
# (4) K=1000: the ImageNet stand-in's rates of the slow methods with the after tree.
# Usage (device tree root; trees from `git archive C argtca configs | tar -x -C build/h42/<name>`):
#   OUT=$OUT N=96 METHODS=tpt,dynaprompt bash benchmarks/probes/device_issue42.sh build/h42/before build/h42/after
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BEFORE=$1; AFTER=$2
PROBE="" bash "$HERE/device_slow_methods.sh" "$BEFORE" "$AFTER" 2>&1 | grep -v "^WARNING"
bash "$HERE/device_text_graph.sh" ${TRACE:-} 2>&1 | grep -v "^WARNING"
(cd "$AFTER" && PYTHONPATH=$PWD:${SITE:-/tmp/site} timeout "${K1000_S:-150}" python3 -m argtca.bench \
   table1 --methods "${K1000_METHODS:-dynaprompt,rlcf,ttl}" --datasets imagenet --images 24 \
   --warmup 8 --commit after --replace ${LAST_OPTS:-} --out "$OUT/rates_k1000.json" --data-dir /tmp/standins_k1000 \
   2>&1 | grep -v "No pretrained" | tail -8)

#!/bin/bash
# Issue 42's TPT targets in one device call, on the same synthetic K=101 files (set-up and clock:
# device_common.sh, the peers and wheels under $S): the official TPT script, argtca's TPT defaults
# of this tree and of the tree BEFORE (the code when the issue was filed), each on N images with
# the workers forked after the model build as the official script forks its own (LATE_WORKERS=1),
# and this tree's TPT with TTA.VIEWS_DEVICE gpu. Steps run in the order given, each skipped past
# DEADLINE seconds; the runs' timelines and logs land in $OUT/t42.tgz.
# Usage (device tree root; BEFORE from `git archive C argtca configs benchmarks | tar -x -C DIR`,
# S holding peers/TPT, azshue/TPT's files, and wheels/, the .whl/ wheels):
#   OUT=$OUT S=build/s42 DEADLINE=560 bash benchmarks/probes/device_issue42_targets.sh BEFORE \
#     official fair before gpu
R=${R:-/tmp/t42}
BEFORE=$(cd "$1" && pwd); shift
source "$(dirname "$0")/device_common.sh"
for s in "$@"; do case $s in
official) fits 130 && official official "${N:-1024}" ;;
fair) fits 60 && LATE_WORKERS=1 argtca fair "${N:-1024}" cpu tpt ;;
before) fits 60 && ROOT=$BEFORE LATE_WORKERS=1 argtca fair_before "${N:-1024}" cpu tpt ;;
gpu) fits 60 && argtca gpu "${N:-1024}" gpu tpt ;;
esac; done
date -u; echo "steps took $(( $(date +%s) - T0 )) s"; cat /proc/loadavg
(cd "$R" && tar czf "$OUT/t42.tgz" ./*.json ./*.jsonl ./*.log 2>/dev/null)

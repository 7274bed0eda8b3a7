#!/bin/bash
# Where a method's time goes on a device host (issue 42): profile_methods_gpu.py once per spec
# METHOD:MODE:IMAGES:CLASSES[:KEY=VALUE,...] (MODE timers, trace or host; the run's defaults
# otherwise), each log into $OUT/<method>_<mode>_<classes>.log and its last lines shown.
# Usage (device tree root): OUT=$OUT bash benchmarks/probes/device_trace.sh dynaprompt:trace:24:101 ...
source "$(dirname "$0")/device_wheels.sh"
for SPEC in "$@"; do
  IFS=: read -r M MODE N K KV <<< "$SPEC"
  OPTS=(); [ -n "${KV:-}" ] && for kv in ${KV//,/ }; do OPTS+=("${kv%%=*}" "${kv#*=}"); done
  LOG="$OUT/${M}_${MODE}_${K}.log"
  echo "== $SPEC ($(( $(date +%s) - T0 )) s)"
  timeout "${PROBE_S:-150}" python3 "$ROOT/benchmarks/probes/profile_methods_gpu.py" "$M" \
    --classes "$K" --images "$N" --mode "$MODE" --rows "${ROWS:-25}" "${OPTS[@]}" 2>&1 \
    | grep -v "No pretrained\|USDT\|SyncActivityProfiler" > "$LOG"
  head -c 2500 "$LOG" | head -8
done
echo "took $(( $(date +%s) - T0 )) s"

#!/bin/bash
# The whole-table benchmark on a device host (issue 42, item 1): python -m argtca.bench table1 at
# argtca's defaults (exact CPU views), ViT-B/16 at random weights, N images per (method, stand-in),
# the stand-ins in the order given (largest share of Table 1's images first), until DEADLINE
# seconds of the bench; the rate file and the log land in $OUT. The wheels argtca needs beside the
# image's torch (open_clip_torch ftfy wcwidth yacs submitit tqdm) are in .whl/ (device README).
# Usage (device tree root): OUT=$OUT COMMIT=<measured commit> N=48 DEADLINE=480 \
#   bash benchmarks/probes/device_table1.sh [dataset ...] [-- KEY VALUE ...]
source "$(dirname "$0")/device_wheels.sh"
DS=(); EXTRA=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; EXTRA=("$@"); break; fi
  DS+=("$1"); shift
done
[ ${#DS[@]} -gt 0 ] || DS=(food101 stanford_cars eurosat oxford_pets fgvc_aircraft ucf101 \
                           caltech101 oxford_flowers dtd)
python3 -m argtca.bench table1 --images "${N:-48}" --warmup "${WARMUP:-16}" \
  --deadline "${DEADLINE:-480}" --commit "${COMMIT:-unknown}" --replace \
  --datasets "${DS[@]}" --out "$OUT/rates.json" --data-dir /tmp/standins "${EXTRA[@]}" \
  2>&1 | tee "$OUT/table1.log" | grep -v "^WARNING:root:No pretrained"
echo "took $(( $(date +%s) - T0 )) s"

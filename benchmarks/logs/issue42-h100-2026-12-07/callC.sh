#!/bin/bash
# the pace of a long run against a short run's rates (TPT, 2048 images on the Caltech101 stand-in),
# then the whole-table benchmark at this tree's pace on the stand-ins given, until DEADLINE
source benchmarks/probes/device_wheels.sh
python3 -m argtca.bench table1 --methods tpt --datasets caltech101 --images ${LONG:-2048} \
  --warmup 16 --commit "$COMMIT" --replace --out "$OUT/rates_long.json" --data-dir /tmp/standins_long \
  2>&1 | grep -v "No pretrained\|^WARNING" | tee "$OUT/long.log" | grep "tpt on\|^tpt"
echo "long run done at $(( $(date +%s) - T0 )) s"
OUT=$OUT COMMIT=$COMMIT N=${N:-128} WARMUP=16 DEADLINE=${DEADLINE:-420} \
  bash benchmarks/probes/device_table1.sh "$@" 2>&1 | grep -v "^\[bench table1\] [0-9]"

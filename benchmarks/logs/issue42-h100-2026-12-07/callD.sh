#!/bin/bash
# TTL's fp16 prefix (CUDA tests; off/on on the Caltech101 stand-in), the fork fix's sequence (CUDA
# runs, then zero, on the Stanford Cars stand-in), then the whole table's missing rows and TTL's
# rows at this commit, merged into call C's rate file, until DEADLINE
source benchmarks/probes/device_wheels.sh
B() { python3 -m argtca.bench table1 --warmup 16 --commit "$COMMIT" "$@" 2>&1 | grep -v "No pretrained\|^WARNING\|^\[bench table1\] [0-9]"; }
timeout 90 python3 -m pytest -q -p no:cacheprovider tests/engine/test_ttl.py 2>&1 | tail -2
for H in False True; do
  B --methods ttl --datasets caltech101 --images 96 --replace --out "$OUT/rates_ttl_half_$H.json" \
    --data-dir /tmp/standins_ttl TTA.FAST.HALF_IMAGE $H | grep "ttl on"
done
echo "ttl done at $(( $(date +%s) - T0 )) s"
B --methods ttl,rlcf,zero --datasets stanford_cars --images 64 --replace --out "$OUT/rates_fork.json" \
  --data-dir /tmp/standins_fork | grep "on stanford\|error\|Error" | head -8
echo "fork check done at $(( $(date +%s) - T0 )) s"
cp build/h42/rates_c.json "$OUT/rates.json"
left() { echo $(( ${DEADLINE:-520} - ($(date +%s) - T0) )); }
B --methods zero,ecalp,onzeta,dynaprompt,argtca-div,argtca-disc,ttl --datasets stanford_cars \
  --images 128 --deadline $(( $(left) / 3 )) --out "$OUT/rates.json" --data-dir /tmp/standins | grep " on \|error"
B --methods ttl --datasets food101 caltech101 --images 128 --deadline $(( $(left) / 4 )) \
  --out "$OUT/rates.json" --data-dir /tmp/standins | grep " on \|error"
B --methods all --datasets eurosat --images 128 --deadline $(( $(left) - 20 )) --out "$OUT/rates.json" \
  --data-dir /tmp/standins | tail -32
echo "took $(( $(date +%s) - T0 )) s"; cat /proc/loadavg

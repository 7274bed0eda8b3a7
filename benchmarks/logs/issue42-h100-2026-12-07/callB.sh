#!/bin/bash
# the slow methods, the code when issue 42 was filed (a254501) against HEAD, in one call: the
# whole-table bench on the Caltech101 stand-in (96 images), GPU timers probes (32 images), then
# DynaPrompt at K=1000 with its peak memory
source benchmarks/probes/device_wheels.sh
for T in before head; do
  (cd build/h42/$T && PYTHONPATH=$PWD:$SITE timeout 170 python3 -m argtca.bench table1 \
     --methods dynaprompt,rlcf,ttl --datasets caltech101 --images 96 --warmup 16 \
     --commit $T --replace --out "$OUT/rates_$T.json" --data-dir "/tmp/standins_$T" 2>&1 \
     | grep -v "No pretrained\|^WARNING" | tee "$OUT/bench_$T.log" | tail -7)
  echo "$T bench done at $(( $(date +%s) - T0 )) s"
done
for M in dynaprompt rlcf ttl; do for T in before head; do
  echo "== $T" | tee -a "$OUT/probe.log"
  (cd build/h42/$T && PYTHONPATH=$PWD:$SITE timeout 60 python3 "$ROOT/benchmarks/probes/profile_methods_gpu.py" \
     $M --classes 101 --images 32 --mode timers 2>&1 | grep -v "No pretrained\|^WARNING" | tee -a "$OUT/probe.log")
done; done
echo "probes done at $(( $(date +%s) - T0 )) s"
(cd build/h42/head && PYTHONPATH=$PWD:$SITE timeout 120 python3 "$ROOT/benchmarks/probes/profile_methods_gpu.py" \
   dynaprompt --classes 1000 --images 16 --mode timers 2>&1 | grep -v "No pretrained\|^WARNING" | tee "$OUT/k1000_dynaprompt.log")
echo "took $(( $(date +%s) - T0 )) s"; cat /proc/loadavg

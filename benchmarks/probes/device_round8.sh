#!/bin/bash
# Round 8 (issue 32) in one device call, from the device tree's root (a copy of main = "before")
# with this worktree under .speed/ ("after"), the official TPT files under .speed/peers/TPT,
# TTA-VLM's under .speed/peers/ttavlm and wheels under .speed/wheels:
#   the official TPT script's loop, argtca's TPT defaults (1024 and 256 images), the AugMix zoo
#   methods (TPS, R-TPT, DMN-ZS), TTA-VLM's TPT / ZERO / MTA / TDA, then argtca's TPT before
#   and the zoo before while time is left (the call has 600 s; DEADLINE seconds of steps).
# Usage: OUT=$OUT bash .speed/benchmarks/probes/device_round8.sh [steps...]  (default: all)
set -u
export PYTHONUNBUFFERED=1
ROOT=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
T0=$(date +%s)
DEADLINE=${DEADLINE:-560}
pip install -q --no-index --no-deps --no-compile --target /tmp/site .speed/wheels/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site
STEPS=${*:-official tpt tpt256 zoo ttavlm tpt_before zoo_before}
nvidia-smi -L; nproc; date -u; python3 -c "import torch, PIL; print(torch.__version__, PIL.__version__)"
echo "before: $(git log --oneline -1 2>/dev/null)"; echo "after: $(cat .speed/COMMIT)"
python3 - <<PY
import sys; sys.path.insert(0, "$ROOT/.speed")
from argtca.bench.data import make_synthetic_coop
make_synthetic_coop("/tmp/tpt256/K101", 256, 101, seed=101)
PY
# fits SECONDS: true when that many seconds of the deadline are left
fits() { [ $(( $(date +%s) - T0 + $1 )) -le $DEADLINE ] || { echo "skip $s (time)"; false; }; }
zoo() {   # side methods n tag timeout
  local d=$ROOT; [ $1 = after ] && d=$ROOT/.speed
  (cd $d && PYTHONPATH=$d:/tmp/site timeout $5 python3 -m argtca.bench.zoo --methods $2 \
    --n-images $3 --views cpu --batch 16 --data-dir /tmp/z_$4_$1 --out $OUT/$4_$1.json) \
    2>&1 | grep -v Warning | tail -4 | sed "s/^/$4 $1: /"
}
for s in $STEPS; do case $s in
official)
  fits 60 && timeout 150 python3 .speed/benchmarks/peers/tpt_official.py --tpt-src .speed/peers/TPT \
     --data /tmp/tpt256/K101 --workers 15 --out $OUT/tpt_official.json 2>&1 \
     | grep -v Warning | tail -3 | tee $OUT/official.log ;;
tpt) fits 60 && zoo after tpt 1024 tpt 150 ;;
tpt256) fits 40 && zoo after tpt 256 tpt256 100 ;;
zoo) fits 120 && zoo after "tps rtpt dmn" 512 zoo 200 ;;
ttavlm)
  for am in tpt:24 zero:48 mta:48 tda:256; do
    a=${am%:*}; n=${am#*:}
    fits 45 && timeout 120 python3 .speed/benchmarks/peers/ttavlm.py --src .speed/peers/ttavlm \
      --data /tmp/tpt256/K101 --algorithm $a --n $n --workers 15 --out $OUT/ttavlm_$a.json 2>&1 \
      | grep -v Warning | tail -2 | sed "s/^/ttavlm $a: /"
  done ;;
tpt_before) fits 60 && zoo before tpt 1024 tpt 150 ;;
zoo_before) fits 120 && zoo before "tps rtpt dmn" 512 zoo 200 ;;
esac; done
date -u; echo "steps took $(( $(date +%s) - T0 )) s"

#!/bin/bash
# Round 7 (issue 32) in one device call, from the device tree's root (a copy of main = "before")
# with this worktree under .speed/ ("after"), the official TPT files under .speed/peers/TPT and
# wheels under .speed/wheels:
#   views profile (before/after, 1 and 15 processes), the official TPT script's loop, argtca's
#   TPT defaults before/after, the AugMix zoo methods (TPS, R-TPT, DMN-ZS) before/after.
# Usage: bash .speed/benchmarks/probes/device_round7.sh [steps...]  (default: all)
set -u
export PYTHONUNBUFFERED=1
ROOT=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
pip install -q --no-index --no-deps --no-compile --target /tmp/site .speed/wheels/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site
STEPS=${*:-official tpt profile zoo}
nvidia-smi -L; nproc; date -u; python3 -c "import torch; print(torch.__version__)"
echo "before: $(git log --oneline -1 2>/dev/null)"; echo "after: $(cat .speed/COMMIT)"
NT=${NT:-1024}; NZ=${NZ:-512}; NO=${NO:-256}
python3 - <<PY
import sys; sys.path.insert(0, "$ROOT/.speed")
from argtca.bench.data import make_synthetic_coop
make_synthetic_coop("/tmp/tpt$NO/K101", $NO, 101, seed=101)
PY
for s in $STEPS; do case $s in
profile)
  (cd .speed && PYTHONPATH=$PWD:/tmp/site timeout 150 python3 benchmarks/probes/views_profile.py \
     --images 4 --procs 1 15 --proc-images 3 --loader-images 0) 2>&1 | tee $OUT/profile.log ;;
official)
  timeout 200 python3 .speed/benchmarks/peers/tpt_official.py --tpt-src .speed/peers/TPT \
     --data /tmp/tpt$NO/K101 --workers 15 --out $OUT/tpt_official.json 2>&1 \
     | grep -v Warning | tail -8 | tee $OUT/official.log ;;
tpt)
  for side in before after; do
    d=$ROOT; [ $side = after ] && d=$ROOT/.speed
    (cd $d && PYTHONPATH=$d:/tmp/site timeout 200 python3 -m argtca.bench.zoo --methods tpt \
      --n-images $NT --views cpu --batch 16 --data-dir /tmp/zt_$side --out $OUT/tpt_$side.json) \
      2>&1 | tail -3 | sed "s/^/$side: /"
  done ;;
zoo)
  for side in before after; do
    d=$ROOT; [ $side = after ] && d=$ROOT/.speed
    (cd $d && PYTHONPATH=$d:/tmp/site timeout 200 python3 -m argtca.bench.zoo --methods tps rtpt dmn \
      --n-images $NZ --views cpu --batch 16 --data-dir /tmp/zz_$side --out $OUT/zoo_$side.json) \
      2>&1 | tail -4 | sed "s/^/$side: /"
  done ;;
esac; done
date -u

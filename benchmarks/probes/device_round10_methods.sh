#!/bin/bash
# The new methods' rates through the CLI, for table1 --plan's per-method GPU time: TPT, RLCF
# (its official reward model, ViT-L/14, at random weights), TTL and DynaPrompt, K=101, 64 views,
# GPU views (the plan's assumption), ViT-B/16 at random weights, NM images each, one GPU, users'
# order, through benchmarks/probes/e2e_timeline.py (round 9's clock). Wheels in .wheels/.
# Usage (device tree root): OUT=$OUT bash benchmarks/probes/device_round10_methods.sh [methods]
# A CPU smoke test: NM=8 EXTRA="MODEL.BACKBONE.NAME argtca-tiny-test INPUT.SIZE (32,32)
#   TTA.N_VIEWS 4 USE_CUDA False DATALOADER.NUM_WORKERS 0 TRAINER.RLCF.REWARD_BACKBONE
#   argtca-tiny-test" ... tpt rlcf
set -u
export PYTHONUNBUFFERED=1
ROOT=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
R=${R:-/tmp/r10m}; mkdir -p $R
SITE=${SITE:-/tmp/site}
NM=${NM:-512}
T0=$(date +%s)
pip install -q --no-index --no-deps --no-compile --target $SITE $ROOT/.wheels/*.whl 2>&1 | tail -2
export PYTHONPATH=$SITE
nvidia-smi -L 2>/dev/null; date -u
python3 -m compileall -q -j 16 $SITE $ROOT/argtca > /dev/null 2>&1
python3 - <<PY
import sys; sys.path.insert(0, "$ROOT")
from argtca.bench.data import make_synthetic_coop
make_synthetic_coop("$R/d$NM/K101", $NM, 101, seed=101)
PY
for m in ${*:-tpt rlcf ttl dynaprompt}; do
  extra=""
  [ $m = rlcf ] && extra="TRAINER.RLCF.REWARD_BACKBONE ViT-L/14 TRAINER.RLCF.REWARD_PRETRAINED random"
  a=$(date +%s.%N)
  T_SHELL=$a PYTHONPATH=$ROOT:$SITE timeout ${TMAX:-150} python3 \
    benchmarks/probes/e2e_timeline.py $R/$m.json -- --root $R/d$NM/K101 --seed 1 \
    --dataset-config-file configs/datasets/caltech101.yaml \
    --config-file configs/trainers/$m.yaml MODEL.BACKBONE.NAME ViT-B/16 \
    MODEL.PRETRAINED random TTA.VIEWS_DEVICE gpu TTA.AUGMIX on OUTPUT_ROOT $R/out_$m \
    VERBOSE False $extra ${EXTRA:-} > $R/$m.log 2>&1
  rc=$?; b=$(date +%s.%N)
  echo "{\"run\": \"$m\", \"rc\": $rc, \"process_s\": $(python3 -c "print(round($b - $a, 3))")}"
  grep -E "^E2E" $R/$m.log | cut -c1-500
  [ $rc = 0 ] || tail -6 $R/$m.log
done
date -u; echo "took $(( $(date +%s) - T0 )) s"
(cd $R && tar czf $OUT/r10m.tgz *.json *.log 2>/dev/null)

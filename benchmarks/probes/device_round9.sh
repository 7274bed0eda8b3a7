#!/bin/bash
# Round 9 (issue 32) in one device call, from the device tree's root (a copy of main = "before")
# with this worktree under .speed3/ ("after"), the official TPT files under .speed3/peers/TPT and
# wheels under .speed3/wheels. One clock definition on both sides: every process is started by
# this shell (T_SHELL) and timed to its exit; inside, the loop runs from the loader workers' fork
# to the last batch (benchmarks/probes/e2e_timeline.py, benchmarks/peers/tpt_official.py).
# Steps (each skipped past DEADLINE seconds):
#   official        the official TPT script, 1024 images
#   fair            argtca TPT defaults, after, workers forked where the official forks its own
#                   (LATE_WORKERS=1: after the model build), 1024 images
#   default         argtca TPT defaults, after, as users run it (workers before the build), 1024
#   before          the same on the device tree's own code (main), 1024
#   gpu_tpt gpu_tca the CLI with TTA.VIEWS_DEVICE gpu, 4096 images, the image tower's share
#   official256 fair256   the same pair on 256 images (round 8's count)
# Usage: OUT=$OUT bash .speed3/benchmarks/probes/device_round9.sh [steps...]  (default: all)
# A CPU smoke test of the plumbing: N=8 NG=8 NS=8 EXTRA="MODEL.BACKBONE.NAME argtca-tiny-test
#   INPUT.SIZE (32,32) TTA.N_VIEWS 4 USE_CUDA False DATALOADER.NUM_WORKERS 2" ... fair default
set -u
export PYTHONUNBUFFERED=1
ROOT=$PWD
S=$ROOT/.speed3
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
R=${R:-/tmp/r9}; mkdir -p $R
SITE=${SITE:-/tmp/site}
T0=$(date +%s)
DEADLINE=${DEADLINE:-540}
pip install -q --no-index --no-deps --no-compile --target $SITE $S/wheels/*.whl 2>&1 | tail -2
export PYTHONPATH=$SITE
STEPS=${*:-official fair default before gpu_tpt gpu_tca official256 fair256}
nvidia-smi -L; nproc; date -u; python3 -c "import torch, PIL; print(torch.__version__, PIL.__version__)"
echo "before: $(git log --oneline -1 2>/dev/null)"; echo "after: $(cat $S/COMMIT)"
# no run pays the bytecode compilation of its sources (the wheels were installed without it)
python3 -m compileall -q -j 16 $SITE $S/argtca $ROOT/argtca $S/peers/TPT > /dev/null 2>&1
python3 - <<PY
import sys; sys.path.insert(0, "$S")
from argtca.bench.data import make_synthetic_coop
for n in sorted({${N:-1024}, ${NS:-256}, ${NG:-4096}}):
    make_synthetic_coop(f"$R/d{n}/K101", n, 101, seed=101)
PY
echo "setup took $(( $(date +%s) - T0 )) s"
fits() { [ $(( $(date +%s) - T0 + $1 )) -le $DEADLINE ] || { echo "skip $s (time)"; false; }; }
# proc TAG CMD...: run CMD as its own process; the shell's seconds from start to exit
proc() {
  local tag=$1; shift
  local a=$(date +%s.%N)
  T_SHELL=$a "$@" > $R/$tag.log 2>&1
  local rc=$?
  local b=$(date +%s.%N)
  python3 -c "import json; print(json.dumps({'run': '$tag', 'rc': $rc, 'process_s': round($b - $a, 3)}))" \
    | tee -a $R/process.jsonl
  grep -E "^(E2E|TPT-OFFICIAL)|^ +[0-9]+\.[0-9]+ \+" $R/$tag.log | cut -c1-600
  [ $rc = 0 ] || tail -5 $R/$tag.log
}
argtca() {   # tag tree n views config extra...
  local tag=$1 tree=$2 n=$3 views=$4 cfg=$5; shift 5
  (cd $tree && PYTHONPATH=$tree:$SITE ARGTCA_ROOT=$tree proc $tag timeout 200 python3 \
    $S/benchmarks/probes/e2e_timeline.py $R/$tag.json -- --root $R/d$n/K101 --seed 1 \
    --dataset-config-file $tree/configs/datasets/caltech101.yaml \
    --config-file $tree/configs/trainers/$cfg.yaml MODEL.BACKBONE.NAME ViT-B/16 \
    MODEL.PRETRAINED random TTA.VIEWS_DEVICE $views TTA.AUGMIX on \
    DATASET.ATTRIBUTE_FILE $R/d$n/K101/attributes_101.json OUTPUT_ROOT $R/out_$tag \
    VERBOSE False "$@" ${EXTRA:-})
}
official() {  # tag n
  proc $1 timeout 220 python3 $S/benchmarks/peers/tpt_official.py --tpt-src $S/peers/TPT \
    --data $R/d$2/K101 --workers 15 --out $R/$1.json
}
for s in $STEPS; do case $s in
official) fits 130 && official official ${N:-1024} ;;
fair) fits 60 && LATE_WORKERS=1 argtca fair $S ${N:-1024} cpu tpt ;;
default) fits 60 && argtca default $S ${N:-1024} cpu tpt ;;
before) fits 60 && argtca before $ROOT ${N:-1024} cpu tpt ;;
gpu_tpt) fits 70 && TOWER=35.13 argtca gpu_tpt $S ${NG:-4096} gpu tpt ;;
gpu_tca) fits 80 && TOWER=35.13 argtca gpu_tca $S ${NG:-4096} gpu tca ;;
official256) fits 45 && official official256 ${NS:-256} ;;
fair256) fits 20 && LATE_WORKERS=1 argtca fair256 $S ${NS:-256} cpu tpt ;;
esac; done
date -u; echo "steps took $(( $(date +%s) - T0 )) s"
(cd $R && tar czf $OUT/r9.tgz *.json *.jsonl *.log)

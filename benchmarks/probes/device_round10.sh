#!/bin/bash
# Round 10 (issue 32 §1) from the device tree's root (a copy of main = "before") with this worktree
# under .speed10/ ("after": TTA.VIEWS_FLOAT auto = the exact CPU views' float stage on the GPU),
# the official TPT files under .speed10/peers/TPT, TTA-VLM's under .speed10/peers/ttavlm and
# wheels under .speed10/wheels (those of round 9, plus info_nce_pytorch for TTA-VLM's DPE).
# The clock is round 9's (benchmarks/rounds/round-9.md): the loop from the loader workers' fork to
# the last batch, every process started by this shell and timed to its exit.
# Steps (each skipped past DEADLINE seconds):
#   identity        views_float_identity.py on the GPU: the device float stage against ExactMixer
#                   on the CPU, 8 images x 63 AugMix views and 64 images through the loader (15
#                   workers, fp16): differing bytes (must be 0), and its cost per image
#   official        the official TPT script, 1024 images
#   fair            argtca TPT defaults, after, LATE_WORKERS=1 (workers forked after the build,
#                   where the official forks its own), 1024 images
#   fair_workers    the same with TTA.VIEWS_FLOAT workers (after's tree, float work in the workers)
#   before          the device tree's own code (main), LATE_WORKERS=1, 1024 images
#   zoo zoo_before  TPS, R-TPT, DMN-ZS defaults (AugMix views, 15 workers), 512 images, through
#                   python -m argtca.bench.zoo (round 7/8's numbers), after / before
#   ttavlm          TTA-VLM's TPS, R-TPT, DMN, BoostAdapter, DPE (benchmarks/peers/ttavlm.py)
#   profile         views_profile.py: one core by stage, 15 processes at once, the loader
# All steps exceed one 600 s call: e.g. call 1 `identity official fair before fair_workers`,
# call 2 `zoo zoo_before ttavlm profile`.
# Usage: OUT=$OUT DEADLINE=540 bash .speed10/benchmarks/probes/device_round10.sh [steps...]
# A CPU smoke test of the plumbing (no CUDA; ttavlm and official need it):
#   N=8 NS=8 NZ=8 IDENTITY_ARGS="--images 1 --views 4 --loader-images 3 --workers 1 --size 32"
#   EXTRA="MODEL.BACKBONE.NAME argtca-tiny-test INPUT.SIZE (32,32) TTA.N_VIEWS 4 USE_CUDA False
#   DATALOADER.NUM_WORKERS 2" AFTER_EXTRA="TTA.VIEWS_FLOAT engine" ZOO_ARGS="--cpu --backbone argtca-tiny-test
#   --size 32 --n-views 4 --workers 2" PROFILE_ARGS="--images 1 --procs 1 --proc-images 1
#   --loader-images 2" ... identity fair before zoo profile
set -u
export PYTHONUNBUFFERED=1
ROOT=$PWD
S=$ROOT/.speed10
# "before": the device tree itself unless BEFORE names another tree (e.g. an export of the commit
# before the change when the device tree already holds it)
BEFORE=${BEFORE:-$ROOT}
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
R=${R:-/tmp/r10}; mkdir -p $R
SITE=${SITE:-/tmp/site}
T0=$(date +%s)
DEADLINE=${DEADLINE:-540}
pip install -q --no-index --no-deps --no-compile --target $SITE $S/wheels/*.whl 2>&1 | tail -2
export PYTHONPATH=$SITE
STEPS=${*:-identity official fair before fair_workers zoo zoo_before ttavlm profile}
nvidia-smi -L 2>/dev/null; nproc; date -u
python3 -c "import torch, PIL; print(torch.__version__, PIL.__version__)"
echo "before: $(cat $BEFORE/COMMIT 2>/dev/null || git log --oneline -1 2>/dev/null)"; echo "after: $(cat $S/COMMIT 2>/dev/null)"
# no run pays the bytecode compilation of its sources (the wheels were installed without it)
python3 -m compileall -q -j 16 $SITE $S/argtca $ROOT/argtca $S/peers > /dev/null 2>&1
python3 - <<PY
import sys; sys.path.insert(0, "$S")
from argtca.bench.data import make_synthetic_coop
for n in sorted({${N:-1024}, ${NS:-256}}):
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
  grep -E "^(E2E|TPT-OFFICIAL|TTAVLM|IDENTITY|COST)|^ +[0-9]+\.[0-9]+ \+" $R/$tag.log | cut -c1-600
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
zoo() {   # tree tag n timeout: TPS, R-TPT, DMN-ZS defaults (CPU AugMix views)
  (cd $1 && PYTHONPATH=$1:$SITE proc $2 timeout $4 python3 -m argtca.bench.zoo \
    --methods tps rtpt dmn --n-images $3 --views cpu --batch 16 --data-dir $R/z_$2 \
    --out $R/$2.json ${ZOO_ARGS:-})
  python3 -c "import json; [print('ZOO $2', json.dumps(r)) for r in json.load(open('$R/$2.json'))['rows']]" \
    2>/dev/null || tail -3 $R/$2.log
}
for s in $STEPS; do case $s in
identity) fits 90 && (cd $S && PYTHONPATH=$S:$SITE proc identity timeout 150 python3 \
    benchmarks/probes/views_float_identity.py --images 8 --loader-images 64 --workers 15 \
    ${IDENTITY_ARGS:-}) ;;
official) fits 130 && official official ${N:-1024} ;;
fair) fits 60 && LATE_WORKERS=1 argtca fair $S ${N:-1024} cpu tpt ${AFTER_EXTRA:-} ;;
fair_workers) fits 60 && LATE_WORKERS=1 argtca fair_workers $S ${N:-1024} cpu tpt \
    TTA.VIEWS_FLOAT workers ;;
before) fits 60 && LATE_WORKERS=1 argtca before $BEFORE ${N:-1024} cpu tpt ;;
zoo) fits 120 && zoo $S zoo_after ${NZ:-512} 200 ;;
zoo_before) fits 140 && zoo $BEFORE zoo_before ${NZ:-512} 220 ;;
ttavlm)
  python3 -c "import info_nce" 2>/dev/null || echo "ttavlm: no info_nce (wheel info_nce_pytorch): DPE fails"
  for am in tps:32 rtpt:16 dmn:128 boostadapter:128 dpe:96; do
    a=${am%:*}; n=${am#*:}
    fits 60 && proc ttavlm_$a timeout 150 python3 $S/benchmarks/peers/ttavlm.py \
      --src $S/peers/ttavlm --data $R/d${NS:-256}/K101 --algorithm $a --n $n --workers 15 \
      --out $R/ttavlm_$a.json
  done ;;
profile) fits 150 && (cd $S && PYTHONPATH=$S:$SITE proc profile timeout 200 python3 \
    benchmarks/probes/views_profile.py --images 6 --procs 1 15 --proc-images 4 \
    --loader-images 48 ${PROFILE_ARGS:-}) && grep -E "^\||^stages|^loader|^consumer|^P proc" \
    $R/profile.log ;;
esac; done
date -u; echo "steps took $(( $(date +%s) - T0 )) s"
(cd $R && tar czf $OUT/r10.tgz *.json *.jsonl *.log 2>/dev/null)

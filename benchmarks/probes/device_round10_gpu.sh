#!/bin/bash
# Issue 32 §3 in one device call: the CLI with GPU views (TPT and TCA, K=101, 64 views, 4096
# images, ViT-B/16 at random weights) before (the device tree's root: main) and after (this
# worktree copied to .gpuloop/: TTA.FAST.CUDA_GRAPH and TTA.FAST.FOLD_QUICKGELU at their
# defaults), alternated, through benchmarks/probes/e2e_timeline.py (round 9's clock); the records
# of each pair compared image by image; then the engine alone (graph_check.py). Wheels for
# open_clip etc. in .wheels/.
# Usage (device tree root): OUT=$OUT bash .gpuloop/benchmarks/probes/device_round10_gpu.sh [steps]
#   steps: before_tpt after_tpt before_tca after_tca engine (default: all, in that order);
#   graph_tpt: after_tpt with TTA.FAST.CUDA_GRAPH on, compared with after_tpt
# A CPU smoke test: NG=16 EXTRA="MODEL.BACKBONE.NAME argtca-tiny-test INPUT.SIZE (32,32)
#   TTA.N_VIEWS 4 USE_CUDA False DATALOADER.NUM_WORKERS 0" ... before_tpt after_tpt
set -u
export PYTHONUNBUFFERED=1
ROOT=$PWD
S=$ROOT/.gpuloop
# "before": the device tree itself unless BEFORE names another tree
BEFORE=${BEFORE:-$ROOT}
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
R=${R:-/tmp/r10g}; mkdir -p $R
SITE=${SITE:-/tmp/site}
T0=$(date +%s)
DEADLINE=${DEADLINE:-400}
NG=${NG:-4096}
pip install -q --no-index --no-deps --no-compile --target $SITE $ROOT/.wheels/*.whl 2>&1 | tail -2
export PYTHONPATH=$SITE
STEPS=${*:-before_tpt after_tpt before_tca after_tca engine}
nvidia-smi -L 2>/dev/null; nproc; date -u
python3 -c "import torch; print(torch.__version__)"
echo "before: $(cat $BEFORE/COMMIT 2>/dev/null || git log --oneline -1 2>/dev/null)"; echo "after: $(cat $S/COMMIT 2>/dev/null)"
python3 -m compileall -q -j 16 $SITE $S/argtca $ROOT/argtca > /dev/null 2>&1
python3 - <<PY
import sys; sys.path.insert(0, "$S")
from argtca.bench.data import make_synthetic_coop
make_synthetic_coop("$R/d$NG/K101", $NG, 101, seed=101)
PY
echo "setup took $(( $(date +%s) - T0 )) s"
fits() { [ $(( $(date +%s) - T0 + $1 )) -le $DEADLINE ] || { echo "skip $s (time)"; false; }; }
argtca() {   # tag tree config extra...
  local tag=$1 tree=$2 cfg=$3; shift 3
  local a=$(date +%s.%N)
  (cd $tree && T_SHELL=$a PYTHONPATH=$tree:$SITE ARGTCA_ROOT=$tree TOWER=35.13 timeout 110 \
    python3 $S/benchmarks/probes/e2e_timeline.py $R/$tag.json -- --root $R/d$NG/K101 --seed 1 \
    --dataset-config-file $tree/configs/datasets/caltech101.yaml \
    --config-file $tree/configs/trainers/$cfg.yaml MODEL.BACKBONE.NAME ViT-B/16 \
    MODEL.PRETRAINED random TTA.VIEWS_DEVICE gpu TTA.AUGMIX on \
    DATASET.ATTRIBUTE_FILE $R/d$NG/K101/attributes_101.json OUTPUT_ROOT $R/out_$tag \
    VERBOSE False "$@" ${EXTRA:-}) > $R/$tag.log 2>&1
  local rc=$? b=$(date +%s.%N)
  echo "{\"run\": \"$tag\", \"rc\": $rc, \"process_s\": $(python3 -c "print(round($b - $a, 3))")}" \
    | tee -a $R/process.jsonl
  grep -E "^E2E|CUDA graph|^ +[0-9]+\.[0-9]+ \+" $R/$tag.log | cut -c1-700
  [ $rc = 0 ] || tail -8 $R/$tag.log
}
compare() {   # before after: the records image by image
  python3 - $R/out_$1 $R/out_$2 <<'PY'
import glob, json, sys
def load(d):
    f = sorted(glob.glob(d + "/**/records.jsonl", recursive=True))
    rows = [json.loads(l) for l in open(f[0])] if f else []
    return {r["index"]: r for r in rows}, f
a, fa = load(sys.argv[1]); b, fb = load(sys.argv[2])
common = sorted(set(a) & set(b))
if not common:
    print("COMPARE no common records", fa, fb); sys.exit()
same = sum(a[i]["pred"] == b[i]["pred"] for i in common)
dconf = max(abs(a[i]["conf"] - b[i]["conf"]) for i in common)
dpl = max(abs(a[i]["p_label"] - b[i]["p_label"]) for i in common)
acc = [sum(x[i]["pred"] == x[i]["label"] for i in common) / len(common) for x in (a, b)]
print("COMPARE " + json.dumps({"before": sys.argv[1], "after": sys.argv[2], "images": len(common),
      "pred_same": same, "max_abs_dconf": dconf, "max_abs_dp_label": dpl,
      "acc_before": round(acc[0], 4), "acc_after": round(acc[1], 4)}))
PY
}
for s in $STEPS; do case $s in
before_tpt) fits 70 && argtca before_tpt $BEFORE tpt ;;
after_tpt) fits 70 && argtca after_tpt $S tpt && compare before_tpt after_tpt ;;
graph_tpt) fits 70 && argtca graph_tpt $S tpt TTA.FAST.CUDA_GRAPH on && compare after_tpt graph_tpt ;;
before_tca) fits 75 && argtca before_tca $BEFORE tca ;;
after_tca) fits 75 && argtca after_tca $S tca && compare before_tca after_tca ;;
engine) fits 60 && (cd $S && PYTHONPATH=$S:$SITE timeout $(( DEADLINE - $(date +%s) + T0 - 5 )) \
  python3 benchmarks/probes/graph_check.py 24 $R/engine.json 2>&1 | grep -v Warning | tail -12) ;;
esac; done
date -u; echo "steps took $(( $(date +%s) - T0 )) s"
(cd $R && tar czf $OUT/r10g.tgz *.json *.jsonl *.log 2>/dev/null)

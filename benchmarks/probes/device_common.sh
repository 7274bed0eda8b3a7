# Shared set-up of the device probes (sourced, not run): the wheels into $SITE, bytecode compiled
# ahead, synthetic CoOp data, and the helpers every round times its runs with.
#   S      the tree holding peers/ (official TPT, TTA-VLM) and wheels/ (default: .speed10)
#   N NS   image counts of the synthetic data sets (default 1024 and 256)
#   R OUT SITE DEADLINE   work folder, results folder, wheels' target, seconds for all steps
# Round 9's clock (benchmarks/rounds/round-9.md): every process started by this shell and timed
# to its exit; argtca's loop from the loader workers' fork to the last batch.
set -u
export PYTHONUNBUFFERED=1
ROOT=$PWD
S=${S:-$ROOT/.speed10}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=${R:-/tmp/probe}; mkdir -p "$R"
SITE=${SITE:-/tmp/site}
T0=$(date +%s)
DEADLINE=${DEADLINE:-540}
pip install -q --no-index --no-deps --no-compile --target "$SITE" "$S"/wheels/*.whl 2>&1 | tail -2
export PYTHONPATH=$SITE
nvidia-smi -L 2>/dev/null; nproc; date -u
python3 -c "import torch, PIL; print(torch.__version__, PIL.__version__)"
echo "tree: $(git log --oneline -1 2>/dev/null || cat COMMIT 2>/dev/null)"
# no run pays the bytecode compilation of its sources (the wheels were installed without it)
python3 -m compileall -q -j 16 "$SITE" "$ROOT/argtca" "$S/peers" > /dev/null 2>&1
python3 - <<PY
import sys; sys.path.insert(0, "$ROOT")
from argtca.bench.data import make_synthetic_coop
for n in sorted({${N:-1024}, ${NS:-256}}):
    make_synthetic_coop(f"$R/d{n}/K101", n, 101, seed=101)
PY
echo "setup took $(( $(date +%s) - T0 )) s"
# fits SECONDS: whether the next step still fits before DEADLINE ($s names the step)
fits() { [ $(( $(date +%s) - T0 + $1 )) -le "$DEADLINE" ] || { echo "skip ${s:-step} (time)"; false; }; }
# proc TAG CMD...: run CMD as its own process; the shell's seconds from start to exit
proc() {
  local tag=$1; shift
  local a=$(date +%s.%N)
  T_SHELL=$a "$@" > "$R/$tag.log" 2>&1
  local rc=$?
  local b=$(date +%s.%N)
  python3 -c "import json; print(json.dumps({'run': '$tag', 'rc': $rc, 'process_s': round($b - $a, 3)}))" \
    | tee -a "$R/process.jsonl"
  grep -E "^(E2E|TPT-OFFICIAL|TTAVLM|IDENTITY|COST|ZOO)|^ +[0-9]+\.[0-9]+ \+" "$R/$tag.log" | cut -c1-600
  [ $rc = 0 ] || tail -5 "$R/$tag.log"
}
# argtca TAG N VIEWS CONFIG [KEY VALUE...]: python -m argtca.run of this tree under the e2e clock
argtca() {
  local tag=$1 n=$2 views=$3 cfg=$4; shift 4
  PYTHONPATH=$ROOT:$SITE ARGTCA_ROOT=$ROOT proc "$tag" timeout 200 python3 \
    "$ROOT/benchmarks/probes/e2e_timeline.py" "$R/$tag.json" -- --root "$R/d$n/K101" --seed 1 \
    --dataset-config-file "$ROOT/configs/datasets/caltech101.yaml" \
    --config-file "$ROOT/configs/trainers/$cfg.yaml" MODEL.BACKBONE.NAME ViT-B/16 \
    MODEL.PRETRAINED random TTA.VIEWS_DEVICE "$views" TTA.AUGMIX on \
    DATASET.ATTRIBUTE_FILE "$R/d$n/K101/attributes_101.json" OUTPUT_ROOT "$R/out_$tag" \
    VERBOSE False "$@" ${EXTRA:-}
}
# official TAG N: azshue/TPT's tpt_classification.py (benchmarks/peers/tpt_official.py), 15 workers
official() {
  proc "$1" timeout 220 python3 "$ROOT/benchmarks/peers/tpt_official.py" --tpt-src "$S/peers/TPT" \
    --data "$R/d$2/K101" --workers 15 --out "$R/$1.json"
}
# zoo TAG N TIMEOUT [KEY VALUE...]: TPS, R-TPT, DMN-ZS defaults (CPU AugMix views) through
# python -m argtca.bench.zoo
zoo() {
  local tag=$1 n=$2 limit=$3; shift 3
  PYTHONPATH=$ROOT:$SITE proc "$tag" timeout "$limit" python3 -m argtca.bench.zoo \
    --methods tps rtpt dmn --n-images "$n" --views cpu --batch 16 --data-dir "$R/z_$tag" \
    --out "$R/$tag.json" ${ZOO_ARGS:-} --opts "$@"
  python3 -c "import json; [print('ZOO $tag', json.dumps(r)) for r in json.load(open('$R/$tag.json'))['rows']]" \
    2>/dev/null || tail -3 "$R/$tag.log"
}

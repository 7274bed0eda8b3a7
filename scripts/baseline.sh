#!/usr/bin/env bash
# Usage: bash scripts/baseline.sh DATASET METHOD [KEY VALUE ...]
#   DATASET: a file stem of configs/datasets (caltech101, oxford_pets, ..., demo)
#   METHOD:  zeroshot | tpt | ctpt | otpt | atpt | tca | zeroshot_ts | tpt_ts (temperature scaling)
# Data root from $DATA (not needed for demo); seed from $SEED (default 1);
# output in $OUTPUT_DIR or output/<method>/<dataset>/seed<SEED>/.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  echo "usage: bash scripts/baseline.sh DATASET METHOD [KEY VALUE ...]" >&2; exit 2
fi
DATASET=$1; METHOD=$2; shift 2
case "$METHOD" in zeroshot|tpt|ctpt|otpt|atpt|tca|zeroshot_ts|tpt_ts) ;; *)
  echo "error: METHOD must be one of zeroshot tpt ctpt otpt atpt tca zeroshot_ts tpt_ts (got '$METHOD'); ArgTCA: scripts/argtca.sh" >&2; exit 2;;
esac
[ -f "configs/datasets/${DATASET}.yaml" ] || { echo "error: no configs/datasets/${DATASET}.yaml; available: $(ls configs/datasets | sed 's/.yaml//' | tr '\n' ' ')" >&2; exit 2; }
SEED=${SEED:-1}
OUT=${OUTPUT_DIR:-output/${METHOD}/${DATASET}/seed${SEED}}
PY=${PYTHON:-python}
exec "$PY" -m argtca.run --root "${DATA:-}" --seed "$SEED" \
  --dataset-config-file "configs/datasets/${DATASET}.yaml" \
  --config-file "configs/trainers/${METHOD}.yaml" \
  --output-dir "$OUT" "$@"

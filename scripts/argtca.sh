#!/usr/bin/env bash
# Usage: bash scripts/argtca.sh DATASET SELECTOR [KEY VALUE ...]
#   e.g. bash scripts/argtca.sh caltech101 div     (or: bash scripts/argtca.sh demo div)
# SELECTOR: tca | div | disc | random | joint | any registered selector.
# Data root from $DATA (not needed for demo); the attribute file: the TCA authors' file of the
# dataset, fetched once into $ARGTCA_CACHE/downloads (default ~/.cache/argtca), unless given as
# DATASET.ATTRIBUTE_FILE /path/file.json or $ATTRIBUTES;
# seed from $SEED (default 1); output in $OUTPUT_DIR or output/argtca/<dataset>/<selector>/seed<SEED>/.
# $PLUGINS: modules (or .py files) imported first, separated by spaces or commas, e.g. your own
# selector: PLUGINS=my_selectors bash scripts/argtca.sh demo my_rule (with my_selectors on PYTHONPATH).
# Phase 1 (the trained graph) is stored once in $ARGTCA_CACHE/phase1 (default ~/.cache/argtca) and
# reused by every selector and alpha/beta run on the same dataset.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  echo "usage: bash scripts/argtca.sh DATASET SELECTOR [KEY VALUE ...]" >&2; exit 2
fi
DATASET=$1; SELECTOR=$2; shift 2
[ -f "configs/datasets/${DATASET}.yaml" ] || { echo "error: no configs/datasets/${DATASET}.yaml; available: $(ls configs/datasets | sed 's/.yaml//' | tr '\n' ' ')" >&2; exit 2; }
if [ -z "${DATA:-}" ] && [ "$DATASET" != demo ]; then
  echo "error: \$DATA is not set: DATA=/path/to/datasets bash scripts/argtca.sh $DATASET $SELECTOR." \
    "Check a data root with: python -m argtca.data check $DATASET --root /path/to/datasets;" \
    "download: python -m argtca.data download $DATASET --root /path/to/datasets" \
    "(python -m argtca.data list shows every dataset, its layout and whether it downloads)" >&2; exit 2
fi
SEED=${SEED:-1}
OUT=${OUTPUT_DIR:-output/argtca/${DATASET}/${SELECTOR}/seed${SEED}}
EXTRA=()
if [ -n "${ATTRIBUTES:-}" ]; then EXTRA+=(DATASET.ATTRIBUTE_FILE "$ATTRIBUTES"); fi
PLUGIN_ARGS=()
PL=${PLUGINS:-}
for p in ${PL//,/ }; do   # a .py path relative to where the script was called from
  case "$p" in /*) ;; *) if [ -f "${OLDPWD:-.}/$p" ]; then p="${OLDPWD}/$p"; fi ;; esac
  PLUGIN_ARGS+=(--plugin "$p")
done
PY=${PYTHON:-python}
exec "$PY" -m argtca.run ${PLUGIN_ARGS[@]+"${PLUGIN_ARGS[@]}"} --root "${DATA:-}" --seed "$SEED" \
  --dataset-config-file "configs/datasets/${DATASET}.yaml" \
  --config-file configs/trainers/argtca.yaml \
  --output-dir "$OUT" TRAINER.ARGTCA.SELECTOR "$SELECTOR" ${EXTRA[@]+"${EXTRA[@]}"} "$@"

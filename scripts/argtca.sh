#!/usr/bin/env bash
# Usage: bash scripts/argtca.sh DATASET SELECTOR [KEY VALUE ...]
#   e.g. bash scripts/argtca.sh caltech101 div     (or: bash scripts/argtca.sh demo div)
# SELECTOR: tca | div | disc | random | joint | any registered selector.
# Data root from $DATA (not needed for demo); the attribute file: the TCA authors' file of the
# dataset, fetched once into $ARGTCA_CACHE/downloads (default ~/.cache/argtca), unless given as
# DATASET.ATTRIBUTE_FILE /path/file.json or $ATTRIBUTES; seed from $SEED (default 1).
# Output: $OUTPUT_DIR (a folder of other settings is refused), else python's default run folder
# under output/ of the folder you run the command in (printed at the end).
# $PLUGINS: modules (or .py files) imported first, separated by spaces or commas, e.g. your own
# selector: PLUGINS=my_selectors bash scripts/argtca.sh demo my_rule (my_selectors.py here or on
# PYTHONPATH). Relative paths ($DATA, $ATTRIBUTES, $OUTPUT_DIR, $PLUGINS, path values) are read
# from the folder you run the command in.
# Phase 1 (the trained graph) is stored once in $ARGTCA_CACHE/phase1 (default ~/.cache/argtca) and
# reused by every selector and alpha/beta run on the same dataset.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
if [ $# -lt 2 ]; then
  echo "usage: bash scripts/argtca.sh DATASET SELECTOR [KEY VALUE ...]" >&2; exit 2
fi
DATASET=$1; SELECTOR=$2; shift 2
check_dataset "$DATASET"
if [ -z "${DATA:-}" ] && [ "$DATASET" != demo ]; then
  echo "error: \$DATA is not set: DATA=/path/to/datasets bash scripts/argtca.sh $DATASET $SELECTOR." \
    "Check a data root with: python -m argtca.data check $DATASET --root /path/to/datasets;" \
    "download: python -m argtca.data download $DATASET --root /path/to/datasets" \
    "(python -m argtca.data list shows every dataset, its layout and whether it downloads)" >&2; exit 2
fi
if [ "$DATASET" != demo ]; then resolve_var DATA dir; fi
resolve_var ATTRIBUTES file
resolve_var OUTPUT_DIR out
abs_args "$@"
# --output-dir only when asked: python names the run folder by its settings otherwise
exec "$PY" -m argtca.run ${PLUGIN_ARGS[@]+"${PLUGIN_ARGS[@]}"} --root "${DATA:-}" \
  --seed "${SEED:-1}" --dataset-config-file "$DATASET_CONFIGS/${DATASET}.yaml" \
  --config-file "$ARGTCA_REPO/configs/trainers/argtca.yaml" \
  ${OUTPUT_DIR:+--output-dir "$OUTPUT_DIR"} TRAINER.ARGTCA.SELECTOR "$SELECTOR" \
  ${ATTRIBUTES:+DATASET.ATTRIBUTE_FILE "$ATTRIBUTES"} ${ARGS[@]+"${ARGS[@]}"}

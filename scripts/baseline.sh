#!/usr/bin/env bash
# Usage: bash scripts/baseline.sh DATASET METHOD [KEY VALUE ...]
#   DATASET: a file stem of configs/datasets (caltech101, oxford_pets, ..., demo)
#   METHOD:  a registered method's key but ArgTCA's (scripts/argtca.sh); the list, by family:
#            python -m argtca.trainers.catalogue --table; your own method: PLUGINS=my_method.py
# Data root from $DATA (not needed for demo); seed from $SEED (default 1).
# Output: $OUTPUT_DIR (a folder of other settings is refused), else python's default run folder
# under output/ of the folder you run the command in (printed at the end). Relative paths
# ($DATA, $OUTPUT_DIR, path values) are read from the folder you run the command in.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
if [ $# -lt 2 ]; then
  echo "usage: bash scripts/baseline.sh DATASET METHOD [KEY VALUE ...]" >&2; exit 2
fi
DATASET=$1; METHOD=$2; shift 2
# the registered methods, those of $PLUGINS too (docs/own-method.md)
METHODS="$("$PY" -m argtca.trainers.catalogue ${PLUGIN_ARGS[@]+"${PLUGIN_ARGS[@]}"} \
  --exclude-family argtca)"
case " $METHODS " in *" $METHOD "*) ;; *)
  echo "error: METHOD must be one of $METHODS (got '$METHOD'); ArgTCA: scripts/argtca.sh" >&2; exit 2;;
esac
# its YAML (configs/trainers/METHOD.yaml), or --trainer METHOD for a plug-in without one
mapfile -t METHOD_ARGS < <("$PY" -m argtca.trainers.catalogue \
  ${PLUGIN_ARGS[@]+"${PLUGIN_ARGS[@]}"} --run-args "$METHOD")
check_dataset "$DATASET"
if [ "$DATASET" != demo ]; then resolve_var DATA dir; fi
resolve_var OUTPUT_DIR out
abs_args "$@"
# --output-dir only when asked: python names the run folder by its settings otherwise
exec "$PY" -m argtca.run ${PLUGIN_ARGS[@]+"${PLUGIN_ARGS[@]}"} --root "${DATA:-}" \
  --seed "${SEED:-1}" --dataset-config-file "$DATASET_CONFIGS/${DATASET}.yaml" "${METHOD_ARGS[@]}" \
  ${OUTPUT_DIR:+--output-dir "$OUTPUT_DIR"} ${ARGS[@]+"${ARGS[@]}"}

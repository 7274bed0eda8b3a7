#!/usr/bin/env bash
# The attributes tca, div and disc choose, side by side (the paper's attribute-comparison table).
#
#   bash scripts/select_attributes.sh DATASET [--class NAME]... [--num-classes N]
#                                     [--selectors tca,div,disc] [--plugin MODULE]... [KEY VALUE ...]
#
# DATASET: a file of configs/datasets (caltech101, oxford_pets, ...). KEY VALUE: config overrides,
# after the flags. Attribute file from $ATTRIBUTES or DATASET.ATTRIBUTE_FILE; with $DATA (data root)
# the dataset's class names are used, otherwise the attribute file's keys. $PLUGINS (space/comma
# separated) or --plugin: your own selector modules. Reads the Phase-1 store of scripts/argtca.sh.
# Relative paths are read from the folder you run the command in. Example:
#   ATTRIBUTES=/path/Caltech101_2_V.json bash scripts/select_attributes.sh caltech101 \
#       --class leopard --class face MODEL.PRETRAINED /path/ViT-B-16.pt
set -euo pipefail
if [ $# -lt 1 ]; then
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
resolve_var DATA dir
resolve_var ATTRIBUTES file
DATASET=$1; shift
abs_args "$@"
exec "$PY" -m argtca.experiments.select_attributes "$DATASET" \
  ${PLUGIN_ARGS[@]+"${PLUGIN_ARGS[@]}"} ${ARGS[@]+"${ARGS[@]}"} \
  ${ATTRIBUTES:+DATASET.ATTRIBUTE_FILE "$ATTRIBUTES"} ${DATA:+DATASET.ROOT "$DATA"}

#!/usr/bin/env bash
# Table 3: the attributes TCA's rule, ArgTCA-Div and ArgTCA-Disc pick for chosen classes, per
# present dataset (default Caltech101, OxfordPets, DTD), from the Phase-1 store the runs use.
#
#   DATA=/path/to/data bash scripts/table3.sh [DATASET ...] [--class NAME | --class DATASET:NAME ...]
#       [--num-classes 5] [KEY VALUE ...]
#   bash scripts/table3.sh demo --class tomato --class lime
#
# Report: <out-root>/report/table3/table3.md. Environment: DATA, OPTS, PYTHON.
set -euo pipefail
# Relative paths (--root, --out-root, --baseline-config, --write, $DATA, $OUT_ROOT, $PLUGINS, path
# values) are read from the folder you run the command in; the run folders and the report go to
# its output/ unless --out-root or $OUT_ROOT says otherwise.
. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
resolve_var DATA out
read_opts table3.sh
abs_args "$@"
exec "$PY" -m argtca.experiments table3 --out-root "$(abs_path "${OUT_ROOT:-output}")" \
  ${PLUGIN_ARGS[@]+"${PLUGIN_ARGS[@]}"} ${ARGS[@]+"${ARGS[@]}"} ${EXTRA[@]+"${EXTRA[@]}"}

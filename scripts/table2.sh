#!/usr/bin/env bash
# Table 2 (ablations): full / zero edges / raw EOS / random selection, for ArgTCA-Div and -Disc,
# on Caltech101, OxfordPets and DTD by default (the present ones). Each run in its experiment
# folder <out-root>/argtca/<dataset>/<hash8>/seed<N>, the same as scripts/table1.sh's (the "full"
# runs are Table 1's ArgTCA runs; scripts/ablation.sh names its own folders), and the same
# Phase-1 store: the full graph and the zero-edge graph are each trained once per dataset.
#
#   DATA=/path/to/data bash scripts/table2.sh [DATASET ...] [--seeds 1] [--out-root output] [KEY VALUE ...]
#   bash scripts/table2.sh demo DATASET.NUM_IMAGES 8 TTA.N_VIEWS 16
#
# Report: <out-root>/report/table2-<hash of the runs>/ablation.md. Environment: DATA, OPTS, PYTHON.
set -euo pipefail
# Relative paths (--root, --out-root, --baseline-config, --write, $DATA, $OUT_ROOT, $PLUGINS, path
# values) are read from the folder you run the command in; the run folders and the report go to
# its output/ unless --out-root or $OUT_ROOT says otherwise.
. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
resolve_var DATA out
read_opts table2.sh
abs_args "$@"
exec "$PY" -m argtca.experiments table2 --out-root "$(abs_path "${OUT_ROOT:-output}")" \
  ${PLUGIN_ARGS[@]+"${PLUGIN_ARGS[@]}"} ${ARGS[@]+"${ARGS[@]}"} ${EXTRA[@]+"${EXTRA[@]}"}

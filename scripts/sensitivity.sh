#!/usr/bin/env bash
# The alpha/beta sensitivity figures: alpha in {5,10,20,40} at beta=35 and beta in
# {15,25,35,50} at alpha=10, for ArgTCA-Div and -Disc on Caltech101, OxfordPets and DTD by default
# (the present ones). Each run in its experiment folder <out-root>/argtca/<dataset>/<hash8>/seed<N>
# (scripts/sweep.sh, one dataset and selector at a time, names its own folders instead).
#
#   DATA=/path/to/data bash scripts/sensitivity.sh [DATASET ...] [--selectors div,disc]
#       [--alphas 5,10,20,40] [--betas 15,25,35,50] [--seeds 1] [KEY VALUE ...]
#   bash scripts/sensitivity.sh demo DATASET.NUM_IMAGES 8 TTA.N_VIEWS 16
#
# Report: <out-root>/report/sweep-<hash of the runs>/{sweep_alpha.png,sweep_beta.png,sweep.md}.
# Environment: DATA, OPTS, PYTHON.
set -euo pipefail
# Relative paths (--root, --out-root, --baseline-config, --write, $DATA, $OUT_ROOT, $PLUGINS, path
# values) are read from the folder you run the command in; the run folders and the report go to
# its output/ unless --out-root or $OUT_ROOT says otherwise.
. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
resolve_var DATA out
read_opts sensitivity.sh
abs_args "$@"
exec "$PY" -m argtca.experiments sweep --out-root "$(abs_path "${OUT_ROOT:-output}")" \
  ${PLUGIN_ARGS[@]+"${PLUGIN_ARGS[@]}"} ${ARGS[@]+"${ARGS[@]}"} ${EXTRA[@]+"${EXTRA[@]}"}

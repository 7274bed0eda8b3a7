#!/usr/bin/env bash
# The baselines' protocol: re-tune C-TPT's, O-TPT's and A-TPT's lambda and TCA's alpha/beta on
# the validation split of one dataset (default caltech101), report the whole grid and write the
# chosen values as a config Table 1 takes.
#
#   DATA=/path/to/data bash scripts/tune_baselines.sh [DATASET] [--tolerance 1.0]
#       [--grid TRAINER.CTPT.LAMBDA=25,50 ...] [--seeds 1] [--write tuned.yaml] [KEY VALUE ...]
#   DATA=/path/to/data bash scripts/table1.sh --baseline-config output/report/tune_caltech101_val/tuned.yaml
#
# Rule: per method, the lowest ECE among the settings whose accuracy is within --tolerance points
# of the best. Report: <out-root>/report/tune_<dataset>_val/{grid.md,grid.csv,tuned.yaml}.
# Environment: DATA, OPTS, PYTHON.
set -euo pipefail
# Relative paths (--root, --out-root, --baseline-config, --write, $DATA, $OUT_ROOT, $PLUGINS, path
# values) are read from the folder you run the command in; the run folders and the report go to
# its output/ unless --out-root or $OUT_ROOT says otherwise.
. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
resolve_var DATA out
read_opts tune_baselines.sh
abs_args "$@"
exec "$PY" -m argtca.experiments tune --out-root "$(abs_path "${OUT_ROOT:-output}")" \
  ${PLUGIN_ARGS[@]+"${PLUGIN_ARGS[@]}"} ${ARGS[@]+"${ARGS[@]}"} ${EXTRA[@]+"${EXTRA[@]}"}

#!/usr/bin/env bash
# ArgTCA ablation on one dataset, for the div and disc objectives: full / zero edges
# (TRAINER.ARGTCA.EDGES none) / raw EOS (TRAINER.ARGTCA.EMBEDDINGS raw) / random selection (run
# once: it does not depend on the objective, the table shows it under both columns).
# `python -m argtca.experiments table2` for one dataset and seed (several: scripts/table2.sh).
# The run folders are the ones every command shares,
# $OUT_ROOT/argtca/<dataset>/<hash of the settings>/seed<SEED>/ (the "full" runs are Table 1's and
# argtca.sh's ArgTCA runs): a finished run of the same settings is reused, an interrupted one
# resumes, other settings get their own folder. A run that fails does not stop the others.
# Table: $OUT_ROOT/report/table2-<hash of the runs>/ablation.md
#
#   bash scripts/ablation.sh DATASET [options of python -m argtca.experiments table2] [KEY VALUE ...]
#
# Environment: SEED (default 1), OPTS="KEY VALUE ..." (extra overrides), DATA, ATTRIBUTES,
#   PLUGINS, PYTHON, OUT_ROOT=output (relative paths: to the folder you run the command in).
set -euo pipefail
if [ "$#" -lt 1 ]; then
  echo "usage: [SEED=1] [OPTS=\"KEY VALUE ...\"] bash scripts/ablation.sh DATASET [KEY VALUE ...]" >&2
  exit 2
fi
. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
ds="$1"; shift
resolve_var DATA out
resolve_var ATTRIBUTES file
read_opts ablation.sh
abs_args "$@"
exec "$PY" -m argtca.experiments table2 "$ds" --seeds "${SEED:-1}" \
  --out-root "$(abs_path "${OUT_ROOT:-output}")" ${PLUGIN_ARGS[@]+"${PLUGIN_ARGS[@]}"} \
  ${ARGS[@]+"${ARGS[@]}"} ${EXTRA[@]+"${EXTRA[@]}"} \
  ${ATTRIBUTES:+DATASET.ATTRIBUTE_FILE "$ATTRIBUTES"}

#!/usr/bin/env bash
# Sensitivity of ArgTCA to alpha and beta on one dataset for one selector (the paper's
# sensitivity figures): alpha in {5,10,20,40} at beta=35, beta in {15,25,35,50} at alpha=10.
# `python -m argtca.experiments sweep` for one dataset and selector (several at once:
# scripts/sensitivity.sh). The run folders are the ones every command shares,
# $OUT_ROOT/argtca/<dataset>/<hash of the settings>/seed<SEED>/: a finished run of the same settings
# (from table1.sh, argtca.sh, ...) is reused, an interrupted one resumes, other settings get their
# own folder. A point that fails does not stop the others; the report marks it.
# Report: $OUT_ROOT/report/sweep-<hash of the runs>/{sweep_alpha.png,sweep_beta.png,sweep.md}.
#
#   bash scripts/sweep.sh DATASET SELECTOR [options of python -m argtca.experiments sweep] [KEY VALUE ...]
#
# Environment: SEED (default 1), OPTS="KEY VALUE ..." (extra overrides), DATA, ATTRIBUTES,
#   PLUGINS, PYTHON, ALPHAS="5 10 20 40", BETAS="15 25 35 50", FIXED_ALPHA=10, FIXED_BETA=35,
#   OUT_ROOT=output (relative paths: to the folder you run the command in).
set -euo pipefail
if [ "$#" -lt 2 ]; then
  echo "usage: [SEED=1] [OPTS=\"KEY VALUE ...\"] bash scripts/sweep.sh DATASET SELECTOR [KEY VALUE ...]" >&2
  exit 2
fi
. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
ds="$1"; sel="$2"; shift 2
resolve_var DATA out
resolve_var ATTRIBUTES file
read_opts sweep.sh
abs_args "$@"
exec "$PY" -m argtca.experiments sweep "$ds" --selectors "$sel" --seeds "${SEED:-1}" \
  --alphas "${ALPHAS:-5 10 20 40}" --betas "${BETAS:-15 25 35 50}" \
  --fixed-alpha "${FIXED_ALPHA:-10}" --fixed-beta "${FIXED_BETA:-35}" \
  --out-root "$(abs_path "${OUT_ROOT:-output}")" ${PLUGIN_ARGS[@]+"${PLUGIN_ARGS[@]}"} \
  ${ARGS[@]+"${ARGS[@]}"} ${EXTRA[@]+"${EXTRA[@]}"} \
  ${ATTRIBUTES:+DATASET.ATTRIBUTE_FILE "$ATTRIBUTES"}

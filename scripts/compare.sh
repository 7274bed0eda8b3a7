#!/usr/bin/env bash
# Run every method on each DATASET, then write the side-by-side report to
# $OUT_ROOT/report/<datasets joined by _>/: Table 1's command on these datasets, one seed and
# ArgTCA's selectors (python -m argtca.experiments table1), so both share run folders and behave
# the same: a finished run folder of the same settings is only re-read, an interrupted one
# resumes, and a failed run does not stop the others (the failures are listed at the end, exit 1).
#
#   bash scripts/compare.sh DATASET [DATASET ...] [KEY VALUE ...]
#
# Environment:
#   SEED=1                        seed of the runs
#   OPTS="KEY VALUE ..."          extra config overrides passed to every run
#   EXTRA_SELECTORS="random joint" ArgTCA selectors run besides div and disc
#   OUT_ROOT=output               folder of the run folders and of report/ (relative: to the folder
#                                 you run the command in)
#   DATA, PLUGINS, PYTHON         data root, your selector modules, interpreter
set -euo pipefail

if [ "$#" -lt 1 ]; then
  echo "usage: [SEED=1] [OPTS=\"KEY VALUE ...\"] [EXTRA_SELECTORS=\"random joint\"] bash scripts/compare.sh DATASET [DATASET ...]" >&2
  exit 2
fi
. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
read_opts compare.sh
# every method of Table 1 (ArgTCA with the paper's selectors div and disc), from the trainers'
# declarations (python -m argtca.trainers.catalogue)
methods="$("$PY" -m argtca.trainers.catalogue --set all --sep ,)"
for sel in ${EXTRA_SELECTORS:-}; do methods+=",argtca-$sel"; done
ROOT="$(abs_path "${OUT_ROOT:-output}")"
names=()
for a in "$@"; do
  case "$a" in -*|[A-Z]*.*) break ;; *) names+=("$a") ;; esac
done
name="$(IFS=_; echo "${names[*]}")"
abs_args "$@"
exec "$PY" -m argtca.experiments table1 ${ARGS[@]+"${ARGS[@]}"} --seeds "${SEED:-1}" \
  --methods "$methods" --out-root "$ROOT" --report-dir "$ROOT/report/$name" \
  ${PLUGIN_ARGS[@]+"${PLUGIN_ARGS[@]}"} ${EXTRA[@]+"${EXTRA[@]}"}

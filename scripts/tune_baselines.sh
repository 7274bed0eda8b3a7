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
# Paths given (--baseline-config, --write, --root, --out-root) are relative to where you call it
# from; the run folders default to the repository's output/ (shared with compare.sh and co.).
REPO="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
read -r -a EXTRA <<< "${OPTS:-}"
exec "${PYTHON:-python}" -m argtca.experiments tune --out-root "${OUT_ROOT:-$REPO/output}" "$@" ${EXTRA[@]+"${EXTRA[@]}"}

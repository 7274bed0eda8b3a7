#!/usr/bin/env bash
# The alpha/beta sensitivity figures: alpha in {5,10,20,40} at beta=35 and beta in
# {15,25,35,50} at alpha=10, for ArgTCA-Div and -Disc on Caltech101, OxfordPets and DTD by default
# (the present ones). Same run folders as scripts/sweep.sh (one dataset and selector at a time).
#
#   DATA=/path/to/data bash scripts/sensitivity.sh [DATASET ...] [--selectors div,disc]
#       [--alphas 5,10,20,40] [--betas 15,25,35,50] [--seeds 1] [KEY VALUE ...]
#   bash scripts/sensitivity.sh demo DATASET.NUM_IMAGES 8 TTA.N_VIEWS 8
#
# Report: <out-root>/report/sweep/{sweep_alpha.png,sweep_beta.png,sweep.md}.
# Environment: DATA, OPTS, PYTHON.
set -euo pipefail
# Paths given (--baseline-config, --write, --root, --out-root) are relative to where you call it
# from; the run folders default to the repository's output/ (shared with compare.sh and co.).
REPO="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
read -r -a EXTRA <<< "${OPTS:-}"
exec "${PYTHON:-python}" -m argtca.experiments sweep --out-root "${OUT_ROOT:-$REPO/output}" "$@" ${EXTRA[@]+"${EXTRA[@]}"}

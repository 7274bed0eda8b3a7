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
# Paths given (--baseline-config, --write, --root, --out-root) are relative to where you call it
# from; the run folders default to the repository's output/ (shared with compare.sh and co.).
REPO="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
read -r -a EXTRA <<< "${OPTS:-}"
exec "${PYTHON:-python}" -m argtca.experiments table3 --out-root "${OUT_ROOT:-$REPO/output}" "$@" ${EXTRA[@]+"${EXTRA[@]}"}

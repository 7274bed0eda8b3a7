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
cd "$(dirname "$0")/.."
read -r -a EXTRA <<< "${OPTS:-}"
exec "${PYTHON:-python}" -m argtca.experiments table3 "$@" ${EXTRA[@]+"${EXTRA[@]}"}

#!/usr/bin/env bash
# Table 2 (ablations): full / zero edges / raw EOS / random selection, for ArgTCA-Div and -Disc,
# on Caltech101, OxfordPets and DTD by default (the present ones). The same run folders as
# scripts/ablation.sh and scripts/table1.sh (the "full" runs are Table 1's ArgTCA runs), and the
# same Phase-1 store: the full graph and the zero-edge graph are each trained once per dataset.
#
#   DATA=/path/to/data bash scripts/table2.sh [DATASET ...] [--seeds 1] [--out-root output] [KEY VALUE ...]
#   bash scripts/table2.sh demo DATASET.NUM_IMAGES 8 TTA.N_VIEWS 8
#
# Report: <out-root>/report/table2/ablation.md. Environment: DATA, OPTS, PYTHON.
set -euo pipefail
# Paths given (--baseline-config, --write, --root, --out-root) are relative to where you call it
# from; the run folders default to the repository's output/ (shared with compare.sh and co.).
REPO="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
read -r -a EXTRA <<< "${OPTS:-}"
exec "${PYTHON:-python}" -m argtca.experiments table2 --out-root "${OUT_ROOT:-$REPO/output}" "$@" ${EXTRA[@]+"${EXTRA[@]}"}

#!/usr/bin/env bash
# ArgTCA ablation on one dataset, for the div and disc objectives:
#   full        the default run           output/argtca/<dataset>/<selector>/seed<SEED>/ (shared
#                                          with compare.sh)
#   zero edges  TRAINER.ARGTCA.EDGES none  output/ablation/<dataset>/edges_none_<selector>/seed<SEED>/
#   raw EOS     TRAINER.ARGTCA.EMBEDDINGS raw
#                                          output/ablation/<dataset>/raw_<selector>/seed<SEED>/
#   random      TRAINER.ARGTCA.SELECTOR random, run once: it does not depend on the objective,
#               the table shows it under both columns  output/argtca/<dataset>/random/seed<SEED>/
# Runs whose summary.json exists are skipped. Table: output/report/ablation_<dataset>/ablation.md
#
#   bash scripts/ablation.sh DATASET
#
# Environment: SEED (default 1), OPTS="KEY VALUE ..." (extra overrides), PYTHON.
set -euo pipefail

if [ "$#" -ne 1 ]; then
  echo "usage: [SEED=1] [OPTS=\"KEY VALUE ...\"] bash scripts/ablation.sh DATASET" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
ds="$1"

export SEED="${SEED:-1}"
PYTHON="${PYTHON:-python}"
read -r -a EXTRA <<< "${OPTS:-}"
if [ $(( ${#EXTRA[@]} % 2 )) -ne 0 ]; then
  echo "ablation.sh: OPTS must be KEY VALUE pairs, got: ${OPTS}" >&2
  exit 2
fi
unset OUTPUT_DIR

# run LABEL OUT_DIR OUTPUT_DIR_OVERRIDE SELECTOR [KEY VALUE ...]
run() {
  local label="$1" out="$2" override="$3" sel="$4"; shift 4
  if [ -f "$out/summary.json" ]; then
    echo "[ablation] skip $label: $out/summary.json exists"
    return 0
  fi
  echo "[ablation] $label -> $out"
  if [ -n "$override" ]; then
    OPTS="" OUTPUT_DIR="$override" bash scripts/argtca.sh "$ds" "$sel" ${EXTRA[@]+"${EXTRA[@]}"} "$@"
  else
    OPTS="" bash scripts/argtca.sh "$ds" "$sel" ${EXTRA[@]+"${EXTRA[@]}"} "$@"
  fi
  if [ ! -f "$out/summary.json" ]; then
    echo "[ablation] error: $label finished but $out/summary.json is missing" >&2
    exit 1
  fi
}

for sel in div disc; do
  run "full/$sel" "output/argtca/$ds/$sel/seed$SEED" "" "$sel"
  d="output/ablation/$ds/edges_none_$sel/seed$SEED"
  run "zero edges/$sel" "$d" "$d" "$sel" TRAINER.ARGTCA.EDGES none
  d="output/ablation/$ds/raw_$sel/seed$SEED"
  run "raw EOS/$sel" "$d" "$d" "$sel" TRAINER.ARGTCA.EMBEDDINGS raw
done
run "random" "output/argtca/$ds/random/seed$SEED" "" random

"$PYTHON" -m argtca.report "output/argtca/$ds/div" "output/argtca/$ds/disc" \
  "output/argtca/$ds/random" "output/ablation/$ds" \
  --out "output/report/ablation_$ds" --ablation

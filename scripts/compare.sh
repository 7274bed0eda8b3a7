#!/usr/bin/env bash
# Run every method on each DATASET, skipping runs whose summary.json exists, then write the
# side-by-side report to output/report/<datasets joined by _>/.
#
#   bash scripts/compare.sh DATASET [DATASET ...]
#
# Environment:
#   SEED=1                        seed of the runs (the report averages every seed it finds)
#   OPTS="KEY VALUE ..."          extra config overrides passed to every run
#   EXTRA_SELECTORS="random joint" ArgTCA selectors run besides div and disc
#   PYTHON=python                 interpreter for the report
# Output dirs (written by the called scripts): output/<method>/<dataset>/seed<SEED>/ and
# output/argtca/<dataset>/<selector>/seed<SEED>/.
set -euo pipefail

if [ "$#" -lt 1 ]; then
  echo "usage: [SEED=1] [OPTS=\"KEY VALUE ...\"] [EXTRA_SELECTORS=\"random joint\"] bash scripts/compare.sh DATASET [DATASET ...]" >&2
  exit 2
fi
cd "$(dirname "$0")/.."

export SEED="${SEED:-1}"
PYTHON="${PYTHON:-python}"
read -r -a EXTRA <<< "${OPTS:-}"
if [ $(( ${#EXTRA[@]} % 2 )) -ne 0 ]; then
  echo "compare.sh: OPTS must be KEY VALUE pairs, got: ${OPTS}" >&2
  exit 2
fi
read -r -a SELECTORS <<< "div disc ${EXTRA_SELECTORS:-}"
BASELINES=(zeroshot tpt ctpt otpt atpt tca)
unset OUTPUT_DIR  # the default output dirs are part of the contract here

# run LABEL OUT_DIR CMD...: skip when OUT_DIR/summary.json exists, check it afterwards
run() {
  local label="$1" out="$2"; shift 2
  if [ -f "$out/summary.json" ]; then
    echo "[compare] skip $label: $out/summary.json exists"
    return 0
  fi
  echo "[compare] $label -> $out"
  OPTS="" "$@"
  if [ ! -f "$out/summary.json" ]; then
    echo "[compare] error: $label finished but $out/summary.json is missing (did the run write elsewhere?)" >&2
    exit 1
  fi
}

dirs=()
for ds in "$@"; do
  for m in "${BASELINES[@]}"; do
    run "$m on $ds" "output/$m/$ds/seed$SEED" \
      bash scripts/baseline.sh "$ds" "$m" ${EXTRA[@]+"${EXTRA[@]}"}
    dirs+=("output/$m/$ds")
  done
  for sel in "${SELECTORS[@]}"; do
    run "argtca-$sel on $ds" "output/argtca/$ds/$sel/seed$SEED" \
      bash scripts/argtca.sh "$ds" "$sel" ${EXTRA[@]+"${EXTRA[@]}"}
    dirs+=("output/argtca/$ds/$sel")
  done
done

name="$(IFS=_; echo "$*")"
"$PYTHON" -m argtca.report "${dirs[@]}" --out "output/report/$name"

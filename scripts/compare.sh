#!/usr/bin/env bash
# Run every method on each DATASET, then write the side-by-side report to
# $OUT_ROOT/report/<datasets joined by _>/.
#
#   bash scripts/compare.sh DATASET [DATASET ...]
#
# Every run is started, finished or not: a finished run folder made with the same settings and
# test set is reused as it is (the run only re-reads its records), an interrupted one resumes, and
# one made with other settings (another OPTS, another split file, ...) is refused with the
# differing keys named -- delete it, or keep both by giving the new settings their own OUT_ROOT.
#
# Environment:
#   SEED=1                        seed of the runs (the report averages every seed it finds)
#   OPTS="KEY VALUE ..."          extra config overrides passed to every run
#   EXTRA_SELECTORS="random joint" ArgTCA selectors run besides div and disc
#   OUT_ROOT=output               folder of the run folders and of the report
#   PYTHON=python                 interpreter for the report
# Output dirs: $OUT_ROOT/<method>/<dataset>/seed<SEED>/ and
# $OUT_ROOT/argtca/<dataset>/<selector>/seed<SEED>/.
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
ROOT="${OUT_ROOT:-output}"

# run LABEL OUT_DIR CMD...: run (a finished folder of the same settings is only re-read), check
run() {
  local label="$1" out="$2" rc=0; shift 2
  echo "[compare] $label -> $out"
  OPTS="" OUTPUT_DIR="$out" "$@" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "[compare] error: $label failed (exit $rc, message above); a folder made with other settings is never reused: delete $out or set OUT_ROOT to another folder" >&2
    exit "$rc"
  fi
  if [ ! -f "$out/summary.json" ]; then
    echo "[compare] error: $label finished but $out/summary.json is missing (did the run write elsewhere?)" >&2
    exit 1
  fi
}

dirs=()
for ds in "$@"; do
  for m in "${BASELINES[@]}"; do
    run "$m on $ds" "$ROOT/$m/$ds/seed$SEED" \
      bash scripts/baseline.sh "$ds" "$m" ${EXTRA[@]+"${EXTRA[@]}"}
    dirs+=("$ROOT/$m/$ds")
  done
  for sel in "${SELECTORS[@]}"; do
    run "argtca-$sel on $ds" "$ROOT/argtca/$ds/$sel/seed$SEED" \
      bash scripts/argtca.sh "$ds" "$sel" ${EXTRA[@]+"${EXTRA[@]}"}
    dirs+=("$ROOT/argtca/$ds/$sel")
  done
done

name="$(IFS=_; echo "$*")"
"$PYTHON" -m argtca.report "${dirs[@]}" --out "$ROOT/report/$name"

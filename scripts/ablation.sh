#!/usr/bin/env bash
# ArgTCA ablation on one dataset, for the div and disc objectives:
#   full        the default run           $OUT_ROOT/argtca/<dataset>/<selector>/seed<SEED>/ (not
#               argtca.sh's or compare.sh's experiment folder argtca/<dataset>/<hash8>/: a report
#               over both trees stops, naming the two folders of one run)
#   zero edges  TRAINER.ARGTCA.EDGES none  $OUT_ROOT/ablation/<dataset>/edges_none_<selector>/seed<SEED>/
#   raw EOS     TRAINER.ARGTCA.EMBEDDINGS raw
#                                          $OUT_ROOT/ablation/<dataset>/raw_<selector>/seed<SEED>/
#   random      TRAINER.ARGTCA.SELECTOR random, run once: it does not depend on the objective,
#               the table shows it under both columns  $OUT_ROOT/argtca/<dataset>/random/seed<SEED>/
# Every run is started: a finished folder of the same settings is reused as it is, an interrupted
# one resumes, one made with other settings is refused naming the differing keys.
# Table: $OUT_ROOT/report/ablation_<dataset>/ablation.md
#
#   bash scripts/ablation.sh DATASET
# (Table 2 over several datasets and seeds in one report: bash scripts/table2.sh)
#
# Environment: SEED (default 1), OPTS="KEY VALUE ..." (extra overrides), PYTHON, OUT_ROOT=output
#   (relative: to the folder you run the command in).
set -euo pipefail

if [ "$#" -ne 1 ]; then
  echo "usage: [SEED=1] [OPTS=\"KEY VALUE ...\"] bash scripts/ablation.sh DATASET" >&2
  exit 2
fi
. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
ds="$1"

export SEED="${SEED:-1}"
read_opts ablation.sh
ROOT="$(abs_path "${OUT_ROOT:-output}")"

# run LABEL OUT_DIR SELECTOR [KEY VALUE ...]
run() {
  local label="$1" out="$2" sel="$3" rc=0; shift 3
  echo "[ablation] $label -> $out"
  OPTS="" OUTPUT_DIR="$out" bash "$ARGTCA_REPO/scripts/argtca.sh" "$ds" "$sel" ${EXTRA[@]+"${EXTRA[@]}"} "$@" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "[ablation] error: $label failed (exit $rc, message above); a folder made with other settings is never reused: delete $out or set OUT_ROOT to another folder" >&2
    exit "$rc"
  fi
  if [ ! -f "$out/summary.json" ]; then
    echo "[ablation] error: $label finished but $out/summary.json is missing" >&2
    exit 1
  fi
}

for sel in div disc; do
  run "full/$sel" "$ROOT/argtca/$ds/$sel/seed$SEED" "$sel"
  run "zero edges/$sel" "$ROOT/ablation/$ds/edges_none_$sel/seed$SEED" "$sel" TRAINER.ARGTCA.EDGES none
  run "raw EOS/$sel" "$ROOT/ablation/$ds/raw_$sel/seed$SEED" "$sel" TRAINER.ARGTCA.EMBEDDINGS raw
done
run "random" "$ROOT/argtca/$ds/random/seed$SEED" random

"$PY" -m argtca.report "$ROOT/argtca/$ds/div" "$ROOT/argtca/$ds/disc" \
  "$ROOT/argtca/$ds/random" "$ROOT/ablation/$ds" \
  --out "$ROOT/report/ablation_$ds" --ablation

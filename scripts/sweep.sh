#!/usr/bin/env bash
# Sensitivity of ArgTCA to alpha and beta (the paper's sensitivity figures):
#   alpha in {5,10,20,40} at beta=35, beta in {15,25,35,50} at alpha=10,
# runs in output/sweep/<dataset>/<selector>/a<alpha>_b<beta>/ (skipped when summary.json
# exists), then sweep_alpha.png, sweep_beta.png and sweep.md in
# output/report/sweep_<dataset>_<selector>/.
#
#   bash scripts/sweep.sh DATASET SELECTOR
#
# Environment: SEED (default 1), OPTS="KEY VALUE ..." (extra overrides), PYTHON,
#   ALPHAS="5 10 20 40", BETAS="15 25 35 50", FIXED_ALPHA=10, FIXED_BETA=35.
set -euo pipefail

if [ "$#" -ne 2 ]; then
  echo "usage: [SEED=1] [OPTS=\"KEY VALUE ...\"] bash scripts/sweep.sh DATASET SELECTOR" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
ds="$1"; sel="$2"

export SEED="${SEED:-1}"
PYTHON="${PYTHON:-python}"
read -r -a EXTRA <<< "${OPTS:-}"
if [ $(( ${#EXTRA[@]} % 2 )) -ne 0 ]; then
  echo "sweep.sh: OPTS must be KEY VALUE pairs, got: ${OPTS}" >&2
  exit 2
fi
read -r -a ALPHAS <<< "${ALPHAS:-5 10 20 40}"
read -r -a BETAS <<< "${BETAS:-15 25 35 50}"
FIXED_ALPHA="${FIXED_ALPHA:-10}"
FIXED_BETA="${FIXED_BETA:-35}"

# yacs refuses an int for a float key: pass 5 as 5.0
as_float() { case "$1" in *.*|*e*|*E*) echo "$1" ;; *) echo "$1.0" ;; esac; }

point() {
  local a="$1" b="$2"
  local out="output/sweep/$ds/$sel/a${a}_b${b}"
  if [ -f "$out/summary.json" ]; then
    echo "[sweep] skip alpha=$a beta=$b: $out/summary.json exists"
    return 0
  fi
  echo "[sweep] alpha=$a beta=$b -> $out"
  OPTS="" OUTPUT_DIR="$out" bash scripts/argtca.sh "$ds" "$sel" ${EXTRA[@]+"${EXTRA[@]}"} \
    TRAINER.ARGTCA.ALPHA "$(as_float "$a")" TRAINER.ARGTCA.BETA "$(as_float "$b")"
  if [ ! -f "$out/summary.json" ]; then
    echo "[sweep] error: $out/summary.json is missing (does scripts/argtca.sh honour OUTPUT_DIR?)" >&2
    exit 1
  fi
}

for a in "${ALPHAS[@]}"; do point "$a" "$FIXED_BETA"; done
for b in "${BETAS[@]}"; do point "$FIXED_ALPHA" "$b"; done

"$PYTHON" -m argtca.report "output/sweep/$ds/$sel" --out "output/report/sweep_${ds}_${sel}" --sweep

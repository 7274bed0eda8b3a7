#!/usr/bin/env bash
# Sensitivity of ArgTCA to alpha and beta (the paper's sensitivity figures):
#   alpha in {5,10,20,40} at beta=35, beta in {15,25,35,50} at alpha=10,
# runs in $OUT_ROOT/sweep/<dataset>/<selector>/a<alpha>_b<beta>/ (SEED other than 1:
# a<alpha>_b<beta>_seed<SEED>/), then sweep_alpha.png,
# sweep_beta.png and sweep.md in $OUT_ROOT/report/sweep_<dataset>_<selector>/.
# Every point is started: a finished folder of the same settings is reused as it is, an
# interrupted one resumes, one made with other settings is refused naming the differing keys.
#
#   bash scripts/sweep.sh DATASET SELECTOR
# (several datasets and both selectors at once: bash scripts/sensitivity.sh)
#
# Environment: SEED (default 1), OPTS="KEY VALUE ..." (extra overrides), PYTHON,
#   ALPHAS="5 10 20 40", BETAS="15 25 35 50", FIXED_ALPHA=10, FIXED_BETA=35,
#   OUT_ROOT=output (relative: to the folder you run the command in).
set -euo pipefail

if [ "$#" -ne 2 ]; then
  echo "usage: [SEED=1] [OPTS=\"KEY VALUE ...\"] bash scripts/sweep.sh DATASET SELECTOR" >&2
  exit 2
fi
. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
ds="$1"; sel="$2"

export SEED="${SEED:-1}"
read_opts sweep.sh
read -r -a ALPHAS <<< "${ALPHAS:-5 10 20 40}"
read -r -a BETAS <<< "${BETAS:-15 25 35 50}"
FIXED_ALPHA="${FIXED_ALPHA:-10}"
FIXED_BETA="${FIXED_BETA:-35}"

# yacs refuses an int for a float key: pass 5 as 5.0
as_float() { case "$1" in *.*|*e*|*E*) echo "$1" ;; *) echo "$1.0" ;; esac; }

ROOT="$(abs_path "${OUT_ROOT:-output}")"

point() {
  local a="$1" b="$2" rc=0
  local out="$ROOT/sweep/$ds/$sel/a${a}_b${b}"
  # another seed gets its own folder (the same as python -m argtca.experiments sweep)
  if [ "$SEED" != 1 ]; then out="${out}_seed${SEED}"; fi
  echo "[sweep] alpha=$a beta=$b -> $out"
  OPTS="" OUTPUT_DIR="$out" bash "$ARGTCA_REPO/scripts/argtca.sh" "$ds" "$sel" ${EXTRA[@]+"${EXTRA[@]}"} \
    TRAINER.ARGTCA.ALPHA "$(as_float "$a")" TRAINER.ARGTCA.BETA "$(as_float "$b")" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "[sweep] error: alpha=$a beta=$b failed (exit $rc, message above); a folder made with other settings is never reused: delete $out or set OUT_ROOT to another folder" >&2
    exit "$rc"
  fi
  if [ ! -f "$out/summary.json" ]; then
    echo "[sweep] error: $out/summary.json is missing (does scripts/argtca.sh honour OUTPUT_DIR?)" >&2
    exit 1
  fi
}

for a in "${ALPHAS[@]}"; do point "$a" "$FIXED_BETA"; done
for b in "${BETAS[@]}"; do point "$FIXED_ALPHA" "$b"; done

"$PY" -m argtca.report "$ROOT/sweep/$ds/$sel" --out "$ROOT/report/sweep_${ds}_${sel}" --sweep

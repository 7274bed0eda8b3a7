#!/usr/bin/env bash
# TPT's distribution-shift table (Shu et al., NeurIPS 2022, Table 1): every method of table1 on
# ImageNet and ImageNet-A, -V2, -R, -Sketch (-A and -R: their 200 classes, as TPT evaluates
# them), over seeds; the report adds shift.md with the published zero-shot CLIP and TPT rows
# beside ours, cited per row. It is table1 with these datasets: the same run folders, --plan,
# preflight, launcher and report (docs/workflows.md#distribution-shifts).
#
#   DATA=/path/to/data bash scripts/shift.sh [--plan] [--seeds 1,2,3] [--methods ...]
#       [--out-root output] [--dry-run] [KEY VALUE ...]
#
# Report: <out-root>/report/shift-<hash8>/ (printed at the end).
# Environment: DATA (data root), OPTS="KEY VALUE ..." (overrides for every run), PYTHON.
# All options: python -m argtca.experiments shift --help
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
resolve_var DATA out
read_opts shift.sh
abs_args "$@"
exec "$PY" -m argtca.experiments shift --out-root "$(abs_path "${OUT_ROOT:-output}")" \
  ${PLUGIN_ARGS[@]+"${PLUGIN_ARGS[@]}"} ${ARGS[@]+"${ARGS[@]}"} ${EXTRA[@]+"${EXTRA[@]}"}

#!/usr/bin/env bash
# Table 1: every method (ArgTCA as argtca-div and argtca-disc; --methods paper: the paper's rows;
# their names and families: python -m argtca.trainers.catalogue --table) on every dataset whose
# data is present, over seeds, then the report (Acc and ECE per dataset, the Average column over
# several datasets, one row per method with mean ± std over seeds, best and second marked;
# Markdown, CSV numbers, a booktabs LaTeX table). The online methods' stream order is shuffled by
# each seed.
#
#   DATA=/path/to/data bash scripts/table1.sh [DATASET ...] [--seeds 1,2,3] [--methods ...]
#       [--baseline-config tuned.yaml] [--out-root output] [--dry-run] [KEY VALUE ...]
#   bash scripts/table1.sh demo --seeds 1 DATASET.NUM_IMAGES 8 TTA.N_VIEWS 16   # embedded demo
#
# Without DATASET: the paper's nine datasets (--extended adds ImageNet and SUN397); absent ones are
# listed first (with what is missing) and the rest runs. Each dataset's attribute file is the TCA
# authors' (fetched once) unless DATASET.ATTRIBUTE_FILE is given. Each run has its own folder,
# <out-root>/<method>/<dataset>/<hash8>/seed<N> (hash8: the settings that change numbers); finished
# runs are only re-read. Before the first run, what the runs share (weights, data, attribute files,
# CUDA) is checked once: any problem stops everything with one message, nothing written.
# --plan: runs, images and estimated GPU time, absent datasets and finished runs first.
# Report: <out-root>/report/table1-<hash8>/ (printed at the end).
# Environment: DATA (data root), OPTS="KEY VALUE ..." (overrides for every run), PYTHON.
# All options: python -m argtca.experiments table1 --help
set -euo pipefail
# Relative paths (--root, --out-root, --baseline-config, --write, $DATA, $OUT_ROOT, $PLUGINS, path
# values) are read from the folder you run the command in; the run folders and the report go to
# its output/ unless --out-root or $OUT_ROOT says otherwise.
. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
resolve_var DATA out
read_opts table1.sh
abs_args "$@"
exec "$PY" -m argtca.experiments table1 --out-root "$(abs_path "${OUT_ROOT:-output}")" \
  ${PLUGIN_ARGS[@]+"${PLUGIN_ARGS[@]}"} ${ARGS[@]+"${ARGS[@]}"} ${EXTRA[@]+"${EXTRA[@]}"}

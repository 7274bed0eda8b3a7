#!/usr/bin/env bash
# Usage: bash scripts/bench.sh [--out bench.json] [more python -m argtca.bench flags]
# Throughput / agreement / memory benchmark of the test-time tuning engines on a synthetic
# Caltech101-layout JPEG dataset with random-weight ViT-B/16 (see BENCHMARKS.md).
# Defaults: try the fast engine's gradient modes and torch.compile, keep the fastest, profile one
# batch, measure the image tower (TFLOP/s, % of peak), then time reference vs fast engine with
# CPU (PIL and cpu-fast) and GPU views at K=101 and K=1000; --cli-gpus 1 2 adds the command line
# on 1 and 2 GPUs (torchrun) with the defaults.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
exec "$PY" -m argtca.bench --auto --compile on --input --profile --tower "$@"

#!/bin/bash
# TTA.FAST.TEXT_GRAPH on a device host (issue 42, item 3, DynaPrompt): the CUDA test of the graphed
# text tower, the demo's DynaPrompt records with the graphs off and on (compared line by line),
# then the GPU probes given as device_trace.sh specs. Logs into $OUT.
# Usage (device tree root): OUT=$OUT bash benchmarks/probes/device_text_graph.sh [SPEC ...]
source "$(dirname "$0")/device_wheels.sh"
python3 -m pytest --version > /dev/null 2>&1 || echo "no pytest here: the CUDA test is skipped"
python3 -m pytest --version > /dev/null 2>&1 && timeout 120 python3 -m pytest -q -p no:cacheprovider \
  tests/adapters/test_dynaprompt.py -k "graphed" 2>&1 | tail -4
for G in off on; do
  timeout 150 python3 -m argtca.run --dataset-config-file configs/datasets/demo.yaml \
    --config-file configs/trainers/dynaprompt.yaml --output-dir "/tmp/graph_$G" \
    DATASET.NUM_IMAGES "${DEMO_N:-96}" TTA.FAST.TEXT_GRAPH $G 2>&1 | grep -i "time\|acc\|error" | tail -3
done
python3 - <<'PY'
import glob, json
a, b = (sorted(glob.glob(f"/tmp/graph_{g}/**/records*.jsonl", recursive=True)) for g in ("off", "on"))
ra = [json.loads(l) for f in a for l in open(f)]
rb = [json.loads(l) for f in b for l in open(f)]
same = sum(x == y for x, y in zip(ra, rb))
print(f"demo DynaPrompt records, TEXT_GRAPH off vs on: {same} of {len(ra)} identical ({len(rb)} on)")
PY
[ $# -gt 0 ] && bash "$(dirname "$0")/device_trace.sh" "$@"
echo "took $(( $(date +%s) - T0 )) s"

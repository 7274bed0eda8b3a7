# Sourced (not run) by the issue-42 device probes: the wheels argtca needs beside the device
# image's torch (open_clip_torch ftfy wcwidth yacs submitit tqdm, in .whl/: device README) into
# $SITE, PYTHONPATH set to the tree and $SITE, the machine said, and the sources byte-compiled
# ahead so that no timed run pays it. Sets ROOT OUT SITE T0. A probe that runs another probe
# (device_issue42.sh, device_main_process.sh) does the install and compilation once: the child
# finds them done for its SITE and tree (ARGTCA_WHEELS_READY, exported).
set -u
export PYTHONUNBUFFERED=1
ROOT=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SITE=${SITE:-/tmp/site}
T0=$(date +%s)
export PYTHONPATH=$ROOT:$SITE
if [ "${ARGTCA_WHEELS_READY:-}" != "$SITE $ROOT" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$ROOT"/.whl/*.whl 2>&1 | tail -2
  nvidia-smi -L 2>/dev/null; nproc; date -u; cat /proc/loadavg
  python3 -c "import torch, PIL; print('torch', torch.__version__, 'Pillow', PIL.__version__)"
  python3 -m compileall -q -j 16 "$SITE" "$ROOT/argtca" > /dev/null 2>&1
  echo "setup took $(( $(date +%s) - T0 )) s"
  export ARGTCA_WHEELS_READY="$SITE $ROOT"
fi

# Sourced by the user commands of scripts/ (not run by itself). Python runs in the folder the
# command was called from (nothing cds to the repository), so a relative path means what the user
# sees and the default output/ is the caller's; paths the user gives are made absolute here so
# that every message names the folder they were read from.
ARGTCA_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CALLER_DIR="$PWD"
# this checkout's argtca whatever else is installed, and not the caller's folder first on
# sys.path (a random.py or yaml.py there would shadow what the library imports)
export PYTHONPATH="$ARGTCA_REPO${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONSAFEPATH=1
PY="${PYTHON:-python}"
# the command the user typed (sourced before any shift: "$@" are still the script's arguments),
# with the variables these scripts read: every "run the same command again" line names it
# (argtca/utils/console.py user_command). A script called by another keeps the outer command.
if [ -z "${ARGTCA_COMMAND:-}" ]; then
  ARGTCA_COMMAND=""
  for _v in DATA OPTS PLUGINS SEED OUTPUT_DIR OUT_ROOT ATTRIBUTES EXTRA_SELECTORS; do
    if [ -n "${!_v:-}" ]; then ARGTCA_COMMAND+="$_v=$(printf '%q' "${!_v}") "; fi
  done
  ARGTCA_COMMAND+="bash $(printf '%q' "$0")"
  for _a in "$@"; do ARGTCA_COMMAND+=" $(printf '%q' "$_a")"; done
  export ARGTCA_COMMAND
  unset _v _a
fi
DATASET_CONFIGS="$ARGTCA_REPO/configs/datasets"
# config keys holding a path (argtca/config/defaults.py); MODEL.PRETRAINED only when it looks like one
PATH_KEYS=" OUTPUT_DIR DATASET.ROOT DATASET.ATTRIBUTE_FILE DATASET.IMAGEFOLDER.SPLIT_FILE \
TTA.CTX_CHECKPOINT "
# flags of python -m argtca.experiments taking a path
PATH_FLAGS=" --root --out-root --report-dir --baseline-config --write "

die() {
  echo "error: $*" >&2
  exit 2
}

# abs_path PATH: PATH made absolute against the caller's folder ("" and builtin:... stay)
abs_path() {
  local p="$1"
  case "$p" in
    ""|builtin:*|hf-hub:*) printf '%s' "$p" ;;
    "~") printf '%s' "$HOME" ;;
    "~/"*) printf '%s' "$HOME/${p#"~/"}" ;;
    /*) printf '%s' "$p" ;;
    *) while [ "${p#./}" != "$p" ]; do p="${p#./}"; done
       if [ -z "$p" ] || [ "$p" = . ]; then printf '%s' "$CALLER_DIR"
       else printf '%s' "$CALLER_DIR/$p"; fi ;;
  esac
}

# read_from PATH: for error lines, where a relative PATH was read from
read_from() {
  case "$1" in
    /*|"~"*) ;;
    *) printf ' (a relative path is read from the folder the command ran in, %s)' "$CALLER_DIR" ;;
  esac
}

# resolve_var NAME dir|file|out: $NAME, when set, made absolute; dir/file must exist
resolve_var() {
  local name="$1" kind="$2" v="${!1:-}" a
  case "$v" in ""|builtin:*) return 0 ;; esac
  a="$(abs_path "$v")"
  if [ "$kind" = dir ] && [ ! -d "$a" ]; then
    die "$name=$v: no such folder $a$(read_from "$v")"
  elif [ "$kind" = file ] && [ ! -f "$a" ]; then
    die "$name=$v: no such file $a$(read_from "$v")"
  fi
  printf -v "$name" '%s' "$a"
}

# $PLUGINS (modules or .py files, separated by spaces or commas) as --plugin arguments: a path is
# read from the caller's folder; a module is imported from PYTHONPATH or the caller's folder
PLUGIN_ARGS=()
_pl="${PLUGINS:-}"
for _p in ${_pl//,/ }; do
  case "$_p" in
    *.py|*/*) _a="$(abs_path "$_p")"
              [ -f "$_a" ] || die "PLUGINS: no such file $_a$(read_from "$_p")"
              _p="$_a" ;;
  esac
  PLUGIN_ARGS+=(--plugin "$_p")
done
unset _pl _p _a

# looks_like_path VALUE: MODEL.PRETRAINED is a tag (openai), hf-hub:..., builtin:... or a file
looks_like_path() {
  case "$1" in
    builtin:*|hf-hub:*|random) return 1 ;;
    */*|"~"*|*.pt|*.pth|*.bin|*.safetensors) return 0 ;;
  esac
  [ -e "$1" ]
}

# abs_args ARG...: ARGS = the arguments with the values of path keys and path flags made absolute
abs_args() {
  ARGS=()
  local prev="" a
  for a in "$@"; do
    case "$a" in
      --*=*) local flag="${a%%=*}"
             if [[ "$PATH_FLAGS" == *" $flag "* ]]; then a="$flag=$(abs_path "${a#*=}")"; fi ;;
      *) if [[ "$PATH_KEYS" == *" $prev "* || "$PATH_FLAGS" == *" $prev "* ]] \
              || { [ "$prev" = MODEL.PRETRAINED ] && looks_like_path "$a"; }; then
           a="$(abs_path "$a")"
           prev=""
           ARGS+=("$a")
           continue
         fi ;;
    esac
    prev="$a"
    ARGS+=("$a")
  done
}

# check_dataset NAME: configs/datasets/NAME.yaml exists
check_dataset() {
  [ -f "$DATASET_CONFIGS/$1.yaml" ] || die "no configs/datasets/$1.yaml; available:" \
    "$(cd "$DATASET_CONFIGS" && ls -- *.yaml | sed 's/\.yaml$//' | tr '\n' ' ')"
}

# read_opts NAME: $OPTS ("KEY VALUE ...") into the array EXTRA, refusing an odd count
read_opts() {
  read -r -a EXTRA <<< "${OPTS:-}"
  if [ $(( ${#EXTRA[@]} % 2 )) -ne 0 ]; then
    echo "$1: OPTS must be KEY VALUE pairs, got: ${OPTS}" >&2
    exit 2
  fi
  abs_args ${EXTRA[@]+"${EXTRA[@]}"}
  EXTRA=(${ARGS[@]+"${ARGS[@]}"})
}

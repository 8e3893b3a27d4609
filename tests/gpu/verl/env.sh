# Sourced by the device-side verl scripts (smoke.sh, tests/gpu/run.sh verl): where the carried
# wheels are installed and the environment vLLM/verl/Ray need on the offline GPU machine
# (/work/shared/docs/vllm-on-h100.md §4). Ray's workers and vLLM's engine process inherit it.
_VERL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
export VERL_SITE="${VERL_SITE:-/tmp/verl-site}"
# The working tree first (drkernel), then the carried wheels (they shadow the image's
# transformers 5.17 / tokenizers 0.23 with verl's 5.9 / 0.22), then whatever was set.
case ":${PYTHONPATH:-}:" in *":$VERL_SITE:"*) ;; *) export PYTHONPATH="$_VERL_ROOT:$VERL_SITE${PYTHONPATH:+:$PYTHONPATH}" ;; esac
export PATH="$VERL_SITE/bin:$PATH"
export PYTHONUNBUFFERED=1
# FlashInfer is not carried: without this the v1 Sampler imports its FlashInfer backend and fails.
export VLLM_USE_FLASHINFER_SAMPLER=0
export VLLM_ENABLE_V1_MULTIPROCESSING=1
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 RAY_USAGE_STATS_ENABLED=0
# `ray status` and friends without Ray's token file.
export RAY_AUTH_MODE=disabled
# No internet: never wait on the Hub.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false
# Bytecode from tests/gpu/pycache.sh's prefix (install.sh builds it): the image writes none and ships
# torch without any, so each of verl's processes would compile torch's sources again.
if [ -z "${PYTHONPYCACHEPREFIX:-}" ] && [ -f "${DRKERNEL_PYCACHE:-/tmp/drkernel-pycache}/.complete" ]; then
  export PYTHONPYCACHEPREFIX="${DRKERNEL_PYCACHE:-/tmp/drkernel-pycache}"
fi
# drkernel's verl plugin comes through its entry point (install.sh writes drkernel.egg-info into
# $VERL_SITE); without that file, through verl's module list instead.
if ! ls "$VERL_SITE"/drkernel*.egg-info >/dev/null 2>&1; then
  export VERL_USE_EXTERNAL_MODULES="${VERL_USE_EXTERNAL_MODULES:-drkernel.verl.plugin}"
fi
unset _VERL_ROOT

# verl_model PRESET [make_tiny.py args ...]: the stage's random model of that preset, built once per
# machine into $VERL_MODELS/PRESET (/tmp/verl-models) and reused; sets VERL_MODEL to the directory.
# Run from the repository root.
verl_model() {
  local preset="$1"; shift
  VERL_MODEL="${VERL_MODELS:-/tmp/verl-models}/$preset"
  if [ -f "$VERL_MODEL/config.json" ]; then
    echo "verl: model $VERL_MODEL (built earlier on this machine)"
    return 0
  fi
  "${PYTHON:-python3}" tests/gpu/verl/make_tiny.py --out "$VERL_MODEL" --preset "$preset" --suite envs/single_ops "$@" \
    2>&1 | grep -v -E "Writing model shards|UserWarning|warnings.warn" || { rm -rf "$VERL_MODEL"; return 1; }
}

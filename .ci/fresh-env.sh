# Sourced by .ci/run, and by tests/test_fresh_machine.py, which checks that every library of the
# test run resolves its folders inside the fresh one. `fresh_env DIR` points HOME, the XDG folders
# and the temporary folder into DIR: every cache, config and temporary file of the run defaults
# under one of them (Inductor's is $TMPDIR/torchinductor_$USER), so nothing an earlier run left can
# make CI pass where a fresh machine fails.
fresh_env() {
  local root=$1
  mkdir -p "$root/home" "$root/cache" "$root/config" "$root/data" "$root/tmp"
  export HOME="$root/home" XDG_CACHE_HOME="$root/cache" XDG_CONFIG_HOME="$root/config" \
    XDG_DATA_HOME="$root/data" TMPDIR="$root/tmp"
  # A machine's own setting of any of these would move its cache out of the fresh folder.
  unset TORCH_NEURONX_CACHE_DIR TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR TORCH_HOME TORCH_EXTENSIONS_DIR \
    HF_HOME HF_HUB_CACHE HF_DATASETS_CACHE HF_MODULES_CACHE TRANSFORMERS_CACHE HUGGINGFACE_HUB_CACHE \
    VLLM_CACHE_ROOT VLLM_CONFIG_ROOT MPLCONFIGDIR CCACHE_DIR PIP_CACHE_DIR
}

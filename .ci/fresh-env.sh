# Sourced by .ci/run, and by tests/test_fresh_machine.py, which checks that every library of the
# test run resolves its folders inside the fresh one. `fresh_env DIR` points every place a tool or
# library of the test run keeps state (caches, configs, temporary files) into DIR, so nothing an
# earlier run left can make CI pass where a fresh machine fails.
fresh_env() {
  local root=$1
  mkdir -p "$root/home" "$root/cache" "$root/config" "$root/data" "$root/tmp"
  export HOME="$root/home" XDG_CACHE_HOME="$root/cache" XDG_CONFIG_HOME="$root/config" \
    XDG_DATA_HOME="$root/data" TMPDIR="$root/tmp"
  # Each of these either defaults outside HOME (Inductor's is /tmp/torchinductor_$USER) or may be
  # set by the machine to a folder that outlives the run.
  export TORCH_NEURONX_CACHE_DIR="$root/cache/torch_neuronx" TORCHINDUCTOR_CACHE_DIR="$root/cache/torchinductor" \
    TRITON_CACHE_DIR="$root/cache/triton" TORCH_HOME="$root/cache/torch" \
    TORCH_EXTENSIONS_DIR="$root/cache/torch_extensions" HF_HOME="$root/cache/huggingface" \
    HF_HUB_CACHE="$root/cache/huggingface/hub" HF_DATASETS_CACHE="$root/cache/huggingface/datasets" \
    HF_MODULES_CACHE="$root/cache/huggingface/modules" VLLM_CACHE_ROOT="$root/cache/vllm" \
    VLLM_CONFIG_ROOT="$root/config/vllm" MPLCONFIGDIR="$root/config/matplotlib" \
    CCACHE_DIR="$root/cache/ccache" PIP_CACHE_DIR="$root/cache/pip"
  unset TRANSFORMERS_CACHE HUGGINGFACE_HUB_CACHE
}

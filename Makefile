# `make demo` and `make test` do all set-up on a fresh machine: system packages (root), a .venv
# with exact pins, the C++ build (incremental, ccache), then run.
VENV    := .venv
PY      := $(VENV)/bin/python
PIP     := $(VENV)/bin/pip
STAMP   := $(VENV)/.requirements-stamp
RT_BUILD := build/runtime-tests
RT_CMAKE := -G Ninja -DNEURONX_BUILD_EXTENSION=OFF -DNEURONX_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo

.PHONY: all sysdeps venv install lint runtime-tests test test-runtime test-runtime-sanitizers test-python demo bench bench-e2e bench-compile bench-collectives bench-nki nki-library torchtitan bench-cost-model bench-vllm bench-moe conformance hf-matrix hf-model-tests hf-model-tests-run upstream-tests clean

all: install

sysdeps:
	@if ! dpkg -s libgtest-dev >/dev/null 2>&1 || ! command -v ccache >/dev/null 2>&1; then \
	  echo "installing system packages (libgtest-dev, ccache)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libgtest-dev ccache >/dev/null; \
	fi

# vLLM's wheels declare CUDA-only dependencies: requirements-vllm.txt is it and the closure of
# what it imports, exact pins, installed without the resolver; requirements-hta.txt likewise (HTA
# declares jupyterlab, which it never imports).
$(STAMP): requirements.txt requirements-vllm.txt requirements-hta.txt
	python3 -m venv $(VENV)
	$(PIP) install -q --disable-pip-version-check -r requirements.txt
	$(PIP) install -q --disable-pip-version-check --no-deps -r requirements-vllm.txt
	$(PIP) install -q --disable-pip-version-check --no-deps -r requirements-hta.txt
	touch $(STAMP)

venv: $(STAMP)

install: sysdeps venv
	$(PIP) install -q --disable-pip-version-check --no-build-isolation --no-deps .

runtime-tests: sysdeps
	cmake -S . -B $(RT_BUILD) $(RT_CMAKE) >/dev/null
	cmake --build $(RT_BUILD)

test-runtime: runtime-tests
	$(RT_BUILD)/runtime_tests --gtest_brief=1

# The runtime's GoogleTest suite under AddressSanitizer + UndefinedBehaviorSanitizer, and under
# ThreadSanitizer (the queues' memory orders). The runtime catches SIGSEGV itself (its sanitizer
# mode), so ASan leaves that signal alone.
test-runtime-sanitizers: sysdeps
	cmake -S . -B build/runtime-asan $(RT_CMAKE) \
	  "-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" >/dev/null
	cmake --build build/runtime-asan
	ASAN_OPTIONS=handle_segv=0:detect_leaks=0 build/runtime-asan/runtime_tests --gtest_brief=1
	cmake -S . -B build/runtime-tsan $(RT_CMAKE) "-DCMAKE_CXX_FLAGS=-fsanitize=thread" >/dev/null
	cmake --build build/runtime-tsan
	TSAN_OPTIONS=halt_on_error=1 build/runtime-tsan/runtime_tests --gtest_brief=1

# ruff (pyproject.toml) for Python, clang-format (.clang-format) for C++; the compilers' warnings
# are on for every target (CMakeLists.txt).
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/clang-format --dry-run -Werror $$(git ls-files 'csrc/*.cpp' 'csrc/*.h' 'runtime/*.cpp' 'runtime/*.h')

# pytest-randomly runs the tests in a new random order each time (the seed is printed first):
# every test must pass alone and after any other; --randomly-seed=N replays an order. The whole
# suite runs and every failure is listed at the end (-rfE), with the 30 slowest tests (CI has 90
# minutes for all of it).
test-python: install
	@seed=$$(date +%s); echo "tests in random order: --randomly-seed=$$seed"; \
	$(VENV)/bin/pytest tests -q -rfE -p no:cacheprovider -p randomly --randomly-seed=$$seed --durations=30

# Every part runs even when an earlier one fails, and the failed ones are named last.
TEST_PARTS := lint test-runtime test-runtime-sanitizers test-python
test:
	@failed=; for part in $(TEST_PARTS); do $(MAKE) --no-print-directory $$part || failed="$$failed $$part"; done; \
	if [ -n "$$failed" ]; then echo "make test: failed:$$failed"; exit 1; fi

demo: install
	$(PY) -m torch_neuronx.demo

bench: install
	$(PY) benchmarks/eager.py
	$(PY) benchmarks/observer.py

bench-e2e: install
	$(PY) benchmarks/e2e.py

bench-compile: install
	$(PY) benchmarks/compile.py

bench-collectives: install
	$(PY) benchmarks/collectives.py
	$(PY) benchmarks/collectives_hosts.py

bench-vllm: install
	$(PY) benchmarks/vllm_serving.py

bench-moe: install
	$(PY) benchmarks/moe_layer.py

bench-cost-model: install
	$(PY) benchmarks/cost_model_vs_aws.py

bench-nki: install
	$(PY) benchmarks/nki.py

# AWS's nki-library kernels, imported from a checkout you give (nothing is fetched), against their
# PyTorch references: make nki-library NKILIB=/path/to/nki-library. Without one it says so and passes.
nki-library: install
	$(PY) tests/nki_library.py $(NKILIB)

# TorchTitan's Llama 3 debug model trained on neuron (1 process, FSDP 2, TP 2, compiled, each
# activation-checkpointing policy, a DCP save resumed) against the same runs on CPU/gloo, from a
# checkout you give (nothing is fetched; TorchTitan needs torchdata, tyro, spmd_types, tensorboard
# and triton): make torchtitan TITAN=/path/to/torchtitan. Without one it says how to get one and
# passes.
torchtitan: install
	$(PY) tests/torchtitan_run.py $(TITAN)

# The whole OpInfo database on neuron against CPU (long; progress on stderr). Report in
# conformance-report/; fails on a regression or a stale expected failure.
conformance: install
	$(PY) tests/conformance/harness.py --mode full --check --out conformance-report

# Every transformers CausalLM architecture on neuron against CPU (long); report in
# conformance-report/hf-matrix/. A sample of it runs in `make test`.
hf-matrix: install
	$(PY) tests/hf/matrix.py --out conformance-report/hf-matrix

# transformers' own model tests (tests/models/<family> of a transformers source checkout of the
# installed version, which this target never fetches) on neuron, with the device spec and pytest
# plugin of tests/hf/transformers_suite/. TRANSFORMERS_SRC=path is required (skipped without it);
# HF_FAMILIES picks the families, HF_TESTS_K a pytest -k expression. Slow tests stay out (they
# need RUN_SLOW=1, as in transformers' own CI), and so do integration tests (hub checkpoints).
TRANSFORMERS_SRC ?=
HF_FAMILIES ?= gpt2 bert whisper wav2vec2 t5 bart vit clip gemma2 phi3 qwen3
HF_TESTS_K ?= not Integration
hf-model-tests:
	@if [ -z "$(TRANSFORMERS_SRC)" ]; then \
	  echo "hf-model-tests: skipped: set TRANSFORMERS_SRC=/path/to/transformers (a source checkout of" \
	    "the installed version, e.g. git clone -b v$$($(PY) -c 'import transformers as t; print(t.__version__)')" \
	    "https://github.com/huggingface/transformers)"; \
	else $(MAKE) --no-print-directory hf-model-tests-run; fi

hf-model-tests-run: install
	cd tests/hf/transformers_suite && \
	  TRANSFORMERS_SRC=$(abspath $(TRANSFORMERS_SRC)) TRANSFORMERS_TEST_DEVICE=neuron \
	  TRANSFORMERS_TEST_DEVICE_SPEC=neuron_device_spec.py \
	  $(abspath $(PY)) -m pytest -q -rfE -p no:cacheprovider -p no:randomly -p neuron_transformers_plugin \
	    -o addopts= -k "$(HF_TESTS_K)" \
	    $(addprefix $(abspath $(TRANSFORMERS_SRC))/tests/models/,$(HF_FAMILIES))

# PyTorch's own device-generic suites (test_ops.py's TestCommon comparisons, test_modules.py's
# TestModule) on neuron, run where they lie (never copied here) with the neuron test base
# (src/torch_neuronx/testing). Long (about 26 minutes on 2 cores); fails on any failure or unexpected
# success. Figures in the README.
UPSTREAM := ../shared/upstream-tests
UPSTREAM_ENV = TORCH_TEST_DEVICES=$$($(abspath $(PY)) -c "import torch_neuronx.testing as t; print(t.TEST_BASE)") \
	PYTORCH_TESTING_DEVICE_ONLY_FOR=neuron
UPSTREAM_PYTEST = $(abspath $(PY)) -m pytest -q -p no:cacheprovider -p no:randomly -rfE
upstream-tests: install
	cd $(UPSTREAM) && $(UPSTREAM_ENV) $(UPSTREAM_PYTEST) test_ops.py \
	  -k "TestCommon and (test_compare_cpu or test_noncontiguous or test_out)"
	cd $(UPSTREAM) && $(UPSTREAM_ENV) $(UPSTREAM_PYTEST) test_modules.py -k TestModule

clean:
	rm -rf build $(VENV)

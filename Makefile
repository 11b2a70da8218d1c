# Tandem: `make run` starts the app, `make test` runs every test. Both set up .venv first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tandem-setup
LLAMA_CPP_VERSION := 0.3.36
# The default native build uses AMX where the CPU has it and crashes in llama_decode on such
# machines (FINDINGS.md); these flags give a portable AVX2 build. Override for CUDA/Metal/Vulkan,
# e.g. make setup LLAMA_CMAKE_ARGS="-DGGML_CUDA=ON" (see README).
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
export QT_API := pyside6

.PHONY: setup run test lint bench screenshot package install-desktop clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip wheel
	@if ! $(PY) -c "import importlib.metadata as m, sys; sys.exit(m.version('llama_cpp_python') != '$(LLAMA_CPP_VERSION)')" 2>/dev/null; then \
		echo "Building llama-cpp-python $(LLAMA_CPP_VERSION) (a few minutes on first setup)"; \
		CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install "llama-cpp-python==$(LLAMA_CPP_VERSION)"; \
	fi
	$(PY) -m pip install -q -e ".[dev,model]"
	$(PY) -c "import llama_cpp, PySide6, gguf, huggingface_hub; print('setup ok: llama-cpp-python', llama_cpp.__version__)"
	touch $(STAMP)

run: setup
	$(VENV)/bin/tandem

test: setup
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q -p no:cacheprovider

lint: setup
	$(VENV)/bin/ruff check engine app ui tests
	$(VENV)/bin/ruff format --check engine app ui tests
	$(VENV)/bin/mypy

# Side-by-side speed: n-gram drafting on the embedded model (with llama-cpp-python's own prompt
# lookup as the peer and the follow-up latency test), then the real draft-model pair
# (F16 target + Q4_K_M draft). Reports land in bench-*.md.
bench: setup
	$(VENV)/bin/tandem bench --model default --draft ngram --max-tokens 256 --out bench-ngram.md
	$(VENV)/bin/tandem bench --model default-f16 --draft default --max-tokens 128 --sets copy,qa,writing --no-peer --turns 0 --out bench-draft.md

screenshot: setup
	QT_QPA_PLATFORM=offscreen $(PY) -m app.screenshot resources/screenshot.png

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

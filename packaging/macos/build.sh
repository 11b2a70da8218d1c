#!/usr/bin/env bash
# Build Tandem.app on macOS (Apple silicon): llama.cpp with Metal, then PyInstaller's BUNDLE.
#
#   packaging/macos/build.sh                  (dist/Tandem.app and dist/tandem/)
#   TANDEM_CODESIGN_IDENTITY="Developer ID Application: NAME (TEAMID)" packaging/macos/build.sh
#
# NOT BUILT OR RUN HERE: written on Linux, never executed on a Mac. See packaging/macos/README.md.
# Needs: Xcode command line tools (xcode-select --install), CMake (brew install cmake),
# Python 3.11 (python.org universal2 installer or brew install python@3.11).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3.11}"
VENV="${VENV:-.venv-macos}"
LLAMA_CPP_VERSION=0.3.36
# Metal on Apple silicon (its default there, spelled out); GGML_NATIVE=OFF so an M1 can run a
# bundle built on a newer chip. Intel Macs: drop Metal, use -DGGML_METAL=off -DGGML_AVX2=ON.
CMAKE_ARGS="${CMAKE_ARGS:--DGGML_METAL=on -DGGML_NATIVE=OFF}"
export MACOSX_DEPLOYMENT_TARGET="${MACOSX_DEPLOYMENT_TARGET:-12.0}"

[[ "$(uname -s)" == Darwin ]] || { echo "error: run this on macOS" >&2; exit 1; }
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install -q --upgrade pip wheel

echo "Building llama-cpp-python $LLAMA_CPP_VERSION: CMAKE_ARGS=$CMAKE_ARGS"
CMAKE_ARGS="$CMAKE_ARGS" FORCE_CMAKE=1 "$PY" -m pip install --no-cache-dir --force-reinstall \
    --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_VERSION"
"$PY" -m pip install -q -e ".[model,package]"
"$PY" -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__, 'gpu offload:', llama_cpp.llama_supports_gpu_offload())"

# The spec signs every binary with TANDEM_CODESIGN_IDENTITY when it is set (ad hoc otherwise),
# and adds BUNDLE(...) -> dist/Tandem.app on darwin.
"$VENV/bin/pyinstaller" --noconfirm --clean --log-level WARN packaging/tandem.spec
du -sh dist/Tandem.app

# Smoke: the CLI outside the venv, with an empty TANDEM_HOME.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
env -i HOME="$work" PATH=/usr/bin:/bin TANDEM_HOME="$work/home" \
    dist/Tandem.app/Contents/MacOS/tandem generate --model default --draft ngram --max-tokens 16 --json \
    --prompt "Repeat the list exactly: red, green, blue, yellow. red, green, blue, yellow. red,"
echo "smoke: CLI ok. Open the window with: open dist/Tandem.app"

if [[ -n "${TANDEM_CODESIGN_IDENTITY:-}" ]]; then
    codesign --verify --deep --strict --verbose=2 dist/Tandem.app
    echo "Signed. Notarize: see packaging/macos/README.md"
fi

#!/bin/bash
# The device check for GPU builds: on a machine with a GPU, set up llama.cpp for it (make setup
# finds the toolchain: tools/detect_gpu.sh), confirm the build offloads, and run the n-gram bench
# on the GPU with every layer offloaded. Reports land in $OUT (default: gpu-check/), dated,
# named after the GPU; copy the ones worth keeping to docs/benchmarks/ with the machine and the
# date in their first line, as the CPU reports are. No GPU figure is claimed anywhere without one.
#
#   tools/gpu_check.sh              setup (about 15-25 minutes for a CUDA build), then the bench
#   SKIP_SETUP=1 tools/gpu_check.sh  the bench only, on the build already in .venv
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-check}
mkdir -p "$OUT"
name=$(sh tools/detect_gpu.sh name)
sh tools/detect_gpu.sh why | tee "$OUT/detect.txt"
if [ "$name" = none ]; then
  echo "gpu_check: no GPU toolchain with a GPU here; nothing to check" >&2
  exit 1
fi
if [ -z "${SKIP_SETUP:-}" ]; then
  make setup 2>&1 | tail -5 | tee "$OUT/setup.txt"
fi
PY=.venv/bin/python
$PY -c "import llama_cpp, sys; ok = llama_cpp.llama_supports_gpu_offload(); print('GPU offload:', ok); sys.exit(0 if ok else 1)" \
  | tee "$OUT/offload.txt"
gpu=$( (nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || echo "$name") | head -1 | tr ' /' '--')
stamp=$(date -u +%Y-%m-%d)
# The same sets as the CPU reports (docs/benchmarks/, the lab bench: tools/lab/bench.py), all layers on the GPU.
$PY -m tools.lab.bench --model default --draft ngram --sets copy --max-tokens 256 --no-peer --turns 0 \
  --gpu-layers 99 --out "$OUT/$stamp-$gpu-copy.md"
$PY -m tools.lab.bench --model smollm2 --draft ngram --sets documents --max-tokens 256 --no-peer --turns 0 \
  --gpu-layers 99 --out "$OUT/$stamp-$gpu-documents.md" || echo "gpu_check: the documents set did not run" >&2
echo "gpu_check: reports in $OUT/"

#!/bin/sh
# Which GPU toolchain `make setup` builds llama.cpp for, beside its CPU kernels.
#   tools/detect_gpu.sh flags   the CMake flags for the GPU backend found ("" where none)
#   tools/detect_gpu.sh why     one line saying what was found, or why the build is CPU only
#   tools/detect_gpu.sh name    cuda | vulkan | metal | none
# GPU=cpu|cuda|vulkan|metal in the environment chooses instead of looking (GPU=cpu: CPU only).
# Order: CUDA (nvcc, and an NVIDIA GPU the driver lists), then Vulkan (glslc and the Vulkan
# headers, and a GPU device), then Metal (macOS on Apple silicon). A toolchain without a GPU
# to run on (a CI image, a container with the CUDA toolkit and no device) builds for the CPU:
# a CUDA build compiles for a long time and would only fall back to the CPU at run time.

find_nvcc() {
  command -v nvcc 2>/dev/null && return 0
  for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda /opt/cuda; do
    [ -n "$d" ] && [ -x "$d/bin/nvcc" ] && { echo "$d/bin/nvcc"; return 0; }
  done
  return 1
}

has_nvidia_gpu() {
  [ -e /dev/nvidia0 ] && return 0
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

has_vulkan_gpu() {
  if command -v vulkaninfo >/dev/null 2>&1; then
    vulkaninfo --summary 2>/dev/null | grep -Eq 'PHYSICAL_DEVICE_TYPE_(DISCRETE|INTEGRATED)_GPU'
  else
    ls /dev/dri/renderD* >/dev/null 2>&1
  fi
}

has_vulkan_headers() {
  pkg-config --exists vulkan 2>/dev/null && return 0
  for d in "${VULKAN_SDK:-/nonexistent}/include" /usr/include /usr/local/include /opt/homebrew/include; do
    [ -f "$d/vulkan/vulkan.h" ] && return 0
  done
  return 1
}

choose() {
  case "${GPU:-auto}" in
    cpu) echo "none:GPU=cpu was given: building for the CPU only"; return ;;
    cuda) echo "cuda:GPU=cuda was given"; return ;;
    vulkan) echo "vulkan:GPU=vulkan was given"; return ;;
    metal) echo "metal:GPU=metal was given"; return ;;
  esac
  nvcc=$(find_nvcc)
  vulkan_tools=no
  command -v glslc >/dev/null 2>&1 && has_vulkan_headers && vulkan_tools=yes
  if [ -n "$nvcc" ] && has_nvidia_gpu; then
    echo "cuda:found the CUDA compiler ($nvcc) and an NVIDIA GPU"
  elif [ "$vulkan_tools" = yes ] && has_vulkan_gpu; then
    echo "vulkan:found glslc, the Vulkan headers and a GPU"
  elif [ "$(uname -s)" = Darwin ] && [ "$(uname -m)" = arm64 ]; then
    echo "metal:macOS on Apple silicon"
  else
    if [ -n "$nvcc" ]; then seen="the CUDA compiler but no NVIDIA GPU"
    elif [ "$vulkan_tools" = yes ]; then seen="the Vulkan tools but no GPU device"
    elif command -v glslc >/dev/null 2>&1; then seen="glslc but no Vulkan headers, no CUDA compiler"
    else seen="no CUDA compiler (nvcc), no Vulkan tools (glslc and headers)"; fi
    echo "none:no GPU to build for ($seen; not macOS on Apple silicon): building for the CPU only"
  fi
}

found=$(choose)
name=${found%%:*}
why=${found#*:}
case "$1" in
  flags)
    case "$name" in
      cuda) echo "-DGGML_CUDA=ON" ;;
      vulkan) echo "-DGGML_VULKAN=ON" ;;
      metal) echo "-DGGML_METAL=ON" ;;
      *) echo "" ;;
    esac ;;
  name) echo "$name" ;;
  why)
    if [ "$name" = none ]; then echo "GPU: $why."; else echo "GPU: $name ($why); the CPU kernels are built beside it."; fi ;;
  *) echo "usage: $0 flags|why|name" >&2; exit 2 ;;
esac

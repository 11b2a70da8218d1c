"""`make setup` and the GPU: tools/detect_gpu.sh finds a CUDA, Vulkan or Metal toolchain with a
GPU to run it on, and says in one line why it builds for the CPU where it finds none; with none,
the llama.cpp flags are exactly the CPU build's."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "detect_gpu.sh"


def _detect(what: str, path: str, **env: str) -> str:
    environment = {"PATH": path, "HOME": os.environ.get("HOME", "/tmp"), **env}
    return subprocess.run(
        ["/bin/sh", str(SCRIPT), what], env=environment, capture_output=True, text=True, check=True
    ).stdout.strip()


def _tool(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def _bare_path(tmp_path: Path) -> str:
    """A PATH with the shell's own tools only (no nvcc, glslc, nvidia-smi, vulkaninfo)."""
    bare = tmp_path / "bin"
    bare.mkdir(parents=True)
    for tool in ("uname", "grep", "ls", "pkg-config"):
        found = shutil.which(tool)
        if found:
            (bare / tool).symlink_to(found)
    return str(bare)


def test_no_toolchain_builds_for_the_cpu_and_says_why(tmp_path: Path) -> None:
    path = _bare_path(tmp_path)
    assert _detect("flags", path) == ""
    why = _detect("why", path)
    assert why.startswith("GPU: no GPU to build for") and why.endswith("building for the CPU only.")
    assert "\n" not in why


def test_a_cuda_compiler_without_a_gpu_builds_for_the_cpu(tmp_path: Path) -> None:
    # This machine's case: the CUDA toolkit is installed and there is no GPU.
    path = _bare_path(tmp_path)
    _tool(Path(path), "nvcc", "echo nvcc")
    assert _detect("flags", path) == ""
    assert "the CUDA compiler but no NVIDIA GPU" in _detect("why", path)


def test_cuda_with_a_gpu_and_vulkan_with_a_gpu_are_found(tmp_path: Path) -> None:
    path = _bare_path(tmp_path)
    _tool(Path(path), "nvcc", "echo nvcc")
    _tool(Path(path), "nvidia-smi", "echo 'GPU 0: NVIDIA H100 (UUID: GPU-1)'")
    assert _detect("flags", path) == "-DGGML_CUDA=ON"
    assert _detect("why", path).endswith("the CPU kernels are built beside it.")
    vulkan = tmp_path / "vulkan"
    vulkan.mkdir()
    _tool(vulkan, "glslc", "echo glslc")
    _tool(vulkan, "vulkaninfo", "echo 'deviceType = PHYSICAL_DEVICE_TYPE_DISCRETE_GPU'")
    (tmp_path / "sdk" / "include" / "vulkan").mkdir(parents=True)
    (tmp_path / "sdk" / "include" / "vulkan" / "vulkan.h").write_text("")
    found = _detect("flags", f"{vulkan}:{_bare_path(tmp_path / 'v')}", VULKAN_SDK=str(tmp_path / "sdk"))
    assert found == "-DGGML_VULKAN=ON"
    assert _detect("flags", path, GPU="cpu") == ""  # chosen by hand


def _make_variable(name: str, *args: str) -> str:
    out = subprocess.run(
        ["make", "-n", "-p", "setup", *args], cwd=ROOT, capture_output=True, text=True
    ).stdout
    match = re.search(rf"^{name} :?= (.*)$", out, re.M)
    assert match is not None
    return match.group(1)


def test_with_no_gpu_the_cpu_flags_are_unchanged() -> None:
    if _detect("name", os.environ["PATH"]) != "none":
        return  # a machine with a GPU: its flags differ by design
    assert _make_variable("LLAMA_GPU_ARGS") == ""
    assert _make_variable("LLAMA_FLAGS_ID") == _make_variable("LLAMA_FLAGS_ID", "GPU=cpu")

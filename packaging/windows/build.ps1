# Build the Tandem bundle on Windows: dist\tandem\tandem.exe (+ dist\tandem\_internal\).
#
#   powershell -ExecutionPolicy Bypass -File packaging\windows\build.ps1 [-Backend cpu|cuda|vulkan] [-Python py -3.11]
#
# NOT BUILT OR RUN HERE: this script was written on Linux and has not been executed on Windows.
# Read packaging\windows\README.md first (prerequisites: Python 3.11 x64, Visual Studio 2022
# Build Tools with "Desktop development with C++", CMake; CUDA Toolkit 12.x or the Vulkan SDK
# for those backends).
[CmdletBinding()]
param(
    [ValidateSet("cpu", "cuda", "vulkan")] [string] $Backend = "cpu",
    [string] $Python = "py -3.11",
    [string] $LlamaCppVersion = "0.3.36",
    [switch] $SkipSmoke
)
$ErrorActionPreference = "Stop"
$Root = (Resolve-Path (Join-Path $PSScriptRoot "..\..")).Path
Set-Location $Root

# llama.cpp build flags per backend. GGML_NATIVE=OFF: the bundle runs on other PCs than the one
# that built it (a native build can use instructions - AVX-512, AMX - the user's CPU lacks).
$CmakeArgs = @{
    "cpu"    = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
    "cuda"   = "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=75-real;80-real;86-real;89-real;90-virtual"
    "vulkan" = "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_VULKAN=on"
}[$Backend]
if ($Backend -eq "cuda" -and -not $env:CUDA_PATH) { throw "CUDA_PATH is not set: install the CUDA Toolkit 12.x" }
if ($Backend -eq "vulkan" -and -not $env:VULKAN_SDK) { throw "VULKAN_SDK is not set: install the LunarG Vulkan SDK" }

# A separate virtual environment, so a CPU and a GPU build never mix.
$Venv = Join-Path $Root ".venv-win-$Backend"
if (-not (Test-Path (Join-Path $Venv "Scripts\python.exe"))) {
    Invoke-Expression "$Python -m venv `"$Venv`""
}
$Py = Join-Path $Venv "Scripts\python.exe"
& $Py -m pip install -q --upgrade pip wheel
if ($LASTEXITCODE) { throw "pip upgrade failed" }

Write-Host "Building llama-cpp-python $LlamaCppVersion ($Backend): CMAKE_ARGS=$CmakeArgs"
$env:CMAKE_ARGS = $CmakeArgs
$env:FORCE_CMAKE = "1"
& $Py -m pip install --no-cache-dir --force-reinstall --no-binary llama-cpp-python "llama-cpp-python==$LlamaCppVersion"
if ($LASTEXITCODE) { throw "llama-cpp-python build failed" }
Remove-Item Env:CMAKE_ARGS, Env:FORCE_CMAKE

& $Py -m pip install -q -e ".[model,package]"
if ($LASTEXITCODE) { throw "pip install failed" }
& $Py -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__, 'gpu offload:', llama_cpp.llama_supports_gpu_offload())"

# CUDA: the CUDA runtime DLLs the ggml-cuda backend links (cudart64_12, cublas64_12,
# cublasLt64_12) are found by PyInstaller on PATH (%CUDA_PATH%\bin) and copied into the bundle;
# NVIDIA's EULA allows redistributing them. The user still needs an NVIDIA driver.
if ($Backend -eq "cuda") { $env:PATH = "$env:CUDA_PATH\bin;$env:PATH" }

& (Join-Path $Venv "Scripts\pyinstaller.exe") --noconfirm --clean --log-level WARN packaging\tandem.spec
if ($LASTEXITCODE) { throw "PyInstaller failed" }
$Size = (Get-ChildItem -Recurse dist\tandem | Measure-Object -Sum Length).Sum / 1MB
Write-Host ("dist\tandem: {0:N0} MB" -f $Size)

if (-not $SkipSmoke) {
    # Outside the venv: a clean PATH, a fresh TANDEM_HOME.
    $Home2 = Join-Path $env:TEMP ("tandem-smoke-" + [guid]::NewGuid())
    $env:TANDEM_HOME = $Home2
    $OldPath = $env:PATH
    $env:PATH = "$env:SystemRoot\System32;$env:SystemRoot"
    try {
        & dist\tandem\tandem.exe generate --model default --draft ngram --max-tokens 16 --json `
            --prompt "Repeat the list exactly: red, green, blue, yellow. red, green, blue, yellow. red,"
        if ($LASTEXITCODE) { throw "smoke: tandem generate failed ($LASTEXITCODE)" }
        $App = Start-Process -FilePath dist\tandem\tandem.exe -PassThru
        Start-Sleep -Seconds 10
        if ($App.HasExited) { throw "smoke: the window exited early ($($App.ExitCode))" }
        if (-not $App.MainWindowTitle.StartsWith("Tandem")) { throw "smoke: no Tandem window ('$($App.MainWindowTitle)')" }
        $null = $App.CloseMainWindow()
        if (-not $App.WaitForExit(30000)) { $App.Kill(); throw "smoke: the app did not exit after its window was closed" }
        Write-Host "smoke: PASS"
    } finally {
        $env:PATH = $OldPath
        Remove-Item Env:TANDEM_HOME
        Remove-Item -Recurse -Force $Home2 -ErrorAction SilentlyContinue
    }
}

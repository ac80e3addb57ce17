#!/usr/bin/env bash
# Build llama-cpp-python with CUDA into a fresh venv and run `localspec bench` on the GPU,
# writing the same bench.json / bench.png as the CPU run.
#
# Usage (from the repository root, on a machine with an NVIDIA GPU, the CUDA toolkit
# (nvcc) and a C++ compiler):
#     scripts/gpu_bench.sh [OUT_DIR] [extra localspec bench options...]
# e.g. scripts/gpu_bench.sh bench-out/gpu --repeats 5 --max-tokens 256
#
# Environment:
#   CUDA_ARCH   CUDA compute capability to build for. Default 90 (H100/H200, Hopper).
#               Use 80 for A100, 86 for RTX 30xx/A10/A40, 89 for RTX 40xx/L4/L40,
#               100/120 for Blackwell, or "native" to build for the GPU in this machine
#               (`nvidia-smi --query-gpu=compute_cap --format=csv` shows it, e.g. 8.6 -> 86).
#   VENV        where to create the venv (default .venv-gpu).
#   PYTHON      interpreter to create it with (default python3).
#   JOBS        parallel compile jobs (default: all cores).
set -euo pipefail

OUT_DIR="${1:-bench-out/gpu}"
shift || true
CUDA_ARCH="${CUDA_ARCH:-90}"
VENV="${VENV:-.venv-gpu}"
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-$(nproc)}"

cd "$(dirname "$0")/.."

if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "error: nvidia-smi not found; this script needs an NVIDIA GPU and driver" >&2
    exit 1
fi
if ! command -v nvcc >/dev/null 2>&1; then
    echo "error: nvcc not found; install the CUDA toolkit (or put /usr/local/cuda/bin on PATH)" >&2
    exit 1
fi
nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version --format=csv

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --upgrade pip wheel setuptools

# Build the CUDA wheel from source (PyPI ships llama-cpp-python as source only). --no-cache-dir and
# --force-reinstall so a CPU wheel cached by pip is not reused.
CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH}" \
CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" \
    "$VENV/bin/python" -m pip install --no-cache-dir --force-reinstall --no-binary llama-cpp-python \
    "llama-cpp-python==0.3.36"

# localspec itself with the default models' offline mirror and matplotlib for the plot; keep the CUDA build.
"$VENV/bin/python" -m pip install -e ".[models,bench]"
"$VENV/bin/python" - <<'PY'
import llama_cpp
ok = bool(llama_cpp.llama_supports_gpu_offload())
print("llama-cpp-python", llama_cpp.__version__, "GPU offload:", ok)
raise SystemExit(0 if ok else "this llama-cpp-python build has no GPU offload; check CMAKE_ARGS and nvcc")
PY

mkdir -p "$OUT_DIR"
# Fresh cost measurement for the GPU settings (cached separately: n_gpu_layers is part of the key).
"$VENV/bin/localspec" calibrate --n-gpu-layers -1 --draft-n-gpu-layers -1 --remeasure | tee "$OUT_DIR/calibrate.txt"
"$VENV/bin/localspec" bench --n-gpu-layers -1 --draft-n-gpu-layers -1 --out "$OUT_DIR" "$@" | tee "$OUT_DIR/bench.txt"
echo "wrote $OUT_DIR/bench.json, $OUT_DIR/bench.png, $OUT_DIR/bench.txt"

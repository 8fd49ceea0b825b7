#!/usr/bin/env bash
# The GPU backend on a GPU machine, from the prebuilt binaries in gpu-bin/ (scripts/build-gpu-bins.sh
# makes them on a machine with Rust): no Rust toolchain needed here, only the NVIDIA driver
# (libcuda.so.1) and NVRTC of CUDA 13 (libnvrtc.so.13: a CUDA 13 toolkit, or PyPI's
# nvidia-cuda-nvrtc wheel). Under 4 minutes. Prints the GPU-vs-CPU agreement and the
# benchmark's JSON; any failure, a missing device included, exits non-zero.
#
#   GRADFEM_NVRTC_DIR=<folder with libnvrtc.so.13>   when it is nowhere this script looks
#   BENCH_N=<cubes per side>                          heat3d size (default 80: 531 441 nodes)
#   ELASTIC_N=<cubes per side>                        elastic3d size (default 40: 201 720 unknowns)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=gpu-bin
for f in twins elastic_twins nvrtc_compile gpu_device bench_thermal bench_elastic device gradfem; do
  if [ ! -x "$bin/$f" ]; then
    echo "gpu-check.sh: $bin/$f is missing: run scripts/build-gpu-bins.sh on a machine with Rust" >&2
    exit 1
  fi
done
[ -f "$bin/COMMIT" ] && echo "gpu-check.sh: binaries of commit $(cat "$bin/COMMIT")"

# Where libnvrtc.so.13 is: an explicit folder, a CUDA toolkit, or a Python wheel.
nvrtc_dirs=()
[ -n "${GRADFEM_NVRTC_DIR:-}" ] && nvrtc_dirs+=("$GRADFEM_NVRTC_DIR")
if command -v nvcc >/dev/null 2>&1; then
  nvrtc_dirs+=("$(dirname "$(dirname "$(command -v nvcc)")")/lib64")
fi
nvrtc_dirs+=(/usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/cuda/targets/x86_64-linux/lib)
for py in python3 .venv/bin/python; do
  if command -v "$py" >/dev/null 2>&1; then
    site=$("$py" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null || true)
    for s in $site; do nvrtc_dirs+=("$s/nvidia/cu13/lib" "$s/nvidia/cuda_nvrtc/lib"); done
  fi
done
found=""
for d in "${nvrtc_dirs[@]}"; do
  if [ -e "$d/libnvrtc.so.13" ]; then found=$d; break; fi
done
if [ -z "$found" ]; then
  echo "gpu-check.sh: libnvrtc.so.13 not found (looked in: ${nvrtc_dirs[*]}); set GRADFEM_NVRTC_DIR" >&2
  exit 1
fi
echo "gpu-check.sh: NVRTC from $found"
export LD_LIBRARY_PATH="$found${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GRADFEM_REQUIRE_GPU=1
command -v nvidia-smi >/dev/null 2>&1 &&
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

echo "== CPU twins vs the CPU path"
timeout 60 "$bin/twins" --test-threads 2
timeout 60 "$bin/elastic_twins" --test-threads 2
echo "== NVRTC compiles every kernel"
timeout 60 "$bin/nvrtc_compile" --nocapture
echo "== device vs CPU path and vs twins (GRADFEM_REQUIRE_GPU=1)"
timeout 90 "$bin/gpu_device" --nocapture --test-threads 1
echo "== the library on the device (problem files, Model::device, the device solver)"
timeout 60 "$bin/device" --nocapture --test-threads 1
echo "== gradfem run on the GPU against the CPU (problem files with [solver] device)"
for f in examples/heat_sink.toml examples/microactuator_builtin.toml; do
  timeout 60 "$bin/gradfem" run "$f" --json > /tmp/gradfem-cpu.json
  timeout 60 "$bin/gradfem" run "$f" --json --device cuda > /tmp/gradfem-gpu.json
  python3 - "$f" /tmp/gradfem-cpu.json /tmp/gradfem-gpu.json <<'PY'
import json, sys
name, cpu, gpu = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
a, b = cpu["objective"], gpu["objective"]
rel = abs(a - b) / max(abs(a), 1e-300)
print(f"{name}: objective {a!r} (cpu) vs {b!r} (cuda), relative difference {rel:.2e}")
sys.exit(0 if rel <= 1e-6 else 1)
PY
done
n=${BENCH_N:-80}
echo "== heat3d n = $n on the GPU (with the CPU check)"
timeout 150 "$bin/bench_thermal" --n "$n" --device cuda --check
echo "== heat3d on Hex20 cells, n = 24, on the GPU (the quadrature kernels, with the CPU check)"
timeout 60 "$bin/bench_thermal" --n 24 --cell hex20 --device cuda --check
m=${ELASTIC_N:-40}
echo "== elastic3d n = $m on the GPU (Tet4, compliance, with the CPU check)"
timeout 120 "$bin/bench_elastic" --n "$m" --device cuda --check
echo "== elastic3d on Hex20 cells, n = 12, on the GPU (with the CPU check)"
timeout 60 "$bin/bench_elastic" --n 12 --cell hex20 --device cuda --check
echo "gpu-check.sh: done"

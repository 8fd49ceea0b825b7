#!/usr/bin/env bash
# Run gradfem's whole test suite, as CI does: the Rust tests, then the Python package's.
#
# Everything Rust builds from crates.io alone (HDF5 output is pure Rust), except the `mpi`
# feature's test, which needs OpenMPI (scripts/install_mpi.sh installs it with apt). The Python
# side runs in the project's own virtual environment, `.venv` (ignored by git): this script
# creates it (seeing the system's packages, so an h5py or torch already installed is used as it
# is), installs what is missing from PyPI once — h5py and numpy (the HDF5 cross-check), maturin
# and pytest (the Python package), torch (its PyTorch bridge; PyPI's CUDA build without triton,
# about 5 GB), scipy and jax (its JAX bridge, CPU), NVRTC 13.0 (the GPU kernels' compile check,
# in .venv/nvrtc-13.0) — then builds the package from python/ into it (`pip install ./python`)
# and runs its pytest suite.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v python3 >/dev/null 2>&1; then
  echo "scripts/test.sh: python3 is needed (the HDF5 cross-check and the Python package tests)" >&2
  exit 1
fi
venv=.venv
if [ ! -x "$venv/bin/python" ]; then
  echo "scripts/test.sh: creating the project's Python environment in $venv" >&2
  python3 -m venv --system-site-packages "$venv"
fi
py="$(pwd)/$venv/bin/python"
# No pip cache: a clean machine's disk holds the environment (torch's CUDA libraries are
# several GB) and the release build, not a second copy of every wheel.
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
need() { # need MODULE PIP_SPEC...: install the specs when MODULE does not import
  local module=$1
  shift
  if ! "$py" -c "import $module" >/dev/null 2>&1; then
    echo "scripts/test.sh: installing $* into $venv" >&2
    "$py" -m pip install --quiet "$@"
  fi
}
need "h5py, numpy" h5py numpy
need maturin "maturin>=1.7,<2"
need pytest "pytest>=7"
# torch with the libraries `import torch` loads, but without triton (~1 GB, used only by
# torch.compile, which the package does not call). That is about 4.3 GB installed plus a 1 GB
# wheel while pip unpacks it; the release build that follows needs about 8 GB more on a clean
# checkout. A machine without room for both skips torch, says so, and the pytest run leaves out
# the PyTorch bridge's tests (GRADFEM_TORCH_SKIPPED) instead of failing on a full disk midway;
# GRADFEM_REQUIRE_TORCH=1 makes that an error.
free_gb() { df -Pk "$1" | awk 'NR == 2 { printf "%d", $4 / 1048576 }'; }
unset GRADFEM_TORCH_SKIPPED
if ! "$py" -c "import torch" >/dev/null 2>&1; then
  torch_need_gb=6
  [ -d target/release ] || torch_need_gb=$((torch_need_gb + 8))
  torch_free_gb=$(free_gb "$venv")
  if [ "$torch_free_gb" -lt "$torch_need_gb" ] && [ "${GRADFEM_REQUIRE_TORCH:-0}" != 1 ]; then
    export GRADFEM_TORCH_SKIPPED="only ${torch_free_gb} GB free where torch and the build need ${torch_need_gb} GB"
    echo "scripts/test.sh: NOT installing torch: $GRADFEM_TORCH_SKIPPED;" \
      "the PyTorch bridge's tests will be skipped" >&2
  else
    echo "scripts/test.sh: installing torch (without triton) into $venv; pip's resolver then" \
      "reports triton as missing, which is expected" >&2
    "$py" -m pip install --quiet --no-deps torch
    mapfile -t torch_deps < <("$py" - <<'PY'
from importlib.metadata import requires
from pip._vendor.packaging.requirements import Requirement
for line in requires("torch") or []:
    req = Requirement(line)
    if req.name == "triton":
        continue
    if req.marker is None or req.marker.evaluate({"extra": ""}):
        print(str(req).split(";")[0].strip())
PY
    )
    "$py" -m pip install --quiet "${torch_deps[@]}"
  fi
fi
need scipy scipy
need jax jax
# NVRTC of CUDA 13.0 for the GPU backend's compile check (no GPU needed: NVRTC only makes PTX).
# Pinned to the 13.0 series, the CUDA version of the GPU test machine's driver (PTX of a newer
# NVRTC does not load on an older driver). It goes into a folder of its own inside the venv,
# not the venv's site-packages, where torch keeps the newer nvidia-cuda-nvrtc it requires.
nvrtc_dir="$(pwd)/$venv/nvrtc-13.0"
nvrtc_lib="$nvrtc_dir/nvidia/cu13/lib"
if [ ! -e "$nvrtc_lib/libnvrtc.so.13" ]; then
  echo "scripts/test.sh: installing nvidia-cuda-nvrtc 13.0 into $nvrtc_dir" >&2
  "$py" -m pip install --quiet --target "$nvrtc_dir" "nvidia-cuda-nvrtc==13.0.*"
fi
export GRADFEM_PYTHON="$py"
export GRADFEM_REQUIRE_H5PY=1

# A clean checkout's release build with its test, feature and lint builds takes about 14 GB;
# say so up front when the disk holds less (cargo would stop midway on "No space left").
build_free_gb=$(free_gb .)
if [ ! -d target/release ] && [ "$build_free_gb" -lt 14 ]; then
  echo "scripts/test.sh: WARNING: only ${build_free_gb} GB free for target/; a clean build of" \
    "the tests, the feature builds and the lints needs about 14 GB" >&2
fi

# The extension crate links against the interpreter that loads it: pytest tests it.
cargo test --release --workspace --exclude gradfem-python "$@"

# The GPU backend with its `cuda` feature (no GPU here): every NVRTC kernel source compiles.
# cudarc dlopens libnvrtc.so.13 by name, so the wheel's lib folder goes on LD_LIBRARY_PATH.
LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  cargo test --release -p gradfem-gpu --features cuda --test nvrtc_compile

# `gradfem uq` and `gradfem identify` across MPI ranks (feature `mpi`, rsmpi over Debian's
# OpenMPI): installs libopenmpi-dev, libclang-dev and pkgconf with apt where missing, then
# runs `mpirun -n 1` and `-n 2` against one process (and, for uq, sharded runs).
bash scripts/install_mpi.sh
cargo test --release -p gradfem --features mpi --test uq_mpi

echo "scripts/test.sh: building the Python package (pip install ./python)" >&2
PATH="$(pwd)/$venv/bin:$PATH" "$py" -m pip install --quiet --disable-pip-version-check \
  --no-build-isolation ./python
GRADFEM_BIN="$(pwd)/target/release/gradfem" "$py" -m pytest -q python/tests
if [ -n "${GRADFEM_TORCH_SKIPPED:-}" ]; then
  echo "scripts/test.sh: the PyTorch bridge's tests were skipped: $GRADFEM_TORCH_SKIPPED" >&2
fi

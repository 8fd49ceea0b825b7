#!/usr/bin/env bash
# Run gradfem's whole test suite, as CI does.
#
# Everything builds from crates.io alone (HDF5 output is pure Rust), so the Rust toolchain is
# all a new machine needs. One check reads our HDF5 files back with h5py (the reference reader
# most users have). It runs in the project's own virtual environment, `.venv` (ignored by
# git): this script creates it (seeing the system's packages, so an h5py already installed is
# used as it is), installs h5py and numpy into it from PyPI when they are missing, and then
# requires that check to run rather than skip.
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v python3 >/dev/null 2>&1; then
  venv=.venv
  if [ ! -x "$venv/bin/python" ]; then
    echo "scripts/test.sh: creating the project's Python environment in $venv" >&2
    python3 -m venv --system-site-packages "$venv"
  fi
  if ! "$venv/bin/python" -c "import h5py, numpy" >/dev/null 2>&1; then
    echo "scripts/test.sh: installing h5py and numpy into $venv for the HDF5 cross-check" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check h5py numpy
  fi
  GRADFEM_PYTHON="$(pwd)/$venv/bin/python"
  export GRADFEM_PYTHON
  export GRADFEM_REQUIRE_H5PY=1
else
  echo "scripts/test.sh: python3 not found; the h5py cross-check will be skipped" >&2
fi

exec cargo test --release --workspace "$@"

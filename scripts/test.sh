#!/usr/bin/env bash
# Run gradfem's whole test suite, as CI does.
#
# Everything builds from crates.io alone (HDF5 output is pure Rust), so the Rust toolchain is
# all a new machine needs. One check reads our HDF5 files back with h5py (the reference reader
# most users have): this script installs h5py from PyPI when it is missing and then requires
# that check to run rather than skip.
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v python3 >/dev/null 2>&1; then
  if ! python3 -c "import h5py, numpy" >/dev/null 2>&1; then
    echo "scripts/test.sh: installing h5py and numpy for the HDF5 cross-check" >&2
    python3 -m pip install --quiet --disable-pip-version-check h5py numpy
  fi
  export GRADFEM_REQUIRE_H5PY=1
else
  echo "scripts/test.sh: python3 not found; the h5py cross-check will be skipped" >&2
fi

exec cargo test --release --workspace "$@"

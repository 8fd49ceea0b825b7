#!/usr/bin/env bash
# Install what the `mpi` cargo feature builds against: Debian's OpenMPI (headers, mpicc,
# mpirun), libclang (rsmpi's bindgen reads mpi.h) and pkgconf (rsmpi finds OpenMPI through
# pkg-config). Does nothing when all three are installed already.
set -euo pipefail
packages=(libopenmpi-dev libclang-dev pkgconf)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
echo "scripts/install_mpi.sh: installing ${missing[*]} with apt" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"

#!/usr/bin/env bash
# Install the Debian packages seer needs (idempotent: only what is missing;
# apt-get update only when something must be installed). Run as root or
# through sudo.
set -euo pipefail
pkgs=(
  build-essential pkg-config
  libopenmpi-dev openmpi-bin libfabric-dev libfabric-bin libhwloc-dev hwloc
  libhdf5-openmpi-dev hdf5-plugin-lzf libcriterion-dev libinih-dev libxxhash-dev zlib1g-dev libdeflate-dev
  liburing-dev libnuma-dev libfuse3-dev fuse3
  clang libclang-rt-14-dev
  python3-numpy python3-h5py python3-torch python3-mpi4py python3-matplotlib
  libturbojpeg0-dev libjpeg62-turbo-dev libjpeg-turbo-progs libpng-dev libjansson-dev
  python3-pil python3-torchvision stress-ng
  gcc-aarch64-linux-gnu
  slurm-wlm munge strace procps
)
missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#pkgs[@]} Debian packages present"
  exit 0
fi
echo "deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "deps: done"

#!/usr/bin/env bash
# tools/gpu_deps.sh — run on a Debian 12 machine (amd64): downloads into .gpu_deps/ (git-ignored)
# the .deb files of ETE's build dependencies that a CUDA image lacks, for tools/gpu_check.sh on a
# GPU machine that reaches no package registry (it unpacks them into a private prefix, never
# into /). About 35 MB: the libraries and headers of run.sh's BUILD_PKGS and GoogleTest, the
# runtime libraries Open MPI loads, and pkg-config; no libc and no compiler (the GPU machine has
# its own). Carry .gpu_deps with the working tree.
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=(
    libopenblas-dev libopenblas-openmp-dev libopenblas0 libopenblas0-openmp libgfortran5
    nlohmann-json3-dev libtomlplusplus-dev libtomlplusplus3 libcli11-dev libfmt-dev libfmt9
    libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
    libxxhash-dev libxxhash0 libbrotli1 libbrotli-dev libssl3
    libssl-dev zlib1g zlib1g-dev
    libdnnl-dev libdnnl2 libgtest-dev libgmock-dev
    libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common libhwloc15 libevent-core-2.1-7
    libevent-pthreads-2.1-7 libpmix2 libfabric1 libucx0 libibverbs1 librdmacm1 libnl-3-200
    libnl-route-3-200 libpsm2-2 libpsm-infinipath1
    pkgconf pkgconf-bin libpkgconf3 pkg-config
)
rm -rf .gpu_deps
mkdir -p .gpu_deps
(cd .gpu_deps && apt-get download "${PKGS[@]}")
echo "tools/gpu_deps.sh: $(ls .gpu_deps | wc -l) packages, $(du -sh .gpu_deps | cut -f1) in .gpu_deps/"

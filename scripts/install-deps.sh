#!/usr/bin/env bash
# Installs the Debian packages dlkit's build, tests and benchmarks need. Idempotent: packages
# already present are left alone, and nothing is installed when everything is there.
# Works as root or through sudo. Prints what it installs.
set -euo pipefail

packages=(
  build-essential cmake make ninja-build pkg-config ccache  # ccache: every build compiles through it (CMakeLists.txt); ninja: the Makefile's generator
  lld  # links every program (CMakeLists.txt): a quarter of GNU ld's time on the sanitizer builds' programs
  libcli11-dev libtomlplusplus-dev doctest-dev nlohmann-json3-dev
  libboost-dev libboost-filesystem-dev libboost-system-dev
  libopenblas-dev libgloo-dev
  python3-torch python3-numpy
  iproute2 openmpi-bin slurm-wlm munge  # reliability tests: network namespaces, mpirun, a one-node Slurm
  # make test-sanitize / make fuzz: clang with its sanitizer and libFuzzer runtimes, and
  # llvm-symbolizer for readable sanitizer stacks (docs/RELIABILITY.md).
  clang libclang-rt-dev llvm
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed" >&2
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
echo "install-deps: done" >&2

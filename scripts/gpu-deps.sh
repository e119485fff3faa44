#!/usr/bin/env bash
# The C++ libraries dlkit builds against (OpenBLAS, Gloo, Boost, CLI11, toml++, nlohmann-json,
# doctest), carried to a GPU machine that has CUDA, CMake and PyTorch but none of these and no
# package registry (the device runner's machines: /work/.library/device).
#
#   scripts/gpu-deps.sh pack                 # here, on Debian 12 with scripts/install-deps.sh's
#                                            # packages: writes build-gpu-deps/deps.tar.xz (~30 MB;
#                                            # build-gpu-deps/ is git-ignored: name it in the run's carry)
#   scripts/gpu-deps.sh unpack DIR           # there (gpu-check.sh's build stage does this): unpacks
#                                            # into DIR, rewrites the absolute /usr paths of the CMake
#                                            # package files, prints the CMake hints, writes DIR/env.sh
#
# Unpack into a folder that is NOT the carried one (gpu-check.sh uses build-gpu/deps): a carried
# path is replaced on every call, and the binaries built in build-gpu/ load these libraries.
# Runtime: the build tree's RUNPATH finds the libraries dlkit links directly; DIR/env.sh puts the
# ones those need in turn (libgfortran, libibverbs, ...) on LD_LIBRARY_PATH, only those the
# machine lacks (ldconfig -p).
set -euo pipefail
cd "$(dirname "$0")/.."

ARCHIVE=${DL_GPU_DEPS:-build-gpu-deps/deps.tar.xz}
PACKAGES=(
  libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0
  libgloo-dev libgloo0 libhiredis0.14 libibverbs1 libnl-3-200 libnl-route-3-200
  libcli11-dev libtomlplusplus-dev libtomlplusplus3 doctest-dev nlohmann-json3-dev
  libboost1.74-dev libboost-filesystem1.74-dev libboost-filesystem1.74.0
  libboost-system1.74-dev libboost-system1.74.0
)
# Shared libraries those packages need that a CUDA image may lack (sonames).
RUNTIME=(libgfortran.so.5 libquadmath.so.0 libhiredis.so.0.14 libibverbs.so.1 libnl-3.so.200 libnl-route-3.so.200)

pack() {
  local p missing=() list
  for p in "${PACKAGES[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "gpu-deps: not installed here: ${missing[*]} (scripts/install-deps.sh installs most; apt-get install the rest)" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$ARCHIVE")"
  list=$(mktemp)
  # Every file and symbolic link of the packages, less documentation and the 58 MB static
  # OpenBLAS (CMake links the shared one).
  for p in "${PACKAGES[@]}"; do dpkg -L "$p"; done | sort -u | while IFS= read -r f; do
    case "$f" in /usr/share/doc/* | /usr/share/man/* | /usr/share/lintian/* | /usr/share/bug/* | */openblas-pthread/*.a) continue ;; esac
    [ -L "$f" ] && [ -d "$f" ] && continue  # merged /usr: /lib is a link to usr/lib
    if [ -L "$f" ] || [ -f "$f" ]; then printf '%s\n' "${f#/}"; fi
  done > "$list"
  echo "gpu-deps: packing $(wc -l < "$list") files of ${#PACKAGES[@]} packages into $ARCHIVE" >&2
  # Files under /lib (libnl) go to usr/lib with the rest, where the hints and env.sh look.
  tar -C / --no-recursion --transform 's,^lib/,usr/lib/,' -cf - -T "$list" | xz -T0 -6 > "$ARCHIVE.tmp"
  mv "$ARCHIVE.tmp" "$ARCHIVE"
  rm -f "$list"
  echo "gpu-deps: $(du -h "$ARCHIVE" | cut -f1) $ARCHIVE; name $(dirname "$ARCHIVE") in the device run's carry" >&2
}

unpack() {
  local dir=${1:?usage: gpu-deps.sh unpack DIR} root f so sum lib
  [ -f "$ARCHIVE" ] || { echo "gpu-deps: $ARCHIVE not found (run scripts/gpu-deps.sh pack where the packages are installed)" >&2; exit 1; }
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  root=$dir/root
  # Unpacked again only when the archive changed (by content: a carried file's time is new on
  # every call), so a rebuild does not see every header as new.
  sum=$(cksum < "$ARCHIVE")
  if [ "$(cat "$root/.stamp" 2>/dev/null)" != "$sum" ]; then
    rm -rf "$root"
    mkdir -p "$root"
    if command -v xz > /dev/null; then
      xz -dc "$ARCHIVE" | tar -C "$root" -xf -
    else
      python3 -c 'import sys, tarfile; kw = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2], **kw)' "$ARCHIVE" "$root"
    fi
    # Debian's package files name /usr absolutely in a few places; point them here.
    for f in usr/lib/x86_64-linux-gnu/openblas-pthread/cmake/openblas/OpenBLASConfig.cmake \
             usr/share/cmake/Gloo/GlooTargets-relwithdebinfo.cmake \
             usr/lib/cmake/doctest/doctestTargets.cmake \
             usr/lib/x86_64-linux-gnu/cmake/tomlplusplus/tomlplusplusConfig.cmake; do
      [ -f "$root/$f" ] && sed -i -e "s#\"/usr#\"$root/usr#g" -e "s# /usr/# $root/usr/#g" "$root/$f"
    done
    # OpenBLAS's config is reached through Debian's alternatives (/etc/alternatives), not packed.
    mkdir -p "$root/usr/lib/x86_64-linux-gnu/cmake/openblas"
    for f in OpenBLASConfig.cmake OpenBLASConfigVersion.cmake; do
      rm -f "$root/usr/lib/x86_64-linux-gnu/cmake/openblas/$f"
      ln -s "../../openblas-pthread/cmake/openblas/$f" "$root/usr/lib/x86_64-linux-gnu/cmake/openblas/$f"
    done
    echo "$sum" > "$root/.stamp"
  fi
  # The libraries the linked ones need, where this machine has none of its own.
  rm -rf "$dir/runtime"
  mkdir -p "$dir/runtime"
  for so in "${RUNTIME[@]}"; do
    if ! ldconfig -p 2>/dev/null | grep -q "[[:space:]]$so "; then
      [ -e "$root/usr/lib/x86_64-linux-gnu/$so" ] && ln -sf "$root/usr/lib/x86_64-linux-gnu/$so" "$dir/runtime/$so"
    fi
  done
  # Also read by the linker: ld looks on LD_LIBRARY_PATH for a shared library's own dependencies.
  # shellcheck disable=SC2016  # expanded when env.sh is sourced
  printf 'export LD_LIBRARY_PATH=%q${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\n' "$dir/runtime" > "$dir/env.sh"
  # Each package's config folder by name too: CMake searches lib/x86_64-linux-gnu/cmake only
  # when it knows the multiarch name (CMAKE_LIBRARY_ARCHITECTURE), which not every image gives it.
  lib=$root/usr/lib/x86_64-linux-gnu
  echo "-DCMAKE_PREFIX_PATH=$root/usr -DOpenBLAS_DIR=$lib/cmake/openblas -DBoost_DIR=$lib/cmake/Boost-1.74.0" \
       "-Dtomlplusplus_DIR=$lib/cmake/tomlplusplus -DGloo_DIR=$root/usr/share/cmake/Gloo" \
       "-DCLI11_DIR=$root/usr/share/cmake/CLI11 -Dnlohmann_json_DIR=$root/usr/share/cmake/nlohmann_json" \
       "-Ddoctest_DIR=$root/usr/lib/cmake/doctest"
}

case "${1:-}" in
  pack) pack ;;
  unpack) unpack "${2:-}" ;;
  *) echo "usage: scripts/gpu-deps.sh pack | unpack DIR" >&2; exit 2 ;;
esac

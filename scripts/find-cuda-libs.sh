#!/usr/bin/env bash
# Prints where cuDNN and NCCL live when they came with PyTorch's nvidia-* Python packages
# (nvidia-cudnn-cu*, nvidia-nccl-cu*), as CMake hints:
#
#   cmake -S . -B build $(scripts/find-cuda-libs.sh)
#   -> -DCUDNN_ROOT=/usr/lib/python3/dist-packages/nvidia/cudnn -DNCCL_ROOT=...
#
# --cmake prints one hint per line (what cmake/cuda_libs.cmake reads at configure time).
# The Python interpreter is $DL_PYTHON, else python3, else /usr/bin/python3; a package that is not
# installed prints nothing. Exits 0 even when nothing is found.
set -uo pipefail

sep=" "
[ "${1:-}" = "--cmake" ] && sep=$'\n'

pythons=()
[ -n "${DL_PYTHON:-}" ] && pythons+=("$DL_PYTHON")
command -v python3 >/dev/null 2>&1 && pythons+=("$(command -v python3)")
[ -x /usr/bin/python3 ] && pythons+=(/usr/bin/python3)

found_cudnn="" found_nccl=""
for py in "${pythons[@]}"; do
  for pkg in cudnn nccl; do
    var="found_$pkg"
    [ -n "${!var}" ] && continue
    # nvidia/ is a namespace package: __path__ names the folder holding include/ and lib/.
    dir=$("$py" -c "import nvidia.$pkg as m; print(list(m.__path__)[0])" 2>/dev/null) || continue
    [ -d "$dir/lib" ] && printf -v "$var" '%s' "$dir"
  done
done

out=()
[ -n "$found_cudnn" ] && out+=("-DCUDNN_ROOT=$found_cudnn")
[ -n "$found_nccl" ] && out+=("-DNCCL_ROOT=$found_nccl")
if [ ${#out[@]} -gt 0 ]; then
  (IFS="$sep"; printf '%s\n' "${out[*]}")
fi
exit 0

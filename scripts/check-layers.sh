#!/usr/bin/env bash
# Fails on an include that climbs a layer of lib/layers.txt (the table lib/CMakeLists.txt links
# by): a file of a lower layer including a header of a higher one, a tool core including another
# core's headers, a tool including a layer or core its `tool` line does not link, or a header of a
# folder no layer names. kernels/ belongs with dl/backend. Prints file:line: what climbs, where.
# Usage: scripts/check-layers.sh [SOURCE_DIR]   (ctest runs it as `layers`)
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
table="$root/lib/layers.txt"

declare -A level   # folder or layer name -> height (base 0, ...; every core one above the last layer)
declare -A is_core # core folder -> 1
declare -A tool_uses
n=0
while read -r kind rest; do
  case "$kind" in
    layer)
      read -r name _target folders <<<"$rest"
      level[$name]=$n
      for f in $folders; do level[$f]=$n; done
      n=$((n + 1)) ;;
    cores)
      for f in $rest; do level[$f]=$n; is_core[$f]=1; done ;;
    tool)
      read -r name uses <<<"$rest"
      tool_uses[$name]=$uses ;;
  esac
done < <(grep -E '^(layer|cores|tool) ' "$table")
core_level=$n

failures=0
fail() {
  echo "$1: $2" >&2
  failures=$((failures + 1))
}

# Every `#include "dl/<folder>/..."` of the given files, as file:line:folder.
includes() {
  grep -HnoE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"dl/[A-Za-z0-9_]+/' "$@" 2>/dev/null |
    sed -E 's|^([^:]*):([0-9]+):.*"dl/([A-Za-z0-9_]+)/$|\1:\2:\3|' || true
}

# lib/dl/<folder>/ and kernels/ (the backend's CUDA kernels).
check_library_file() {  # file folder
  local file=$1 from=$2 where to
  while IFS=: read -r _ line to; do
    where="${file#"$root"/}:$line"
    if [[ -z "${level[$to]+x}" ]]; then
      fail "$where" "includes dl/$to/, a folder no layer of lib/layers.txt names"
    elif ((level[$to] > level[$from])); then
      fail "$where" "dl/$from/ includes dl/$to/, which lies in a higher layer (lib/layers.txt): move the code down, or pass what it needs in from above"
    elif [[ -n "${is_core[$from]:-}" && -n "${is_core[$to]:-}" && "$to" != "$from" ]]; then
      fail "$where" "tool core dl/$from/ includes tool core dl/$to/: what two tools share belongs in a layer below the cores (lib/layers.txt)"
    fi
  done < <(includes "$file")
}

for dir in "$root"/lib/dl/*/; do
  from=$(basename "$dir")
  if [[ -z "${level[$from]+x}" ]]; then
    fail "lib/dl/$from/" "is in no layer of lib/layers.txt"
    continue
  fi
  while IFS= read -r -d '' file; do check_library_file "$file" "$from"; done \
    < <(find "$dir" -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' -o -name '*.h' \) -print0)
done
while IFS= read -r -d '' file; do check_library_file "$file" backend; done \
  < <(find "$root/kernels" -type f \( -name '*.cu' -o -name '*.cuh' -o -name '*.hpp' -o -name '*.h' \) -print0 2>/dev/null)

# tools/<name>/: a listed core, or a layer no higher than the highest thing the tool links (a
# core links every layer).
for dir in "$root"/tools/*/; do
  tool=$(basename "$dir")
  [[ -f "$dir/main.cpp" ]] || continue
  if [[ -z "${tool_uses[$tool]+x}" ]]; then
    fail "tools/$tool/" "has no \`tool $tool ...\` line in lib/layers.txt"
    continue
  fi
  top=-1
  declare -A linked=()
  for use in ${tool_uses[$tool]}; do
    linked[$use]=1
    h=${level[$use]:-$core_level}
    ((h > top)) && top=$h
  done
  ((top >= core_level)) && top=$((core_level - 1))
  while IFS= read -r -d '' file; do
    while IFS=: read -r _ line to; do
      where="${file#"$root"/}:$line"
      if [[ -z "${level[$to]+x}" ]]; then
        fail "$where" "includes dl/$to/, a folder no layer of lib/layers.txt names"
      elif [[ -n "${is_core[$to]:-}" && -z "${linked[$to]:-}" ]]; then
        fail "$where" "$tool includes tool core dl/$to/, which it does not link: add $to to its \`tool\` line in lib/layers.txt, or use what the cores it links offer"
      elif [[ -z "${is_core[$to]:-}" ]] && ((level[$to] > top)); then
        fail "$where" "$tool includes dl/$to/, above what it links (${tool_uses[$tool]}): add it to its \`tool\` line in lib/layers.txt"
      fi
    done < <(includes "$file")
  done < <(find "$dir" -type f \( -name '*.cpp' -o -name '*.hpp' \) -print0)
  unset linked
done

if ((failures > 0)); then
  echo "check-layers: $failures include(s) climb a layer (lib/layers.txt; docs/ARCHITECTURE.md, 'Layers')" >&2
  exit 1
fi
echo "check-layers: every include of lib/dl, kernels and tools stays within its layer"

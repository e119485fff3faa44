#!/usr/bin/env bash
# The second line behind the compiler (docs/ARCHITECTURE.md): each library of lib/libraries.txt
# compiles with only its own and its dependencies' include roots, so a climbing include does not
# compile; this script fails on what a path trick could still get past that, and says where:
# - an include of a dl/<folder>/ header (with quotes or angle brackets) from a library that does
#   not link the folder's library, directly or through what it links;
# - any include in lib/, kernels/ or tools/ that names a path with "..", or that names lib/ or
#   another library's root (lib/train/include/...), instead of "dl/<folder>/...";
# - a folder under lib/<name>/{include,src}/dl/ that the library's line does not declare, a folder
#   declared by two libraries, a lib/<name>/ with no line;
# - a tool including a library its `tool` line does not link.
# kernels/ belongs to the device library. Prints file:line: what, and why.
# With a build folder, it also shows that the compiler is the first line: a file of dl_nn that
# includes dl_train's header with quotes, angle brackets or a relative path does not compile with
# dl_nn's flags (from BUILD/compile_commands.json), while a header of a library it links does.
# Usage: scripts/check-layers.sh [SOURCE_DIR [BUILD_DIR]]   (ctest runs it as `layers`)
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
build=${2:-}
table="$root/lib/libraries.txt"

declare -A owner    # folder -> library
declare -A deps     # library -> the libraries its line names
declare -A folders  # library -> its folders
declare -A tool_uses
libs=()
failures=0
fail() {
  echo "$1: $2" >&2
  failures=$((failures + 1))
}

while read -r kind name rest; do
  case "$kind" in
    lib)
      libs+=("$name")
      folders[$name]=${rest%%:*}
      deps[$name]=${rest#*:}
      for f in ${folders[$name]}; do
        [[ -n "${owner[$f]:-}" ]] && fail "lib/libraries.txt" "folder $f is declared by ${owner[$f]} and $name"
        owner[$f]=$name
      done ;;
    tool) tool_uses[$name]=$rest ;;
  esac
done < <(grep -E '^(lib|tool) ' "$table")

# closure LIB: LIB and every library it links, directly or not.
declare -A closure
closure_of() {
  local lib=$1 d out=" $1 "
  for d in ${deps[$lib]}; do
    [[ -z "${closure[$d]+x}" ]] && closure_of "$d"
    out+="${closure[$d]} "
  done
  closure[$lib]=$out
}
for lib in "${libs[@]}"; do closure_of "$lib"; done

# Every #include of the given file, as line<TAB>path (the text between the quotes or brackets).
includes_of() {
  grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]' "$1" 2> /dev/null |
    sed -E 's/^([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]([^">]*)[">].*/\1\t\2/' || true
}

# check_file FILE ALLOWED_LIBS WHAT: every include of FILE against the libraries it may use.
check_file() {
  local file=$1 allowed=$2 what=$3 line path folder lib where
  while IFS=$'\t' read -r line path; do
    where="${file#"$root"/}:$line"
    case "$path" in
      *..*) fail "$where" "includes \"$path\": a path with '..' climbs past the include roots; include \"dl/<folder>/...\"" ; continue ;;
      lib/* | */include/dl/* | */src/dl/*) fail "$where" "includes \"$path\" by its place in the tree; include \"dl/<folder>/...\" of a library this one links" ; continue ;;
      dl/*) ;;
      *) continue ;;  # the standard library, third-party headers, a kernel's own .cuh
    esac
    folder=${path#dl/}
    folder=${folder%%/*}
    lib=${owner[$folder]:-}
    if [[ -z "$lib" ]]; then
      fail "$where" "includes $path: dl/$folder/ is no folder of lib/libraries.txt"
    elif [[ " $allowed " != *" $lib "* ]]; then
      fail "$where" "$what includes $path of library $lib, which it does not link (lib/libraries.txt): move the code down, or pass what it needs in from above"
    fi
  done < <(includes_of "$file")
}

sources() { find "$@" -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.inc' \) -print0 2> /dev/null; }

for lib in "${libs[@]}"; do
  dir="$root/lib/$lib"
  [[ -d "$dir" ]] || { fail "lib/libraries.txt" "library $lib has no folder lib/$lib/"; continue; }
  for sub in "$dir"/include/dl/* "$dir"/src/dl/*; do
    [[ -d "$sub" ]] || continue
    f=$(basename "$sub")
    [[ " ${folders[$lib]} " == *" $f "* ]] ||
      fail "${sub#"$root"/}/" "is no folder of \`lib $lib\` in lib/libraries.txt: declare it there or move it to its library"
  done
  while IFS= read -r -d '' file; do check_file "$file" "${closure[$lib]}" "library $lib"; done < <(sources "$dir")
done
for dir in "$root"/lib/*/; do
  name=$(basename "$dir")
  [[ -n "${folders[$name]+x}" ]] || fail "lib/$name/" "has no \`lib $name\` line in lib/libraries.txt"
done
while IFS= read -r -d '' file; do check_file "$file" "${closure[device]}" "kernels/ (the device library)"; done < <(sources "$root/kernels")

for dir in "$root"/tools/*/; do
  tool=$(basename "$dir")
  [[ -f "$dir/main.cpp" ]] || continue
  if [[ -z "${tool_uses[$tool]+x}" ]]; then
    fail "tools/$tool/" "has no \`tool $tool ...\` line in lib/libraries.txt"
    continue
  fi
  allowed=""
  for use in ${tool_uses[$tool]}; do allowed+="${closure[$use]:-} "; done
  while IFS= read -r -d '' file; do check_file "$file" "$allowed" "tool $tool"; done < <(sources "$dir")
done

# planted INCLUDE: compiles one line including it with the flags of dl_nn's sources (a file of
# lib/nn/src, or a unity batch of dl_nn: cmake/unity.cmake writes them to unity/dl_nn/), from lib/nn/src/dl/nn/ (where a relative include is
# resolved); true when it compiles.
planted() {
  local cmd
  cmd=$(python3 - "$build/compile_commands.json" << 'PY'
import json, shlex, sys
for e in json.load(open(sys.argv[1])):
    if "/lib/nn/src/" in e["file"] or "/unity/dl_nn/" in e["file"]:
        args = e.get("arguments") or shlex.split(e["command"])
        out, skip = [], False
        for a in args:  # drop the output and the source; keep the compiler and its flags
            if skip: skip = False; continue
            if a in ("-o", "-c"): skip = True; continue
            out.append(a)
        print(shlex.join(out)); break
PY
)
  [[ -n "$cmd" ]] || { fail "$build/compile_commands.json" "has no compile command of dl_nn"; return 2; }
  (cd "$root/lib/nn/src/dl/nn" && echo "#include $1" | eval "$cmd -fsyntax-only -x c++ -" > /dev/null 2>&1)
}
if [[ -n "$build" ]]; then
  if planted '"dl/backend/backend.hpp"'; then
    for inc in '"dl/train/trainer.hpp"' '<dl/train/trainer.hpp>' '"../train/trainer.hpp"' '"../../../../train/include/dl/train/trainer.hpp"'; do
      if planted "$inc"; then
        fail "lib/nn (compiler)" "#include $inc compiled with dl_nn's flags: dl_train's headers are reachable from a library below it"
      fi
    done
    echo "check-layers: the compiler refuses dl_train's header in dl_nn with quotes, angle brackets and relative paths"
  else
    fail "lib/nn (compiler)" "the control include of dl/backend/backend.hpp does not compile with dl_nn's flags (build folder $build)"
  fi
fi

if ((failures > 0)); then
  echo "check-layers: $failures include(s) outside the libraries' graph (lib/libraries.txt, docs/ARCHITECTURE.md)" >&2
  exit 1
fi
echo "check-layers: every include of lib/, kernels/ and tools/ follows lib/libraries.txt (${#libs[@]} libraries)"

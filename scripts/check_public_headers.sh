#!/usr/bin/env bash
# Fails when a module includes a public header (include/vjit/) that belongs to
# a module it may not depend on (DESIGN.md, "Dependencies point one way").
# check_layering.sh sees calls into another module's .cpp files; this sees the
# rest of a header — its types, exceptions and inline functions — which every
# folder can include.
#
#   scripts/check_public_headers.sh SOURCE_DIR MODULE=ALLOWED,... [MODULE=ALLOWED,...]...
#
# A public header belongs to the folder that implements it: the folder of the
# .cpp files that include it first, before any other header (the file that
# implements a header includes it first). A header no .cpp includes first
# declares nothing implemented out of line (plain types, inline functions) and
# belongs to no folder; a header two folders include first is an error. A
# module's files may include, directly or through other public headers, only
# headers of no folder, of its own folder, or of the folders in its ALLOWED.
set -euo pipefail
export LC_ALL=C

if [[ $# -lt 2 ]]; then
  echo "usage: $0 SOURCE_DIR MODULE=ALLOWED,... ..." >&2
  exit 2
fi
src="$1"
shift

# The vjit/*.h a file includes, one name ("engine.h") a line.
public_includes() { sed -n 's|^[[:space:]]*#[[:space:]]*include[[:space:]]*"vjit/\([a-z_0-9]*\.h\)".*|\1|p' "$1"; }

status=0
declare -A owner
for cpp in "$src"/*/*.cpp; do
  folder="$(basename "$(dirname "$cpp")")"
  case "$folder" in tests | perf | examples | fuzz | python | build*) continue ;; esac
  first="$(sed -n 's|^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*|\1|p' "$cpp" | head -n 1)"
  [[ $first == vjit/* ]] || continue
  header="${first#vjit/}"
  if [[ -n ${owner[$header]:-} && ${owner[$header]} != "$folder" ]]; then
    echo "public headers: vjit/$header is implemented in two folders, ${owner[$header]} and $folder ($cpp)" >&2
    status=1
  fi
  owner[$header]="$folder"
done

# Public headers each public header includes, and the closure of a list.
declare -A includes
for h in "$src"/include/vjit/*.h; do includes[$(basename "$h")]="$(public_includes "$h" | tr '\n' ' ')"; done
closure() {
  local -A seen=()
  local -a todo=("$@")
  while ((${#todo[@]} > 0)); do
    local h="${todo[-1]}"
    unset 'todo[-1]'
    [[ -n ${seen[$h]:-} ]] && continue
    seen[$h]=1
    # shellcheck disable=SC2206  # the list is space-separated header names
    todo+=(${includes[$h]:-})
  done
  printf '%s\n' "${!seen[@]}"
}

for spec in "$@"; do
  IFS='=' read -r module allowed <<<"$spec"
  [[ -d $src/$module ]] || { echo "check_public_headers: no folder '$src/$module'" >&2; exit 2; }
  for file in "$src/$module"/*.h "$src/$module"/*.cpp; do
    [[ -f $file ]] || continue
    mapfile -t direct < <(public_includes "$file")
    ((${#direct[@]} > 0)) || continue
    while read -r header; do
      o="${owner[$header]:-}"
      [[ -z $o || $o == "$module" || ",$allowed," == *",$o,"* ]] && continue
      echo "public headers: $module may not depend on $o (it may use: ${allowed//,/ }), but ${file#"$src"/}" \
        "includes vjit/$header (implemented in $o/)" >&2
      status=1
    done < <(closure "${direct[@]}" | sort)
  done
done
if [[ $status == 0 ]]; then
  echo "public headers: each module includes only public headers of the modules it may depend on"
fi
exit "$status"

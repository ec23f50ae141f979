#!/usr/bin/env bash
# Fails when a module library calls into a module it may not depend on
# (DESIGN.md, "Dependencies point one way"). The build runs it on the module
# libraries after building them (target vjit_layering) and ctest runs it again.
#
#   scripts/check_layering.sh NM MODULE=ARCHIVE=ALLOWED,... [MODULE=ARCHIVE=ALLOWED,...]...
#
# ALLOWED lists every module MODULE may use, directly or not. Each symbol that
# MODULE's archive references without defining it, and that another listed
# module defines, must be defined by an allowed one. Symbols no listed module
# defines (the standard library, Boost, the BLAS libraries) are not checked;
# inline functions and templates are defined in every archive that uses them,
# so only calls into another module's .cpp files count.
set -euo pipefail
export LC_ALL=C

if [[ $# -lt 2 ]]; then
  echo "usage: $0 NM MODULE=ARCHIVE=ALLOWED,... ..." >&2
  exit 2
fi
nm_tool="$1"
shift

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

demangle() { if command -v c++filt >/dev/null 2>&1; then c++filt; else cat; fi; }

declare -A allowed
modules=()
for spec in "$@"; do
  IFS='=' read -r name archive deps <<<"$spec"
  if [[ -z $name || ! -f $archive ]]; then
    echo "check_layering: bad module '$spec' (no archive '$archive')" >&2
    exit 2
  fi
  modules+=("$name")
  allowed[$name]=",$deps,"
  # nm -P: "name type [value size]" per symbol, "archive[member]:" per object file.
  "$nm_tool" -P -g --defined-only "$archive" | awk 'NF >= 2 && length($2) == 1 {print $1}' | sort -u >"$tmp/$name.defined"
  "$nm_tool" -P -u "$archive" | awk 'NF >= 2 && $2 == "U" {print $1}' | sort -u >"$tmp/$name.undefined"
  comm -23 "$tmp/$name.undefined" "$tmp/$name.defined" >"$tmp/$name.needed"
done

status=0
for m in "${modules[@]}"; do
  for o in "${modules[@]}"; do
    [[ $o == "$m" || ${allowed[$m]} == *",$o,"* ]] && continue
    comm -12 "$tmp/$m.needed" "$tmp/$o.defined" >"$tmp/calls"
    if [[ -s $tmp/calls ]]; then
      status=1
      may="${allowed[$m]//,/ }"
      may="${may# }"
      may="${may% }"
      echo "layering: $m may not depend on $o (it may use: ${may:-no other module}), but it calls:" >&2
      demangle <"$tmp/calls" | sed 's/^/  /' >&2
    fi
  done
done
if [[ $status == 0 ]]; then
  echo "layering: each of ${modules[*]} calls only the modules it may depend on"
fi
exit "$status"

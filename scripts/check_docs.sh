#!/usr/bin/env bash
# Checks that the documentation stays short, true to the code and about the
# product (ctest docs.*):
#   scripts/check_docs.sh readme_length   [ROOT]  README.md has at most 300 lines
#   scripts/check_docs.sh no_project_talk [ROOT]  README.md and docs/ name no issue numbers,
#                                                 sessions or other talk about how vjit is made
#   scripts/check_docs.sh links           [ROOT]  every relative link of README.md and docs/*.md
#                                                 names a file that exists (and a heading, for #anchors)
#   scripts/check_docs.sh builder_ops     [ROOT]  every public Builder method (include/vjit/program.h)
#                                                 is documented in docs/guide.md as `name(...)`
#   scripts/check_docs.sh readme_example  [ROOT]  the README's C++ example is examples/quickstart.cpp,
#                                                 which the build compiles and ctest runs
#   scripts/check_docs.sh names           [ROOT]  every VJIT_* name the docs use occurs in the code,
#                                                 and every vjit/<header>.h they name is in include/
#   scripts/check_docs.sh selftest                each check rejects a copy of the docs broken on purpose
# ROOT is the source tree (default: this script's repository). Exit 0 when the
# check passes, 1 with the reasons on stderr when it fails.
set -euo pipefail

check="${1:-}"
root="${2:-$(cd "$(dirname "$0")/.." && pwd)}"
max_readme_lines=300

fail() {
  echo "check_docs $check: $*" >&2
  exit 1
}

readme_length() {
  local lines
  lines=$(wc -l <"$root/README.md")
  ((lines <= max_readme_lines)) || fail "README.md has $lines lines, more than $max_readme_lines: move detail into docs/"
  echo "README.md: $lines lines (at most $max_readme_lines)"
}

# Text about how the project is run, not about the product. Commit ids stay
# allowed: they are the provenance of measured figures.
no_project_talk() {
  local pattern='issue #?[0-9]|issues? #[0-9]|the issue|session|\bstop\b|TODO|FIXME|XXX'
  local found
  found=$(grep -rniE "$pattern" "$root/README.md" "$root/docs" --include='*.md' || true)
  [[ -z "$found" ]] || fail "talk about how the project is run (pattern '$pattern'):
$found"
  echo "README.md and docs/: nothing matches '$pattern'"
}

links() {
  python3 - "$root" <<'EOF'
import os, re, sys

root = sys.argv[1]
files = [os.path.join(root, "README.md")] + sorted(
    os.path.join(root, "docs", f) for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md"))

def slug(heading):
    # GitHub's anchors: lower case, punctuation dropped, spaces to hyphens.
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")

def prose_lines(path):
    # The lines outside fenced code blocks, with inline code removed.
    fenced = False
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield number, re.sub(r"`[^`]*`", "", line)

anchor_cache = {}
def heading_lines(path):
    # Anchors need the heading text with its inline code, so read headings raw.
    fenced = False
    for line in open(path, encoding="utf-8"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6}\s", line):
            yield re.sub(r"`", "", line)

def anchors_raw(path):
    if path not in anchor_cache:
        seen, found = {}, set()
        for line in heading_lines(path):
            base = slug(re.match(r"#{1,6}\s+(.*)", line).group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        anchor_cache[path] = found
    return anchor_cache[path]

errors, checked = [], 0
for path in files:
    for number, line in prose_lines(path):
        for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                continue
            checked += 1
            file_part, _, anchor = target.partition("#")
            where = f"{os.path.relpath(path, root)}:{number}: link '{target}'"
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if not os.path.exists(dest):
                errors.append(f"{where}: {os.path.relpath(dest, root)} does not exist")
            elif anchor and dest.endswith(".md") and anchor not in anchors_raw(dest):
                errors.append(f"{where}: {os.path.relpath(dest, root)} has no heading with anchor #{anchor}")
if errors:
    sys.stderr.write("check_docs links:\n  " + "\n  ".join(errors) + "\n")
    sys.exit(1)
print(f"{checked} relative links in {len(files)} files resolve")
EOF
}

# Names the docs share with the code: a VJIT_* variable or CMake option that
# the code no longer has, or a public header that is gone, fails.
names() {
  local in_code in_docs missing=()
  in_code=$(grep -RhoIE '\bVJIT_[A-Z0-9_]+' --exclude-dir=docs --exclude-dir='build*' --exclude-dir=.git \
    --exclude=README.md "$root" | sort -u)
  in_docs=$(grep -rhoE '\bVJIT_[A-Z0-9_]+' "$root/README.md" "$root/docs" --include='*.md' | sort -u)
  while read -r name; do
    [[ -n "$name" ]] && ! grep -qxF "$name" <<<"$in_code" && missing+=("$name")
  done <<<"$in_docs"
  local header
  while read -r header; do
    [[ -n "$header" && ! -f "$root/include/$header" ]] && missing+=("$header")
  done < <(grep -rhoE '\bvjit/[a-z_0-9]+\.h\b' "$root/README.md" "$root/docs" --include='*.md' | sort -u)
  ((${#missing[@]} == 0)) || fail "named in README.md or docs/ but not in the code: ${missing[*]}"
  echo "$(wc -l <<<"$in_docs") VJIT_* names of the docs occur in the code; every vjit/*.h they name exists"
}

# The names of the public member functions of class Builder.
builder_methods() {
  awk '/^class Builder/ { in_class = 1 }
       in_class && /^ public:/ { public = 1; next }
       in_class && /^ private:/ { public = 0 }
       in_class && /^};/ { exit }
       in_class && public && !/^ *\/\// { print }' "$root/include/vjit/program.h" |
    grep -oE '[A-Za-z_][A-Za-z_0-9]*\(' | tr -d '(' |
    grep -vxE 'Builder|std|move|Shape|vector' | sort -u
}

builder_ops() {
  local methods missing=()
  methods=$(builder_methods)
  [[ -n "$methods" ]] || fail "found no public method of class Builder in include/vjit/program.h"
  for name in $methods; do
    grep -qF "\`$name(" "$root/docs/guide.md" || missing+=("$name")
  done
  ((${#missing[@]} == 0)) || fail "Builder methods not documented in docs/guide.md (as \`name(...)\`): ${missing[*]}"
  echo "docs/guide.md documents all $(wc -w <<<"$methods") public Builder methods"
}

# The first ```cpp block of the README, without its fences.
readme_cpp_block() {
  awk '/^```cpp$/ && !done { inside = 1; next }
       inside && /^```$/ { inside = 0; done = 1; next }
       inside { print }' "$root/README.md"
}

readme_example() {
  local example="$root/examples/quickstart.cpp"
  diff <(readme_cpp_block) "$example" >&2 ||
    fail "the README's first C++ block differs from examples/quickstart.cpp (diff above): copy the file into the README"
  echo "README's C++ example is examples/quickstart.cpp ($(wc -l <"$example") lines)"
}

# Each check must reject a copy of the docs broken on purpose, and accept the
# copy before it is broken.
selftest() {
  local self
  self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  copy_tree() {
    rm -rf "$work/tree"
    mkdir -p "$work/tree"
    cp -r "$root/README.md" "$root/docs" "$root/include" "$root/examples" "$work/tree/"
    # Links and names may point anywhere in the repository: keep the rest as links.
    local entry
    for entry in "$root"/*; do
      [[ -e "$work/tree/$(basename "$entry")" ]] || ln -s "$entry" "$work/tree/$(basename "$entry")"
    done
  }
  expect() {  # expect pass|fail CHECK WHAT
    local status=0
    "$self" "$2" "$work/tree" >/dev/null 2>&1 || status=$?
    if [[ "$1" == pass && $status -ne 0 ]] || [[ "$1" == fail && $status -eq 0 ]]; then
      echo "check_docs selftest: $2 should $1 $3" >&2
      exit 1
    fi
    local verb=fails
    [[ "$1" == pass ]] && verb=passes
    echo "selftest: $2 $verb $3"
  }
  local check_name
  for check_name in readme_length no_project_talk links builder_ops readme_example names; do
    copy_tree
    expect pass "$check_name" "on the docs as they are"
  done

  copy_tree
  printf 'padding\n%.0s' $(seq $((max_readme_lines + 1))) >>"$work/tree/README.md"
  expect fail readme_length "with $((max_readme_lines + 1)) more lines"

  copy_tree
  echo "Fixed during the last work session (issue 12)." >>"$work/tree/docs/guide.md"
  expect fail no_project_talk "with a line about a session and an issue"

  copy_tree
  echo "See [the missing page](missing.md)." >>"$work/tree/docs/guide.md"
  expect fail links "with a link to a missing file"
  copy_tree
  echo "See [the guide](docs/guide.md#no-such-heading)." >>"$work/tree/README.md"
  expect fail links "with a link to a missing heading"

  copy_tree
  sed -i 's/^  void push(Value v);.*$/&\n  Value undocumented_op(Value x);/' "$work/tree/include/vjit/program.h"
  expect fail builder_ops "with a Builder method the guide does not name"

  copy_tree
  echo "// changed" >>"$work/tree/examples/quickstart.cpp"
  expect fail readme_example "with examples/quickstart.cpp changed and the README not"

  copy_tree
  # Made at run time: the literal would be found in this script, which is code.
  echo "Set \`VJIT_NO_SUCH_OPTION_$$=1\`." >>"$work/tree/docs/guide.md"
  expect fail names "with a VJIT_* name the code does not have"
  copy_tree
  echo "See \`vjit/no_such_header.h\`." >>"$work/tree/docs/guide.md"
  expect fail names "with a header that does not exist"
}

case "$check" in
  readme_length | no_project_talk | links | builder_ops | readme_example | names | selftest) "$check" ;;
  *)
    echo "usage: scripts/check_docs.sh readme_length|no_project_talk|links|builder_ops|readme_example|names|selftest [ROOT]" >&2
    exit 2
    ;;
esac

#!/usr/bin/env bash
# Every CHORUS_* variable that a part of chorus reads is a row: of the parameter table (the
# library's) or of the table of other parts' variables (lib/core/params_table.c), as
# `chorus-info --variables` lists them; and every row of the second table is read somewhere.
# Reading is found by its forms: getenv("CHORUS_X") in C and C++, a string "CHORUS_X" in Python
# (status names aside), a dollar sign before the name in shell scripts and job scripts.
#   check_variables.sh CHORUS_INFO SOURCE_ROOT
set -euo pipefail
chorus_info=$(realpath "$1") root=$2
cd "$root"
rows=$("$chorus_info" --variables)
files=$(git ls-files 2>/dev/null || find . -type f | sed 's|^\./||')
read_in() { # FILE...: the variables each reads, as "NAME FILE" (one grep per kind of file: a few
  # processes per file made this check take 25 s on a loaded machine)
  local c=() python=() shell=()
  for file in "$@"; do
    case "$file" in
      *.c | *.h | *.cpp) c+=("$file") ;;
      *.py) python+=("$file") ;;
      *.sh | *.sge | *.sbatch | tools/* | test/launch/*) shell+=("$file") ;;
    esac
  done
  {
    [ ${#c[@]} -eq 0 ] || grep -oHE 'getenv\("CHORUS_[A-Z0-9_]+"\)' "${c[@]}"
    [ ${#python[@]} -eq 0 ] ||
      grep -oHE "[\"']CHORUS_[A-Z0-9_]*[A-Z0-9][\"']" "${python[@]}" | grep -v "CHORUS_ERR_"
    [ ${#shell[@]} -eq 0 ] || grep -oHE '\$\{?CHORUS_[A-Z0-9_]*[A-Z0-9]' "${shell[@]}"
  } | sed -E 's/^([^:]*):.*(CHORUS_[A-Z0-9_]*[A-Z0-9]).*$/\2 \1/' || true
}
# shellcheck disable=SC2086
found=$(read_in $(echo "$files" | grep -vE '^(docs|shared)/|\.md$') | sort -u)
failures=0
while read -r name file; do
  if ! grep -q "^$name " <<<"$rows"; then
    echo "$file reads $name, which is no row of lib/core/params_table.c's tables" >&2
    failures=$((failures + 1))
  fi
done <<<"$found"
while read -r name reader; do
  [ "$reader" = library ] && continue
  if ! grep -q "^$name " <<<"$found"; then
    echo "$name is a row of lib/core/params_table.c's other parts' variables, but nothing reads it" >&2
    failures=$((failures + 1))
  fi
done <<<"$rows"
checked=$(wc -l <<<"$found")
if [ "$failures" = 0 ]; then
  echo "variables: $checked reads checked; 1 passed, 0 failed"
else
  echo "variables: $failures problem(s); 0 passed, 1 failed"
  exit 1
fi

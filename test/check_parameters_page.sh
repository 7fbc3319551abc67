#!/usr/bin/env bash
# docs/parameters.md must be what `chorus-info --parameters-markdown` writes from the parameter
# table (lib/core/params_table.c), so that the page cannot drift from the code.
#   check_parameters_page.sh CHORUS_INFO PAGE
set -euo pipefail
chorus_info=$1 page=$2
if diff -u "$page" <("$chorus_info" --parameters-markdown); then
  echo "parameters page: 1 passed, 0 failed"
else
  echo "docs/parameters.md differs from the parameter table: regenerate it with" >&2
  echo "  build/chorus-info --parameters-markdown > docs/parameters.md" >&2
  exit 1
fi

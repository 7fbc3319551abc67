#!/usr/bin/env bash
# The layering of lib/: each folder includes only its own headers and the folders below it,
#   core < transport, gpu, compression, negotiation < collectives < fusion < executor < tuning, lane
#        < coordinator < api,
# with negotiation (what ranks agree on and how it travels) free of MPI: none of its files
# includes mpi.h or calls an MPI function, so that the unit tests drive it with fake ranks,
# and within a folder the modules include one another without a circle (tsort finds none), so
# that calls go one way. A module is x.c with x.h; files that share a module's internal header
# are parts of that module: x_internal.h (the negotiator's files), and lib/executor's backend.h,
# which the executor's backend files share.
#   check_layering.sh SOURCE_ROOT
set -uo pipefail
lib=$1/lib
declare -A level=([core]=0 [transport]=1 [gpu]=1 [compression]=1 [negotiation]=1 [collectives]=2 [fusion]=3
                  [lane]=5 [executor]=4 [tuning]=5 [coordinator]=6 [api]=7)
failed=0

for file in "$lib"/negotiation/*.[ch]; do
  if grep -q '#include <mpi\.h>\|\bMPI_[A-Z][a-z_]*(' "$file"; then
    echo "layering: $file uses MPI; lib/negotiation is free of it"
    failed=1
  fi
done
for folder in "$lib"/*/; do
  name=$(basename "$folder")
  [ -n "${level[$name]:-}" ] || { echo "layering: lib/$name has no level in check_layering.sh"; failed=1; }
done

# The module of a header's name (without .h).
module_named() {
  case $1 in
    backend) echo executor ;;
    *) echo "${1%_internal}" ;;
  esac
}

# The module a file belongs to: that of an internal header it includes, else its own name's.
module_of() {
  local file=$1 internal
  internal=$(grep -ho '#include "\([a-z_]*_internal\|backend\)\.h"' "$file" | head -n 1 |
             sed 's/#include "//; s/\.h"//')
  module_named "${internal:-$(basename "${file%.*}")}"
}

for folder in "${!level[@]}"; do
  edges=""
  for file in "$lib/$folder"/*.[ch]; do
    for used in $(grep -ho '#include "\.\./[a-z]*/' "$file" | sed 's|#include "\.\./||; s|/||' |
                  sort -u); do
      if [ "${level[$used]:-99}" -ge "${level[$folder]}" ]; then
        echo "layering: $file includes lib/$used, which is not below lib/$folder"
        failed=1
      fi
    done
    module=$(module_of "$file")
    for header in $(grep -ho '#include "[a-z_]*\.h"' "$file" | sed 's/#include "//; s/\.h"//'); do
      used=$(module_named "$header")
      [ "$used" != "$module" ] && edges+="$module $used"$'\n'
    done
  done
  if [ -n "$edges" ] && ! printf '%s' "$edges" | tsort >/dev/null 2>"/tmp/tsort.$$"; then
    echo "layering: the modules of lib/$folder include one another in a circle:"
    cat "/tmp/tsort.$$"
    failed=1
  fi
  rm -f "/tmp/tsort.$$"
done
if [ $failed -eq 0 ]; then
  echo "layering: 1 passed, 0 failed"
else
  echo "layering: 0 passed, 1 failed"
fi
exit $failed

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
# Above lib/, the programs: the measuring library (measure/) includes nothing of bench/ or tools/,
# and tools/ nothing of bench/ (bench's options and helpers stay out of installed tools): no header
# of those folders, by its path or by a name an include directory would find, and no meson.build
# there that reaches for bench's files.
#   check_layering.sh SOURCE_ROOT
set -uo pipefail
root=$1
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

# The module of a header's name (without .h), into $named: no subshell, as the loop below asks
# for it once per include (forking for each made this check take 30 s on a loaded machine).
module_named() {
  case $1 in
    backend) named=executor ;;
    *) named=${1%_internal} ;;
  esac
}

# Each file's includes are read once. A file's module is that of an internal header it includes
# (the first), else its own name's.
for folder in "${!level[@]}"; do
  edges=""
  for file in "$lib/$folder"/*.[ch]; do
    mapfile -t includes < <(grep -o '#include "[^"]*"' "$file")
    internal="" headers=()
    declare -A reported=()
    for line in "${includes[@]}"; do
      path=${line#\#include \"}
      path=${path%\"}
      case $path in
        ../*/*)
          used=${path#../}
          used=${used%%/*}
          if [ "${level[$used]:-99}" -ge "${level[$folder]}" ] && [ -z "${reported[$used]:-}" ]; then
            echo "layering: $file includes lib/$used, which is not below lib/$folder"
            reported[$used]=1
            failed=1
          fi ;;
        */*) ;;
        *.h)
          header=${path%.h}
          headers+=("$header")
          case $header in
            *_internal | backend) [ -n "$internal" ] || internal=$header ;;
          esac ;;
      esac
    done
    unset reported
    base=${file##*/}
    module_named "${internal:-${base%.*}}"
    module=$named
    for header in "${headers[@]}"; do
      module_named "$header"
      [ "$named" != "$module" ] && edges+="$module $named"$'\n'
    done
  done
  if [ -n "$edges" ] && ! printf '%s' "$edges" | tsort >/dev/null 2>"/tmp/tsort.$$"; then
    echo "layering: the modules of lib/$folder include one another in a circle:"
    cat "/tmp/tsort.$$"
    failed=1
  fi
  rm -f "/tmp/tsort.$$"
done
for floor in "measure:bench tools" "tools:bench"; do
  folder=${floor%%:*} above=${floor#*:}
  declare -A held=() # a header's name: the folder above that holds it
  for upper in $above; do
    while IFS= read -r name; do
      held[$name]=$upper
    done < <(find "$root/$upper" -name '*.h' -printf '%f\n')
  done
  while IFS= read -r file; do
    while IFS= read -r path; do
      from=""
      for upper in $above; do
        [[ $path == "$upper/"* || $path == *"/$upper/"* ]] && from=$upper
      done
      [ -z "$from" ] && [ ! -e "${file%/*}/$path" ] && from=${held[${path##*/}]:-}
      if [ -n "$from" ]; then
        echo "layering: $file includes $path, of $from/, which is above $folder/"
        failed=1
      fi
    done < <(grep -o '#include "[^"]*"' "$file" | sed 's/#include "//; s/"$//')
  done < <(find "$root/$folder" -name '*.[ch]')
  unset held
  if grep -rhv --include=meson.build '^ *#' "$root/$folder" | grep -qE '\bbench_|bench/'; then
    echo "layering: a meson.build of $folder/ uses bench/'s files"
    failed=1
  fi
done
if [ $failed -eq 0 ]; then
  echo "layering: 1 passed, 0 failed"
else
  echo "layering: 0 passed, 1 failed"
fi
exit $failed

"""The Python binding's ctypes declarations against the C library's own layout.

test/python/abi_layout.c, compiled against chorus.h, prints every public struct's size and
fields (offset, size) and every enum value the binding copies; this compares them with
python/chorus/_library.py, so that a struct or enum changed on one side only fails here.
Also checks that every enum value the header defines for dtypes, ops and collectives has its
Python constant (the *_COUNT values bound them).

    python3 test_abi.py PATH/TO/abi_layout"""
import ctypes
import subprocess
import sys

from chorus import _library as c


def main(program):
    lines = subprocess.run([program], check=True, capture_output=True, text=True).stdout
    problems, checked = [], 0
    structs = {"Tensor": c.Tensor, "OpArgs": c.OpArgs, "Topology": c.Topology,
               "InitOptions": c.InitOptions}
    fields_seen = {name: [] for name in structs}
    for line in lines.splitlines():
        kind, name, *rest = line.split()
        checked += 1
        if kind == "struct":
            size = ctypes.sizeof(structs[name])
            if size != int(rest[0]):
                problems.append(f"{name}: ctypes size {size}, C size {rest[0]}")
        elif kind == "field":
            field, offset, size = rest[0], int(rest[1]), int(rest[2])
            fields_seen[name].append(field)
            descriptor = getattr(structs[name], field, None)
            if descriptor is None:
                problems.append(f"{name}.{field}: missing in the binding")
            elif (descriptor.offset, descriptor.size) != (offset, size):
                problems.append(f"{name}.{field}: ctypes offset {descriptor.offset} size "
                                f"{descriptor.size}, C offset {offset} size {size}")
        elif kind == "value":
            value = int(rest[0])
            if name.endswith("_COUNT"):
                continue
            if getattr(c, name, None) != value:
                problems.append(f"{name}: binding {getattr(c, name, None)}, C {value}")
    for name, struct in structs.items():
        declared = [field[0] for field in struct._fields_]
        if declared != fields_seen[name]:
            problems.append(f"{name}: binding fields {declared}, C fields {fields_seen[name]}")
    counts = {line.split()[1]: int(line.split()[2]) for line in lines.splitlines()
              if line.startswith("value") and line.split()[1].endswith("_COUNT")}
    for count, names in (("DTYPE_COUNT", ["UINT8", "INT8", "INT32", "INT64", "FLOAT16",
                                          "BFLOAT16", "FLOAT32", "FLOAT64", "INT16", "UINT16",
                                          "BOOL"]),
                         ("OP_COUNT", ["SUM", "AVERAGE", "MIN", "MAX", "PRODUCT", "ADASUM"]),
                         ("COLLECTIVE_COUNT", ["ALLREDUCE", "BROADCAST", "ALLGATHER",
                                               "REDUCESCATTER", "ALLTOALL"])):
        if sorted(getattr(c, n) for n in names) != list(range(counts[count])):
            problems.append(f"{count} is {counts[count]}: the binding names {len(names)} values")
    for problem in problems:
        print("ABI mismatch:", problem)
    print(f"abi: {checked - len(problems)} passed, {len(problems)} failed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

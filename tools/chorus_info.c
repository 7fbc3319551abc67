/*
 * chorus-info — prints chorus's build facts, every parameter with its value and where the value
 * came from, and the algorithm tables. It reads the same environment a rank would; it does not
 * start MPI. Exits 1 when a parameter is malformed, naming it.
 */
#include "../lib/collectives/algorithms.h"
#include "../lib/core/params.h"
#include "../lib/gpu/gpu.h"

#include <stdio.h>
#include <string.h>

extern char **environ;

int main(int argc, char **argv)
{
    const char *overrides = argc > 1 ? argv[1] : NULL;
    if (overrides != NULL && (strcmp(overrides, "-h") == 0 || strcmp(overrides, "--help") == 0)) {
        printf("usage: chorus-info [\"NAME=VALUE;...\"]\n"
               "Prints chorus's parameters as a rank would see them, from the environment and\n"
               "the optional overrides (the syntax of chorus_init_options.parameters).\n");
        return 0;
    }
    struct param_set set;
    char error[1024];
    if (params_load(&set, environ, overrides, error, sizeof error) != CHORUS_OK) {
        fprintf(stderr, "chorus-info: %s\n", error);
        return 1;
    }
    printf("chorus %d.%d.%d\n", CHORUS_VERSION_MAJOR, CHORUS_VERSION_MINOR,
           CHORUS_VERSION_PATCH);
    printf("GPU support (CUDA + NCCL): %s", gpu_compiled() ? "built" : "not built");
    if (gpu_compiled())
        printf(", %d device(s) visible", gpu_device_count());
    printf("\n\nParameters (wire-shaping ones are taken from rank 0 at init):\n");
    printf("  %-31s %-12s %-20s %s\n", "name", "value", "source", "meaning");
    for (size_t i = 0; i < param_count; i++) {
        char value[PARAM_TEXT_LENGTH];
        params_format_value(&set.values, i, value, sizeof value);
        printf("  %-31s %-12s %-20s %s%s\n", param_table[i].name, value[0] ? value : "\"\"",
               param_source_name(set.sources[i]), param_table[i].help,
               param_table[i].shapes_wire ? " [wire]" : "");
    }
    if (set.unknown_variables[0] != '\0')
        printf("\nUnknown CHORUS_* variables (ignored): %s\n", set.unknown_variables);
    const chorus_collective collectives[] = {CHORUS_ALLREDUCE, CHORUS_BROADCAST,
                                             CHORUS_ALLGATHER};
    printf("\nAlgorithms (CHORUS_<COLLECTIVE>_ALGO=name forces one; auto uses the tuning "
           "table):\n");
    for (size_t c = 0; c < ARRAY_LENGTH(collectives); c++) {
        size_t count = 0;
        const struct algorithm *table = algorithm_table(collectives[c], &count);
        for (size_t i = 0; i < count; i++)
            printf("  %-10s %-19s %s\n", chorus_collective_name(collectives[c]), table[i].name,
                   table[i].summary);
    }
    return 0;
}

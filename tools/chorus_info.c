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

static void print_bytes(char *text, size_t size, size_t bytes)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB"};
    size_t unit = 0;
    while (unit + 1 < ARRAY_LENGTH(units) && bytes >= 1024 && bytes % 1024 == 0) {
        bytes /= 1024;
        unit++;
    }
    snprintf(text, size, "%zu %s", bytes, units[unit]);
}

/* A row's sizes as an interval: "[0 B, 16 KiB]", "(16 KiB, 1 MiB)" for 16 KiB + 1 to 1 MiB - 1,
 * "[16 MiB, -)". */
static void print_interval(char *text, size_t size, size_t min_bytes, size_t max_bytes)
{
    char low[24], high[24] = "-";
    bool open_low = min_bytes % 1024 == 1 && min_bytes > 1;
    bool open_high = max_bytes % 1024 == 1023;
    print_bytes(low, sizeof low, open_low ? min_bytes - 1 : min_bytes);
    if (max_bytes != 0)
        print_bytes(high, sizeof high, open_high ? max_bytes + 1 : max_bytes);
    snprintf(text, size, "%c%s, %s%c", open_low ? '(' : '[', low, high,
             max_bytes == 0 || open_high ? ')' : ']');
}

/* The selection table, a row a line: its conditions, the algorithm, and what chose it. A call
 * runs the first row whose conditions hold; an algorithm that cannot run it declines, and the
 * next row runs. */
static void print_selection_table(void)
{
    static const char *const placements[] = {"any", "shared host", "one host"};
    size_t count = 0;
    const struct selection_rule *rules = selection_rules(&count);
    printf("\nSelection table (first row that holds; an algorithm that declines gives way to the "
           "next):\n");
    printf("  %-10s %-19s %-12s %-8s %-22s %s\n", "collective", "algorithm", "placement", "ranks",
           "bytes", "why");
    for (size_t i = 0; i < count; i++) {
        const struct selection_rule *rule = &rules[i];
        char ranks[32] = "any", bytes[64] = "any", high[24];
        if (rule->min_ranks || rule->max_ranks)
            snprintf(ranks, sizeof ranks, "%d-%s", rule->min_ranks ? rule->min_ranks : 1,
                     rule->max_ranks ? (snprintf(high, sizeof high, "%d", rule->max_ranks), high)
                                     : "");
        if (rule->min_bytes || rule->max_bytes)
            print_interval(bytes, sizeof bytes, rule->min_bytes, rule->max_bytes);
        printf("  %-10s %-19s %-12s %-8s %-22s %s\n", chorus_collective_name(rule->collective),
               algorithm_name(rule->collective, rule->algorithm), placements[rule->placement],
               ranks, bytes, rule->provenance);
    }
}

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
    printf("chorus %s (library loaded), built against chorus.h %d.%d.%d\n", chorus_version(),
           CHORUS_VERSION_MAJOR, CHORUS_VERSION_MINOR, CHORUS_VERSION_PATCH);
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
    const chorus_collective collectives[] = {CHORUS_ALLREDUCE, CHORUS_BROADCAST, CHORUS_ALLGATHER};
    printf("\nAlgorithms (CHORUS_<COLLECTIVE>_ALGO=name forces one; auto uses the selection "
           "table):\n");
    for (size_t c = 0; c < ARRAY_LENGTH(collectives); c++) {
        size_t count = 0;
        const struct algorithm *table = algorithm_table(collectives[c], &count);
        for (size_t i = 0; i < count; i++)
            printf("  %-10s %-19s %s\n", chorus_collective_name(collectives[c]),
                   algorithm_name(collectives[c], (int)i), table[i].summary);
    }
    print_selection_table();
    return 0;
}

/*
 * chorus-info — prints chorus's version and those of what it was built with (MPI, hwloc, CUDA,
 * NCCL), this host's topology as chorus sees it, every parameter with its value and where the
 * value came from, the algorithm tables, and which algorithm runs at which size for a job of
 * --np ranks with --ranks-per-host on each host (under mpirun: the job's own). It reads the same
 * environment a rank would; it does not start MPI. Exits 1 when a parameter is malformed, naming
 * it, and 2 on a bad option.
 */
#include "../lib/collectives/algorithms.h"
#include "../lib/collectives/tuning.h"
#include "../lib/core/params.h"
#include "../lib/gpu/gpu.h"
#include "../lib/gpu/gpu_capability.h"
#include "../lib/transport/point_to_point.h"

#include <getopt.h>
#include <hwloc.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
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
static void print_rules(const struct selection_rule *rules, size_t count)
{
    static const char *const placements[] = {"any", "shared host", "one host"};
    printf("  %-10s %-19s %-12s %-8s %-22s %s\n", "collective", "algorithm", "placement", "ranks",
           "bytes", "why");
    for (size_t i = 0; i < count; i++) {
        const struct selection_rule *rule = &rules[i];
        char ranks[40] = "", bytes[64] = "any", high[24];
        if (rule->min_ranks || rule->max_ranks)
            snprintf(ranks, sizeof ranks, "%d-%s%s", rule->min_ranks ? rule->min_ranks : 1,
                     rule->max_ranks ? (snprintf(high, sizeof high, "%d", rule->max_ranks), high)
                                     : "",
                     rule->power_of_two_ranks ? " 2^k" : "");
        if (rule->local_ranks)
            snprintf(ranks + strlen(ranks), sizeof ranks - strlen(ranks), "%s%d/host",
                     ranks[0] ? " " : "", rule->local_ranks);
        if (ranks[0] == '\0')
            snprintf(ranks, sizeof ranks, "any");
        if (rule->min_bytes || rule->max_bytes)
            print_interval(bytes, sizeof bytes, rule->min_bytes, rule->max_bytes);
        printf("  %-10s %-19s %-12s %-8s %-22s %s\n", chorus_collective_name(rule->collective),
               algorithm_name(rule->collective, rule->algorithm), placements[rule->placement],
               ranks, bytes, rule->provenance);
    }
}

static void print_selection_table(const char *tuning_file)
{
    size_t count = 0;
    const struct selection_rule *rules = selection_tuned_rules(&count);
    if (count > 0) {
        printf("\nRows from CHORUS_TUNING_FILE %s (tried before the built-in table):\n",
               tuning_file);
        print_rules(rules, count);
    }
    rules = selection_rules(&count);
    printf("\nSelection table (first row that holds; an algorithm that declines gives way to the "
           "next):\n");
    print_rules(rules, count);
}

static int count_objects(hwloc_topology_t topology, hwloc_obj_type_t type)
{
    int count = hwloc_get_nbobjs_by_type(topology, type);
    return count > 0 ? count : 0;
}

static void print_versions(void)
{
    printf("chorus %s (library loaded), built against chorus.h %d.%d.%d\n", chorus_version(),
           CHORUS_VERSION_MAJOR, CHORUS_VERSION_MINOR, CHORUS_VERSION_PATCH);
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
    transport_mpi_library(mpi, sizeof mpi);
    printf("MPI: %s (MPI %d.%d headers)\n", mpi, MPI_VERSION, MPI_SUBVERSION);
    unsigned hwloc = hwloc_get_api_version();
    printf("hwloc: %u.%u.%u\n", hwloc >> 16, (hwloc >> 8) & 0xff, hwloc & 0xff);
    char gpu[160];
    gpu_versions(gpu, sizeof gpu);
    printf("GPU: %s\n", gpu);
#ifdef __OPTIMIZE__
    const char *optimized = "optimized";
#else
    const char *optimized = "not optimized";
#endif
    printf("Build: compiler %s, %s, GPU path %s\n", __VERSION__, optimized,
           gpu_compiled() ? "built" : "not built");
}

static void print_host(void)
{
    hwloc_topology_t topology;
    if (hwloc_topology_init(&topology) != 0 || hwloc_topology_load(topology) != 0) {
        printf("\nThis host: hwloc could not read the topology\n");
        return;
    }
    printf("\nThis host: %d cores, %d hardware threads, %d NUMA node(s), %d package(s), %d GPU(s) "
           "visible\n",
           count_objects(topology, HWLOC_OBJ_CORE), count_objects(topology, HWLOC_OBJ_PU),
           count_objects(topology, HWLOC_OBJ_NUMANODE), count_objects(topology, HWLOC_OBJ_PACKAGE),
           gpu_device_count());
    hwloc_topology_destroy(topology);
}

static void print_plan_row(void *context, chorus_collective collective, size_t from, size_t to,
                           const char *chain)
{
    (void)context;
    char low[24], high[24];
    print_bytes(low, sizeof low, from);
    print_bytes(high, sizeof high, to);
    printf("  %-10s %9s - %-9s %s\n", chorus_collective_name(collective), low, high, chain);
}

static void print_plan(const struct chorus_params *params, int nranks, int local_ranks)
{
    printf("\nAlgorithms by size at %d rank(s), %d per host (first choice, then fallbacks):\n",
           nranks, local_ranks);
    const char *forced[CHORUS_COLLECTIVE_COUNT] = {
        [CHORUS_ALLREDUCE] = params->allreduce_algorithm,
        [CHORUS_BROADCAST] = params->broadcast_algorithm,
        [CHORUS_ALLGATHER] = params->allgather_algorithm,
        [CHORUS_REDUCESCATTER] = params->reducescatter_algorithm,
        [CHORUS_ALLTOALL] = params->alltoall_algorithm};
    for (int c = 0; c < CHORUS_COLLECTIVE_COUNT; c++) {
        bool automatic = strcmp(forced[c], "auto") == 0;
        struct selection_query query = {
            .nranks = nranks,
            .local_ranks = local_ranks,
            .forced = automatic ? -1 : algorithm_find((chorus_collective)c, forced[c])};
        selection_plan((chorus_collective)c, &query, print_plan_row, NULL);
    }
}

static int environment_int(const char *name, int fallback)
{
    const char *value = getenv(name);
    return value != NULL && atoi(value) > 0 ? atoi(value) : fallback;
}

static void usage(FILE *to)
{
    fprintf(to,
            "usage: chorus-info [--np N] [--ranks-per-host L] [--version] [\"NAME=VALUE;...\"]\n"
            "Prints chorus's version and those of MPI, hwloc, CUDA and NCCL, this host's\n"
            "topology, chorus's parameters as a rank would see them (from the environment and\n"
            "the optional overrides, the syntax of chorus_init_options.parameters), the\n"
            "algorithm tables, and which algorithm runs at which size for a job of N ranks, L on\n"
            "each host (default: the job's own under mpirun, else 1 and N).\n"
            "  --np N              ranks in the job\n"
            "  --ranks-per-host L  ranks on each host\n"
            "  --version           the version, and nothing else\n"
            "  --parameters-markdown  the parameter table as docs/parameters.md\n"
            "  -h, --help          this text\n");
}

/* The capability table of GPU reductions (lib/gpu/gpu_capability.h): what NCCL reduces itself
 * and what goes through host memory. */
static void print_gpu_routes(void)
{
    static const char letter[] = {[GPU_ROUTE_NCCL] = 'N', [GPU_ROUTE_NCCL_SCALED] = 'P',
                                  [GPU_ROUTE_HOST] = 'H'};
    printf("\nGPU reductions (N: NCCL's own reduction, P: NCCL's pre-multiplied sum, H: through "
           "host memory):\n  %-9s", "");
    for (int scaled = 0; scaled < 2; scaled++) {
        printf(scaled ? "   with a scale factor: " : "  ");
        for (int op = 0; op < CHORUS_OP_COUNT; op++)
            printf(" %3.3s", chorus_op_name((chorus_op)op));
    }
    printf("\n");
    for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; dtype++) {
        printf("  %-9s", chorus_dtype_name((chorus_dtype)dtype));
        for (int scaled = 0; scaled < 2; scaled++) {
            printf(scaled ? "   %-21s" : "  ", "");
            for (int op = 0; op < CHORUS_OP_COUNT; op++) {
                bool refused = (dtype == CHORUS_BOOL && (op == CHORUS_AVERAGE || scaled)) ||
                               (op == CHORUS_ADASUM &&
                                ((dtype != CHORUS_FLOAT32 && dtype != CHORUS_FLOAT64) || scaled));
                printf("   %c", refused ? '-' : letter[gpu_route_of((chorus_dtype)dtype,
                                                                       (chorus_op)op, scaled)]);
            }
        }
        printf("\n");
    }
    printf("  (-: refused for host and GPU tensors alike; see chorus.h)\n");
}

/* The values a parameter takes, for the documentation. */
static void describe_values(const struct param_definition *definition, char *text, size_t size)
{
    text[0] = '\0';
    if (definition->type == PARAM_ALGORITHM) {
        size_t used = (size_t)snprintf(text, size, "`auto`");
        chorus_collective collective = (chorus_collective)definition->collective;
        for (size_t i = 0; i < algorithm_count(collective) && used < size; i++)
            used += (size_t)snprintf(text + used, size - used, ", `%s`",
                                     algorithm_name(collective, (int)i));
        return;
    }
    static const char *const fixed[] = {
        [PARAM_BYTES] = "bytes (K/M/G suffixes)", [PARAM_COUNT] = "a whole number",
        [PARAM_AREAS] = "`0`, `2`, `4`, `8`, `16`", [PARAM_SECONDS] = "a number >= 0",
        [PARAM_CHUNK] = "`0` or bytes, a power of two from 4K to 256M",
        [PARAM_LOG_LEVEL] = "`error`, `warning`, `info`, `debug`, `trace`",
        [PARAM_PATH] = "a path", [PARAM_COMPRESSION] = "`none`, `fp16`, `bf16`",
        [PARAM_SWITCH] = "`on`, `off`"};
    if (definition->type == PARAM_CHOICE) {
        size_t used = 0;
        for (size_t i = 0; definition->choices[i] != NULL && used < size; i++)
            used += (size_t)snprintf(text + used, size - used, "%s`%s`", i ? ", " : "",
                                     definition->choices[i]);
        return;
    }
    if ((size_t)definition->type < ARRAY_LENGTH(fixed) && fixed[definition->type] != NULL)
        snprintf(text, size, "%s", fixed[definition->type]);
}

/* docs/parameters.md, written from the parameter table (a test compares the checked-in page
 * with this output, so that the page cannot drift from the code). */
static void print_parameters_markdown(void)
{
    printf("# Parameters\n\n"
           "<!-- Written by `chorus-info --parameters-markdown` from lib/core/params.c; the test\n"
           "     parameters_page fails when this page differs. Do not edit by hand. -->\n\n"
           "chorus reads its parameters once, at `chorus_init`, from the environment or from\n"
           "`chorus_init_options.parameters` (`\"NAME=VALUE;...\"`, which takes precedence). A\n"
           "malformed value fails init on every rank, naming the variable and the value.\n"
           "Parameters marked *wire* shape what goes between the ranks: every rank takes rank 0's\n"
           "value. `chorus-info` prints each parameter's value and where it came from.\n\n"
           "A job script's `HOROVOD_*` variables are read as their chorus namesakes\n"
           "(`HOROVOD_FUSION_THRESHOLD`, `HOROVOD_CYCLE_TIME`, `HOROVOD_CACHE_CAPACITY`,\n"
           "`HOROVOD_TIMELINE`, `HOROVOD_STALL_CHECK_TIME_SECONDS`,\n"
           "`HOROVOD_STALL_SHUTDOWN_TIME_SECONDS`, `HOROVOD_LOG_LEVEL`, `HOROVOD_AUTOTUNE`,\n"
           "`HOROVOD_AUTOTUNE_LOG`, `HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE`); the `CHORUS_*` variable\n"
           "wins where both are set.\n\n"
           "| variable | default | values | meaning |\n|---|---|---|---|\n");
    for (size_t i = 0; i < param_count; i++) {
        const struct param_definition *definition = &param_table[i];
        char values[512];
        describe_values(definition, values, sizeof values);
        printf("| `%s` | %s%s%s | %s | %s%s |\n", definition->name,
               definition->default_value[0] ? "`" : "",
               definition->default_value[0] ? definition->default_value : "(empty)",
               definition->default_value[0] ? "`" : "", values, definition->help,
               definition->shapes_wire ? " (*wire*)" : "");
    }
}

int main(int argc, char **argv)
{
    /* Under a launcher, its job: Open MPI's variables, else Hydra's (MPICH and kin). */
    int nranks = environment_int("OMPI_COMM_WORLD_SIZE", environment_int("PMI_SIZE", 1));
    int local_ranks = environment_int("OMPI_COMM_WORLD_LOCAL_SIZE",
                                      environment_int("MPI_LOCALNRANKS", 0));
    static const struct option options[] = {{"np", required_argument, NULL, 'n'},
                                            {"ranks-per-host", required_argument, NULL, 'l'},
                                            {"version", no_argument, NULL, 'v'},
                                            {"parameters-markdown", no_argument, NULL, 'p'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
    int option;
    while ((option = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        char *end = NULL;
        switch (option) {
        case 'n':
        case 'l': {
            long value = strtol(optarg, &end, 10);
            if (end == optarg || *end != '\0' || value < 1 || value > 1 << 24) {
                fprintf(stderr, "chorus-info: --%s takes a whole number >= 1, not '%s'\n",
                        option == 'n' ? "np" : "ranks-per-host", optarg);
                return 2;
            }
            *(option == 'n' ? &nranks : &local_ranks) = (int)value;
            break;
        }
        case 'v':
            printf("chorus %s\n", chorus_version());
            return 0;
        case 'p':
            print_parameters_markdown();
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (argc - optind > 1) {
        fprintf(stderr, "chorus-info: one argument of overrides at most, got '%s'\n",
                argv[optind + 1]);
        return 2;
    }
    if (local_ranks == 0 || local_ranks > nranks)
        local_ranks = nranks;
    const char *overrides = optind < argc ? argv[optind] : NULL;
    struct param_set set;
    char error[1024];
    if (params_load(&set, environ, overrides, error, sizeof error) != CHORUS_OK) {
        fprintf(stderr, "chorus-info: %s\n", error);
        return 1;
    }
    struct tuning_table tuning = {0};
    if (set.values.tuning_file[0] != '\0') {
        char *text = NULL;
        size_t length = 0;
        if (tuning_read_file(set.values.tuning_file, &text, &length, error, sizeof error) !=
                CHORUS_OK ||
            tuning_parse(text, set.values.tuning_file, &tuning, error, sizeof error) !=
                CHORUS_OK) {
            fprintf(stderr, "chorus-info: %s\n", error);
            free(text);
            return 1;
        }
        free(text);
        /* As at init: the file's settings replace defaults, not what the user set. */
        enum param_source deciding[ARRAY_LENGTH(set.sources)];
        memcpy(deciding, set.sources, sizeof deciding);
        if (!tuning_apply_settings(&tuning, &set, deciding, error, sizeof error)) {
            fprintf(stderr, "chorus-info: %s\n", error);
            tuning_free(&tuning);
            return 1;
        }
        selection_use_tuned(tuning.rules, tuning.count);
    }
    print_versions();
    print_host();
    printf("\nParameters (wire-shaping ones are taken from rank 0 at init):\n");
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
    print_selection_table(set.values.tuning_file);
    print_gpu_routes();
    print_plan(&set.values, nranks, local_ranks);
    selection_use_tuned(NULL, 0);
    tuning_free(&tuning);
    return 0;
}

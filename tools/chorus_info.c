/*
 * chorus-info — prints chorus's version and those of what it was built with (MPI, hwloc, CUDA,
 * NCCL), this host's topology as chorus sees it, every parameter with its value and where the
 * value came from, the algorithm tables, and which algorithm runs at which size for a job of
 * --np ranks with --ranks-per-host on each host (under mpirun: the job's own). It reads the same
 * environment a rank would; it does not start MPI. Exits 1 when a parameter is malformed, naming
 * it, and 2 on a bad option.
 */
#include <chorus_query.h>

#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARRAY_LENGTH(array) (sizeof(array) / sizeof((array)[0]))

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
static void print_rules(const chorus_query_settings *settings, bool tuned)
{
    printf("  %-10s %-19s %-12s %-8s %-22s %s\n", "collective", "algorithm", "placement", "ranks",
           "bytes", "why");
    for (size_t i = 0; i < chorus_query_rule_count(settings, tuned); i++) {
        chorus_query_rule rule;
        chorus_query_rule_at(settings, tuned, i, &rule);
        char ranks[40] = "", bytes[64] = "any", high[24];
        if (rule.min_ranks || rule.max_ranks)
            snprintf(ranks, sizeof ranks, "%d-%s%s", rule.min_ranks ? rule.min_ranks : 1,
                     rule.max_ranks ? (snprintf(high, sizeof high, "%d", rule.max_ranks), high)
                                    : "",
                     rule.power_of_two_ranks ? " 2^k" : "");
        if (rule.local_ranks)
            snprintf(ranks + strlen(ranks), sizeof ranks - strlen(ranks), "%s%d/host",
                     ranks[0] ? " " : "", rule.local_ranks);
        if (ranks[0] == '\0')
            snprintf(ranks, sizeof ranks, "any");
        if (rule.min_bytes || rule.max_bytes)
            print_interval(bytes, sizeof bytes, rule.min_bytes, rule.max_bytes);
        printf("  %-10s %-19s %-12s %-8s %-22s %s\n", chorus_collective_name(rule.collective),
               rule.algorithm, rule.placement, ranks, bytes, rule.provenance);
    }
}

static void print_selection_table(const chorus_query_settings *settings, const char *tuning_file)
{
    if (chorus_query_rule_count(settings, true) > 0) {
        printf("\nRows from CHORUS_TUNING_FILE %s (tried before the built-in table):\n",
               tuning_file);
        print_rules(settings, true);
    }
    printf("\nSelection table (first row that holds; an algorithm that declines gives way to the "
           "next):\n");
    print_rules(settings, false);
}

static void print_versions(void)
{
    printf("chorus %s (library loaded), built against chorus.h %d.%d.%d\n", chorus_version(),
           CHORUS_VERSION_MAJOR, CHORUS_VERSION_MINOR, CHORUS_VERSION_PATCH);
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING], hwloc[32], gpu[160];
    chorus_query_versions(mpi, sizeof mpi, hwloc, sizeof hwloc, gpu, sizeof gpu);
    printf("MPI: %s (MPI %d.%d headers)\n", mpi, MPI_VERSION, MPI_SUBVERSION);
    printf("hwloc: %s\n", hwloc);
    printf("GPU: %s\n", gpu);
#ifdef __OPTIMIZE__
    const char *optimized = "optimized";
#else
    const char *optimized = "not optimized";
#endif
    printf("Build: compiler %s, %s, GPU path %s\n", __VERSION__, optimized,
           chorus_gpu_built() ? "built" : "not built");
}

static void print_host(void)
{
    chorus_query_host host;
    chorus_query_this_host(&host);
    if (host.cores < 0) {
        printf("\nThis host: hwloc could not read the topology\n");
        return;
    }
    printf("\nThis host: %d cores, %d hardware threads, %d NUMA node(s), %d package(s), %d GPU(s) "
           "visible\n",
           host.cores, host.hardware_threads, host.numa_nodes, host.packages, host.gpus);
}

struct plan_context {
    chorus_collective collective;
};

static void print_plan_row(void *context, size_t from, size_t to, const char *chain)
{
    const struct plan_context *plan = context;
    char low[24], high[24];
    print_bytes(low, sizeof low, from);
    print_bytes(high, sizeof high, to);
    printf("  %-10s %9s - %-9s %s\n", chorus_collective_name(plan->collective), low, high, chain);
}

static void print_plan(const chorus_query_settings *settings, int nranks, int local_ranks)
{
    printf("\nAlgorithms by size at %d rank(s), %d per host (first choice, then fallbacks):\n",
           nranks, local_ranks);
    for (int c = 0; c < CHORUS_COLLECTIVE_COUNT; c++) {
        struct plan_context plan = {(chorus_collective)c};
        chorus_query_plan(settings, (chorus_collective)c, nranks, local_ranks, print_plan_row,
                          &plan);
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
            "  --variables         every CHORUS_* variable a part of chorus reads, and its reader\n"
            "  -h, --help          this text\n");
}

/* The capability table of GPU reductions (lib/gpu/gpu_capability.h): what NCCL reduces itself
 * and what goes through host memory. */
static void print_gpu_routes(void)
{
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
            for (int op = 0; op < CHORUS_OP_COUNT; op++)
                printf("   %c", chorus_query_gpu_route((chorus_dtype)dtype, (chorus_op)op, scaled));
        }
        printf("\n");
    }
    printf("  (-: refused for host and GPU tensors alike; see chorus.h)\n");
}

/* What a parameter's row allows besides the user: " (*wire*, *tuning file*, *runtime*)". */
static void describe_flags(unsigned flags, const char *mark, char *text, size_t size)
{
    static const struct {
        unsigned flag;
        const char *word;
    } words[] = {{CHORUS_QUERY_SHAPES_WIRE, "wire"},
                 {CHORUS_QUERY_TUNING_FILE, "tuning file"},
                 {CHORUS_QUERY_RUNTIME, "runtime"}};
    size_t used = 0;
    text[0] = '\0';
    for (size_t i = 0; i < ARRAY_LENGTH(words) && used < size; i++)
        if (flags & words[i].flag)
            used += (size_t)snprintf(text + used, size - used, "%s%s%s%s", used ? ", " : " (",
                                     mark, words[i].word, mark);
    if (used > 0 && used + 1 < size)
        snprintf(text + used, size - used, ")");
}

/* docs/parameters.md, written from the parameter table (a test compares the checked-in page
 * with this output, so that the page cannot drift from the code). */
static void print_parameters_markdown(void)
{
    printf("# Parameters\n\n"
           "<!-- Written by `chorus-info --parameters-markdown` from lib/core/params_table.c; the test\n"
           "     parameters_page fails when this page differs. Do not edit by hand. -->\n\n"
           "chorus reads its parameters once, at `chorus_init`, from the environment or from\n"
           "`chorus_init_options.parameters` (`\"NAME=VALUE;...\"`, which takes precedence). A\n"
           "malformed value fails init on every rank, naming the variable and the value.\n"
           "Parameters marked *wire* shape what goes between the ranks: every rank takes rank 0's\n"
           "value. Those marked *tuning file* may be set by a `setting` row of\n"
           "`CHORUS_TUNING_FILE` (they depend on the hosts; `chorus-tune` measures them), those\n"
           "marked *runtime* may change while running (`CHORUS_AUTOTUNE` tries them). A value the\n"
           "user set always wins. `chorus-info` prints each parameter's value and where it came\n"
           "from.\n\n"
           "A job script's `HOROVOD_*` variables are read as their chorus namesakes, each named\n"
           "in its row (same units; the `CHORUS_*` variable wins where both are set).\n\n"
           "| variable | default | values | meaning |\n|---|---|---|---|\n");
    for (size_t i = 0; i < chorus_query_parameter_count(); i++) {
        chorus_query_parameter row;
        chorus_query_parameter_row(i, &row);
        char flags[64], horovod[96] = "";
        describe_flags(row.flags, "*", flags, sizeof flags);
        if (row.horovod != NULL)
            snprintf(horovod, sizeof horovod, "; Horovod's `%s` too", row.horovod);
        printf("| `%s` | %s%s%s | %s | %s%s%s |\n", row.name, row.default_value[0] ? "`" : "",
               row.default_value[0] ? row.default_value : "(empty)",
               row.default_value[0] ? "`" : "", row.values, row.help, horovod, flags);
    }
    printf("\n## Variables of chorus's other parts\n\n"
           "The Python binding, the launcher, the benchmarks, the job scripts and the test tools\n"
           "read these; the library leaves them alone (and does not call them unknown).\n\n"
           "| variable | read by | meaning |\n|---|---|---|\n");
    for (size_t i = 0; i < chorus_query_variable_count(); i++) {
        chorus_query_variable row;
        chorus_query_variable_row(i, &row);
        printf("| `%s` | %s | %s |\n", row.name, row.reader, row.help);
    }
}

/* Every CHORUS_* variable a part of chorus reads, one per line with its reader ("library" for
 * the parameters): what test/check_variables.sh compares with the sources. */
static void print_variables(void)
{
    for (size_t i = 0; i < chorus_query_parameter_count(); i++) {
        chorus_query_parameter row;
        chorus_query_parameter_row(i, &row);
        printf("%s library\n", row.name);
    }
    for (size_t i = 0; i < chorus_query_variable_count(); i++) {
        chorus_query_variable row;
        chorus_query_variable_row(i, &row);
        printf("%s %s\n", row.name, row.reader);
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
                                            {"variables", no_argument, NULL, 'V'},
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
        case 'V':
            print_variables();
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
    chorus_query_settings *settings = NULL;
    if (chorus_query_settings_load(overrides, &settings) != CHORUS_OK) {
        fprintf(stderr, "chorus-info: %s\n", chorus_last_error());
        return 1;
    }
    print_versions();
    print_host();
    printf("\nParameters (wire: taken from rank 0 at init; tuning file: a tuning file may set it; "
           "runtime: autotune may change it):\n");
    printf("  %-31s %-12s %-20s %s\n", "name", "value", "source", "meaning");
    char tuning_file[256] = "";
    for (size_t i = 0; i < chorus_query_parameter_count(); i++) {
        chorus_query_parameter row;
        chorus_query_parameter_row(i, &row);
        char value[256], flags[64];
        const char *source = chorus_query_settings_value(settings, i, value, sizeof value);
        if (strcmp(row.name, "CHORUS_TUNING_FILE") == 0)
            snprintf(tuning_file, sizeof tuning_file, "%s", value);
        describe_flags(row.flags, "", flags, sizeof flags);
        printf("  %-31s %-12s %-20s %s%s\n", row.name, value[0] ? value : "\"\"", source,
               row.help, flags);
    }
    if (chorus_query_settings_unknown(settings)[0] != '\0')
        printf("\nUnknown CHORUS_* variables (ignored): %s\n",
               chorus_query_settings_unknown(settings));
    printf("\nAlgorithms (CHORUS_<COLLECTIVE>_ALGO=name forces one; auto uses the selection "
           "table):\n");
    for (int c = 0; c < CHORUS_COLLECTIVE_COUNT; c++)
        for (int id = 0; id < chorus_query_algorithm_count((chorus_collective)c); id++)
            printf("  %-13s %-19s %s\n", chorus_collective_name((chorus_collective)c),
                   chorus_query_algorithm_name((chorus_collective)c, id),
                   chorus_query_algorithm_summary((chorus_collective)c, id));
    print_selection_table(settings, tuning_file);
    print_gpu_routes();
    print_plan(settings, nranks, local_ranks);
    chorus_query_settings_free(settings);
    return 0;
}

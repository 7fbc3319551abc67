/*
 * query.c — chorus_query.h: the parameter table, the algorithm and selection tables and this
 * host, as chorus's own programs see them, without their reaching into lib/.
 */
#include "../core/common.h" /* first: chorus_query.h's functions are exported */

#include "chorus_query.h"

#include "../collectives/algorithms.h"
#include "../core/log.h"
#include "../core/params.h"
#include "../gpu/gpu.h"
#include "../gpu/gpu_capability.h"
#include "../transport/point_to_point.h"
#include "../tuning/tuning_file.h"

#include <hwloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

/* The values a parameter takes, in Markdown, for docs/parameters.md and chorus-info. */
/* The texts of the algorithm and choice parameters' values, written once for every row (any
 * thread may ask, chorus_query.h), then only read. */
static char algorithm_values[CHORUS_COLLECTIVE_COUNT][256];
static char choice_values[64][128];
static pthread_once_t values_written = PTHREAD_ONCE_INIT;

static void write_values(void)
{
    for (int collective = 0; collective < CHORUS_COLLECTIVE_COUNT; collective++) {
        char *text = algorithm_values[collective];
        size_t used = (size_t)snprintf(text, sizeof algorithm_values[0], "`auto`");
        for (size_t i = 0; i < algorithm_count((chorus_collective)collective) &&
                           used < sizeof algorithm_values[0];
             i++)
            used += (size_t)snprintf(text + used, sizeof algorithm_values[0] - used, ", `%s`",
                                     algorithm_name((chorus_collective)collective, (int)i));
    }
    for (size_t index = 0; index < param_count && index < ARRAY_LENGTH(choice_values); index++) {
        const struct param_definition *definition = &param_table[index];
        if (definition->type != PARAM_CHOICE)
            continue;
        char *text = choice_values[index];
        size_t used = 0;
        for (size_t i = 0; definition->choices[i] != NULL && used < sizeof choice_values[0]; i++)
            used += (size_t)snprintf(text + used, sizeof choice_values[0] - used, "%s`%s`",
                                     i ? ", " : "", definition->choices[i]);
    }
}

static const char *values_of(const struct param_definition *definition)
{
    pthread_once(&values_written, write_values);
    size_t index = (size_t)(definition - param_table);
    if (definition->type == PARAM_ALGORITHM)
        return algorithm_values[definition->collective];
    if (definition->type == PARAM_CHOICE && index < ARRAY_LENGTH(choice_values))
        return choice_values[index];
    static const char *const fixed[] = {
        [PARAM_BYTES] = "bytes (K/M/G suffixes)", [PARAM_COUNT] = "a whole number",
        [PARAM_AREAS] = "`0`, `2`, `4`, `8`, `16`", [PARAM_SECONDS] = "a number >= 0",
        [PARAM_FRACTION] = "a number in (0, 1]",
        [PARAM_CHUNK] = "`0` or bytes, a power of two from 4K to 256M",
        [PARAM_SLOT] = "bytes from `0` to `1M`",
        [PARAM_LOG_LEVEL] = "`error`, `warning`, `info`, `debug`, `trace`",
        [PARAM_PATH] = "a path", [PARAM_COMPRESSION] = "`none`, `fp16`, `bf16`, `int8`, `int4`, `topk`",
        [PARAM_SWITCH] = "`on`, `off`"};
    return (size_t)definition->type < ARRAY_LENGTH(fixed) && fixed[definition->type] != NULL
               ? fixed[definition->type]
               : "";
}

/* chorus_query.h mirrors these enums of params.h: the rows are converted by cast. */
static_assert((int)CHORUS_QUERY_MEASURE_NONE == PARAM_MEASURE_NONE &&
                  (int)CHORUS_QUERY_MEASURE_SIZES == PARAM_MEASURE_SIZES &&
                  (int)CHORUS_QUERY_MEASURE_BURSTS == PARAM_MEASURE_BURSTS,
              "chorus_query_measure mirrors enum param_measure");
static_assert((int)CHORUS_QUERY_WHERE_ANY == PARAM_WHERE_ANY &&
                  (int)CHORUS_QUERY_WHERE_SHARED_HOSTS == PARAM_WHERE_SHARED_HOSTS &&
                  (int)CHORUS_QUERY_WHERE_ONE_HOST == PARAM_WHERE_ONE_HOST &&
                  (int)CHORUS_QUERY_WHERE_SEVERAL_HOSTS == PARAM_WHERE_SEVERAL_HOSTS,
              "chorus_query_where mirrors enum param_where");

size_t chorus_query_parameter_count(void)
{
    return param_count;
}

chorus_status chorus_query_parameter_row(size_t index, chorus_query_parameter *row)
{
    if (index >= param_count || row == NULL)
        return CHORUS_ERR_INVALID_ARGUMENT;
    const struct param_definition *definition = &param_table[index];
    *row = (chorus_query_parameter){
        .name = definition->name,
        .horovod = definition->horovod,
        .default_value = definition->default_value,
        .help = definition->help,
        .values = values_of(definition),
        .flags = (definition->flags & PARAM_SHAPES_WIRE ? CHORUS_QUERY_SHAPES_WIRE : 0u) |
                 (definition->flags & PARAM_TUNING_FILE ? CHORUS_QUERY_TUNING_FILE : 0u) |
                 (definition->flags & PARAM_RUNTIME ? CHORUS_QUERY_RUNTIME : 0u),
        .autotune_candidates = definition->autotune_candidates,
        .autotune_count = definition->autotune_candidates ? PARAM_AUTOTUNE_CANDIDATES : 0,
        .tune_values = definition->tune_values,
        .tune_measure = (chorus_query_measure)definition->tune_measure,
        .tune_where = (chorus_query_where)definition->tune_where,
    };
    return CHORUS_OK;
}

size_t chorus_query_variable_count(void)
{
    return param_elsewhere_count;
}

chorus_status chorus_query_variable_row(size_t index, chorus_query_variable *row)
{
    if (index >= param_elsewhere_count || row == NULL)
        return CHORUS_ERR_INVALID_ARGUMENT;
    const struct param_elsewhere *variable = &param_elsewhere_table[index];
    *row = (chorus_query_variable){
        .name = variable->name, .reader = variable->reader, .help = variable->help};
    return CHORUS_OK;
}

struct chorus_query_settings {
    struct param_set set;
    struct tuning_table tuning;
    struct selection_rows tuned;
    int forced[CHORUS_COLLECTIVE_COUNT];
};

chorus_status chorus_query_settings_load(const char *overrides, chorus_query_settings **result)
{
    char error[1024];
    char *text = NULL;
    chorus_query_settings *settings = calloc(1, sizeof *settings);
    chorus_status status = CHORUS_OK;
    *result = NULL;
    if (settings == NULL) {
        return status_set_last_error(CHORUS_ERR_OUT_OF_MEMORY, "out of memory");
    }
    status = params_load(&settings->set, environ, overrides, error, sizeof error);
    if (status != CHORUS_OK)
        goto out;
    const char *path = settings->set.values.tuning_file;
    if (path[0] != '\0') {
        size_t length = 0;
        status = tuning_read_file(path, &text, &length, error, sizeof error);
        if (status == CHORUS_OK)
            status = tuning_parse(text, path, &settings->tuning, error, sizeof error);
        if (status != CHORUS_OK)
            goto out;
        /* As at init: the file's settings replace defaults, not what the user set. */
        enum param_source deciding[ARRAY_LENGTH(settings->set.sources)];
        memcpy(deciding, settings->set.sources, sizeof deciding);
        if (!tuning_apply_settings(&settings->tuning, &settings->set, deciding, error,
                                   sizeof error)) {
            status = CHORUS_ERR_BAD_PARAMETER;
            goto out;
        }
    }
    settings->tuned = (struct selection_rows){settings->tuning.rules, settings->tuning.count};
    const struct chorus_params *values = &settings->set.values;
    const char *forced[CHORUS_COLLECTIVE_COUNT] = {
        [CHORUS_ALLREDUCE] = values->allreduce_algorithm,
        [CHORUS_BROADCAST] = values->broadcast_algorithm,
        [CHORUS_ALLGATHER] = values->allgather_algorithm,
        [CHORUS_REDUCESCATTER] = values->reducescatter_algorithm,
        [CHORUS_ALLTOALL] = values->alltoall_algorithm};
    for (int c = 0; c < CHORUS_COLLECTIVE_COUNT; c++)
        settings->forced[c] = strcmp(forced[c], "auto") == 0
                                  ? -1
                                  : algorithm_find((chorus_collective)c, forced[c]);
out:
    free(text);
    if (status != CHORUS_OK) {
        chorus_query_settings_free(settings);
        return status_set_last_error(status, "%s", error);
    }
    *result = settings;
    return CHORUS_OK;
}

void chorus_query_settings_free(chorus_query_settings *settings)
{
    if (settings == NULL)
        return;
    tuning_free(&settings->tuning);
    free(settings);
}

const char *chorus_query_settings_value(const chorus_query_settings *settings, size_t index,
                                        char *value, size_t size)
{
    if (settings == NULL || index >= param_count) {
        if (size > 0)
            value[0] = '\0';
        return "?";
    }
    params_format_value(&settings->set.values, index, value, size);
    return param_source_name(settings->set.sources[index]);
}

const char *chorus_query_settings_unknown(const chorus_query_settings *settings)
{
    return settings != NULL ? settings->set.unknown_variables : "";
}

int chorus_query_collective(const char *name)
{
    return name != NULL ? algorithm_collective_find(name) : -1;
}

int chorus_query_algorithm_count(chorus_collective collective)
{
    return (int)algorithm_count(collective);
}

const char *chorus_query_algorithm_name(chorus_collective collective, int id)
{
    return id >= 0 && (size_t)id < algorithm_count(collective) ? algorithm_name(collective, id)
                                                               : NULL;
}

const char *chorus_query_algorithm_summary(chorus_collective collective, int id)
{
    size_t count = 0;
    const struct algorithm *table = algorithm_table(collective, &count);
    return id >= 0 && (size_t)id < count ? table[id].summary : NULL;
}

int chorus_query_algorithm_find(chorus_collective collective, const char *name)
{
    return name != NULL ? algorithm_find(collective, name) : -1;
}

bool chorus_query_algorithm_fits(chorus_collective collective, int id, int nranks,
                                 int local_ranks)
{
    size_t count = 0;
    const struct algorithm *table = algorithm_table(collective, &count);
    return id >= 0 && (size_t)id < count &&
           selection_placement_holds(table[id].needs, nranks, local_ranks);
}

static const struct selection_rule *rules_of(const chorus_query_settings *settings, bool tuned,
                                             size_t *count)
{
    if (!tuned)
        return selection_rules(count);
    *count = settings != NULL ? settings->tuned.count : 0;
    return settings != NULL ? settings->tuned.rules : NULL;
}

size_t chorus_query_rule_count(const chorus_query_settings *settings, bool tuned)
{
    size_t count = 0;
    rules_of(settings, tuned, &count);
    return count;
}

chorus_status chorus_query_rule_at(const chorus_query_settings *settings, bool tuned,
                                   size_t index, chorus_query_rule *rule)
{
    static const char *const placements[] = {"any", "shared host", "one host"};
    size_t count = 0;
    const struct selection_rule *rules = rules_of(settings, tuned, &count);
    if (index >= count || rule == NULL)
        return CHORUS_ERR_INVALID_ARGUMENT;
    const struct selection_rule *row = &rules[index];
    *rule = (chorus_query_rule){.collective = row->collective,
                                .algorithm = algorithm_name(row->collective, row->algorithm),
                                .placement = placements[row->placement],
                                .min_ranks = row->min_ranks,
                                .max_ranks = row->max_ranks,
                                .min_bytes = row->min_bytes,
                                .max_bytes = row->max_bytes,
                                .local_ranks = row->local_ranks,
                                .power_of_two_ranks = row->power_of_two_ranks,
                                .provenance = row->provenance};
    return CHORUS_OK;
}

struct plan_forward {
    void (*row)(void *context, size_t from, size_t to, const char *chain);
    void *context;
};

static void forward_plan_row(void *context, chorus_collective collective, size_t from,
                             size_t to, const char *chain)
{
    (void)collective;
    struct plan_forward *forward = context;
    forward->row(forward->context, from, to, chain);
}

void chorus_query_plan(const chorus_query_settings *settings, chorus_collective collective,
                       int nranks, int local_ranks,
                       void (*row)(void *context, size_t from, size_t to, const char *chain),
                       void *context)
{
    struct selection_query query = {.nranks = nranks,
                                    .local_ranks = local_ranks,
                                    .forced = settings != NULL ? settings->forced[collective] : -1,
                                    .tuned = settings != NULL ? &settings->tuned : NULL};
    struct plan_forward forward = {row, context};
    selection_plan(collective, &query, forward_plan_row, &forward);
}

static int count_objects(hwloc_topology_t topology, hwloc_obj_type_t type)
{
    int count = hwloc_get_nbobjs_by_type(topology, type);
    return count > 0 ? count : 0;
}

void chorus_query_this_host(chorus_query_host *host)
{
    *host = (chorus_query_host){-1, -1, -1, -1, gpu_device_count()};
    hwloc_topology_t topology;
    if (hwloc_topology_init(&topology) != 0)
        return;
    if (hwloc_topology_load(topology) == 0) {
        host->cores = count_objects(topology, HWLOC_OBJ_CORE);
        host->hardware_threads = count_objects(topology, HWLOC_OBJ_PU);
        host->numa_nodes = count_objects(topology, HWLOC_OBJ_NUMANODE);
        host->packages = count_objects(topology, HWLOC_OBJ_PACKAGE);
    }
    hwloc_topology_destroy(topology);
}

void chorus_query_versions(char *mpi, size_t mpi_size, char *hwloc, size_t hwloc_size, char *gpu,
                           size_t gpu_size)
{
    transport_mpi_library(mpi, mpi_size);
    unsigned version = hwloc_get_api_version();
    snprintf(hwloc, hwloc_size, "%u.%u.%u", version >> 16, (version >> 8) & 0xff,
             version & 0xff);
    gpu_versions(gpu, gpu_size);
}

char chorus_query_gpu_route(chorus_dtype dtype, chorus_op op, bool scaled)
{
    static const char letter[] = {[GPU_ROUTE_NCCL] = 'N', [GPU_ROUTE_NCCL_SCALED] = 'P',
                                  [GPU_ROUTE_HOST] = 'H'};
    bool refused = (dtype == CHORUS_BOOL && (op == CHORUS_AVERAGE || scaled)) ||
                   (op == CHORUS_ADASUM && ((dtype != CHORUS_FLOAT16 && dtype != CHORUS_FLOAT32 &&
                                             dtype != CHORUS_FLOAT64) ||
                                            scaled));
    return refused ? '-' : letter[gpu_route_of(dtype, op, scaled)];
}

void *chorus_query_device_alloc(size_t bytes, int device)
{
    return gpu_malloc(bytes ? bytes : 1, device);
}

void chorus_query_device_free(void *memory)
{
    gpu_free(memory);
}

chorus_status chorus_query_device_copy(void *to, const void *from, size_t bytes)
{
    return gpu_copy(to, from, bytes);
}

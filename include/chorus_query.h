/*
 * chorus_query.h — what chorus's own programs (chorus-info, chorus-bench, chorus-tune) ask of
 * the library beyond chorus.h: the parameter table, the algorithms and the selection table
 * (with a tuning file's rows), this host's topology and GPU, and device memory for benchmarks.
 *
 * Internal: not installed, and free to change with any version, since the programs that use it
 * are built and installed with the library. A program outside chorus uses chorus.h alone.
 * Every function may be called from any thread, before chorus_init too; none starts MPI.
 */
#ifndef CHORUS_QUERY_H
#define CHORUS_QUERY_H

#include "chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * The parameter table (docs/parameters.md is written from it).
 */
typedef enum chorus_query_parameter_flags {
    CHORUS_QUERY_SHAPES_WIRE = 1u << 0, /* must agree on every rank: rank 0's is used */
    CHORUS_QUERY_TUNING_FILE = 1u << 1, /* a tuning file's `setting` row may set it */
    CHORUS_QUERY_RUNTIME = 1u << 2,     /* may change while running (autotune) */
} chorus_query_parameter_flags;

/* How chorus-tune measures a parameter, and where it matters. */
typedef enum chorus_query_measure {
    CHORUS_QUERY_MEASURE_NONE,
    CHORUS_QUERY_MEASURE_SIZES,  /* allreduces from 256 KiB through the host's segment, a step */
    CHORUS_QUERY_MEASURE_BURSTS, /* bursts of small allreduces submitted together */
} chorus_query_measure;
typedef enum chorus_query_where {
    CHORUS_QUERY_WHERE_ANY,
    CHORUS_QUERY_WHERE_SHARED_HOSTS,
    CHORUS_QUERY_WHERE_ONE_HOST,
    CHORUS_QUERY_WHERE_SEVERAL_HOSTS,
} chorus_query_where;

typedef struct chorus_query_parameter {
    const char *name;          /* "CHORUS_FUSION_THRESHOLD" */
    const char *horovod;       /* the HOROVOD_* variable read as this one, or NULL */
    const char *default_value; /* as the table writes it: "128M" */
    const char *help;          /* one sentence or two */
    const char *values;        /* the values it takes, in Markdown: "`on`, `off`" */
    unsigned flags;            /* chorus_query_parameter_flags */
    /* Values autotune tries (autotune_count of them, in the parameter's unit), or none. */
    const double *autotune_candidates;
    size_t autotune_count;
    /* Values chorus-tune measures against the default ("" first: the default), NULL-terminated,
     * or NULL; how, and where. */
    const char *const *tune_values;
    chorus_query_measure tune_measure;
    chorus_query_where tune_where;
} chorus_query_parameter;

/* How many parameters there are. */
CHORUS_API size_t chorus_query_parameter_count(void);
/* Row `index` of the table into `row` (static strings). CHORUS_ERR_INVALID_ARGUMENT past the
 * end. */
CHORUS_API chorus_status chorus_query_parameter_row(size_t index, chorus_query_parameter *row);

/* The CHORUS_* variables other parts of chorus read (the Python binding, chorusrun, the
 * benchmarks, job scripts, test tools): the library does not call them unknown. */
typedef struct chorus_query_variable {
    const char *name;   /* "CHORUS_MPIRUN" */
    const char *reader; /* who reads it: "chorusrun" */
    const char *help;
} chorus_query_variable;
CHORUS_API size_t chorus_query_variable_count(void);
/* Row `index` into `row` (static strings). CHORUS_ERR_INVALID_ARGUMENT past the end. */
CHORUS_API chorus_status chorus_query_variable_row(size_t index, chorus_query_variable *row);

/* The parameters as a rank started now would load them: from the environment, the overrides
 * ("NAME=VALUE;...", the syntax of chorus_init_options.parameters, or NULL) and the tuning file
 * they name, applied as init applies it (its settings replace defaults, not what the user
 * set). Opaque; chorus_query_settings_free frees it. On a malformed value or tuning file,
 * CHORUS_ERR_BAD_PARAMETER with the reason in chorus_last_error(), and no settings. */
typedef struct chorus_query_settings chorus_query_settings;
CHORUS_API chorus_status chorus_query_settings_load(const char *overrides,
                                                    chorus_query_settings **settings);
CHORUS_API void chorus_query_settings_free(chorus_query_settings *settings);
/* Parameter `index`'s value as text into `value` (size bytes), and where it came from
 * ("default", "environment", "tuning file", ...): a static string, "?" past the end. */
CHORUS_API const char *chorus_query_settings_value(const chorus_query_settings *settings,
                                                   size_t index, char *value, size_t size);
/* CHORUS_* variables of the environment that name no parameter, space-separated ("" if none). */
CHORUS_API const char *chorus_query_settings_unknown(const chorus_query_settings *settings);

/* ---------------------------------------------------------------------------------------------
 * Algorithms and the selection table.
 */
/* The collective named `name` ("allreduce"), or -1. */
CHORUS_API int chorus_query_collective(const char *name);
/* How many host algorithms `collective` has; their ids are 0 .. count - 1. */
CHORUS_API int chorus_query_algorithm_count(chorus_collective collective);
/* Algorithm `id`'s name and summary (static strings; NULL for an unknown id). */
CHORUS_API const char *chorus_query_algorithm_name(chorus_collective collective, int id);
CHORUS_API const char *chorus_query_algorithm_summary(chorus_collective collective, int id);
/* The id of the algorithm named `name`, or -1. */
CHORUS_API int chorus_query_algorithm_find(chorus_collective collective, const char *name);
/* Whether algorithm `id` can run where a job has `nranks` ranks, `local_ranks` on every host
 * (1: ranks share no host). */
CHORUS_API bool chorus_query_algorithm_fits(chorus_collective collective, int id, int nranks,
                                            int local_ranks);

/* A row of the selection table, its conditions as text as chorus-info prints them. */
typedef struct chorus_query_rule {
    chorus_collective collective;
    const char *algorithm;
    const char *placement; /* "any", "shared host", "one host" */
    int min_ranks, max_ranks;      /* 0: no bound */
    size_t min_bytes, max_bytes;   /* max 0: no bound */
    int local_ranks;               /* 0: any */
    bool power_of_two_ranks;
    const char *provenance;        /* what chose the row */
} chorus_query_rule;

/* The built-in rows (tuned false), or the rows of the settings' tuning file (tuned true; none
 * without one), tried before them. Strings live as long as `settings`, or forever for the
 * built-in rows; `settings` may be NULL for those. */
CHORUS_API size_t chorus_query_rule_count(const chorus_query_settings *settings, bool tuned);
CHORUS_API chorus_status chorus_query_rule_at(const chorus_query_settings *settings, bool tuned,
                                              size_t index, chorus_query_rule *rule);

/* Which algorithms run at which size (powers of two from 1 B to 1 GiB, runs of sizes with the
 * same choice merged) for a job of `nranks` ranks, `local_ranks` on each host, with the
 * settings' forced algorithms and tuned rows: `row` gets each run's sizes and its algorithms,
 * "a, then b" ("a (tuning file)" for a tuned row's). */
CHORUS_API void chorus_query_plan(const chorus_query_settings *settings,
                                  chorus_collective collective, int nranks, int local_ranks,
                                  void (*row)(void *context, size_t from, size_t to,
                                              const char *chain),
                                  void *context);

/* ---------------------------------------------------------------------------------------------
 * This host, the libraries, the GPU.
 */
typedef struct chorus_query_host {
    int cores, hardware_threads, numa_nodes, packages; /* -1: hwloc could not tell */
    int gpus;                                          /* visible devices; 0 without CUDA */
} chorus_query_host;
CHORUS_API void chorus_query_this_host(chorus_query_host *host);
/* The MPI library's version string, hwloc's, and the GPU path's ("CUDA 13.0, NCCL 2.28.3", or
 * why there is none), into the caller's buffers. */
CHORUS_API void chorus_query_versions(char *mpi, size_t mpi_size, char *hwloc, size_t hwloc_size,
                                      char *gpu, size_t gpu_size);
/* How a GPU reduction of `dtype` with `op` (with a scale factor: `scaled`) runs: 'N' NCCL's own
 * reduction, 'P' NCCL's pre-multiplied sum, 'H' through host memory, '-' refused for host and
 * GPU tensors alike. */
CHORUS_API char chorus_query_gpu_route(chorus_dtype dtype, chorus_op op, bool scaled);

/* Device memory for benchmarks: `bytes` on device `device` (NULL without the GPU path or
 * memory); freed by chorus_query_device_free; copies between host and device memory either
 * way. */
CHORUS_API void *chorus_query_device_alloc(size_t bytes, int device);
CHORUS_API void chorus_query_device_free(void *memory);
CHORUS_API chorus_status chorus_query_device_copy(void *to, const void *from, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif

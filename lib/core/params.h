/*
 * params.h — chorus's parameters: one declarative table (name, type, default, help), read once
 * at init from the environment and from chorus_init_options.parameters; and the table of the
 * CHORUS_* variables chorus's other parts read. No other CHORUS_* variable is read anywhere
 * (test/check_variables.sh); the library's only other getenv reads launchers' variables (the
 * job's size under a launcher, startup.c).
 */
#ifndef CHORUS_PARAMS_H
#define CHORUS_PARAMS_H

#include "common.h"

#define PARAM_TEXT_LENGTH 256
/* The largest count a parameter takes: tables sized by one (the response cache) stay far from
 * overflowing their size computations. */
#define PARAM_COUNT_LIMIT ((size_t)1 << 24)
/* The largest PARAM_SLOT: every rank of a host holds two such slots in its shared segment. */
#define PARAM_SLOT_LIMIT ((size_t)1 << 20)

/* CHORUS_NEGOTIATION. Under auto, rounds where every rank shares one host, across hosts up to
 * NEGOTIATION_ROUND_COPIES_UP_TO ranks (each rank's part a message to every other: one step,
 * N-1 messages per rank, lib/coordinator/rounds.h), and from NEGOTIATION_ROUNDS_FROM ranks (an
 * allreduce of the parts: log N steps; the measurements behind the figure are in
 * docs/scaling.md); star between. */
enum negotiation_protocol { NEGOTIATION_AUTO, NEGOTIATION_STAR, NEGOTIATION_ROUNDS };

/* CHORUS_JOINED_GATHERS: what an allgather or a broadcast does while a rank has joined. */
enum joined_gathers {
    JOINED_GATHERS_RUN,  /* a joined rank contributes no rows (chorus.h) */
    JOINED_GATHERS_FAIL, /* fails on every rank, as Horovod's do (chorus.torch sets it) */
};
#define NEGOTIATION_ROUNDS_FROM 64
#define NEGOTIATION_ROUND_COPIES_UP_TO 16

struct chorus_params {
    size_t fusion_threshold;       /* bytes */
    size_t fusion_tensor_limit;    /* bytes: larger tensors are not fused */
    double cycle_time_ms;          /* minimum spacing of negotiation cycles */
    size_t cache_capacity;         /* response cache entries */
    size_t staging_areas;          /* per rank in the host's segment; 0 = the default */
    size_t segment_chunk;          /* bytes of a staging area on one host */
    size_t cross_host_chunk;       /* bytes of a staging area across hosts */
    size_t small_limit;            /* largest payload of an ordered operation's lane */
    int staging_stores;            /* enum staging_stores: auto, cached, streaming */
    int negotiation;               /* enum negotiation_protocol: auto, star, rounds */
    int joined_gathers;            /* enum joined_gathers: run, fail */
    double stall_warning_seconds;  /* 0 disables the warning */
    double stall_shutdown_seconds; /* 0 = never */
    double timeout_seconds;        /* bound on waits for NCCL; 0 = never */
    int log_level;                 /* enum log_level */
    int compression;               /* chorus_compression for CHORUS_COMPRESSION_DEFAULT */
    int compression_rounding;      /* enum quantize_rounding, for INT8 and INT4 */
    size_t compression_seed;       /* stochastic rounding's seed */
    double compression_topk_ratio; /* TOPK's fraction of values sent, where a call gives none */
    bool compression_one_host;     /* compress allreduces whose ranks share one host too */
    bool fusion_copier;            /* a thread packs and unpacks while collectives run */
    bool abort_on_failure;         /* MPI_Abort after a fatal error */
    bool autotune;                 /* tune the online settings during the first steps */
    size_t autotune_steps_per_trial;
    char autotune_log[PARAM_TEXT_LENGTH];
    char timeline[PARAM_TEXT_LENGTH];
    char tuning_file[PARAM_TEXT_LENGTH];
    char allreduce_algorithm[PARAM_TEXT_LENGTH];
    char broadcast_algorithm[PARAM_TEXT_LENGTH];
    char allgather_algorithm[PARAM_TEXT_LENGTH];
    char reducescatter_algorithm[PARAM_TEXT_LENGTH];
    char alltoall_algorithm[PARAM_TEXT_LENGTH];
};

enum param_source {
    PARAM_SOURCE_DEFAULT,
    PARAM_SOURCE_ENVIRONMENT,
    PARAM_SOURCE_HOROVOD, /* a HOROVOD_* variable that a Horovod job script sets */
    PARAM_SOURCE_OPTIONS,
    PARAM_SOURCE_RANK0,
    PARAM_SOURCE_TUNING_FILE, /* a setting row of CHORUS_TUNING_FILE (tuning.h) */
};

enum param_type {
    PARAM_BYTES,     /* size_t with optional K/M/G/T suffix (powers of 1024) */
    PARAM_COUNT,     /* size_t, at most PARAM_COUNT_LIMIT */
    PARAM_AREAS,     /* size_t: 0 (the default), 2, 4, 8 or 16 */
    PARAM_CHUNK,     /* size_t: 0 (the default) or a power of two from 4K to 256M, as bytes */
    PARAM_SLOT,      /* size_t: bytes from 0 to PARAM_SLOT_LIMIT (a slot every rank holds twice) */
    PARAM_SECONDS,   /* double >= 0 */
    PARAM_FRACTION,  /* double, 0 < value <= 1 */
    PARAM_LOG_LEVEL, /* error|warning|info|debug|trace */
    PARAM_PATH,      /* any text */
    PARAM_ALGORITHM, /* "auto" or an algorithm name of the collective */
    PARAM_COMPRESSION, /* none|fp16|bf16|int8|int4|topk */
    PARAM_SWITCH,    /* bool: on|off (also 1|0, true|false, yes|no) */
    PARAM_CHOICE,    /* int: the index of one of the definition's `choices` */
};

/* What a parameter's row allows besides the user's own setting. */
enum param_flags {
    PARAM_SHAPES_WIRE = 1u << 0, /* must agree on every rank: taken from rank 0 at init */
    PARAM_TUNING_FILE = 1u << 1, /* a tuning file's `setting` row may set it: it depends on the
                                    hosts rather than on the training job */
    PARAM_RUNTIME = 1u << 2,     /* may change while running (autotune, between two batches):
                                    read where it is used, from the instance's one copy */
};

/* How chorus-tune measures a parameter's values against its default (PARAM_MEASURE_NONE: it
 * does not), and where the parameter matters, so that chorus-tune skips it elsewhere. */
enum param_measure {
    PARAM_MEASURE_NONE,
    PARAM_MEASURE_SIZES,  /* allreduces from 256 KiB through the host's segment, and a step */
    PARAM_MEASURE_BURSTS, /* bursts of small allreduces submitted together */
};
enum param_where {
    PARAM_WHERE_ANY,
    PARAM_WHERE_SHARED_HOSTS,  /* ranks share hosts (a segment) */
    PARAM_WHERE_ONE_HOST,      /* every rank on one host, several of them */
    PARAM_WHERE_SEVERAL_HOSTS, /* ranks share hosts, and there are several */
};

/* Values autotune tries for a parameter, smallest first. */
#define PARAM_AUTOTUNE_CANDIDATES 4
/* Values chorus-tune measures against the default, at most. */
#define PARAM_TUNE_VALUES 4

/* One row of the parameter table: the one place that says what a parameter is, who may set
 * it, and how it is tuned. Everything else (the tuning file's parser, autotune, chorus-tune,
 * chorus-info, docs/parameters.md) walks these rows. */
struct param_definition {
    const char *name;
    const char *horovod; /* the HOROVOD_* variable a Horovod job script sets for it, read as this
                          * one (same units; this one wins where both are set), or NULL */
    enum param_type type;
    const char *default_value;
    size_t offset;  /* into struct chorus_params */
    int collective; /* PARAM_ALGORITHM: which collective's algorithms; else -1 */
    unsigned flags; /* enum param_flags */
    const char *help;
    const char *const *choices; /* PARAM_CHOICE: the values, NULL-terminated, in enum order */
    /* PARAM_RUNTIME parameters that autotune tries: PARAM_AUTOTUNE_CANDIDATES values in the
     * parameter's unit (bytes, milliseconds); NULL: autotune leaves it alone. */
    const double *autotune_candidates;
    /* What chorus-tune measures against the default (texts as a tuning file writes them,
     * NULL-terminated; NULL: not measured), how, and where it matters. */
    const char *const *tune_values;
    enum param_measure tune_measure;
    enum param_where tune_where;
};

extern const struct param_definition param_table[];
extern const size_t param_count;

/* A CHORUS_* variable that another part of chorus reads (the Python binding, chorusrun, the
 * benchmarks, the job scripts, the test tools), not the library: a row of its own table, so
 * that the library does not call it unknown and docs/parameters.md lists it. test/
 * check_variables.sh greps the sources: every variable read anywhere is a row of one of the
 * two tables, and every row of this one is read where it says. */
struct param_elsewhere {
    const char *name;
    const char *reader; /* who reads it: "chorus.torch", "chorusrun", "tools/run-tests", ... */
    const char *help;
};
extern const struct param_elsewhere param_elsewhere_table[];
extern const size_t param_elsewhere_count;

struct param_set {
    struct chorus_params values;
    enum param_source sources[32];
    char unknown_variables[PARAM_TEXT_LENGTH]; /* CHORUS_* variables not in the table */
};

/* Fills `set` from defaults, `environment` (NULL-terminated "NAME=VALUE" strings, usually
 * environ) and `overrides` ("NAME=VALUE;..." or NULL). On a malformed value returns
 * CHORUS_ERR_BAD_PARAMETER with the variable and the value in `error` (size error_size). */
chorus_status params_load(struct param_set *set, char *const *environment, const char *overrides,
                          char *error, size_t error_size);

/* The wire form of the values every rank takes from rank 0 (PARAM_SHAPES_WIRE): one
 * "NAME=value" entry per such parameter, in the table's order, each ended by '\0' (a path may
 * hold any other byte). Text and names, not the struct's bytes, so that ranks whose builds lay
 * the struct out differently still read it, and a name one build lacks is named. Writes at most
 * `size` bytes and returns how many the whole form takes. */
size_t params_encode_wire(const struct chorus_params *values, char *text, size_t size);
/* Reads a wire form of `length` bytes into `values` (this rank's, which its entries overwrite).
 * False, with why in `error`, when an entry is malformed, names a parameter this build does not
 * have or does not take from rank 0, or when one this build takes from rank 0 is missing. */
bool params_decode_wire(const char *text, size_t length, struct chorus_params *values,
                        char *error, size_t error_size);

/* Copies the wire-shaping values of `rank0` into `set`, marking changed ones as from rank 0.
 * Returns how many values differed. */
size_t params_adopt_rank0(struct param_set *set, const struct chorus_params *rank0);

/* Stores `text` as the value of parameter `index` in `values`; false where it does not parse,
 * with a hint in `why`. */
bool params_store_text(struct chorus_params *values, int index, const char *text, char *why,
                       size_t why_size);

/* The index of parameter `name` in param_table, or -1. */
int param_index(const char *name);

/* Stores a number as the value of parameter `index` (PARAM_BYTES, PARAM_COUNT: rounded down to
 * a whole number; PARAM_SECONDS as it is): how autotune applies a candidate. False for a
 * parameter of another type. */
bool params_store_number(struct chorus_params *values, size_t index, double number);
/* The value of a numeric parameter (as params_store_number takes it). */
double params_number(const struct chorus_params *values, size_t index);

/* Writes the value of parameter `index` as text. */
void params_format_value(const struct chorus_params *values, size_t index, char *text,
                         size_t text_size);
const char *param_source_name(enum param_source source);

/* Parses "128M", "64k", "1048576", "1G" into bytes; false on garbage, negatives or overflow. */
bool params_parse_bytes(const char *text, size_t *bytes);
/* Parses a whole number (digits only); false on anything else or overflow. */
bool params_parse_count(const char *text, size_t *count);

#endif

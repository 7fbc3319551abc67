/*
 * params_table.c — what chorus's parameters are: one row each (name, Horovod's name, type,
 * default, help, who may set it, what autotune and chorus-tune try), with the measurements that
 * chose their defaults; and the CHORUS_* variables chorus's other parts read. params.c reads
 * values into what these rows describe.
 */
#include "params.h"

#define FIELD(member) offsetof(struct chorus_params, member)
#define STRINGIFY_VALUE(x) #x
#define STRINGIFY(x) STRINGIFY_VALUE(x)

/* CHORUS_STAGING_STORES's values, in the order of enum staging_stores. */
static const char *const staging_stores_names[] = {"auto", "cached", "streaming", NULL};
/* CHORUS_NEGOTIATION's values, in the order of enum negotiation_protocol. */
static const char *const negotiation_names[] = {"auto", "star", "rounds", NULL};
static const char *const joined_gathers_names[] = {"run", "fail", NULL};
/* CHORUS_COMPRESSION_ROUNDING's values, in the order of enum quantize_rounding
 * (lib/compression/quantize.h). */
static const char *const rounding_names[] = {"nearest", "stochastic", NULL};

#define KIB 1024.0
#define MIB (1024.0 * 1024.0)

/* The candidates autotune tries (autotune_search.h walks them). Fusion's tensor limit decides
 * which tensors are copied into a fusion buffer (small ones: one collective for many) and which
 * are reduced in place (large ones: no copies), so its best value moves with the memory
 * bandwidth and the link's latency; the threshold matters once limits are large enough for the
 * fused bytes of a cycle to exceed it; a cycle time above 0 waits to gather more tensors per
 * cycle, worth it where a cycle's fixed cost (a cross-host round trip) is large against a
 * step's compute. */
static const double tensor_limit_candidates[] = {16 * KIB, 64 * KIB, 256 * KIB, 1 * MIB};
static const double threshold_candidates[] = {4 * MIB, 16 * MIB, 64 * MIB, 128 * MIB};
static const double cycle_time_candidates[] = {0, 1, 2.5, 5};
static_assert(ARRAY_LENGTH(tensor_limit_candidates) == PARAM_AUTOTUNE_CANDIDATES &&
                  ARRAY_LENGTH(threshold_candidates) == PARAM_AUTOTUNE_CANDIDATES &&
                  ARRAY_LENGTH(cycle_time_candidates) == PARAM_AUTOTUNE_CANDIDATES,
              "autotune tries PARAM_AUTOTUNE_CANDIDATES values of each setting");

/* What chorus-tune measures against the defaults (the default first, as ""): the staging areas'
 * count and size on allreduces through the host's segment, and the fusion threshold on bursts.
 * CHORUS_STAGING_STORES is left to the topology (node_segment.h), as chorus decides it:
 * measured, it follows where the cores happen to sit during the measurement (on the
 * development VM, whose hypervisor moves its two vCPUs between a shared and a split cache,
 * three rounds at np=2 wrote "cached", and ResNet-50 steps then took 3.3x the default's time);
 * a tuning file may still set it by hand. */
static const char *const staging_areas_trial[] = {"", "4", "8", NULL};
static const char *const segment_chunk_trial[] = {"", "256K", "1M", NULL};
static const char *const cross_host_chunk_trial[] = {"", "1M", "16M", NULL};
static const char *const fusion_threshold_trial[] = {"", "4M", "16M", NULL};

const struct param_definition param_table[] = {
    {.name = "CHORUS_FUSION_TENSOR_LIMIT", .type = PARAM_BYTES, .default_value = "64K",
     .offset = FIELD(fusion_tensor_limit), .collective = -1,
     .flags = PARAM_SHAPES_WIRE | PARAM_TUNING_FILE | PARAM_RUNTIME,
     .help = "largest tensor that is fused; a larger one is reduced in place, without copies",
     .autotune_candidates = tensor_limit_candidates},
    {.name = "CHORUS_FUSION_THRESHOLD", .horovod = "HOROVOD_FUSION_THRESHOLD",
     .type = PARAM_BYTES, .default_value = "128M",
     .offset = FIELD(fusion_threshold), .collective = -1,
     .flags = PARAM_SHAPES_WIRE | PARAM_TUNING_FILE | PARAM_RUNTIME,
     .help = "largest fusion buffer in bytes (K/M/G suffixes); 0 turns fusion off",
     .autotune_candidates = threshold_candidates, .tune_values = fusion_threshold_trial,
     .tune_measure = PARAM_MEASURE_BURSTS, .tune_where = PARAM_WHERE_ANY},
    {.name = "CHORUS_FUSION_COPIER", .type = PARAM_SWITCH, .default_value = "off",
     .offset = FIELD(fusion_copier), .collective = -1,
     .help = "on: a thread per rank packs and unpacks fusion buffers while collectives run "
             "(double buffering); worth it only with spare cores"},
    {.name = "CHORUS_CYCLE_TIME_MS", .horovod = "HOROVOD_CYCLE_TIME",
     .type = PARAM_SECONDS, .default_value = "0",
     .offset = FIELD(cycle_time_ms), .collective = -1, .flags = PARAM_SHAPES_WIRE | PARAM_RUNTIME,
     .help = "minimum spacing of negotiation cycles in milliseconds; larger values fuse more",
     .autotune_candidates = cycle_time_candidates},
    {.name = "CHORUS_AUTOTUNE", .horovod = "HOROVOD_AUTOTUNE",
     .type = PARAM_SWITCH, .default_value = "off",
     .offset = FIELD(autotune), .collective = -1, .flags = PARAM_SHAPES_WIRE,
     .help = "on: during the first steps of training, try the settings autotune tunes (fusion's "
             "tensor limit and threshold, the cycle time) that the user did not set, and keep "
             "the settings under which a step's tensors go through fastest; every rank changes "
             "settings at the same point"},
    {.name = "CHORUS_AUTOTUNE_LOG", .horovod = "HOROVOD_AUTOTUNE_LOG",
     .type = PARAM_PATH, .default_value = "",
     .offset = FIELD(autotune_log), .collective = -1,
     .help = "CSV file to which rank 0 writes each autotune trial and the choice (empty: none)"},
    {.name = "CHORUS_AUTOTUNE_STEPS_PER_TRIAL", .horovod = "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE",
     .type = PARAM_COUNT, .default_value = "5",
     .offset = FIELD(autotune_steps_per_trial), .collective = -1, .flags = PARAM_SHAPES_WIRE,
     .help = "training steps measured per autotune trial (0 counts as 1)"},
    {.name = "CHORUS_CACHE_CAPACITY", .horovod = "HOROVOD_CACHE_CAPACITY",
     .type = PARAM_COUNT, .default_value = "1024",
     .offset = FIELD(cache_capacity), .collective = -1, .flags = PARAM_SHAPES_WIRE,
     .help = "entries of the response cache; 0 turns the cache off"},
    {.name = "CHORUS_STAGING_AREAS", .type = PARAM_AREAS, .default_value = "2",
     .offset = FIELD(staging_areas), .collective = -1,
     .flags = PARAM_SHAPES_WIRE | PARAM_TUNING_FILE,
     .help = "staging areas per rank in the host's shared segment (2, 4, 8 or 16; 0: the "
             "default)",
     .tune_values = staging_areas_trial, .tune_measure = PARAM_MEASURE_SIZES,
     .tune_where = PARAM_WHERE_SHARED_HOSTS},
    /* 512K: measured with the algorithm alone (np=2, 256 KiB-64 MiB, 3 interleaved rounds,
     * 2026-11-22) on the development VM (1 MiB L2 per core), 512 KiB was fastest (1 MiB in
     * 67-78 us, 64 MiB in 9.3-10 ms), ahead of 256 KiB (94-100 us, 10.1-10.7 ms), 1 MiB and
     * 2 MiB. */
    {.name = "CHORUS_SEGMENT_CHUNK", .type = PARAM_CHUNK, .default_value = "512K",
     .offset = FIELD(segment_chunk), .collective = -1,
     .flags = PARAM_SHAPES_WIRE | PARAM_TUNING_FILE,
     .help = "bytes of each staging area in the host's shared segment when every rank is on one "
             "host, the chunk the hierarchical allreduce and the shared-memory collectives move "
             "at a time (a power of two from 4K to 256M; 0: the default)",
     .tune_values = segment_chunk_trial, .tune_measure = PARAM_MEASURE_SIZES,
     .tune_where = PARAM_WHERE_ONE_HOST},
    /* 4M: across hosts each chunk's slice also crosses the network, synchronously, so small
     * chunks leave the link idle between them. Measured on 2 emulated hosts x 2 ranks, 1
     * Gbit/s links (bench/multihost, 2026-11-24; the link delivered 0.90-0.94 Gbit/s): a
     * 64 MiB allreduce took 0.76-0.83 s with 512 KiB chunks, 0.56-0.57 s with 2, 4 or 8 MiB
     * (the link bound: 0.57-0.59 s); 1 MiB took 22 ms with 2 MiB chunks, 9-10 ms with 4 or
     * 8 MiB. */
    {.name = "CHORUS_CROSS_HOST_CHUNK", .type = PARAM_CHUNK, .default_value = "4M",
     .offset = FIELD(cross_host_chunk), .collective = -1,
     .flags = PARAM_SHAPES_WIRE | PARAM_TUNING_FILE,
     .help = "the same when the job spans hosts, where each chunk's slice also crosses the "
             "network in one allreduce (a power of two from 4K to 256M; 0: the default)",
     .tune_values = cross_host_chunk_trial, .tune_measure = PARAM_MEASURE_SIZES,
     .tune_where = PARAM_WHERE_SEVERAL_HOSTS},
    {.name = "CHORUS_SMALL_LIMIT", .type = PARAM_SLOT, .default_value = "64K",
     .offset = FIELD(small_limit), .collective = -1,
     .flags = PARAM_SHAPES_WIRE | PARAM_TUNING_FILE,
     .help = "largest tensor (bytes per rank) that an ordered operation moves through the "
             "host's small-message slots on the submitting thread, where every rank of its "
             "process set shares one host; larger ones go to the background thread; 0: none "
             "(at most 1M)"},
    {.name = "CHORUS_STAGING_STORES", .type = PARAM_CHOICE, .default_value = "auto",
     .offset = FIELD(staging_stores), .collective = -1,
     .flags = PARAM_SHAPES_WIRE | PARAM_TUNING_FILE,
     .help = "how the algorithms through the host's shared segment write their staging areas: "
             "cached (ordinary stores), streaming (non-temporal stores, straight to memory), or "
             "auto: cached where the host's ranks share a last-level cache (hwloc) and each has "
             "a core of its own, else streaming",
     .choices = staging_stores_names},
    {.name = "CHORUS_NEGOTIATION", .type = PARAM_CHOICE, .default_value = "auto",
     .offset = FIELD(negotiation), .collective = -1, .flags = PARAM_SHAPES_WIRE,
     .help = "how ranks agree on what runs: star (every request to rank 0, which answers every "
             "rank), rounds (tensors seen before agreed by exchanging ready bits: through the "
             "host's shared memory on one host; across hosts a message to every other rank, up "
             "to " STRINGIFY(NEGOTIATION_ROUND_COPIES_UP_TO) " ranks, or an allreduce, O(log N) "
             "messages per rank) or auto: rounds on one host, across hosts up to "
             STRINGIFY(NEGOTIATION_ROUND_COPIES_UP_TO) " ranks and from "
             STRINGIFY(NEGOTIATION_ROUNDS_FROM) ", star between",
     .choices = negotiation_names},
    {.name = "CHORUS_JOINED_GATHERS", .type = PARAM_CHOICE, .default_value = "run",
     .offset = FIELD(joined_gathers), .collective = -1, .flags = PARAM_SHAPES_WIRE,
     .help = "an allgather or broadcast while a rank has joined: run (the joined rank "
             "contributes no rows) or fail on every rank, as Horovod's do (chorus.torch's "
             "default)",
     .choices = joined_gathers_names},
    {.name = "CHORUS_STALL_WARNING_SECONDS", .horovod = "HOROVOD_STALL_CHECK_TIME_SECONDS",
     .type = PARAM_SECONDS, .default_value = "60",
     .offset = FIELD(stall_warning_seconds), .collective = -1, .flags = PARAM_SHAPES_WIRE,
     .help = "warn when a tensor has been submitted by some ranks but not others for this long "
             "(0: never)"},
    {.name = "CHORUS_STALL_SHUTDOWN_SECONDS", .horovod = "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
     .type = PARAM_SECONDS, .default_value = "0",
     .offset = FIELD(stall_shutdown_seconds), .collective = -1, .flags = PARAM_SHAPES_WIRE,
     .help = "fail stalled tensors with CHORUS_ERR_STALLED after this long (0: never)"},
    {.name = "CHORUS_TIMEOUT_SECONDS", .type = PARAM_SECONDS, .default_value = "60",
     .offset = FIELD(timeout_seconds), .collective = -1, .flags = PARAM_SHAPES_WIRE,
     .help = "fail a collective (or the NCCL communicator's setup) that waits longer than this "
             "for another rank or the GPU, or a peer whose heartbeats stop for this long during "
             "negotiation, on every rank, instead of hanging (0: never)"},
    {.name = "CHORUS_ABORT_ON_FAILURE", .type = PARAM_SWITCH, .default_value = "off",
     .offset = FIELD(abort_on_failure), .collective = -1,
     .help = "on: after a fatal error (a failed, frozen or silent rank among them) this rank "
             "calls MPI_Abort 0.2 s after its handles have failed, so that launchers that let "
             "the other processes run on end the job"},
    {.name = "CHORUS_COMPRESSION", .type = PARAM_COMPRESSION, .default_value = "none",
     .offset = FIELD(compression), .collective = -1, .flags = PARAM_SHAPES_WIRE,
     .help = "how float32 allreduces travel by default: none, fp16 or bf16 (half the bytes), "
             "int8 or int4 (blockwise quantized, about a quarter or an eighth of the bytes; "
             "sums and averages only, other ops travel uncompressed), topk (the largest "
             "CHORUS_COMPRESSION_TOPK_RATIO of the values by magnitude, sums and averages only)"},
    {.name = "CHORUS_COMPRESSION_ROUNDING", .type = PARAM_CHOICE, .default_value = "nearest",
     .offset = FIELD(compression_rounding), .collective = -1, .flags = PARAM_SHAPES_WIRE,
     .help = "how int8 and int4 compression round: nearest (error at most half a block's "
             "scale) or stochastic (unbiased, error below one scale, reproduced by "
             "CHORUS_COMPRESSION_SEED)",
     .choices = rounding_names},
    {.name = "CHORUS_COMPRESSION_SEED", .type = PARAM_COUNT, .default_value = "0",
     .offset = FIELD(compression_seed), .collective = -1, .flags = PARAM_SHAPES_WIRE,
     .help = "the seed of stochastic rounding's random numbers, which also depend on the "
             "tensor's name, the rank and the value's position: the same seed gives the same "
             "results"},
    {.name = "CHORUS_COMPRESSION_TOPK_RATIO", .type = PARAM_FRACTION, .default_value = "0.01",
     .offset = FIELD(compression_topk_ratio), .collective = -1, .flags = PARAM_SHAPES_WIRE,
     .help = "the fraction of a tensor's values that topk compression sends from each rank "
             "(the largest by magnitude, at least one), where the call leaves "
             "compression_ratio at 0"},
    {.name = "CHORUS_COMPRESSION_ONE_HOST", .type = PARAM_SWITCH, .default_value = "off",
     .offset = FIELD(compression_one_host), .collective = -1, .flags = PARAM_SHAPES_WIRE,
     .help = "off: a float32 allreduce whose ranks all share one host travels uncompressed "
             "(exact), whatever compression it asks for, because there converting costs more "
             "than the shared-memory copy it saves (its error feedback buffer is left "
             "untouched); on: it is compressed as asked, as across hosts"},
    {.name = "CHORUS_LOG_LEVEL", .horovod = "HOROVOD_LOG_LEVEL",
     .type = PARAM_LOG_LEVEL, .default_value = "warning",
     .offset = FIELD(log_level), .collective = -1,
     .help = "error, warning, info, debug or trace"},
    {.name = "CHORUS_TIMELINE", .horovod = "HOROVOD_TIMELINE",
     .type = PARAM_PATH, .default_value = "",
     .offset = FIELD(timeline), .collective = -1,
     .help = "file to which rank 0 writes a Chrome trace of every operation (empty: off)"},
    {.name = "CHORUS_TUNING_FILE", .type = PARAM_PATH, .default_value = "",
     .offset = FIELD(tuning_file), .collective = -1, .flags = PARAM_SHAPES_WIRE,
     .help = "selection-table rows measured on these hosts (chorus-tune -o FILE writes them), "
             "tried before the built-in rows, and settings; rank 0 reads the file at init and "
             "every rank uses it (empty: none)"},
    {.name = "CHORUS_ALLREDUCE_ALGO", .type = PARAM_ALGORITHM, .default_value = "auto",
     .offset = FIELD(allreduce_algorithm), .collective = CHORUS_ALLREDUCE,
     .flags = PARAM_SHAPES_WIRE,
     .help = "allreduce algorithm: auto or a name (chorus-info lists them)"},
    {.name = "CHORUS_BROADCAST_ALGO", .type = PARAM_ALGORITHM, .default_value = "auto",
     .offset = FIELD(broadcast_algorithm), .collective = CHORUS_BROADCAST,
     .flags = PARAM_SHAPES_WIRE,
     .help = "broadcast algorithm: auto or a name (chorus-info lists them)"},
    {.name = "CHORUS_ALLGATHER_ALGO", .type = PARAM_ALGORITHM, .default_value = "auto",
     .offset = FIELD(allgather_algorithm), .collective = CHORUS_ALLGATHER,
     .flags = PARAM_SHAPES_WIRE,
     .help = "allgather algorithm: auto or a name (chorus-info lists them)"},
    {.name = "CHORUS_REDUCESCATTER_ALGO", .type = PARAM_ALGORITHM, .default_value = "auto",
     .offset = FIELD(reducescatter_algorithm), .collective = CHORUS_REDUCESCATTER,
     .flags = PARAM_SHAPES_WIRE,
     .help = "reducescatter algorithm: auto or a name (chorus-info lists them)"},
    {.name = "CHORUS_ALLTOALL_ALGO", .type = PARAM_ALGORITHM, .default_value = "auto",
     .offset = FIELD(alltoall_algorithm), .collective = CHORUS_ALLTOALL,
     .flags = PARAM_SHAPES_WIRE,
     .help = "alltoall algorithm: auto or a name (chorus-info lists them)"},
};
const size_t param_count = ARRAY_LENGTH(param_table);
static_assert(ARRAY_LENGTH(param_table) <= ARRAY_LENGTH(((struct param_set *)0)->sources),
              "param_set.sources must hold every parameter");

const struct param_elsewhere param_elsewhere_table[] = {
    {"CHORUS_LIBRARY", "chorus (Python)",
     "the libchorus the Python binding loads (default: beside the package, then the system's)"},
    {"CHORUS_SHARED_GRADIENTS", "chorus.torch",
     "`off`: DistributedOptimizer leaves gradients where torch put them instead of moving "
     "them into the shared heap (default `on`)"},
    {"CHORUS_C10D_EXTENSION", "chorus.torch.distributed",
     "the torch.distributed backend extension to load (default: the one built beside the "
     "library)"},
    {"CHORUS_MASTER_ADDR", "chorus.torch.distributed",
     "the address rank 0 offers torch.distributed's store at (default: its host's name)"},
    {"CHORUS_MPIRUN", "chorusrun", "the MPI launcher (default: the one chorus was built with)"},
    {"CHORUS_ELASTIC_DRIVER", "chorus.elastic",
     "set by `chorusrun --elastic` for its ranks: how a rank reaches the driver "
     "(TOKEN@ADDRESS:PORT)"},
    {"CHORUS_ELASTIC_STORE", "chorus.elastic",
     "set by `chorusrun --elastic`: where ranks keep committed state between restarts"},
    {"CHORUS_ELASTIC_GENERATION", "chorus.elastic",
     "set by `chorusrun --elastic`: how many times the job has restarted (0 at first)"},
    {"CHORUS_ELASTIC_WORLDS", "chorus.elastic",
     "set by the elastic driver (`ucx`) for ranks it starts on worlds without MPI: "
     "`hvd.init()` joins the world the driver forms"},
    {"CHORUS_ELASTIC_HOST", "chorus.elastic",
     "set with CHORUS_ELASTIC_WORLDS: the host the driver started the rank on (ranks of one "
     "name share a host)"},
    {"CHORUS_ELASTIC_RANK", "chorus.elastic",
     "set with CHORUS_ELASTIC_WORLDS: the rank the driver means the rank to have"},
    {"CHORUS_ELASTIC_SIZE", "chorus.elastic",
     "set with CHORUS_ELASTIC_WORLDS: the size of the world the rank first joins"},
    {"CHORUS_ELASTIC_GROWN", "chorus.elastic",
     "set by `hvd.elastic.run` for the ranks it adds in place (`1`): they take the running "
     "ranks' state instead of the commit store's"},
    {"CHORUS_DATA_DIR", "chorus-bench",
     "where the gradient sizes of real models are (`--workload`; default: shared/data, "
     "../shared/data)"},
    {"CHORUS_BUILD", "examples/sge, examples/slurm", "the build directory a job script runs"},
    {"CHORUS_EXAMPLE", "tools/quickstart", "the example quickstart runs (default `train_mlp`)"},
    {"CHORUS_BUILD_DIR", "tools/run-tests, tools/quickstart", "the build directory"},
    {"CHORUS_MESON_OPTIONS", "tools/run-tests", "options for configuring the build directory"},
    {"CHORUS_TSAN", "tools/run-tests", "`0` skips the ThreadSanitizer build's tests"},
    {"CHORUS_TSAN_BUILD_DIR", "tools/run-tests", "the ThreadSanitizer build directory"},
    {"CHORUS_ASAN", "tools/run-tests", "`0` skips the AddressSanitizer build's tests"},
    {"CHORUS_ASAN_BUILD_DIR", "tools/run-tests", "the AddressSanitizer build directory"},
    {"CHORUS_MPICH", "tools/run-tests", "`0` skips the build against MPICH and its tests"},
    {"CHORUS_MPICH_BUILD_DIR", "tools/run-tests", "the MPICH build directory"},
    {"CHORUS_FUZZ_SECONDS", "tools/run-tests", "seconds per fuzz target (default 45; `0` skips)"},
    {"CHORUS_FUZZ_BUILD_DIR", "tools/fuzz", "the fuzz targets' build directory"},
    {"CHORUS_PEERS", "tools/run-tests",
     "`0` leaves out the peers' suites (Horovod's and PyTorch's own tests), which run by "
     "default"},
};
const size_t param_elsewhere_count = ARRAY_LENGTH(param_elsewhere_table);


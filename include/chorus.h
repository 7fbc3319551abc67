/*
 * chorus.h — the public interface of chorus, a collective communication library for
 * data-parallel training.
 *
 * Every rank of an MPI job calls chorus_init(), then submits named tensors from its training
 * loop. A background thread per rank negotiates with the other ranks which tensors are ready
 * everywhere, and runs the collectives (allreduce, broadcast, allgather) in one order that every
 * rank agrees on. Submission is asynchronous: a submit call returns a handle at once, and the
 * caller tests or waits on it. Blocking wrappers submit and wait in one call.
 *
 * Rules that hold for the whole interface:
 * - Every function returns a chorus_status (or a value that is a status when negative). When a
 *   call fails before a handle exists, chorus_last_error() on the same thread says why.
 * - A submit call that returns CHORUS_OK hands out exactly one handle, which completes exactly
 *   once (successfully or with an error). A submit call that fails hands out no handle.
 * - The caller owns tensor buffers. Between submit and completion chorus may read the input and
 *   write the output; the caller must not touch them in that time.
 * - Any thread may submit, test, wait and free handles. Only chorus's background thread calls
 *   MPI or NCCL on chorus's own duplicate of the communicator.
 */
#ifndef CHORUS_H
#define CHORUS_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(CHORUS_BUILDING_LIBRARY)
#define CHORUS_API __attribute__((visibility("default")))
#else
#define CHORUS_API
#endif

#define CHORUS_VERSION_MAJOR 0
#define CHORUS_VERSION_MINOR 1
#define CHORUS_VERSION_PATCH 0

/* The version of the library this program runs with, "MAJOR.MINOR.PATCH": the one it loaded,
 * which may differ from the CHORUS_VERSION_* it was compiled against. A static string. Any
 * thread, any time, before init too. */
CHORUS_API const char *chorus_version(void);

/* Whether this library was built with CUDA and NCCL (GPU tensors), whether or not a GPU is
 * present. Any thread, any time. */
CHORUS_API bool chorus_gpu_built(void);

/* NCCL's version code (22803 for NCCL 2.28.3, as ncclGetVersion gives it) of the NCCL this
 * library was built with and loaded, or 0 when it was built without CUDA and NCCL. Any thread,
 * any time. */
CHORUS_API int chorus_nccl_version(void);

/* ---------------------------------------------------------------------------------------------
 * Status codes. CHORUS_OK is 0, CHORUS_IN_PROGRESS is 1, every error is negative.
 * X(name, value, description)
 */
#define CHORUS_STATUS_TABLE(X)                                                                   \
    X(CHORUS_OK, 0, "success")                                                                   \
    X(CHORUS_IN_PROGRESS, 1, "the operation has not completed yet")                              \
    X(CHORUS_ERR_INVALID_ARGUMENT, -1, "an argument is invalid")                                 \
    X(CHORUS_ERR_NOT_INITIALIZED, -2, "chorus is not initialized (call chorus_init first)")      \
    X(CHORUS_ERR_ALREADY_INITIALIZED, -3, "chorus is already initialized")                       \
    X(CHORUS_ERR_BAD_PARAMETER, -4, "a CHORUS_* parameter has a malformed or unknown value")     \
    X(CHORUS_ERR_MPI, -5, "an MPI call failed")                                                  \
    X(CHORUS_ERR_MISMATCH, -6, "ranks submitted the same tensor name with different arguments") \
    X(CHORUS_ERR_DUPLICATE_NAME, -7, "a tensor of this name is already in flight on this rank")  \
    X(CHORUS_ERR_SHUTDOWN, -8, "chorus shut down before the operation completed")                \
    X(CHORUS_ERR_STALLED, -9, "some ranks never submitted this tensor")                          \
    X(CHORUS_ERR_NOT_SUPPORTED, -10, "the operation is not supported in this build or setup")    \
    X(CHORUS_ERR_OUT_OF_MEMORY, -11, "memory could not be allocated")                            \
    X(CHORUS_ERR_GPU, -12, "a CUDA or NCCL call failed")                                         \
    X(CHORUS_ERR_PROTOCOL, -13, "a negotiation message was malformed")                           \
    X(CHORUS_ERR_INTERNAL, -14, "internal error in chorus")                                      \
    X(CHORUS_ERR_TIMEOUT, -15, "a wait took longer than CHORUS_TIMEOUT_SECONDS")

typedef enum chorus_status {
#define CHORUS_STATUS_ENUM_ENTRY(name, value, description) name = value,
    CHORUS_STATUS_TABLE(CHORUS_STATUS_ENUM_ENTRY)
#undef CHORUS_STATUS_ENUM_ENTRY
} chorus_status;

/* The status's enumerator name ("CHORUS_ERR_MISMATCH"). A static string; never NULL, also for
 * values outside the table ("CHORUS_STATUS_UNKNOWN"). Any thread, any time. */
CHORUS_API const char *chorus_status_name(chorus_status status);

/* One sentence describing the status. A static string; never NULL. Any thread, any time. */
CHORUS_API const char *chorus_status_description(chorus_status status);

/* Why the last failed chorus call on the calling thread failed, naming the tensor and ranks where
 * they are known. The string belongs to the calling thread and stays valid until its next chorus
 * call. Empty when no call has failed. */
CHORUS_API const char *chorus_last_error(void);

/* ---------------------------------------------------------------------------------------------
 * Tensors.
 */
typedef enum chorus_dtype {
    CHORUS_UINT8 = 0,
    CHORUS_INT8 = 1,
    CHORUS_INT32 = 2,
    CHORUS_INT64 = 3,
    CHORUS_FLOAT16 = 4,  /* IEEE 754 binary16, stored as uint16_t */
    CHORUS_BFLOAT16 = 5, /* the upper 16 bits of a float32, stored as uint16_t */
    CHORUS_FLOAT32 = 6,
    CHORUS_FLOAT64 = 7,
    CHORUS_INT16 = 8,
    CHORUS_UINT16 = 9,
    CHORUS_BOOL = 10, /* one byte, 0 or 1 (C's bool) */
} chorus_dtype;
#define CHORUS_DTYPE_COUNT 11

/* Reduction operators of allreduce. Integer sums and products wrap around (two's complement).
 * AVERAGE divides the sum by the number of contributing ranks; for integer dtypes the exact
 * integer sum is divided exactly and rounded to the nearest integer, halves away from zero, over
 * int64's whole range. Integer scale factors round the same way (a factor of exactly 1/n divides
 * by n). On bool tensors: MIN and PRODUCT are logical and, MAX and SUM logical or (a sum of bools
 * is "any"); AVERAGE and scale factors fail with CHORUS_ERR_INVALID_ARGUMENT.
 * ADASUM is Horovod's adaptive summation: two ranks' vectors a and b combine as
 * (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b (a zero vector leaves the other as it is), up a
 * binomial tree in rank order; allreduce of float32 and float64 tensors only (GPU tensors are
 * combined over MPI through host memory), without scale factors or compression, never fused. */
typedef enum chorus_op {
    CHORUS_SUM = 0,
    CHORUS_AVERAGE = 1,
    CHORUS_MIN = 2,
    CHORUS_MAX = 3,
    CHORUS_PRODUCT = 4,
    CHORUS_ADASUM = 5,
} chorus_op;
#define CHORUS_OP_COUNT 6

#define CHORUS_MAX_DIMS 8

/* Where a tensor's data lives. The zero value is host memory, so a tensor initialized with
 * designated initializers that leave it out is a host tensor.
 * CUDA tensors go through NCCL (chorus built with CUDA and NCCL; else CHORUS_ERR_NOT_SUPPORTED).
 * Every collective, dtype and op works on them. What NCCL cannot reduce itself (16-bit integers,
 * averages and scale factors of integers, scale factors with min, max or product, Adasum) is
 * copied to host memory, reduced there as host tensors are, and copied back; `chorus-info`
 * prints which dtype x op x scale go which way. CUDA tensors always travel uncompressed: CHORUS_COMPRESSION applies to host tensors, and an explicit
 * FP16 or BF16 compression of a CUDA tensor fails with CHORUS_ERR_NOT_SUPPORTED (cast the tensor
 * instead). */
typedef enum chorus_memory {
    CHORUS_MEMORY_HOST = 0,
    CHORUS_MEMORY_CUDA = 1,
} chorus_memory;

/* A tensor descriptor: where the data is and what shape it has. The caller owns `data`.
 * A tensor with ndims == 0 is a scalar (one element). A dimension may be 0 (no elements). */
typedef struct chorus_tensor {
    void *data;
    chorus_dtype dtype;
    size_t ndims;
    int64_t shape[CHORUS_MAX_DIMS];
    chorus_memory memory;
    int device; /* the CUDA device index when memory is CHORUS_MEMORY_CUDA; else ignored */
} chorus_tensor;

/* Size in bytes of one element of `dtype`; 0 for an unknown dtype. */
CHORUS_API size_t chorus_dtype_size(chorus_dtype dtype);
/* "float32", "bfloat16", ...; "unknown" for values outside the enum. */
CHORUS_API const char *chorus_dtype_name(chorus_dtype dtype);
/* "sum", "average", ...; "unknown" for values outside the enum. */
CHORUS_API const char *chorus_op_name(chorus_op op);
/* Number of elements of a tensor (the product of its shape; 1 for a scalar). */
CHORUS_API size_t chorus_tensor_count(const chorus_tensor *tensor);

/* ---------------------------------------------------------------------------------------------
 * Lifecycle.
 */
typedef struct chorus_init_options {
    size_t struct_size; /* sizeof(chorus_init_options), for compatibility across versions */
    /* Parameter settings that take precedence over the environment, as "NAME=VALUE" pairs
     * separated by ';' (for example "CHORUS_FUSION_THRESHOLD=64M;CHORUS_LOG_LEVEL=debug").
     * NULL for none. */
    const char *parameters;
} chorus_init_options;

#define CHORUS_INIT_OPTIONS_INIT {.struct_size = sizeof(chorus_init_options), .parameters = NULL}

/* Initializes chorus on MPI_COMM_WORLD and starts the background thread. `options` may be NULL
 * for defaults. If MPI is not initialized, chorus initializes it (asking for
 * MPI_THREAD_MULTIPLE) and finalizes it in chorus_shutdown. If the application initialized MPI,
 * it must have done so with MPI_THREAD_MULTIPLE, else init fails with CHORUS_ERR_MPI and says so.
 * Collective over the communicator: every rank must call it. A malformed parameter on any rank
 * fails init on every rank with CHORUS_ERR_BAD_PARAMETER naming the variable and the value.
 * Call from one thread. Returns CHORUS_OK, CHORUS_ERR_ALREADY_INITIALIZED,
 * CHORUS_ERR_BAD_PARAMETER, CHORUS_ERR_MPI or CHORUS_ERR_OUT_OF_MEMORY. */
CHORUS_API chorus_status chorus_init(const chorus_init_options *options);

/* Like chorus_init, on a communicator the application gives (for example a subset of ranks).
 * MPI must already be initialized with MPI_THREAD_MULTIPLE. chorus duplicates `comm`; the
 * application keeps ownership of it. Only the ranks of `comm` call it. */
CHORUS_API chorus_status chorus_init_comm(MPI_Comm comm, const chorus_init_options *options);

/* Stops the background thread and frees chorus's resources. Every handle still pending, on this
 * rank and on every other rank, completes with CHORUS_ERR_SHUTDOWN; later submits on other ranks
 * fail with CHORUS_ERR_SHUTDOWN. Ranks may call it at different times. Handles stay valid until
 * freed. Call from one thread. Returns CHORUS_OK or CHORUS_ERR_NOT_INITIALIZED. */
CHORUS_API chorus_status chorus_shutdown(void);

/* true between a successful chorus_init and chorus_shutdown. Any thread. */
CHORUS_API bool chorus_is_initialized(void);

/* ---------------------------------------------------------------------------------------------
 * Topology. Each returns the value (>= 0), or CHORUS_ERR_NOT_INITIALIZED (< 0). Any thread.
 */
CHORUS_API int chorus_rank(void);        /* this rank in chorus's communicator */
CHORUS_API int chorus_size(void);        /* number of ranks */
CHORUS_API int chorus_local_rank(void);  /* this rank among the ranks on its host */
CHORUS_API int chorus_local_size(void);  /* number of ranks on this host */
CHORUS_API int chorus_cross_rank(void);  /* index of this rank's host, 0 .. cross_size - 1 */
CHORUS_API int chorus_cross_size(void);  /* number of hosts */

/* What this rank may run on, found with hwloc from its CPU binding. */
typedef struct chorus_topology {
    size_t struct_size;
    int rank, size, local_rank, local_size, cross_rank, cross_size;
    size_t cores;      /* physical cores this rank may run on */
    size_t pus;        /* hardware threads (processing units) this rank may run on */
    size_t numa_nodes; /* NUMA nodes those cores belong to */
    bool homogeneous;  /* every host runs the same number of ranks */
} chorus_topology;

#define CHORUS_TOPOLOGY_INIT {.struct_size = sizeof(chorus_topology)}

/* Fills `topology` (whose struct_size the caller sets). Returns CHORUS_OK,
 * CHORUS_ERR_NOT_INITIALIZED or CHORUS_ERR_INVALID_ARGUMENT. Any thread. */
CHORUS_API chorus_status chorus_get_topology(chorus_topology *topology);

/* ---------------------------------------------------------------------------------------------
 * Memory the ranks of a host share. An allreduce of a host tensor that lies in this memory on
 * every rank reads each rank's input and writes each rank's result in place on each host: every
 * byte crosses memory once, as in a copy, instead of about twice through the staging areas
 * (docs/c-api.md, "Memory for tensors: chorus_mem_alloc"). Allocate the gradients there, once.
 */

/* Allocates `bytes` (0 allowed) of zeroed, page-aligned host memory that the other ranks of the
 * host can map, into *pointer. The memory stays valid until chorus_mem_free, also after
 * chorus_shutdown; chorus_init need not have run. Other collectives, other placements and
 * tensors that lie there on some ranks only run as for any host memory. Returns CHORUS_OK,
 * CHORUS_ERR_INVALID_ARGUMENT (`pointer` NULL) or CHORUS_ERR_OUT_OF_MEMORY (the system refused,
 * or the reservation, the host's memory size, is full; chorus_last_error says which). Any
 * thread. */
CHORUS_API chorus_status chorus_mem_alloc(size_t bytes, void **pointer);

/* Frees memory from chorus_mem_alloc and gives it back to the system; NULL is allowed. Returns
 * CHORUS_OK, or CHORUS_ERR_INVALID_ARGUMENT where `pointer` is not the start of a block from
 * chorus_mem_alloc. No operation may still use the memory. Any thread. */
CHORUS_API chorus_status chorus_mem_free(void *pointer);

/* ---------------------------------------------------------------------------------------------
 * Collectives. A submit call validates its arguments, enqueues the operation and returns a
 * handle; the background thread runs it once every rank has submitted the same name.
 * Names identify an operation across ranks: every rank submits the same name with the same
 * collective, dtype, shape (allgather: all but the first dimension), op, root and scale factors.
 * A disagreement completes the handle on every rank with CHORUS_ERR_MISMATCH and a message that
 * names the tensor, what differs and which ranks sent which value. A name may be reused once its
 * handle has completed. Submitting a name already in flight on this rank fails with
 * CHORUS_ERR_DUPLICATE_NAME.
 * A fatal error (a failed MPI call, memory that cannot be allocated) stops chorus on the rank
 * where it happens and, through a notice that rank sends, on every other rank: each pending
 * handle completes with that rank's status and a message naming the tensor, the rank that
 * failed and why; later submits fail at once with the same message. The contents of the
 * failed operations' outputs are undefined. Call chorus_shutdown then (chorus_init may follow;
 * some memory and communicators of the failed instance stay allocated). Ranks waiting for a
 * GPU collective see the notice too and abort the NCCL communicator; an asynchronous NCCL error
 * (a peer's connection lost) is fatal the same way. Not covered: a rank still creating the NCCL
 * communicator (ncclCommInitRank, at the first GPU collective) waits for every rank to join it.
 */
typedef struct chorus_handle chorus_handle;

typedef enum chorus_collective {
    CHORUS_ALLREDUCE = 0,
    CHORUS_BROADCAST = 1,
    CHORUS_ALLGATHER = 2,
    CHORUS_REDUCESCATTER = 3,
    CHORUS_ALLTOALL = 4,
} chorus_collective;
#define CHORUS_COLLECTIVE_COUNT 5

/* "allreduce", "broadcast", "allgather", "reducescatter", "alltoall"; "unknown" otherwise. */
CHORUS_API const char *chorus_collective_name(chorus_collective collective);

/* How a float32 allreduce travels. Compressed, every value is rounded to 16 bits before it is
 * sent and after each combination (the combination itself is computed in float32), which halves
 * the bytes moved:
 *   - FP16 (IEEE half): 11 significant bits; error at most (ranks + 1) * 2^-11 of the sum of
 *     magnitudes, plus (ranks + 1) * 2^-25 for values under 2^-14 (float16's subnormals);
 *     values beyond +-65504 overflow to infinity.
 *   - BF16: 8 significant bits, float32's range; relative error at most (ranks + 1) * 2^-8.
 * Other dtypes are never compressed. DEFAULT takes CHORUS_COMPRESSION (default none). */
typedef enum chorus_compression {
    CHORUS_COMPRESSION_DEFAULT = 0,
    CHORUS_COMPRESSION_NONE = 1,
    CHORUS_COMPRESSION_FP16 = 2,
    CHORUS_COMPRESSION_BF16 = 3,
} chorus_compression;

/* Everything that describes one operation; the one checked entry for all collectives. */
typedef struct chorus_op_args {
    size_t struct_size;
    chorus_collective collective;
    const char *name;     /* copied; at most 1023 bytes */
    chorus_tensor input;  /* allreduce: contribution; broadcast: data (root) / shape; allgather:
                             this rank's rows; reducescatter: the whole tensor to reduce;
                             alltoall: the rows to send, rank 0's first */
    void *output;         /* allreduce, broadcast: result buffer of the input's size, or NULL to
                             write the result into input.data (in place). allgather,
                             reducescatter, alltoall: unused (the handle owns the output). */
    chorus_op op;         /* allreduce and reducescatter */
    int root;             /* broadcast only */
    double prescale_factor;  /* allreduce, reducescatter: inputs are multiplied by it before the
                                reduction */
    double postscale_factor; /* allreduce, reducescatter: the result is multiplied by it */
    chorus_compression compression; /* allreduce of float32: how it travels */
    const int64_t *splits; /* alltoall: rows of the input for each rank, in rank order (one
                              entry per rank, summing to the first dimension), or NULL to
                              split the rows evenly; copied */
    int process_set;       /* the ranks it runs on: 0 (every rank) or an id from
                              chorus_process_set_add, whose member ranks alone submit it. Ranks,
                              splits and blocks then count the set's members, in ascending rank
                              order; a broadcast's root stays a rank of the job. */
    uint64_t flags;        /* CHORUS_OP_* bits below; 0 for none */
} chorus_op_args;

/* A flag of chorus_op_args: the operation is ordered. Ordered operations are not negotiated:
 * every rank (of the process set) must submit them in the same order, as torch.distributed and
 * NCCL require, and the N-th ordered operation of a process set on one rank runs with the N-th
 * on every other rank, with no round trip to rank 0 (nor rank 0's work for every tensor, which
 * limits the negotiated path at scale). Before the data moves, the ranks
 * exchange a short description of it: where the collective, dtype, shape (an allgather's: all
 * but the first dimension), op, root or scale factors differ at the same position, the handle
 * completes on every rank with CHORUS_ERR_MISMATCH and a message naming the position, what
 * differs and which ranks sent which value. A rank that never submits the N-th operation leaves
 * the others waiting, as in MPI, until CHORUS_TIMEOUT_SECONDS ends the job with
 * CHORUS_ERR_TIMEOUT. Names of ordered operations need not be unique (NULL is allowed): they
 * label the timeline and messages only. When the background thread is idle, the submitting
 * thread runs the operation itself, inside chorus_submit (the two take turns and never act at
 * once); otherwise the background thread runs it. Not for chorus_submit_group, and not while
 * this rank has joined. Ordered and negotiated operations may be used in one job, but not in flight at
 * the same time: negotiated ones run when rank 0 answers, ordered ones when submitted, so
 * different ranks could run them in different orders (and wait for each other until the
 * timeout). Complete the one kind before submitting the other. */
#define CHORUS_OP_ORDERED ((uint64_t)1 << 0)

#define CHORUS_OP_ARGS_INIT                                                                      \
    {.struct_size = sizeof(chorus_op_args), .collective = CHORUS_ALLREDUCE, .name = NULL,        \
     .output = NULL, .op = CHORUS_SUM, .root = 0, .prescale_factor = 1.0,                        \
     .postscale_factor = 1.0, .compression = CHORUS_COMPRESSION_DEFAULT, .splits = NULL,    \
     .process_set = 0, .flags = 0}

/* Submits one operation. On CHORUS_OK, *handle receives a new handle. Returns CHORUS_OK,
 * CHORUS_ERR_NOT_INITIALIZED, CHORUS_ERR_INVALID_ARGUMENT, CHORUS_ERR_DUPLICATE_NAME,
 * CHORUS_ERR_SHUTDOWN, CHORUS_ERR_NOT_SUPPORTED (GPU tensor without GPU support), or the fatal
 * error that stopped the background thread. Any thread. */
CHORUS_API chorus_status chorus_submit(const chorus_op_args *args, chorus_handle **handle);

/* Submits `count` operations of one collective (allreduce, allgather or reducescatter) that are
 * negotiated and completed as one, and fused where they can be: the single handle completes when
 * all of them have. Each args[i] has its own name and the same process set; an allgather's or
 * reducescatter's output i is read with chorus_handle_output_at(handle, i, ...). */
CHORUS_API chorus_status chorus_submit_group(const chorus_op_args *args, size_t count,
                                             chorus_handle **handle);

/* Shorthands for chorus_submit. `output` NULL means in place. */
CHORUS_API chorus_status chorus_allreduce_async(const char *name, const chorus_tensor *input,
                                                void *output, chorus_op op,
                                                chorus_handle **handle);
CHORUS_API chorus_status chorus_broadcast_async(const char *name, const chorus_tensor *tensor,
                                                int root, chorus_handle **handle);
CHORUS_API chorus_status chorus_allgather_async(const char *name, const chorus_tensor *input,
                                                chorus_handle **handle);
/* Reducescatter: every rank submits a tensor of the same shape; the tensors are reduced with `op`
 * and rank r receives the r-th block of rows of the result: the first dimension split as evenly
 * as it goes, the first (rows % ranks) ranks one row more (as Horovod splits it), a block of 0
 * rows where there are fewer rows than ranks. The block comes as the handle's output
 * (chorus_handle_output). Host tensors only for now (GPU tensors: CHORUS_ERR_NOT_SUPPORTED). */
CHORUS_API chorus_status chorus_reducescatter_async(const char *name, const chorus_tensor *input,
                                                    chorus_op op, chorus_handle **handle);
/* Alltoall: rank r sends rows splits[k] of its input (in order: rank 0's rows first) to each
 * rank k, and receives from every rank the rows that rank sent it, in rank order, as the
 * handle's output; chorus_handle_received_splits tells how many rows came from each rank.
 * `splits` NULL splits the rows evenly (the first dimension must divide by the ranks). The
 * dtype and every dimension but the first must agree on all ranks. Host tensors only for now. */
CHORUS_API chorus_status chorus_alltoall_async(const char *name, const chorus_tensor *input,
                                               const int64_t *splits, chorus_handle **handle);

/* Blocking forms: submit, wait, free the handle. The error message, if any, is then in
 * chorus_last_error(). chorus_allgather copies the gathered tensor's descriptor to *output;
 * its data is allocated with malloc and belongs to the caller (free() it). */
CHORUS_API chorus_status chorus_allreduce(const char *name, const chorus_tensor *input,
                                          void *output, chorus_op op);
CHORUS_API chorus_status chorus_broadcast(const char *name, const chorus_tensor *tensor, int root);
CHORUS_API chorus_status chorus_allgather(const char *name, const chorus_tensor *input,
                                          chorus_tensor *output);
/* Blocking reducescatter: *output gets this rank's block, as chorus_allgather's. */
CHORUS_API chorus_status chorus_reducescatter(const char *name, const chorus_tensor *input,
                                              chorus_op op, chorus_tensor *output);
/* Blocking alltoall: *output as chorus_allgather's; `received_splits` (one entry per rank, or
 * NULL) gets the rows received from each rank. */
CHORUS_API chorus_status chorus_alltoall(const char *name, const chorus_tensor *input,
                                         const int64_t *splits, chorus_tensor *output,
                                         int64_t *received_splits);

/* A rank that has run out of data joins: until every rank has joined, the collectives of the
 * other ranks go on, with this rank contributing zeros to allreduces (an average divides by the
 * ranks that contributed) and no rows to allgathers; a broadcast from a joined root fails. With
 * CHORUS_JOINED_GATHERS=fail (as Horovod), an allgather or broadcast while a rank has joined
 * fails with CHORUS_ERR_NOT_SUPPORTED on the ranks that submitted it, naming the joined ranks.
 * Blocks until every rank has joined. Returns CHORUS_OK or an error. */
CHORUS_API chorus_status chorus_join(void);

/* The rank that joined last in the latest join that completed on this rank (what Horovod's
 * join() returns), -1 before any; CHORUS_ERR_NOT_INITIALIZED (< 0) when not initialized. */
CHORUS_API int chorus_last_joined_rank(void);

/* Returns once every rank has called it as many times: a negotiated collective like the others
 * (named "chorus.barrier.N" for the N-th call on the rank), so a rank that never arrives is
 * reported as a stall, and a failure as any collective's. Returns CHORUS_OK or an error. */
CHORUS_API chorus_status chorus_barrier(void);

/* Process sets, as Horovod's: collectives among some of the ranks. Every rank of the job calls
 * chorus_process_set_add with the same ranks (ascending), in the same order as its other adds
 * and removes; it returns once every rank has, with the set's id (> 0) in *process_set. Sets may
 * overlap. A set's collectives are negotiated with everything else (rank 0 coordinates, whether
 * or not it is a member) but wait only for the set's members, and run on a communicator of
 * their own, so sets with no rank in common proceed independently. chorus_process_set_remove
 * is called likewise by every rank; tensors of the set still pending fail with
 * CHORUS_ERR_INVALID_ARGUMENT naming it. Returns CHORUS_OK or an error (ranks of the set that
 * differ between ranks: CHORUS_ERR_MISMATCH on every rank). */
CHORUS_API chorus_status chorus_process_set_add(const int *ranks, int count, int *process_set);
CHORUS_API chorus_status chorus_process_set_remove(int process_set);
/* The members of set `process_set` (0: every rank), ascending: up to `capacity` of them into
 * `ranks`, their number into *count. CHORUS_ERR_INVALID_ARGUMENT for a set that does not exist
 * (never added, or removed). */
CHORUS_API chorus_status chorus_process_set_ranks(int process_set, int *ranks, int capacity,
                                                  int *count);

/* The timeline (see CHORUS_TIMELINE) at run time, as Horovod's start_timeline/stop_timeline:
 * every rank may call them, rank 0 writes. Start records from now on into `path` (replacing the
 * timeline being written, which is completed and closed; a path this process already wrote gets
 * ".N" before its extension instead of being truncated); stop completes and closes the file. Each
 * returns once the background thread has switched. Returns CHORUS_OK,
 * CHORUS_ERR_NOT_INITIALIZED, CHORUS_ERR_INVALID_ARGUMENT (the file cannot be written, or another
 * thread is switching) or the status of a failure that stopped chorus. */
CHORUS_API chorus_status chorus_start_timeline(const char *path);
CHORUS_API chorus_status chorus_stop_timeline(void);

/* Adds a span of your own to the timeline, on a row of its own: what the training loop did
 * around chorus's work (compute of a layer, data loading), so that one picture shows both.
 * `start_seconds` and `end_seconds` are CLOCK_MONOTONIC times (clock_gettime; Python's
 * time.monotonic()). Any thread may call it, on any rank; rank 0's marks are written while a
 * timeline is being written and dropped otherwise, the other ranks' are ignored. Returns
 * CHORUS_OK, CHORUS_ERR_NOT_INITIALIZED or CHORUS_ERR_INVALID_ARGUMENT (an empty row or label,
 * or a span that ends before it starts). */
CHORUS_API chorus_status chorus_timeline_mark(const char *row, const char *label,
                                              double start_seconds, double end_seconds);

/* ---------------------------------------------------------------------------------------------
 * Handles.
 */

/* CHORUS_IN_PROGRESS while running, then the final status. Never blocks. Any thread. */
CHORUS_API chorus_status chorus_test(const chorus_handle *handle);

/* Blocks until the handle completes; returns its final status. Any thread; several threads may
 * wait on one handle. */
CHORUS_API chorus_status chorus_wait(chorus_handle *handle);

/* The handle's error message ("" on success or while in progress). Valid until the handle is
 * freed. */
CHORUS_API const char *chorus_handle_error(const chorus_handle *handle);

/* For a completed allgather: the gathered tensor; for a reducescatter: this rank's block; for
 * an alltoall: the rows received. Its data belongs to the handle and is freed with it. Returns
 * CHORUS_OK, CHORUS_IN_PROGRESS, CHORUS_ERR_INVALID_ARGUMENT (none of those) or the operation's
 * error. */
CHORUS_API chorus_status chorus_handle_output(const chorus_handle *handle, chorus_tensor *output);

/* For a completed alltoall: the rows received from each rank, into `splits` (room for
 * `capacity` entries, at least the number of ranks of its process set). Returns CHORUS_OK, CHORUS_IN_PROGRESS,
 * CHORUS_ERR_INVALID_ARGUMENT (not an alltoall, or too little room) or the operation's error. */
CHORUS_API chorus_status chorus_handle_received_splits(const chorus_handle *handle,
                                                       int64_t *splits, size_t capacity);

/* Like chorus_handle_output, but moves the data to the caller, who must free() it. */
CHORUS_API chorus_status chorus_handle_take_output(chorus_handle *handle, chorus_tensor *output);

/* For a grouped allgather or reducescatter (chorus_submit_group): the output of args[member]
 * (member 0 is what chorus_handle_output gives), and the same moved to the caller. Also
 * CHORUS_ERR_INVALID_ARGUMENT when `member` is not below the group's size. */
CHORUS_API chorus_status chorus_handle_output_at(const chorus_handle *handle, size_t member,
                                                 chorus_tensor *output);
CHORUS_API chorus_status chorus_handle_take_output_at(chorus_handle *handle, size_t member,
                                                      chorus_tensor *output);

/* Releases the handle. Freeing a handle that is still in progress is allowed: chorus frees it when
 * the operation completes, and the buffers must stay untouched until then. NULL is ignored. A
 * handle freed twice is usually caught (an error is logged and nothing else happens), but not
 * always: freeing it twice is a bug to fix, like a double free(). */
CHORUS_API void chorus_handle_free(chorus_handle *handle);

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_H */

/*
 * execute.c — see execute.h. A batch of one host tensor is reduced in its output buffer. A fused
 * batch is reduced where its tensors lie when the hierarchical algorithm runs it; otherwise it
 * goes through the fusion buffer in segments (packed_pipeline.h), with the prescale factor
 * applied while packing. GPU batches go to NCCL through the device's fusion buffer.
 */
#include "execute.h"

#include "../collectives/pieces.h"
#include "../collectives/reduce.h"
#include "../core/log.h"
#include "../core/output_pool.h"
#include "../fusion/fusion_plan.h"
#include "../fusion/packed_pipeline.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Elements of all the members of a batch together. */
static size_t batch_elements(const struct wire_response *responses, const size_t *members,
                             size_t member_count)
{
    size_t total = 0;
    for (size_t m = 0; m < member_count; m++)
        total += request_elements(&responses[members[m]].request);
    return total;
}

/* The dtype an allreduce travels as: float16 or bfloat16 for a compressed float32 tensor, else
 * its own. */
static chorus_dtype wire_dtype(const struct wire_request *request)
{
    if (request->dtype != CHORUS_FLOAT32)
        return (chorus_dtype)request->dtype;
    return request->compression == CHORUS_COMPRESSION_BF16   ? CHORUS_BFLOAT16
           : request->compression == CHORUS_COMPRESSION_FP16 ? CHORUS_FLOAT16
                                                             : CHORUS_FLOAT32;
}

static double output_factor(const struct wire_response *response)
{
    double factor = response->request.postscale;
    if (response->request.op == CHORUS_AVERAGE && response->contributors > 0)
        factor /= (double)response->contributors;
    return factor;
}

/* Bytes of each of a rank's staging areas in the host's shared segment. Measured with the
 * algorithm alone (np=2, 256 KiB-64 MiB, 3 interleaved rounds, 2026-11-22) on the development VM
 * (1 MiB L2 per core): 512 KiB was fastest (1 MiB in 67-78 us, 64 MiB in 9.3-10 ms), ahead of
 * 256 KiB (94-100 us, 10.1-10.7 ms), 1 MiB and 2 MiB. */
#define NODE_CHUNK_BYTES ((size_t)512 << 10)

/* Creates the host's shared segment the first time an algorithm that works through it runs.
 * Every rank selects it for the same response, so the collective calls here line up. */
static chorus_status ensure_node(struct executor *executor, char *error, size_t error_size)
{
    if (executor->node_ready)
        return CHORUS_OK;
    if (MPI_Comm_split_type(executor->data_comm, MPI_COMM_TYPE_SHARED, executor->rank,
                            MPI_INFO_NULL, &executor->node_comm) != MPI_SUCCESS) {
        snprintf(error, error_size, "MPI_Comm_split_type failed");
        return CHORUS_ERR_MPI;
    }
    int local_rank = 0;
    MPI_Comm_rank(executor->node_comm, &local_rank);
    if (MPI_Comm_split(executor->data_comm, local_rank, executor->rank, &executor->cross_comm) !=
        MPI_SUCCESS) {
        snprintf(error, error_size, "MPI_Comm_split failed");
        return CHORUS_ERR_MPI;
    }
    chorus_status status =
        node_segment_create_mpi(&executor->node, &executor->node_comm, &executor->cross_comm,
                                NODE_CHUNK_BYTES, executor->staging_areas,
                                (enum staging_stores)executor->staging_stores,
                                executor->oversubscribed,
                                error, error_size);
    executor->node_ready = status == CHORUS_OK;
    if (executor->node_ready && executor->node.cross != NULL) {
        executor->node.cross->interrupted = executor->transport.interrupted;
        executor->node.cross->interrupt_context = executor->transport.interrupt_context;
    }
    return status;
}

chorus_status executor_prepare(struct executor *executor, char *error, size_t error_size)
{
    return executor->local_ranks > 1 ? ensure_node(executor, error, error_size) : CHORUS_OK;
}

static int choose_algorithm(const struct executor *executor, chorus_collective collective,
                            size_t bytes)
{
    return algorithm_select(collective, executor->forced_algorithm[collective], bytes,
                            executor->nranks, executor->local_ranks);
}

/* The algorithm chosen for `bytes` of `collective`, named for the timeline once it can run;
 * *node is the host's shared segment when the algorithm works through it (created on first
 * use), else NULL. */
static const struct algorithm *prepare_algorithm(struct executor *executor,
                                                 chorus_collective collective, size_t bytes,
                                                 struct node_segment **node, chorus_status *status,
                                                 char *error, size_t error_size)
{
    size_t table_size = 0;
    int chosen = choose_algorithm(executor, collective, bytes);
    const struct algorithm *algorithm = &algorithm_table(collective, &table_size)[chosen];
    *node = NULL;
    *status = CHORUS_OK;
    if (algorithm->needs != NEEDS_NOTHING) { /* it works through the host's segment */
        *status = ensure_node(executor, error, error_size);
        *node = &executor->node;
    }
    if (*status == CHORUS_OK)
        executor->last_algorithm = algorithm->name;
    return algorithm;
}

/* How long a rank that finds a peer of its host poisoned waits for that peer's notice, which
 * says why: the peer sends it before it poisons its counter, so it is normally there. */
#define NOTICE_WAIT_SECONDS 1.0

/* A peer of this host (local rank `peer`) stopped after a fatal error in the middle of the
 * algorithm that just ran, so that its result means nothing. */
static chorus_status local_peer_failed(struct executor *executor, int peer, char *error,
                                       size_t error_size)
{
    double deadline = monotonic_seconds() + NOTICE_WAIT_SECONDS;
    chorus_status status;
    while ((status = executor_peer_failure(executor, error, error_size)) == CHORUS_OK &&
           monotonic_seconds() < deadline)
        sched_yield();
    if (status != CHORUS_OK)
        return status;
    snprintf(error, error_size, "stopped because local rank %d of this host failed", peer);
    return CHORUS_ERR_INTERNAL;
}

/* On failure, says which algorithm failed on how many bytes, and why. */
static chorus_status algorithm_outcome(struct executor *executor, chorus_collective collective,
                                       const struct algorithm *algorithm,
                                       const struct node_segment *node, size_t bytes,
                                       chorus_status status, char *error, size_t error_size)
{
    int poisoned = node != NULL ? node_segment_poisoned(node) : -1;
    if (poisoned >= 0)
        status = local_peer_failed(executor, poisoned, executor->transport.error,
                                   sizeof executor->transport.error);
    if (status != CHORUS_OK)
        snprintf(error, error_size, "%s (%s, %zu bytes): %s", chorus_collective_name(collective),
                 algorithm->name, bytes, executor->transport.error);
    return status;
}

/* Allreduces `buffer`, or, when `pieces` is not NULL, the buffer made of them (the hierarchical
 * algorithm only). */
static chorus_status run_allreduce(struct executor *executor, void *buffer,
                                   const struct allreduce_piece *pieces, size_t piece_count,
                                   size_t count, chorus_dtype dtype, chorus_op op, double factor,
                                   char *error, size_t error_size)
{
    size_t bytes = count * chorus_dtype_size(dtype);
    struct node_segment *node = NULL;
    chorus_status status = CHORUS_OK;
    const struct algorithm *algorithm =
        prepare_algorithm(executor, CHORUS_ALLREDUCE, bytes, &node, &status, error, error_size);
    if (status != CHORUS_OK)
        return status;
    struct allreduce_args args = {
        .transport = &executor->transport,
        .scratch = &executor->scratch,
        .node = node,
        .buffer = buffer,
        .pieces = pieces,
        .piece_count = piece_count,
        .count = count,
        .dtype = dtype,
        .op = op == CHORUS_AVERAGE ? CHORUS_SUM : op,
        .postscale = factor != 1.0 ? &factor : NULL,
    };
    return algorithm_outcome(executor, CHORUS_ALLREDUCE, algorithm, node, bytes,
                             algorithm->run.allreduce(&args), error, error_size);
}

/* The buffer a joined rank reduces when it has no tensor of that name: the operator's
 * identity, so that it leaves the result unchanged. */
static void *stand_in_buffer(struct executor *executor, size_t bytes)
{
    return scratch_reserve(&executor->stand_in, bytes ? bytes : 1);
}

static chorus_status interrupt_on_peer_failure(void *context, char *error, size_t error_size)
{
    return executor_peer_failure(context, error, error_size);
}

/* Rank 0's NCCL id (with a leading byte that says whether it could make one) to every rank,
 * by a binomial tree over the executor's transport, whose waits see another rank's notice that
 * it failed before reaching this point. */
static chorus_status broadcast_nccl_id(struct executor *executor,
                                       uint8_t message[1 + GPU_UNIQUE_ID_BYTES], char *error,
                                       size_t error_size)
{
    struct broadcast_args args = {.transport = &executor->transport,
                                  .scratch = &executor->scratch,
                                  .buffer = message,
                                  .bytes = 1 + GPU_UNIQUE_ID_BYTES,
                                  .root = 0};
    chorus_status status = broadcast_binomial(&args);
    if (status != CHORUS_OK)
        snprintf(error, error_size, "broadcasting the NCCL id: %s", executor->transport.error);
    return status;
}

static chorus_status ensure_gpu(struct executor *executor, int device, char *error,
                                size_t error_size)
{
    if (executor->gpu != NULL)
        return CHORUS_OK;
    uint8_t message[1 + GPU_UNIQUE_ID_BYTES] = {1};
    if (executor->rank == 0)
        message[0] = gpu_unique_id(message + 1, error, error_size) == CHORUS_OK;
    chorus_status status = broadcast_nccl_id(executor, message, error, error_size);
    if (status != CHORUS_OK)
        return status;
    if (!message[0]) {
        if (executor->rank != 0)
            snprintf(error, error_size, "rank 0 could not create the NCCL communicator");
        return CHORUS_ERR_GPU;
    }
    struct gpu_interrupt interrupt = {interrupt_on_peer_failure, executor};
    return gpu_context_create(&executor->gpu, executor->rank, executor->nranks,
                              device < 0 ? 0 : device, message + 1, interrupt, error, error_size);
}

/* When a fused batch's phases ended; a batch reduced in place has no copies: packed == started
 * and unpacked == reduced. */
struct batch_times {
    double started, packed, reduced, unpacked;
};

/* Where a fused batch's copies happen. */
enum batch_layout {
    BATCH_PACKED,    /* copied into the host fusion buffer and back: spans of their own */
    BATCH_IN_PLACE,  /* no copies: the algorithm reads and writes the tensors */
    BATCH_ON_DEVICE, /* copied on the GPU's stream, inside the allreduce span */
};

/* The timeline spans of a fused batch, per tensor: the copy in, the allreduce with its
 * algorithm and fused size, the copy out (the copies only for a packed batch). */
static void timeline_batch(struct executor *executor, const struct wire_response *responses,
                           const size_t *members, size_t member_count, size_t fused_bytes,
                           enum batch_layout layout, const struct batch_times *times)
{
    char arguments[256];
    bool packed = layout == BATCH_PACKED;
    snprintf(arguments, sizeof arguments,
             "\"algorithm\": \"%s\", \"fused_bytes\": %zu, \"fused_tensors\": %zu%s",
             executor->last_algorithm, fused_bytes, member_count,
             layout == BATCH_IN_PLACE    ? ", \"in_place\": true"
             : layout == BATCH_ON_DEVICE ? ", \"packed_on_device\": true"
                                         : "");
    for (size_t m = 0; m < member_count; m++) {
        const char *name = responses[members[m]].request.name;
        if (packed)
            timeline_span(executor->timeline, name, "copy in", times->started, times->packed, NULL);
        timeline_span(executor->timeline, name, "allreduce", times->packed, times->reduced,
                      arguments);
        if (packed)
            timeline_span(executor->timeline, name, "copy out", times->reduced, times->unpacked,
                          NULL);
    }
}

/* The pieces of a fused batch: each tensor where it lies, or, for a joined rank's missing
 * tensor, the operator's identity in the stand-in buffer. NULL when out of memory. */
static struct allreduce_piece *batch_pieces(struct executor *executor,
                                            const struct wire_response *responses,
                                            const size_t *members, size_t member_count,
                                            struct request **requests, size_t total,
                                            chorus_dtype dtype, chorus_op op)
{
    size_t element_size = chorus_dtype_size(dtype);
    struct allreduce_piece *pieces =
        scratch_reserve(&executor->pieces, member_count * sizeof *pieces);
    bool missing = false;
    for (size_t m = 0; m < member_count; m++)
        missing |= requests[m] == NULL;
    unsigned char *stand_in = missing ? stand_in_buffer(executor, total * element_size) : NULL;
    if (pieces == NULL || (missing && stand_in == NULL))
        return NULL;
    size_t offset = 0;
    for (size_t m = 0; m < member_count; m++) {
        size_t count = request_elements(&responses[members[m]].request);
        void *data = requests[m] == NULL ? stand_in + offset : NULL;
        if (data != NULL)
            fill_identity(data, count, dtype, op);
        pieces[m] = (struct allreduce_piece){
            .input = requests[m] != NULL ? requests[m]->input : data,
            .output = requests[m] != NULL ? requests[m]->output : data,
            .offset = offset,
            .bytes = count * element_size,
        };
        offset += count * element_size;
    }
    return pieces;
}

/* A fused batch on a host's shared segment: the hierarchical algorithm reads the tensors where
 * they lie and writes the results straight into the outputs, so there is no fusion buffer to
 * pack and unpack. */
static chorus_status reduce_in_place(struct executor *executor,
                                     const struct wire_response *responses, const size_t *members,
                                     size_t member_count, struct request **requests, size_t total,
                                     double factor, double started, char *error, size_t error_size)
{
    const struct wire_response *first = &responses[members[0]];
    chorus_dtype dtype = (chorus_dtype)first->request.dtype;
    chorus_op op = (chorus_op)first->request.op;
    struct allreduce_piece *pieces =
        batch_pieces(executor, responses, members, member_count, requests, total, dtype, op);
    if (pieces == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    chorus_status status = run_allreduce(executor, NULL, pieces, member_count, total, dtype, op,
                                         factor, error, error_size);
    if (status == CHORUS_OK && executor->timeline != NULL) {
        double reduced = monotonic_seconds();
        struct batch_times times = {started, started, reduced, reduced};
        timeline_batch(executor, responses, members, member_count,
                       total * chorus_dtype_size(dtype), BATCH_IN_PLACE, &times);
    }
    return status;
}

/* Segments of a packed batch. Measured on the development VM (2 cores, 2026-11-22, np=2, ring
 * forced, every ResNet-50 gradient fused into one 97 MiB batch, `CHORUS_ALLREDUCE_ALGO=ring
 * CHORUS_FUSION_TENSOR_LIMIT=1G chorus-bench --workload resnet50`): step 27-33 ms with 1-2 MiB
 * segments, 33-51 ms with 4 MiB, 52-60 ms with 16 MiB, 66-81 ms unsegmented, 72 ms with
 * 512 KiB (the ring's per-call latency dominates). Each rank's share of a segment should not
 * fall far below what a ring step needs to be efficient, so the segment grows with the ranks. */
#define PACKED_SEGMENT_BYTES ((size_t)2 << 20)
#define PACKED_SEGMENT_BYTES_PER_RANK ((size_t)256 << 10)

/* What the pipeline needs to run one segment's collective. */
struct segment_collective {
    struct executor *executor;
    chorus_dtype dtype;
    chorus_op op;
    double factor;
    char *error;
    size_t error_size;
};

static chorus_status reduce_segment(void *context, void *segment, size_t count)
{
    struct segment_collective *collective = context;
    return run_allreduce(collective->executor, segment, NULL, 0, count, collective->dtype,
                         collective->op, collective->factor, collective->error,
                         collective->error_size);
}

/* A batch through the fusion buffer: packed (with the prescale factor, or converted to 16 bits
 * for a compressed float32 batch), reduced and unpacked segment by segment (packed_pipeline.h),
 * with the copier thread when there is one. */
static chorus_status reduce_packed(struct executor *executor, const struct wire_response *responses,
                                   const size_t *members, size_t member_count,
                                   struct request **requests, size_t total, double started,
                                   char *error, size_t error_size)
{
    const struct wire_response *first = &responses[members[0]];
    chorus_dtype dtype = (chorus_dtype)first->request.dtype;
    chorus_op op = (chorus_op)first->request.op;
    chorus_dtype wire = wire_dtype(&first->request);
    bool compressed = wire != dtype;
    size_t wire_size = chorus_dtype_size(wire);
    size_t segment_bytes = PACKED_SEGMENT_BYTES;
    if (segment_bytes < (size_t)executor->nranks * PACKED_SEGMENT_BYTES_PER_RANK)
        segment_bytes = (size_t)executor->nranks * PACKED_SEGMENT_BYTES_PER_RANK;
    size_t segment_elements = segment_bytes / wire_size;
    size_t half_elements = total < segment_elements ? total : segment_elements;
    struct allreduce_piece *pieces =
        batch_pieces(executor, responses, members, member_count, requests, total, dtype, op);
    char *fusion = scratch_reserve(&executor->fusion, 2 * half_elements * wire_size + 1);
    if (pieces == NULL || fusion == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    void *const halves[2] = {fusion, fusion + half_elements * wire_size};
    /* A compressed batch is scaled while it is converted back, in float32. */
    double factor = output_factor(first);
    struct packed_batch batch = {
        .pieces = pieces,
        .piece_count = member_count,
        .count = total,
        .wire_dtype = wire,
        .compressed = compressed,
        .prescale = first->request.prescale,
        .decompress_factor = (float)factor,
    };
    struct segment_collective collective = {executor, wire, op, compressed ? 1.0 : factor,
                                            error, error_size};
    struct packed_times times;
    chorus_status status = packed_pipeline_run(
        &batch, executor->copier.running ? &executor->copier : NULL, halves, segment_elements,
        reduce_segment, &collective, &times);
    if (status == CHORUS_OK && executor->timeline != NULL && member_count > 1) {
        struct batch_times spans = {started, times.packed, times.reduced, monotonic_seconds()};
        timeline_batch(executor, responses, members, member_count, total * wire_size,
                       BATCH_PACKED, &spans);
    }
    return status;
}

/* A batch of one or more allreduces of host tensors with the same reduction. */
static chorus_status execute_allreduce_batch(struct executor *executor,
                                             const struct wire_response *responses,
                                             const size_t *members, size_t member_count,
                                             struct request **requests, char *error,
                                             size_t error_size)
{
    const struct wire_response *first = &responses[members[0]];
    chorus_dtype dtype = (chorus_dtype)first->request.dtype;
    chorus_op op = (chorus_op)first->request.op;
    size_t element_size = chorus_dtype_size(dtype);
    double prescale = first->request.prescale;
    double factor = output_factor(first);
    bool compressed = wire_dtype(&first->request) != dtype;

    if (member_count == 1 && !compressed) {
        struct request *request = requests[0];
        size_t count = request_elements(&first->request);
        void *buffer;
        if (request != NULL) {
            buffer = request->output;
            if (request->output != request->input && count != 0)
                memcpy(request->output, request->input, count * element_size);
            scale_buffer(buffer, count, dtype, prescale);
        } else {
            buffer = stand_in_buffer(executor, count * element_size);
            if (buffer == NULL)
                return CHORUS_ERR_OUT_OF_MEMORY;
            fill_identity(buffer, count, dtype, op);
        }
        /* A joined rank scales too: in the ring and hierarchical algorithms each rank scales
         * the part of the result it reduces, for everyone. */
        return run_allreduce(executor, buffer, NULL, 0, count, dtype, op, factor, error,
                             error_size);
    }

    double started = monotonic_seconds();
    size_t total = batch_elements(responses, members, member_count);
    /* Only the hierarchical algorithm takes a list of pieces; a prescale or a conversion to
     * 16 bits needs a copy anyway. */
    int chosen = choose_algorithm(executor, CHORUS_ALLREDUCE, total * element_size);
    if (prescale == 1.0 && !compressed && chosen == ALLREDUCE_HIERARCHICAL)
        return reduce_in_place(executor, responses, members, member_count, requests, total, factor,
                               started, error, error_size);
    return reduce_packed(executor, responses, members, member_count, requests, total, started,
                         error, error_size);
}

/* A batch of allreduces of GPU tensors: one NCCL call, through the device's fusion buffer when
 * the batch has more than one tensor. */
static chorus_status execute_gpu_allreduce(struct executor *executor,
                                           const struct wire_response *responses,
                                           const size_t *members, size_t member_count,
                                           struct request **requests, char *error,
                                           size_t error_size)
{
    const struct wire_response *first = &responses[members[0]];
    chorus_status status = ensure_gpu(executor, requests[0]->desc.device, error, error_size);
    struct gpu_piece *pieces = scratch_reserve(&executor->pieces, member_count * sizeof *pieces);
    if (status != CHORUS_OK)
        return status;
    if (pieces == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    for (size_t m = 0; m < member_count; m++)
        pieces[m] = (struct gpu_piece){.input = requests[m]->input,
                                       .output = requests[m]->output,
                                       .count = requests[m]->count};
    double started = monotonic_seconds();
    double scale = first->request.prescale * output_factor(first);
    status = gpu_allreduce(executor->gpu, pieces, member_count, (chorus_dtype)first->request.dtype,
                           (chorus_op)first->request.op, scale, error, error_size);
    executor->last_algorithm = "nccl";
    if (status == CHORUS_OK && member_count > 1 && executor->timeline != NULL) {
        double reduced = monotonic_seconds();
        struct batch_times times = {started, started, reduced, reduced};
        timeline_batch(executor, responses, members, member_count,
                       batch_elements(responses, members, member_count) *
                           chorus_dtype_size((chorus_dtype)first->request.dtype),
                       BATCH_ON_DEVICE, &times);
    }
    return status;
}

/* Broadcasts `bytes` of host memory from `root` with the algorithm the selection picks. */
static chorus_status run_broadcast(struct executor *executor, void *buffer, size_t bytes, int root,
                                   char *error, size_t error_size)
{
    struct node_segment *node = NULL;
    chorus_status status = CHORUS_OK;
    const struct algorithm *algorithm =
        prepare_algorithm(executor, CHORUS_BROADCAST, bytes, &node, &status, error, error_size);
    if (status != CHORUS_OK)
        return status;
    struct broadcast_args args = {.transport = &executor->transport,
                                  .scratch = &executor->scratch,
                                  .node = node,
                                  .buffer = buffer,
                                  .bytes = bytes,
                                  .root = root};
    return algorithm_outcome(executor, CHORUS_BROADCAST, algorithm, node, bytes,
                             algorithm->run.broadcast(&args), error, error_size);
}

/* The root's input must also be its output. */
static chorus_status root_output(struct request *request, size_t bytes, bool gpu, char *error,
                                 size_t error_size)
{
    if (request == NULL || request->output == request->input || bytes == 0)
        return CHORUS_OK;
    if (!gpu) {
        memcpy(request->output, request->input, bytes);
        return CHORUS_OK;
    }
    chorus_status copied = gpu_copy(request->output, request->input, bytes);
    if (copied != CHORUS_OK)
        snprintf(error, error_size, "copying the root's input to its output failed");
    return copied;
}

/* A broadcast of one host tensor, in its output buffer. */
static chorus_status execute_broadcast(struct executor *executor,
                                       const struct wire_response *response,
                                       struct request *request, char *error, size_t error_size)
{
    size_t bytes = response_bytes(response);
    int root = response->request.root;
    chorus_status status = CHORUS_OK;
    if (executor->rank == root)
        status = root_output(request, bytes, false, error, error_size);
    void *buffer = request != NULL ? request->output : stand_in_buffer(executor, bytes);
    if (status != CHORUS_OK)
        return status;
    if (buffer == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    return run_broadcast(executor, buffer, bytes, root, error, error_size);
}

/* Broadcasts of GPU tensors from one root, each in its own output: one NCCL group. */
static chorus_status execute_gpu_broadcast(struct executor *executor,
                                           const struct wire_response *responses,
                                           const size_t *members, size_t member_count,
                                           struct request **requests, char *error,
                                           size_t error_size)
{
    int root = responses[members[0]].request.root;
    chorus_status status = ensure_gpu(executor, requests[0]->desc.device, error, error_size);
    void **buffers = calloc(member_count, sizeof *buffers);
    size_t *bytes = calloc(member_count, sizeof *bytes);
    if (status == CHORUS_OK && (buffers == NULL || bytes == NULL))
        status = CHORUS_ERR_OUT_OF_MEMORY;
    for (size_t m = 0; status == CHORUS_OK && m < member_count; m++) {
        bytes[m] = response_bytes(&responses[members[m]]);
        buffers[m] = requests[m]->output;
        if (executor->rank == root)
            status = root_output(requests[m], bytes[m], true, error, error_size);
    }
    if (status == CHORUS_OK)
        status = gpu_broadcast(executor->gpu, buffers, bytes, member_count, root, error,
                               error_size);
    executor->last_algorithm = "nccl";
    free(buffers);
    free(bytes);
    return status;
}

/* Broadcasts of host tensors from one root: the root packs them into the fusion buffer, one
 * broadcast moves it, the others unpack it. A joined rank's missing tensors take no part in
 * the copies. */
static chorus_status execute_broadcast_batch(struct executor *executor,
                                             const struct wire_response *responses,
                                             const size_t *members, size_t member_count,
                                             struct request **requests, char *error,
                                             size_t error_size)
{
    int root = responses[members[0]].request.root;
    bool is_root = executor->rank == root;
    size_t total = 0;
    for (size_t m = 0; m < member_count; m++)
        total += response_bytes(&responses[members[m]]);
    unsigned char *fused = scratch_reserve(&executor->fusion, total + 1);
    if (fused == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    size_t offset = 0;
    for (size_t m = 0; is_root && m < member_count; m++) {
        size_t bytes = response_bytes(&responses[members[m]]);
        if (requests[m] != NULL && bytes != 0)
            memcpy(fused + offset, requests[m]->input, bytes);
        offset += bytes;
    }
    chorus_status status = run_broadcast(executor, fused, total, root, error, error_size);
    /* The root's fusion buffer still holds its inputs: it unpacks them into outputs of its own
     * like everyone else. */
    offset = 0;
    for (size_t m = 0; status == CHORUS_OK && m < member_count; m++) {
        size_t bytes = response_bytes(&responses[members[m]]);
        bool in_place = is_root && requests[m] != NULL &&
                        requests[m]->output == requests[m]->input;
        if (requests[m] != NULL && bytes != 0 && !in_place)
            memcpy(requests[m]->output, fused + offset, bytes);
        offset += bytes;
    }
    return status;
}

/* Allgathers blocks of host memory (rank r's `block_bytes[r]` land at recv + offsets[r]) with
 * the algorithm the selection picks for `total` bytes. */
static chorus_status run_allgather(struct executor *executor, const void *send, void *recv,
                                   const size_t *block_bytes, const size_t *offsets, size_t total,
                                   char *error, size_t error_size)
{
    struct node_segment *node = NULL;
    chorus_status status = CHORUS_OK;
    const struct algorithm *algorithm =
        prepare_algorithm(executor, CHORUS_ALLGATHER, total, &node, &status, error, error_size);
    if (status != CHORUS_OK)
        return status;
    struct allgather_args args = {.transport = &executor->transport,
                                  .scratch = &executor->scratch,
                                  .node = node,
                                  .send = send,
                                  .recv = recv,
                                  .block_bytes = block_bytes,
                                  .offsets = offsets};
    return algorithm_outcome(executor, CHORUS_ALLGATHER, algorithm, node, total,
                             algorithm->run.allgather(&args), error, error_size);
}

/* An allgather's output: for a request, `bytes` from the output pool (host; *capacity is what
 * the pool gave) or the device; for a joined rank, the stand-in buffer. NULL, with the reason in
 * `error`, when out of memory. */
static void *gathered_output(struct executor *executor, const struct wire_response *response,
                             const struct request *request, size_t bytes, size_t *capacity,
                             char *error, size_t error_size)
{
    *capacity = bytes;
    void *output = request == NULL                          ? stand_in_buffer(executor, bytes)
                   : response->request.device != DEVICE_HOST ? gpu_malloc(bytes,
                                                                          request->desc.device)
                                                             : output_pool_take(bytes, capacity);
    if (output == NULL)
        snprintf(error, error_size, "allgather \"%s\": cannot allocate %zu bytes of output",
                 response->request.name, bytes);
    return output;
}

/* Hands the gathered tensor (all ranks' rows, `output`) to the request's handle, which owns it
 * from now on. */
static void deliver_gathered(const struct wire_response *response, struct request *request,
                             void *output, size_t capacity)
{
    const struct wire_request *shape = &response->request;
    bool gpu = shape->device != DEVICE_HOST;
    int64_t rows = 0;
    for (uint32_t r = 0; r < response->first_dim_count; r++)
        rows += response->first_dims[r];
    chorus_tensor gathered = {.data = output,
                              .dtype = (chorus_dtype)shape->dtype,
                              .ndims = shape->ndims,
                              .memory = gpu ? CHORUS_MEMORY_CUDA : CHORUS_MEMORY_HOST,
                              .device = gpu ? shape->device : 0};
    memcpy(gathered.shape, shape->shape, sizeof gathered.shape);
    gathered.shape[0] = rows;
    handle_set_output(request->handle, &gathered, true, capacity);
}

/* After the collective: a request's output goes to its handle when it succeeded, else back to
 * where it came from. A joined rank's stand-in stays. */
static void settle_gathered(const struct wire_response *response, struct request *request,
                            void *output, size_t capacity, chorus_status status)
{
    if (request == NULL || output == NULL)
        return;
    if (status == CHORUS_OK)
        deliver_gathered(response, request, output, capacity);
    else if (response->request.device != DEVICE_HOST)
        gpu_free(output);
    else
        output_pool_give(output, capacity);
}

/* Where each rank's rows of an allgather land in the gathered tensor; returns its bytes. */
static size_t gather_layout(const struct wire_response *response, int nranks, size_t *block_bytes,
                            size_t *offsets)
{
    size_t row_bytes = allgather_row_bytes(&response->request), total = 0;
    for (int r = 0; r < nranks; r++) {
        block_bytes[r] = (size_t)response->first_dims[r] * row_bytes;
        offsets[r] = total;
        total += block_bytes[r];
    }
    return total;
}

/* An allgather of one host tensor, straight into its output. */
static chorus_status execute_allgather(struct executor *executor,
                                       const struct wire_response *response,
                                       struct request *request, char *error, size_t error_size)
{
    int p = executor->nranks;
    size_t *block_bytes = calloc((size_t)p, sizeof *block_bytes);
    size_t *offsets = calloc((size_t)p, sizeof *offsets);
    chorus_status status = CHORUS_ERR_OUT_OF_MEMORY;
    if (block_bytes != NULL && offsets != NULL) {
        size_t total = gather_layout(response, p, block_bytes, offsets), capacity = 0;
        void *output =
            gathered_output(executor, response, request, total, &capacity, error, error_size);
        if (output != NULL)
            status = run_allgather(executor, request != NULL ? request->input : output, output,
                                   block_bytes, offsets, total, error, error_size);
        settle_gathered(response, request, output, capacity, status);
    }
    free(block_bytes);
    free(offsets);
    return status;
}

/* Allgathers of GPU tensors, each into its own device output: one NCCL group. */
static chorus_status execute_gpu_allgather(struct executor *executor,
                                           const struct wire_response *responses,
                                           const size_t *members, size_t member_count,
                                           struct request **requests, char *error,
                                           size_t error_size)
{
    size_t p = (size_t)executor->nranks;
    chorus_status status = ensure_gpu(executor, requests[0]->desc.device, error, error_size);
    struct gpu_gather *gathers = calloc(member_count, sizeof *gathers);
    size_t *layout = calloc(2 * p * member_count, sizeof *layout);
    size_t *capacities = calloc(member_count, sizeof *capacities);
    if (status == CHORUS_OK && (gathers == NULL || layout == NULL || capacities == NULL))
        status = CHORUS_ERR_OUT_OF_MEMORY;
    for (size_t m = 0; status == CHORUS_OK && m < member_count; m++) {
        const struct wire_response *response = &responses[members[m]];
        size_t *block_bytes = layout + 2 * p * m, *offsets = block_bytes + p;
        size_t total = gather_layout(response, (int)p, block_bytes, offsets);
        void *output = gathered_output(executor, response, requests[m], total, &capacities[m],
                                       error, error_size);
        if (output == NULL)
            status = CHORUS_ERR_OUT_OF_MEMORY;
        gathers[m] = (struct gpu_gather){requests[m]->input, output, block_bytes, offsets};
    }
    if (status == CHORUS_OK)
        status = gpu_allgather(executor->gpu, gathers, member_count, error, error_size);
    executor->last_algorithm = "nccl";
    for (size_t m = 0; gathers != NULL && m < member_count; m++)
        settle_gathered(&responses[members[m]], requests[m], gathers[m].recv, capacities[m],
                        status);
    free(gathers);
    free(layout);
    free(capacities);
    return status;
}

/* Allgathers of host tensors together: each rank's contribution is its blocks of every member
 * in a row, packed into the fusion buffer after the room for the gathered result; one allgather
 * moves the contributions; each member's rows are then copied out of every rank's contribution
 * into the member's output. */
static chorus_status execute_allgather_batch(struct executor *executor,
                                             const struct wire_response *responses,
                                             const size_t *members, size_t member_count,
                                             struct request **requests, char *error,
                                             size_t error_size)
{
    int p = executor->nranks, me = executor->rank;
    size_t *block_bytes = calloc((size_t)p, sizeof *block_bytes);
    size_t *offsets = calloc((size_t)p, sizeof *offsets);
    void **outputs = calloc(member_count, sizeof *outputs);
    size_t *capacities = calloc(member_count, sizeof *capacities);
    chorus_status status = CHORUS_OK;
    if (block_bytes == NULL || offsets == NULL || outputs == NULL || capacities == NULL) {
        status = CHORUS_ERR_OUT_OF_MEMORY;
        goto out;
    }
    size_t total = 0;
    for (int r = 0; r < p; r++) {
        for (size_t m = 0; m < member_count; m++) {
            const struct wire_response *response = &responses[members[m]];
            block_bytes[r] +=
                (size_t)response->first_dims[r] * allgather_row_bytes(&response->request);
        }
        offsets[r] = total;
        total += block_bytes[r];
    }
    unsigned char *gathered = scratch_reserve(&executor->fusion, total + block_bytes[me] + 1);
    if (gathered == NULL) {
        status = CHORUS_ERR_OUT_OF_MEMORY;
        goto out;
    }
    unsigned char *send = gathered + total;
    size_t packed = 0;
    for (size_t m = 0; m < member_count; m++) {
        const struct wire_response *response = &responses[members[m]];
        size_t bytes = (size_t)response->first_dims[me] * allgather_row_bytes(&response->request);
        if (requests[m] != NULL && bytes != 0)
            memcpy(send + packed, requests[m]->input, bytes);
        packed += bytes;
    }
    status = run_allgather(executor, send, gathered, block_bytes, offsets, total, error,
                           error_size);
    /* Member m's rows from rank r follow the rows of members before m in r's contribution. */
    size_t *within = calloc((size_t)p, sizeof *within);
    if (status == CHORUS_OK && within == NULL)
        status = CHORUS_ERR_OUT_OF_MEMORY;
    for (size_t m = 0; status == CHORUS_OK && m < member_count; m++) {
        const struct wire_response *response = &responses[members[m]];
        size_t row_bytes = allgather_row_bytes(&response->request);
        size_t bytes = batch_member_bytes(response), written = 0;
        /* A joined rank's missing member needs no output: nothing is unpacked for it. */
        unsigned char *output =
            requests[m] != NULL ? gathered_output(executor, response, requests[m], bytes,
                                                  &capacities[m], error, error_size)
                                : NULL;
        if (requests[m] != NULL && output == NULL) {
            status = CHORUS_ERR_OUT_OF_MEMORY;
            break;
        }
        outputs[m] = output;
        for (int r = 0; r < p; r++) {
            size_t block = (size_t)response->first_dims[r] * row_bytes;
            if (output != NULL && block != 0)
                memcpy(output + written, gathered + offsets[r] + within[r], block);
            written += block;
            within[r] += block;
        }
    }
    free(within);
    for (size_t m = 0; m < member_count; m++)
        settle_gathered(&responses[members[m]], requests[m], outputs[m], capacities[m], status);
out:
    free(block_bytes);
    free(offsets);
    free(outputs);
    free(capacities);
    return status;
}

/* Runs one batch of the plan. */
static chorus_status execute_batch(struct executor *executor, const struct wire_response *responses,
                                   const size_t *members, size_t member_count,
                                   struct request **requests, char *detail, size_t detail_size)
{
    const struct wire_response *first = &responses[members[0]];
    bool gpu = first->request.device != DEVICE_HOST;
    for (size_t m = 0; first->request.collective == CHORUS_ALLGATHER && m < member_count; m++)
        if (responses[members[m]].first_dim_count != (uint32_t)executor->nranks) {
            snprintf(detail, detail_size, "allgather \"%s\": bad response",
                     responses[members[m]].request.name);
            return CHORUS_ERR_PROTOCOL;
        }
    /* A joined rank's stand-in buffers are host memory. */
    for (size_t m = 0; gpu && m < member_count; m++)
        if (requests[m] == NULL) {
            snprintf(detail, detail_size, "joined ranks cannot yet stand in for GPU tensors");
            return CHORUS_ERR_NOT_SUPPORTED;
        }
    switch ((chorus_collective)first->request.collective) {
    case CHORUS_ALLREDUCE:
        return gpu ? execute_gpu_allreduce(executor, responses, members, member_count, requests,
                                           detail, detail_size)
                   : execute_allreduce_batch(executor, responses, members, member_count, requests,
                                             detail, detail_size);
    case CHORUS_BROADCAST:
        if (gpu)
            return execute_gpu_broadcast(executor, responses, members, member_count, requests,
                                         detail, detail_size);
        return member_count > 1 ? execute_broadcast_batch(executor, responses, members,
                                                          member_count, requests, detail,
                                                          detail_size)
                                : execute_broadcast(executor, first, requests[0], detail,
                                                    detail_size);
    case CHORUS_ALLGATHER:
        if (gpu)
            return execute_gpu_allgather(executor, responses, members, member_count, requests,
                                         detail, detail_size);
        return member_count > 1 ? execute_allgather_batch(executor, responses, members,
                                                          member_count, requests, detail,
                                                          detail_size)
                                : execute_allgather(executor, first, requests[0], detail,
                                                    detail_size);
    }
    return CHORUS_OK; /* the wire decoder admits no other collective */
}

/* Batches to run until the injected fault, that one included; 0: none armed. */
static _Atomic long batches_before_fault;

void executor_inject_fault(long nth)
{
    atomic_store(&batches_before_fault, nth > 0 ? nth : 0);
}

/* Whether the injected fault hits this batch (see executor_inject_fault). */
static bool injected_fault_now(void)
{
    long left = atomic_load(&batches_before_fault);
    while (left > 0 && !atomic_compare_exchange_weak(&batches_before_fault, &left, left - 1))
        ;
    return left == 1;
}

chorus_status executor_run(struct executor *executor, const struct wire_response *responses,
                           size_t count, char *error, size_t error_size)
{
    struct fusion_plan plan;
    if (!fusion_plan_build(responses, count, executor->fusion_threshold,
                           executor->fusion_tensor_limit, &plan)) {
        snprintf(error, error_size, "out of memory planning fusion");
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    struct request **requests = calloc(count ? count : 1, sizeof *requests);
    chorus_status status = requests ? CHORUS_OK : CHORUS_ERR_OUT_OF_MEMORY;
    for (size_t b = 0; status == CHORUS_OK && b < plan.batch_count; b++) {
        const struct fusion_batch *batch = &plan.batches[b];
        const size_t *members = &plan.order[batch->first];
        const struct wire_response *first = &responses[members[0]];
        if (first->type == RESPONSE_JOIN_DONE) {
            executor->joined = false;
            executor->join_done(executor->owner);
            continue;
        }
        for (size_t m = 0; m < batch->count; m++) {
            requests[m] =
                executor->take_request(executor->owner, responses[members[m]].request.name);
            if (requests[m] == NULL && first->type == RESPONSE_EXECUTE && !executor->joined) {
                snprintf(error, error_size,
                         "rank %d was told to run %s \"%s\", which it never submitted",
                         executor->rank,
                         chorus_collective_name(responses[members[m]].request.collective),
                         responses[members[m]].request.name);
                status = CHORUS_ERR_PROTOCOL;
            }
        }
        if (status != CHORUS_OK)
            break;
        if (first->type == RESPONSE_ERROR) {
            if (requests[0] != NULL)
                executor->finish(executor->owner, requests[0], (chorus_status)first->status,
                                 first->message);
            continue;
        }
        char detail[1024] = "";
        bool gpu = first->request.device != DEVICE_HOST;
        double started = monotonic_seconds();
        for (size_t m = 0; executor->timeline != NULL && m < batch->count; m++)
            timeline_span(executor->timeline, responses[members[m]].request.name, "queue",
                          responses[members[m]].agreed_at, started, NULL);
        chorus_status outcome = CHORUS_ERR_MPI;
        if (injected_fault_now())
            snprintf(detail, sizeof detail, "injected fault (a test's stand-in for a failed MPI "
                                            "call) on rank %d", executor->rank);
        else
            outcome = execute_batch(executor, responses, members, batch->count, requests, detail,
                                    sizeof detail);
        /* Fused allreduces write their own spans, with their copies. */
        if (executor->timeline != NULL &&
            (batch->count == 1 || first->request.collective != CHORUS_ALLREDUCE)) {
            double ended = monotonic_seconds();
            for (size_t m = 0; m < batch->count; m++) {
                const struct wire_response *member = &responses[members[m]];
                char arguments[256];
                snprintf(arguments, sizeof arguments,
                         "\"algorithm\": \"%s\", \"bytes\": %zu, \"status\": \"%s\"%s",
                         gpu                        ? "nccl"
                         : executor->last_algorithm ? executor->last_algorithm
                                                    : "?",
                         batch_member_bytes(member), chorus_status_name(outcome),
                         batch->count > 1 ? ", \"fused\": true" : "");
                timeline_span(executor->timeline, member->request.name,
                              chorus_collective_name(member->request.collective), started, ended,
                              arguments);
            }
        }
        /* A failed collective leaves the ranks out of step, except for errors decided the same
         * way on every rank before any data moved (unsupported GPU features). */
        bool fatal = outcome != CHORUS_OK && outcome != CHORUS_ERR_NOT_SUPPORTED;
        /* Before the handles complete: their owners may submit again at once, and the other
         * ranks may be waiting for this one inside the collective. */
        if (fatal) {
            executor_abort(executor, outcome, detail);
            executor->fatal_error(executor->owner, outcome, detail);
        }
        for (size_t m = 0; m < batch->count; m++) {
            if (requests[m] == NULL)
                continue;
            if (outcome == CHORUS_OK)
                executor->finish(executor->owner, requests[m], CHORUS_OK, NULL);
            else {
                char *message = format_string("%s \"%s\": %s",
                                              chorus_collective_name(first->request.collective),
                                              responses[members[m]].request.name, detail);
                executor->finish(executor->owner, requests[m], outcome, message);
                free(message);
            }
        }
        if (fatal) {
            snprintf(error, error_size, "%s", detail);
            status = outcome;
        }
    }
    free(requests);
    fusion_plan_free(&plan);
    timeline_flush(executor->timeline);
    /* A user thread just woken by a completion may be waiting for this core: while idle, the
     * background thread polls for 50 us before it yields. Yielding now measured (np=2 on 2
     * cores, chorus-bench, 4 interleaved rounds) allreduce 64 B-4 KiB in 14-18 us instead of
     * 15-100 us, broadcast 8 B-32 KiB in 16-21 us instead of 20-30 us. */
    if (count > 0)
        sched_yield();
    return status;
}

bool executor_watch_aborts(struct executor *executor, MPI_Comm control_comm)
{
    executor->transport.interrupted = interrupt_on_peer_failure;
    executor->transport.interrupt_context = executor;
    return abort_watch_start(&executor->abort, control_comm);
}

chorus_status executor_peer_failure(struct executor *executor, char *error, size_t error_size)
{
    if (!abort_watch_poll(&executor->abort))
        return CHORUS_OK;
    const struct abort_notice *notice = &executor->abort.notice;
    snprintf(error, error_size, "stopped because rank %d failed: %.440s", (int)notice->rank,
             notice->reason);
    chorus_status status = (chorus_status)notice->status;
    return status < 0 ? status : CHORUS_ERR_INTERNAL;
}

void executor_abort(struct executor *executor, chorus_status status, const char *reason)
{
    if (executor->aborted)
        return;
    executor->aborted = true;
    /* A rank that stops because another did has nothing to tell: everyone got that notice. */
    if (!executor->abort.received)
        abort_notify(executor->abort.comm, status, reason);
    if (executor->node_ready)
        node_segment_poison(&executor->node);
}

void executor_release(struct executor *executor)
{
    abort_watch_stop(&executor->abort);
    /* After a fatal error, transfers that a wait gave up on (transport_mpi.c) may still use
     * their buffers: the scratch buffers, the fusion buffer, the host's segment. They are
     * leaked. */
    bool in_use = executor->aborted;
    if (!in_use) {
        scratch_release(&executor->scratch);
        scratch_release(&executor->fusion);
        scratch_release(&executor->stand_in);
    }
    scratch_release(&executor->pieces);
    copier_stop(&executor->copier);
    gpu_context_destroy(executor->gpu, executor->aborted);
    executor->gpu = NULL;
    timeline_close(executor->timeline);
    executor->timeline = NULL;
    if (executor->node_ready && !in_use) {
        node_segment_destroy_mpi(&executor->node);
        MPI_Comm_free(&executor->node_comm);
        MPI_Comm_free(&executor->cross_comm);
        executor->node_ready = false;
    }
}

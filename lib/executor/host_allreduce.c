/*
 * host_allreduce.c — allreduces of host tensors. A batch of one tensor is reduced in its output
 * buffer. A fused batch is reduced where its tensors lie when the hierarchical algorithm runs
 * it; otherwise it goes through the fusion buffer in segments (packed_pipeline.h), with the
 * prescale factor applied while packing.
 */
#include "backend.h"

#include "../collectives/collectives.h"
#include "../compression/quantize.h"
#include "../compression/topk.h"
#include "../fusion/fusion.h"

#include <string.h>

static_assert((int)QUANTIZE_NEAREST == 0 && (int)QUANTIZE_STOCHASTIC == 1,
              "CHORUS_COMPRESSION_ROUNDING's values (params_table.c) follow enum quantize_rounding");

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
    unsigned char *stand_in = missing ? executor_stand_in_buffer(executor, total * element_size) : NULL;
    if (pieces == NULL || (missing && stand_in == NULL))
        return NULL;
    size_t offset = 0;
    for (size_t m = 0; m < member_count; m++) {
        size_t count = request_elements(&responses[members[m]].request);
        void *data = requests[m] == NULL ? stand_in + offset : NULL;
        if (data != NULL)
            reduce_fill_identity(data, count, dtype, op);
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
    chorus_status status = executor_run_host_allreduce(executor, NULL, pieces, member_count, total, dtype,
                                              op, factor, false, error, error_size);
    if (status == CHORUS_OK && executor->timeline != NULL) {
        double reduced = clock_seconds();
        struct batch_times times = {started, started, reduced, reduced};
        executor_timeline_batch(executor, responses, members, member_count, total * chorus_dtype_size(dtype),
                       BATCH_IN_PLACE, &times);
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
    return executor_run_host_allreduce(collective->executor, segment, NULL, 0, count, collective->dtype,
                              collective->op, collective->factor, false, collective->error,
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
    chorus_dtype wire = executor_wire_dtype(&first->request);
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
    double factor = executor_output_factor(first);
    struct packed_batch batch = {
        .pieces = pieces,
        .piece_count = member_count,
        .count = total,
        .wire_dtype = wire,
        .compressed = compressed,
        .prescale = first->request.prescale,
        .decompress_factor = (float)factor,
    };
    struct segment_collective collective = {executor, wire,      op, compressed ? 1.0 : factor,
                                            error,    error_size};
    struct packed_times times;
    chorus_status status =
        packed_pipeline_run(&batch, executor->copier.running ? &executor->copier : NULL, halves,
                            segment_elements, reduce_segment, &collective, &times);
    if (status == CHORUS_OK && executor->timeline != NULL && member_count > 1) {
        struct batch_times spans = {started, times.packed, times.reduced, clock_seconds()};
        executor_timeline_batch(executor, responses, members, member_count, total * wire_size, BATCH_PACKED,
                       &spans);
    }
    return status;
}

/* The buffer a tensor of a batch is reduced in on its own: its output, holding its input times
 * the prescale, or for a joined rank that has no such tensor the operator's identity in the
 * stand-in buffer. NULL when out of memory. */
static void *own_buffer(struct executor *executor, const struct wire_request *desc,
                        struct request *request)
{
    chorus_dtype dtype = (chorus_dtype)desc->dtype;
    size_t count = request_elements(desc), element_size = chorus_dtype_size(dtype);
    if (request == NULL) {
        void *buffer = executor_stand_in_buffer(executor, count * element_size);
        if (buffer != NULL)
            reduce_fill_identity(buffer, count, dtype, (chorus_op)desc->op);
        return buffer;
    }
    if (request->output != request->input && count != 0)
        memcpy(request->output, request->input, count * element_size);
    reduce_scale_buffer(request->output, count, dtype, desc->prescale);
    return request->output;
}

/* The tensor's own stream of random numbers for stochastic rounding: the seed and its name,
 * the same on every rank and in every run. */
static uint64_t name_stream(uint64_t seed, const char *name)
{
    return quantize_stream(seed, text_digest(name, strlen(name)), 0);
}

/* One tensor of an INT8 or INT4 batch, in `buffer`, with this rank's residual (NULL: none, or
 * a joined rank's stand-in): through the quantized algorithm. */
static chorus_status reduce_quantized(struct executor *executor,
                                      const struct wire_response *response, float *buffer,
                                      float *residual, char *error, size_t error_size)
{
    const struct chorus_params *params = executor->settings->params;
    struct quantize_scheme scheme = {
        .bits = dtype_compression_bits(response->request.compression),
        .rounding = (enum quantize_rounding)params->compression_rounding,
        .stream = name_stream(params->compression_seed, response->request.name),
    };
    return executor_run_host_allreduce_compressed(executor, buffer, residual,
                                                  request_elements(&response->request), &scheme,
                                                  NULL, executor_output_factor(response), error,
                                                  error_size);
}

/* One tensor of a TOPK batch, in `buffer`, with this rank's residual (NULL: none, or a joined
 * rank's stand-in): through the top-k algorithm. */
static chorus_status reduce_topk(struct executor *executor, const struct wire_response *response,
                                 float *buffer, float *residual, char *error, size_t error_size)
{
    size_t count = request_elements(&response->request);
    struct topk_scheme scheme = {.k = topk_count(count, response->request.compression_ratio)};
    return executor_run_host_allreduce_compressed(executor, buffer, residual, count, NULL,
                                                  &scheme,
                                                  executor_output_factor(response), error,
                                                  error_size);
}

/* A float16 or bfloat16 tensor is compressed from float32: its values times the prescale in
 * the fusion buffer (which the compressed algorithms leave alone), or zeros, the sum's
 * identity, for a joined rank that has no such tensor. NULL when out of memory. */
static float *staged_float32(struct executor *executor, const struct wire_request *desc,
                             struct request *request)
{
    size_t count = request_elements(desc);
    float *staging = scratch_reserve(&executor->fusion, count * sizeof(float) + 1);
    if (staging == NULL)
        return NULL;
    if (request == NULL)
        memset(staging, 0, count * sizeof(float));
    else
        reduce_decompress_floats(staging, request->input, count, (chorus_dtype)desc->dtype,
                                 (float)desc->prescale);
    return staging;
}

chorus_status executor_host_allreduce_lossy(struct executor *executor,
                                            const struct wire_response *response,
                                            struct request *request, char *error,
                                            size_t error_size)
{
    bool staged = response->request.dtype != CHORUS_FLOAT32;
    float *buffer = staged ? staged_float32(executor, &response->request, request)
                           : own_buffer(executor, &response->request, request);
    if (buffer == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    float *residual = request != NULL ? request->error_feedback : NULL;
    chorus_status status =
        response->request.compression == CHORUS_COMPRESSION_TOPK
            ? reduce_topk(executor, response, buffer, residual, error, error_size)
            : reduce_quantized(executor, response, buffer, residual, error, error_size);
    if (status == CHORUS_OK && staged && request != NULL)
        reduce_compress_floats(request->output, buffer, request_elements(&response->request),
                               (chorus_dtype)response->request.dtype, 1.0f);
    return status;
}

/* A batch of INT8, INT4 or TOPK allreduces: each tensor through its compression's algorithm
 * on its own, so that its blocks, random numbers and top values are its own whatever it was
 * fused with. */
static chorus_status reduce_one_by_one(struct executor *executor,
                                       const struct wire_response *responses,
                                       const size_t *members, size_t member_count,
                                       struct request **requests, char *error, size_t error_size)
{
    for (size_t m = 0; m < member_count; m++) {
        chorus_status status = executor_host_allreduce_lossy(executor, &responses[members[m]],
                                                             requests[m], error, error_size);
        if (status != CHORUS_OK)
            return status;
    }
    return CHORUS_OK;
}

/* A batch of one or more allreduces of host tensors with the same reduction. */
chorus_status executor_host_allreduce(struct executor *executor, const struct wire_response *responses,
                             const size_t *members, size_t member_count, struct request **requests,
                             char *error, size_t error_size)
{
    const struct wire_response *first = &responses[members[0]];
    chorus_dtype dtype = (chorus_dtype)first->request.dtype;
    chorus_op op = (chorus_op)first->request.op;
    size_t element_size = chorus_dtype_size(dtype);
    double prescale = first->request.prescale;
    double factor = executor_output_factor(first);
    bool compressed = executor_wire_dtype(&first->request) != dtype;
    if (dtype_compression_sums_only(first->request.compression))
        return reduce_one_by_one(executor, responses, members, member_count, requests, error,
                                 error_size);

    if (member_count == 1 && !compressed) {
        struct request *request = requests[0];
        size_t count = request_elements(&first->request);
        void *buffer = own_buffer(executor, &first->request, request);
        if (buffer == NULL)
            return CHORUS_ERR_OUT_OF_MEMORY;
        /* A joined rank scales too: in the ring and hierarchical algorithms each rank scales
         * the part of the result it reduces, for everyone. Where every rank's result lies in
         * the shared heap (rank 0 said so), it may be reduced there. */
        return executor_run_host_allreduce(executor, buffer, NULL, 0, count, dtype, op, factor,
                                  first->request.in_shared_heap && request != NULL, error,
                                  error_size);
    }

    double started = clock_seconds();
    size_t total = executor_batch_elements(responses, members, member_count);
    /* Only the hierarchical algorithm takes a list of pieces; a prescale or a conversion to
     * 16 bits needs a copy anyway. */
    if (prescale == 1.0 && !compressed && executor_host_allreduce_in_place(executor, total * element_size))
        return reduce_in_place(executor, responses, members, member_count, requests, total, factor,
                               started, error, error_size);
    return reduce_packed(executor, responses, members, member_count, requests, total, started,
                         error, error_size);
}

const struct backend executor_host_backend = {
    .name = "host",
    .run = {[CHORUS_ALLREDUCE] = executor_host_allreduce,
            [CHORUS_BROADCAST] = executor_host_broadcast,
            [CHORUS_ALLGATHER] = executor_host_allgather,
            [CHORUS_REDUCESCATTER] = executor_host_reducescatter,
            [CHORUS_ALLTOALL] = executor_host_alltoall},
};

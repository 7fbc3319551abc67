/*
 * gpu_reduce_on_host.c — GPU tensors whose reduction NCCL cannot do as chorus defines it (the
 * capability table, lib/gpu/gpu_capability.c, says which), reduced in host memory by the host
 * allreduce instead. Every tensor of the batch is copied into one host buffer, reduced there in
 * one collective (so the batch stays fused), and copied back (a reducescatter only this rank's
 * rows): two copies over the bus for a result that is right instead of refused. Horovod too runs Adasum's MPI part on host buffers.
 */
#include "backend.h"

#include "../collectives/reduce.h"
#include "../gpu/gpu_capability.h"

#include <stdio.h>
#include <stdlib.h>

bool executor_gpu_reduces_on_host(chorus_dtype dtype, chorus_op op, double prescale, double postscale)
{
    return gpu_route_of(dtype, op, prescale != 1.0 || postscale != 1.0) == GPU_ROUTE_HOST;
}

/* Copies every piece's input (device memory) into one host buffer, prescales it and reduces
 * it there with the host allreduce. Returns the malloc'd buffer, the pieces one after another;
 * NULL on failure, with *status and `error` saying why. */
static char *reduce_in_host_buffer(struct executor *executor, const struct gpu_piece *pieces,
                                   size_t piece_count, chorus_dtype dtype, chorus_op op,
                                   double prescale, double factor, chorus_status *status,
                                   char *error, size_t error_size)
{
    size_t element = chorus_dtype_size(dtype), total = 0;
    for (size_t p = 0; p < piece_count; p++)
        total += pieces[p].count;
    char *host = malloc(total * element + 1);
    if (host == NULL) {
        snprintf(error, error_size, "cannot allocate %zu bytes of host memory to reduce GPU "
                                    "tensors there",
                 total * element);
        *status = CHORUS_ERR_OUT_OF_MEMORY;
        return NULL;
    }
    *status = CHORUS_OK;
    size_t offset = 0;
    for (size_t p = 0; *status == CHORUS_OK && p < piece_count; p++) {
        size_t bytes = pieces[p].count * element;
        if (bytes > 0 && gpu_copy(host + offset, pieces[p].input, bytes) != CHORUS_OK) {
            snprintf(error, error_size, "copying a GPU tensor to host memory failed");
            *status = CHORUS_ERR_GPU;
        }
        offset += bytes;
    }
    if (*status == CHORUS_OK) {
        reduce_scale_buffer(host, total, dtype, prescale);
        *status = executor_run_host_allreduce(executor, host, NULL, 0, total, dtype, op, factor, false, error,
                                     error_size);
    }
    if (*status != CHORUS_OK) {
        free(host);
        return NULL;
    }
    return host;
}

/* Copies `bytes` of a result from host memory to its device output. */
static chorus_status copy_back(void *output, const char *host, size_t bytes, char *error,
                               size_t error_size)
{
    if (bytes == 0 || gpu_copy(output, host, bytes) == CHORUS_OK)
        return CHORUS_OK;
    snprintf(error, error_size, "copying a result back to the GPU failed");
    return CHORUS_ERR_GPU;
}

chorus_status executor_gpu_allreduce_on_host(struct executor *executor, const struct gpu_piece *pieces,
                                    size_t piece_count, chorus_dtype dtype, chorus_op op,
                                    double prescale, double factor, char *error,
                                    size_t error_size)
{
    chorus_status status;
    char *host = reduce_in_host_buffer(executor, pieces, piece_count, dtype, op, prescale,
                                       factor, &status, error, error_size);
    size_t element = chorus_dtype_size(dtype), offset = 0;
    for (size_t p = 0; host != NULL && status == CHORUS_OK && p < piece_count; p++) {
        status = copy_back(pieces[p].output, host + offset, pieces[p].count * element, error,
                           error_size);
        offset += pieces[p].count * element;
    }
    free(host);
    return status;
}

chorus_status executor_gpu_reducescatter_on_host(struct executor *executor,
                                        const struct gpu_scatter *scatters, size_t count,
                                        chorus_dtype dtype, chorus_op op, double prescale,
                                        double factor, char *error, size_t error_size)
{
    struct gpu_piece *pieces = calloc(count ? count : 1, sizeof *pieces);
    if (pieces == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY;
    for (size_t t = 0; t < count; t++)
        pieces[t] = (struct gpu_piece){.input = scatters[t].input,
                                       .count = scatters[t].rows * scatters[t].row_elements};
    chorus_status status;
    char *host = reduce_in_host_buffer(executor, pieces, count, dtype, op, prescale, factor,
                                       &status, error, error_size);
    /* Only this rank's rows of each tensor go back to the GPU. */
    size_t p = (size_t)executor->nranks, me = (size_t)executor->rank;
    size_t element = chorus_dtype_size(dtype), offset = 0;
    for (size_t t = 0; host != NULL && status == CHORUS_OK && t < count; t++) {
        size_t row_bytes = scatters[t].row_elements * element;
        status = copy_back(scatters[t].output,
                           host + offset + part_start(scatters[t].rows, p, me) * row_bytes,
                           part_length(scatters[t].rows, p, me) * row_bytes, error, error_size);
        offset += pieces[t].count * element;
    }
    free(host);
    free(pieces);
    return status;
}

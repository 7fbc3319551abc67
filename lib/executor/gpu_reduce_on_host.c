/*
 * gpu_reduce_on_host.c — GPU tensors whose reduction NCCL cannot do as chorus defines it, reduced
 * in host memory by the host allreduce instead: 16-bit integers (NCCL has none), integer
 * averages and scale factors (NCCL's average truncates and its pre-multiplied sum takes floats
 * only), scale factors on min, max and product, and Adasum (each of its steps needs dot products
 * of whole vectors). Every tensor of the batch is copied into one host buffer, reduced there in
 * one collective (so the batch stays fused), and copied back: two copies over the bus for a
 * result that is right instead of refused. Horovod too runs Adasum's MPI part on host buffers.
 */
#include "backend.h"

#include "../collectives/reduce.h"

#include <stdio.h>
#include <stdlib.h>

bool gpu_reduces_on_host(chorus_dtype dtype, chorus_op op, double prescale, double postscale)
{
    bool floating = dtype_is_floating(dtype);
    bool summing = op == CHORUS_SUM || op == CHORUS_AVERAGE;
    bool scaled = prescale != 1.0 || postscale != 1.0;
    return op == CHORUS_ADASUM || dtype == CHORUS_INT16 || dtype == CHORUS_UINT16 ||
           (!floating && (op == CHORUS_AVERAGE || scaled)) || (!summing && scaled);
}

chorus_status gpu_allreduce_on_host(struct executor *executor, const struct gpu_piece *pieces,
                                    size_t piece_count, chorus_dtype dtype, chorus_op op,
                                    double prescale, double factor, char *error,
                                    size_t error_size)
{
    size_t element = chorus_dtype_size(dtype), total = 0;
    for (size_t p = 0; p < piece_count; p++)
        total += pieces[p].count;
    char *host = malloc(total * element + 1);
    if (host == NULL) {
        snprintf(error, error_size, "cannot allocate %zu bytes of host memory to reduce GPU "
                                    "tensors there",
                 total * element);
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    chorus_status status = CHORUS_OK;
    size_t offset = 0;
    for (size_t p = 0; status == CHORUS_OK && p < piece_count; p++) {
        size_t bytes = pieces[p].count * element;
        if (bytes > 0 && gpu_copy(host + offset, pieces[p].input, bytes) != CHORUS_OK) {
            snprintf(error, error_size, "copying a GPU tensor to host memory failed");
            status = CHORUS_ERR_GPU;
        }
        offset += bytes;
    }
    if (status == CHORUS_OK) {
        scale_buffer(host, total, dtype, prescale);
        status = run_host_allreduce(executor, host, NULL, 0, total, dtype, op, factor, error,
                                    error_size);
    }
    offset = 0;
    for (size_t p = 0; status == CHORUS_OK && p < piece_count; p++) {
        size_t bytes = pieces[p].count * element;
        if (bytes > 0 && gpu_copy(pieces[p].output, host + offset, bytes) != CHORUS_OK) {
            snprintf(error, error_size, "copying a result back to the GPU failed");
            status = CHORUS_ERR_GPU;
        }
        offset += bytes;
    }
    free(host);
    return status;
}

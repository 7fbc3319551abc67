/*
 * gpu_stub.c — the GPU interface when chorus is built without CUDA and NCCL: every operation
 * fails with CHORUS_ERR_NOT_SUPPORTED and a message saying so.
 */
#include "gpu.h"

#include <stdio.h>

static chorus_status not_built(char *error, size_t error_size)
{
    snprintf(error, error_size,
             "chorus was built without GPU support (CUDA and NCCL were not found or -Dgpu=disabled)");
    return CHORUS_ERR_NOT_SUPPORTED;
}

bool gpu_compiled(void)
{
    return false;
}

int gpu_nccl_version(void)
{
    return 0;
}

int gpu_device_count(void)
{
    return 0;
}

void gpu_versions(char *text, size_t text_size)
{
    snprintf(text, text_size, "not built with CUDA and NCCL");
}

chorus_status gpu_unique_id(uint8_t id[GPU_UNIQUE_ID_BYTES], char *error, size_t error_size)
{
    (void)id;
    return not_built(error, error_size);
}

chorus_status gpu_context_create(struct gpu_context **context, int rank, int nranks, int device,
                                 const uint8_t id[GPU_UNIQUE_ID_BYTES],
                                 struct gpu_interrupt interrupt, double timeout_seconds,
                                 char *error, size_t error_size)
{
    (void)rank, (void)nranks, (void)device, (void)id, (void)interrupt, (void)timeout_seconds;
    *context = NULL;
    return not_built(error, error_size);
}

void gpu_context_destroy(struct gpu_context *context, bool abandon)
{
    (void)context, (void)abandon;
}

chorus_status gpu_allreduce(struct gpu_context *context, const struct gpu_piece *pieces,
                            size_t piece_count, chorus_dtype dtype, chorus_op op, double scale,
                            char *error, size_t error_size)
{
    (void)context, (void)pieces, (void)piece_count, (void)dtype, (void)op, (void)scale;
    return not_built(error, error_size);
}

chorus_status gpu_broadcast(struct gpu_context *context, void *const *buffers, const size_t *bytes,
                            size_t count, int root, char *error, size_t error_size)
{
    (void)context, (void)buffers, (void)bytes, (void)count, (void)root;
    return not_built(error, error_size);
}

chorus_status gpu_reducescatter(struct gpu_context *context, const struct gpu_scatter *scatters,
                                size_t count, chorus_dtype dtype, chorus_op op, double scale,
                                char *error, size_t error_size)
{
    (void)context, (void)scatters, (void)count, (void)dtype, (void)op, (void)scale;
    return not_built(error, error_size);
}

chorus_status gpu_allgather(struct gpu_context *context, const struct gpu_gather *gathers,
                            size_t count, char *error, size_t error_size)
{
    (void)context, (void)gathers, (void)count;
    return not_built(error, error_size);
}

chorus_status gpu_alltoall(struct gpu_context *context, const struct gpu_exchange *exchange,
                           char *error, size_t error_size)
{
    (void)context, (void)exchange;
    return not_built(error, error_size);
}

chorus_status gpu_ready_record(int device, void *stream, void **ready, char *error,
                               size_t error_size)
{
    (void)device, (void)stream;
    *ready = NULL;
    return not_built(error, error_size);
}

chorus_status gpu_ready_wait(struct gpu_context *context, void *ready, char *error,
                             size_t error_size)
{
    (void)context, (void)ready;
    return not_built(error, error_size);
}

void gpu_ready_release(void *ready)
{
    (void)ready;
}

void *gpu_output_alloc(struct gpu_context *context, size_t bytes, void *consumer)
{
    (void)context, (void)bytes, (void)consumer;
    return NULL;
}

void gpu_output_free(void *pointer)
{
    (void)pointer;
}

void *gpu_malloc(size_t bytes, int device)
{
    (void)bytes, (void)device;
    return NULL;
}

void gpu_free(void *pointer)
{
    (void)pointer;
}

chorus_status gpu_copy(void *destination, const void *source, size_t bytes)
{
    (void)destination, (void)source, (void)bytes;
    return CHORUS_ERR_NOT_SUPPORTED;
}

int gpu_pointer_device(const void *pointer)
{
    (void)pointer;
    return -1;
}

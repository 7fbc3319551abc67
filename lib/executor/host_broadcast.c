/*
 * host_broadcast.c — broadcasts of host tensors: one in its output buffer, several from one
 * root through the fusion buffer.
 */
#include "backend.h"

#include <stdio.h>
#include <string.h>

/* A broadcast of one host tensor, in its output buffer. */
static chorus_status execute_broadcast(struct executor *executor,
                                       const struct wire_response *response,
                                       struct request *request, char *error, size_t error_size)
{
    size_t bytes = response_bytes(response);
    int root = response->request.root;
    /* Nothing to move, and a tensor of no elements may have no data at all (NULL): every rank
     * knows the size, so none takes part. */
    if (bytes == 0)
        return CHORUS_OK;
    chorus_status status = CHORUS_OK;
    if (executor->rank == root)
        status = executor_root_output(request, bytes, false, error, error_size);
    void *buffer = request != NULL ? request->output : executor_stand_in_buffer(executor, bytes);
    if (status != CHORUS_OK)
        return status;
    if (buffer == NULL) {
        snprintf(error, error_size, "cannot allocate %zu bytes for a joined rank's stand-in",
                 bytes);
        return CHORUS_ERR_OUT_OF_MEMORY;
    }
    return executor_run_host_broadcast(executor, buffer, bytes, root, error, error_size);
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
    chorus_status status = executor_run_host_broadcast(executor, fused, total, root, error, error_size);
    /* The root's fusion buffer still holds its inputs: it unpacks them into outputs of its own
     * like everyone else. */
    offset = 0;
    for (size_t m = 0; status == CHORUS_OK && m < member_count; m++) {
        size_t bytes = response_bytes(&responses[members[m]]);
        bool in_place = is_root && requests[m] != NULL && requests[m]->output == requests[m]->input;
        if (requests[m] != NULL && bytes != 0 && !in_place)
            memcpy(requests[m]->output, fused + offset, bytes);
        offset += bytes;
    }
    return status;
}

chorus_status executor_host_broadcast(struct executor *executor, const struct wire_response *responses,
                             const size_t *members, size_t member_count, struct request **requests,
                             char *error, size_t error_size)
{
    if (member_count == 1)
        return execute_broadcast(executor, &responses[members[0]], requests[0], error, error_size);
    return execute_broadcast_batch(executor, responses, members, member_count, requests, error,
                                   error_size);
}

/*
 * transfers.c — chorus_send_async and chorus_recv_async: a transfer's checks (its tensor, tag,
 * peer and process set), then a request that the background thread posts in call order with the
 * ordered operations (lib/coordinator/transfers.c).
 */
#include "instance.h"
#include "validate.h"

#include "../core/context.h"

#include <stdlib.h>
#include <string.h>

/* Whether job rank `rank` is a member of the set (every rank is of the job's, set 0). */
static bool member_of(const struct process_set *set, int size, int rank)
{
    return set == NULL ? rank >= 0 && rank < size : process_set_rank_of(set, rank) >= 0;
}

/* The checks that need the instance: the tag's range, the process set, both ends in it. */
static chorus_status check_ends(struct chorus_context *context, const char *kind, int peer,
                                int tag, int process_set)
{
    if (context->links != NULL)
        return REJECT(CHORUS_ERR_NOT_SUPPORTED,
                      "%s: chorus runs on a world without MPI (over UCX), which has no sends and "
                      "receives yet",
                      kind);
    if (tag < 0 || tag > context->tag_upper_bound)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT, "%s: tag %d is outside 0..%d (MPI_TAG_UB)",
                      kind, tag, context->tag_upper_bound);
    chorus_status status = CHORUS_OK;
    pthread_mutex_lock(&context->lock);
    const struct process_set *set =
        process_set != 0 ? process_set_find(&context->process_sets, process_set) : NULL;
    char *described = set != NULL ? process_set_describe(set) : NULL;
    const char *where = described != NULL ? described : "the job";
    if (process_set != 0 && set == NULL)
        status = REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                        "%s: process set %d does not exist (never added, or removed)", kind,
                        process_set);
    else if (!member_of(set, context->size, context->rank))
        status = REJECT(CHORUS_ERR_INVALID_ARGUMENT, "%s: rank %d is not a member of %s", kind,
                        context->rank, where);
    else if (peer != CHORUS_ANY_SOURCE && !member_of(set, context->size, peer))
        status = REJECT(CHORUS_ERR_INVALID_ARGUMENT, "%s: rank %d is not a member of %s", kind,
                        peer, where);
    pthread_mutex_unlock(&context->lock);
    free(described);
    return status;
}

static chorus_status submit_transfer(enum transfer_direction direction,
                                     const chorus_tensor *tensor, int peer, int tag,
                                     int process_set, chorus_handle **handle_out)
{
    bool send = direction == TRANSFER_SEND;
    const char *kind = send ? "chorus_send_async" : "chorus_recv_async";
    if (tensor == NULL || handle_out == NULL)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT, "%s: tensor and handle must not be NULL",
                      kind);
    *handle_out = NULL;
    chorus_status status = api_validate_tensor(kind, "", tensor);
    if (status != CHORUS_OK)
        return status;
    if (tensor->memory != CHORUS_MEMORY_HOST)
        return REJECT(CHORUS_ERR_NOT_SUPPORTED,
                      "%s: the tensor is on GPU %d; chorus sends and receives host tensors (use "
                      "NCCL's send and receive for GPU tensors)",
                      kind, tensor->device);
    if (peer < 0 && (send || peer != CHORUS_ANY_SOURCE))
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT, "%s: rank %d is not a rank", kind, peer);
    struct chorus_context *context = api_instance_acquire();
    if (context == NULL)
        return api_not_initialized(kind);
    struct request *request = NULL;
    struct chorus_handle *handle = NULL;
    status = check_ends(context, kind, peer, tag, process_set);
    if (status != CHORUS_OK)
        goto out;
    request = calloc(1, sizeof *request);
    handle = handle_create_transfer(direction);
    if (request != NULL) {
        request->desc.name =
            peer == CHORUS_ANY_SOURCE
                ? text_format("receive from any rank, tag %d", tag)
                : text_format("%s rank %d, tag %d", send ? "send to" : "receive from", peer,
                              tag);
        request->desc.group = strdup("");
    }
    if (request == NULL || handle == NULL || request->desc.name == NULL ||
        request->desc.group == NULL) {
        status = REJECT(CHORUS_ERR_OUT_OF_MEMORY, "%s: out of memory", kind);
        goto out;
    }
    request->kind = REQUEST_TRANSFER;
    request->transfer = (struct transfer_args){.direction = direction, .peer = peer, .tag = tag};
    request->desc.dtype = (uint8_t)tensor->dtype;
    request->desc.ndims = (uint8_t)tensor->ndims;
    memcpy(request->desc.shape, tensor->shape, tensor->ndims * sizeof tensor->shape[0]);
    request->desc.device = DEVICE_HOST;
    request->desc.group_size = 1;
    request->desc.process_set = process_set;
    request->input = request->output = tensor->data;
    request->count = chorus_tensor_count(tensor);
    request->ordered = true;
    request->handle = handle;
    request->submitted_at = clock_seconds();
    status = api_enqueue_ordered(context, request);
out:
    api_instance_release();
    if (status != CHORUS_OK)
        api_discard_submission(request, handle, status);
    else
        *handle_out = handle;
    return status;
}

chorus_status chorus_send_async(const chorus_tensor *tensor, int destination, int tag,
                                int process_set, chorus_handle **handle)
{
    return submit_transfer(TRANSFER_SEND, tensor, destination, tag, process_set, handle);
}

chorus_status chorus_recv_async(const chorus_tensor *tensor, int source, int tag, int process_set,
                                chorus_handle **handle)
{
    return submit_transfer(TRANSFER_RECEIVE, tensor, source, tag, process_set, handle);
}

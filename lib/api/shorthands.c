/*
 * shorthands.c — the per-collective submit calls (chorus_allreduce_async, ...) and their
 * blocking forms, all through chorus_submit (the blocking forms through api_submit_to_wait),
 * chorus_wait and the handle calls.
 */
#include "shorthands.h"
#include "instance.h"

#include <stdint.h>

/* The fields every shorthand sets, then the submit; `args` carries the collective's own. A
 * blocking form's caller `waits` at once (api_submit_to_wait). */
static chorus_status submit_shorthand(chorus_op_args *args, const char *name,
                                      const chorus_tensor *input, chorus_handle **handle,
                                      bool waits)
{
    if (input == NULL)
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT, "%s: input tensor is NULL",
                              chorus_collective_name(args->collective));
    args->name = name;
    args->input = *input;
    return waits ? api_submit_to_wait(args, handle) : chorus_submit(args, handle);
}

static chorus_status submit_allreduce(const char *name, const chorus_tensor *input, void *output,
                                     chorus_op op, chorus_handle **handle, bool waits)
{
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.collective = CHORUS_ALLREDUCE;
    args.output = output;
    args.op = op;
    return submit_shorthand(&args, name, input, handle, waits);
}

chorus_status chorus_allreduce_async(const char *name, const chorus_tensor *input, void *output,
                                     chorus_op op, chorus_handle **handle)
{
    return submit_allreduce(name, input, output, op, handle, false);
}

static chorus_status submit_broadcast(const char *name, const chorus_tensor *tensor, int root,
                                     chorus_handle **handle, bool waits)
{
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.collective = CHORUS_BROADCAST;
    args.root = root;
    return submit_shorthand(&args, name, tensor, handle, waits);
}

chorus_status chorus_broadcast_async(const char *name, const chorus_tensor *tensor, int root,
                                     chorus_handle **handle)
{
    return submit_broadcast(name, tensor, root, handle, false);
}

static chorus_status submit_allgather(const char *name, const chorus_tensor *input,
                                     chorus_handle **handle, bool waits)
{
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.collective = CHORUS_ALLGATHER;
    return submit_shorthand(&args, name, input, handle, waits);
}

chorus_status chorus_allgather_async(const char *name, const chorus_tensor *input,
                                     chorus_handle **handle)
{
    return submit_allgather(name, input, handle, false);
}

static chorus_status submit_reducescatter(const char *name, const chorus_tensor *input,
                                         chorus_op op, chorus_handle **handle, bool waits)
{
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.collective = CHORUS_REDUCESCATTER;
    args.op = op;
    return submit_shorthand(&args, name, input, handle, waits);
}

chorus_status chorus_reducescatter_async(const char *name, const chorus_tensor *input,
                                         chorus_op op, chorus_handle **handle)
{
    return submit_reducescatter(name, input, op, handle, false);
}

static chorus_status submit_alltoall(const char *name, const chorus_tensor *input,
                                    const int64_t *splits, chorus_handle **handle, bool waits)
{
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.collective = CHORUS_ALLTOALL;
    args.splits = splits;
    return submit_shorthand(&args, name, input, handle, waits);
}

chorus_status chorus_alltoall_async(const char *name, const chorus_tensor *input,
                                    const int64_t *splits, chorus_handle **handle)
{
    return submit_alltoall(name, input, splits, handle, false);
}

chorus_status api_handle_wait_and_free(chorus_handle *handle, chorus_tensor *output,
                                   int64_t *received_splits)
{
    chorus_status status = chorus_wait(handle);
    if (status != CHORUS_OK)
        status_set_last_error(status, "%s", chorus_handle_error(handle));
    else if (received_splits != NULL) /* sets its own error */
        status = chorus_handle_received_splits(handle, received_splits, SIZE_MAX);
    if (status == CHORUS_OK && output != NULL)
        chorus_handle_take_output(handle, output);
    chorus_handle_free(handle);
    return status;
}

chorus_status chorus_allreduce(const char *name, const chorus_tensor *input, void *output,
                               chorus_op op)
{
    chorus_handle *handle = NULL;
    chorus_status status = submit_allreduce(name, input, output, op, &handle, true);
    return status != CHORUS_OK ? status : api_handle_wait_and_free(handle, NULL, NULL);
}

chorus_status chorus_broadcast(const char *name, const chorus_tensor *tensor, int root)
{
    chorus_handle *handle = NULL;
    chorus_status status = submit_broadcast(name, tensor, root, &handle, true);
    return status != CHORUS_OK ? status : api_handle_wait_and_free(handle, NULL, NULL);
}

/* The blocking forms whose output the handle owns: the descriptor must have somewhere to go. */
static chorus_status output_missing(chorus_collective collective)
{
    return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT, "%s: output descriptor is NULL",
                          chorus_collective_name(collective));
}

chorus_status chorus_allgather(const char *name, const chorus_tensor *input,
                               chorus_tensor *output)
{
    if (output == NULL)
        return output_missing(CHORUS_ALLGATHER);
    chorus_handle *handle = NULL;
    chorus_status status = submit_allgather(name, input, &handle, true);
    return status != CHORUS_OK ? status : api_handle_wait_and_free(handle, output, NULL);
}

chorus_status chorus_reducescatter(const char *name, const chorus_tensor *input, chorus_op op,
                                   chorus_tensor *output)
{
    if (output == NULL)
        return output_missing(CHORUS_REDUCESCATTER);
    chorus_handle *handle = NULL;
    chorus_status status = submit_reducescatter(name, input, op, &handle, true);
    return status != CHORUS_OK ? status : api_handle_wait_and_free(handle, output, NULL);
}

chorus_status chorus_alltoall(const char *name, const chorus_tensor *input,
                              const int64_t *splits, chorus_tensor *output,
                              int64_t *received_splits)
{
    if (output == NULL)
        return output_missing(CHORUS_ALLTOALL);
    chorus_handle *handle = NULL;
    chorus_status status = submit_alltoall(name, input, splits, &handle, true);
    return status != CHORUS_OK ? status : api_handle_wait_and_free(handle, output, received_splits);
}

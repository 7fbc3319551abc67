/*
 * submit.c — chorus_submit and chorus_submit_group: a call's checks (validate.c, and here its
 * process set), its requests for the background thread, and the queue they go into. Also
 * chorus_barrier, an allreduce of one int under a name of its own.
 */
#include "instance.h"
#include "validate.h"

#include "../coordinator/coordinator.h"
#include "../core/context.h"
#include "../core/log.h"
#include "../core/output_pool.h"
#include "../gpu/gpu.h"
#include "../lane/lane.h"
#include "../transport/shared_heap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether every rank the operation runs on shares one host: the job's (one host), or its
 * process set's members (their host names). The same answer on every member. */
static bool on_one_host(struct chorus_context *context, int process_set)
{
    if (process_set == 0)
        return context->topology.cross_size == 1;
    bool one = true;
    pthread_mutex_lock(&context->lock);
    const struct process_set *set = process_set_find(&context->process_sets, process_set);
    for (int m = 1; set != NULL && m < set->size && one; m++)
        one = strcmp(context_host_name(context, set->ranks[m]),
                     context_host_name(context, set->ranks[0])) == 0;
    pthread_mutex_unlock(&context->lock);
    return one && set != NULL;
}

/* What `args` describes, as the ranks compare it: everything but the name and the group, which
 * the caller sets. */
static void describe(struct wire_request *desc, const chorus_op_args *args, uint32_t group_size,
                     struct chorus_context *context)
{
    const struct chorus_params *params = &context->params.values;
    int default_compression = params->compression;
    const chorus_tensor *tensor = &args->input;
    bool reduces = args->collective == CHORUS_ALLREDUCE || args->collective == CHORUS_REDUCESCATTER;
    bool allreduce = args->collective == CHORUS_ALLREDUCE;
    desc->collective = (uint8_t)args->collective;
    desc->dtype = (uint8_t)tensor->dtype;
    desc->op = reduces ? (uint8_t)args->op : 0;
    desc->ndims = (uint8_t)tensor->ndims;
    memcpy(desc->shape, tensor->shape, tensor->ndims * sizeof tensor->shape[0]);
    desc->root = args->collective == CHORUS_BROADCAST ? args->root : 0;
    desc->device = tensor->memory == CHORUS_MEMORY_CUDA ? tensor->device : DEVICE_HOST;
    desc->prescale = reduces ? args->prescale_factor : 1.0;
    desc->postscale = reduces ? args->postscale_factor : 1.0;
    desc->group_size = group_size;
    desc->process_set = api_op_process_set(args);
    /* Only floating-point allreduces are compressed (dtype_compression_applies); resolving it
     * here makes every rank send the same. */
    int compression = args->compression == CHORUS_COMPRESSION_DEFAULT ? default_compression
                                                                      : (int)args->compression;
    /* CHORUS_COMPRESSION applies to host tensors; GPU tensors travel as they are unless the
     * caller names INT8, INT4 or TOPK (through host memory: gpu_compressed_on_host.c). Those
     * apply to sums and averages (validate rejects them elsewhere when explicit), TOPK to fewer
     * than 2^32 values (its indices are uint32). */
    bool sums_only = dtype_compression_sums_only(compression);
    bool explicit_lossy = args->compression != CHORUS_COMPRESSION_DEFAULT && sums_only;
    desc->compression = allreduce && dtype_compression_applies(tensor->dtype, compression) &&
                                (tensor->memory == CHORUS_MEMORY_HOST || explicit_lossy) &&
                                args->op != CHORUS_ADASUM &&
                                (!sums_only || args->op == CHORUS_SUM ||
                                 args->op == CHORUS_AVERAGE) &&
                                (compression != CHORUS_COMPRESSION_TOPK ||
                                 chorus_tensor_count(tensor) <= UINT32_MAX)
                            ? (uint8_t)compression
                            : CHORUS_COMPRESSION_NONE;
    /* On one host, compressing costs more than the copy it saves (CHORUS_COMPRESSION_ONE_HOST):
     * the tensor travels exact unless the user keeps compression there. */
    if (desc->compression != CHORUS_COMPRESSION_NONE && !params->compression_one_host &&
        on_one_host(context, desc->process_set))
        desc->compression = CHORUS_COMPRESSION_NONE;
    /* The ratio, resolved here too, so that ranks compare what they will send. */
    double ratio = api_op_compression_ratio(args);
    desc->compression_ratio = desc->compression != CHORUS_COMPRESSION_TOPK ? 0.0
                              : ratio != 0                                 ? ratio
                                                    : params->compression_topk_ratio;
    /* Where a host allreduce's result lies: the selection reduces it in place where every
     * rank's lies in the shared heap (rank 0 tells, in the response). */
    const void *output = args->output != NULL ? args->output : tensor->data;
    desc->in_shared_heap =
        allreduce && tensor->memory == CHORUS_MEMORY_HOST &&
        shared_heap_offset(output, chorus_tensor_count(tensor) * chorus_dtype_size(tensor->dtype)) !=
            SHARED_HEAP_NOWHERE;
}

/* The caller's error feedback buffer where the allreduce, as resolved in `desc`, is lossy
 * (INT8, INT4, TOPK); NULL where it travels otherwise (DEFAULT resolved to no compression, or
 * to 16 bits), which leaves the buffer untouched. */
static float *error_feedback_used(const chorus_op_args *args, const struct wire_request *desc)
{
    return dtype_compression_bits(desc->compression) != 0 ||
                   desc->compression == CHORUS_COMPRESSION_TOPK
               ? api_op_error_feedback(args)
               : NULL;
}

static struct request *request_create(const chorus_op_args *args, const char *group,
                                      uint32_t group_size, struct chorus_handle *handle,
                                      struct chorus_context *context)
{
    const chorus_tensor *tensor = &args->input;
    /* A set's names are its own (name tables key by set and name): the same name, or the same
     * group name, may be in flight in another set. */
    const char *name = args->name, *group_name = group;
    struct request *request = NULL;
    if (name != NULL) {
        /* The names in the request's own allocation: one malloc for the three. */
        size_t name_bytes = strlen(name) + 1, group_bytes = strlen(group_name) + 1;
        request = calloc(1, sizeof *request + name_bytes + group_bytes);
        if (request != NULL) {
            request->strings_inline = true;
            request->desc.name = memcpy(request->strings, name, name_bytes);
            request->desc.group = memcpy(request->strings + name_bytes, group_name, group_bytes);
        }
    }
    if (request == NULL)
        return NULL;
    describe(&request->desc, args, group_size, context);
    request->input = tensor->data;
    bool handle_output = args->collective == CHORUS_ALLGATHER ||
                         args->collective == CHORUS_REDUCESCATTER ||
                         args->collective == CHORUS_ALLTOALL;
    request->output = args->output != NULL && !handle_output ? args->output : tensor->data;
    request->count = chorus_tensor_count(tensor);
    /* chorus.h lets an empty tensor's data be NULL (an empty torch tensor's is), but the
     * executor takes a NULL buffer for a failed allocation: an empty tensor's points here, as a
     * caller's own empty buffer would. */
    static max_align_t empty_tensor_data;
    if (request->count == 0 && request->input == NULL)
        request->input = &empty_tensor_data;
    if (request->count == 0 && request->output == NULL)
        request->output = &empty_tensor_data;
    request->error_feedback = error_feedback_used(args, &request->desc);
    request->timeout_seconds = api_op_timeout(args);
    request->handle = handle;
    request->submitted_at = clock_seconds();
    return request;
}

/* A CUDA tensor's ready event on the stream that produces it (gpu_ready_record), which the
 * background thread waits for before it reads the tensor. */
static chorus_status record_ready(struct request *request, const chorus_op_args *args)
{
    if (args->input.memory != CHORUS_MEMORY_CUDA || request->count == 0)
        return CHORUS_OK;
    char error[256];
    request->cuda_stream = api_op_cuda_stream(args);
    chorus_status status = gpu_ready_record(args->input.device, request->cuda_stream,
                                            &request->ready, error, sizeof error);
    if (status != CHORUS_OK)
        return REJECT(status, "%s \"%s\": %s", chorus_collective_name(args->collective),
                      args->name, error);
    request->release_ready = gpu_ready_release;
    return CHORUS_OK;
}

/* An alltoall's rows per rank: the caller's splits, or the rows split evenly. */
static bool copy_splits(struct request *request, const chorus_op_args *args, int nranks)
{
    request->splits = calloc((size_t)nranks, sizeof *request->splits);
    if (request->splits == NULL)
        return false;
    int64_t even = args->input.shape[0] / nranks;
    request->desc.even_split = 1;
    for (int r = 0; r < nranks; r++) {
        request->splits[r] = args->splits != NULL ? args->splits[r] : even;
        if (request->splits[r] != even || even * nranks != args->input.shape[0])
            request->desc.even_split = 0;
    }
    return true;
}

/* The job's collectives (every rank's set) in the background thread's hands on this rank: a
 * barrier in the lane asks whether any rank has some (chorus_barrier, below).
 * Static, not in the context: a completing handle may count down after the context is gone. */
static _Atomic long job_collectives_in_flight;

/* Counts a job collective's handle in (before the background thread can complete it). */
static void count_in_flight(struct request *request)
{
    if (request->kind != REQUEST_COLLECTIVE || request->desc.process_set != 0 ||
        request->desc.collective >= CHORUS_COLLECTIVE_COUNT)
        return;
    atomic_fetch_add_explicit(&job_collectives_in_flight, 1, memory_order_relaxed);
    request->handle->in_flight_count = &job_collectives_in_flight;
}

/* Queues `count` requests for the background thread, unless chorus has stopped or one of their
 * names is in flight on this rank. Ordered requests are kept by their handle, not their name,
 * which only labels them: several of one name may be in flight. */
chorus_status api_enqueue_requests(struct chorus_context *context, struct request **requests,
                                   size_t count, bool wake)
{
    chorus_status status = CHORUS_OK;
    const struct request *first = requests[0];
    pthread_mutex_lock(&context->lock);
    chorus_status stopped = atomic_load(&context->stopped);
    if (stopped != CHORUS_OK)
        status = REJECT(stopped, "%s \"%s\": %s", request_operation_name(first),
                        first->desc.name, context->stopped_message);
    for (size_t i = 0; status == CHORUS_OK && i < count; i++) {
        if (!requests[i]->ordered &&
            name_table_find(&context->in_flight, request_name_set(&requests[i]->desc),
                            requests[i]->desc.name) != NULL)
            status = REJECT(CHORUS_ERR_DUPLICATE_NAME,
                            "%s \"%s\": a tensor of this name is already in flight on rank %d; "
                            "wait for it before submitting the name again",
                            request_collective_name(&requests[i]->desc), requests[i]->desc.name,
                            context->rank);
    }
    for (size_t i = 0; status == CHORUS_OK && i < count; i++) {
        if (!requests[i]->ordered &&
            !name_table_insert(&context->in_flight, request_name_set(&requests[i]->desc),
                               requests[i]->desc.name, requests[i])) {
            for (size_t j = 0; j < i; j++)
                if (!requests[j]->ordered)
                    name_table_remove(&context->in_flight, request_name_set(&requests[j]->desc),
                                      requests[j]->desc.name);
            status = REJECT(CHORUS_ERR_OUT_OF_MEMORY, "chorus_submit: out of memory");
        }
    }
    if (status == CHORUS_OK) {
        count_in_flight(requests[0]);
        for (size_t i = 0; i < count; i++) {
            if (context->queue_tail != NULL)
                context->queue_tail->next = requests[i];
            else
                context->queue_head = requests[i];
            context->queue_tail = requests[i];
        }
        if (wake)
            pthread_cond_signal(&context->wakeup);
    }
    pthread_mutex_unlock(&context->lock);
    return status;
}

void api_discard_submission(struct request *request, struct chorus_handle *handle,
                            chorus_status status)
{
    request_free(request);
    if (handle != NULL) {
        handle->members_pending = 1;
        handle_member_done(handle, status, NULL);
        chorus_handle_free(handle);
    }
}

chorus_status api_enqueue_ordered(struct chorus_context *context, struct request *request)
{
    /* It runs on this thread when the background thread is idle (no hand-off either way); else
     * the background thread is woken for it. */
    chorus_status status = api_enqueue_requests(context, &request, 1, false);
    if (status == CHORUS_OK && !coord_step_as_caller(context)) {
        pthread_mutex_lock(&context->lock);
        pthread_cond_signal(&context->wakeup);
        pthread_mutex_unlock(&context->lock);
    }
    return status;
}

/* Why a closed lane refuses `kind` "name": the instance stopped, a lane failed, or it is
 * shutting down. */
static chorus_status lane_refusal(struct chorus_context *context, const char *kind,
                                  const char *name)
{
    chorus_status stopped = atomic_load(&context->stopped);
    if (stopped != CHORUS_OK)
        return REJECT(stopped, "%s \"%s\": %s", kind, name, context->stopped_message);
    chorus_status failed = atomic_load(&context->user_failure);
    if (failed != CHORUS_OK)
        return REJECT(failed, "%s \"%s\": stopped: %s", kind, name,
                      context->user_failure_message);
    return REJECT(CHORUS_ERR_SHUTDOWN, "%s \"%s\": chorus is shutting down", kind, name);
}

/* The lane of `process_set` (lib/lane), entered (lane_leave when done), in *lane; NULL where the
 * set has none (its ranks span hosts). Refuses `kind` "name" (a status) where it has one that is
 * closed. */
static chorus_status enter_lane(struct chorus_context *context, int process_set,
                                const char *kind, const char *name, struct lane **lane)
{
    bool entered = false;
    if (process_set == 0) {
        /* Counted before the pointer is loaded, so that the background thread frees the lane
         * only after this thread entered it or saw it withdrawn (runner_release). */
        atomic_fetch_add(&context->job_lane_users, 1);
        *lane = atomic_load(&context->job_lane);
        entered = *lane != NULL && lane_enter(*lane);
        atomic_fetch_sub(&context->job_lane_users, 1);
    } else {
        pthread_mutex_lock(&context->lock);
        const struct process_set *set = process_set_find(&context->process_sets, process_set);
        *lane = set != NULL ? set->lane : NULL;
        entered = *lane != NULL && lane_enter(*lane);
        pthread_mutex_unlock(&context->lock);
    }
    if (*lane != NULL && !entered) {
        *lane = NULL;
        return lane_refusal(context, kind, name);
    }
    return CHORUS_OK;
}

/* An ordered operation through its set's lane, on this thread: it runs there and `handle`
 * completes, or the members agree on it there and it is queued for the background thread with
 * what they agreed. Leaves the lane. */
static chorus_status submit_on_lane(struct chorus_context *context, struct lane *lane,
                                    const chorus_op_args *args, struct chorus_handle *handle,
                                    int nranks)
{
    if (atomic_load(&context->join_requested)) {
        lane_leave(lane);
        handle_member_done(handle, CHORUS_ERR_INVALID_ARGUMENT,
                           "%s \"%s\": ordered operations cannot run while this rank has "
                           "joined (chorus_join)",
                           chorus_collective_name(args->collective), args->name);
        return CHORUS_OK;
    }
    struct wire_request desc;
    memset(&desc, 0, sizeof desc); /* padding too: the lane compares descriptions as bytes */
    desc.name = (char *)args->name;
    desc.group = (char *)"";
    describe(&desc, args, 1, context);
    /* An alltoall's rows per member, as the executor takes them (the lane's own may run it). */
    int64_t *splits = NULL;
    if (args->collective == CHORUS_ALLTOALL) {
        splits = calloc((size_t)nranks, sizeof *splits);
        int64_t even = args->input.shape[0] / nranks;
        desc.even_split = even * nranks == args->input.shape[0];
        for (int r = 0; splits != NULL && r < nranks; r++) {
            splits[r] = args->splits != NULL ? args->splits[r] : even;
            if (splits[r] != even)
                desc.even_split = 0;
        }
        if (splits == NULL) {
            lane_leave(lane);
            return REJECT(CHORUS_ERR_OUT_OF_MEMORY, "chorus_submit: out of memory");
        }
    }
    struct lane_operation operation = {
        .desc = &desc,
        .input = args->input.data,
        .output = args->output != NULL ? args->output : args->input.data,
        .count = chorus_tensor_count(&args->input),
        .error_feedback = error_feedback_used(args, &desc),
        .timeout_seconds = api_op_timeout(args),
        .splits = splits,
        .handle = handle,
    };
    struct lane_result result;
    enum lane_outcome outcome = lane_run(lane, &operation, &result);
    lane_leave(lane);
    free(splits);
    if (outcome == LANE_RAN) {
        if (result.status == CHORUS_OK && result.output.data != NULL)
            handle_set_output(handle, 0, &result.output, output_pool_give,
                              result.output_capacity);
        handle_finish_unpublished(handle, result.status, result.message);
        return CHORUS_OK;
    }
    struct request *request = request_create(args, "", 1, handle, context);
    if (request != NULL && args->collective == CHORUS_ALLTOALL &&
        !copy_splits(request, args, nranks)) {
        request_free(request);
        request = NULL;
    }
    if (request == NULL) {
        /* The other members run it: this rank can no longer keep in step with them. */
        ordered_agreement_free(result.agreed);
        char *message = text_format("%s \"%s\": out of memory after the members agreed on it",
                                    chorus_collective_name(args->collective), args->name);
        context_report_failure(context, CHORUS_ERR_OUT_OF_MEMORY,
                               message != NULL ? message : "out of memory");
        free(message);
        return REJECT(CHORUS_ERR_OUT_OF_MEMORY, "chorus_submit: out of memory");
    }
    chorus_status recorded = record_ready(request, args);
    if (recorded != CHORUS_OK) {
        /* Likewise: the members agreed on an operation this rank cannot run. */
        ordered_agreement_free(result.agreed);
        context_report_failure(context, recorded, chorus_last_error());
        request_free(request);
        return recorded;
    }
    request->ordered = true;
    request->agreed = result.agreed;
    chorus_status status = api_enqueue_ordered(context, request);
    if (status != CHORUS_OK)
        request_free(request);
    return status;
}

/* The process set a call names: it must exist and hold this rank. Sets *nranks to its size
 * and makes a broadcast's root (a rank of the job) a rank of the set, for api_validate_op. */
static chorus_status check_process_set(struct chorus_context *context, chorus_op_args *args,
                                       int *nranks)
{
    int id = api_op_process_set(args);
    *nranks = context->size;
    if (id == 0)
        return CHORUS_OK;
    const char *kind = chorus_collective_name(args->collective);
    const char *name = args->name != NULL ? args->name : "";
    chorus_status status = CHORUS_OK;
    pthread_mutex_lock(&context->lock);
    const struct process_set *set = process_set_find(&context->process_sets, id);
    char *described = set != NULL ? process_set_describe(set) : NULL;
    if (set == NULL)
        status = REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                        "%s \"%s\": process set %d does not exist (never added, or removed)", kind,
                        name, id);
    else if (process_set_rank_of(set, context->rank) < 0)
        status = REJECT(CHORUS_ERR_INVALID_ARGUMENT, "%s \"%s\": rank %d is not a member of %s",
                        kind, name, context->rank, described ? described : "the process set");
    else if (args->collective == CHORUS_BROADCAST && process_set_rank_of(set, args->root) < 0)
        status =
            REJECT(CHORUS_ERR_INVALID_ARGUMENT, "broadcast \"%s\": root %d is not a member of %s",
                   name, args->root, described ? described : "the process set");
    else if (args->collective == CHORUS_BROADCAST)
        args->root = process_set_rank_of(set, args->root);
    if (set != NULL)
        *nranks = set->size;
    pthread_mutex_unlock(&context->lock);
    free(described);
    return status;
}

/* The collectives whose calls may be grouped: one tensor each, fused with the others. */
static bool groupable(chorus_collective collective)
{
    return collective == CHORUS_ALLREDUCE || collective == CHORUS_ALLGATHER ||
           collective == CHORUS_REDUCESCATTER;
}

/* Enqueues `count` operations as one unit (a group when count > 1). `waits`: the caller waits
 * for them at once (a blocking form), and so turns the loop itself (chorus_wait): the
 * background thread is not woken for them. */
static chorus_status submit(const chorus_op_args *args, size_t count, chorus_handle **handle_out,
                            bool waits)
{
    if (handle_out == NULL || args == NULL)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT, "chorus_submit: args and handle must not be "
                                                   "NULL");
    *handle_out = NULL;
    struct chorus_context *context = api_instance_acquire();
    if (context == NULL)
        return api_not_initialized("chorus_submit");
    chorus_status status = CHORUS_OK;
    struct chorus_handle *handle = NULL;
    struct request *single = NULL; /* one operation needs no array */
    struct request **requests = count == 1 ? &single : calloc(count, sizeof *requests);
    if (requests == NULL) {
        status = REJECT(CHORUS_ERR_OUT_OF_MEMORY, "chorus_submit: out of memory");
        goto out;
    }
    int nranks = context->size; /* of the set the call names */
    const char *kind = chorus_collective_name(args[0].collective);
    if (count > 1 && !groupable(args[0].collective)) {
        status = REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                        "grouped %s: only allreduces, allgathers and reducescatters are grouped "
                        "(member 0, \"%s\")",
                        kind, args[0].name != NULL ? args[0].name : "");
        goto out;
    }
    bool ordered = (api_op_flags(&args[0]) & CHORUS_OP_ORDERED) != 0;
    if (ordered && count > 1) {
        status = REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                        "grouped %s: ordered operations (CHORUS_OP_ORDERED) are submitted one by "
                        "one (member 0, \"%s\")",
                        kind, args[0].name != NULL ? args[0].name : "");
        goto out;
    }
    chorus_op_args named;
    if (ordered) {
        /* An ordered operation's name only labels it. */
        named = args[0];
        if (named.name == NULL || named.name[0] == '\0')
            named.name = "ordered";
        args = &named;
    }
    for (size_t i = 0; i < count; i++) {
        if (api_op_process_set(&args[i]) != api_op_process_set(&args[0])) {
            status = REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                            "grouped %s: member %zu (\"%s\") names process set %d, member 0 "
                            "(\"%s\") process set %d",
                            kind, i, args[i].name, api_op_process_set(&args[i]), args[0].name,
                            api_op_process_set(&args[0]));
            goto out;
        }
        chorus_op_args checked = args[i];
        status = check_process_set(context, &checked, &nranks);
        if (status == CHORUS_OK)
            status = api_validate_op(&checked, nranks);
        if (status != CHORUS_OK)
            goto out;
        if (args[i].collective != args[0].collective) {
            status = REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                            "grouped %s: member %zu (\"%s\") is another collective (%s)", kind, i,
                            args[i].name, chorus_collective_name(args[i].collective));
            goto out;
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(args[i].name, args[j].name) == 0) {
                status = REJECT(CHORUS_ERR_DUPLICATE_NAME,
                                "grouped %s: the name \"%s\" appears twice in the group", kind,
                                args[i].name);
                goto out;
            }
        }
    }
    struct lane *lane = NULL;
    if (ordered) {
        status = enter_lane(context, api_op_process_set(args), kind, args->name, &lane);
        if (status != CHORUS_OK)
            goto out;
    }
    handle = handle_create(args[0].collective, count);
    if (handle == NULL) {
        if (lane != NULL)
            lane_leave(lane);
        status = REJECT(CHORUS_ERR_OUT_OF_MEMORY, "chorus_submit: out of memory");
        goto out;
    }
    if (lane != NULL) {
        status = submit_on_lane(context, lane, args, handle, nranks);
        goto out;
    }
    for (size_t i = 0; i < count; i++) {
        requests[i] = request_create(&args[i], count > 1 ? args[0].name : "", (uint32_t)count,
                                     handle, context);
        if (requests[i] != NULL)
            requests[i]->member = (uint32_t)i;
        if (requests[i] != NULL && args[i].collective == CHORUS_ALLTOALL &&
            !copy_splits(requests[i], &args[i], nranks)) {
            request_free(requests[i]);
            requests[i] = NULL;
        }
        if (requests[i] != NULL)
            requests[i]->ordered = ordered;
        if (requests[i] == NULL) {
            status = REJECT(CHORUS_ERR_OUT_OF_MEMORY, "chorus_submit: out of memory");
            goto out;
        }
        status = record_ready(requests[i], &args[i]);
        if (status != CHORUS_OK)
            goto out;
    }
    status = ordered ? api_enqueue_ordered(context, requests[0])
                     : api_enqueue_requests(context, requests, count, !waits);
out:
    api_instance_release();
    if (status != CHORUS_OK) {
        for (size_t i = 0; requests != NULL && i < count; i++)
            request_free(requests[i]);
        api_discard_submission(NULL, handle, status);
    } else {
        *handle_out = handle;
    }
    if (requests != &single)
        free(requests);
    return status;
}

chorus_status chorus_submit(const chorus_op_args *args, chorus_handle **handle)
{
    return submit(args, 1, handle, false);
}

chorus_status api_submit_to_wait(const chorus_op_args *args, chorus_handle **handle)
{
    return submit(args, 1, handle, true);
}

chorus_status chorus_submit_group(const chorus_op_args *args, size_t count, chorus_handle **handle)
{
    if (count == 0)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT, "chorus_submit_group: the group is empty");
    if (count > UINT32_MAX)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT, "chorus_submit_group: too many tensors");
    return submit(args, count, handle, false);
}

/* A barrier in the job's lane: one phase in which every rank's line says "barrier" (and a
 * rank that submitted something else at that position finds out), and whether the rank has
 * job collectives in the background thread's hands. Leaves the lane. Sets *in_flight_anywhere
 * when some rank has. */
static chorus_status barrier_on_lane(struct lane *lane, bool *in_flight_anywhere)
{
    struct wire_request desc;
    memset(&desc, 0, sizeof desc); /* padding too: the lane compares descriptions as bytes */
    desc.name = "barrier";
    desc.group = "";
    desc.collective = COLLECTIVE_BARRIER;
    desc.device = DEVICE_HOST;
    desc.compression = CHORUS_COMPRESSION_NONE;
    desc.prescale = desc.postscale = 1.0;
    desc.group_size = 1;
    uint8_t mine = atomic_load_explicit(&job_collectives_in_flight, memory_order_relaxed) > 0;
    uint8_t any = 0;
    struct lane_operation operation = {.desc = &desc, .input = &mine, .output = &any};
    struct lane_result result;
    lane_run(lane, &operation, &result);
    lane_leave(lane);
    if (result.status != CHORUS_OK)
        REJECT(result.status, "%s", result.message != NULL ? result.message : "barrier failed");
    free(result.message);
    *in_flight_anywhere = any != 0;
    return result.status;
}

/* Names a negotiated barrier cycles through: few enough that the response cache keeps them
 * (a name per call filled the cache within CHORUS_CACHE_CAPACITY barriers, after which no
 * tensor seen for the first time was cached, and each went to rank 0 in full ever after), as
 * many as threads of one rank that may wait in barriers at once. */
#define BARRIER_NAMES 16

/* A barrier negotiated as a tensor named "chorus.barrier.N", N counting this rank's barriers
 * modulo BARRIER_NAMES (every rank counts alike). */
static chorus_status negotiated_barrier(struct chorus_context *context)
{
    char name[48];
    snprintf(name, sizeof name, "chorus.barrier.%lu",
             atomic_fetch_add(&context->barriers, 1) % BARRIER_NAMES);
    api_instance_release();
    int32_t nothing = 0;
    chorus_tensor tensor = {.data = &nothing, .dtype = CHORUS_INT32, .ndims = 1, .shape = {1}};
    return chorus_allreduce(name, &tensor, NULL, CHORUS_SUM);
}

chorus_status chorus_barrier(void)
{
    struct chorus_context *context = api_instance_acquire();
    if (context == NULL)
        return api_not_initialized("chorus_barrier");
    /* Where every rank shares this host: through the job's lane, in call order with the ordered
     * operations. Else (or while this rank joins) negotiated, as any tensor: it then runs after
     * every collective that was ready on every rank before it, as Horovod's does. So that the
     * lane's barrier leaves those complete too, the ranks follow it with a negotiated one where
     * any of them has collectives in flight (all learn it in the lane's phase, so all do). */
    struct lane *lane = NULL;
    chorus_status status = atomic_load(&context->join_requested)
                               ? CHORUS_OK
                               : enter_lane(context, 0, "barrier", "barrier", &lane);
    bool in_flight_anywhere = false;
    if (lane != NULL)
        status = barrier_on_lane(lane, &in_flight_anywhere);
    if (status != CHORUS_OK || (lane != NULL && !in_flight_anywhere)) {
        api_instance_release();
        return status;
    }
    return negotiated_barrier(context); /* releases the instance */
}

/*
 * negotiation.c — see negotiation.h. Consistency is decided here, on rank 0, before any data
 * moves, so every rank receives the same verdict in the same cycle. A mismatch message names
 * the collective, the tensor, the field that differs and which ranks sent which value:
 *   allreduce "fc1.weight": dtype mismatch: ranks 0,2 float32, rank 1 float16
 */
#include "negotiation_internal.h"

#include "mismatch.h"
#include "negotiated_fields.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool negotiator_init(struct negotiator *negotiator, int nranks)
{
    memset(negotiator, 0, sizeof *negotiator);
    negotiator->nranks = nranks;
    name_table_init(&negotiator->entries);
    name_table_init(&negotiator->groups);
    name_table_init(&negotiator->memberships);
    negotiator->joined = calloc((size_t)nranks, sizeof *negotiator->joined);
    return negotiator->joined != NULL;
}

void negotiator_entry_free(struct negotiator *negotiator, struct negotiation_entry *entry)
{
    for (int r = 0; r < negotiator->nranks; r++)
        wire_request_free(&entry->requests[r]);
    free(entry->requests);
    free(entry->arrivals);
    free(entry->name);
    free(entry);
}

void negotiator_entry_unlink(struct negotiator *negotiator, struct negotiation_entry *entry)
{
    if (entry->older)
        entry->older->newer = entry->newer;
    else
        negotiator->oldest = entry->newer;
    if (entry->newer)
        entry->newer->older = entry->older;
    else
        negotiator->newest = entry->older;
    name_table_remove(&negotiator->entries, entry->process_set, entry->name);
}

void negotiator_destroy(struct negotiator *negotiator)
{
    while (negotiator->oldest != NULL) {
        struct negotiation_entry *entry = negotiator->oldest;
        negotiator_entry_unlink(negotiator, entry);
        negotiator_entry_free(negotiator, entry);
    }
    for (size_t i = 0; i < negotiator->groups.bucket_count; i++)
        for (struct name_entry *e = negotiator->groups.buckets[i]; e != NULL; e = e->next)
            negotiator_group_free(e->value);
    name_table_destroy(&negotiator->groups);
    for (size_t i = 0; i < negotiator->memberships.bucket_count; i++)
        for (struct name_entry *e = negotiator->memberships.buckets[i]; e != NULL; e = e->next)
            negotiator_membership_free(e->value, negotiator->nranks);
    name_table_destroy(&negotiator->memberships);
    name_table_destroy(&negotiator->entries);
    for (size_t i = 0; i < negotiator->response_count; i++)
        wire_response_free(&negotiator->responses[i]);
    free(negotiator->responses);
    free(negotiator->joined);
    negotiator_free_stall_debts(negotiator);
    process_set_table_destroy(&negotiator->sets);
    memset(negotiator, 0, sizeof *negotiator);
}

struct wire_response *negotiator_append_response(struct negotiator *negotiator)
{
    if (negotiator->response_count == negotiator->response_capacity) {
        size_t capacity = negotiator->response_capacity ? negotiator->response_capacity * 2 : 16;
        struct wire_response *grown =
            realloc(negotiator->responses, capacity * sizeof *negotiator->responses);
        if (grown == NULL) {
            negotiator->failed = true;
            return NULL;
        }
        negotiator->responses = grown;
        negotiator->response_capacity = capacity;
    }
    struct wire_response *response = &negotiator->responses[negotiator->response_count++];
    memset(response, 0, sizeof *response);
    response->agreed_at = negotiator->now;
    return response;
}

/* Appends an error response (taking `message`) and returns it; NULL when out of memory. */
struct wire_response *negotiator_add_error(struct negotiator *negotiator, const struct wire_request *request,
                                chorus_status status, char *message)
{
    struct wire_response *response = negotiator_append_response(negotiator);
    if (response == NULL || !wire_request_copy(&response->request, request)) {
        negotiator->failed = true;
        free(message);
        return NULL;
    }
    response->type = RESPONSE_ERROR;
    response->status = status;
    response->message = message;
    return response;
}

/* An error that lists its ranks fails only those (response_applies_to). */
void negotiator_mark_ranks(struct negotiator *negotiator, struct wire_response *response,
                const struct wire_request *requests, int only_rank)
{
    if (response == NULL)
        return;
    response->rank_mask = calloc((size_t)negotiator->nranks, sizeof *response->rank_mask);
    if (response->rank_mask == NULL)
        return; /* then it concerns every rank */
    response->rank_mask_count = (uint32_t)negotiator->nranks;
    for (int r = 0; r < negotiator->nranks; r++)
        response->rank_mask[r] = requests != NULL ? requests[r].name != NULL : r == only_rank;
}

/* The first request submitted for an entry. */
const struct wire_request *negotiator_first_request(const struct negotiator *negotiator,
                                         const struct negotiation_entry *entry)
{
    for (int r = 0; r < negotiator->nranks; r++)
        if (entry->requests[r].name != NULL)
            return &entry->requests[r];
    return NULL;
}

/* With CHORUS_JOINED_GATHERS=fail, an allgather or a broadcast that some member joined instead
 * of submitting fails, as Horovod's do: the message names the joined ranks. NULL otherwise. */
static char *joined_gather(const struct negotiator *negotiator,
                           const struct negotiation_entry *entry, const struct process_set *set,
                           const struct wire_request *reference)
{
    if (reference->collective != CHORUS_ALLGATHER && reference->collective != CHORUS_BROADCAST)
        return NULL;
    int members = set != NULL ? set->size : negotiator->nranks;
    int *joined = calloc((size_t)members, sizeof *joined);
    size_t count = 0;
    for (int m = 0; joined != NULL && m < members; m++) {
        int r = set != NULL ? set->ranks[m] : m;
        if (entry->requests[r].name == NULL)
            joined[count++] = r;
    }
    char *ranks = count > 0 ? text_rank_list(joined, count) : NULL;
    char *message =
        count == 0 ? NULL
                   : text_format("%s \"%s\": %s %s %s joined; an allgather or broadcast does not "
                                   "run while a rank has joined (CHORUS_JOINED_GATHERS=fail, as "
                                   "Horovod)",
                                   request_collective_name(reference), entry->name,
                                   count > 1 ? "ranks" : "rank", ranks ? ranks : "?",
                                   count > 1 ? "have" : "has");
    free(ranks);
    free(joined);
    return message;
}

/* The entry is complete: decide its response and forget it. */
static void resolve(struct negotiator *negotiator, struct negotiation_entry *entry)
{
    const struct wire_request *reference = NULL;
    bool agree = true;
    for (int r = 0; r < negotiator->nranks; r++) {
        if (entry->requests[r].name == NULL)
            continue;
        if (reference == NULL)
            reference = &entry->requests[r];
        else if (!negotiated_fields_agree(reference, &entry->requests[r]))
            agree = false;
    }
    const struct process_set *set = negotiator_set_of(negotiator, entry->process_set);
    bool root_missing = reference->collective == CHORUS_BROADCAST &&
                        (reference->root < 0 || reference->root >= negotiator->nranks ||
                         entry->requests[reference->root].name == NULL);
    char *mismatch = agree && !root_missing ? NULL
                                            : mismatch_find(entry->name, entry->requests,
                                                            negotiator->nranks, reference);
    chorus_status verdict = CHORUS_ERR_MISMATCH;
    if (mismatch == NULL && negotiator->refuse_joined_gathers) {
        mismatch = joined_gather(negotiator, entry, set, reference);
        verdict = CHORUS_ERR_NOT_SUPPORTED;
    }
    if (mismatch == NULL && set != NULL && reference->collective == CHORUS_BROADCAST &&
        process_set_rank_of(set, reference->root) < 0) {
        char *described = process_set_describe(set);
        mismatch = text_format("broadcast \"%s\": root %d is not a member of %s", entry->name,
                                 reference->root, described ? described : "its process set");
        free(described);
    }
    if (mismatch == NULL && reference->collective == COLLECTIVE_PROCESS_SET) {
        negotiator_resolve_set_change(negotiator, entry, reference);
    } else if (mismatch != NULL) {
        struct wire_response *error =
            negotiator_add_error(negotiator, reference, verdict, mismatch);
        if (entry->process_set != 0)
            negotiator_mark_ranks(negotiator, error, entry->requests, -1);
        struct wire_response failed_member = {.type = 0};
        if (reference->group_size > 1 && wire_request_copy(&failed_member.request, reference))
            negotiator_add_execute(negotiator, &failed_member);
    } else {
        struct wire_response ready = {.type = RESPONSE_EXECUTE,
                                      .status = CHORUS_OK,
                                      .contributors = (uint32_t)entry->submitted};
        bool ok = wire_request_copy(&ready.request, reference);
        if (ok && reference->collective == CHORUS_ALLGATHER) {
            /* Every member's rows, in the set's rank order. */
            int members = set != NULL ? set->size : negotiator->nranks;
            ready.first_dim_count = (uint32_t)members;
            ready.first_dims = calloc((size_t)members, sizeof *ready.first_dims);
            ok = ready.first_dims != NULL;
            for (int m = 0; ok && m < members; m++) {
                int r = set != NULL ? set->ranks[m] : m;
                ready.first_dims[m] =
                    entry->requests[r].name != NULL && entry->requests[r].ndims > 0
                        ? entry->requests[r].shape[0]
                        : 0;
            }
        }
        /* Flags of each member's own (an even split, the shared heap): set where all have
         * them; a joined member, which submitted nothing, has none. */
        int members = set != NULL ? set->size : negotiator->nranks;
        for (int m = 0; m < members; m++) {
            const struct wire_request *member = &entry->requests[set != NULL ? set->ranks[m] : m];
            negotiated_fields_combine(&ready.request, reference,
                                      member->name != NULL ? member : NULL);
        }
        ready.agreed_at = negotiator->now;
        if (ok)
            negotiator_add_execute(negotiator, &ready);
        else {
            negotiator->failed = true;
            wire_response_free(&ready);
        }
    }
    if (negotiator->resolved != NULL)
        negotiator->resolved(negotiator->resolved_context, entry->process_set, entry->name, entry->arrivals,
                             negotiator->nranks);
    negotiator_entry_unlink(negotiator, entry);
    negotiator_entry_free(negotiator, entry);
}

static bool entry_complete(const struct negotiator *negotiator,
                           const struct negotiation_entry *entry)
{
    /* A joined rank can run a collective with zeros, but cannot add or remove a set. */
    const struct wire_request *first = entry->requests[0].name != NULL ? &entry->requests[0] : NULL;
    for (int r = 1; first == NULL && r < negotiator->nranks; r++)
        if (entry->requests[r].name != NULL)
            first = &entry->requests[r];
    if (first != NULL && first->collective == COLLECTIVE_PROCESS_SET)
        return entry->submitted == negotiator->nranks;
    const struct process_set *set = negotiator_set_of(negotiator, entry->process_set);
    if (set == NULL)
        return entry->submitted + negotiator->joined_count - entry->joined_submitters >=
               negotiator->nranks;
    for (int m = 0; m < set->size; m++)
        if (entry->requests[set->ranks[m]].name == NULL && !negotiator->joined[set->ranks[m]])
            return false;
    return true;
}

void negotiator_submit(struct negotiator *negotiator, int rank, const struct wire_request *request,
                       double now)
{
    negotiator->now = now;
    if (negotiator->stall_debts != NULL && negotiator_settle_stall_debt(negotiator, rank, request))
        return;
    if (request->process_set != 0 && request->collective != COLLECTIVE_PROCESS_SET) {
        /* The submitting rank checked its set; it may have been removed since. */
        const struct process_set *set = negotiator_set_of(negotiator, request->process_set);
        if (set == NULL || process_set_rank_of(set, rank) < 0) {
            char *described = set != NULL ? process_set_describe(set) : NULL;
            char *message = set == NULL
                                ? text_format("%s \"%s\": process set %d does not exist (never "
                                                "added, or removed)",
                                                request_collective_name(request), request->name,
                                                (int)request->process_set)
                                : text_format("%s \"%s\": rank %d is not a member of %s",
                                                request_collective_name(request), request->name,
                                                rank, described ? described : "the process set");
            free(described);
            negotiator_mark_ranks(negotiator,
                       negotiator_add_error(negotiator, request, CHORUS_ERR_INVALID_ARGUMENT, message), NULL,
                       rank);
            return;
        }
    }
    struct negotiation_entry *entry = name_table_find(&negotiator->entries,
                                                     request_name_set(request), request->name);
    if (entry == NULL) {
        entry = calloc(1, sizeof *entry);
        if (entry != NULL) {
            entry->name = strdup(request->name);
            entry->requests = calloc((size_t)negotiator->nranks, sizeof *entry->requests);
            entry->arrivals = calloc((size_t)negotiator->nranks, sizeof *entry->arrivals);
        }
        if (entry == NULL || entry->name == NULL || entry->requests == NULL ||
            entry->arrivals == NULL ||
            !name_table_insert(&negotiator->entries, request_name_set(request), request->name,
                               entry)) {
            if (entry != NULL) {
                free(entry->name);
                free(entry->requests);
                free(entry->arrivals);
            }
            free(entry);
            negotiator->failed = true;
            return;
        }
        entry->first_seen = now;
        entry->last_warning = now;
        entry->process_set = request_name_set(request);
        entry->older = negotiator->newest;
        if (negotiator->newest)
            negotiator->newest->newer = entry;
        else
            negotiator->oldest = entry;
        negotiator->newest = entry;
    }
    if (entry->requests[rank].name != NULL) {
        /* The submitting rank rejects a name already in flight, so this cannot happen between
         * well-behaved ranks; a second copy is ignored rather than counted twice. */
        return;
    }
    if (!wire_request_copy(&entry->requests[rank], request)) {
        negotiator->failed = true;
        return;
    }
    entry->submitted++;
    if (negotiator->joined[rank])
        entry->joined_submitters++;
    entry->arrivals[rank] = now;
    if (entry_complete(negotiator, entry))
        resolve(negotiator, entry);
    if (request->group_size > 1 && request->group != NULL && request->group[0] != '\0')
        negotiator_check_membership(negotiator, rank, request);
}

void negotiator_join(struct negotiator *negotiator, int rank)
{
    if (negotiator->joined[rank])
        return;
    negotiator->joined[rank] = true;
    negotiator->joined_count++;
    /* Tensors that only waited for this rank are now complete, in arrival order. A tensor this
     * rank submitted before it joined still counts it once. */
    struct negotiation_entry *entry = negotiator->oldest;
    while (entry != NULL) {
        struct negotiation_entry *newer = entry->newer;
        if (entry->requests[rank].name != NULL)
            entry->joined_submitters++;
        if (entry_complete(negotiator, entry))
            resolve(negotiator, entry);
        entry = newer;
    }
    negotiator_settle_memberships_after_join(negotiator, rank);
    if (negotiator->joined_count == negotiator->nranks) {
        struct wire_response *response = negotiator_append_response(negotiator);
        if (response != NULL) {
            response->type = RESPONSE_JOIN_DONE;
            response->last_joined_rank = rank;
            response->request.name = strdup("");
            response->request.group = strdup("");
            response->request.group_size = 1;
        }
        memset(negotiator->joined, 0, (size_t)negotiator->nranks * sizeof *negotiator->joined);
        negotiator->joined_count = 0;
        for (entry = negotiator->oldest; entry != NULL; entry = entry->newer)
            entry->joined_submitters = 0;
        const struct name_table *memberships = &negotiator->memberships;
        for (size_t b = 0; b < memberships->bucket_count; b++)
            for (struct name_entry *e = memberships->buckets[b]; e != NULL; e = e->next)
                ((struct membership *)e->value)->joined_complete = 0;
    }
}

size_t negotiator_take_responses(struct negotiator *negotiator, struct wire_response **responses)
{
    size_t count = negotiator->response_count;
    *responses = negotiator->responses;
    negotiator->responses = NULL;
    negotiator->response_count = 0;
    negotiator->response_capacity = 0;
    return count;
}

size_t negotiator_pending(const struct negotiator *negotiator)
{
    return negotiator->entries.size;
}

/*
 * negotiation.c — see negotiation.h. Consistency is decided here, on rank 0, before any data
 * moves, so every rank receives the same verdict in the same cycle. A mismatch message names
 * the collective, the tensor, the field that differs and which ranks sent which value:
 *   allreduce "fc1.weight": dtype mismatch: ranks 0,2 float32, rank 1 float16
 */
#include "negotiation.h"

#include "mismatch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct negotiation_entry {
    char *name;
    struct wire_request *requests; /* per rank; name NULL until that rank submits */
    double *arrivals;              /* per rank: when its request arrived */
    int submitted;
    int joined_submitters; /* ranks that submitted it and have joined since: counted once */
    int process_set;       /* of the first request: the ranks it waits for (0: every rank) */
    double first_seen;
    double last_warning;
    struct negotiation_entry *older, *newer;
};

/* Members of a group that are ready everywhere wait here until the whole group is. */
struct group_state {
    struct wire_response *held;
    size_t held_count;
    uint32_t size;
};

/* Which members each rank submitted under a group name, until every rank has submitted the
 * whole group (a rank submits a group at once) and they agree. Ranks that name different
 * members would otherwise leave the members they share held forever. */
struct membership {
    int process_set; /* the ranks that submit the group (0: every rank) */
    uint32_t size;
    char **names;        /* rank r's members at names[r * size ...] */
    uint32_t *submitted; /* per rank */
    int complete_ranks;  /* ranks that submitted `size` members */
    int joined_complete; /* of those, the ranks that have joined since: counted once */
};

static void membership_free(struct membership *membership, int nranks)
{
    for (size_t i = 0; membership->names != NULL && i < (size_t)nranks * membership->size; i++)
        free(membership->names[i]);
    free(membership->names);
    free(membership->submitted);
    free(membership);
}

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

static void entry_free(struct negotiator *negotiator, struct negotiation_entry *entry)
{
    for (int r = 0; r < negotiator->nranks; r++)
        wire_request_free(&entry->requests[r]);
    free(entry->requests);
    free(entry->arrivals);
    free(entry->name);
    free(entry);
}

static void entry_unlink(struct negotiator *negotiator, struct negotiation_entry *entry)
{
    if (entry->older)
        entry->older->newer = entry->newer;
    else
        negotiator->oldest = entry->newer;
    if (entry->newer)
        entry->newer->older = entry->older;
    else
        negotiator->newest = entry->older;
    name_table_remove(&negotiator->entries, entry->name);
}

static void group_free(struct group_state *group)
{
    for (size_t i = 0; i < group->held_count; i++)
        wire_response_free(&group->held[i]);
    free(group->held);
    free(group);
}

void negotiator_destroy(struct negotiator *negotiator)
{
    while (negotiator->oldest != NULL) {
        struct negotiation_entry *entry = negotiator->oldest;
        entry_unlink(negotiator, entry);
        entry_free(negotiator, entry);
    }
    for (size_t i = 0; i < negotiator->groups.bucket_count; i++)
        for (struct name_entry *e = negotiator->groups.buckets[i]; e != NULL; e = e->next)
            group_free(e->value);
    name_table_destroy(&negotiator->groups);
    for (size_t i = 0; i < negotiator->memberships.bucket_count; i++)
        for (struct name_entry *e = negotiator->memberships.buckets[i]; e != NULL; e = e->next)
            membership_free(e->value, negotiator->nranks);
    name_table_destroy(&negotiator->memberships);
    name_table_destroy(&negotiator->entries);
    for (size_t i = 0; i < negotiator->response_count; i++)
        wire_response_free(&negotiator->responses[i]);
    free(negotiator->responses);
    free(negotiator->joined);
    process_set_table_destroy(&negotiator->sets);
    memset(negotiator, 0, sizeof *negotiator);
}

static struct wire_response *append_response(struct negotiator *negotiator)
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
static struct wire_response *add_error(struct negotiator *negotiator,
                                       const struct wire_request *request, chorus_status status,
                                       char *message)
{
    struct wire_response *response = append_response(negotiator);
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

/* The set whose members a tensor waits for: NULL for every rank (a process set change is the
 * job's) and for a set that no longer exists. */
static const struct process_set *set_of(const struct negotiator *negotiator, int process_set)
{
    return process_set == 0 ? NULL : process_set_find(&negotiator->sets, process_set);
}

/* An error that lists its ranks fails only those (response_applies_to). */
static void mark_ranks(struct negotiator *negotiator, struct wire_response *response,
                       const struct wire_request *requests, int only_rank)
{
    if (response == NULL)
        return;
    response->first_dims = calloc((size_t)negotiator->nranks, sizeof *response->first_dims);
    if (response->first_dims == NULL)
        return; /* then it concerns every rank */
    response->first_dim_count = (uint32_t)negotiator->nranks;
    for (int r = 0; r < negotiator->nranks; r++)
        response->first_dims[r] = requests != NULL ? requests[r].name != NULL : r == only_rank;
}

/* Queues an execute response; members of a group wait until the whole group is ready. A
 * response of type 0 stands for a member that failed: it counts toward the group's size so that
 * the other members are not held forever, and runs nothing. */
static void add_execute(struct negotiator *negotiator, struct wire_response *ready)
{
    if (ready->request.group_size <= 1) {
        struct wire_response *response = append_response(negotiator);
        if (response == NULL) {
            wire_response_free(ready);
            return;
        }
        *response = *ready;
        return;
    }
    struct group_state *group = name_table_find(&negotiator->groups, ready->request.group);
    if (group == NULL) {
        group = calloc(1, sizeof *group);
        if (group == NULL || !name_table_insert(&negotiator->groups, ready->request.group, group)) {
            free(group);
            negotiator->failed = true;
            wire_response_free(ready);
            return;
        }
        group->size = ready->request.group_size;
        group->held = calloc(group->size, sizeof *group->held);
        if (group->held == NULL) {
            name_table_remove(&negotiator->groups, ready->request.group);
            free(group);
            negotiator->failed = true;
            wire_response_free(ready);
            return;
        }
    }
    if (group->held_count < group->size)
        group->held[group->held_count++] = *ready;
    else
        wire_response_free(ready);
    if (group->held_count < group->size)
        return;
    /* Out of the table first: the key may be the group name of the last member, which a failed
     * member's placeholder frees below. */
    name_table_remove(&negotiator->groups, group->held[group->held_count - 1].request.group);
    for (size_t i = 0; i < group->held_count; i++) {
        if (group->held[i].type == 0) {
            wire_response_free(&group->held[i]);
            continue;
        }
        struct wire_response *response = append_response(negotiator);
        if (response == NULL) {
            wire_response_free(&group->held[i]);
            continue;
        }
        *response = group->held[i];
    }
    free(group->held);
    free(group);
}

/* The fast check that runs on every tensor: do two submissions agree on everything the
 * collective needs? Only when they do not is the (slower) message built. */
static bool requests_agree(const struct wire_request *a, const struct wire_request *b)
{
    if (a->collective != b->collective || a->dtype != b->dtype || a->ndims != b->ndims ||
        (a->device == DEVICE_HOST) != (b->device == DEVICE_HOST) ||
        a->group_size != b->group_size || strcmp(a->group, b->group) != 0 ||
        a->process_set != b->process_set)
        return false;
    if (a->collective == COLLECTIVE_PROCESS_SET)
        return a->member_count == b->member_count &&
               (a->member_count == 0 ||
                memcmp(a->members, b->members, a->member_count * sizeof *a->members) == 0);
    size_t first = a->collective == CHORUS_ALLGATHER || a->collective == CHORUS_ALLTOALL ? 1 : 0;
    for (size_t i = first; i < a->ndims; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    switch ((chorus_collective)a->collective) {
    case CHORUS_ALLREDUCE:
        return a->op == b->op && a->prescale == b->prescale && a->postscale == b->postscale &&
               a->compression == b->compression;
    case CHORUS_REDUCESCATTER:
        return a->op == b->op && a->prescale == b->prescale && a->postscale == b->postscale;
    case CHORUS_BROADCAST:
        return a->root == b->root;
    case CHORUS_ALLGATHER:
    case CHORUS_ALLTOALL:
        return true;
    }
    return false;
}

/* The first request submitted for an entry. */
static const struct wire_request *first_request(const struct negotiator *negotiator,
                                                const struct negotiation_entry *entry)
{
    for (int r = 0; r < negotiator->nranks; r++)
        if (entry->requests[r].name != NULL)
            return &entry->requests[r];
    return NULL;
}

/* The names of a table's entries whose value `belongs` to set `id`; NULL-terminated. */
static char **names_of_set(const struct name_table *table, int id,
                           bool (*belongs)(const void *value, int id))
{
    char **names = calloc(table->size + 1, sizeof *names);
    size_t count = 0;
    for (size_t b = 0; names != NULL && b < table->bucket_count; b++)
        for (struct name_entry *e = table->buckets[b]; e != NULL; e = e->next)
            if (belongs(e->value, id))
                names[count++] = strdup(e->name);
    return names;
}

static bool held_group_of_set(const void *value, int id)
{
    const struct group_state *group = value;
    return group->held_count > 0 && group->held[0].request.process_set == id;
}

static bool membership_of_set(const void *value, int id)
{
    return ((const struct membership *)value)->process_set == id;
}

/* Set `id` is being removed: its tensors still waiting for members, and grouped members held
 * for the rest of their group, fail with `described` named. */
static void fail_tensors_of_set(struct negotiator *negotiator, int id, const char *described)
{
    struct negotiation_entry *pending = negotiator->oldest;
    while (pending != NULL) {
        struct negotiation_entry *newer = pending->newer;
        const struct wire_request *any = first_request(negotiator, pending);
        if (pending->process_set == id && any != NULL) {
            char *message = format_string("%s \"%s\": %s was removed before every member "
                                          "submitted it",
                                          request_collective_name(any), pending->name, described);
            mark_ranks(negotiator,
                       add_error(negotiator, any, CHORUS_ERR_INVALID_ARGUMENT, message),
                       pending->requests, -1);
            entry_unlink(negotiator, pending);
            entry_free(negotiator, pending);
        }
        pending = newer;
    }
    char **groups = names_of_set(&negotiator->groups, id, held_group_of_set);
    for (size_t i = 0; groups != NULL && groups[i] != NULL; i++) {
        struct group_state *group = name_table_remove(&negotiator->groups, groups[i]);
        for (size_t m = 0; group != NULL && m < group->held_count; m++)
            if (group->held[m].type != 0)
                add_error(negotiator, &group->held[m].request, CHORUS_ERR_INVALID_ARGUMENT,
                          format_string("grouped allreduce \"%s\": %s was removed before the "
                                        "whole group was submitted",
                                        groups[i], described));
        if (group != NULL)
            group_free(group);
        free(groups[i]);
    }
    free(groups);
    char **memberships = names_of_set(&negotiator->memberships, id, membership_of_set);
    for (size_t i = 0; memberships != NULL && memberships[i] != NULL; i++) {
        struct membership *membership = name_table_remove(&negotiator->memberships, memberships[i]);
        if (membership != NULL)
            membership_free(membership, negotiator->nranks);
        free(memberships[i]);
    }
    free(memberships);
}

/* Every rank asked for the same change of the process sets: rank 0 makes it here and queues
 * the EXECUTE that has every rank follow. An added set gets the next id. */
static void resolve_set_change(struct negotiator *negotiator, struct negotiation_entry *entry,
                               const struct wire_request *reference)
{
    struct wire_response ready = {.type = RESPONSE_EXECUTE,
                                  .status = CHORUS_OK,
                                  .contributors = (uint32_t)entry->submitted,
                                  .agreed_at = negotiator->now};
    if (!wire_request_copy(&ready.request, reference)) {
        negotiator->failed = true;
        return;
    }
    char why[256];
    const struct process_set *set = set_of(negotiator, reference->process_set);
    char *failure = NULL;
    if (reference->member_count > 0 &&
        !process_set_check_ranks(reference->members, (int)reference->member_count,
                                 negotiator->nranks, why, sizeof why))
        failure = format_string("process set change \"%s\": %s", entry->name, why);
    else if (reference->member_count == 0 && set == NULL)
        failure = format_string("process set change \"%s\": process set %d does not exist "
                                "(never added, or removed)",
                                entry->name, (int)reference->process_set);
    if (failure != NULL) {
        add_error(negotiator, reference, CHORUS_ERR_INVALID_ARGUMENT, failure);
        wire_response_free(&ready);
        return;
    }
    if (reference->member_count > 0) {
        ready.request.process_set = ++negotiator->last_set_id;
        if (!process_set_table_add(&negotiator->sets, ready.request.process_set,
                                   reference->members, (int)reference->member_count)) {
            negotiator->failed = true;
            wire_response_free(&ready);
            return;
        }
    } else {
        char *described = process_set_describe(set);
        fail_tensors_of_set(negotiator, set->id, described ? described : "its process set");
        free(described);
        process_set_table_remove(&negotiator->sets, reference->process_set);
    }
    add_execute(negotiator, &ready);
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
        else if (!requests_agree(reference, &entry->requests[r]))
            agree = false;
    }
    const struct process_set *set = set_of(negotiator, entry->process_set);
    bool root_missing = reference->collective == CHORUS_BROADCAST &&
                        (reference->root < 0 || reference->root >= negotiator->nranks ||
                         entry->requests[reference->root].name == NULL);
    char *mismatch = agree && !root_missing ? NULL : find_mismatch(entry->name, entry->requests, negotiator->nranks, reference);
    if (mismatch == NULL && set != NULL && reference->collective == CHORUS_BROADCAST &&
        process_set_rank_of(set, reference->root) < 0) {
        char *described = process_set_describe(set);
        mismatch = format_string("broadcast \"%s\": root %d is not a member of %s", entry->name,
                                 reference->root, described ? described : "its process set");
        free(described);
    }
    if (mismatch == NULL && reference->collective == COLLECTIVE_PROCESS_SET) {
        resolve_set_change(negotiator, entry, reference);
    } else if (mismatch != NULL) {
        struct wire_response *error =
            add_error(negotiator, reference, CHORUS_ERR_MISMATCH, mismatch);
        if (entry->process_set != 0)
            mark_ranks(negotiator, error, entry->requests, -1);
        struct wire_response failed_member = {.type = 0};
        if (reference->group_size > 1 && wire_request_copy(&failed_member.request, reference))
            add_execute(negotiator, &failed_member);
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
                ready.first_dims[m] = entry->requests[r].name != NULL &&
                                              entry->requests[r].ndims > 0
                                          ? entry->requests[r].shape[0]
                                          : 0;
            }
        }
        ready.agreed_at = negotiator->now;
        if (ok)
            add_execute(negotiator, &ready);
        else {
            negotiator->failed = true;
            wire_response_free(&ready);
        }
    }
    if (negotiator->resolved != NULL)
        negotiator->resolved(negotiator->resolved_context, entry->name, entry->arrivals,
                             negotiator->nranks);
    entry_unlink(negotiator, entry);
    entry_free(negotiator, entry);
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
    const struct process_set *set = set_of(negotiator, entry->process_set);
    if (set == NULL)
        return entry->submitted + negotiator->joined_count - entry->joined_submitters >=
               negotiator->nranks;
    for (int m = 0; m < set->size; m++)
        if (entry->requests[set->ranks[m]].name == NULL && !negotiator->joined[set->ranks[m]])
            return false;
    return true;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "gx, gy": rank r's members, sorted (they are sorted in place). */
static char *member_list(struct membership *membership, int rank)
{
    char **names = &membership->names[(size_t)rank * membership->size];
    qsort(names, membership->size, sizeof *names, compare_names);
    char *list = format_string("%s", "");
    for (uint32_t i = 0; list != NULL && i < membership->size; i++)
        string_append(&list, "%s%s", i ? ", " : "", names[i]);
    return list;
}

/* Every member named by any rank fails with `message`: those still waiting for some ranks, and
 * those already agreed and held for the group. */
static void fail_group(struct negotiator *negotiator, const char *group,
                       struct membership *membership, const char *message)
{
    struct group_state *held = name_table_remove(&negotiator->groups, group);
    for (size_t i = 0; held != NULL && i < held->held_count; i++)
        if (held->held[i].type != 0)
            add_error(negotiator, &held->held[i].request, CHORUS_ERR_MISMATCH, strdup(message));
    if (held != NULL)
        group_free(held);
    for (size_t i = 0; i < (size_t)negotiator->nranks * membership->size; i++) {
        const char *name = membership->names[i];
        struct negotiation_entry *entry =
            name != NULL ? name_table_find(&negotiator->entries, name) : NULL;
        if (entry == NULL)
            continue;
        for (int r = 0; r < negotiator->nranks; r++)
            if (entry->requests[r].name != NULL) {
                add_error(negotiator, &entry->requests[r], CHORUS_ERR_MISMATCH,
                          strdup(message));
                break;
            }
        entry_unlink(negotiator, entry);
        entry_free(negotiator, entry);
    }
}

/* Every rank has submitted the whole group or joined. */
static bool membership_settled(const struct negotiator *negotiator,
                               const struct membership *membership)
{
    const struct process_set *set = set_of(negotiator, membership->process_set);
    if (set == NULL)
        return membership->complete_ranks + negotiator->joined_count -
                   membership->joined_complete >=
               negotiator->nranks;
    for (int m = 0; m < set->size; m++) {
        int r = set->ranks[m];
        if (membership->submitted[r] != membership->size && !negotiator->joined[r])
            return false;
    }
    return true;
}

/* Compares the members the ranks named, fails the group where they differ, and forgets the
 * group's membership. `group` must outlive the membership's table entry. */
static void settle_membership(struct negotiator *negotiator, const char *group,
                              struct membership *membership)
{
    /* Every submitting rank's list; where they differ, the ranks that named each list:
     * grouped allreduce "gx": the ranks name different members: ranks 0-1 {gx, gy}, rank 2
     * {gx, gz} */
    int nranks = negotiator->nranks;
    char **lists = calloc((size_t)nranks, sizeof *lists);
    int *ranks = calloc((size_t)nranks, sizeof *ranks);
    bool differ = false;
    int first = -1;
    for (int r = 0; lists != NULL && r < nranks; r++) {
        if (membership->submitted[r] != membership->size)
            continue;
        lists[r] = member_list(membership, r);
        if (first < 0)
            first = r;
        else if (lists[r] != NULL && lists[first] != NULL && strcmp(lists[r], lists[first]) != 0)
            differ = true;
    }
    char *message = NULL;
    if (differ && ranks != NULL) {
        message = format_string("grouped allreduce \"%s\": the ranks name different members:",
                                group);
        for (int r = 0; message != NULL && r < nranks; r++) {
            if (lists[r] == NULL)
                continue;
            size_t count = 0;
            for (int q = r; q < nranks; q++)
                if (lists[q] != NULL && strcmp(lists[q], lists[r]) == 0)
                    ranks[count++] = q;
            char *named = format_rank_list(ranks, count);
            string_append(&message, "%s %s %s {%s}", r == first ? "" : ",",
                          count > 1 ? "ranks" : "rank", named ? named : "?", lists[r]);
            free(named);
            for (size_t i = 1; i < count; i++) { /* each list once */
                free(lists[ranks[i]]);
                lists[ranks[i]] = NULL;
            }
        }
    }
    for (int r = 0; lists != NULL && r < nranks; r++)
        free(lists[r]);
    free(lists);
    free(ranks);
    membership = name_table_remove(&negotiator->memberships, group);
    if (message != NULL)
        fail_group(negotiator, group, membership, message);
    membership_free(membership, negotiator->nranks);
    free(message);
}

/* Records that `rank` submitted `request`, a member of a group; once every rank that did not
 * join has submitted the whole group, checks that they named the same members. */
static void check_membership(struct negotiator *negotiator, int rank,
                             const struct wire_request *request)
{
    struct membership *membership = name_table_find(&negotiator->memberships, request->group);
    if (membership == NULL) {
        membership = calloc(1, sizeof *membership);
        if (membership != NULL) {
            membership->process_set = request->process_set;
            membership->size = request->group_size;
            membership->names =
                calloc((size_t)negotiator->nranks * request->group_size, sizeof(char *));
            membership->submitted = calloc((size_t)negotiator->nranks, sizeof(uint32_t));
        }
        if (membership == NULL || membership->names == NULL || membership->submitted == NULL ||
            !name_table_insert(&negotiator->memberships, request->group, membership)) {
            if (membership != NULL)
                membership_free(membership, negotiator->nranks);
            negotiator->failed = true;
            return;
        }
    }
    if (membership->submitted[rank] >= membership->size || request->group_size != membership->size)
        return; /* a size mismatch is reported with the member's other fields */
    membership->names[(size_t)rank * membership->size + membership->submitted[rank]++] =
        strdup(request->name);
    if (membership->submitted[rank] == membership->size) {
        membership->complete_ranks++;
        membership->joined_complete += negotiator->joined[rank];
    }
    if (membership_settled(negotiator, membership))
        settle_membership(negotiator, request->group, membership);
}

void negotiator_submit(struct negotiator *negotiator, int rank, const struct wire_request *request,
                       double now)
{
    negotiator->now = now;
    if (request->process_set != 0 && request->collective != COLLECTIVE_PROCESS_SET) {
        /* The submitting rank checked its set; it may have been removed since. */
        const struct process_set *set = set_of(negotiator, request->process_set);
        if (set == NULL || process_set_rank_of(set, rank) < 0) {
            char *described = set != NULL ? process_set_describe(set) : NULL;
            char *message =
                set == NULL ? format_string("%s \"%s\": process set %d does not exist (never "
                                            "added, or removed)",
                                            request_collective_name(request), request->name,
                                            (int)request->process_set)
                            : format_string("%s \"%s\": rank %d is not a member of %s",
                                            request_collective_name(request), request->name,
                                            rank, described ? described : "the process set");
            free(described);
            mark_ranks(negotiator, add_error(negotiator, request, CHORUS_ERR_INVALID_ARGUMENT,
                                             message),
                       NULL, rank);
            return;
        }
    }
    struct negotiation_entry *entry = name_table_find(&negotiator->entries, request->name);
    if (entry == NULL) {
        entry = calloc(1, sizeof *entry);
        if (entry != NULL) {
            entry->name = strdup(request->name);
            entry->requests = calloc((size_t)negotiator->nranks, sizeof *entry->requests);
            entry->arrivals = calloc((size_t)negotiator->nranks, sizeof *entry->arrivals);
        }
        if (entry == NULL || entry->name == NULL || entry->requests == NULL ||
            entry->arrivals == NULL ||
            !name_table_insert(&negotiator->entries, request->name, entry)) {
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
        entry->process_set =
            request->collective == COLLECTIVE_PROCESS_SET ? 0 : request->process_set;
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
        check_membership(negotiator, rank, request);
}

/* `rank` has joined: it counts once in the groups it had submitted whole, and groups that
 * waited only for it are compared now. */
static void settle_memberships_after_join(struct negotiator *negotiator, int rank)
{
    const struct name_table *memberships = &negotiator->memberships;
    char **settled = calloc(memberships->size + 1, sizeof *settled);
    size_t count = 0;
    for (size_t b = 0; b < memberships->bucket_count; b++)
        for (struct name_entry *e = memberships->buckets[b]; e != NULL; e = e->next) {
            struct membership *membership = e->value;
            if (membership->submitted[rank] == membership->size)
                membership->joined_complete++;
            /* Settled after the walk: settling removes the group from the table. */
            if (settled != NULL && membership_settled(negotiator, membership))
                settled[count++] = strdup(e->name);
        }
    for (size_t i = 0; i < count; i++) {
        struct membership *membership = settled[i] != NULL
                                            ? name_table_find(&negotiator->memberships, settled[i])
                                            : NULL;
        if (membership != NULL)
            settle_membership(negotiator, settled[i], membership);
        free(settled[i]);
    }
    if (settled == NULL && memberships->size > 0)
        negotiator->failed = true;
    free(settled);
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
    settle_memberships_after_join(negotiator, rank);
    if (negotiator->joined_count == negotiator->nranks) {
        struct wire_response *response = append_response(negotiator);
        if (response != NULL) {
            response->type = RESPONSE_JOIN_DONE;
            response->status = rank; /* the last rank to join (Horovod's join() returns it) */
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

void negotiator_check_stalls(struct negotiator *negotiator, double now, double warn_after,
                             double fail_after, stall_warning warn, void *context)
{
    negotiator->now = now;
    struct negotiation_entry *entry = negotiator->oldest;
    while (entry != NULL) {
        struct negotiation_entry *newer = entry->newer;
        double waited = now - entry->first_seen;
        bool warn_now = warn_after > 0 && now - entry->last_warning >= warn_after;
        bool fail_now = fail_after > 0 && waited >= fail_after;
        if (!warn_now && !fail_now) {
            entry = newer;
            continue;
        }
        int *have = calloc((size_t)negotiator->nranks, sizeof *have);
        int *missing = calloc((size_t)negotiator->nranks, sizeof *missing);
        size_t have_count = 0, missing_count = 0;
        const struct wire_request *reference = NULL;
        const struct process_set *set = set_of(negotiator, entry->process_set);
        for (int r = 0; have != NULL && missing != NULL && r < negotiator->nranks; r++) {
            if (entry->requests[r].name != NULL) {
                have[have_count++] = r;
                if (reference == NULL)
                    reference = &entry->requests[r];
            } else if (!negotiator->joined[r] && (set == NULL || process_set_rank_of(set, r) >= 0)) {
                missing[missing_count++] = r;
            }
        }
        char *have_text = format_rank_list(have, have_count);
        char *missing_text = format_rank_list(missing, missing_count);
        char *described = set != NULL ? process_set_describe(set) : NULL;
        char *message = format_string(
            "%s \"%s\": submitted %.0f s ago by %s %s but not by %s %s%s%s",
            reference ? request_collective_name(reference) : "tensor", entry->name, waited,
            have_count == 1 ? "rank" : "ranks", have_text ? have_text : "?",
            missing_count == 1 ? "rank" : "ranks", missing_text ? missing_text : "?",
            described ? " of " : "", described ? described : "");
        free(described);
        if (warn_now && warn != NULL && message != NULL) {
            warn(context, message);
            entry->last_warning = now;
        }
        if (fail_now && reference != NULL) {
            char *failure = format_string("%s; giving up after %g s (CHORUS_STALL_SHUTDOWN_SECONDS)",
                                          message ? message : entry->name, fail_after);
            mark_ranks(negotiator, add_error(negotiator, reference, CHORUS_ERR_STALLED, failure),
                       entry->requests, -1);
            entry_unlink(negotiator, entry);
            entry_free(negotiator, entry);
        }
        free(message);
        free(have_text);
        free(missing_text);
        free(have);
        free(missing);
        entry = newer;
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

/*
 * negotiation_groups.c — grouped tensors on rank 0 (see negotiation_internal.h): members agreed
 * on every rank are held until the whole group is, so that the group runs together, and the
 * members each rank named are compared once every rank has submitted the whole group; where
 * they differ, every member fails with a message listing which ranks named what.
 */
#include "negotiation_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void negotiator_membership_free(struct membership *membership, int nranks)
{
    for (size_t i = 0; membership->names != NULL && i < (size_t)nranks * membership->size; i++)
        free(membership->names[i]);
    free(membership->names);
    free(membership->submitted);
    free(membership);
}

void negotiator_group_free(struct group_state *group)
{
    for (size_t i = 0; i < group->held_count; i++)
        wire_response_free(&group->held[i]);
    free(group->held);
    free(group);
}

/* Queues an execute response; members of a group wait until the whole group is ready. A
 * response of type 0 stands for a member that failed: it counts toward the group's size so that
 * the other members are not held forever, and runs nothing. */
void negotiator_add_execute(struct negotiator *negotiator, struct wire_response *ready)
{
    if (ready->request.group_size <= 1) {
        struct wire_response *response = negotiator_append_response(negotiator);
        if (response == NULL) {
            wire_response_free(ready);
            return;
        }
        *response = *ready;
        return;
    }
    struct group_state *group = name_table_find(&negotiator->groups, ready->request.process_set,
                                                  ready->request.group);
    if (group == NULL) {
        group = calloc(1, sizeof *group);
        if (group == NULL || !name_table_insert(&negotiator->groups, ready->request.process_set,
                                                ready->request.group, group)) {
            free(group);
            negotiator->failed = true;
            wire_response_free(ready);
            return;
        }
        group->size = ready->request.group_size;
        group->held = calloc(group->size, sizeof *group->held);
        if (group->held == NULL) {
            name_table_remove(&negotiator->groups, ready->request.process_set,
                              ready->request.group);
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
    const struct wire_request *last = &group->held[group->held_count - 1].request;
    name_table_remove(&negotiator->groups, last->process_set, last->group);
    for (size_t i = 0; i < group->held_count; i++) {
        if (group->held[i].type == 0) {
            wire_response_free(&group->held[i]);
            continue;
        }
        struct wire_response *response = negotiator_append_response(negotiator);
        if (response == NULL) {
            wire_response_free(&group->held[i]);
            continue;
        }
        *response = group->held[i];
    }
    free(group->held);
    free(group);
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
    char *list = text_format("%s", "");
    for (uint32_t i = 0; list != NULL && i < membership->size; i++)
        text_append(&list, "%s%s", i ? ", " : "", names[i]);
    return list;
}

/* Every member named by any rank fails with `message`: those still waiting for some ranks, and
 * those already agreed and held for the group. */
static void fail_group(struct negotiator *negotiator, const char *group,
                       struct membership *membership, const char *message)
{
    struct group_state *held =
        name_table_remove(&negotiator->groups, membership->process_set, group);
    for (size_t i = 0; held != NULL && i < held->held_count; i++)
        if (held->held[i].type != 0)
            negotiator_add_error(negotiator, &held->held[i].request, CHORUS_ERR_MISMATCH, strdup(message));
    if (held != NULL)
        negotiator_group_free(held);
    for (size_t i = 0; i < (size_t)negotiator->nranks * membership->size; i++) {
        const char *name = membership->names[i];
        struct negotiation_entry *entry =
            name != NULL ? name_table_find(&negotiator->entries, membership->process_set, name)
                         : NULL;
        if (entry == NULL)
            continue;
        for (int r = 0; r < negotiator->nranks; r++)
            if (entry->requests[r].name != NULL) {
                negotiator_add_error(negotiator, &entry->requests[r], CHORUS_ERR_MISMATCH, strdup(message));
                break;
            }
        negotiator_entry_unlink(negotiator, entry);
        negotiator_entry_free(negotiator, entry);
    }
}

/* Every rank has submitted the whole group or joined. */
static bool membership_settled(const struct negotiator *negotiator,
                               const struct membership *membership)
{
    const struct process_set *set = negotiator_set_of(negotiator, membership->process_set);
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
        message =
            text_format("grouped allreduce \"%s\": the ranks name different members:", group);
        for (int r = 0; message != NULL && r < nranks; r++) {
            if (lists[r] == NULL)
                continue;
            size_t count = 0;
            for (int q = r; q < nranks; q++)
                if (lists[q] != NULL && strcmp(lists[q], lists[r]) == 0)
                    ranks[count++] = q;
            char *named = text_rank_list(ranks, count);
            text_append(&message, "%s %s %s {%s}", r == first ? "" : ",",
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
    membership = name_table_remove(&negotiator->memberships, membership->process_set, group);
    if (message != NULL)
        fail_group(negotiator, group, membership, message);
    negotiator_membership_free(membership, negotiator->nranks);
    free(message);
}

/* Records that `rank` submitted `request`, a member of a group; once every rank that did not
 * join has submitted the whole group, checks that they named the same members. */
void negotiator_check_membership(struct negotiator *negotiator, int rank, const struct wire_request *request)
{
    struct membership *membership =
        name_table_find(&negotiator->memberships, request->process_set, request->group);
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
            !name_table_insert(&negotiator->memberships, request->process_set, request->group,
                               membership)) {
            if (membership != NULL)
                negotiator_membership_free(membership, negotiator->nranks);
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

/* `rank` has joined: it counts once in the groups it had submitted whole, and groups that
 * waited only for it are compared now. */
void negotiator_settle_memberships_after_join(struct negotiator *negotiator, int rank)
{
    const struct name_table *memberships = &negotiator->memberships;
    char **settled = calloc(memberships->size + 1, sizeof *settled);
    int *sets = calloc(memberships->size + 1, sizeof *sets);
    size_t count = 0;
    for (size_t b = 0; b < memberships->bucket_count; b++)
        for (struct name_entry *e = memberships->buckets[b]; e != NULL; e = e->next) {
            struct membership *membership = e->value;
            if (membership->submitted[rank] == membership->size)
                membership->joined_complete++;
            /* Settled after the walk: settling removes the group from the table. */
            if (settled != NULL && sets != NULL && membership_settled(negotiator, membership)) {
                sets[count] = e->set;
                settled[count++] = strdup(e->name);
            }
        }
    for (size_t i = 0; i < count; i++) {
        struct membership *membership =
            settled[i] != NULL ? name_table_find(&negotiator->memberships, sets[i], settled[i])
                               : NULL;
        if (membership != NULL)
            settle_membership(negotiator, settled[i], membership);
        free(settled[i]);
    }
    if ((settled == NULL || sets == NULL) && memberships->size > 0)
        negotiator->failed = true;
    free(settled);
    free(sets);
}

/*
 * negotiation_sets.c — process sets on rank 0 (see negotiation_internal.h): adding a set (it
 * gets the next id) and removing one, whose tensors still waiting for members, held grouped
 * members and group memberships fail with the set named.
 */
#include "negotiation_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The set whose members a tensor waits for: NULL for every rank (a process set change is the
 * job's) and for a set that no longer exists. */
const struct process_set *negotiator_set_of(const struct negotiator *negotiator, int process_set)
{
    return process_set == 0 ? NULL : process_set_find(&negotiator->sets, process_set);
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
void negotiator_fail_tensors_of_set(struct negotiator *negotiator, int id, const char *described)
{
    struct negotiation_entry *pending = negotiator->oldest;
    while (pending != NULL) {
        struct negotiation_entry *newer = pending->newer;
        const struct wire_request *any = negotiator_first_request(negotiator, pending);
        if (pending->process_set == id && any != NULL) {
            char *message = text_format("%s \"%s\": %s was removed before every member "
                                          "submitted it",
                                          request_collective_name(any), pending->name, described);
            negotiator_mark_ranks(negotiator, negotiator_add_error(negotiator, any, CHORUS_ERR_INVALID_ARGUMENT, message),
                       pending->requests, -1);
            negotiator_entry_unlink(negotiator, pending);
            negotiator_entry_free(negotiator, pending);
        }
        pending = newer;
    }
    char **groups = names_of_set(&negotiator->groups, id, held_group_of_set);
    for (size_t i = 0; groups != NULL && groups[i] != NULL; i++) {
        struct group_state *group = name_table_remove(&negotiator->groups, id, groups[i]);
        for (size_t m = 0; group != NULL && m < group->held_count; m++)
            if (group->held[m].type != 0)
                negotiator_add_error(negotiator, &group->held[m].request, CHORUS_ERR_INVALID_ARGUMENT,
                          text_format("grouped allreduce \"%s\": %s was removed before the "
                                        "whole group was submitted",
                                        groups[i], described));
        if (group != NULL)
            negotiator_group_free(group);
        free(groups[i]);
    }
    free(groups);
    char **memberships = names_of_set(&negotiator->memberships, id, membership_of_set);
    for (size_t i = 0; memberships != NULL && memberships[i] != NULL; i++) {
        struct membership *membership = name_table_remove(&negotiator->memberships, id,
                                                          memberships[i]);
        if (membership != NULL)
            negotiator_membership_free(membership, negotiator->nranks);
        free(memberships[i]);
    }
    free(memberships);
}

/* Every rank asked for the same change of the process sets: rank 0 makes it here and queues
 * the EXECUTE that has every rank follow. An added set gets the next id. */
void negotiator_resolve_set_change(struct negotiator *negotiator, struct negotiation_entry *entry,
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
    const struct process_set *set = negotiator_set_of(negotiator, reference->process_set);
    char *failure = NULL;
    if (reference->member_count > 0 &&
        !process_set_check_ranks(reference->members, (int)reference->member_count,
                                 negotiator->nranks, why, sizeof why))
        failure = text_format("process set change \"%s\": %s", entry->name, why);
    else if (reference->member_count == 0 && set == NULL)
        failure = text_format("process set change \"%s\": process set %d does not exist "
                                "(never added, or removed)",
                                entry->name, (int)reference->process_set);
    if (failure != NULL) {
        negotiator_add_error(negotiator, reference, CHORUS_ERR_INVALID_ARGUMENT, failure);
        wire_response_free(&ready);
        return;
    }
    if (reference->member_count > 0) {
        ready.request.process_set = ++negotiator->last_set_id;
        if (!process_set_table_add(&negotiator->sets, ready.request.process_set, reference->members,
                                   (int)reference->member_count)) {
            negotiator->failed = true;
            wire_response_free(&ready);
            return;
        }
    } else {
        char *described = process_set_describe(set);
        negotiator_fail_tensors_of_set(negotiator, set->id, described ? described : "its process set");
        free(described);
        process_set_table_remove(&negotiator->sets, reference->process_set);
    }
    negotiator_add_execute(negotiator, &ready);
}

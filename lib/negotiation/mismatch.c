/*
 * mismatch.c — see mismatch.h: how the requests that ranks submitted for one tensor differ,
 * field by field (the fields of negotiated_fields.c that their collective compares), with the
 * ranks that sent each value.
 */
#include "mismatch.h"

#include "negotiated_fields.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* If the submitted requests disagree on the field, returns the message
 *   <field> mismatch: ranks 0,2 <value>, rank 1 <value>
 * (malloc'd); NULL when they agree. */
static char *field_mismatch(const struct wire_request *requests, int nranks,
                            const struct negotiated_field *field)
{
    char (*values)[256] = calloc((size_t)nranks, sizeof *values);
    int *ranks = calloc((size_t)nranks, sizeof *ranks);
    bool *listed = calloc((size_t)nranks, sizeof *listed);
    char *message = NULL;
    if (values == NULL || ranks == NULL || listed == NULL)
        goto out;
    int first = -1;
    bool differs = false;
    for (int r = 0; r < nranks; r++) {
        if (requests[r].name == NULL) {
            listed[r] = true;
            continue;
        }
        field->format(&requests[r], values[r], sizeof values[r]);
        if (first < 0)
            first = r;
        else if (strcmp(values[r], values[first]) != 0)
            differs = true;
    }
    if (!differs)
        goto out;
    message = text_format("%s mismatch: ", field->name);
    bool any = false;
    for (int r = 0; r < nranks; r++) {
        if (listed[r])
            continue;
        size_t count = 0;
        for (int s = r; s < nranks; s++) {
            if (!listed[s] && strcmp(values[s], values[r]) == 0) {
                ranks[count++] = s;
                listed[s] = true;
            }
        }
        char *rank_text = text_rank_list(ranks, count);
        text_append(&message, "%s%s %s %s", any ? ", " : "", count > 1 ? "ranks" : "rank",
                      rank_text ? rank_text : "?", values[r]);
        free(rank_text);
        any = true;
    }
out:
    free(values);
    free(ranks);
    free(listed);
    return message;
}

/* mismatch_find with the tensor's label made. */
static char *mismatch_of_fields(const char *label, const struct wire_request *requests,
                                int nranks, const struct wire_request *reference)
{
    for (size_t i = 0; i < negotiated_field_count; i++) {
        const struct negotiated_field *field = &negotiated_fields[i];
        if (!negotiated_field_applies(field, reference->collective))
            continue;
        char *difference = field_mismatch(requests, nranks, field);
        if (difference == NULL)
            continue;
        /* Ranks that disagree on the collective disagree on what the tensor is. */
        char *message =
            field->offset == offsetof(struct wire_request, collective)
                ? text_format("tensor %s: %s", label, difference)
                : text_format("%s %s: %s", request_collective_name(reference), label,
                              difference);
        free(difference);
        return message;
    }
    bool broadcast = reference->collective == CHORUS_BROADCAST;
    if (broadcast && (reference->root < 0 || reference->root >= nranks))
        return text_format("broadcast %s: root %d is not a rank (there are %d ranks)", label,
                           reference->root, nranks);
    if (broadcast && requests[reference->root].name == NULL)
        return text_format("broadcast %s: root rank %d has joined and has no data", label,
                           reference->root);
    return NULL;
}

/* How a message names the tensor: "loss", or "loss" in process set 1 (names are the set's). */
static char *tensor_label(const char *name, const struct wire_request *reference)
{
    int set = request_name_set(reference);
    return set != 0 ? text_format("\"%s\" in process set %d", name, set)
                    : text_format("\"%s\"", name);
}

char *mismatch_find(const char *name, const struct wire_request *requests, int nranks,
                    const struct wire_request *reference)
{
    char *label = tensor_label(name, reference);
    char *message =
        mismatch_of_fields(label != NULL ? label : name, requests, nranks, reference);
    free(label);
    return message;
}

void mismatch_ordered_label(char *label, size_t size, const char *name, uint64_t position,
                            int process_set)
{
    snprintf(label, size, "%s, ordered position %" PRIu64 " of process set %d", name, position,
             process_set);
}

bool mismatch_ordered_agree(const struct ordered_record *records, int members)
{
    for (int m = 0; m < members; m++)
        if (records[m].position != records[0].position ||
            !negotiated_fields_agree(&records[0].desc, &records[m].desc))
            return false;
    return true;
}

char *mismatch_ordered(const char *label, const struct ordered_record *records, int members,
                       const int *ranks, int job_size)
{
    if (mismatch_ordered_agree(records, members))
        return NULL;
    for (int m = 1; m < members; m++)
        if (records[m].position != records[0].position)
            return text_format("%s: ranks %d and %d are at different ordered positions (%" PRIu64
                               " and %" PRIu64 "): an earlier ordered operation failed on one "
                               "of them only",
                               label, ranks[0], ranks[m], records[0].position,
                               records[m].position);
    char *message = NULL;
    struct wire_request *requests = calloc((size_t)job_size, sizeof *requests);
    if (requests != NULL) {
        for (int m = 0; m < members; m++) {
            requests[ranks[m]] = records[m].desc;
            requests[ranks[m]].name = (char *)label;
        }
        message = mismatch_find(label, requests, job_size, &requests[ranks[0]]);
    }
    free(requests);
    /* Out of memory, or values that differ but print alike: still never run them. */
    if (message == NULL)
        message = text_format("%s: the ranks submitted different operations", label);
    return message;
}

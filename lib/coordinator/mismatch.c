/*
 * mismatch.c — see mismatch.h: how the requests that ranks submitted for one tensor differ,
 * field by field, with the ranks that sent each value.
 */
#include "mismatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A value of one field of a request, as text, for comparing and for the message. */
typedef void (*field_formatter)(const struct wire_request *request, char *text, size_t size);

static void format_collective(const struct wire_request *r, char *text, size_t size)
{
    snprintf(text, size, "%s", request_collective_name(r));
}

static void format_process_set(const struct wire_request *r, char *text, size_t size)
{
    if (r->process_set == 0)
        snprintf(text, size, "global");
    else
        snprintf(text, size, "%d", r->process_set);
}

/* A process set's ranks, as an add names them. */
static void format_members(const struct wire_request *r, char *text, size_t size)
{
    char *ranks = format_rank_list(r->members, r->member_count);
    snprintf(text, size, "{%s}", r->member_count == 0 ? "removal" : ranks ? ranks : "?");
    free(ranks);
}

static void format_dtype(const struct wire_request *r, char *text, size_t size)
{
    snprintf(text, size, "%s", chorus_dtype_name(r->dtype));
}

static void format_device(const struct wire_request *r, char *text, size_t size)
{
    snprintf(text, size, "%s", r->device == DEVICE_HOST ? "host" : "gpu");
}

static void format_dims(const struct wire_request *r, size_t first, char *text, size_t size)
{
    size_t used = (size_t)snprintf(text, size, "[");
    for (size_t i = first; i < r->ndims && used < size; i++)
        used += (size_t)snprintf(text + used, size - used, "%s%lld", i > first ? "," : "",
                                 (long long)r->shape[i]);
    if (used < size)
        snprintf(text + used, size - used, "]");
}

static void format_shape(const struct wire_request *r, char *text, size_t size)
{
    format_dims(r, 0, text, size);
}

/* allgather: every dimension but the first, and the number of dimensions. */
static void format_row_shape(const struct wire_request *r, char *text, size_t size)
{
    if (r->ndims == 0) {
        snprintf(text, size, "scalar");
        return;
    }
    char dims[256];
    format_dims(r, 1, dims, sizeof dims);
    snprintf(text, size, "[*%s%s", r->ndims > 1 ? "," : "", dims + 1);
}

static void format_op(const struct wire_request *r, char *text, size_t size)
{
    snprintf(text, size, "%s", chorus_op_name(r->op));
}

static void format_root(const struct wire_request *r, char *text, size_t size)
{
    snprintf(text, size, "%d", r->root);
}

static void format_prescale(const struct wire_request *r, char *text, size_t size)
{
    snprintf(text, size, "%.17g", r->prescale);
}

static void format_postscale(const struct wire_request *r, char *text, size_t size)
{
    snprintf(text, size, "%.17g", r->postscale);
}

static void format_compression(const struct wire_request *r, char *text, size_t size)
{
    snprintf(text, size, "%s", compression_name(r->compression));
}

static void format_group(const struct wire_request *r, char *text, size_t size)
{
    if (r->group_size <= 1)
        snprintf(text, size, "none");
    else
        snprintf(text, size, "\"%s\" of %u", r->group, r->group_size);
}

/* If the submitted requests disagree on the field, returns the message
 *   <field> mismatch: ranks 0,2 <value>, rank 1 <value>
 * (malloc'd); NULL when they agree. */
static char *field_mismatch(const struct wire_request *requests, int nranks, const char *field,
                            field_formatter formatter)
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
        formatter(&requests[r], values[r], sizeof values[r]);
        if (first < 0)
            first = r;
        else if (strcmp(values[r], values[first]) != 0)
            differs = true;
    }
    if (!differs)
        goto out;
    message = format_string("%s mismatch: ", field);
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
        char *rank_text = format_rank_list(ranks, count);
        string_append(&message, "%s%s %s %s", any ? ", " : "", count > 1 ? "ranks" : "rank",
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

char *find_mismatch(const char *name, const struct wire_request *requests, int nranks,
                    const struct wire_request *reference)
{
    struct check {
        const char *field;
        field_formatter formatter;
        bool applies;
    };
    bool allreduce = reference->collective == CHORUS_ALLREDUCE;
    bool reduces = allreduce || reference->collective == CHORUS_REDUCESCATTER;
    /* Collectives whose ranks may have different first dimensions. */
    bool allgather =
        reference->collective == CHORUS_ALLGATHER || reference->collective == CHORUS_ALLTOALL;
    bool broadcast = reference->collective == CHORUS_BROADCAST;
    bool set_change = reference->collective == COLLECTIVE_PROCESS_SET;
    char *collective = field_mismatch(requests, nranks, "collective", format_collective);
    if (collective != NULL) {
        char *message = format_string("tensor \"%s\": %s", name, collective);
        free(collective);
        return message;
    }
    const struct check checks[] = {
        {"process set", format_process_set, !set_change},
        {"ranks", format_members, set_change},
        {"dtype", format_dtype, !set_change},
        {"device", format_device, !set_change},
        {"shape", format_shape, !allgather && !set_change},
        {"shape", format_row_shape, allgather},
        {"op", format_op, reduces},
        {"root", format_root, broadcast},
        {"prescale factor", format_prescale, reduces},
        {"postscale factor", format_postscale, reduces},
        {"compression", format_compression, allreduce},
        {"group", format_group, allreduce},
    };
    for (size_t i = 0; i < ARRAY_LENGTH(checks); i++) {
        if (!checks[i].applies)
            continue;
        char *difference = field_mismatch(requests, nranks, checks[i].field, checks[i].formatter);
        if (difference != NULL) {
            char *message = format_string("%s \"%s\": %s", request_collective_name(reference),
                                          name, difference);
            free(difference);
            return message;
        }
    }
    if (broadcast && (reference->root < 0 || reference->root >= nranks))
        return format_string("broadcast \"%s\": root %d is not a rank (there are %d ranks)",
                             name, reference->root, nranks);
    if (broadcast && requests[reference->root].name == NULL)
        return format_string("broadcast \"%s\": root rank %d has joined and has no data",
                             name, reference->root);
    return NULL;
}

/*
 * transport_subset.c — a transport over some of another transport's ranks: the ranks of one
 * host, one rank per host, a process set. Over UCX there is no MPI_Comm_split, so a group of
 * ranks is this: its rank r is the parent's rank members[r], and its messages travel on the
 * parent with the group's number in the upper half of the tag:
 *
 *     parent tag = group << 16 | tag        group 1 .. 32767, tag 0 .. 65535
 *
 * The parent's own tags are below 65536 (the largest, lib/api's reform tag, is 5252), so its
 * messages, and those of every other group, never match a group's. Parent tags then reach
 * 2^31 - 1: the thread transport takes any int and UCX's 31 bits (transport_ucx.c keeps bit 31
 * for its whole messages). MPI promises only MPI_TAG_UB >= 32767, which no group fits: over MPI
 * a group works only while group << 16 | 65535 is within the library's bound
 * (context->tag_upper_bound), and beyond it MPI_Isend fails with MPI_ERR_TAG instead of
 * matching wrongly; chorus over MPI splits communicators instead. Groups do not nest: a subset
 * of a subset would need more tag bits, so its tags are refused; make the inner group a subset
 * of the outer group's parent, with the members composed.
 *
 * Requests, waits and cancels are the parent's. A transport is used by one thread at a time,
 * so the subset's wait may lend its `interrupted` hook to the parent for the wait's length.
 */
#include "point_to_point.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    SUBSET_TAG_BITS = 16,
    SUBSET_TAG_LIMIT = 1 << SUBSET_TAG_BITS, /* tags are below it */
    SUBSET_GROUP_MAX = 32767,                /* group << 16 stays below 2^31 */
};

struct subset_state {
    struct transport *parent;
    int group;
    chorus_status refused; /* CHORUS_OK, or why init refused the arguments (error says more) */
    int members[];         /* parent rank of each subset rank */
};

static struct subset_state *subset_state(struct transport *subset)
{
    return subset->context;
}

/* After a parent call: its status, and on failure the subset's error rewritten from the
 * parent's. */
static chorus_status subset_result(struct transport *subset, chorus_status status)
{
    if (status == CHORUS_OK)
        return status;
    struct subset_state *state = subset_state(subset);
    struct transport *parent = state->parent;
    int length = snprintf(subset->error, sizeof subset->error,
                          "group %d (its rank %d is rank %d of the whole; ranks below are the "
                          "whole's): ",
                          state->group, subset->rank, parent->rank);
    size_t used = length > 0 && (size_t)length < sizeof subset->error ? (size_t)length : 0;
    snprintf(subset->error + used, sizeof subset->error - used, "%s", parent->error);
    return status;
}

/* Checks a call's peer and tag and maps them to the parent's; CHORUS_OK or the refusal. */
static chorus_status subset_map(struct transport *subset, int peer, int tag,
                                struct transport **parent, int *parent_peer, int *parent_tag)
{
    struct subset_state *state = subset_state(subset);
    if (state == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY; /* init wrote why */
    if (state->refused != CHORUS_OK)
        return state->refused;
    if (peer < 0 || peer >= subset->nranks) {
        snprintf(subset->error, sizeof subset->error,
                 "group %d: rank %d has no rank %d (the group has %d ranks)", state->group,
                 subset->rank, peer, subset->nranks);
        return CHORUS_ERR_INVALID_ARGUMENT;
    }
    if (tag < 0 || tag >= SUBSET_TAG_LIMIT) {
        snprintf(subset->error, sizeof subset->error,
                 "group %d: tag %d is outside 0 .. %d, the tags a group of ranks carries in its "
                 "parent's (is it a group of a group?)",
                 state->group, tag, SUBSET_TAG_LIMIT - 1);
        return CHORUS_ERR_INVALID_ARGUMENT;
    }
    *parent = state->parent;
    *parent_peer = state->members[peer];
    *parent_tag = state->group << SUBSET_TAG_BITS | tag;
    return CHORUS_OK;
}

enum subset_post { SUBSET_SEND, SUBSET_RECEIVE, SUBSET_RECEIVE_UP_TO };

/* Posts a send (from `send_buffer`) or a receive (into `receive_buffer`) on the parent. */
static chorus_status subset_post(struct transport *subset, enum subset_post kind,
                                 const void *send_buffer, void *receive_buffer, size_t bytes,
                                 int peer, int tag, struct transport_request *request)
{
    struct transport *parent;
    int parent_peer, parent_tag;
    chorus_status refused = subset_map(subset, peer, tag, &parent, &parent_peer, &parent_tag);
    if (refused != CHORUS_OK)
        return refused;
    chorus_status status;
    if (kind == SUBSET_SEND)
        status = transport_isend(parent, send_buffer, bytes, parent_peer, parent_tag, request);
    else if (kind == SUBSET_RECEIVE)
        status = transport_irecv(parent, receive_buffer, bytes, parent_peer, parent_tag, request);
    else
        status =
            transport_irecv_up_to(parent, receive_buffer, bytes, parent_peer, parent_tag, request);
    return subset_result(subset, status);
}

static chorus_status subset_isend(struct transport *subset, const void *buffer, size_t bytes,
                                  int peer, int tag, struct transport_request *request)
{
    return subset_post(subset, SUBSET_SEND, buffer, NULL, bytes, peer, tag, request);
}

static chorus_status subset_irecv(struct transport *subset, void *buffer, size_t bytes, int peer,
                                  int tag, struct transport_request *request)
{
    return subset_post(subset, SUBSET_RECEIVE, NULL, buffer, bytes, peer, tag, request);
}

static chorus_status subset_irecv_up_to(struct transport *subset, void *buffer, size_t bytes,
                                        int peer, int tag, struct transport_request *request)
{
    return subset_post(subset, SUBSET_RECEIVE_UP_TO, NULL, buffer, bytes, peer, tag, request);
}

/* The parent waits, asking the subset's hook (which init copied from the parent, and which its
 * owner may have set since). */
static chorus_status subset_waitall(struct transport *subset, size_t count,
                                    struct transport_request *requests)
{
    if (subset->context == NULL)
        return CHORUS_ERR_OUT_OF_MEMORY; /* nothing was started */
    struct transport *parent = subset_state(subset)->parent;
    chorus_status (*parent_interrupted)(void *, char *, size_t) = parent->interrupted;
    void *parent_interrupt_context = parent->interrupt_context;
    parent->interrupted = subset->interrupted;
    parent->interrupt_context = subset->interrupt_context;
    chorus_status status = transport_waitall(parent, count, requests);
    parent->interrupted = parent_interrupted;
    parent->interrupt_context = parent_interrupt_context;
    return subset_result(subset, status);
}

static void subset_cancel(struct transport *subset, size_t count,
                          struct transport_request *requests)
{
    if (subset->context != NULL)
        transport_cancel(subset_state(subset)->parent, count, requests);
}

static const struct transport_ops subset_ops = {
    .isend = subset_isend,
    .irecv = subset_irecv,
    .irecv_up_to = subset_irecv_up_to,
    .waitall = subset_waitall,
    .cancel = subset_cancel,
};

/* Why `members` cannot make a group of `parent` (written to `error`), or CHORUS_OK; *own gets
 * the parent's rank's index among them. */
static chorus_status subset_check(const struct transport *parent, const int *members, int count,
                                  int group, int *own, char *error, size_t error_size)
{
    if (group < 1 || group > SUBSET_GROUP_MAX) {
        snprintf(error, error_size, "group %d: a group's number is 1 .. %d", group,
                 SUBSET_GROUP_MAX);
        return CHORUS_ERR_INVALID_ARGUMENT;
    }
    *own = -1;
    for (int r = 0; r < count; r++) {
        bool repeated = false;
        for (int earlier = 0; earlier < r; earlier++)
            repeated |= members[earlier] == members[r];
        if (members[r] < 0 || members[r] >= parent->nranks || repeated) {
            snprintf(error, error_size, "group %d: member %d is rank %d, %s %d ranks", group, r,
                     members[r],
                     repeated ? "named twice among the whole's" : "not one of the whole's",
                     parent->nranks);
            return CHORUS_ERR_INVALID_ARGUMENT;
        }
        if (members[r] == parent->rank)
            *own = r;
    }
    if (*own < 0) {
        snprintf(error, error_size, "group %d: rank %d of the whole is not among its %d members",
                 group, parent->rank, count);
        return CHORUS_ERR_INVALID_ARGUMENT;
    }
    return CHORUS_OK;
}

void transport_subset_init(struct transport *subset, struct transport *parent, const int *members,
                           int count, int group)
{
    *subset = (struct transport){.ops = &subset_ops,
                                 .rank = -1,
                                 .nranks = count > 0 ? count : 0,
                                 .interrupted = parent->interrupted,
                                 .interrupt_context = parent->interrupt_context};
    struct subset_state *state =
        malloc(sizeof *state + (size_t)subset->nranks * sizeof state->members[0]);
    subset->context = state;
    if (state == NULL) {
        snprintf(subset->error, sizeof subset->error, "group %d: out of memory for %d members",
                 group, count);
        return;
    }
    *state = (struct subset_state){.parent = parent, .group = group};
    int own = -1;
    state->refused = subset_check(parent, members, subset->nranks, group, &own, subset->error,
                                  sizeof subset->error);
    if (state->refused != CHORUS_OK)
        return;
    subset->rank = own;
    memcpy(state->members, members, (size_t)count * sizeof members[0]);
}

void transport_subset_release(struct transport *subset)
{
    free(subset->context);
    subset->context = NULL;
}

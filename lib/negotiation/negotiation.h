/*
 * negotiation.h — the coordinator's bookkeeping on rank 0, free of MPI so that unit tests can
 * feed it requests from fake ranks. It counts, per tensor name, which ranks have submitted it;
 * when every rank has (or has joined), it checks that all submissions agree and appends either
 * an EXECUTE or an ERROR response to the list that every rank then runs in the same order.
 */
#ifndef CHORUS_NEGOTIATION_H
#define CHORUS_NEGOTIATION_H

#include "../core/name_table.h"
#include "../core/process_set.h"
#include "wire.h"

struct negotiation_entry;
struct stall_debt;

struct negotiator {
    int nranks;
    struct name_table entries;         /* name -> struct negotiation_entry */
    struct negotiation_entry *oldest;  /* entries in arrival order, for the stall inspector */
    struct negotiation_entry *newest;
    struct name_table groups;          /* group name -> struct group_state */
    struct name_table memberships;     /* group name -> struct membership */
    bool *joined;
    int joined_count;
    struct process_set_table sets;     /* added and not removed; their tensors wait only for
                                        * their members */
    int last_set_id;
    struct wire_response *responses;   /* produced, not yet taken */
    size_t response_count;
    size_t response_capacity;
    bool failed;                       /* out of memory: the coordinator cannot go on */
    bool refuse_joined_gathers;        /* CHORUS_JOINED_GATHERS=fail */
    double now;                        /* the time of the call being processed */
    struct stall_debt *stall_debts;    /* tensors given up on, owed by the ranks that had not
                                        * submitted them (negotiation_stalls.c) */
    /* Optional: told when a tensor is complete, with when each rank's request arrived (0 for
     * joined ranks). For the timeline. */
    void (*resolved)(void *context, int set, const char *name, const double *arrivals,
                     int nranks);
    void *resolved_context;
};

bool negotiator_init(struct negotiator *negotiator, int nranks);
void negotiator_destroy(struct negotiator *negotiator);

/* Rank `rank` has submitted `request` (copied) at time `now` (seconds). */
void negotiator_submit(struct negotiator *negotiator, int rank, const struct wire_request *request,
                       double now);

/* Rank `rank` has joined: it counts as ready for every tensor. When the last rank joins, a
 * RESPONSE_JOIN_DONE is produced and every rank counts as not joined again. */
void negotiator_join(struct negotiator *negotiator, int rank);

/* Which tensors some ranks submitted and others did not, for longer than `warn_after` seconds.
 * Calls `warn` once per such tensor and per `warn_after` interval (warn_after 0: never). With
 * `fail_after` > 0, tensors stalled longer than that get a CHORUS_ERR_STALLED response, and a
 * rank that submits one of them within `fail_after` seconds after that fails it at once too. */
typedef void (*stall_warning)(void *context, const char *message);
void negotiator_check_stalls(struct negotiator *negotiator, double now, double warn_after,
                             double fail_after, stall_warning warn, void *context);

/* Moves the produced responses to the caller (who frees them with wire_response_free and
 * free()). Returns their number. */
size_t negotiator_take_responses(struct negotiator *negotiator,
                                 struct wire_response **responses);

/* Number of names some but not all ranks have submitted. */
size_t negotiator_pending(const struct negotiator *negotiator);

#endif

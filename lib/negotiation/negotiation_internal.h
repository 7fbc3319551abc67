/*
 * negotiation_internal.h — what the files of rank 0's negotiator share: negotiation.c (entries,
 * their verdicts, joins and stalls), negotiation_groups.c (grouped tensors: holding members
 * until the whole group is ready, and checking that the ranks name the same members) and
 * negotiation_sets.c (process set changes, and the tensors a removed set fails).
 */
#ifndef CHORUS_NEGOTIATION_INTERNAL_H
#define CHORUS_NEGOTIATION_INTERNAL_H

#include "negotiation.h"

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

/* ----- negotiation.c ----- */

void negotiator_entry_free(struct negotiator *negotiator, struct negotiation_entry *entry);
/* Takes the entry out of the table and the arrival order (it is not freed). */
void negotiator_entry_unlink(struct negotiator *negotiator, struct negotiation_entry *entry);
/* A new zeroed response at the end of the list; NULL (and failed set) when out of memory. */
struct wire_response *negotiator_append_response(struct negotiator *negotiator);
/* Appends an error response (taking `message`) and returns it; NULL when out of memory. */
struct wire_response *negotiator_add_error(struct negotiator *negotiator, const struct wire_request *request,
                                chorus_status status, char *message);
/* An error that lists its ranks fails only those (response_applies_to): the ranks with a
 * request in `requests`, or `only_rank` when `requests` is NULL. */
void negotiator_mark_ranks(struct negotiator *negotiator, struct wire_response *response,
                const struct wire_request *requests, int only_rank);
/* The first request submitted for an entry. */
const struct wire_request *negotiator_first_request(const struct negotiator *negotiator,
                                         const struct negotiation_entry *entry);

/* ----- negotiation_groups.c ----- */

void negotiator_membership_free(struct membership *membership, int nranks);
void negotiator_group_free(struct group_state *group);
/* Queues an execute response (taking it); members of a group wait until the whole group is
 * ready. A response of type 0 stands for a member that failed: it counts toward the group's
 * size so that the other members are not held forever, and runs nothing. */
void negotiator_add_execute(struct negotiator *negotiator, struct wire_response *ready);
/* Records that `rank` submitted `request`, a member of a group; once every rank that did not
 * join has submitted the whole group, checks that they named the same members. */
void negotiator_check_membership(struct negotiator *negotiator, int rank, const struct wire_request *request);
/* `rank` has joined: it counts once in the groups it had submitted whole, and groups that
 * waited only for it are compared now. */
void negotiator_settle_memberships_after_join(struct negotiator *negotiator, int rank);

/* ----- negotiation_sets.c ----- */

/* The set whose members a tensor waits for: NULL for every rank (a process set change is the
 * job's) and for a set that no longer exists. */
const struct process_set *negotiator_set_of(const struct negotiator *negotiator, int process_set);
/* Every rank asked for the same change of the process sets: makes it and queues the EXECUTE
 * that has every rank follow. An added set gets the next id; a removed set's pending tensors
 * fail. */
void negotiator_resolve_set_change(struct negotiator *negotiator, struct negotiation_entry *entry,
                        const struct wire_request *reference);

/* ----- negotiation_stalls.c ----- */

/* `rank` submits a tensor the stall inspector gave up on while waiting for it: fails it on that
 * rank at once and returns true; false when the rank owes no such tensor. */
bool negotiator_settle_stall_debt(struct negotiator *negotiator, int rank,
                                  const struct wire_request *request);
void negotiator_free_stall_debts(struct negotiator *negotiator);

#endif

/*
 * process_set.h — the process sets of a chorus instance: groups of ranks that run collectives
 * among themselves, each known by the id rank 0 gave it when it was added (0 is every rank).
 * The table is the same on every rank: every rank adds and removes sets at the same point of
 * the order of responses. The background thread changes it; the user threads read it, under the
 * context's lock, to check a submit against its set.
 */
#ifndef CHORUS_PROCESS_SET_H
#define CHORUS_PROCESS_SET_H

#include "common.h"

struct lane;

struct process_set {
    int id;
    int size;
    int *ranks; /* ascending; a member's index here is its rank within the set */
    /* Where this rank is a member and every member shares its host: the set's lane (lib/lane),
     * which the background thread sets after adding the set and withdraws before removing it;
     * a user thread enters it under the context's lock. Else NULL. */
    struct lane *lane;
};

struct process_set_table {
    struct process_set *sets;
    size_t count;
    size_t capacity;
};

/* The set `id` (not the global one, which the table does not hold), or NULL. */
const struct process_set *process_set_find(const struct process_set_table *table, int id);
/* `rank`'s rank within `set`, or -1 when it is not a member. */
int process_set_rank_of(const struct process_set *set, int rank);
/* Copies `ranks` (ascending, as process_set_check_ranks demands). False when out of memory. */
bool process_set_table_add(struct process_set_table *table, int id, const int *ranks, int size);
/* Sets the lane of set `id` (NULL: withdraws it); nothing when there is no such set. */
void process_set_table_set_lane(struct process_set_table *table, int id, struct lane *lane);
void process_set_table_remove(struct process_set_table *table, int id);
void process_set_table_destroy(struct process_set_table *table);

/* Why `ranks` cannot make a set of a job of `nranks` ranks (empty, out of range, not
 * ascending, repeated), in `error`; true when they can. */
bool process_set_check_ranks(const int *ranks, int count, int nranks, char *error,
                             size_t error_size);

/* "process set 2 (ranks 0,2-3)", malloc'd; NULL when out of memory. */
char *process_set_describe(const struct process_set *set);

#endif

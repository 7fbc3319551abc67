/*
 * mismatch.h — the message rank 0 sends when the ranks' requests for a tensor disagree: the
 * collective, the tensor, the first field that differs, and which ranks sent which value:
 *   allreduce "fc1.weight": dtype mismatch: ranks 0,2 float32, rank 1 float16
 * Free of MPI, like the negotiator that uses it.
 */
#ifndef CHORUS_MISMATCH_H
#define CHORUS_MISMATCH_H

#include "wire.h"

/* The first disagreement among `requests` (one per rank; a rank whose request has a NULL name
 * has not submitted) for the tensor `name`, judged by the fields `reference`'s collective
 * compares, as a malloc'd message; NULL when they agree. */
char *mismatch_find(const char *name, const struct wire_request *requests, int nranks,
                    const struct wire_request *reference);

/* What one member of an ordered operation submitted at a position of its set's order. */
struct ordered_record {
    uint64_t position;
    struct wire_request desc;
};

/* How messages name an ordered operation: "NAME, ordered position P of process set S". */
void mismatch_ordered_label(char *label, size_t size, const char *name, uint64_t position,
                            int process_set);

/* Whether the `members` records of an ordered operation agree: the same position, and the
 * fields their collective compares. */
bool mismatch_ordered_agree(const struct ordered_record *records, int members);

/* Where the `members` records of an ordered operation disagree (member m is job rank
 * `ranks[m]` of `job_size`): a malloc'd message naming `label` (the operation and its
 * position), the field and the job's ranks, as mismatch_find's; NULL when they agree. Agreement
 * is decided from the values; only a disagreement is described. When they disagree it is NULL
 * only where not even a short message could be allocated. */
char *mismatch_ordered(const char *label, const struct ordered_record *records, int members,
                       const int *ranks, int job_size);

#endif

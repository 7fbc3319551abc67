/*
 * ordered.h — operations submitted with CHORUS_OP_ORDERED: not negotiated, but run as the
 * background thread takes them, the N-th of a process set with the N-th on every member. Before
 * the data moves, the members exchange a short record of what each submitted (one small
 * allgather through the set's executor); where the records differ, every member completes the
 * operation with CHORUS_ERR_MISMATCH and the same message, naming the position, the field and
 * the ranks, as rank 0 does for negotiated tensors. Below the loop, above the runner.
 */
#ifndef CHORUS_ORDERED_H
#define CHORUS_ORDERED_H

#include "report.h"
#include "runner.h"

struct ordered {
    struct runner *runner;
    struct pending *pending;
    uint64_t *positions; /* ordered operations run so far, by process set id */
    size_t position_capacity;
    size_t run_count;    /* ordered operations run (the loop yields after them) */
    bool running;        /* inside an ordered operation's collective */
};

void ordered_init(struct ordered *ordered, struct runner *runner, struct pending *pending);
void ordered_release(struct ordered *ordered);

/* Runs `request` (an ordered request, taken off the pending queue) now: the check, then the
 * collective. A mismatch completes it with CHORUS_ERR_MISMATCH; a failure that leaves the ranks
 * out of step (MPI, memory, the timeout) is reported to the loop as fatal, the request kept
 * for the loop to fail with the rest. */
void ordered_run(struct ordered *ordered, struct request *request, struct coord_report *report);

#endif

/*
 * fold.h — shrinking any number of ranks to a power of two, for the algorithms that pair ranks
 * by XOR (recursive doubling, Rabenseifner). With p = 2^k + rem, the first 2*rem ranks pair up:
 * each even one sends its buffer to the odd one above it, which reduces it and takes part in
 * the power-of-two algorithm; afterwards the odd rank sends the result back down.
 */
#ifndef CHORUS_FOLD_H
#define CHORUS_FOLD_H

#include "algorithms.h"

struct fold {
    int power_of_two; /* ranks that take part after the fold */
    int remainder;    /* p - power_of_two */
    int virtual_rank; /* this rank's index among the participants, or -1 if it sits out */
};

void fold_plan(int rank, int nranks, struct fold *fold);
/* The real rank of participant `virtual_rank`. */
int fold_real_rank(const struct fold *fold, int virtual_rank);
/* Plans the fold, reserves one buffer of scratch (*incoming) and folds in: the common start
 * of the algorithms that pair ranks by XOR. */
chorus_status fold_begin(const struct allreduce_args *args, struct fold *fold, void **incoming);
/* Sends or receives-and-reduces the folded ranks' buffers (`tmp` holds one buffer). */
chorus_status fold_in(const struct allreduce_args *args, const struct fold *fold, void *tmp);
/* Returns the result to the ranks that sat out. */
chorus_status fold_out(const struct allreduce_args *args, const struct fold *fold);

#endif

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

#endif

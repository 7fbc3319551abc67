/*
 * scratch.h — reusable scratch memory, for the algorithms, the shared segment and the executor.
 */
#ifndef CHORUS_SCRATCH_H
#define CHORUS_SCRATCH_H

#include "common.h"

/* Reusable scratch memory: allocated on first use, grown when too small, touched once, and
 * kept, because fresh pages cost a fault each on every call. */
struct scratch {
    void *memory;
    size_t capacity;
};

/* Returns at least `bytes` of scratch (NULL when out of memory). */
void *scratch_reserve(struct scratch *scratch, size_t bytes);
void scratch_release(struct scratch *scratch);

#endif
